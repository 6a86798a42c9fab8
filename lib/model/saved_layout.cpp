// The saved-activation layouts (saved_layout.h).
#include "lib/model/saved_layout.h"

#include "lib/util/error.h"

namespace flexsp {

SavedLayout saved_layout(const ModelConfig& lc, int tp, int64_t tokens, int slots,
                         unsigned char* base, size_t es) {
  FLEXSP_ASSERT(tokens > 0 && tp >= 1 && slots >= 1 && slots <= lc.layers);
  // T: the group's tokens (q, k, v, attention and the MLP's columns); R: this rank's rows.
  // With token chunks (tp = 1) a layer's temporaries have Tc rows, its k and v T.
  const int64_t T = tokens, R = (tokens + tp - 1) / tp, H = lc.hidden, Q = lc.q_dim(),
                K = lc.kv_dim(), F = lc.ffn;
  const bool chunks = lc.token_chunk > 0 && lc.token_chunk < T;
  const int64_t Tc = chunks ? lc.token_chunk : T, Rc = chunks ? Tc : R;
  SavedLayout s;
  // n elements of `size` bytes, from the next multiple of 64 elements.
  auto piece = [&](int64_t n, size_t size) {
    unsigned char* r = base ? base + s.bytes : nullptr;
    s.bytes += carve_size(n) * static_cast<int64_t>(size);
    return r;
  };
  auto take = [&](int64_t n) { return static_cast<act_t*>(piece(n, es)); };
  auto take_f = [&](int64_t n) { return reinterpret_cast<float*>(piece(n, sizeof(float))); };
  for (int l = 0; l < slots; ++l) s.resid.push_back(take(R * H));
  for (int l = slots; l < lc.layers; ++l) s.resid.push_back(s.resid[static_cast<size_t>(l % slots)]);
  s.resid.push_back(take(R * H));
  const int act_slots = lc.checkpoint_activations ? 1 : slots;
  for (int i = 0; i < act_slots; ++i) {
    LayerActs a;
    a.ln1 = take(Rc * H); a.q = take(Tc * Q); a.k = take(T * K); a.v = take(T * K);
    a.att = take(Tc * Q); a.xmid = take(Rc * H); a.ln2 = take(Rc * H); a.gate = take(Tc * F);
    a.up = take(Tc * F);
    a.rstd1 = take_f(Rc); a.rstd2 = take_f(Rc);
    s.acts.push_back(a);
  }
  return s;
}

}  // namespace flexsp
