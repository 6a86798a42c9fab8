// flexsp plan: the planner alone (docs/commands.md). Draws each step's global
// batch from a dataset's document lengths or a length file with the same BatchSampler
// training uses (so the batches are the ones training would see), plans it for flexsp,
// static and batch_adaptive, and prints the plans, predicted step times, speedups and solve
// times, then a summary of medians (or one JSON object with --json).
//
// Runs on one process. Under mpirun rank 0 does all the work inside agree(), so a bad
// option or an infeasible batch ends every rank with one error line; the others wait.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <boost/program_options.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/plan_args.h"
#include "app/search_args.h"
#include "lib/data/sampler.h"
#include "lib/model/model_config.h"
#include "lib/planner/analysis/lower_bound.h"
#include "lib/planner/mb/mb_solver.h"
#include "lib/planner/planner.h"
#include "lib/planner/analysis/box_bound.h"
#include "lib/planner/analysis/strong_bound.h"
#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

namespace {

// flexsp plan's options beyond the shared ones (app/plan_args.h).
struct PlanCommand {
  PlanArgs plan;
  int gpus = 64;
  bool exact = false;  // --exact-milp
  SearchArgs search;
  double peak_tflops = 312;
  int strong_ms = 0;  // --strong-bound-ms
  StrongBoundOptions strong;
  int box_ms = 0;     // --box-bound-ms
};

po::options_description plan_options(PlanCommand& a) {
  po::options_description o("flexsp plan options");
  o.add_options()
      ("help,h", "this help")
      ("gpus", po::value(&a.gpus)->default_value(a.gpus), "number of GPUs (ranks)")
      ("exact-milp", po::bool_switch(&a.exact),
       "also run the exact slot MILP (one column set per group) after the class MILP, within "
       "the time limit, and keep its best plan when the limit stops it: the reference for how "
       "far the plans are from CBC's best (depends on the clock)")
      ("strong-bound-ms", po::value(&a.strong_ms)->default_value(a.strong_ms),
       "also compute the strong lower bound (a MILP over micro-batch makespans, groups and "
       "memory: lib/planner/analysis/strong_bound.h) with CBC for up to this many ms per step; its proven "
       "bound is valid at the limit (0: off). --json also gives the planner's plan started from "
       "CBC's incumbent split (strong_bound_seeded_*, strong_bound_whole_seeded_*)")
      ("strong-bound-long-fraction", po::value(&a.strong.long_fraction)->default_value(a.strong.long_fraction),
       "with --strong-bound-ms: sequences whose least time is at least this share of an average "
       "micro-batch's makespan get integer counts, the rest are fluid (any value is valid; "
       "fewer integers let CBC close the MILP sooner)")
      ("strong-bound-extra", po::value(&a.strong.explicit_extra)->default_value(a.strong.explicit_extra),
       "with --strong-bound-ms: micro-batch counts M* .. M*+this modelled one MILP each, the "
       "last pooling any more")
      ("box-bound-ms", po::value(&a.box_ms)->default_value(a.box_ms),
       "also compute the box lower bound (a branch and bound over the micro-batch makespans, "
       "an LP of groups, memory and device-time per box: lib/planner/analysis/box_bound.h) for up to "
       "this many ms per step; valid at the limit (0: off)");
  add_plan_options(o, a.plan, "512");
  add_search_options(o, a.search);
  o.add_options()("peak-tflops", po::value(&a.peak_tflops)->default_value(a.peak_tflops),
                  "with --search: peak TFLOP/s per GPU for MFU (312: A100 bf16 dense)");
  return o;
}

constexpr const char* kColumns[] = {"flexsp_ms", "static_ms", "batch_adaptive_ms",
                                    "speedup_vs_static", "speedup_vs_batch_adaptive", "solve_ms",
                                    "lower_bound_ms", "greedy_ms", "static_over_lower_bound",
                                    "batch_adaptive_over_lower_bound", "memory_lower_bound_ms",
                                    "flexsp_over_memory_lower_bound"};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

nlohmann::json plan_json(const PlanCosts& costs, const Plan& p, const std::vector<int64_t>& len) {
  nlohmann::json mbs = nlohmann::json::array();
  for (const PlanMicroBatch& mb : p.micro_batches) {
    const PlanCosts& c = costs.of(mb);
    nlohmann::json groups = nlohmann::json::array();
    std::vector<int64_t> mb_len;
    for (const PlanGroup& g : mb.groups)
      for (int32_t s : g.seqs) mb_len.push_back(len[s]);
    for (const PlanGroup& g : mb.groups) {
      int64_t tok = 0;
      double ms = 0;
      std::vector<int64_t> lengths;
      for (int32_t s : g.seqs) tok += len[s], ms += c.seq_ms(len[s], g.size), lengths.push_back(len[s]);
      groups.push_back({{"first", g.first}, {"size", g.size}, {"seqs", g.seqs}, {"lengths", lengths},
                        {"tokens", tok}, {"ms", ms}});
    }
    // What no plan of these sequences in one micro-batch beats (lower_bound.h): the
    // plan's own micro-batches against their split.
    const double bound = plan_micro_batch_lower_bound_ms(c, mb_len);
    mbs.push_back({{"groups", groups},
                   {"makespan_ms", mb_makespan(c, len, mb.groups)},
                   {"lower_bound_ms", bound},
                   {"offload", mb.offload}});
  }
  return {{"micro_batches", mbs}, {"predicted_ms", p.predicted_ms}};
}

// "mb 0: d=16 x1 (1 seq, 190000 tok, 13890 ms) | d=1 x48 (...)": groups by size.
std::string plan_summary(const PlanCosts& costs, const Plan& p, const std::vector<int64_t>& len) {
  std::string s;
  for (size_t m = 0; m < p.micro_batches.size(); ++m) {
    const PlanCosts& c = costs.of(p.micro_batches[m]);
    std::map<int, std::array<double, 4>, std::greater<int>> by_d;  // groups, seqs, tokens, max ms
    for (const PlanGroup& g : p.micro_batches[m].groups) {
      auto& e = by_d[g.size];
      double ms = 0;
      for (int32_t q : g.seqs) e[2] += static_cast<double>(len[q]), ms += c.seq_ms(len[q], g.size);
      e[0] += 1, e[1] += static_cast<double>(g.seqs.size()), e[3] = std::max(e[3], ms);
    }
    s += fmt::format("    mb {}:", m);
    bool first = true;
    for (const auto& [d, e] : by_d) {
      s += fmt::format("{} d={} x{} ({} seq, {} tok, max {:.0f} ms)", first ? "" : " |", d, e[0],
                       e[1], e[2], e[3]);
      first = false;
    }
    s += p.micro_batches[m].offload ? " (offload)\n" : "\n";
  }
  return s;
}

// What one step's batch planned for the three modes gives: its lengths, the plans' stats,
// flexsp's plan and the memory-aware bound.
struct StepPlans {
  std::vector<int64_t> len;
  int64_t tokens = 0, longest = 0;
  PlanStats fs, ss, bs;
  Plan flex;
  int static_size = 0, batch_adaptive_size = 0;
  MemoryBound mlb;
};

StepPlans plan_three(const PlannerContext& ctx, const PlanCosts& costs, std::vector<int64_t> len) {
  StepPlans r;
  for (int64_t l : len) r.tokens += l, r.longest = std::max(r.longest, l);
  r.len = std::move(len);
  PlannerContext c = ctx;
  r.flex = plan_step(c, r.len, &r.fs);
  c.mode = SpMode::static_sp;
  r.static_size = plan_step(c, r.len, &r.ss).micro_batches.front().groups.front().size;
  c.mode = SpMode::batch_adaptive;
  r.batch_adaptive_size = plan_step(c, r.len, &r.bs).micro_batches.front().groups.front().size;
  r.mlb = plan_memory_lower_bound(costs, r.len);
  return r;
}

nlohmann::json step_json(int64_t k, const StepPlans& p) {
  const PlanStats &fs = p.fs, &ss = p.ss, &bs = p.bs;
  return {{"step", k},
          {"sequences", p.len.size()},
          {"tokens", p.tokens},
          {"longest", p.longest},
          {"flexsp_ms", fs.predicted_ms},
          {"static_ms", ss.predicted_ms},
          {"batch_adaptive_ms", bs.predicted_ms},
          {"speedup_vs_static", ss.predicted_ms / fs.predicted_ms},
          {"speedup_vs_batch_adaptive", bs.predicted_ms / fs.predicted_ms},
          {"solve_ms", fs.solve_ms},
          {"lower_bound_ms", fs.lower_bound_ms},
          {"greedy_ms", fs.greedy_ms},
          {"micro_batches", fs.micro_batches},
          {"milp_solved", fs.milp_solved},
          {"milp_timed_out", fs.milp_timed_out},
          {"milp_improved", fs.milp_improved},
          {"exchanges", fs.exchanges},
          {"partners", fs.partners},
          {"dissolved", fs.dissolved},
          {"unloaded", fs.unloaded},
          {"resplit", fs.resplit},
          {"resized", fs.resized},
          {"static_sp_size", p.static_size},
          {"batch_adaptive_sp_size", p.batch_adaptive_size},
          // what no plan can beat: the speedups a plan at the bound would get
          {"static_over_lower_bound", ss.predicted_ms / fs.lower_bound_ms},
          {"batch_adaptive_over_lower_bound", bs.predicted_ms / fs.lower_bound_ms},
          // the memory-aware bound (lib/planner/analysis/lower_bound.h): never below the other
          {"memory_lower_bound_ms", p.mlb.ms},
          {"memory_lower_bound_micro_batches", p.mlb.micro_batches},
          {"flexsp_over_memory_lower_bound", fs.predicted_ms / p.mlb.ms}};
}

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }

nlohmann::json strong_runs_json(const StrongBound& sb) {
  nlohmann::json runs = nlohmann::json::array();
  for (const StrongBoundRun& r : sb.runs)
    runs.push_back({{"micro_batches", r.micro_batches}, {"pooled", r.pooled}, {"status", r.status},
                    {"bound_ms", finite_or_null(r.bound_ms)}, {"incumbent_ms", finite_or_null(r.incumbent_ms)},
                    {"solve_ms", r.solve_ms}, {"incumbent_makespans_ms", r.makespans_ms},
                    {"incumbent_groups", r.incumbent_groups},
                    {"incumbent_split_planned_ms", finite_or_null(r.split_plan_ms)}});
  return runs;
}

// The planner started from the strong bound's best incumbent: its long pieces (the rest
// the planner's own split), then the local search and MILPs -- is the gap the split or the
// bound? -- and from its whole split (the other sequences as its shares deal them).
void seeded_plans_json(const PlannerContext& ctx, const PlanCosts& costs, const StepPlans& p,
                       const StrongBoundRun& inc, nlohmann::json& j) {
  const std::vector<int64_t>& len = p.len;
  PlannerContext sc = ctx;
  sc.seed_split = inc.long_pieces;
  PlanStats seeded;
  plan_step(sc, len, &seeded);
  std::vector<std::vector<int>> sizes;  // the seeded split before the local search:
  std::vector<std::vector<int32_t>> mbs;  // under the first of the planner's caps that fits
  for (int64_t tc : mb_token_caps(costs, p.tokens, static_cast<int>(inc.long_pieces.size())))
    if (mbs.empty()) mbs = mb_split_seeded(costs, len, inc.long_pieces, tc, &sizes);
  nlohmann::json split_ms = nlohmann::json::array();
  for (size_t k = 0; k < mbs.size(); ++k) {
    const MbPlan q = mb_plan_seeded(costs, len, mbs[k], inc.long_pieces[k].size(), sizes[k]);
    split_ms.push_back(q.ok ? nlohmann::json(q.makespan_ms) : nlohmann::json());
  }
  j["strong_bound_seeded_split_makespans_ms"] = std::move(split_ms);
  nlohmann::json seed = nlohmann::json::array();  // per micro-batch: [tokens, size] of each piece
  for (const auto& mb : inc.long_pieces) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const SeedPiece& q : mb) pieces.push_back({len[static_cast<size_t>(q.seq)], q.size});
    seed.push_back(std::move(pieces));
  }
  j["strong_bound_seed"] = std::move(seed);
  j["strong_bound_seeded_plan_ms"] = seeded.predicted_ms;
  j["strong_bound_seeded_micro_batches"] = seeded.micro_batches;
  j["strong_bound_seeded_greedy_ms"] = seeded.greedy_ms;
  j["strong_bound_seeded_split_fits"] = !mbs.empty();
  j["strong_bound_seeded_used"] = seeded.seeded;
  j["strong_bound_seeded_over_memory_lower_bound"] = seeded.predicted_ms / p.mlb.ms;
  for (size_t k = 0; k < sc.seed_split.size(); ++k)
    for (int32_t q : inc.fluid_split[k]) sc.seed_split[k].push_back({q, 0});
  PlanStats whole;
  plan_step(sc, len, &whole);
  j["strong_bound_whole_seeded_plan_ms"] = whole.predicted_ms;
  j["strong_bound_whole_seeded_micro_batches"] = whole.micro_batches;
  j["strong_bound_whole_seeded_used"] = whole.seeded;
  j["strong_bound_whole_seeded_over_memory_lower_bound"] = whole.predicted_ms / p.mlb.ms;
}

// --strong-bound-ms: the bound, its runs and the plans seeded by its incumbent into j.
StrongBound strong_bound_json(const PlanCommand& a, const PlannerContext& ctx, const PlanCosts& costs,
                              const StepPlans& p, nlohmann::json& j) {
  StrongBoundOptions so = a.strong;
  so.time_limit_ms = a.strong_ms;
  const StrongBound sb = plan_strong_lower_bound(costs, p.len, plan_sum_ms(costs, p.flex, p.len), so);
  const StrongBoundRun* inc = nullptr;
  for (const StrongBoundRun& r : sb.runs)
    if (!r.long_pieces.empty() && (!inc || r.incumbent_ms < inc->incumbent_ms)) inc = &r;
  if (inc) seeded_plans_json(ctx, costs, p, *inc, j);
  j["strong_lower_bound_ms"] = sb.ms;
  j["strong_lower_bound_proven"] = sb.proven;
  j["strong_lower_bound_runs"] = strong_runs_json(sb);
  j["strong_lower_bound_long_sequences"] = sb.long_sequences;
  j["flexsp_over_strong_lower_bound"] = p.fs.predicted_ms / sb.ms;
  return sb;
}

// --box-bound-ms: the bound and its counts into j.
BoxBound box_bound_json(const PlanCommand& a, const PlanCosts& costs, const StepPlans& p, nlohmann::json& j) {
  BoxBoundOptions bo;
  bo.time_limit_ms = a.box_ms;
  const BoxBound bb = plan_box_lower_bound(costs, p.len, plan_sum_ms(costs, p.flex, p.len), bo);
  nlohmann::json counts = nlohmann::json::array();
  for (const BoxBoundCount& n : bb.counts)
    counts.push_back({{"micro_batches", n.micro_batches}, {"bound_ms", n.bound_ms}, {"boxes", n.boxes}});
  j["box_lower_bound_ms"] = bb.ms;
  j["box_lower_bound_closed"] = bb.closed;
  j["box_lower_bound_counts"] = counts;
  j["box_lower_bound_boxes"] = bb.boxes;
  j["box_lower_bound_solve_ms"] = bb.solve_ms;
  j["flexsp_over_box_lower_bound"] = p.fs.predicted_ms / bb.ms;
  return bb;
}

void print_header(const PlanCommand& a, const PlannerContext& ctx, const PlanCosts& costs) {
  const PlanArgs& pa = a.plan;
  std::printf("flexsp plan: %d GPUs (%d per node), tp %d, %s, %.0f GB/GPU -> %lld tokens per "
              "device of %d GPU(s) (model states %.2f GB per GPU, ZeRO-%d)\n",
              a.gpus, pa.gpus_per_node, pa.tp, model_config_summary(ctx.model).c_str(), pa.mem_gb,
              static_cast<long long>(costs.tokens_per_rank), pa.tp, costs.model_state_gb, pa.zero);
  std::string rings;
  if (costs.max_size() > costs.ulysses_max)
    rings = costs.wide_from > 0 ? fmt::format(", up to {} with a ring (only for sequences over {} tokens)",
                                              costs.max_size(), costs.wide_from)
                                : fmt::format(", up to {} with a ring (any sequence; --ring-groups needed: only "
                                              "where memory requires)", costs.max_size());
  std::printf("cp_mode %s: groups up to %d devices run Ulysses%s\n", pa.cp_mode.c_str(), costs.ulysses_max,
              rings.c_str());
  if (pa.pp > 1)
    std::printf("pipeline: %s; the plan is one stage's (%d devices), every stage runs it on %d of %d layers; "
                "step = (micro-batch times x %.3f + stage-boundary p2p) x (units + %d) / units\n",
                pp_describe(ctx.pipeline).c_str(), costs.world, pp_stage_layers(ctx.pipeline, ctx.model.layers),
                ctx.model.layers, costs.stage_share, pa.pp - 1);
  std::printf("cost model: %s; static SP uses d=%d (longest piece %lld tokens)\n\n", ctx.cost.source.c_str(),
              plan_static_size(ctx, costs, {}), static_cast<long long>(ctx.max_seq_len));
}

void print_step(int64_t k, const PlanCommand& a, const PlanCosts& costs, const StepPlans& p, const StrongBound& sb,
                const BoxBound& bb) {
  const PlanStats &fs = p.fs, &ss = p.ss, &bs = p.bs;
  std::printf("step %lld: %zu seqs, %lld tokens, longest %lld\n", static_cast<long long>(k), p.len.size(),
              static_cast<long long>(p.tokens), static_cast<long long>(p.longest));
  std::printf("  flexsp %.1f ms (%d mb, solve %.1f ms, %d exchanges, %d partners, %d dissolved, milp %d/%d solved, "
              "%d improved, %d timed out, %d resized)  static %.1f ms (d=%d)  batch_adaptive %.1f ms (d=%d)\n",
              fs.predicted_ms, fs.micro_batches, fs.solve_ms, fs.exchanges, fs.partners, fs.dissolved,
              fs.milp_solved, fs.micro_batches, fs.milp_improved, fs.milp_timed_out, fs.resized, ss.predicted_ms,
              p.static_size, bs.predicted_ms, p.batch_adaptive_size);
  std::printf("  speedup %.3fx vs static, %.3fx vs batch_adaptive; lower bound %.1f ms (gap %.1f%%), "
              "memory-aware %.1f ms (gap %.1f%%, >= %d micro-batches)\n",
              ss.predicted_ms / fs.predicted_ms, bs.predicted_ms / fs.predicted_ms, fs.lower_bound_ms,
              100.0 * (fs.predicted_ms / fs.lower_bound_ms - 1), p.mlb.ms, 100.0 * (fs.predicted_ms / p.mlb.ms - 1),
              p.mlb.micro_batches);
  if (a.strong_ms > 0) {
    std::printf("  strong bound %.1f ms (gap %.1f%%, %s; %d long sequences in %d classes, %d short classes):",
                sb.ms, 100.0 * (fs.predicted_ms / sb.ms - 1),
                sb.proven ? "proven optimum of the relaxation" : "CBC's best bound at the limit", sb.long_sequences,
                sb.long_classes, sb.short_classes);
    for (const StrongBoundRun& r : sb.runs)
      std::printf(" [%d mb%s: %s, bound %.1f, incumbent %.1f ms, %.0f ms]", r.micro_batches, r.pooled ? "+" : "",
                  r.status.c_str(), r.bound_ms, r.incumbent_ms, r.solve_ms);
    std::printf("\n");
  }
  if (a.box_ms > 0) {
    std::printf("  box bound %.1f ms (gap %.1f%%, %s; %d boxes, %d classes, %.0f ms):", bb.ms,
                100.0 * (fs.predicted_ms / bb.ms - 1), bb.closed ? "closed: no plan is faster" : "least open box",
                bb.boxes, bb.classes, bb.solve_ms);
    for (const BoxBoundCount& n : bb.counts) std::printf(" [%d mb: %.1f ms, %d boxes]", n.micro_batches, n.bound_ms, n.boxes);
    std::printf("\n");
  }
  std::printf("%s", plan_summary(costs, p.flex, p.len).c_str());
}

double total(const std::vector<double>& v) {
  double t = 0;
  for (double x : v) t += x;
  return t;
}

// Over the whole run (total time, i.e. throughput) next to the medians per step.
void print_summary(const PlanCommand& a, std::map<std::string, std::vector<double>>& cols) {
  std::printf("\nsummary over %lld steps:\n  %-31s %12s %12s %12s\n", static_cast<long long>(a.plan.steps),
              "field", "median", "min", "max");
  std::vector<const char*> fields(std::begin(kColumns), std::end(kColumns));
  if (a.strong_ms > 0) fields.push_back("strong_lower_bound_ms"), fields.push_back("flexsp_over_strong_lower_bound");
  if (a.box_ms > 0) fields.push_back("box_lower_bound_ms"), fields.push_back("flexsp_over_box_lower_bound");
  for (const char* f : fields) {
    const auto& v = cols[f];
    std::printf("  %-31s %12.3f %12.3f %12.3f\n", f, median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  }
  std::printf("  over the run (total time): %.3fx vs static, %.3fx vs batch_adaptive\n",
              total(cols["static_ms"]) / total(cols["flexsp_ms"]),
              total(cols["batch_adaptive_ms"]) / total(cols["flexsp_ms"]));
}

nlohmann::json summary_json(const PlanCommand& a, const PlanCosts& costs,
                            nlohmann::json steps, std::map<std::string, std::vector<double>>& cols) {
  const PlanArgs& pa = a.plan;
  nlohmann::json summary;
  for (const auto& [k, v] : cols) summary[k] = median(v);
  summary["steps"] = pa.steps;
  summary["run_speedup_vs_static"] = total(cols["static_ms"]) / total(cols["flexsp_ms"]);
  summary["run_speedup_vs_batch_adaptive"] = total(cols["batch_adaptive_ms"]) / total(cols["flexsp_ms"]);
  return {{"steps", std::move(steps)}, {"summary", summary}, {"gpus", a.gpus}, {"tp", pa.tp},
          {"tokens_per_device", costs.tokens_per_rank}, {"cp_mode", pa.cp_mode},
          {"ulysses_max_devices", costs.ulysses_max}, {"max_group_devices", costs.max_size()}, {"pp", pa.pp},
          {"pp_schedule", pa.pp_schedule}, {"seq_chunks", pa.seq_chunks}, {"stage_devices", costs.world},
          {"model_state_gb", costs.model_state_gb}};
}

// A note on stderr where the layout priced is one flexsp train does not run yet.
void note_priced_only(const PlanArgs& a, const PlannerContext& ctx) {
  SearchLayout as_run;
  as_run.tp = a.tp;
  as_run.zero = a.zero;
  as_run.pipeline = ctx.pipeline;
  as_run.cp_mode = ctx.cp_mode;
  std::string why;
  if (!layout_runnable_now(as_run, &why))
    std::fprintf(stderr, "flexsp: note: priced only: the runtime does not run this yet: %s; flexsp plan --search "
                 "ranks what flexsp train runs\n", why.c_str());
}

void check_plan_command(const PlanCommand& a) {
  check_plan_args(a.plan, "plan");
  FLEXSP_CHECK(a.gpus >= 1, "--gpus: must be positive, got {}", a.gpus);
  FLEXSP_CHECK(a.strong_ms >= 0, "--strong-bound-ms: must be >= 0, got {}", a.strong_ms);
  FLEXSP_CHECK(a.box_ms >= 0, "--box-bound-ms: must be >= 0, got {}", a.box_ms);
  FLEXSP_CHECK(a.strong.long_fraction >= 0, "--strong-bound-long-fraction: must be >= 0, got {}",
               a.strong.long_fraction);
  FLEXSP_CHECK(a.strong.explicit_extra >= 0, "--strong-bound-extra: must be >= 0, got {}", a.strong.explicit_extra);
  FLEXSP_CHECK(a.gpus % a.plan.gpus_per_node == 0, "--gpus-per-node: {} must be positive and divide --gpus {}",
               a.plan.gpus_per_node, a.gpus);
}

// --search: the layouts around the plan (app/search_args.h).
void run_plan_search(const PlanCommand& a, const PlanInputs& in) {
  FLEXSP_CHECK(a.peak_tflops > 0, "--peak-tflops: must be positive, got {}", a.peak_tflops);
  const int per_node = a.plan.gpus_per_node;
  const SimFabric fabric = sim_fabric(in.cost, per_node, 0, 0);
  const SimFixedSplit fixed = sim_fixed_split(in.model, in.cost, per_node, fabric, sim_default_fixed_ref_gpus(in.cost));
  run_search(a.plan, a.search, make_search_setup(a.plan, a.search, in, a.gpus, 512, fabric, fixed, a.peak_tflops), in);
}

void run_plan(const PlanCommand& a) {
  check_plan_command(a);
  const PlanInputs in = load_plan_inputs(a.plan);
  if (a.search.search) return run_plan_search(a, in);
  PlannerContext ctx = plan_context(a.plan, in, a.gpus);
  note_priced_only(a.plan, ctx);
  if (a.exact) ctx.milp_max_columns = int64_t{1} << 40, ctx.milp_max_nodes = 1 << 30;
  const PlanCosts costs = plan_costs(ctx);
  BatchSampler sampler(in.docs, plan_batch(a.plan, 512));
  if (!a.plan.json) print_header(a, ctx, costs);
  nlohmann::json steps = nlohmann::json::array();
  std::map<std::string, std::vector<double>> cols;
  for (int64_t k = 0; k < a.plan.steps; ++k) {
    std::vector<int64_t> len;
    for (const SeqRef& r : sampler.next()) len.push_back(r.length);
    const StepPlans p = plan_three(ctx, costs, std::move(len));
    nlohmann::json j = step_json(k, p);
    for (const char* f : kColumns) cols[f].push_back(j[f].get<double>());
    StrongBound sb;
    if (a.strong_ms > 0) {
      sb = strong_bound_json(a, ctx, costs, p, j);
      cols["strong_lower_bound_ms"].push_back(sb.ms);
      cols["flexsp_over_strong_lower_bound"].push_back(p.fs.predicted_ms / sb.ms);
    }
    BoxBound bb;
    if (a.box_ms > 0) {
      bb = box_bound_json(a, costs, p, j);
      cols["box_lower_bound_ms"].push_back(bb.ms);
      cols["flexsp_over_box_lower_bound"].push_back(p.fs.predicted_ms / bb.ms);
    }
    if (a.plan.json) {
      j["plan"] = plan_json(costs, p.flex, p.len);
      steps.push_back(std::move(j));
    } else {
      print_step(k, a, costs, p, sb, bb);
    }
  }
  if (a.plan.json) {
    std::printf("%s\n", summary_json(a, costs, std::move(steps), cols).dump().c_str());
    return;
  }
  print_summary(a, cols);
}

}  // namespace

int cmd_plan(const CommandContext& ctx, const Args& args) {
  PlanCommand a;
  const po::options_description opts = plan_options(a);
  return run_on_rank0(ctx, args, "plan", opts,
                      "usage: flexsp plan (--data FILE | --lengths FILE) [options]\n\n"
                      "Plans each step's batch for flexsp, static and batch_adaptive SP and "
                      "prints predicted step times (ZeRO over a stage's GPUs: --zero, 3 by default). --cp-mode lets groups "
                      "grow past the heads with a ring (--ring-groups says for which sequences); "
                      "--pp plans one pipeline stage and prices the bubble. With --search: ranks the "
                      "layouts around the plan (tp, pipeline stages and schedule, ZeRO stage and shard "
                      "groups, activation checkpointing, micro-batch tokens, cp mode; --tp, --pp and "
                      "--cp-mode are then searched) by predicted tokens/s and writes the best for flexsp "
                      "train (--search-ini).",
                      [&] { run_plan(a); });
}

}  // namespace flexsp
