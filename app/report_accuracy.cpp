// The predicted-against-measured figures of a timing report (report_accuracy.h).
#include "app/report_accuracy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "io/hdf5/h5.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

std::vector<double> column(hid_t g, const std::string& name, const std::string& path) {
  if (!h5::exists(g, name)) return {};  // reports written before the column existed
  h5::Id d = h5::open_dataset(g, name);
  std::vector<double> v(static_cast<size_t>(h5::extent_1d(d.get(), name)));
  h5::Quiet q;
  if (!v.empty())
    h5::check_status(H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
                     fmt::format("{}: cannot read /steps/{}", path, name));
  return v;
}

// The q-quantile of sorted values, interpolated between neighbours.
double quantile(const std::vector<double>& v, double q) {
  const double x = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(x));
  const size_t j = std::min(i + 1, v.size() - 1);
  return v[i] + (v[j] - v[i]) * (x - static_cast<double>(i));
}

}  // namespace

PredictionAccuracy prediction_accuracy(hid_t steps, const std::string& path) {
  PredictionAccuracy a;
  const std::vector<double> wall = column(steps, "wall_ms", path), pred = column(steps, "predicted_ms", path);
  const std::vector<double> mem = column(steps, "peak_mem_gb", path), pmem = column(steps, "predicted_mem_gb", path);
  std::vector<double> err;
  const size_t first = wall.size() > 1 ? 1 : 0;
  for (size_t i = first; i < wall.size() && i < pred.size(); ++i)
    if (pred[i] > 0 && wall[i] > 0) err.push_back(pred[i] / wall[i] - 1), a.predicted_ms += pred[i];
  std::sort(err.begin(), err.end());
  a.steps = static_cast<int64_t>(err.size());
  if (!err.empty()) {
    a.predicted_ms /= static_cast<double>(err.size());
    a.median = quantile(err, 0.5);
    a.p10 = quantile(err, 0.1);
    a.p90 = quantile(err, 0.9);
    a.max_abs = std::max(std::fabs(err.front()), std::fabs(err.back()));
  }
  for (double m : mem) a.mem_measured_gb = std::max(a.mem_measured_gb, m);
  for (double m : pmem) a.mem_predicted_gb = std::max(a.mem_predicted_gb, m);
  if (a.mem_measured_gb <= 0) a.mem_predicted_gb = 0;
  return a;
}

std::string prediction_accuracy_text(const PredictionAccuracy& a) {
  auto pct = [](double e) { return fmt::format("{:+.1f}%", 100 * e); };
  std::string s = a.steps == 0 ? std::string("step time: no predictions")
                               : fmt::format("step time: median {}, p10 {}, p90 {}, max |error| {:.1f}% over {} step{}",
                                             pct(a.median), pct(a.p10), pct(a.p90), 100 * a.max_abs, a.steps,
                                             a.steps == 1 ? "" : "s");
  s += a.mem_predicted_gb > 0 ? fmt::format("; peak memory: predicted {:.4g} GB, measured {:.4g} GB ({})",
                                            a.mem_predicted_gb, a.mem_measured_gb, pct(a.mem_error()))
                              : std::string("; peak memory: no prediction");
  return s;
}

}  // namespace flexsp
