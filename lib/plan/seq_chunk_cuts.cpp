#include "lib/plan/seq_chunk_cuts.h"

#include <algorithm>
#include <cmath>

#include "lib/util/error.h"

namespace flexsp {

std::vector<int64_t> seq_chunk_bounds(int64_t n, int chunks, double lin, double att) {
  FLEXSP_ASSERT(n >= 0 && chunks >= 1 && lin >= 0 && att > 0);
  auto cost = [&](double t) { return lin * t + att * t * t / 2; };
  std::vector<int64_t> b(static_cast<size_t>(chunks) + 1, 0);
  for (int j = 1; j < chunks; ++j) {
    const double c = cost(static_cast<double>(n)) * j / chunks;
    const double t = (std::sqrt(lin * lin + 2 * att * c) - lin) / att;
    b[static_cast<size_t>(j)] =
        std::clamp<int64_t>(std::llround(t), b[static_cast<size_t>(j) - 1], n);
  }
  b[static_cast<size_t>(chunks)] = n;
  return b;
}

}  // namespace flexsp
