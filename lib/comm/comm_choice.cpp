#include "lib/comm/comm_choice.h"

#include "lib/util/error.h"

namespace flexsp {

CommChoice choose_comm(CommMode mode, const std::string& backend, bool nccl_built,
                       bool gpu_per_rank) {
  const bool cpu = backend == "cpu";
  switch (mode) {
    case CommMode::mpi_staged: return CommChoice::staged;
    case CommMode::mpi: return cpu ? CommChoice::host : CommChoice::staged;
    case CommMode::automatic:
      if (cpu) return CommChoice::host;
      return nccl_built && gpu_per_rank ? CommChoice::nccl : CommChoice::staged;
    case CommMode::nccl: break;
  }
  FLEXSP_CHECK(!cpu,
               "parallel.comm: 'nccl' needs train.backend = cuda (the {} backend's buffers are "
               "host memory; use mpi or auto)", backend);
  FLEXSP_CHECK(nccl_built,
               "parallel.comm: 'nccl' is not available in this build (NCCL was not found when "
               "flexsp was built); use mpi or auto");
  FLEXSP_CHECK(gpu_per_rank,
               "parallel.comm: 'nccl' needs a GPU of its own on every rank (NCCL refuses two "
               "ranks of one communicator on one GPU); use mpi or auto, which stage through host "
               "memory");
  return CommChoice::nccl;
}

bool nccl_built() {
#ifdef FLEXSP_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

}  // namespace flexsp
