// Activation element access for the CUDA kernels (bf16 mixed precision). Include
// only from .cu files: it brings in cuda_bf16.h, which cuda_kernels.h stays free of.
//
// Every model-op kernel is a template over the activation element type T (float or
// __nv_bfloat16) and touches activations only through load() and store(): loads widen to
// float, all arithmetic is fp32 (statistics in double where the CPU twin uses double), and
// each output element is rounded once on store (__float2bfloat16_rn: nearest, ties to
// even, the rounding of lib/util/dtype.h's float_to_bf16). That is exactly the CPU
// backend's bf16 emulation (widen, run the fp32 reference, round), so the two agree to a
// rounding of the last bf16 bit. For T = float, load and store are plain accesses and the
// kernels are the fp32 kernels they were before.
//
// The launchers in cuda_kernels.h take void pointers and a DType; dispatch_act() turns the
// DType into the template argument with a generic lambda, once per launcher.
#pragma once

#include <cuda_bf16.h>

#include "lib/util/dtype.h"
#include "lib/util/error.h"

namespace flexsp::cuda {

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// A type carried as a value into a generic lambda.
template <class T>
struct ActTag {
  using type = T;
};

// Calls f(ActTag<float>{}) or f(ActTag<__nv_bfloat16>{}) for act = f32 or bf16; any other
// type is an error naming `op`. In f: `using T = typename decltype(tag)::type;`.
template <class F>
void dispatch_act(DType act, const char* op, F&& f) {
  switch (act) {
    case DType::f32:
      f(ActTag<float>{});
      return;
    case DType::bf16:
      f(ActTag<__nv_bfloat16>{});
      return;
    default:
      fail(fmt::format("{}: activation type {} is not f32 or bf16", op, dtype_name(act)));
  }
}

}  // namespace flexsp::cuda
