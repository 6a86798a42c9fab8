// The pipeline's price and memory factors (pipeline.h).
#include "lib/planner/cost/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "lib/model/cut_costs.h"
#include "lib/plan/pipeline_schedule.h"
#include "lib/plan/seq_chunk_cuts.h"
#include "lib/util/error.h"

namespace flexsp {

void pp_check(const PipelineLayout& p, int layers) {
  FLEXSP_CHECK(p.pp >= 1, "parallel.pp_size: must be >= 1, got {}", p.pp);
  FLEXSP_CHECK(p.pp <= layers, "parallel.pp_size: {} stages for {} layers (a stage needs one)", p.pp, layers);
  FLEXSP_CHECK(p.seq_chunks >= 1, "parallel.seq_chunks: must be >= 1, got {}", p.seq_chunks);
  FLEXSP_CHECK(p.stage_layers >= 0 && p.stage_layers <= layers,
               "parallel.pp_layers: a stage of {} layers in a model of {}", p.stage_layers, layers);
}

int pp_stage_layers(const PipelineLayout& p, int layers) {
  if (p.stage_layers > 0) return p.stage_layers;
  const int pp = std::max(1, p.pp);
  return (layers + pp - 1) / pp;
}

namespace {
int chunks_of(const PipelineLayout& p) { return p.schedule == PpSchedule::seq1f1b ? std::max(1, p.seq_chunks) : 1; }
}  // namespace

int pp_slots(const PipelineLayout& p) {
  if (p.pp <= 1) return 1;
  return pipeline_in_flight(p.pp, 0, p.pp, chunks_of(p));  // pp micro-batches fill the warm-up
}

double pp_chunk_share(const PipelineLayout& p, const ModelConfig& m, int64_t longest) {
  const int k = chunks_of(p);
  if (p.pp <= 1 || k == 1) return 1;
  if (longest <= 0) return 1 / std::sqrt(static_cast<double>(k));
  double lin = 0, att = 0;
  seq_chunk_costs(m, &lin, &att);
  return static_cast<double>(seq_chunk_bounds(longest, k, lin, att)[1]) / static_cast<double>(longest);
}

double pp_in_flight(const PipelineLayout& p, double share) {
  if (p.pp <= 1) return 1;
  return pp_slots(p) * share;
}

double pp_units(const PipelineLayout& p, int micro_batches) {
  const int k = p.schedule == PpSchedule::seq1f1b ? std::max(1, p.seq_chunks) : 1;
  return static_cast<double>(std::max(1, micro_batches)) * k;
}

double pp_bubble_factor(const PipelineLayout& p, int micro_batches) {
  if (p.pp <= 1) return 1;
  const double u = pp_units(p, micro_batches);
  return (u + p.pp - 1) / u;
}

void pp_stage_shares(const PipelineLayout& p, const std::vector<int>& given, const ModelConfig& m,
                     std::vector<double>* attn, std::vector<double>* rest) {
  const int P = std::max(1, p.pp);
  double first = 0, last = 0;
  pipeline_edge_costs(m, &first, &last);
  const std::vector<int> split = P == 1 ? std::vector<int>{m.layers} : pipeline_layers(m.layers, P, given, first, last);
  attn->assign(static_cast<size_t>(P), 0);
  rest->assign(static_cast<size_t>(P), 0);
  const double whole = m.layers + first + last;
  for (int s = 0; s < P; ++s) {
    const double l = split[static_cast<size_t>(s)];
    (*attn)[static_cast<size_t>(s)] = l / m.layers;
    (*rest)[static_cast<size_t>(s)] = (l + (s == 0 ? first : 0) + (s == P - 1 ? last : 0)) / whole;
  }
}

double pp_forward_share(const ModelConfig& m) { return m.checkpoint_activations ? 0.25 : 1.0 / 3; }

double pp_simulate_ms(int stages, int micro_batches, int chunks, const std::vector<double>& forward_ms,
                      const std::vector<double>& backward_ms, const std::vector<double>& send_ms) {
  const int P = stages, U = micro_batches * chunks;
  FLEXSP_ASSERT(P >= 1 && U >= 0 && forward_ms.size() == static_cast<size_t>(P) * U &&
                backward_ms.size() == forward_ms.size() && send_ms.size() == static_cast<size_t>(U));
  std::vector<std::vector<PipeStep>> order(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) order[static_cast<size_t>(s)] = pipeline_schedule(P, s, micro_batches, chunks);
  // The finish of each op (-1: not run yet), each stage's clock and its next op.
  std::vector<double> fend(forward_ms.size(), -1), bend(forward_ms.size(), -1), clock(static_cast<size_t>(P), 0);
  std::vector<size_t> next(static_cast<size_t>(P), 0);
  auto at = [U](int s, int u) { return static_cast<size_t>(s) * U + u; };
  for (size_t left = 2 * static_cast<size_t>(P) * U; left > 0;) {
    size_t ran = 0;
    for (int s = 0; s < P; ++s) {  // each stage as far as its inputs have arrived
      const std::vector<PipeStep>& o = order[static_cast<size_t>(s)];
      size_t& k = next[static_cast<size_t>(s)];
      for (; k < o.size(); ++k, ++ran) {
        const int u = o[k].unit;
        double ready = 0;
        if (o[k].forward && s > 0) {
          if (fend[at(s - 1, u)] < 0) break;
          ready = fend[at(s - 1, u)] + send_ms[static_cast<size_t>(u)];
        } else if (!o[k].forward && s < P - 1) {
          if (bend[at(s + 1, u)] < 0) break;
          ready = bend[at(s + 1, u)] + send_ms[static_cast<size_t>(u)];
        }
        double& c = clock[static_cast<size_t>(s)];
        c = std::max(c, ready) + (o[k].forward ? forward_ms : backward_ms)[at(s, u)];
        (o[k].forward ? fend : bend)[at(s, u)] = c;
      }
    }
    FLEXSP_ASSERT(ran > 0);  // the schedules never wait on each other in a cycle
    left -= ran;
  }
  return *std::max_element(clock.begin(), clock.end());
}

int64_t pp_slot_tokens(int stages, int stage, int micro_batches, int chunks,
                       const std::vector<int64_t>& unit_tokens, int64_t first_cap, int64_t max_cap,
                       std::vector<int64_t>* caps) {
  FLEXSP_ASSERT(unit_tokens.size() == static_cast<size_t>(micro_batches) * chunks);
  const int held = std::max(1, pipeline_in_flight(stages, stage, micro_batches, chunks));
  while (static_cast<int>(caps->size()) < held) caps->push_back(std::min(first_cap, max_cap));
  std::vector<int> free_slots, slot_of(unit_tokens.size(), -1);
  for (int i = held - 1; i >= 0; --i) free_slots.push_back(i);
  for (const PipeStep& st : pipeline_schedule(stages, stage, micro_batches, chunks)) {
    int& si = slot_of[static_cast<size_t>(st.unit)];
    if (!st.forward) {
      if (si >= 0) free_slots.push_back(si);
      continue;
    }
    const int64_t t = unit_tokens[static_cast<size_t>(st.unit)];
    if (t <= 0) continue;  // empty here: the runtime takes no slot
    FLEXSP_ASSERT(!free_slots.empty());
    si = free_slots.back();
    free_slots.pop_back();
    int64_t& cap = (*caps)[static_cast<size_t>(si)];
    if (t > cap) cap = std::min(max_cap, std::max(t, cap + cap / 4));
  }
  int64_t sum = 0;
  for (int64_t c : *caps) sum += c;
  return sum;
}

std::string pp_describe(const PipelineLayout& p) {
  if (p.pp <= 1) return "";
  if (p.schedule == PpSchedule::seq1f1b) return fmt::format("pp {} seq1f1b x{}", p.pp, p.seq_chunks);
  return fmt::format("pp {} 1f1b", p.pp);
}

}  // namespace flexsp
