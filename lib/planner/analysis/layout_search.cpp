// The layout search (layout_search.h): enumerate, check memory, price with the planner.
#include "lib/planner/analysis/layout_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <cmath>
#include <thread>

#include "lib/model/tensor_parallel.h"
#include "lib/planner/cost/memory_model.h"
#include "lib/planner/planner.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

// The (param, grad, optim) groups lib/runtime/zero.h supports, per stage.
struct Groups3 {
  const char *param, *grad, *optim;
};
std::vector<Groups3> zero_groups(int stage, bool several_nodes) {
  if (stage == 0) return {{"world", "world", "world"}};
  if (!several_nodes) return {{"world", "world", "world"}};  // node = world: nothing new
  if (stage == 1) return {{"world", "world", "world"}, {"world", "world", "node"}};
  if (stage == 2) return {{"world", "world", "world"}, {"world", "node", "node"}};
  return {{"world", "world", "world"}, {"node", "world", "world"}, {"node", "node", "world"}, {"node", "node", "node"}};
}

// ZeRO traffic of a layout (ms per micro-batch, per step) as lib/runtime/zero.h runs it,
// for the whole model over a stage's data-parallel ranks (the caller scales by the stage's
// share). With a pipeline a stage spans gpus / pp GPUs.
// Most tokens one device holds in a plan: a group's tokens over its d devices.
int64_t max_device_tokens(const Plan& p, const std::vector<int64_t>& len) {
  int64_t most = 0;
  for (const PlanMicroBatch& mb : p.micro_batches)
    for (const PlanGroup& g : mb.groups) {
      int64_t t = 0;
      for (int32_t i : g.seqs) t += len[static_cast<size_t>(i)];
      most = std::max(most, (t + g.size - 1) / g.size);
    }
  return most;
}

}  // namespace

std::string SearchLayout::name() const {
  std::string n = fmt::format("tp{}", tp);
  if (pipeline.pp > 1) {
    n += fmt::format(" pp{} {}", pipeline.pp, pp_schedule_name(pipeline.schedule));
    if (pipeline.schedule == PpSchedule::seq1f1b) n += fmt::format(" x{}", pipeline.seq_chunks);
  }
  n += fmt::format(" zero{}", zero);
  if (zero == 1) n += fmt::format("({})", optim_group);
  if (zero == 2) n += fmt::format("({})", grad_group);
  if (zero == 3) n += fmt::format("({},{},{})", param_group, grad_group, optim_group);
  if (checkpoint) n += " ckpt";
  if (micro_batch_tokens > 0) n += fmt::format(" mbt {}", micro_batch_tokens);
  if (cp_mode != CpMode::ulysses) n += fmt::format(" {}", cp_mode_name(cp_mode));
  return n;
}

SearchLayout search_paper_layout() { return SearchLayout{}; }

bool layout_runnable_now(const SearchLayout& l, std::string* why) {
  (void)l;  // every layout the search forms runs today (ring/USP in Seq1F1B stages too)
  if (why) why->clear();
  return true;
}

CpMode layout_cp_mode_run(const SearchLayout& l) {
  if (l.cp_mode != CpMode::automatic) return l.cp_mode;
  SearchLayout ring = l;
  ring.cp_mode = CpMode::ring;
  return layout_runnable_now(ring) ? CpMode::automatic : CpMode::ulysses;
}

std::vector<SearchLayout> search_space(const SearchSetup& s) {
  std::vector<SearchLayout> out;
  // The pipelines: pp = 1, then each pp > 1 with 1F1B and Seq1F1B at each chunk count.
  std::vector<PipelineLayout> pipes;
  for (int pp : s.pp) {
    if (pp < 1 || pp > s.model.layers || s.gpus % pp != 0) continue;
    if (pp == 1) {
      pipes.push_back({});
      continue;
    }
    for (PpSchedule sc : s.pp_schedule) {
      if (sc == PpSchedule::one_f_one_b) pipes.push_back({pp, sc, 1, 0});
      else
        for (int k : s.seq_chunks) pipes.push_back({pp, sc, k, 0});
    }
  }
  for (int tp : s.tp) {
    if (tp < 1 || s.gpus_per_node % tp != 0 || s.gpus % tp != 0) continue;
    try {
      tp_check(s.model, tp);
    } catch (const Error&) {
      continue;  // the model's heads or FFN do not split tp ways
    }
    for (const PipelineLayout& pl : pipes) {
      if ((s.gpus / pl.pp) % tp != 0) continue;
      const bool several_nodes = s.gpus / pl.pp > s.gpus_per_node;
      for (int stage : s.zero)
        for (const Groups3& g : zero_groups(stage, several_nodes))
          for (bool ckpt : s.checkpoint)
            for (int64_t mbt : s.micro_batch_tokens) {
              if (pl.pp > 1 && mbt > 0) continue;  // the pipeline picks its micro-batch count
              for (CpMode cp : s.cp_mode) {
                SearchLayout l{tp, stage, g.param, g.grad, g.optim, ckpt, mbt, pl, cp};
                out.push_back(l);
              }
            }
    }
  }
  return out;
}

RunConfig search_run_config(const SearchSetup& s, const SearchLayout& l) {
  RunConfig cfg;
  ParallelSection& p = cfg.parallel;
  p.sp_mode = SpMode::flexsp;
  p.tp_size = l.tp;
  p.cp_mode = l.cp_mode;
  p.pp_size = l.pipeline.pp;
  p.pp_schedule = l.pipeline.schedule;
  p.seq_chunks = l.pipeline.seq_chunks;
  p.zero = l.zero;
  auto group = [](const std::string& g) { return g == "node" ? ZeroGroup::node : ZeroGroup::world; };
  p.zero_param_group = group(l.param_group);
  p.zero_grad_group = group(l.grad_group);
  p.zero_optim_group = group(l.optim_group);
  cfg.planner.mem_per_gpu_gb = s.mem_per_gpu_gb;
  cfg.data.max_seq_len = s.max_seq_len - 1;
  cfg.train.micro_batch_tokens = l.micro_batch_tokens;
  return cfg;
}

std::vector<std::vector<int64_t>> search_steps(const SearchSetup& s, const std::vector<int64_t>& docs) {
  BatchSampler sampler(docs, s.batch);
  std::vector<std::vector<int64_t>> steps(static_cast<size_t>(std::max<int64_t>(0, s.steps)));
  for (std::vector<int64_t>& len : steps)
    for (const SeqRef& q : sampler.next()) len.push_back(q.length);
  return steps;
}

SearchResult search_evaluate(const SearchSetup& s, const SearchLayout& l, const std::vector<int64_t>& docs) {
  return search_evaluate_steps(s, l, search_steps(s, docs));
}

namespace {

// The layout's figures over the sampled steps: flexsp's plans (and static SP's, where it
// holds the longest piece) each with the step's sync, tokens/s, MFU, the bubble and the
// peak memory of the fullest device; rejected where a step does not fit.
void price_steps(const SearchSetup& s, PlannerContext ctx, const std::vector<std::vector<int64_t>>& steps,
                 const MemoryEstimate& mem, SearchResult& r) {
  double ms = 0, unpipelined_ms = 0, static_ms = 0, tokens = 0, flops = 0;
  int64_t most = 0;
  try {
    for (const std::vector<int64_t>& len : steps) {
      PlanStats st;
      ctx.mode = SpMode::flexsp;
      const Plan p = plan_step(ctx, len, &st);
      ms += st.predicted_ms + r.sync_ms;
      unpipelined_ms += st.unpipelined_ms + r.sync_ms;
      r.micro_batches += st.micro_batches;
      most = std::max(most, max_device_tokens(p, len));
      ctx.mode = SpMode::static_sp;
      try {  // static SP may not hold the longest piece where flexsp's plans fit: no static figure
        if (static_ms >= 0) plan_step(ctx, len, &st), static_ms += st.predicted_ms + r.sync_ms;
      } catch (const Error&) {
        static_ms = -1;
      }
      for (int64_t x : len) tokens += static_cast<double>(x);
      flops += model_train_flops(s.model, len);
    }
  } catch (const Error& e) {
    r.rejected = e.what();
    return;
  }
  const double n = static_cast<double>(std::max<size_t>(1, steps.size()));
  r.step_ms = ms / n;
  r.bubble = ms > 0 ? std::max(0.0, 1 - unpipelined_ms / ms) : 0;  // 0 without a pipeline
  r.static_step_ms = static_ms > 0 ? static_ms / n : 0;
  r.micro_batches /= n;
  r.tokens_per_s = tokens / (ms / 1e3);
  r.static_tokens_per_s = static_ms > 0 ? tokens / (static_ms / 1e3) : 0;
  r.mfu = flops / (ms / 1e3 * s.gpus * s.peak_tflops * 1e12);
  r.peak_gb = mem.total(most) / 1e9;
}

}  // namespace

SearchResult search_evaluate_steps(const SearchSetup& s, const SearchLayout& l,
                                   const std::vector<std::vector<int64_t>>& steps) {
  SearchResult r;
  r.layout = l;
  if (!layout_runnable_now(l, &r.priced_only))
    r.priced_only = "priced only: the runtime does not run this yet: " + r.priced_only;
  if (l.cp_mode != CpMode::ulysses && layout_cp_mode_run(l) == CpMode::ulysses) {
    r.redundant = true;  // train runs the Ulysses layout's plans
    return r;
  }
  ModelConfig m = s.model;
  m.checkpoint_activations = l.checkpoint;
  const int stage = s.gpus / l.pipeline.pp;
  PlannerContext ctx;
  try {
    ctx = planner_context(search_run_config(s, l), m, s.cost, s.gpus, s.gpus_per_node);
  } catch (const Error& e) {
    r.rejected = e.what();
    return r;
  }
  const ZeroLayout& z = ctx.zero;
  if (l.cp_mode != CpMode::ulysses) {  // the same plans as ulysses unless it cannot hold the longest piece
    PlannerContext u = ctx;
    u.cp_mode = CpMode::ulysses;
    int widest = 1;
    const int64_t e = memory_tokens_per_rank(memory_estimate_context(u, &widest), s.cost, s.mem_per_gpu_gb);
    const int64_t cap = l.micro_batch_tokens > 0 ? std::min(e, l.micro_batch_tokens * l.tp) : e;
    if (e < 1 || cap * widest >= s.max_seq_len) {  // no room for states, or every piece fits
      r.redundant = true;
      return r;
    }
  }
  const MemoryEstimate mem = memory_estimate_context(ctx);
  r.states_gb = mem.fixed() / 1e9;
  r.tokens_per_rank = memory_tokens_per_rank(mem, s.cost, s.mem_per_gpu_gb);
  if (l.micro_batch_tokens > 0 && l.micro_batch_tokens * l.tp >= r.tokens_per_rank) {
    r.redundant = true;  // memory caps tighter: the layout without the cap
    return r;
  }
  if (l.micro_batch_tokens > 0) r.tokens_per_rank = l.micro_batch_tokens * l.tp;
  if (r.tokens_per_rank < 1) {
    r.rejected = fmt::format("model states and ZeRO buffers {:.3g} GB leave no room in {:g} GB", r.states_gb,
                             s.mem_per_gpu_gb);
    return r;
  }
  try {  // what train refuses: the longest piece training makes on the widest group
    memory_require_fit(ctx);
  } catch (const Error& e) {
    r.rejected = e.what();
    return r;
  }
  const SimZeroComm zc = sim_zero_traffic(m, s.cost, z, stage, s.gpus_per_node, l.tp, s.fabric.intra_gbs,
                                          s.fabric.inter_gbs);
  // The whole model's fixed cost; the pipeline's price takes the stage's share of it.
  const double share = static_cast<double>(pp_stage_layers(l.pipeline, m.layers)) / m.layers;
  ctx.cost.fixed_ms = s.fixed.residual_ms + s.fixed.exposure * zc.per_micro_batch_ms;
  r.fixed_ms = ctx.cost.fixed_ms * (l.pipeline.pp > 1 ? share : 1.0);
  r.sync_ms = sim_sync_ms(m, s.cost, z, l.tp, zc, s.fixed.exposure, l.pipeline.pp > 1 ? share : 1.0);
  // Greedy (deterministic, and cheap enough for every layout of the space), without the
  // local search's widest passes (the levels splits, re-splitting pairs, the sample's
  // split): a few percent off long-tail steps at several times the time each
  // (docs/planner.md#layout-search).
  ctx.time_limit_ms = 0;
  ctx.use_milp = false;
  ctx.levels_max_counts = 0;
  ctx.resplit_max_tries = 0;
  ctx.sample_devices = 0;
  price_steps(s, ctx, steps, mem, r);
  return r;
}

std::vector<SearchResult> search_layouts(const SearchSetup& s, const std::vector<int64_t>& docs) {
  // Layouts are independent and plan_step is pure (no globals, greedy: no clock), so the
  // space is shared among threads; each result lands in its slot, so the order and the
  // figures do not depend on the thread count.
  const std::vector<SearchLayout> space = search_space(s);
  const std::vector<std::vector<int64_t>> steps = search_steps(s, docs);  // the same for every layout
  std::vector<SearchResult> all(space.size());
  std::vector<std::exception_ptr> errors(space.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < space.size();) try {
        all[i] = search_evaluate_steps(s, space[i], steps);
      } catch (...) {
        errors[i] = std::current_exception();
      }
  };
  const unsigned n = std::max(1u, std::min(s.threads, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)  // the first in space order, as one thread would
    if (e) std::rethrow_exception(e);
  std::vector<SearchResult> out;
  for (SearchResult& r : all)
    if (!r.redundant) out.push_back(std::move(r));
  // Runnable and ranked, then priced only, then rejected; by tokens/s within the first two.
  auto tier = [](const SearchResult& r) { return !r.rejected.empty() ? 2 : r.priced_only.empty() ? 0 : 1; };
  std::stable_sort(out.begin(), out.end(), [&](const SearchResult& a, const SearchResult& b) {
    if (tier(a) != tier(b)) return tier(a) < tier(b);
    return tier(a) < 2 && a.tokens_per_s > b.tokens_per_s;
  });
  return out;
}

std::string search_why(const SearchResult& best, const SearchResult& other) {
  if (!other.rejected.empty()) return fmt::format("{} does not fit: {}", other.layout.name(), other.rejected);
  const double gain = other.step_ms > 0 ? 100 * (other.step_ms / best.step_ms - 1) : 0;
  // The step's parts: fixed cost of its micro-batches, the sync, and the makespans.
  auto work = [](const SearchResult& r) {
    return r.step_ms * (1 - r.bubble) - r.micro_batches * r.fixed_ms - r.sync_ms;
  };
  std::string s = fmt::format("{:.1f}% faster than {}:", gain, other.layout.name());
  s += fmt::format(" micro-batches {:.1f} vs {:.1f} (E {} vs {} tokens per device),", best.micro_batches,
                   other.micro_batches, best.tokens_per_rank, other.tokens_per_rank);
  s += fmt::format(" fixed {:.0f} vs {:.0f} ms per micro-batch (ZeRO traffic),", best.fixed_ms, other.fixed_ms);
  s += fmt::format(" sync {:.0f} vs {:.0f} ms per step,", best.sync_ms, other.sync_ms);
  if (best.bubble > 0 || other.bubble > 0)
    s += fmt::format(" pipeline bubble {:.0f}% vs {:.0f}% of the step,", 100 * best.bubble, 100 * other.bubble);
  s += fmt::format(" makespans {:.0f} vs {:.0f} ms (compute, all-to-all, tp exchanges)", work(best), work(other));
  return s;
}

std::string search_ini(const SearchSetup& s, const SearchResult& b, const std::string& cost_model_path) {
  FLEXSP_CHECK(search_runnable_ranked(b), "--search-ini: {} is not a layout train runs ({})", b.layout.name(),
               b.rejected.empty() ? b.priced_only : b.rejected);
  const SearchLayout& l = b.layout;
  std::string t = fmt::format(
      "# flexsp plan --search: the best layout for {} on {} GPUs ({} per node), {:g} GB per GPU\n"
      "# predicted {:.1f} ms per step, {:.4g} tokens/s, MFU {:.3f}, peak {:.3g} GB per GPU\n",
      s.model.preset, s.gpus, s.gpus_per_node, s.mem_per_gpu_gb, b.step_ms, b.tokens_per_s, b.mfu, b.peak_gb);
  t += fmt::format("[model]\ncheckpoint_activations = {}\n\n", l.checkpoint ? "true" : "false");
  t += fmt::format("[parallel]\nsp_mode = flexsp\ntp_size = {}\nzero = {}\n", l.tp, l.zero);
  t += fmt::format("zero_param_group = {}\nzero_grad_group = {}\nzero_optim_group = {}\n", l.param_group,
                   l.grad_group, l.optim_group);
  t += fmt::format("cp_mode = {}\npp_size = {}\npp_schedule = {}\nseq_chunks = {}\n\n", cp_mode_name(l.cp_mode),
                   l.pipeline.pp, pp_schedule_name(l.pipeline.schedule), l.pipeline.seq_chunks);
  t += fmt::format("[train]\nmicro_batch_tokens = {}\n\n", l.micro_batch_tokens);
  t += fmt::format("[planner]\nmem_per_gpu_gb = {:g}\n", s.mem_per_gpu_gb);
  if (!cost_model_path.empty()) t += fmt::format("cost_model = {}\n", cost_model_path);
  return t;
}

}  // namespace flexsp
