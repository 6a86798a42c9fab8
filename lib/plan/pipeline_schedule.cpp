#include "lib/plan/pipeline_schedule.h"

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
                                 double first_cost, double last_cost) {
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
  // best[s][l]: the least possible costliest stage when stages 0..s hold layers [0, l).
  const double inf = 1e300;
  auto cost = [&](int s, int a, int b) {  // stage s holding layers [a, b)
    return (b - a) + (s == 0 ? first_cost : 0) + (s == stages - 1 ? last_cost : 0);
  };
  std::vector<std::vector<double>> best(static_cast<size_t>(stages),
                                        std::vector<double>(static_cast<size_t>(layers) + 1, inf));
  std::vector<std::vector<int>> cut = std::vector<std::vector<int>>(
      static_cast<size_t>(stages), std::vector<int>(static_cast<size_t>(layers) + 1, 0));
  for (int l = 1; l <= layers; ++l) best[0][l] = cost(0, 0, l);
  for (int s = 1; s < stages; ++s)
    for (int l = s + 1; l <= layers; ++l)
      for (int k = s; k < l; ++k) {
        const double c = std::max(best[s - 1][k], cost(s, k, l));
        if (c < best[s][l] - 1e-12) best[s][l] = c, cut[s][l] = k;
      }
  std::vector<int> out(static_cast<size_t>(stages));
  for (int s = stages - 1, l = layers; s >= 0; --s) {
    const int k = s == 0 ? 0 : cut[s][l];
    out[static_cast<size_t>(s)] = l - k;
    l = k;
  }
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
