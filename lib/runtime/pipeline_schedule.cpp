#include "lib/runtime/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "lib/util/error.h"

namespace flexsp {

namespace {

// Backward order: micro-batches in order, chunks of one in reverse.
int backward_unit(int k, int chunks) {
  return k / chunks * chunks + (chunks - 1 - k % chunks);
}

}  // namespace

std::vector<PipeStep> pipeline_schedule(int stages, int stage, int micro_batches, int chunks) {
  FLEXSP_ASSERT(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 0 && chunks >= 1);
  const int units = micro_batches * chunks;
  const int warmup = std::min(stages - stage - 1 + chunks - 1, units);
  std::vector<PipeStep> s;
  s.reserve(static_cast<size_t>(2 * units));
  int f = 0, b = 0;
  for (; f < warmup; ++f) s.push_back({true, f});
  while (f < units) {
    s.push_back({true, f++});
    s.push_back({false, backward_unit(b++, chunks)});
  }
  while (b < units) s.push_back({false, backward_unit(b++, chunks)});
  return s;
}

int pipeline_in_flight(int stages, int stage, int micro_batches, int chunks) {
  int held = 0, most = 0;
  for (const PipeStep& p : pipeline_schedule(stages, stage, micro_batches, chunks)) {
    held += p.forward ? 1 : -1;
    most = std::max(most, held);
  }
  return most;
}

std::vector<int> pipeline_layers(int layers, int stages, const std::vector<int>& given,
                                 double edge_cost) {
  FLEXSP_CHECK(stages >= 1 && stages <= layers,
               "parallel.pp_size: {} stages for {} layers (each stage needs a layer)", stages, layers);
  if (!given.empty()) {
    FLEXSP_CHECK(static_cast<int>(given.size()) == stages,
                 "parallel.pp_layers: {} stages listed, parallel.pp_size is {}", given.size(), stages);
    const int sum = std::accumulate(given.begin(), given.end(), 0);
    FLEXSP_CHECK(sum == layers, "parallel.pp_layers: the counts sum to {}, the model has {} layers",
                 sum, layers);
    for (int n : given) FLEXSP_CHECK(n >= 1, "parallel.pp_layers: every stage needs a layer");
    return given;
  }
  // Greedy cut of the cost line (edge, layers..., edge) into stages of about equal cost,
  // every stage keeping at least one layer.
  const double total = layers + 2 * edge_cost, target = total / stages;
  std::vector<int> out(static_cast<size_t>(stages), 0);
  double acc = edge_cost;  // the first stage's embedding
  int l = 0;
  for (int s = 0; s < stages; ++s) {
    const int left_stages = stages - s - 1;
    const double goal = target * (s + 1);
    int n = 0;
    while (l < layers - left_stages) {
      const double next = acc + 1 + (s == stages - 1 && l == layers - 1 ? edge_cost : 0);
      if (n >= 1 && s < stages - 1 && std::abs(next - goal) >= std::abs(acc - goal)) break;
      acc = next;
      ++l;
      ++n;
    }
    out[static_cast<size_t>(s)] = n;
  }
  FLEXSP_ASSERT(l == layers);
  return out;
}

std::string pipeline_describe(const std::vector<int>& stage_layers) {
  std::string s;
  int first = 0;
  const int n = static_cast<int>(stage_layers.size());
  for (int i = 0; i < n; ++i) {
    const int c = stage_layers[static_cast<size_t>(i)];
    s += fmt::format("{}stage {}: layers {}-{}{}{}", i ? ", " : "", i, first, first + c - 1,
                     i == 0 ? " (+embedding)" : "", i == n - 1 ? " (+head)" : "");
    first += c;
  }
  return s;
}

}  // namespace flexsp
