// NCCL communicators for buffers in a CUDA backend's memory. Built only with
// FLEXSP_HAVE_NCCL; this header names no CUDA or NCCL type, so lib/comm can include it.
#pragma once

#include <memory>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"

namespace flexsp {

// The groups of `host` over NCCL: the world from a unique id that rank 0 broadcasts over
// host.world, every other group split from it once (ncclCommSplit, the colors of
// groups_create). be must be the CUDA backend on the grid's device, and outlive the set.
// Collective over the grid.
std::unique_ptr<CommSet> nccl_comm_set(const CommSet& host, const Grid& g, Backend& be);

// The NCCL library's version code (e.g. 22809 for 2.28.9).
int nccl_version();

}  // namespace flexsp
