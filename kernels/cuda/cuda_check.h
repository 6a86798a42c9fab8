// Error checking for CUDA runtime calls: a failed call becomes flexsp::Error naming the
// file and line. Include only from CUDA-enabled translation units.
#pragma once

#include <cuda_runtime.h>

#include "lib/util/error.h"

#define FLEXSP_CUDA_CHECK(call)                                                       \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess)                                                          \
      ::flexsp::fail(::fmt::format("CUDA error {} at {}:{}: {}", int(err_), __FILE__, \
                                   __LINE__, cudaGetErrorString(err_)));              \
  } while (0)
