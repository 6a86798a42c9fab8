// Error checking for NCCL calls: a failed call becomes flexsp::Error naming the result,
// NCCL's own last message, the file and the line (the NCCL twin of FLEXSP_CUDA_CHECK in
// cuda_check.h). Builds with NCCL only.
#pragma once

#include <nccl.h>

#include "lib/util/error.h"

#define FLEXSP_NCCL_CHECK(call)                                                            \
  do {                                                                                     \
    ncclResult_t nr_ = (call);                                                             \
    if (nr_ != ncclSuccess)                                                                \
      ::flexsp::fail(::fmt::format("NCCL error {} ({}) at {}:{}: {}", int(nr_),            \
                                   ncclGetErrorString(nr_), __FILE__, __LINE__,            \
                                   ncclGetLastError(nullptr)));                            \
  } while (0)
