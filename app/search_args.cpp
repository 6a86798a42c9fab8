// The search's options and output (search_args.h). The text table lists the top layouts
// best first; the JSON holds every layout, rejected ones with their reason.
#include "app/search_args.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/options.h"
#include "lib/planner/analysis/simulate.h"
#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

namespace {

// "a,b,c" into its items (empty items are errors naming opt).
std::vector<std::string> word_list(const std::string& s, const char* opt) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    const size_t comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    FLEXSP_CHECK(!out.back().empty(), "{}: '{}' has an empty item", opt, s);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

template <class T>
std::vector<T> int_list(const std::string& s, const char* opt, int64_t lo, int64_t hi, const char* what) {
  std::vector<T> v;
  for (int64_t x : parse_int_list(s, opt, lo, hi, what)) v.push_back(static_cast<T>(x));
  return v;
}

nlohmann::ordered_json result_json(const SearchResult& r) {
  const SearchLayout& l = r.layout;
  nlohmann::ordered_json j = {{"layout", l.name()},      {"tp_size", l.tp},
                              {"pp_size", l.pipeline.pp}, {"pp_schedule", pp_schedule_name(l.pipeline.schedule)},
                              {"seq_chunks", l.pipeline.seq_chunks}, {"cp_mode", cp_mode_name(l.cp_mode)},
                              {"zero", l.zero},          {"zero_param_group", l.param_group},
                              {"zero_grad_group", l.grad_group}, {"zero_optim_group", l.optim_group},
                              {"checkpoint_activations", l.checkpoint}, {"micro_batch_tokens", l.micro_batch_tokens}};
  if (!r.priced_only.empty()) j["priced_only"] = r.priced_only;
  if (!r.rejected.empty()) {
    j["rejected"] = r.rejected;
    j["states_gb"] = r.states_gb;
    return j;
  }
  j.update({{"step_ms", r.step_ms}, {"tokens_per_s", r.tokens_per_s}, {"mfu", r.mfu}, {"peak_gb", r.peak_gb},
            {"states_gb", r.states_gb}, {"tokens_per_device", r.tokens_per_rank},
            {"micro_batches", r.micro_batches}, {"bubble", r.bubble}, {"fixed_ms", r.fixed_ms}, {"sync_ms", r.sync_ms},
            {"static_step_ms", r.static_step_ms}, {"static_tokens_per_s", r.static_tokens_per_s}});
  return j;
}

std::string row(int rank, const SearchResult& r) {
  return fmt::format("{:>4} {:<42} {:>10.1f} {:>10.4g} {:>6.3f} {:>8.2f} {:>9.2f} {:>7} {:>5.1f} {:>8.1f} {:>8.1f} {:>10.1f}\n",
                     rank, r.layout.name(), r.step_ms, r.tokens_per_s, r.mfu, r.peak_gb, r.states_gb,
                     r.tokens_per_rank, r.micro_batches, r.fixed_ms, r.sync_ms, r.static_step_ms);
}

}  // namespace

void add_search_options(po::options_description& o, SearchArgs& s) {
  o.add_options()
      ("search", po::bool_switch(&s.search),
       "search the layout: tp, pipeline stages and schedule, ZeRO stage and shard groups, activation "
       "checkpointing, micro-batch tokens, cp_mode; rank those that fit memory by predicted tokens/s")
      ("search-ini", po::value(&s.ini), "with --search: write the best layout as an INI fragment for flexsp train --config")
      ("search-top", po::value(&s.top)->default_value(s.top), "with --search: layouts shown in the table")
      ("search-tp", po::value(&s.tp)->default_value(s.tp), "with --search: tp sizes to try")
      ("search-zero", po::value(&s.zero)->default_value(s.zero), "with --search: ZeRO stages to try")
      ("search-checkpoint", po::value(&s.checkpoint)->default_value(s.checkpoint),
       "with --search: activation checkpointing off, on or both")
      ("search-micro-batch-tokens", po::value(&s.micro_batch_tokens)->default_value(s.micro_batch_tokens),
       "with --search: caps on tokens per GPU per micro-batch to try (0: memory decides; pipelines take none)")
      ("search-pp", po::value(&s.pp)->default_value(s.pp), "with --search: pipeline stages to try")
      ("search-pp-schedule", po::value(&s.pp_schedule)->default_value(s.pp_schedule),
       "with --search: pipeline schedules to try for pp > 1 (1f1b, seq1f1b)")
      ("search-seq-chunks", po::value(&s.seq_chunks)->default_value(s.seq_chunks),
       "with --search: seq1f1b chunk counts to try")
      ("search-cp-mode", po::value(&s.cp_mode)->default_value(s.cp_mode),
       "with --search: cp modes to try (ulysses, ring, usp, auto); a mode other than ulysses is priced only where "
       "the ulysses layout cannot hold the longest piece");
}

SearchSetup make_search_setup(const PlanArgs& a, const SearchArgs& s, const PlanInputs& in, int gpus,
                              int64_t default_seqs, const SimFabric& fabric, const SimFixedSplit& fixed,
                              double peak_tflops) {
  FLEXSP_CHECK(s.checkpoint == "off" || s.checkpoint == "on" || s.checkpoint == "both",
               "--search-checkpoint: '{}' is not off, on or both", s.checkpoint);
  FLEXSP_CHECK(s.top >= 1, "--search-top: must be positive, got {}", s.top);
  SearchSetup st;
  st.model = in.model;
  st.cost = sim_scale_fabric(in.cost, fabric);
  st.gpus = gpus;
  st.gpus_per_node = a.gpus_per_node;
  st.mem_per_gpu_gb = a.mem_gb;
  st.fabric = fabric;
  st.fixed = fixed;
  st.max_seq_len = in.max_seq_len;
  st.batch = plan_batch(a, default_seqs);
  st.steps = a.steps;
  st.peak_tflops = peak_tflops;
  st.tp = int_list<int>(s.tp, "--search-tp", 1, 8, "a tp size (1 to 8)");
  for (int tp : st.tp) FLEXSP_CHECK(tp == 1 || tp == 2 || tp == 4 || tp == 8, "--search-tp: {} is not 1, 2, 4 or 8", tp);
  st.zero = int_list<int>(s.zero, "--search-zero", 0, 3, "a ZeRO stage (0 to 3)");
  st.checkpoint.clear();
  if (s.checkpoint != "on") st.checkpoint.push_back(false);
  if (s.checkpoint != "off") st.checkpoint.push_back(true);
  st.micro_batch_tokens = int_list<int64_t>(s.micro_batch_tokens, "--search-micro-batch-tokens", 0, int64_t{1} << 40,
                                            "a token count >= 0");
  st.pp = int_list<int>(s.pp, "--search-pp", 1, 1024, "a stage count (1 to 1024)");
  st.seq_chunks = int_list<int>(s.seq_chunks, "--search-seq-chunks", 1, 1024, "a chunk count (1 to 1024)");
  st.pp_schedule.clear();
  for (const std::string& w : word_list(s.pp_schedule, "--search-pp-schedule")) {
    FLEXSP_CHECK(w == "1f1b" || w == "seq1f1b", "--search-pp-schedule: '{}' is not 1f1b or seq1f1b", w);
    st.pp_schedule.push_back(pp_schedule_parse(w));
  }
  st.cp_mode.clear();
  for (const std::string& w : word_list(s.cp_mode, "--search-cp-mode")) {
    FLEXSP_CHECK(w == "ulysses" || w == "ring" || w == "usp" || w == "auto",
                 "--search-cp-mode: '{}' is not ulysses, ring, usp or auto", w);
    st.cp_mode.push_back(cp_mode_parse(w));
  }
  return st;
}

void run_search(const PlanArgs& a, const SearchArgs& s, const SearchSetup& st, const PlanInputs& in) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<SearchResult> res = search_layouts(st, in.docs);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t fit = 0, priced = 0;  // runnable and ranked; then ranked but priced only
  while (fit < res.size() && search_runnable_ranked(res[fit])) ++fit;
  while (fit + priced < res.size() && res[fit + priced].rejected.empty()) ++priced;
  FLEXSP_CHECK(fit > 0, "--search: no layout fits {} GB per GPU and runs in flexsp train (e.g. {}: {})", st.mem_per_gpu_gb,
               res.empty() ? "none" : res.front().layout.name(),
               res.empty() ? "no layout" : res.front().rejected.empty() ? res.front().priced_only : res.front().rejected);
  const SearchResult& best = res.front();
  const SearchResult paper = search_evaluate(st, search_paper_layout(), in.docs);
  size_t best_static = 0;  // the layout whose static-SP plan is fastest
  for (size_t i = 1; i < fit; ++i)
    if (res[i].static_tokens_per_s > res[best_static].static_tokens_per_s) best_static = i;
  if (!s.ini.empty()) {
    std::ofstream f(s.ini, std::ios::trunc);
    f << search_ini(st, best, a.cost_model);
    f.close();
    FLEXSP_CHECK(f.good(), "--search-ini: cannot write '{}'", s.ini);
  }
  if (a.json) {
    nlohmann::ordered_json j = {{"gpus", st.gpus}, {"gpus_per_node", st.gpus_per_node},
                                {"search_s", secs}, {"best", result_json(best)},
                                {"best_static", result_json(res[best_static])}, {"paper_layout", result_json(paper)}};
    j["layouts"] = nlohmann::ordered_json::array();
    for (const SearchResult& r : res) j["layouts"].push_back(result_json(r));
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("flexsp %s --search: %s; %d GPUs (%d per node), %g GB per GPU; %zu layouts, %zu fit memory and "
              "run (%zu more priced only); %lld sampled steps planned greedily; %.1f s\n",
              "plan", model_config_summary(st.model).c_str(), st.gpus, st.gpus_per_node, st.mem_per_gpu_gb,
              res.size(), fit, priced, static_cast<long long>(st.steps), secs);
  std::printf("cost model: %s; fixed cost per micro-batch = %.2f ms + %.4f x the layout's ZeRO traffic\n\n",
              in.cost.source.c_str(), st.fixed.residual_ms, st.fixed.exposure);
  std::printf("%4s %-42s %10s %10s %6s %8s %9s %7s %5s %8s %8s %10s\n", "rank", "layout", "step_ms", "tokens/s", "MFU",
              "peak_GB", "states_GB", "E", "mb", "fixed_ms", "sync_ms", "static_ms");
  for (size_t i = 0; i < fit && i < static_cast<size_t>(s.top); ++i) std::printf("%s", row(int(i) + 1, res[i]).c_str());
  if (priced > 0) {
    std::printf("\n%zu layouts priced only (never the best), best first, e.g.:\n", priced);
    for (size_t i = fit; i < fit + priced && i < fit + 3; ++i)
      std::printf("  %s: %.1f ms, %.4g tokens/s; %s\n", res[i].layout.name().c_str(), res[i].step_ms,
                  res[i].tokens_per_s, res[i].priced_only.c_str());
  }
  if (fit + priced < res.size()) {
    std::printf("\n%zu layouts rejected, e.g.:\n", res.size() - fit - priced);
    for (size_t i = fit + priced; i < res.size() && i < fit + priced + 3; ++i)
      std::printf("  %s: %s\n", res[i].layout.name().c_str(), res[i].rejected.c_str());
  }
  std::printf("\nbest: %s\n", best.layout.name().c_str());
  if (fit > 1) std::printf("  why: %s\n", search_why(best, res[1]).c_str());
  std::printf("  vs FlexSP's paper layout (ZeRO-3, SP only): %s\n", search_why(best, paper).c_str());
  const SearchResult& bs = res[best_static];
  if (bs.static_step_ms > 0)
    std::printf("best static-SP layout: %s: %.1f ms per step, %.4g tokens/s (flexsp on the best layout: %.3fx)\n",
                bs.layout.name().c_str(), bs.static_step_ms, bs.static_tokens_per_s, bs.static_step_ms / best.step_ms);
  else
    std::printf("best static-SP layout: none (static SP holds the longest piece on no layout that fits)\n");
  if (!s.ini.empty()) std::printf("best layout written to %s (flexsp train --config %s ...)\n", s.ini.c_str(), s.ini.c_str());
}

void run_search_sweep(const PlanArgs& a, const SearchArgs& s, const PlanInputs& in, const std::vector<int>& nodes,
                      const SimFabric& fabric, const SimFixedSplit& fixed, double peak_tflops) {
  FLEXSP_CHECK(s.ini.empty(), "--search-ini: only with flexsp plan --search (one cluster size)");
  const int base_gpus = nodes.front() * a.gpus_per_node;
  const SamplerOptions base = plan_batch(a, 8 * int64_t{base_gpus});
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::string text = fmt::format("{:>5} {:>5} {:<42} {:>10} {:>10} {:>6} {:>8} {:>10} {:>8}\n", "nodes", "gpus",
                                 "best layout", "step_ms", "tokens/s", "MFU", "peak_GB", "paper_tps", "vs_paper");
  for (int n : nodes) {
    const int gpus = n * a.gpus_per_node;
    SearchSetup st = make_search_setup(a, s, in, gpus, 8 * int64_t{base_gpus}, fabric, fixed, peak_tflops);
    st.batch = sim_weak_batch(base, gpus, base_gpus);
    const std::vector<SearchResult> res = search_layouts(st, in.docs);
    nlohmann::ordered_json j = {{"nodes", n}, {"gpus", gpus}};
    if (res.empty() || !search_runnable_ranked(res.front())) {
      const std::string why = res.empty() ? "no layout in the space"
                              : res.front().layout.name() + ": " +
                                    (res.front().rejected.empty() ? res.front().priced_only : res.front().rejected);
      j["infeasible"] = why;
      text += fmt::format("{:>5} {:>5}  no layout fits: {}\n", n, gpus, why);
      rows.push_back(j);
      continue;
    }
    const SearchResult& b = res.front();
    const SearchResult paper = search_evaluate(st, search_paper_layout(), in.docs);
    const double vs = paper.rejected.empty() ? b.tokens_per_s / paper.tokens_per_s : 0;
    j["best"] = result_json(b);
    j["paper_layout"] = result_json(paper);
    rows.push_back(j);
    text += fmt::format("{:>5} {:>5} {:<42} {:>10.1f} {:>10.4g} {:>6.3f} {:>8.2f} {:>10} {:>8}\n", n, gpus, b.layout.name(),
                        b.step_ms, b.tokens_per_s, b.mfu, b.peak_gb,
                        paper.rejected.empty() ? fmt::format("{:.4g}", paper.tokens_per_s) : "no fit",
                        vs > 0 ? fmt::format("{:.3f}x", vs) : "-");
  }
  if (a.json) {
    std::printf("%s\n", nlohmann::ordered_json({{"rows", rows}}).dump(2).c_str());
    return;
  }
  std::printf("flexsp simulate --search: %s; %d GPUs per node; %g GB per GPU; batch grown with the GPUs from the first "
              "node count; %lld sampled steps per layout\n%s",
              model_config_summary(in.model).c_str(), a.gpus_per_node, a.mem_gb, static_cast<long long>(a.steps),
              text.c_str());
}

}  // namespace flexsp
