#include "io/report/pipeline_report.h"

#include <fmt/format.h>

#include "io/hdf5/h5.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

// Each field's name in report.h5 and summary.json, read and written through one accessor.
struct Field {
  const char* name;
  double& (*at)(ReportStage&);
};

std::vector<Field> fields() {
  return {
      {"forward_ms", [](ReportStage& s) -> double& { return s.forward_ms; }},
      {"backward_ms", [](ReportStage& s) -> double& { return s.backward_ms; }},
      {"p2p_ms", [](ReportStage& s) -> double& { return s.p2p_ms; }},
      {"schedule_ms", [](ReportStage& s) -> double& { return s.schedule_ms; }},
      {"units", [](ReportStage& s) -> double& { return s.units; }},
      {"bubble", [](ReportStage& s) -> double& { return s.bubble; }},
      {"bubble_formula", [](ReportStage& s) -> double& { return s.bubble_formula; }},
      {"activation_bytes", [](ReportStage& s) -> double& { return s.activation_bytes; }},
  };
}

void write_f64(hid_t g, const std::string& name, const std::vector<double>& v, const std::string& what) {
  const hsize_t n = v.size();
  h5::Id space = h5::space_id(H5Screate_simple(1, &n, nullptr));
  h5::Id d = h5::dataset_id(h5::check(
      H5Dcreate2(g, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      what + ": /pipeline/" + name));
  if (n > 0)
    h5::check_status(H5Dwrite(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
                     what + ": /pipeline/" + name);
}

std::vector<double> read_f64(hid_t g, const std::string& name, size_t n, const std::string& path) {
  FLEXSP_CHECK(h5::exists(g, name), "{}: no /pipeline/{}", path, name);
  h5::Id d = h5::open_dataset(g, name);
  FLEXSP_CHECK(h5::extent_1d(d.get(), name) == static_cast<int64_t>(n), "{}: /pipeline/{} does not hold {} stages",
               path, name, n);
  std::vector<double> v(n);
  h5::check_status(H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
                   fmt::format("{}: cannot read /pipeline/{}", path, name));
  return v;
}

}  // namespace

std::string pipeline_table(const ReportPipeline& p) {
  if (p.stages == 0) return {};
  std::string out = fmt::format(
      "pipeline: {} stages, {}{}; per stage (mean over its ranks, ms per step; host clock)\n"
      "  stage  layers   forward  backward  p2p wait  bubble  formula  activations\n",
      p.stages, p.schedule, p.schedule == "seq1f1b" ? fmt::format(" x {} chunks", p.seq_chunks) : "");
  for (size_t s = 0; s < p.stage.size(); ++s) {
    const ReportStage& x = p.stage[s];
    out += fmt::format("  {:>5}  {:>6}  {:>8.1f}  {:>8.1f}  {:>8.1f}  {:>5.1f}%  {:>6.1f}%  {:>8.2f} MB\n", s,
                       fmt::format("{}-{}", x.first_layer, x.first_layer + x.layers - 1), x.forward_ms,
                       x.backward_ms, x.p2p_ms, 100 * x.bubble, 100 * x.bubble_formula,
                       x.activation_bytes / 1e6);
  }
  return out;
}

void write_pipeline_h5(hid_t file, const ReportPipeline& p, const std::string& what) {
  if (p.stages == 0) return;
  h5::Id g = h5::group_id(
      h5::check(H5Gcreate2(file, "pipeline", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), what + ": /pipeline"));
  h5::write_attr(g.get(), "stages", p.stages);
  h5::write_attr(g.get(), "schedule", p.schedule);
  h5::write_attr(g.get(), "seq_chunks", p.seq_chunks);
  std::vector<ReportStage> st = p.stage;
  std::vector<double> v(st.size());
  for (size_t s = 0; s < st.size(); ++s) v[s] = st[s].first_layer;
  write_f64(g.get(), "first_layer", v, what);
  for (size_t s = 0; s < st.size(); ++s) v[s] = st[s].layers;
  write_f64(g.get(), "layers", v, what);
  for (const Field& f : fields()) {
    for (size_t s = 0; s < st.size(); ++s) v[s] = f.at(st[s]);
    write_f64(g.get(), f.name, v, what);
  }
}

ReportPipeline read_pipeline_h5(hid_t file, const std::string& path) {
  ReportPipeline p;
  if (!h5::exists(file, "pipeline")) return p;
  h5::Id g = h5::group_id(h5::check(H5Gopen2(file, "pipeline", H5P_DEFAULT), path + ": cannot open /pipeline"));
  p.stages = static_cast<int>(h5::read_attr_int(g.get(), "stages"));
  p.schedule = h5::read_attr_string(g.get(), "schedule");
  p.seq_chunks = static_cast<int>(h5::read_attr_int(g.get(), "seq_chunks"));
  FLEXSP_CHECK(p.stages >= 1, "{}: /pipeline has {} stages", path, p.stages);
  const size_t n = static_cast<size_t>(p.stages);
  p.stage.resize(n);
  const std::vector<double> first = read_f64(g.get(), "first_layer", n, path);
  const std::vector<double> layers = read_f64(g.get(), "layers", n, path);
  for (size_t s = 0; s < n; ++s) {
    p.stage[s].first_layer = static_cast<int>(first[s]);
    p.stage[s].layers = static_cast<int>(layers[s]);
  }
  for (const Field& f : fields()) {
    const std::vector<double> v = read_f64(g.get(), f.name, n, path);
    for (size_t s = 0; s < n; ++s) f.at(p.stage[s]) = v[s];
  }
  return p;
}

nlohmann::json pipeline_json(const ReportPipeline& p) {
  nlohmann::json j = {{"stages", p.stages}, {"schedule", p.schedule}, {"seq_chunks", p.seq_chunks}};
  j["per_stage"] = nlohmann::json::array();
  for (size_t s = 0; s < p.stage.size(); ++s) {
    ReportStage x = p.stage[s];
    nlohmann::json o = {{"stage", s}, {"first_layer", x.first_layer}, {"layers", x.layers}};
    for (const Field& f : fields()) o[f.name] = f.at(x);
    j["per_stage"].push_back(o);
  }
  return j;
}

}  // namespace flexsp
