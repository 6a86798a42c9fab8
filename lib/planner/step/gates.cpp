// The search's gates (gates.h).
#include "lib/planner/step/gates.h"

#include <algorithm>
#include <cmath>

namespace flexsp {

bool gate_wide_piece(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len) {
  int64_t longest = 0;
  for (int64_t l : len) longest = std::max(longest, l);
  return c.min_size(longest) > std::max(1, c.ranks_per_node / ctx.gates.wide_piece_divisor);
}

bool gate_wide_passes(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len) {
  return c.world <= ctx.gates.wide_passes_max_devices && gate_wide_piece(ctx, c, len);
}

bool gate_sample(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len) {
  return ctx.sample_devices > 0 && c.world > ctx.gates.wide_passes_max_devices &&
         c.world >= 2 * ctx.sample_devices && c.max_size() <= ctx.sample_devices && gate_wide_piece(ctx, c, len);
}

bool gate_time_left(const PlannerContext& ctx, PlanClock::time_point t0) {
  return ctx.time_limit_ms == 0 || ms_since(t0) < (1 - ctx.gates.alternatives_left) * ctx.time_limit_ms;
}

int step_time_limit_ms(const PlannerContext& ctx, double step_ms) {
  if (ctx.time_limit_ms == 0 || ctx.time_step_share <= 0) return ctx.time_limit_ms;
  const double share = std::ceil(ctx.time_step_share * step_ms);
  return static_cast<int>(std::clamp<double>(share, 1, ctx.time_limit_ms));
}

PlannerContext step_limited(const PlannerContext& ctx, double step_ms) {
  PlannerContext limited = ctx;
  limited.time_limit_ms = step_time_limit_ms(ctx, step_ms);
  return limited;
}

}  // namespace flexsp
