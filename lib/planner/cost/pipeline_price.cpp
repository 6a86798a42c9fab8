// The step of a plan as the pipeline runs it (plan_costs.h: plan_pipeline_ms; pipeline.h).
//
// Each unit is priced per stage from the sequences' segments it holds, with seq_ms's terms
// split in two: the attention part (a1 over the segment's queries against its prefix, the
// Ulysses all-to-all and the ring, all per layer: the stage's layers' share) and the rest
// (a2, per_sequence, fixed: the stage's share of the whole model's work, head included).
// A unit's time on a stage is fixed + the slowest group; forward takes forward_share of it.
// A segment [lo, hi) of a sequence on a group of d devices costs
//   a1 (hi^2 - lo^2) / d + comm n + a2 n / d + per_sequence   (n = hi - lo > 0)
// so a whole sequence (lo = 0, hi = s) costs seq_ms(s, d), and the chunks of a sequence
// add up to it plus the per-sequence cost of each extra segment; a ring's steps carry the
// prefix's keys (hi tokens). Boundary sends: half of pp_ms_per_token (activations forward,
// gradients back) per token of the unit.
#include <algorithm>
#include <vector>

#include "lib/plan/seq_chunk_cuts.h"
#include "lib/planner/cost/pipeline.h"
#include "lib/planner/cost/plan_costs.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

// A group's part of one unit: the attention part and the rest, summed over its segments.
struct GroupCost {
  double attn = 0, rest = 0;
};

void add_segment(const PlanCosts& c, int d, int64_t lo, int64_t hi, GroupCost* g) {
  const double n = static_cast<double>(hi - lo);
  if (n <= 0) return;
  const unsigned k = __builtin_ctz(unsigned(d));
  const double x1 = static_cast<double>(lo), x2 = static_cast<double>(hi);
  double attn = c.a1 * (x2 * x2 - x1 * x1) / d;
  const int r = k < c.ring_r.size() ? c.ring_r[k] : 1;
  if (r > 1) {
    const double step = attn / r;
    attn = step + (r - 1) * std::max(step, c.ring_ms_per_token[k] * x2);
  }
  g->attn += attn + c.comm_ms_per_token[k] * n;
  g->rest += c.a2 * n / d + c.per_sequence_ms;
}

}  // namespace

double plan_pipeline_ms(const PlanCosts& c, const std::vector<const std::vector<PlanGroup>*>& mbs,
                        const std::vector<int64_t>& len) {
  const int P = c.pipeline.pp, M = static_cast<int>(mbs.size());
  if (P <= 1) {
    double t = 0;
    for (const std::vector<PlanGroup>* g : mbs) t += c.fixed_ms + mb_makespan(c, len, *g);
    return t;
  }
  FLEXSP_ASSERT(c.stage_attn.size() == static_cast<size_t>(P) && c.stage_rest.size() == c.stage_attn.size());
  const int C = c.pipeline.schedule == PpSchedule::seq1f1b ? std::max(1, c.pipeline.seq_chunks) : 1;
  const size_t U = static_cast<size_t>(M) * C;
  std::vector<double> fwd(U * P), bwd(U * P), send(U);
  std::vector<GroupCost> parts;       // [chunk x groups + group] of one micro-batch
  std::vector<int64_t> tokens(C);     // of each chunk of one micro-batch
  for (int m = 0; m < M; ++m) {
    const std::vector<PlanGroup>& groups = *mbs[static_cast<size_t>(m)];
    const size_t G = groups.size();
    parts.assign(G * C, GroupCost{});
    std::fill(tokens.begin(), tokens.end(), 0);
    for (size_t g = 0; g < G; ++g)
      for (int32_t q : groups[g].seqs) {
        const int64_t n = len[static_cast<size_t>(q)];
        if (C == 1) {
          add_segment(c, groups[g].size, 0, n, &parts[g]);
          tokens[0] += n;
          continue;
        }
        const std::vector<int64_t> b = seq_chunk_bounds(n, C, c.chunk_lin, c.chunk_att);
        for (int j = 0; j < C; ++j) {
          add_segment(c, groups[g].size, b[j], b[j + 1], &parts[j * G + g]);
          tokens[static_cast<size_t>(j)] += b[j + 1] - b[j];
        }
      }
    for (int j = 0; j < C; ++j) {
      const size_t u = static_cast<size_t>(m) * C + j;
      send[u] = 0.5 * c.pp_ms_per_token * static_cast<double>(tokens[static_cast<size_t>(j)]);
      for (int s = 0; s < P; ++s) {
        double t = 0;  // an empty chunk is skipped by every stage: no fixed cost either
        if (tokens[static_cast<size_t>(j)] > 0) {
          const double sa = c.stage_attn[static_cast<size_t>(s)], sr = c.stage_rest[static_cast<size_t>(s)];
          for (size_t g = 0; g < G; ++g) t = std::max(t, parts[j * G + g].attn * sa + parts[j * G + g].rest * sr);
          t += c.fixed_ms * sr;
        }
        fwd[static_cast<size_t>(s) * U + u] = c.forward_share * t;
        bwd[static_cast<size_t>(s) * U + u] = (1 - c.forward_share) * t;
      }
    }
  }
  return pp_simulate_ms(P, M, C, fwd, bwd, send);
}

std::vector<int64_t> plan_unit_tokens(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& len,
                                      int tp) {
  const int C = c.pipeline.schedule == PpSchedule::seq1f1b ? std::max(1, c.pipeline.seq_chunks) : 1;
  std::vector<int64_t> out(p.micro_batches.size() * C, 0), group(static_cast<size_t>(C));
  for (size_t m = 0; m < p.micro_batches.size(); ++m)
    for (const PlanGroup& g : p.micro_batches[m].groups) {
      std::fill(group.begin(), group.end(), 0);
      for (int32_t q : g.seqs) {
        const int64_t n = len[static_cast<size_t>(q)];
        if (C == 1) {
          group[0] += n;
          continue;
        }
        const std::vector<int64_t> b = seq_chunk_bounds(n, C, c.chunk_lin, c.chunk_att);
        for (int j = 0; j < C; ++j) group[static_cast<size_t>(j)] += b[j + 1] - b[j];
      }
      const int64_t pad = static_cast<int64_t>(g.size) * tp;
      for (int j = 0; j < C; ++j) {
        int64_t t = group[static_cast<size_t>(j)];
        if (pad > 1) t = (t + pad - 1) / pad * pad;
        int64_t& u = out[m * C + j];
        u = std::max(u, t / g.size);
      }
    }
  return out;
}

}  // namespace flexsp
