// Error checking for cuBLAS calls: a failed call becomes flexsp::Error naming the status,
// file and line (the cuBLAS twin of FLEXSP_CUDA_CHECK in cuda_check.h). CUDA builds only.
#pragma once

#include <cublas_v2.h>

#include "lib/util/error.h"

#define FLEXSP_CUBLAS_CHECK(call)                                                        \
  do {                                                                                   \
    cublasStatus_t st_ = (call);                                                         \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::flexsp::fail(::fmt::format("cuBLAS error {} ({}) at {}:{}", int(st_),            \
                                   cublasGetStatusString(st_), __FILE__, __LINE__));     \
  } while (0)
