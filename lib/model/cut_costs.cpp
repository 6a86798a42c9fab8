#include "lib/model/cut_costs.h"

namespace flexsp {

void seq_chunk_costs(const ModelConfig& c, double* lin, double* att) {
  const double H = c.hidden, Q = c.q_dim(), K = c.kv_dim(), F = c.ffn;
  *lin = 2 * (H * (Q + 2 * K) + Q * H + 3 * H * F);
  *att = 4 * Q;
}

void pipeline_edge_costs(const ModelConfig& mc, double* first, double* last) {
  const double H = mc.hidden, layer = H * (mc.q_dim() + 2.0 * mc.kv_dim()) + mc.q_dim() * H + 3.0 * H * mc.ffn;
  *first = 0;
  *last = mc.vocab * H / layer;
}

}  // namespace flexsp
