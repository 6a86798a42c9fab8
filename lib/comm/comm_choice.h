// Which communicators carry buffers in backend memory (parallel.comm): a pure choice,
// made once per run from the key, the backend and what this build and machine offer.
//
//   parallel.comm  cpu backend                  cuda backend
//   auto           the host set (MPI)           NCCL where built and every rank has a GPU
//                                               of its own, else MPI staged
//   mpi            the host set                 MPI staged through page-locked host memory
//   nccl           error                        NCCL (error: not built, or a GPU shared)
//   mpi-staged     MPI staged (tests the path)  MPI staged
//
// Debian's Open MPI is not CUDA-aware, so MPI never sees a device pointer: the staged set
// copies through host buffers. NCCL refuses two ranks of one communicator on one GPU, so
// `auto` falls back to staged MPI when any GPU is shared (several ranks on one GPU is how
// a one-GPU machine tests multi-rank training). The sets themselves are built by
// lib/platform/backend_comms.h.
#pragma once

#include <string>

#include "lib/util/enum_names.h"

namespace flexsp {

// parallel.comm: what the user asks for.
enum class CommMode { automatic, mpi, nccl, mpi_staged };
template <>
struct EnumNames<CommMode> {
  static constexpr std::array all{std::pair{CommMode::automatic, "auto"}, std::pair{CommMode::mpi, "mpi"},
                                  std::pair{CommMode::nccl, "nccl"},
                                  std::pair{CommMode::mpi_staged, "mpi-staged"}};
};

// What runs: the host set itself, MPI staged through host memory, or NCCL.
enum class CommChoice { host, staged, nccl };
template <>
struct EnumNames<CommChoice> {
  static constexpr std::array all{std::pair{CommChoice::host, "mpi"},
                                  std::pair{CommChoice::staged, "mpi-staged"},
                                  std::pair{CommChoice::nccl, "nccl"}};
};
inline const char* comm_choice_name(CommChoice c) { return enum_name(c); }

// The choice for parallel.comm = mode on a backend of that name (Backend::name()). Throws
// Error naming parallel.comm when the mode cannot be met.
CommChoice choose_comm(CommMode mode, const std::string& backend, bool nccl_built,
                       bool gpu_per_rank);

// Whether this build has the NCCL communicator.
bool nccl_built();

}  // namespace flexsp
