#include "lib/platform/backend_factory.h"

#include "lib/util/error.h"

#ifdef FLEXSP_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#endif

namespace flexsp {

namespace {
DType precision_dtype(Precision p, bool gpu) {
  switch (p) {
    case Precision::fp32: return DType::f32;
    case Precision::bf16: return DType::bf16;
    case Precision::automatic: break;
  }
  return gpu ? DType::bf16 : DType::f32;
}
}  // namespace

std::unique_ptr<Backend> make_backend(const BackendOptions& o) {
  if (o.kind == BackendKind::cpu) return make_cpu_backend(precision_dtype(o.precision, false));
#ifdef FLEXSP_HAVE_CUDA
  const bool gpu = cuda_device_count() > 0;
  auto cuda = [&] {
    return make_cuda_backend(precision_dtype(o.precision, true), o.tf32, o.cuda_attention,
                             o.cuda_gemm == CudaGemm::lt);
  };
  if (o.kind == BackendKind::automatic)
    return gpu ? cuda() : make_cpu_backend(precision_dtype(o.precision, false));
  if (gpu) return cuda();
  fail("train.backend: 'cuda' needs a CUDA device, and none is visible (no GPU or driver); "
       "use 'cpu' or 'auto'");
#else
  if (o.kind == BackendKind::automatic) return make_cpu_backend(precision_dtype(o.precision, false));
  fail("train.backend: 'cuda' is not available in this build (built without CUDA)");
#endif
}

}  // namespace flexsp
