#include "lib/runtime/zigzag.h"

#include "lib/util/error.h"

namespace flexsp {

int64_t ZigzagLayout::early_tokens(int p) const {
  int64_t n = 0;
  for (int s = 0; s < ndoc; ++s) n += early_len(s, p);
  return n;
}

ZigzagLayout zigzag_layout(const int32_t* cu, int nseq, int r) {
  FLEXSP_CHECK(r >= 1, "zigzag: ring of {} positions", r);
  ZigzagLayout z;
  z.r = r;
  z.ndoc = nseq;
  z.tokens.assign(static_cast<size_t>(r), 0);
  const int n = 2 * r;
  z.bounds.resize(static_cast<size_t>(nseq) * (n + 1));
  std::vector<int32_t> len(static_cast<size_t>(n));
  int next = 0;  // the position the next extra token goes to
  for (int s = 0; s < nseq; ++s) {
    const int32_t L = cu[s + 1] - cu[s];
    FLEXSP_ASSERT(L >= 0);
    for (int c = 0; c < n; ++c) len[c] = L / n;
    // Extra tokens: one per position in turn; a position's first extra lengthens its
    // late chunk, a second (L % 2r > r) its early one.
    for (int e = 0; e < L % n; ++e) {
      const int p = (next + e) % r;
      if (e < r) ++len[n - 1 - p];
      else ++len[p];
    }
    next = (next + L % n) % r;
    int32_t* b = &z.bounds[static_cast<size_t>(s) * (n + 1)];
    b[0] = cu[s];
    for (int c = 0; c < n; ++c) b[c + 1] = b[c] + len[c];
    for (int p = 0; p < r; ++p) z.tokens[p] += len[p] + len[n - 1 - p];
  }
  return z;
}

std::vector<int64_t> zigzag_indices(const ZigzagLayout& z, int p) {
  FLEXSP_ASSERT(p >= 0 && p < z.r);
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(z.tokens[p]));
  for (int half = 0; half < 2; ++half) {
    const int c = half == 0 ? p : 2 * z.r - 1 - p;
    for (int s = 0; s < z.ndoc; ++s)
      for (int32_t t = z.chunk_begin(s, c); t < z.chunk_begin(s, c + 1); ++t) idx.push_back(t);
  }
  return idx;
}

void zigzag_owners(const ZigzagLayout& z, std::vector<int32_t>& owner,
                   std::vector<int64_t>& local) {
  const int64_t T = z.ndoc == 0 ? 0 : z.chunk_begin(z.ndoc - 1, 2 * z.r);
  owner.assign(static_cast<size_t>(T), -1);
  local.assign(static_cast<size_t>(T), -1);
  for (int p = 0; p < z.r; ++p) {
    const std::vector<int64_t> idx = zigzag_indices(z, p);
    for (size_t i = 0; i < idx.size(); ++i) {
      owner[idx[i]] = p;
      local[idx[i]] = static_cast<int64_t>(i);
    }
  }
}

}  // namespace flexsp
