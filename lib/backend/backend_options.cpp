#include "lib/backend/backend_options.h"

#include <cstdlib>
#include <string>

#include "lib/util/error.h"

namespace flexsp {

BackendOptions with_env_overrides(BackendOptions o) {
  if (const char* v = std::getenv("FLEXSP_CUDA_TF32")) {
    const std::string t = v;
    FLEXSP_CHECK(t == "0" || t == "1" || t == "false" || t == "true",
                 "FLEXSP_CUDA_TF32: '{}' is not 0, 1, false or true", t);
    o.tf32 = t == "1" || t == "true";
  }
  if (const char* v = std::getenv("FLEXSP_CUDA_ATTENTION")) {
    const auto a = enum_parse<CudaAttention>(v);
    FLEXSP_CHECK(a, "FLEXSP_CUDA_ATTENTION: '{}' is not auto, cudnn, tc or simple", v);
    o.cuda_attention = *a;
  }
  if (const char* v = std::getenv("FLEXSP_CUDA_GEMM")) {
    const auto g = enum_parse<CudaGemm>(v);
    FLEXSP_CHECK(g, "FLEXSP_CUDA_GEMM: '{}' is not auto, cublas or lt", v);
    o.cuda_gemm = *g;
  }
  return o;
}

}  // namespace flexsp
