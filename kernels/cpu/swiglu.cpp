// SwiGLU activation of the LLaMA MLP: out = silu(gate) * up, silu(g) = g * sigmoid(g).
// Element-wise; the backward recomputes sigmoid from the saved gate instead of saving it.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace flexsp::cpu {

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i];
    out[i] = g / (T(1) + std::exp(-g)) * up[i];
  }
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i], u = up[i], d = dout[i];
    const T s = T(1) / (T(1) + std::exp(-g));
    dup[i] = d * g * s;
    dgate[i] = d * u * s * (T(1) + g * (T(1) - s));
  }
}

template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*,
                                     int64_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*,
                                      const double*, int64_t);

}  // namespace flexsp::cpu
