// NCCL communicators for buffers in a CUDA backend's memory. Built only with
// FLEXSP_HAVE_NCCL; this header names no CUDA or NCCL type, so lib/comm can include it.
#pragma once

#include <array>
#include <memory>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"

namespace flexsp {

// The groups of `host` over NCCL, one set per CommPurpose, each with its own stream and
// communicators: the first world from a unique id that rank 0 broadcasts over host.world,
// the other purposes' worlds split from it, every other group split from its purpose's
// world once (ncclCommSplit, the colors of groups_create). be must be the CUDA backend on
// the grid's device, and outlive the sets. Collective over the grid.
std::array<std::unique_ptr<CommSet>, kCommPurposes> nccl_comm_sets(const CommSet& host,
                                                                   const Grid& g, Backend& be);

// The NCCL library's version code (e.g. 22809 for 2.28.9).
int nccl_version();

}  // namespace flexsp
