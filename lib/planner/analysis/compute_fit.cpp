// Fitting the cost model's compute terms (lib/planner/analysis/compute_fit.h): normal equations
// solved by Gauss-Jordan (at most 4 columns, so exhaustive non-negative subsets are cheap
// and exact, with no iterative NNLS to tune).
#include "lib/planner/analysis/compute_fit.h"

#include <algorithm>
#include <cmath>

#include "lib/util/error.h"

namespace flexsp {

namespace {

// The columns of the model for one probe: 1, k, sum s / d, sum s^2 / d.
std::vector<double> features(const ComputeProbe& p) {
  double s1 = 0, s2 = 0;
  for (int64_t l : p.lens) s1 += double(l), s2 += double(l) * double(l);
  return {1.0, double(p.lens.size()), s1 / p.d, s2 / p.d};
}

// Least squares y = X b over X's columns; Error when the normal equations are singular.
bool least_squares(const std::vector<std::vector<double>>& X, const std::vector<double>& y,
                   std::vector<double>* b) {
  const size_t k = X.size(), n = y.size();
  std::vector<std::vector<double>> A(k, std::vector<double>(k + 1, 0));
  double scale = 0;
  for (size_t i = 0; i < k; ++i) {
    for (size_t j = 0; j < k; ++j)
      for (size_t r = 0; r < n; ++r) A[i][j] += X[i][r] * X[j][r];
    for (size_t r = 0; r < n; ++r) A[i][k] += X[i][r] * y[r];
    scale = std::max(scale, std::fabs(A[i][i]));
  }
  for (size_t i = 0; i < k; ++i) {  // Gauss-Jordan with partial pivoting
    size_t p = i;
    for (size_t r = i + 1; r < k; ++r)
      if (std::fabs(A[r][i]) > std::fabs(A[p][i])) p = r;
    std::swap(A[i], A[p]);
    if (!(std::fabs(A[i][i]) > 1e-12 * scale)) return false;
    for (size_t r = 0; r < k; ++r)
      if (r != i) {
        const double f = A[r][i] / A[i][i];
        for (size_t c = i; c <= k; ++c) A[r][c] -= f * A[i][c];
      }
  }
  b->assign(k, 0);
  for (size_t i = 0; i < k; ++i) (*b)[i] = A[i][k] / A[i][i];
  return true;
}

}  // namespace

std::vector<double> nonneg_least_squares(const std::vector<std::vector<double>>& X,
                                         const std::vector<double>& y, size_t keep) {
  const size_t k = X.size();
  std::vector<double> best(k, 0.0);
  double best_err = INFINITY;
  for (unsigned mask = 1; mask < (1u << k); ++mask) {
    if (!(mask & (1u << keep))) continue;
    std::vector<std::vector<double>> cols;
    for (size_t c = 0; c < k; ++c)
      if (mask & (1u << c)) cols.push_back(X[c]);
    std::vector<double> b;
    if (!least_squares(cols, y, &b)) continue;  // a subset the probes cannot tell apart
    if (std::any_of(b.begin(), b.end(), [](double v) { return v < 0; })) continue;
    std::vector<double> full(k, 0.0);
    for (size_t c = 0, i = 0; c < k; ++c)
      if (mask & (1u << c)) full[c] = b[i++];
    double err = 0;
    for (size_t r = 0; r < y.size(); ++r) {
      double pred = 0;
      for (size_t c = 0; c < k; ++c) pred += full[c] * X[c][r];
      err += (pred - y[r]) * (pred - y[r]);
    }
    if (err < best_err * (1 - 1e-12)) best_err = err, best = full;  // ties: the first subset (fixed before per_sequence)
  }
  FLEXSP_CHECK(std::isfinite(best_err), "profile: the compute fit is singular (too few distinct lengths)");
  return best;
}

double ComputeFit::predict_ms(const ComputeProbe& p) const {
  const std::vector<double> x = features(p);
  return fixed_ms * x[0] + per_sequence_ms * x[1] + a2_ms * x[2] + a1_ms * x[3] + p.comm_ms;
}

std::vector<std::vector<int64_t>> compute_probe_mixes(const std::vector<int64_t>& lens, int max_pack) {
  std::vector<std::vector<int64_t>> mixes;
  for (int64_t s : lens) mixes.push_back({s});
  const int64_t longest = *std::max_element(lens.begin(), lens.end());
  for (int64_t s : lens) {
    const int64_t k = std::min<int64_t>(max_pack, longest / s);
    if (k >= 2) mixes.emplace_back(static_cast<size_t>(k), s);
  }
  return mixes;
}

ComputeFit fit_compute(const std::vector<ComputeProbe>& probes) {
  std::vector<std::vector<double>> X(4);
  std::vector<double> y;
  for (const ComputeProbe& p : probes) {
    const std::vector<double> x = features(p);
    for (size_t c = 0; c < 4; ++c) X[c].push_back(x[c]);
    y.push_back(std::max(0.0, p.ms - p.comm_ms));
  }
  const std::vector<double> b = nonneg_least_squares(X, y, 2);
  ComputeFit f;
  f.fixed_ms = b[0], f.per_sequence_ms = b[1], f.a2_ms = b[2], f.a1_ms = b[3];
  for (const ComputeProbe& p : probes) f.rms += std::pow((f.predict_ms(p) - p.ms) / p.ms, 2);
  f.rms = probes.empty() ? 0 : std::sqrt(f.rms / double(probes.size()));
  return f;
}

}  // namespace flexsp
