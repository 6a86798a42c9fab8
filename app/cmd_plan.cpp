// flexsp plan: the planner alone (SPEC §4, issue 5). Draws each step's global batch from a
// dataset's document lengths or a length file with the same BatchSampler training uses
// (so the batches are the ones training would see), plans it for flexsp, static and
// batch_adaptive, and prints the plans, predicted step times, speedups and solve times,
// then a summary of medians (or one JSON object with --json).
//
// Runs on one process. Under mpirun rank 0 does all the work inside agree(), so a bad
// option or an infeasible batch ends every rank with one error line; the others wait.
#include <algorithm>
#include <array>
#include <map>
#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/options.h"
#include "io/dataset/token_dataset.h"
#include "lib/data/sampler.h"
#include "lib/model/model_config.h"
#include "lib/planner/planner.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

namespace {

struct PlanArgs {
  std::string data, lengths, model = "7b", cost_model;
  int gpus = 64, gpus_per_node = 8, time_limit_ms = 1000;
  double mem_gb = 80;
  int64_t max_seq_len = 4096, batch_seqs = 0, batch_tokens = 0, steps = 20;
  uint64_t seed = 1234;
  bool json = false;
};

po::options_description plan_options(PlanArgs& a) {
  po::options_description o("flexsp plan options");
  o.add_options()
      ("help,h", "this help")
      ("data", po::value(&a.data), "HDF5 token dataset (its document lengths are sampled)")
      ("lengths", po::value(&a.lengths), "file with one document length per line")
      ("gpus", po::value(&a.gpus)->default_value(a.gpus), "number of GPUs (ranks)")
      ("gpus-per-node", po::value(&a.gpus_per_node)->default_value(a.gpus_per_node), "GPUs per node")
      ("model", po::value(&a.model)->default_value(a.model), "model preset (tiny ... 65b)")
      ("cost-model", po::value(&a.cost_model), "cost-model file (default: built-in FlexSP GPT-7B figures)")
      ("mem-per-gpu-gb", po::value(&a.mem_gb)->default_value(a.mem_gb), "device memory per GPU, GB")
      ("max-seq-len", po::value(&a.max_seq_len)->default_value(a.max_seq_len),
       "longer documents are cut into pieces of max-seq-len + 1 tokens (as data.max_seq_len)")
      ("global-batch-seqs", po::value(&a.batch_seqs), "sequences per step (default 512)")
      ("global-batch-tokens", po::value(&a.batch_tokens), "tokens per step (instead of sequences)")
      ("steps", po::value(&a.steps)->default_value(a.steps), "steps to plan")
      ("seed", po::value(&a.seed)->default_value(a.seed), "sampler seed (as train.seed)")
      ("time-limit-ms", po::value(&a.time_limit_ms)->default_value(a.time_limit_ms),
       "solver time limit per step (as planner.time_limit_ms)")
      ("json", po::bool_switch(&a.json), "print one JSON object");
  return o;
}

std::vector<int64_t> read_lengths(const std::string& path) {
  std::ifstream f(path);
  FLEXSP_CHECK(f.good(), "--lengths: cannot open '{}'", path);
  std::vector<int64_t> out;
  std::string line;
  for (int64_t no = 1; std::getline(f, line); ++no) {
    const size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos) continue;
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(line.substr(a), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const std::string rest = line.substr(a + used);
    FLEXSP_CHECK(used > 0 && v >= 0 && rest.find_first_not_of(" \t\r") == std::string::npos,
                 "--lengths: {}:{}: '{}' is not a length", path, no, line);
    out.push_back(v);
  }
  FLEXSP_CHECK(!out.empty(), "--lengths: '{}' holds no lengths", path);
  return out;
}

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
    for (const PlanGroup& g : mb.groups) {
      int64_t tok = 0;
      double ms = 0;
      for (int32_t s : g.seqs) tok += len[s], ms += c.seq_ms(len[s], g.size);
      groups.push_back({{"first", g.first}, {"size", g.size}, {"seqs", g.seqs},
                        {"tokens", tok}, {"ms", ms}});
    }
    mbs.push_back({{"groups", groups}});
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

void run_plan(const PlanArgs& a) {
  FLEXSP_CHECK(a.data.empty() != a.lengths.empty(), "plan: give exactly one of --data FILE or --lengths FILE");
  FLEXSP_CHECK(a.gpus >= 1, "--gpus: must be positive, got {}", a.gpus);
  FLEXSP_CHECK(a.gpus_per_node >= 1 && a.gpus % a.gpus_per_node == 0,
               "--gpus-per-node: {} must be positive and divide --gpus {}", a.gpus_per_node, a.gpus);
  FLEXSP_CHECK(a.mem_gb > 0, "--mem-per-gpu-gb: must be positive, got {}", a.mem_gb);
  FLEXSP_CHECK(a.max_seq_len >= 1, "--max-seq-len: must be positive, got {}", a.max_seq_len);
  FLEXSP_CHECK(!(a.batch_seqs > 0 && a.batch_tokens > 0),
               "plan: give --global-batch-seqs or --global-batch-tokens, not both");
  FLEXSP_CHECK(a.batch_seqs >= 0 && a.batch_tokens >= 0, "--global-batch-seqs/--global-batch-tokens: must be positive");
  FLEXSP_CHECK(a.steps >= 1, "--steps: must be positive, got {}", a.steps);
  FLEXSP_CHECK(a.time_limit_ms >= 0, "--time-limit-ms: must be >= 0, got {}", a.time_limit_ms);

  std::vector<int64_t> docs;
  int vocab = 32000;
  if (!a.lengths.empty()) {
    docs = read_lengths(a.lengths);
  } else {
    TokenDataset ds = TokenDataset::open({a.data});
    vocab = ds.vocab_size();
    docs.resize(static_cast<size_t>(ds.num_docs()));
    for (int64_t i = 0; i < ds.num_docs(); ++i) docs[static_cast<size_t>(i)] = ds.doc_length(i);
  }
  ModelSection ms;
  ms.preset = a.model;
  PlannerContext ctx;
  try {
    ctx.model = resolve_model_config(ms, {}, vocab);
  } catch (const Error& e) {
    fail(fmt::format("--model: {}", e.what()));
  }
  ctx.cost = a.cost_model.empty() ? cost_model_default() : cost_model_load(a.cost_model);
  if (ctx.cost.model != a.model)
    std::fprintf(stderr, "flexsp: note: cost model %s was measured with model %s; planning %s with it\n",
                 ctx.cost.source.c_str(), ctx.cost.model.c_str(), a.model.c_str());
  ctx.world = a.gpus;
  ctx.ranks_per_node = a.gpus_per_node;
  ctx.mem_per_gpu_gb = a.mem_gb;
  ctx.zero = {3, a.gpus, a.gpus, a.gpus};  // ZeRO-3 over all GPUs (FlexSP's setting)
  ctx.time_limit_ms = a.time_limit_ms;
  int64_t longest_doc = 0;
  for (int64_t l : docs) longest_doc = std::max(longest_doc, l);
  ctx.max_seq_len = std::min(a.max_seq_len + 1, longest_doc);  // the longest piece training makes
  const PlanCosts costs = plan_costs(ctx);

  SamplerOptions so;
  so.seed = a.seed;
  so.max_seq_len = a.max_seq_len;
  so.batch_seqs = a.batch_seqs;
  so.batch_tokens = a.batch_tokens;
  if (so.batch_seqs == 0 && so.batch_tokens == 0) so.batch_seqs = 512;
  BatchSampler sampler(docs, so);

  if (!a.json) {
    std::printf("flexsp plan: %d GPUs (%d per node), %s, %.0f GB/GPU -> %lld tokens per GPU "
                "(model states %.2f GB, ZeRO-3)\n",
                a.gpus, a.gpus_per_node, model_config_summary(ctx.model).c_str(), a.mem_gb,
                static_cast<long long>(costs.tokens_per_rank), costs.model_state_gb);
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
                        {"static_sp_size", sd},
                        {"batch_adaptive_sp_size", bd}};
    for (const char* f : {"flexsp_ms", "static_ms", "batch_adaptive_ms", "speedup_vs_static",
                          "speedup_vs_batch_adaptive", "solve_ms", "lower_bound_ms", "greedy_ms"})
      cols[f].push_back(j[f].get<double>());
    if (a.json) {
      j["plan"] = plan_json(costs, flex, len);
      steps.push_back(std::move(j));
      continue;
    }
    std::printf("step %lld: %zu seqs, %lld tokens, longest %lld\n", static_cast<long long>(k),
                len.size(), static_cast<long long>(tokens), static_cast<long long>(longest));
    std::printf("  flexsp %.1f ms (%d mb, solve %.1f ms, milp %d/%d solved, %d improved, %d timed out)"
                "  static %.1f ms (d=%d)  batch_adaptive %.1f ms (d=%d)\n",
                fs.predicted_ms, fs.micro_batches, fs.solve_ms, fs.milp_solved, fs.micro_batches,
                fs.milp_improved, fs.milp_timed_out, ss.predicted_ms, sd, bs.predicted_ms, bd);
    std::printf("  speedup %.3fx vs static, %.3fx vs batch_adaptive; lower bound %.1f ms (gap %.1f%%)\n",
                sp_s, sp_b, fs.lower_bound_ms, 100.0 * (fs.predicted_ms / fs.lower_bound_ms - 1));
    std::printf("%s", plan_summary(costs, flex, len).c_str());
  }
  if (a.json) {
    nlohmann::json summary;
    for (const auto& [k, v] : cols) summary[k] = median(v);
    summary["steps"] = a.steps;
    nlohmann::json out = {{"steps", steps}, {"summary", summary}};
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("\nsummary over %lld steps:\n  %-26s %12s %12s %12s\n", static_cast<long long>(a.steps),
              "field", "median", "min", "max");
  for (const char* f : {"flexsp_ms", "static_ms", "batch_adaptive_ms", "speedup_vs_static",
                        "speedup_vs_batch_adaptive", "solve_ms", "lower_bound_ms", "greedy_ms"}) {
    const auto& v = cols[f];
    std::printf("  %-26s %12.3f %12.3f %12.3f\n", f, median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  }
}

}  // namespace

int cmd_plan(const CommandContext& ctx, const Args& args) {
  PlanArgs a;
  po::options_description opts = plan_options(a);
  bool help = false;
  agree(ctx.world, [&] {
    po::variables_map vm;
    parse_verb_options("plan", args, opts, vm);
    help = vm.count("help") != 0;
  });
  if (help) {
    if (ctx.rank == 0)
      std::cout << "usage: flexsp plan (--data FILE | --lengths FILE) [options]\n\n"
                << "Plans each step's batch for flexsp, static and batch_adaptive SP and "
                   "prints predicted step times (ZeRO-3 over all GPUs).\n\n"
                << opts << "\n";
    return 0;
  }
  agree(ctx.world, [&] {
    if (ctx.rank == 0) run_plan(a);
  });
  std::fflush(stdout);
  return 0;
}

}  // namespace flexsp
