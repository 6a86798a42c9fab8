// flexsp plan: the planner alone (docs/commands.md, issue 5). Draws each step's global
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

po::options_description plan_options(PlanArgs& a, int& gpus, bool& exact, SearchArgs& search,
                                     double& peak_tflops, int& strong_ms,
                                     StrongBoundOptions& strong, int& box_ms) {
  po::options_description o("flexsp plan options");
  o.add_options()
      ("help,h", "this help")
      ("gpus", po::value(&gpus)->default_value(gpus), "number of GPUs (ranks)")
      ("exact-milp", po::bool_switch(&exact),
       "also run the exact slot MILP (one column set per group) after the class MILP, within "
       "the time limit, and keep its best plan when the limit stops it: the reference for how "
       "far the plans are from CBC's best (depends on the clock)")
      ("strong-bound-ms", po::value(&strong_ms)->default_value(strong_ms),
       "also compute the strong lower bound (a MILP over micro-batch makespans, groups and "
       "memory: lib/planner/analysis/strong_bound.h) with CBC for up to this many ms per step; its proven "
       "bound is valid at the limit (0: off). --json also gives the planner's plan started from "
       "CBC's incumbent split (strong_bound_seeded_*, strong_bound_whole_seeded_*)")
      ("strong-bound-long-fraction", po::value(&strong.long_fraction)->default_value(strong.long_fraction),
       "with --strong-bound-ms: sequences whose least time is at least this share of an average "
       "micro-batch's makespan get integer counts, the rest are fluid (any value is valid; "
       "fewer integers let CBC close the MILP sooner)")
      ("strong-bound-extra", po::value(&strong.explicit_extra)->default_value(strong.explicit_extra),
       "with --strong-bound-ms: micro-batch counts M* .. M*+this modelled one MILP each, the "
       "last pooling any more")
      ("box-bound-ms", po::value(&box_ms)->default_value(box_ms),
       "also compute the box lower bound (a branch and bound over the micro-batch makespans, "
       "an LP of groups, memory and device-time per box: lib/planner/analysis/box_bound.h) for up to "
       "this many ms per step; valid at the limit (0: off)");
  add_plan_options(o, a, "512");
  add_search_options(o, search);
  o.add_options()("peak-tflops", po::value(&peak_tflops)->default_value(peak_tflops),
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

nlohmann::json plan_json(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& len) {
  nlohmann::json mbs = nlohmann::json::array();
  for (const PlanMicroBatch& mb : p.micro_batches) {
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
                   {"lower_bound_ms", bound}});
  }
  return {{"micro_batches", mbs}, {"predicted_ms", p.predicted_ms}};
}

// "mb 0: d=16 x1 (1 seq, 190000 tok, 13890 ms) | d=1 x48 (...)": groups by size.
std::string plan_summary(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& len) {
  std::string s;
  for (size_t m = 0; m < p.micro_batches.size(); ++m) {
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
    s += "\n";
  }
  return s;
}

void run_plan(const PlanArgs& a, int gpus, bool exact, const SearchArgs& search, double peak_tflops,
              int strong_ms, StrongBoundOptions so, int box_ms) {
  check_plan_args(a, "plan");
  FLEXSP_CHECK(gpus >= 1, "--gpus: must be positive, got {}", gpus);
  FLEXSP_CHECK(strong_ms >= 0, "--strong-bound-ms: must be >= 0, got {}", strong_ms);
  FLEXSP_CHECK(box_ms >= 0, "--box-bound-ms: must be >= 0, got {}", box_ms);
  FLEXSP_CHECK(so.long_fraction >= 0, "--strong-bound-long-fraction: must be >= 0, got {}", so.long_fraction);
  FLEXSP_CHECK(so.explicit_extra >= 0, "--strong-bound-extra: must be >= 0, got {}", so.explicit_extra);
  FLEXSP_CHECK(gpus % a.gpus_per_node == 0,
               "--gpus-per-node: {} must be positive and divide --gpus {}", a.gpus_per_node, gpus);
  const PlanInputs in = load_plan_inputs(a);
  if (search.search) {
    FLEXSP_CHECK(peak_tflops > 0, "--peak-tflops: must be positive, got {}", peak_tflops);
    const SimFabric fabric = sim_fabric(in.cost, a.gpus_per_node, 0, 0);
    const SimFixedSplit fixed =
        sim_fixed_split(in.model, in.cost, a.gpus_per_node, fabric, sim_default_fixed_ref_gpus(in.cost));
    run_search(a, search, make_search_setup(a, search, in, gpus, 512, fabric, fixed, peak_tflops), in);
    return;
  }
  PlannerContext ctx = plan_context(a, in, gpus);
  SearchLayout as_run;  // what is priced: the ZeRO stage, the pipeline and cp mode asked for
  as_run.tp = a.tp;
  as_run.zero = a.zero;
  as_run.pipeline = ctx.pipeline;
  as_run.cp_mode = ctx.cp_mode;
  std::string why;
  if (!layout_runnable_now(as_run, &why))
    std::fprintf(stderr, "flexsp: note: priced only: the runtime does not run this yet: %s; flexsp plan --search "
                 "ranks what flexsp train runs\n", why.c_str());
  if (exact) ctx.milp_max_columns = int64_t{1} << 40, ctx.milp_max_nodes = 1 << 30;
  const PlanCosts costs = plan_costs(ctx);

  BatchSampler sampler(in.docs, plan_batch(a, 512));

  if (!a.json) {
    std::printf("flexsp plan: %d GPUs (%d per node), tp %d, %s, %.0f GB/GPU -> %lld tokens per "
                "device of %d GPU(s) (model states %.2f GB per GPU, ZeRO-%d)\n",
                gpus, a.gpus_per_node, a.tp, model_config_summary(ctx.model).c_str(), a.mem_gb,
                static_cast<long long>(costs.tokens_per_rank), a.tp, costs.model_state_gb, a.zero);
    std::printf("cp_mode %s: groups up to %d devices run Ulysses%s\n", a.cp_mode.c_str(), costs.ulysses_max,
                costs.max_size() > costs.ulysses_max
                    ? (costs.wide_from > 0
                           ? fmt::format(", up to {} with a ring (only for sequences over {} tokens)",
                                         costs.max_size(), costs.wide_from)
                           : fmt::format(", up to {} with a ring (any sequence; --ring-groups needed: only where memory requires)", costs.max_size()))
                          .c_str()
                    : "");
    if (a.pp > 1)
      std::printf("pipeline: %s; the plan is one stage's (%d devices), every stage runs it on %d of %d layers; "
                  "step = (micro-batch times x %.3f + stage-boundary p2p) x (units + %d) / units\n",
                  pp_describe(ctx.pipeline).c_str(), costs.world, pp_stage_layers(ctx.pipeline, ctx.model.layers),
                  ctx.model.layers, costs.stage_share, a.pp - 1);
    std::printf("cost model: %s; static SP uses d=%d (longest piece %lld tokens)\n\n",
                ctx.cost.source.c_str(), plan_static_size(ctx, costs, {}),
                static_cast<long long>(ctx.max_seq_len));
  }
  nlohmann::json steps = nlohmann::json::array();
  std::map<std::string, std::vector<double>> cols;
  for (int64_t k = 0; k < a.steps; ++k) {
    std::vector<int64_t> len;
    int64_t tokens = 0, longest = 0;
    for (const SeqRef& r : sampler.next()) {
      len.push_back(r.length);
      tokens += r.length;
      longest = std::max(longest, r.length);
    }
    PlanStats fs, ss, bs;
    PlannerContext c = ctx;
    const Plan flex = plan_step(c, len, &fs);
    c.mode = SpMode::static_sp;
    const Plan stat = plan_step(c, len, &ss);
    c.mode = SpMode::batch_adaptive;
    const Plan bada = plan_step(c, len, &bs);
    const double sp_s = ss.predicted_ms / fs.predicted_ms, sp_b = bs.predicted_ms / fs.predicted_ms;
    const MemoryBound mlb = plan_memory_lower_bound(costs, len);
    const int bd = bada.micro_batches.front().groups.front().size;
    const int sd = stat.micro_batches.front().groups.front().size;
    nlohmann::json j = {{"step", k},
                        {"sequences", len.size()},
                        {"tokens", tokens},
                        {"longest", longest},
                        {"flexsp_ms", fs.predicted_ms},
                        {"static_ms", ss.predicted_ms},
                        {"batch_adaptive_ms", bs.predicted_ms},
                        {"speedup_vs_static", sp_s},
                        {"speedup_vs_batch_adaptive", sp_b},
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
                        {"resplit", fs.resplit},
                        {"resized", fs.resized},
                        {"static_sp_size", sd},
                        {"batch_adaptive_sp_size", bd},
                        // what no plan can beat: the speedups a plan at the bound would get
                        {"static_over_lower_bound", ss.predicted_ms / fs.lower_bound_ms},
                        {"batch_adaptive_over_lower_bound", bs.predicted_ms / fs.lower_bound_ms},
                        // the memory-aware bound (lib/planner/analysis/lower_bound.h): never below the other
                        {"memory_lower_bound_ms", mlb.ms},
                        {"memory_lower_bound_micro_batches", mlb.micro_batches},
                        {"flexsp_over_memory_lower_bound", fs.predicted_ms / mlb.ms}};
    for (const char* f : kColumns) cols[f].push_back(j[f].get<double>());
    StrongBound sb;
    if (strong_ms > 0) {
      so.time_limit_ms = strong_ms;
      sb = plan_strong_lower_bound(costs, len, plan_sum_ms(costs, flex, len), so);
      nlohmann::json runs = nlohmann::json::array();
      for (const StrongBoundRun& r : sb.runs)
        runs.push_back({{"micro_batches", r.micro_batches}, {"pooled", r.pooled}, {"status", r.status},
                        {"bound_ms", std::isfinite(r.bound_ms) ? nlohmann::json(r.bound_ms) : nlohmann::json()},
                        {"incumbent_ms", std::isfinite(r.incumbent_ms) ? nlohmann::json(r.incumbent_ms) : nlohmann::json()},
                        {"solve_ms", r.solve_ms}, {"incumbent_makespans_ms", r.makespans_ms},
                        {"incumbent_groups", r.incumbent_groups},
                        {"incumbent_split_planned_ms",
                         std::isfinite(r.split_plan_ms) ? nlohmann::json(r.split_plan_ms) : nlohmann::json()}});
      // The planner started from the incumbent's long pieces (the rest its own split), then
      // its local search and MILPs: is the gap the split or the bound (issue 17)?
      const StrongBoundRun* inc = nullptr;
      for (const StrongBoundRun& r : sb.runs)
        if (!r.long_pieces.empty() && (!inc || r.incumbent_ms < inc->incumbent_ms)) inc = &r;
      if (inc) {
        PlannerContext sc = ctx;
        sc.seed_split = inc->long_pieces;
        PlanStats seeded;
        plan_step(sc, len, &seeded);
        std::vector<std::vector<int>> sizes;  // the seeded split before the local search:
        std::vector<std::vector<int32_t>> mbs;  // under the first of the planner's caps that fits
        for (int64_t tc : mb_token_caps(costs, tokens, static_cast<int>(inc->long_pieces.size())))
          if (mbs.empty()) mbs = mb_split_seeded(costs, len, inc->long_pieces, tc, &sizes);
        const bool fits = !mbs.empty();
        nlohmann::json split_ms = nlohmann::json::array();
        for (size_t k = 0; k < mbs.size(); ++k) {
          const MbPlan p = mb_plan_seeded(costs, len, mbs[k], inc->long_pieces[k].size(), sizes[k]);
          split_ms.push_back(p.ok ? nlohmann::json(p.makespan_ms) : nlohmann::json());
        }
        j["strong_bound_seeded_split_makespans_ms"] = std::move(split_ms);
        nlohmann::json seed = nlohmann::json::array();  // per micro-batch: [tokens, size] of each piece
        for (const auto& mb : inc->long_pieces) {
          nlohmann::json pieces = nlohmann::json::array();
          for (const SeedPiece& p : mb) pieces.push_back({len[static_cast<size_t>(p.seq)], p.size});
          seed.push_back(std::move(pieces));
        }
        j["strong_bound_seed"] = std::move(seed);
        j["strong_bound_seeded_plan_ms"] = seeded.predicted_ms;
        j["strong_bound_seeded_micro_batches"] = seeded.micro_batches;
        j["strong_bound_seeded_greedy_ms"] = seeded.greedy_ms;
        j["strong_bound_seeded_split_fits"] = fits;
        j["strong_bound_seeded_used"] = seeded.seeded;
        j["strong_bound_seeded_over_memory_lower_bound"] = seeded.predicted_ms / mlb.ms;
        // And from the incumbent's whole split (the other sequences as its shares deal them).
        for (size_t k = 0; k < sc.seed_split.size(); ++k)
          for (int32_t q : inc->fluid_split[k]) sc.seed_split[k].push_back({q, 0});
        PlanStats whole;
        plan_step(sc, len, &whole);
        j["strong_bound_whole_seeded_plan_ms"] = whole.predicted_ms;
        j["strong_bound_whole_seeded_micro_batches"] = whole.micro_batches;
        j["strong_bound_whole_seeded_used"] = whole.seeded;
        j["strong_bound_whole_seeded_over_memory_lower_bound"] = whole.predicted_ms / mlb.ms;
      }
      j["strong_lower_bound_ms"] = sb.ms;
      j["strong_lower_bound_proven"] = sb.proven;
      j["strong_lower_bound_runs"] = runs;
      j["strong_lower_bound_long_sequences"] = sb.long_sequences;
      j["flexsp_over_strong_lower_bound"] = fs.predicted_ms / sb.ms;
      cols["strong_lower_bound_ms"].push_back(sb.ms);
      cols["flexsp_over_strong_lower_bound"].push_back(fs.predicted_ms / sb.ms);
    }
    BoxBound bb;
    if (box_ms > 0) {
      BoxBoundOptions bo;
      bo.time_limit_ms = box_ms;
      bb = plan_box_lower_bound(costs, len, plan_sum_ms(costs, flex, len), bo);
      nlohmann::json counts = nlohmann::json::array();
      for (const BoxBoundCount& n : bb.counts)
        counts.push_back({{"micro_batches", n.micro_batches}, {"bound_ms", n.bound_ms}, {"boxes", n.boxes}});
      j["box_lower_bound_ms"] = bb.ms;
      j["box_lower_bound_closed"] = bb.closed;
      j["box_lower_bound_counts"] = counts;
      j["box_lower_bound_boxes"] = bb.boxes;
      j["box_lower_bound_solve_ms"] = bb.solve_ms;
      j["flexsp_over_box_lower_bound"] = fs.predicted_ms / bb.ms;
      cols["box_lower_bound_ms"].push_back(bb.ms);
      cols["flexsp_over_box_lower_bound"].push_back(fs.predicted_ms / bb.ms);
    }
    if (a.json) {
      j["plan"] = plan_json(costs, flex, len);
      steps.push_back(std::move(j));
      continue;
    }
    std::printf("step %lld: %zu seqs, %lld tokens, longest %lld\n", static_cast<long long>(k),
                len.size(), static_cast<long long>(tokens), static_cast<long long>(longest));
    std::printf("  flexsp %.1f ms (%d mb, solve %.1f ms, %d exchanges, %d partners, %d dissolved, milp %d/%d solved, "
                "%d improved, %d timed out, %d resized)  static %.1f ms (d=%d)  batch_adaptive %.1f ms (d=%d)\n",
                fs.predicted_ms, fs.micro_batches, fs.solve_ms, fs.exchanges, fs.partners, fs.dissolved,
                fs.milp_solved, fs.micro_batches,
                fs.milp_improved, fs.milp_timed_out, fs.resized, ss.predicted_ms, sd, bs.predicted_ms, bd);
    std::printf("  speedup %.3fx vs static, %.3fx vs batch_adaptive; lower bound %.1f ms (gap %.1f%%), "
                "memory-aware %.1f ms (gap %.1f%%, >= %d micro-batches)\n",
                sp_s, sp_b, fs.lower_bound_ms, 100.0 * (fs.predicted_ms / fs.lower_bound_ms - 1), mlb.ms,
                100.0 * (fs.predicted_ms / mlb.ms - 1), mlb.micro_batches);
    if (strong_ms > 0) {
      std::printf("  strong bound %.1f ms (gap %.1f%%, %s; %d long sequences in %d classes, %d short classes):",
                  sb.ms, 100.0 * (fs.predicted_ms / sb.ms - 1), sb.proven ? "proven optimum of the relaxation" : "CBC's best bound at the limit",
                  sb.long_sequences, sb.long_classes, sb.short_classes);
      for (const StrongBoundRun& r : sb.runs)
        std::printf(" [%d mb%s: %s, bound %.1f, incumbent %.1f ms, %.0f ms]", r.micro_batches, r.pooled ? "+" : "",
                    r.status.c_str(), r.bound_ms, r.incumbent_ms, r.solve_ms);
      std::printf("\n");
    }
    if (box_ms > 0) {
      std::printf("  box bound %.1f ms (gap %.1f%%, %s; %d boxes, %d classes, %.0f ms):", bb.ms,
                  100.0 * (fs.predicted_ms / bb.ms - 1), bb.closed ? "closed: no plan is faster" : "least open box",
                  bb.boxes, bb.classes, bb.solve_ms);
      for (const BoxBoundCount& n : bb.counts) std::printf(" [%d mb: %.1f ms, %d boxes]", n.micro_batches, n.bound_ms, n.boxes);
      std::printf("\n");
    }
    std::printf("%s", plan_summary(costs, flex, len).c_str());
  }
  // Over the whole run (total time, i.e. throughput) next to the medians per step.
  auto total = [&](const char* f) {
    double t = 0;
    for (double x : cols[f]) t += x;
    return t;
  };
  const double run_vs_static = total("static_ms") / total("flexsp_ms");
  const double run_vs_bada = total("batch_adaptive_ms") / total("flexsp_ms");
  if (a.json) {
    nlohmann::json summary;
    for (const auto& [k, v] : cols) summary[k] = median(v);
    summary["steps"] = a.steps;
    summary["run_speedup_vs_static"] = run_vs_static;
    summary["run_speedup_vs_batch_adaptive"] = run_vs_bada;
    nlohmann::json out = {{"steps", steps}, {"summary", summary}, {"gpus", gpus}, {"tp", a.tp},
                          {"tokens_per_device", costs.tokens_per_rank},
                          {"cp_mode", a.cp_mode}, {"ulysses_max_devices", costs.ulysses_max},
                          {"max_group_devices", costs.max_size()}, {"pp", a.pp},
                          {"pp_schedule", a.pp_schedule}, {"seq_chunks", a.seq_chunks},
                          {"stage_devices", costs.world},
                          {"model_state_gb", costs.model_state_gb}};
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("\nsummary over %lld steps:\n  %-31s %12s %12s %12s\n", static_cast<long long>(a.steps),
              "field", "median", "min", "max");
  std::vector<const char*> fields(std::begin(kColumns), std::end(kColumns));
  if (strong_ms > 0) fields.push_back("strong_lower_bound_ms"), fields.push_back("flexsp_over_strong_lower_bound");
  if (box_ms > 0) fields.push_back("box_lower_bound_ms"), fields.push_back("flexsp_over_box_lower_bound");
  for (const char* f : fields) {
    const auto& v = cols[f];
    std::printf("  %-31s %12.3f %12.3f %12.3f\n", f, median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  }
  std::printf("  over the run (total time): %.3fx vs static, %.3fx vs batch_adaptive\n",
              run_vs_static, run_vs_bada);
}

}  // namespace

int cmd_plan(const CommandContext& ctx, const Args& args) {
  PlanArgs a;
  int gpus = 64;
  bool exact = false;
  SearchArgs search;
  double peak_tflops = 312;
  int strong_ms = 0;
  StrongBoundOptions strong;
  int box_ms = 0;
  const po::options_description opts = plan_options(a, gpus, exact, search, peak_tflops, strong_ms, strong, box_ms);
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
                      [&] { run_plan(a, gpus, exact, search, peak_tflops, strong_ms, strong, box_ms); });
}

}  // namespace flexsp
