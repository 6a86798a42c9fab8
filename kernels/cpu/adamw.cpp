// AdamW update over a flat range, the same arithmetic as PyTorch's torch.optim.AdamW
// (decoupled decay applied to the weight before the Adam step, bias corrections computed
// in double once per call). The caller splits the flat buffer into ranges with and
// without weight decay (lib/optim) and folds gradient clipping into grad_scale, so one
// pass over the buffers does the whole optimizer step.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace flexsp::cpu {

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& a) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step));
  const float step_size = static_cast<float>(a.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - a.lr * a.weight_decay;
  const float b1 = a.beta1, b2 = a.beta2, eps = a.eps, gs = a.grad_scale;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

}  // namespace flexsp::cpu
