// plan_step (see planner.h): the costs, the baselines, and the spaces flexsp searches
// (flexsp_search.cpp: micro-batch count, split, per-micro-batch greedy + MILP). Also
// PlanAhead, the background planning thread.
#include "lib/planner/planner.h"

#include "lib/model/tensor_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "lib/planner/flexsp_search.h"
#include "lib/planner/mb_solver.h"
#include "lib/planner/memory_model.h"
#include "lib/runtime/seq_chunks.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

using Clock = PlanClock;

void check_feasible(const PlannerContext& ctx, const PlanCosts& c,
                    const std::vector<int64_t>& len) {
  for (size_t i = 0; i < len.size(); ++i) {
    FLEXSP_CHECK(len[i] >= 1, "planner: sequence {} has {} tokens", i, len[i]);
    const int d = c.max_size();
    FLEXSP_CHECK(len[i] <= c.tokens_per_rank * d,
                 "infeasible batch: sequence {} has {} tokens, more than the largest group the "
                 "model runs ({} devices of {}; parallel.cp_mode {}{}) holds: {} "
                 "tokens ({} per device with {} GB per GPU; all devices together hold {})",
                 i, len[i], d, c.world, cp_mode_name(ctx.cp_mode),
                 ctx.cp_mode == CpMode::ulysses
                     ? fmt::format(": d must divide {} heads per tp rank", ctx.model.heads / ctx.tp)
                     : std::string(),
                 c.tokens_per_rank * d, c.tokens_per_rank, ctx.mem_per_gpu_gb, c.tokens_per_rank * c.world);
  }
}

}  // namespace

PlanCosts plan_costs(const PlannerContext& ctx) {
  FLEXSP_CHECK(ctx.world >= 1, "planner: world size {} must be positive", ctx.world);
  FLEXSP_CHECK(ctx.ranks_per_node >= 1, "planner: ranks per node {} must be positive",
               ctx.ranks_per_node);
  FLEXSP_CHECK(ctx.mem_per_gpu_gb > 0, "planner.mem_per_gpu_gb: must be positive, got {}",
               ctx.mem_per_gpu_gb);
  const int tp = ctx.tp, pp = ctx.pipeline.pp;
  FLEXSP_CHECK(tp >= 1 && ctx.ranks_per_node % tp == 0,
               "parallel.tp_size: {} does not divide the {} ranks per node", tp, ctx.ranks_per_node);
  tp_check(ctx.model, tp);
  pp_check(ctx.pipeline, ctx.model.layers);
  FLEXSP_CHECK(ctx.world % (tp * pp) == 0,
               "parallel.pp_size: {} stages of tp {} do not divide the {} ranks", pp, tp, ctx.world);
  PlanCosts c;
  const int stage_ranks = ctx.world / pp;  // pp is the outermost dimension: a stage is a block
  c.world = stage_ranks / tp;
  c.ranks_per_node = std::max(1, std::min(ctx.ranks_per_node, stage_ranks) / tp);
  c.pipeline = ctx.pipeline;
  c.fixed_ms = ctx.cost.fixed_ms;
  // A device's tp GPUs split the compute; each moves its tp traffic per token of the device.
  const double tp_ms = cost_tp_bytes_per_token(ctx.cost, ctx.model, tp) /
                       (cost_tp_bandwidth_gbs(ctx.cost, tp) * 1e9) * 1e3;
  // Activation checkpointing repeats each layer's forward in backward: the compute
  // coefficients (measured without it, as `flexsp profile` times them) grow by 4/3, a
  // forward being a third of a step's FLOPs. Its extra communication is in the byte counts.
  const double recompute = ctx.model.checkpoint_activations ? 4.0 / 3.0 : 1.0;
  c.a1 = ctx.cost.a1_ms / tp * recompute;
  c.a2 = ctx.cost.a2_ms / tp * recompute + tp_ms;
  c.per_sequence_ms = ctx.cost.per_sequence_ms * recompute;
  // The memory model (lib/planner/memory_model.h): model states, ZeRO buffers, the
  // pipeline's activations in flight and a ring block, per rank.
  const ModelConfig local = tp_local_config(ctx.model, tp);
  const MemoryEstimate mem = memory_estimate_context(ctx);
  c.model_state_gb = mem.fixed() / 1e9;
  c.tokens_per_rank = memory_tokens_per_rank(mem, ctx.cost, ctx.mem_per_gpu_gb);
  if (ctx.max_tokens_per_rank > 0)
    c.tokens_per_rank = std::min(c.tokens_per_rank, ctx.max_tokens_per_rank * tp);
  FLEXSP_CHECK(c.tokens_per_rank >= 1,
               "planner.mem_per_gpu_gb: {} GB per GPU leaves no room for activations after {:.2f} "
               "GB of model states (ZeRO stage {}) and {} GB reserve",
               ctx.mem_per_gpu_gb, c.model_state_gb, ctx.zero.stage, ctx.cost.reserve_gb);
  // Ulysses between the ranks of equal tp index: each carries 1/tp of the payload. Its
  // sub-groups are blocks of u devices: inside a node when u fits one.
  const double bytes_per_token = cost_comm_bytes(ctx.cost, ctx.model, 1) / tp;
  const auto ms_at = [](double bytes, double gbs) { return bytes / (gbs * 1e9) * 1e3; };
  c.ulysses_max = 1;
  for (int d = 1; d <= c.world; d *= 2) {
    const bool ok = cp_group_runnable(ctx.cp_mode, d, local.heads, local.kv_heads, c.ranks_per_node);
    const CpSplit sp = ok ? cp_split(ctx.cp_mode, d, local.heads, local.kv_heads, c.ranks_per_node) : CpSplit{d, 1};
    c.comm_ms_per_token.push_back(
        sp.u == 1 ? 0.0 : ms_at(bytes_per_token / d, cost_bandwidth_gbs(ctx.cost, sp.u * tp, sp.u > c.ranks_per_node)));
    // A ring step moves the device's block: s / d tokens of max(kv, u) kv heads per rank.
    const int kv = std::max(local.kv_heads, sp.u);
    c.ring_r.push_back(sp.r);
    c.ring_ms_per_token.push_back(
        sp.r == 1 ? 0.0
                  : ms_at(cost_ring_bytes_per_token(ctx.cost, ctx.model, kv) / sp.u / d,
                          cost_p2p_bandwidth_gbs(ctx.cost, d > c.ranks_per_node)));
    if (!ok) continue;
    c.sizes.push_back(d);
    if (sp.r == 1) c.ulysses_max = d;
  }
  FLEXSP_ASSERT(!c.sizes.empty());
  c.wide_from = ctx.ring_only_when_needed ? c.tokens_per_rank * c.ulysses_max : 0;
  // Pipeline: a stage's share of the work, and each rank's share of the boundary traffic
  // (a device's tokens, 1/tp of the rows per rank), between nodes when a stage fills nodes.
  c.stage_share = static_cast<double>(pp_stage_layers(ctx.pipeline, ctx.model.layers)) / ctx.model.layers;
  if (pp > 1) {
    c.pp_ms_per_token = ms_at(cost_pp_bytes_per_token(ctx.cost, ctx.model) / tp / c.world,
                              cost_p2p_bandwidth_gbs(ctx.cost, stage_ranks >= ctx.ranks_per_node));
    pp_stage_shares(ctx.pipeline, ctx.pp_layers, ctx.model, &c.stage_attn, &c.stage_rest);
    c.forward_share = pp_forward_share(ctx.model);
    seq_chunk_costs(ctx.model, &c.chunk_lin, &c.chunk_att);  // as the runtime cuts
  }
  return c;
}

int PlanCosts::min_size(int64_t s) const {
  for (int d : sizes)
    if (holds(s, d)) return d;
  return 0;
}

double PlanCosts::least_work(int64_t s) const {
  double w = std::numeric_limits<double>::infinity();
  for (int d : sizes)
    if (holds(s, d)) w = std::min(w, d * seq_ms(s, d));
  return w;
}

double PlanCosts::least_ms(int64_t s) const {
  double t = std::numeric_limits<double>::infinity();
  for (int d : sizes)
    if (holds(s, d)) t = std::min(t, seq_ms(s, d));
  return t;
}

double PlanCosts::unpipelined_ms(double sum_ms, int64_t tokens) const {
  if (pipeline.pp <= 1) return sum_ms;
  return sum_ms * stage_share + pp_ms_per_token * static_cast<double>(tokens);
}

double PlanCosts::step_ms(double sum_ms, int m, int64_t tokens) const {
  if (pipeline.pp <= 1) return sum_ms;
  return unpipelined_ms(sum_ms, tokens) * pp_bubble_factor(pipeline, m);
}

double PlanCosts::step_lower_ms(double sum_ms) const {
  const int P = pipeline.pp;
  if (P <= 1) return sum_ms;
  double best = 0, before_last = 0, after_first = 0;
  for (int s = 0; s < P; ++s) {
    const double a = stage_attn[static_cast<size_t>(s)], r = stage_rest[static_cast<size_t>(s)];
    best = std::max(best, std::min(a, r) * sum_ms);
    if (s < P - 1) before_last += forward_share * fixed_ms * r;
    if (s > 0) after_first += (1 - forward_share) * fixed_ms * r;
  }
  const auto work = [&](int s) {
    return std::min(stage_attn[static_cast<size_t>(s)], stage_rest[static_cast<size_t>(s)]) * sum_ms;
  };
  return std::max({best, work(P - 1) + before_last, work(0) + after_first});
}

PlanLimits plan_limits(const PlannerContext& ctx, const PlanCosts& c) {
  PlanLimits l;
  const ModelConfig local = tp_local_config(ctx.model, ctx.tp);
  l.world = c.world;
  l.ranks_per_node = c.ranks_per_node;
  l.heads = local.heads;
  l.kv_heads = local.kv_heads;
  l.cp_mode = ctx.cp_mode;
  l.max_tokens_per_rank = c.tokens_per_rank;
  return l;
}

double plan_predict_ms(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& len) {
  if (c.pipeline.pp > 1) {
    std::vector<const std::vector<PlanGroup>*> mbs;
    for (const PlanMicroBatch& mb : p.micro_batches) mbs.push_back(&mb.groups);
    return plan_pipeline_ms(c, mbs, len);
  }
  double t = 0;
  for (const PlanMicroBatch& mb : p.micro_batches) t += c.fixed_ms + mb_makespan(c, len, mb.groups);
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  return c.step_ms(t, static_cast<int>(p.micro_batches.size()), tokens);
}

int plan_static_size(const PlannerContext& ctx, const PlanCosts& c,
                     const std::vector<int64_t>& len) {
  if (ctx.static_sp_size > 0) return ctx.static_sp_size;
  int64_t longest = ctx.max_seq_len;
  if (longest <= 0)
    for (int64_t l : len) longest = std::max(longest, l);
  const int d = c.min_size(std::max<int64_t>(longest, 1));
  FLEXSP_CHECK(d > 0,
               "static SP: no group size holds a sequence of {} tokens ({} per rank; groups of up to {} devices "
               "with parallel.cp_mode {})",
               longest, c.tokens_per_rank, c.max_size(), cp_mode_name(ctx.cp_mode));
  return d;
}

namespace {

// Tokens per device of a uniform plan: memory's E; with a pipeline, less where that gives
// the pipeline pp micro-batches (a single one would leave pp - 1 stages idle), never less
// than the longest sequence needs.
int64_t uniform_tokens(const PlanCosts& c, const std::vector<int64_t>& len, int d) {
  if (c.pipeline.pp <= 1) return c.tokens_per_rank;
  int64_t tokens = 0, longest = 0;
  for (int64_t l : len) tokens += l, longest = std::max(longest, l);
  const int64_t per_mb = (tokens + c.pipeline.pp - 1) / c.pipeline.pp;
  const int64_t e = std::max((per_mb + c.world - 1) / c.world, (longest + d - 1) / d);
  return std::min(c.tokens_per_rank, e);
}

// batch_adaptive's plan: the uniform size with the least predicted time among those that
// hold the batch's longest sequence and tile the nodes; empty when none does.
template <class UniformOk>
Plan plan_uniform_best(const PlanCosts& c, const std::vector<int64_t>& len, UniformOk uniform_ok) {
  int64_t longest = 1;
  for (int64_t l : len) longest = std::max(longest, l);
  double best = std::numeric_limits<double>::infinity();
  Plan p;
  for (int d : c.sizes) {
    if (d < c.min_size(longest) || !uniform_ok(d)) continue;
    Plan q = plan_static(len, c.world, d, uniform_tokens(c, len, d));
    const double t = plan_predict_ms(c, q, len);
    if (t < best - 1e-9) best = t, p = std::move(q);
  }
  return p;
}

}  // namespace

Plan plan_step(const PlannerContext& ctx, const std::vector<int64_t>& len, PlanStats* stats) {
  const Clock::time_point t0 = Clock::now();
  const PlanCosts c = plan_costs(ctx);
  check_feasible(ctx, c, len);
  PlanStats st;
  Plan p;
  auto uniform_ok = [&](int d) {
    return c.world % d == 0 && (d > c.ranks_per_node ? d % c.ranks_per_node == 0
                                                     : c.ranks_per_node % d == 0);
  };
  switch (ctx.mode) {
    case SpMode::static_sp: {
      const int d = plan_static_size(ctx, c, len);
      const int heads = ctx.model.heads / ctx.tp;
      const bool runnable = std::find(c.sizes.begin(), c.sizes.end(), d) != c.sizes.end();
      FLEXSP_CHECK(uniform_ok(d) && runnable,
                   "parallel.sp_size: {} must be a power of two dividing the {} devices and the {} "
                   "devices per node (or a multiple of it){}",
                   d, c.world, c.ranks_per_node,
                   ctx.cp_mode == CpMode::ulysses ? fmt::format(", and the {} heads per tp rank", heads)
                                                  : std::string());
      p = plan_static(len, c.world, d, uniform_tokens(c, len, d));
      break;
    }
    case SpMode::batch_adaptive:
      p = plan_uniform_best(c, len, uniform_ok);
      FLEXSP_CHECK(!p.micro_batches.empty(), "batch_adaptive: no uniform group size fits the batch");
      break;
    case SpMode::flexsp: {
      // The best uniform plan lies in flexsp's space: its split is one candidate.
      // With rings open to any sequence, the plan of the space without short sequences on
      // rings (--ring-groups needed) lies in it too, and the heuristics sometimes find a
      // better plan there (a batch of long pieces only): both are planned and the faster
      // kept. Rings open to any sequence first, under the whole time limit; the rule's
      // space then gets what is left, if that is at least half of it (at 1024 GPUs the
      // first space's split alone takes ~0.5 s: halves of the limit, as before, cut its
      // local search there, and the rule's plans lost by 20-30% anyway; at 64 GPUs both
      // spaces finish in ~0.1 s each).
      const Plan uniform = plan_uniform_best(c, len, uniform_ok);
      const bool both = !ctx.ring_only_when_needed && c.max_size() > c.ulysses_max;
      if (!both) {
        p = plan_flexsp(ctx, c, len, uniform, t0, &st);
        break;
      }
      PlanCosts needed = c;
      needed.wide_from = c.tokens_per_rank * c.ulysses_max;
      p = plan_flexsp(ctx, c, len, uniform, t0, &st);
      plan_keep_faster(ctx, c, len, t0, p, &st, [&](const PlannerContext& rest, PlanStats* s) {
        return plan_flexsp(rest, needed, len, plan_uniform_best(needed, len, uniform_ok), Clock::now(), s);
      });
      break;
    }
  }
  p.predicted_ms = plan_predict_ms(c, p, len);
  plan_validate(p, len, plan_limits(ctx, c));
  st.predicted_ms = p.predicted_ms;
  st.unpipelined_ms = p.predicted_ms;
  if (c.pipeline.pp > 1) {
    double sum = 0;
    int64_t tokens = 0;
    for (const PlanMicroBatch& mb : p.micro_batches) sum += c.fixed_ms + mb_makespan(c, len, mb.groups);
    for (int64_t l : len) tokens += l;
    st.unpipelined_ms = c.unpipelined_ms(sum, tokens);
  }
  st.lower_bound_ms = plan_lower_bound_ms(c, len);
  st.micro_batches = static_cast<int>(p.micro_batches.size());
  if (ctx.mode != SpMode::flexsp) st.greedy_ms = p.predicted_ms;
  st.solve_ms = ms_since(t0);
  if (stats) *stats = st;
  return p;
}

// ---- PlanAhead ------------------------------------------------------------------------------

PlanAhead::PlanAhead(PlannerContext ctx) : ctx_(std::move(ctx)), worker_([this] { run(); }) {}

PlanAhead::~PlanAhead() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void PlanAhead::submit(int64_t step, std::vector<int64_t> lengths) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    FLEXSP_CHECK(!pending_.count(step), "PlanAhead: step {} submitted twice", step);
    pending_[step] = true;
    queue_.emplace_back(step, std::move(lengths));
  }
  cv_.notify_all();
}

Plan PlanAhead::wait(int64_t step, double* wait_ms, PlanStats* stats) {
  const Clock::time_point t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  FLEXSP_CHECK(pending_.count(step), "PlanAhead: step {} was never submitted", step);
  cv_.wait(lock, [&] { return done_.count(step) != 0; });
  Result r = std::move(done_.at(step));
  done_.erase(step);
  pending_.erase(step);
  lock.unlock();
  if (wait_ms) *wait_ms = ms_since(t0);
  if (r.error) std::rethrow_exception(r.error);
  if (stats) *stats = r.stats;
  return std::move(r.plan);
}

void PlanAhead::run() {
  for (;;) {
    std::pair<int64_t, std::vector<int64_t>> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    Result r;
    try {
      r.plan = plan_step(ctx_, job.second, &r.stats);
    } catch (...) {
      r.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_[job.first] = std::move(r);
    }
    cv_.notify_all();
  }
}

}  // namespace flexsp

namespace flexsp {

PlannerContext planner_context(const RunConfig& cfg, const ModelConfig& model, int world,
                               int ranks_per_node) {
  PlannerContext ctx;
  ctx.mode = cfg.parallel.sp_mode;
  ctx.world = world;
  ctx.ranks_per_node = ranks_per_node;
  ctx.model = model;
  ctx.cost = cfg.planner.cost_model.empty() ? cost_model_default()
                                            : cost_model_load(cfg.planner.cost_model);
  ctx.mem_per_gpu_gb = cfg.planner.mem_per_gpu_gb;
  ctx.tp = cfg.parallel.tp_size;
  ctx.cp_mode = cfg.parallel.cp_mode;
  ctx.pipeline.pp = cfg.parallel.pp_size;
  ctx.pipeline.schedule = cfg.parallel.pp_schedule;
  ctx.pipeline.seq_chunks = cfg.parallel.seq_chunks;
  ctx.pp_layers = pp_layers_parse(cfg.parallel.pp_layers);
  for (int l : ctx.pp_layers) ctx.pipeline.stage_layers = std::max(ctx.pipeline.stage_layers, l);
  // ZeRO shards over the data-parallel peers: the ranks of one tp index in one stage.
  auto ranks = [&](ZeroGroup group) {
    return std::min(group == ZeroGroup::node ? ranks_per_node : world, world / ctx.pipeline.pp) / ctx.tp;
  };
  ctx.zero.stage = cfg.parallel.zero;
  ctx.zero.param_group = cfg.parallel.zero >= 3 ? ranks(cfg.parallel.zero_param_group) : 1;
  ctx.zero.grad_group = cfg.parallel.zero >= 2 ? ranks(cfg.parallel.zero_grad_group) : 1;
  ctx.zero.optim_group = cfg.parallel.zero >= 1 ? ranks(cfg.parallel.zero_optim_group) : 1;
  ctx.static_sp_size = cfg.is_set("parallel.sp_size") ? cfg.parallel.sp_size : 0;
  ctx.max_seq_len = cfg.data.max_seq_len + 1;
  ctx.time_limit_ms = cfg.planner.time_limit_ms;
  ctx.max_tokens_per_rank = cfg.train.micro_batch_tokens;
  return ctx;
}

}  // namespace flexsp
