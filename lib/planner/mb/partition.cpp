// Bucketing and chunking DPs (see partition.h). Both are textbook interval DPs; the only
// choices are determinism (ties keep the earliest cut) and restricting cuts to points
// between distinct lengths, so equal sequences always share a bucket.
#include "lib/planner/mb/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lib/util/error.h"

namespace flexsp {

std::vector<int> bucket_lengths(const std::vector<int64_t>& a, int max_buckets) {
  const int n = static_cast<int>(a.size());
  if (n == 0) return {};
  FLEXSP_ASSERT(max_buckets >= 1);
  // Candidate ends: after the last copy of each distinct length.
  std::vector<int> ends;
  for (int i = 1; i <= n; ++i)
    if (i == n || a[i] != a[i - 1]) ends.push_back(i);
  const int k = static_cast<int>(ends.size());
  const int b = std::min(max_buckets, k);
  if (b == k) return ends;
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + a[i];
  // pad(i, j): bucket holding candidates (i, j] = sequences [ends[i], ends[j]), i = -1 start.
  auto start = [&](int i) { return i < 0 ? 0 : ends[i]; };
  auto pad = [&](int i, int j) {
    const int s = start(i), e = ends[j];
    return a[e - 1] * (e - s) - (prefix[e] - prefix[s]);
  };
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  // best[c][j]: least padding of sequences [0, ends[j]) in c + 1 buckets; from[c][j] its
  // last bucket's start (the earliest of equal ones). The padding obeys the quadrangle
  // inequality (pad(i1, j1) + pad(i2, j2) - pad(i1, j2) - pad(i2, j1) = (start(i2) -
  // start(i1)) (a[ends[j1] - 1] - a[ends[j2] - 1]) <= 0 for i1 <= i2, j1 <= j2, the lengths
  // ascending), so the earliest best start never decreases as j grows: each row is solved
  // by divide and conquer over j, O(k log k) instead of O(k^2), with the same cuts.
  std::vector<std::vector<int64_t>> best(b, std::vector<int64_t>(k, kInf));
  std::vector<std::vector<int>> from(b, std::vector<int>(k, -1));
  for (int j = 0; j < k; ++j) best[0][j] = pad(-1, j);
  for (int c = 1; c < b; ++c) {
    const std::vector<int64_t>& prev = best[c - 1];
    std::vector<int64_t>& row = best[c];
    std::vector<int>& cut = from[c];
    // Row c for j in [jlo, jhi], its best start known to lie in [ilo, ihi].
    auto solve = [&](auto&& self, int jlo, int jhi, int ilo, int ihi) -> void {
      if (jlo > jhi) return;
      const int j = jlo + (jhi - jlo) / 2;
      for (int i = std::max(ilo, c - 1); i <= std::min(ihi, j - 1); ++i) {
        const int64_t v = prev[i] + pad(i, j);
        if (v < row[j]) row[j] = v, cut[j] = i;
      }
      const int at = cut[j] < 0 ? ilo : cut[j];
      self(self, jlo, j - 1, ilo, at);
      self(self, j + 1, jhi, at, ihi);
    };
    solve(solve, c, k - 1, c - 1, k - 2);
  }
  std::vector<int> out;
  for (int c = b - 1, j = k - 1; c >= 0; j = from[c][j], --c) out.push_back(ends[j]);
  std::reverse(out.begin(), out.end());
  return out;
}

int64_t bucket_padding(const std::vector<int64_t>& a, const std::vector<int>& ends) {
  int64_t pad = 0;
  int s = 0;
  for (int e : ends) {
    for (int i = s; i < e; ++i) pad += a[e - 1] - a[i];
    s = e;
  }
  return pad;
}

std::vector<int> chunk_split(int n, int m, const std::vector<int>& cuts,
                             const std::function<double(int, int)>& cost) {
  const int k = static_cast<int>(cuts.size());
  if (m < 1 || k == 0 || cuts.back() != n || m > k) return {};
  constexpr double kInf = std::numeric_limits<double>::infinity();
  auto start = [&](int i) { return i < 0 ? 0 : cuts[i]; };
  // Chunk costs do not depend on the chunk's rank: each (i, j) once (k^2 / 2 calls, not m k^2 / 2).
  std::vector<double> chunk(static_cast<size_t>(k) * k, kInf);  // [i + 1][j]: chunk (start(i), cuts[j]]
  const bool need_table = m > 1;
  for (int i = -1; need_table && i < k - 1; ++i)
    for (int j = i + 1; j < k; ++j) chunk[static_cast<size_t>(i + 1) * k + j] = cost(start(i), cuts[j]);
  std::vector<std::vector<double>> best(m, std::vector<double>(k, kInf));
  std::vector<std::vector<int>> from(m, std::vector<int>(k, -1));
  for (int j = 0; j < k; ++j) best[0][j] = need_table ? chunk[j] : cost(0, cuts[j]);
  for (int c = 1; c < m; ++c)
    for (int j = c; j < k; ++j)
      for (int i = c - 1; i < j; ++i) {
        if (best[c - 1][i] == kInf) continue;
        const double v = best[c - 1][i] + chunk[static_cast<size_t>(i + 1) * k + j];
        if (v < best[c][j]) best[c][j] = v, from[c][j] = i;
      }
  if (!std::isfinite(best[m - 1][k - 1])) return {};
  std::vector<int> out;
  for (int c = m - 1, j = k - 1; c >= 0; j = from[c][j], --c) out.push_back(cuts[j]);
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace flexsp
