#include "io/report/report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/hdf5/h5.h"
#include "io/util/atomic_file.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

// Column names and values shared by steps.csv and report.h5 (one place, so both agree).
struct Column {
  std::string name;
  double (*get)(const ReportRow&);
};

std::vector<Column> scalar_columns() {
  return {
      {"step", [](const ReportRow& r) { return double(r.step); }},
      {"wall_ms", [](const ReportRow& r) { return r.wall_ms; }},
      {"loss", [](const ReportRow& r) { return r.loss; }},
      {"lr", [](const ReportRow& r) { return r.lr; }},
      {"grad_norm", [](const ReportRow& r) { return r.grad_norm; }},
      {"tokens", [](const ReportRow& r) { return double(r.tokens); }},
      {"sequences", [](const ReportRow& r) { return double(r.sequences); }},
      {"predictions", [](const ReportRow& r) { return double(r.predictions); }},
      {"micro_batches", [](const ReportRow& r) { return double(r.micro_batches); }},
      {"tflops_per_gpu", [](const ReportRow& r) { return r.tflops_per_gpu; }},
      {"mfu", [](const ReportRow& r) { return r.mfu; }},
      {"peak_mem_gb", [](const ReportRow& r) { return r.peak_mem_gb; }},
      {"predicted_ms", [](const ReportRow& r) { return r.predicted_ms; }},
      {"predicted_mem_gb", [](const ReportRow& r) { return r.predicted_mem_gb; }},
  };
}

// Per phase: <phase>_min, _mean, _max.
double phase_value(const ReportRow& r, size_t phase, int which) {
  const PhaseTimes& t = which == 0 ? r.phases.min : which == 1 ? r.phases.mean : r.phases.max;
  return t.ms[phase];
}
const char* kWhich[3] = {"min", "mean", "max"};

}  // namespace

ReportWriter::ReportWriter(const std::string& dir, const ReportRunInfo& info, int64_t every)
    : dir_(dir), info_(info), every_(std::max<int64_t>(1, every)) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FLEXSP_CHECK(!ec, "report.dir: cannot create '{}': {}", dir, ec.message());
  const std::string path = dir + "/steps.csv";
  csv_ = std::fopen(path.c_str(), "w");
  FLEXSP_CHECK(csv_ != nullptr, "report.dir: cannot write '{}'", path);
  std::string header;
  for (const Column& c : scalar_columns()) header += (header.empty() ? "" : ",") + c.name;
  for (size_t p = 0; p < kPhases; ++p)
    for (const char* w : kWhich) header += fmt::format(",{}_{}_ms", phase_name(Phase(p)), w);
  header += ",plan\n";
  std::fputs(header.c_str(), csv_);
  std::fflush(csv_);
}

ReportWriter::~ReportWriter() {
  if (csv_ != nullptr) std::fclose(csv_);
}

std::string mfu_text(double mfu) { return fmt::format("{:.3g}%", 100 * mfu); }

void ReportWriter::add(ReportRow r) {
  Throughput one;
  one.add(r.wall_ms, double(r.tokens), r.flops);
  r.tflops_per_gpu = one.tflops_per_gpu(info_.world);
  r.mfu = one.mfu(info_.world, info_.peak_tflops);
  FLEXSP_CHECK(r.tflops_per_gpu <= info_.peak_tflops,
               "step {}: {:.1f} TFLOP/s per GPU exceeds report.peak_tflops = {} (a wrong peak, or a "
               "FLOP count that is wrong)", r.step, r.tflops_per_gpu, info_.peak_tflops);
  std::string line;
  for (const Column& c : scalar_columns()) line += fmt::format("{}{:.9g}", line.empty() ? "" : ",", c.get(r));
  for (size_t p = 0; p < kPhases; ++p)
    for (int w = 0; w < 3; ++w) line += fmt::format(",{:.6g}", phase_value(r, p, w));
  line += ",\"" + r.plan + "\"\n";
  std::fputs(line.c_str(), csv_);
  std::fflush(csv_);
  rows_.push_back(std::move(r));
  if (static_cast<int64_t>(rows_.size()) % every_ == 0) write_h5();
}

// The data's sources: their names and weights (root attribute data_sources, JSON) and the
// tokens each gave per step (/steps/source_tokens, steps x sources).
void ReportWriter::write_sources_h5(hid_t file, hid_t steps, const std::string& tmp) const {
  const size_t ns = info_.sources.size();
  if (ns == 0) return;
  nlohmann::json names = nlohmann::json::array();
  for (const auto& [name, weight] : info_.sources) names.push_back({{"name", name}, {"weight", weight}});
  h5::write_attr(file, "data_sources", names.dump());
  std::vector<int64_t> t(rows_.size() * ns, 0);
  for (size_t i = 0; i < rows_.size(); ++i)
    for (size_t k = 0; k < ns && k < rows_[i].source_tokens.size(); ++k) t[i * ns + k] = rows_[i].source_tokens[k];
  const hsize_t dims[2] = {rows_.size(), ns};
  h5::Id space = h5::space_id(H5Screate_simple(2, dims, nullptr));
  h5::Id d = h5::dataset_id(h5::check(H5Dcreate2(steps, "source_tokens", H5T_STD_I64LE, space.get(), H5P_DEFAULT,
                                                H5P_DEFAULT, H5P_DEFAULT), tmp + ": source_tokens"));
  if (!t.empty())
    h5::check_status(H5Dwrite(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data()), "source_tokens");
}

void ReportWriter::write_h5() const {
  const std::string path = dir_ + "/report.h5";
  const std::string tmp = temp_path(path);
  h5::NewFile f = h5::create_file(tmp);
  try {
    {
      h5::write_attr(f.get(), "schema", "flexsp.report");
      h5::write_attr(f.get(), "schema_version", int64_t{1});
      h5::write_attr(f.get(), "world_size", int64_t{info_.world});
      h5::write_attr(f.get(), "nodes", int64_t{info_.nodes});
      h5::write_attr(f.get(), "ranks_per_node", int64_t{info_.ranks_per_node});
      h5::write_attr(f.get(), "sp_mode", info_.sp_mode);
      h5::write_attr(f.get(), "zero", int64_t{info_.zero});
      h5::write_attr(f.get(), "backend", info_.backend);
      h5::write_attr(f.get(), "activations", info_.activations);
      h5::write_attr(f.get(), "tf32", int64_t{info_.tf32 ? 1 : 0});
      h5::write_attr(f.get(), "cuda_attention", info_.cuda_attention);
      h5::write_attr(f.get(), "model", info_.model);
      h5::write_attr(f.get(), "model_params", info_.model_params);
      h5::write_attr(f.get(), "peak_tflops", info_.peak_tflops);
      h5::write_attr(f.get(), "config", info_.config_ini);
      h5::write_attr(f.get(), "flexsp_version", FLEXSP_VERSION);
      h5::Id g = h5::group_id(h5::check(H5Gcreate2(f.get(), "steps", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), tmp + ": /steps"));
      const hsize_t n = rows_.size();
      auto write_col = [&](const std::string& name, const std::vector<double>& v) {
        h5::Id space = h5::space_id(H5Screate_simple(1, &n, nullptr));
        h5::Id d = h5::dataset_id(h5::check(H5Dcreate2(g.get(), name.c_str(), H5T_IEEE_F64LE, space.get(),
                                                      H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), tmp + ": " + name));
        if (n > 0) h5::check_status(H5Dwrite(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), name);
      };
      std::vector<double> v(rows_.size());
      for (const Column& c : scalar_columns()) {
        for (size_t i = 0; i < rows_.size(); ++i) v[i] = c.get(rows_[i]);
        write_col(c.name, v);
      }
      for (size_t p = 0; p < kPhases; ++p)
        for (int w = 0; w < 3; ++w) {
          for (size_t i = 0; i < rows_.size(); ++i) v[i] = phase_value(rows_[i], p, w);
          write_col(fmt::format("{}_{}_ms", phase_name(Phase(p)), kWhich[w]), v);
        }
      // Plans as variable-length strings.
      std::vector<const char*> plans(rows_.size());
      for (size_t i = 0; i < rows_.size(); ++i) plans[i] = rows_[i].plan.c_str();
      h5::Id st = h5::type_id(H5Tcopy(H5T_C_S1));
      H5Tset_size(st.get(), H5T_VARIABLE);
      H5Tset_cset(st.get(), H5T_CSET_UTF8);
      h5::Id space = h5::space_id(H5Screate_simple(1, &n, nullptr));
      h5::Id d = h5::dataset_id(h5::check(H5Dcreate2(g.get(), "plan", st.get(), space.get(), H5P_DEFAULT,
                                                    H5P_DEFAULT, H5P_DEFAULT), tmp + ": plan"));
      if (n > 0) h5::check_status(H5Dwrite(d.get(), st.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, plans.data()), "plan");
      write_sources_h5(f.get(), g.get(), tmp);
      write_pipeline_h5(f.get(), pipeline_, tmp);
    }
    f.close_or_throw(path);
  } catch (...) {
    f.discard_and_rethrow(path, {});
  }
  publish_file(tmp, path);
}

std::string ReportWriter::finish() {
  write_h5();
  const size_t first = throughput_first_step(rows_.size());
  Throughput run;
  double predicted = 0, measured_planned = 0;
  PhaseTimes phase_sum;
  for (size_t i = first; i < rows_.size(); ++i) {
    const ReportRow& r = rows_[i];
    run.add(r.wall_ms, double(r.tokens), r.flops);
    if (r.predicted_ms > 0) predicted += r.predicted_ms, measured_planned += r.wall_ms;
    for (size_t p = 0; p < kPhases; ++p) phase_sum.ms[p] += r.phases.mean.ms[p];
  }
  const double ms = run.ms;
  double peak_mem = 0;
  int64_t all_tokens = 0;
  for (const ReportRow& r : rows_) peak_mem = std::max(peak_mem, r.peak_mem_gb), all_tokens += r.tokens;
  nlohmann::json j;
  j["schema"] = "flexsp.report.summary";
  j["world_size"] = info_.world;
  j["nodes"] = info_.nodes;
  j["ranks_per_node"] = info_.ranks_per_node;
  j["sp_mode"] = info_.sp_mode;
  j["zero"] = info_.zero;
  j["backend"] = info_.backend;
  j["activations"] = info_.activations;
  j["tf32"] = info_.tf32;
  j["cuda_attention"] = info_.cuda_attention;
  j["model"] = info_.model;
  j["steps"] = rows_.size();
  j["tokens"] = all_tokens;
  j["timed_steps"] = run.steps;
  j["mean_step_ms"] = run.mean_ms();
  j["tokens_per_s"] = run.tokens_per_s();
  j["tflops_per_gpu"] = run.tflops_per_gpu(info_.world);
  j["mfu"] = run.mfu(info_.world, info_.peak_tflops);
  j["peak_mem_gb"] = peak_mem;
  j["predicted_over_measured"] = measured_planned > 0 ? predicted / measured_planned : 0;
  j["final_loss"] = rows_.empty() ? 0 : rows_.back().loss;
  nlohmann::json share;
  for (size_t p = 0; p < kPhases; ++p)
    share[phase_name(Phase(p))] = ms > 0 ? phase_sum.ms[p] / ms : 0;
  j["phase_share"] = share;
  if (pipeline_.stages > 0) j["pipeline"] = pipeline_json(pipeline_);
  j["checkpoints"] = nlohmann::json::array();
  for (const ReportCheckpoint& c : checkpoints_)
    j["checkpoints"].push_back({{"step", c.step}, {"path", c.path}, {"bytes", c.bytes},
                                {"stall_ms", c.stall_ms}, {"snapshot_ms", c.snapshot_ms},
                                {"write_ms", c.write_ms}});
  std::string by_source;
  for (size_t k = 0; k < info_.sources.size(); ++k) {
    int64_t t = 0;
    for (const ReportRow& r : rows_) t += k < r.source_tokens.size() ? r.source_tokens[k] : 0;
    const double frac = all_tokens > 0 ? static_cast<double>(t) / static_cast<double>(all_tokens) : 0;
    j["data_sources"].push_back(
        {{"name", info_.sources[k].first}, {"weight", info_.sources[k].second}, {"tokens", t}, {"share", frac}});
    by_source += fmt::format(" {} {:.1f}%", info_.sources[k].first, 100 * frac);
  }
  const std::string path = dir_ + "/summary.json";
  std::ofstream(path) << j.dump(2) << "\n";

  std::string s = fmt::format(
      "run summary ({} ranks, sp_mode {}, ZeRO {}): {} steps, {} tokens; over the {} timed steps: "
      "{:.1f} ms/step, {:.0f} tokens/s, {:.3g} TFLOP/s per GPU, MFU {}; peak memory {:.3f} GB\n",
      info_.world, info_.sp_mode, info_.zero, rows_.size(), all_tokens, run.steps, run.mean_ms(),
      run.tokens_per_s(), run.tflops_per_gpu(info_.world), mfu_text(run.mfu(info_.world, info_.peak_tflops)),
      peak_mem);
  s += "  time share per phase (mean over ranks; phases nest):";
  for (size_t p = 0; p < kPhases; ++p)
    s += fmt::format(" {} {:.0f}%", phase_name(Phase(p)), 100 * share[phase_name(Phase(p))].get<double>());
  if (info_.sources.size() > 1) s += "\n  tokens by source:" + by_source;
  s += fmt::format("\n  report: {}/report.h5, {}/steps.csv, {}/summary.json\n", dir_, dir_, dir_);
  return s;
}

}  // namespace flexsp
