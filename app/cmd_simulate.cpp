// flexsp simulate: scaling studies past the hardware at hand (docs/commands.md).
// For each node count of --nodes, plans sampled steps with the cost model on nodes x GPUs
// per node and prints predicted step time, tokens/s, MFU, flexsp's speedups over static and
// batch_adaptive, and weak- and strong-scaling efficiency; --json prints a list of rows,
// --plot draws the scaling plot (app/plot.h). The model -- gradient reduction, the fixed cost
// and how double counting is avoided, the efficiencies -- is in lib/planner/cost/sim_price.h
// and lib/planner/analysis/simulate.h.
//
// Choices here: options as flexsp plan's (app/plan_args.h) with a smaller default run (5
// steps, 100 ms solver limit per step; --time-limit-ms 0 plans greedily, deterministic);
// the base batch defaults to 8 sequences per GPU at the first node count (512 at 64
// GPUs, flexsp plan's default); --fixed-ref-gpus defaults to 64 for the published GPT-7B
// figures (built in, or a file with the same a1, a2 and fixed) and to 0 for any other
// cost model (a `flexsp profile` fit holds no gradient traffic). With --json the rows'
// required keys carry the weak-scaling figures when weak scaling is simulated, else the
// strong ones (weak_scaling_efficiency is then null); "strong_scaling_efficiency" and,
// with both, a "strong" object of the same figures are added.
//
// Runs on one process; under mpirun rank 0 works inside agree(), the others wait.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/options.h"
#include "app/plan_args.h"
#include "app/search_args.h"
#include "app/plot.h"
#include "lib/planner/analysis/simulate.h"
#include "lib/util/error.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace flexsp {

namespace {

struct SimArgs {
  PlanArgs plan;
  std::string nodes = "1,2,4,8,16,32,64,128", scaling = "both", plot;
  int fixed_ref_gpus = -1;
  double peak_tflops = 312, bw_intra = 0, bw_inter = 0;
  SearchArgs search;
};

po::options_description simulate_options(SimArgs& a) {
  a.plan.steps = 5;
  a.plan.time_limit_ms = 100;
  po::options_description o("flexsp simulate options");
  o.add_options()("help,h", "this help");
  add_plan_options(o, a.plan, "8 per GPU at the first node count");
  o.add_options()
      ("nodes", po::value(&a.nodes)->default_value(a.nodes), "node counts, ascending (the first is the baseline)")
      ("scaling", po::value(&a.scaling)->default_value(a.scaling),
       "weak (the batch grows with the GPUs), strong (fixed batch) or both")
      ("peak-tflops", po::value(&a.peak_tflops)->default_value(a.peak_tflops),
       "peak TFLOP/s per GPU for MFU (312: A100 bf16 dense, as the built-in figures)")
      ("bw-intra-gbs", po::value(&a.bw_intra),
       "ring bandwidth per GPU inside a node, GB/s (default: the cost model's all-to-all figure of a "
       "whole node); scales the cost model's intra-node all-to-all table alike")
      ("bw-inter-gbs", po::value(&a.bw_inter),
       "ring bandwidth per GPU across nodes, GB/s (default: the cost model's figure of its largest "
       "inter-node group); scales the inter-node all-to-all table alike")
      ("fixed-ref-gpus", po::value(&a.fixed_ref_gpus),
       "the cost model's fixed cost was measured on N GPUs with ZeRO-3 (its traffic inside); 0: it "
       "holds no gradient traffic (default: 64 for the published GPT-7B figures, else 0)")
      ("plot", po::value(&a.plot), "write the scaling plot (tokens/s against GPUs, efficiency, speedup over static; its CSV next to it)");
  add_search_options(o, a.search);
  return o;
}

std::vector<int> parse_nodes(const std::string& s) {
  std::vector<int> v;
  for (int64_t x : parse_int_list(s, "--nodes", 1, 65536, "a node count (1 to 65536)")) {
    FLEXSP_CHECK(v.empty() || x > v.back(), "--nodes: {} after {}: node counts must ascend", x, v.back());
    v.push_back(static_cast<int>(x));
  }
  return v;
}

nlohmann::ordered_json point_json(const SimPoint& p) {
  return {{"flexsp_step_ms", p.flexsp_ms}, {"static_step_ms", p.static_ms},
          {"batch_adaptive_step_ms", p.batch_adaptive_ms}, {"speedup_vs_static", p.speedup_vs_static},
          {"speedup_vs_batch_adaptive", p.speedup_vs_batch_adaptive}, {"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu}, {"global_batch_seqs", p.seqs}, {"global_batch_tokens", p.tokens},
          {"micro_batches", p.micro_batches}};
}

nlohmann::ordered_json row_json(const SimSetup& s, const SimRow& r) {
  const SimPoint& p = s.weak ? r.weak : r.strong;
  nlohmann::ordered_json j = {{"nodes", r.nodes}, {"gpus", r.gpus}};
  if (!r.infeasible.empty()) {
    // The same keys, null: a reader indexing a figure gets null rather than a KeyError.
    const nlohmann::ordered_json figures = point_json(p);
    for (auto it = figures.begin(); it != figures.end(); ++it) j[it.key()] = nullptr;
    j["weak_scaling_efficiency"] = nullptr;
    if (s.strong) j["strong_scaling_efficiency"] = nullptr;
    j["scaling"] = s.weak ? "weak" : "strong";
    j["infeasible"] = r.infeasible;
    return j;
  }
  j.update(point_json(p));
  j["weak_scaling_efficiency"] = s.weak ? nlohmann::ordered_json(r.weak.efficiency) : nullptr;
  if (s.strong) j["strong_scaling_efficiency"] = r.strong.efficiency;
  j["scaling"] = s.weak ? "weak" : "strong";
  j["fixed_ms_per_micro_batch"] = r.fixed_ms;
  j["grad_sync_ms"] = r.sync_ms;
  if (s.weak && s.strong) j["strong"] = point_json(r.strong);
  return j;
}

std::string table(const std::vector<SimRow>& rows, bool weak) {
  std::string t = fmt::format("{:>5} {:>5} {:>7} {:>10} {:>5} {:>9} {:>9} {:>10} {:>10} {:>10} {:>8} {:>8} {:>11} {:>6} {:>6}\n",
                              "nodes", "gpus", "seqs", "tokens", "mb", "fixed_ms", "sync_ms", "flexsp_ms",
                              "static_ms", "b_a_ms", "vs_stat", "vs_b_a", "tokens/s", "MFU", "eff");
  for (const SimRow& r : rows) {
    const SimPoint& p = weak ? r.weak : r.strong;
    if (!r.infeasible.empty()) {
      t += fmt::format("{:>5} {:>5}  does not fit: {}\n", r.nodes, r.gpus, r.infeasible);
      continue;
    }
    t += fmt::format("{:>5} {:>5} {:>7.0f} {:>10.0f} {:>5.1f} {:>9.1f} {:>9.1f} {:>10.1f} {:>10.1f} {:>10.1f} "
                     "{:>7.3f}x {:>7.3f}x {:>11.4g} {:>6.3f} {:>6.3f}\n",
                     r.nodes, r.gpus, p.seqs, p.tokens, p.micro_batches, r.fixed_ms, r.sync_ms, p.flexsp_ms,
                     p.static_ms, p.batch_adaptive_ms, p.speedup_vs_static, p.speedup_vs_batch_adaptive,
                     p.tokens_per_s, p.mfu, p.efficiency);
  }
  return t;
}

// The plotted series as tools/plot_report.py reads them: every mode of the first scaling,
// and flexsp under strong scaling when both ran.
std::string plot_csv(const SimSetup& s, const std::vector<SimRow>& rows, const std::string& model) {
  std::string c = "ranks,nodes,sp_mode,zero,model,tokens_per_s,step_ms\n";
  auto add = [&](const SimRow& r, const SimPoint& p, const char* mode, const char* scaling, double ms) {
    c += fmt::format("{},{},{} ({}),{},{} (simulated),{:.6g},{:.6g}\n", r.gpus, r.nodes, mode, scaling,
                     s.run.parallel.zero, model, p.tokens / (ms / 1e3), ms);
  };
  const char* first = s.weak ? "weak" : "strong";
  for (const SimRow& r : rows) {
    if (!r.infeasible.empty()) continue;
    const SimPoint& p = s.weak ? r.weak : r.strong;
    add(r, p, "flexsp", first, p.flexsp_ms);
    add(r, p, "static", first, p.static_ms);
    add(r, p, "batch_adaptive", first, p.batch_adaptive_ms);
    if (s.weak && s.strong) add(r, r.strong, "flexsp", "strong", r.strong.flexsp_ms);
  }
  return c;
}

void run_simulate(const SimArgs& a) {
  check_plan_args(a.plan, "simulate");
  const std::vector<int> nodes = parse_nodes(a.nodes);
  FLEXSP_CHECK(a.scaling == "weak" || a.scaling == "strong" || a.scaling == "both",
               "--scaling: '{}' is not weak, strong or both", a.scaling);
  FLEXSP_CHECK(a.peak_tflops > 0, "--peak-tflops: must be positive, got {}", a.peak_tflops);
  FLEXSP_CHECK(a.bw_intra >= 0 && a.bw_inter >= 0, "--bw-intra-gbs/--bw-inter-gbs: must be positive");
  FLEXSP_CHECK(a.fixed_ref_gpus >= -1 && a.fixed_ref_gpus <= (1 << 20),
               "--fixed-ref-gpus: must be a GPU count >= 0, got {}", a.fixed_ref_gpus);
  FLEXSP_CHECK(int64_t{nodes.back()} * a.plan.gpus_per_node <= (1 << 20),
               "--nodes: {} nodes x {} GPUs is more than 1048576 GPUs", nodes.back(), a.plan.gpus_per_node);
  std::string csv;
  if (!a.plot.empty()) {
    const fs::path png(a.plot), dir = png.parent_path().empty() ? fs::path(".") : png.parent_path();
    std::error_code ec;
    FLEXSP_CHECK(fs::is_directory(dir, ec), "--plot: directory '{}' does not exist", dir.string());
    FLEXSP_CHECK(png.extension() == ".png", "--plot: '{}' must end in .png", a.plot);
    csv = fs::path(png).replace_extension(".csv").string();
  }
  const PlanInputs in = load_plan_inputs(a.plan);
  check_plan_layout(a.plan, a.plan.tp * a.plan.pp, in.model);
  if (a.search.search) {  // the best layout per node count (app/search_args.h)
    const SimFabric fabric = sim_fabric(in.cost, a.plan.gpus_per_node, a.bw_intra, a.bw_inter);
    const int ref = a.fixed_ref_gpus >= 0 ? a.fixed_ref_gpus : sim_default_fixed_ref_gpus(in.cost);
    run_search_sweep(a.plan, a.search, in, nodes, fabric,
                     sim_fixed_split(in.model, in.cost, a.plan.gpus_per_node, fabric, ref), a.peak_tflops);
    return;
  }

  SimSetup s;
  s.gpus_per_node = a.plan.gpus_per_node;
  s.nodes = nodes;
  s.fabric = sim_fabric(in.cost, s.gpus_per_node, a.bw_intra, a.bw_inter);
  const int ref_gpus = a.fixed_ref_gpus >= 0 ? a.fixed_ref_gpus : sim_default_fixed_ref_gpus(in.cost);
  s.fixed = sim_fixed_split(in.model, in.cost, s.gpus_per_node, s.fabric, ref_gpus);
  s.run = plan_run_config(a.plan, in);  // each row: planner_context on its GPUs
  s.model = in.model;
  s.cost = sim_scale_fabric(in.cost, s.fabric);
  s.ring_only_when_needed = a.plan.ring_groups == "needed";
  s.batch = plan_batch(a.plan, 8 * int64_t{nodes.front()} * s.gpus_per_node);
  s.steps = a.plan.steps;
  s.peak_tflops = a.peak_tflops;
  s.weak = a.scaling != "strong";
  s.strong = a.scaling != "weak";
  const std::vector<SimRow> rows = sim_scaling(s, in.docs);

  std::string plotted, skipped;
  if (!csv.empty()) {
    std::ofstream f(csv, std::ios::trunc);
    f << plot_csv(s, rows, in.model.preset);
    f.close();
    FLEXSP_CHECK(f.good(), "--plot: cannot write {}", csv);
    skipped = plot_scaling_png(csv, a.plot);
    plotted = skipped.empty() ? fmt::format("plot: {} (data: {})", a.plot, csv)
                              : fmt::format("plot skipped: {} (data: {})", skipped, csv);
  }
  if (a.plan.json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const SimRow& r : rows) j.push_back(row_json(s, r));
    std::printf("%s\n", j.dump(2).c_str());
    if (!plotted.empty()) std::fprintf(stderr, "%s\n", plotted.c_str());
    return;
  }
  const std::string batch = s.batch.batch_seqs > 0 ? fmt::format("{} sequences", s.batch.batch_seqs)
                                                   : fmt::format("{} tokens", s.batch.batch_tokens);
  std::printf("flexsp simulate: %s; %d GPU%s per node; ZeRO-%d over all GPUs; %.0f GB/GPU; %lld steps per node count\n",
              model_config_summary(in.model).c_str(), s.gpus_per_node, s.gpus_per_node == 1 ? "" : "s", a.plan.zero, a.plan.mem_gb,
              static_cast<long long>(s.steps));
  std::printf("cost model: %s; fixed %.2f ms per micro-batch %s\n", in.cost.source.c_str(), in.cost.fixed_ms,
              ref_gpus > 0 ? fmt::format("measured on {} GPUs with ZeRO-3: residual {:.2f} ms + {:.4f} x modelled "
                                         "ZeRO traffic", ref_gpus, s.fixed.residual_ms, s.fixed.exposure).c_str()
                           : "holding no gradient traffic (added in full)");
  std::printf("ring bandwidth per GPU: intra-node %.4g GB/s%s, inter-node %.4g GB/s; MFU against %.4g TFLOP/s\n",
              s.fabric.intra_gbs, s.gpus_per_node == 1 ? " (unused)" : "", s.fabric.inter_gbs, a.peak_tflops);
  std::printf("columns: mean per step; fixed_ms per micro-batch, sync_ms per step (both in the step times); "
              "eff = tokens/s per GPU / the first computed row's; a row that does not fit says why\n");
  if (s.weak)
    std::printf("\nweak scaling (%s at %d node%s, grown with the GPUs):\n%s", batch.c_str(), nodes.front(),
                nodes.front() == 1 ? "" : "s", table(rows, true).c_str());
  if (s.strong)
    std::printf("\nstrong scaling (%s at every node count):\n%s", batch.c_str(), table(rows, false).c_str());
  if (!plotted.empty()) std::printf("\n%s\n", plotted.c_str());
}

}  // namespace

int cmd_simulate(const CommandContext& ctx, const Args& args) {
  SimArgs a;
  const po::options_description opts = simulate_options(a);
  return run_on_rank0(ctx, args, "simulate", opts,
                      "usage: flexsp simulate (--data FILE | --lengths FILE) [--nodes 1,2,4,...] [options]\n\n"
                      "Projects step time, tokens/s, MFU and flexsp's speedups over static and batch_adaptive "
                      "SP from the cost model, per node count, with ZeRO traffic and weak/strong scaling "
                      "efficiency (see lib/planner/cost/sim_price.h and analysis/simulate.h for the model); with --pp each row plans one "
                      "pipeline stage and prices the bubble, with --cp-mode groups may run a ring.",
                      [&] { run_simulate(a); });
}

}  // namespace flexsp
