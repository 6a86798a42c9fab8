// flexsp report RUN_DIR...: a scaling table over the timing reports of several runs
// (docs/reports.md; each RUN_DIR as written by `flexsp train --report.dir`), printed, and
// with --out also written as DIR/scaling.csv and plotted to DIR/scaling.png.
//
// Choices:
//  - report.h5 is the source (not summary.json): it exists for a run that stopped early
//    too. tokens/s = sum of tokens / sum of wall time over the steps, the first step left
//    out when there are others (start-up), as summary.json computes it.
//  - The baseline of a row is the smallest run (fewest ranks); when several runs have
//    that rank count, the one with the row's sp_mode and ZeRO stage if any, else the
//    first given. efficiency = (tokens/s per rank) / (baseline's); speedup = tokens/s /
//    baseline's. "flexsp/static" is given on flexsp rows where a static run of the same
//    rank count exists (the same ZeRO stage preferred).
//  - Predicted against measured per run (step time error distribution, peak memory) is
//    app/report_accuracy.h's; the table has the mean predicted step beside the measured
//    one ("predicted", the same steps), and is followed by one line per run.
//  - A run with pipeline stages (report.h5 /pipeline) gets its per-stage table
//    (io/report/pipeline_report.h) after the prediction lines, and "pipeline" in --json.
//  - The PNG is drawn from the CSV by app/plot.h (tools/plot_report.py, matplotlib).
//    Without python3 or matplotlib, or without the script, the table and CSV are still
//    written and the plot is said to be skipped (exit 0).
// Runs on rank 0 inside agree(); other ranks wait.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/options.h"
#include "app/plot.h"
#include "app/report_accuracy.h"
#include "io/hdf5/h5.h"
#include "io/report/pipeline_report.h"
#include "io/report/report.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace flexsp {

namespace {

struct RunRow {
  std::string dir, sp_mode, backend, model;
  int64_t ranks = 0, nodes = 0, zero = 0, steps = 0;
  double ms = 0, tps = 0, mfu = 0;  // mean step ms, tokens/s, MFU (totals over totals, first step left out)
  double eff = 0, speedup = 0, vs_static = 0;  // vs_static 0: none
  PredictionAccuracy accuracy;                 // predicted against measured (app/report_accuracy.h)
  ReportPipeline pipeline;                     // stages == 0: no pipeline
};

std::vector<double> read_column(hid_t g, const std::string& name, const std::string& what) {
  FLEXSP_CHECK(h5::exists(g, name), "{}: no /steps/{}", what, name);
  h5::Id d = h5::open_dataset(g, name);
  const int64_t n = h5::extent_1d(d.get(), name);
  std::vector<double> v(static_cast<size_t>(n));
  h5::Quiet q;
  if (n > 0)
    h5::check_status(H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
                     fmt::format("{}: cannot read /steps/{}", what, name));
  return v;
}

RunRow read_run(const std::string& dir) {
  std::error_code ec;
  FLEXSP_CHECK(fs::is_directory(dir, ec), "report: RUN_DIR {} is not a directory", dir);
  const std::string path = (fs::path(dir) / "report.h5").string();
  FLEXSP_CHECK(fs::exists(path, ec),
               "report: {} has no report.h5 (not a report directory: see flexsp train --report.dir)", dir);
  h5::Id f = h5::open_file(path);
  const std::string schema = h5::has_attr(f.get(), "schema") ? h5::read_attr_string(f.get(), "schema") : "";
  FLEXSP_CHECK(schema == "flexsp.report", "{}: schema is '{}', not flexsp.report", path, schema);
  RunRow r;
  r.dir = dir;
  r.ranks = h5::read_attr_int(f.get(), "world_size");
  r.nodes = h5::read_attr_int(f.get(), "nodes");
  r.zero = h5::read_attr_int(f.get(), "zero");
  r.sp_mode = h5::read_attr_string(f.get(), "sp_mode");
  r.backend = h5::read_attr_string(f.get(), "backend");
  r.model = h5::read_attr_string(f.get(), "model");
  FLEXSP_CHECK(h5::exists(f.get(), "steps"), "{}: no /steps group", path);
  h5::Quiet q;
  h5::Id g = h5::group_id(h5::check(H5Gopen2(f.get(), "steps", H5P_DEFAULT), path + ": cannot open /steps"));
  const std::vector<double> tokens = read_column(g.get(), "tokens", path);
  const std::vector<double> ms = read_column(g.get(), "wall_ms", path);
  const std::vector<double> mfu = read_column(g.get(), "mfu", path);
  FLEXSP_CHECK(!tokens.empty() && tokens.size() == ms.size() && mfu.size() == ms.size(),
               "{}: no steps recorded", path);
  r.steps = static_cast<int64_t>(tokens.size());
  // A step's FLOPs are its MFU x peak x world x seconds: the run's MFU is totals over
  // totals, as summary.json has it (io/report/report.h: Throughput).
  const double peak = h5::read_attr_double(f.get(), "peak_tflops");
  Throughput run;
  for (size_t i = throughput_first_step(tokens.size()); i < tokens.size(); ++i)
    run.add(ms[i], tokens[i], mfu[i] * peak * 1e12 * double(r.ranks) * ms[i] / 1e3);
  r.ms = run.mean_ms();
  r.tps = run.tokens_per_s();
  r.mfu = run.mfu(static_cast<int>(r.ranks), peak);
  r.accuracy = prediction_accuracy(g.get(), path);
  r.pipeline = read_pipeline_h5(f.get(), path);
  FLEXSP_CHECK(r.ranks >= 1 && r.tps > 0, "{}: no throughput (world_size {}, {} steps)", path, r.ranks, r.steps);
  return r;
}

// Fills eff, speedup, vs_static (see the design notes).
void compare(std::vector<RunRow>& rows) {
  int64_t min_ranks = rows.front().ranks;
  for (const RunRow& r : rows) min_ranks = std::min(min_ranks, r.ranks);
  auto pick = [&](int64_t ranks, const std::string& mode, int64_t zero) -> const RunRow* {
    const RunRow* any = nullptr;
    for (const RunRow& r : rows) {
      if (r.ranks != ranks || (!mode.empty() && r.sp_mode != mode)) continue;
      if (r.zero == zero) return &r;
      if (any == nullptr) any = &r;
    }
    return any;
  };
  std::vector<RunRow> out = rows;
  for (RunRow& r : out) {
    const RunRow* b = pick(min_ranks, r.sp_mode, r.zero);
    if (b == nullptr) b = pick(min_ranks, "", r.zero);
    r.speedup = r.tps / b->tps;
    r.eff = (r.tps / double(r.ranks)) / (b->tps / double(b->ranks));
    const RunRow* s = r.sp_mode == "flexsp" ? pick(r.ranks, "static", r.zero) : nullptr;
    r.vs_static = s != nullptr ? r.tps / s->tps : 0;
  }
  rows = std::move(out);
}

// A CSV field, quoted (quotes doubled) when it holds a comma, a quote or a newline.
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string csv_text(const std::vector<RunRow>& rows) {
  std::string s =
      "run,ranks,nodes,sp_mode,zero,backend,model,steps,mean_step_ms,predicted_step_ms,tokens_per_s,"
      "tokens_per_s_per_rank,efficiency,speedup,flexsp_vs_static,mfu\n";
  for (const RunRow& r : rows)
    s += fmt::format("{},{},{},{},{},{},{},{},{:.6g},{},{:.6g},{:.6g},{:.6g},{:.6g},{},{:.6g}\n", csv_field(r.dir),
                     r.ranks, r.nodes, csv_field(r.sp_mode), r.zero, csv_field(r.backend), csv_field(r.model),
                     r.steps, r.ms, r.accuracy.steps > 0 ? fmt::format("{:.6g}", r.accuracy.predicted_ms) : "",
                     r.tps, r.tps / double(r.ranks), r.eff, r.speedup,
                     r.vs_static > 0 ? fmt::format("{:.6g}", r.vs_static) : "", r.mfu);
  return s;
}

nlohmann::json accuracy_json(const PredictionAccuracy& a) {
  nlohmann::json j = {{"steps", a.steps}};
  if (a.steps > 0)
    j.update({{"step_time_error_median", a.median}, {"step_time_error_p10", a.p10},
              {"step_time_error_p90", a.p90}, {"step_time_error_max_abs", a.max_abs}});
  if (a.mem_predicted_gb > 0)
    j.update({{"peak_mem_predicted_gb", a.mem_predicted_gb}, {"peak_mem_measured_gb", a.mem_measured_gb},
              {"peak_mem_error", a.mem_error()}});
  return j;
}

std::string table_text(const std::vector<RunRow>& rows) {
  std::string s = fmt::format("{:>5} {:>5} {:<14} {:>4} {:>5} {:>10} {:>10} {:>11} {:>11} {:>10} {:>7} {:>13}  {}\n",
                              "ranks", "nodes", "sp_mode", "zero", "steps", "ms/step", "predicted", "tokens/s",
                              "tok/s/rank", "efficiency", "speedup", "flexsp/static", "run");
  for (const RunRow& r : rows)
    s += fmt::format("{:>5} {:>5} {:<14} {:>4} {:>5} {:>10.1f} {:>10} {:>11.0f} {:>11.0f} {:>10.3f} {:>7.3f} {:>13}  {}\n",
                     r.ranks, r.nodes, r.sp_mode, r.zero, r.steps, r.ms,
                     r.accuracy.steps > 0 ? fmt::format("{:.1f}", r.accuracy.predicted_ms) : "-", r.tps,
                     r.tps / double(r.ranks), r.eff, r.speedup,
                     r.vs_static > 0 ? fmt::format("{:.3f}", r.vs_static) : "-", r.dir);
  return s;
}

}  // namespace

int cmd_report(const CommandContext& ctx, const Args& args) {
  std::vector<std::string> dirs;
  std::string out;
  bool json = false;
  po::options_description opts("flexsp report options");
  opts.add_options()("help,h", "this help")(
      "out", po::value(&out), "write scaling.csv and scaling.png here (created if missing)")(
      "json", po::bool_switch(&json), "print one JSON object instead of the table")(
      "run-dir", po::value(&dirs)->composing(), "a run's report.dir (positional, one or more)");
  po::positional_options_description pos;
  pos.add("run-dir", -1);
  po::variables_map vm;
  agree(ctx.world, [&] { parse_verb_options("report", args, opts, vm, &pos); });
  if (vm.count("help")) {
    if (ctx.rank == 0)
      std::cout << "usage: flexsp report RUN_DIR... [--out DIR] [--json]\n"
                << "  RUN_DIR: a report.dir of flexsp train (report.h5, steps.csv, summary.json)\n\n"
                << opts << "\n";
    return 0;
  }
  agree(ctx.world, [&] {
    if (ctx.rank != 0) return;
    FLEXSP_CHECK(!dirs.empty(), "report: no RUN_DIR given (see flexsp report --help)");
    std::vector<RunRow> rows;
    for (const std::string& d : dirs) rows.push_back(read_run(d));
    std::stable_sort(rows.begin(), rows.end(), [](const RunRow& a, const RunRow& b) {
      return std::tie(a.ranks, a.sp_mode, a.zero) < std::tie(b.ranks, b.sp_mode, b.zero);
    });
    compare(rows);
    std::string csv, png, skipped;
    if (!out.empty()) {
      std::error_code ec;
      fs::create_directories(out, ec);
      FLEXSP_CHECK(!ec, "report: cannot create --out {}: {}", out, ec.message());
      csv = (fs::path(out) / "scaling.csv").string();
      png = (fs::path(out) / "scaling.png").string();
      {
        std::ofstream f(csv, std::ios::trunc);
        f << csv_text(rows);
        f.close();
        FLEXSP_CHECK(f.good(), "report: cannot write {}", csv);
      }
      skipped = plot_scaling_png(csv, png);
    }
    if (json) {
      nlohmann::ordered_json j;
      j["runs"] = nlohmann::json::array();
      for (const RunRow& r : rows)
        j["runs"].push_back({{"run", r.dir}, {"ranks", r.ranks}, {"nodes", r.nodes}, {"sp_mode", r.sp_mode},
                             {"zero", r.zero}, {"backend", r.backend}, {"model", r.model}, {"steps", r.steps},
                             {"mean_step_ms", r.ms},
                             {"predicted_step_ms", r.accuracy.steps > 0 ? nlohmann::json(r.accuracy.predicted_ms)
                                                                        : nullptr},
                             {"tokens_per_s", r.tps},
                             {"tokens_per_s_per_rank", r.tps / double(r.ranks)}, {"efficiency", r.eff},
                             {"speedup", r.speedup},
                             {"flexsp_vs_static", r.vs_static > 0 ? nlohmann::json(r.vs_static) : nullptr},
                             {"mfu", r.mfu}, {"prediction", accuracy_json(r.accuracy)}});
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].pipeline.stages > 0) j["runs"][i]["pipeline"] = pipeline_json(rows[i].pipeline);
      if (!out.empty()) {
        j["csv"] = csv;
        j["png"] = skipped.empty() ? nlohmann::json(png) : nullptr;
        if (!skipped.empty()) j["plot_skipped"] = skipped;
      }
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("%s", table_text(rows).c_str());
      std::printf("efficiency and speedup are relative to the smallest run (%lld ranks)\n",
                  static_cast<long long>(rows.front().ranks));
      std::printf("\npredicted against measured (error = predicted / measured - 1; first step left out):\n");
      for (const RunRow& r : rows) std::printf("  %s: %s\n", r.dir.c_str(), prediction_accuracy_text(r.accuracy).c_str());
      for (const RunRow& r : rows)
        if (r.pipeline.stages > 0) std::printf("\n%s %s", r.dir.c_str(), pipeline_table(r.pipeline).c_str());
      if (!out.empty()) {
        std::printf("table: %s\n", csv.c_str());
        if (skipped.empty()) std::printf("plot: %s\n", png.c_str());
        else std::printf("plot skipped: %s\n", skipped.c_str());
      }
    }
  });
  return 0;
}

}  // namespace flexsp
