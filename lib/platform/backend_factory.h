// Building the compute backend a run asks for (train.backend, train.precision and the CUDA
// numerics keys: lib/backend/backend_options.h): the CPU backend (lib/backend) or, where
// built and a device is visible, the CUDA backend (kernels/cuda). This is the one place
// that knows both, so that neither knows the other.
#pragma once

#include <memory>

#include "lib/backend/backend.h"

namespace flexsp {

// The backend o names. Throws Error naming train.backend / train.cuda_attention for an
// unavailable choice. tf32, cuda_attention and cuda_gemm do not change the CPU backend.
std::unique_ptr<Backend> make_backend(const BackendOptions& o);

}  // namespace flexsp
