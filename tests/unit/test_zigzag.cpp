// The zigzag layout of ring attention (lib/runtime/zigzag.h): the split over r positions
// and its inverse are exact (every stream token lands on exactly one position, and back),
// position p holds chunks p and 2r-1-p of every document in its two halves, chunk sizes
// differ by at most one, and positions by at most one token -- for documents of 1, 2, odd
// and 2r-1 tokens, many tiny documents and none.
#include <gtest/gtest.h>

#include <algorithm>

#include "lib/runtime/ring_attention.h"
#include "lib/runtime/zigzag.h"

namespace flexsp {
namespace {

void check_layout(const std::vector<int32_t>& cu, int r) {
  const int nseq = static_cast<int>(cu.size()) - 1;
  const ZigzagLayout z = zigzag_layout(cu.data(), nseq, r);
  const int64_t T = cu.back();
  // Split then inverse: the identity.
  std::vector<int32_t> owner;
  std::vector<int64_t> local;
  zigzag_owners(z, owner, local);
  ASSERT_EQ(static_cast<int64_t>(owner.size()), T);
  std::vector<int> seen(static_cast<size_t>(T), 0);
  int64_t total = 0;
  for (int p = 0; p < r; ++p) {
    const auto idx = zigzag_indices(z, p);
    ASSERT_EQ(static_cast<int64_t>(idx.size()), z.tokens[p]);
    total += z.tokens[p];
    for (size_t i = 0; i < idx.size(); ++i) {
      ++seen[idx[i]];
      EXPECT_EQ(owner[idx[i]], p);
      EXPECT_EQ(local[idx[i]], static_cast<int64_t>(i));
    }
    // Early half: chunk p of each document in order; late half: chunk 2r-1-p.
    size_t i = 0;
    for (int half = 0; half < 2; ++half)
      for (int s = 0; s < nseq; ++s) {
        const int c = half == 0 ? p : 2 * r - 1 - p;
        for (int32_t t = z.chunk_begin(s, c); t < z.chunk_begin(s, c + 1); ++t)
          EXPECT_EQ(idx[i++], t);
      }
    EXPECT_EQ(z.early_tokens(p) + [&] {
      int64_t n = 0;
      for (int s = 0; s < nseq; ++s) n += z.late_len(s, p);
      return n;
    }(), z.tokens[p]);
  }
  EXPECT_EQ(total, T);
  for (int64_t t = 0; t < T; ++t) EXPECT_EQ(seen[t], 1) << "token " << t;
  // Chunks tile each document in order, sizes within one token.
  for (int s = 0; s < nseq; ++s) {
    EXPECT_EQ(z.chunk_begin(s, 0), cu[s]);
    EXPECT_EQ(z.chunk_begin(s, 2 * r), cu[s + 1]);
    int32_t lo = 1 << 30, hi = 0;
    for (int c = 0; c < 2 * r; ++c) {
      lo = std::min(lo, z.chunk_len(s, c));
      hi = std::max(hi, z.chunk_len(s, c));
    }
    EXPECT_LE(hi - lo, 1);
  }
  const auto [mn, mx] = std::minmax_element(z.tokens.begin(), z.tokens.end());
  EXPECT_LE(*mx - *mn, 1) << "r=" << r;
}

TEST(Zigzag, SplitAndInverseAreExact) {
  for (int r : {1, 2, 3, 4, 8}) {
    check_layout({0, 1, 3, 10, 10 + 2 * r - 1, 60, 61, 100}, r);
    check_layout({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, r);  // 1-token documents
    check_layout({0, 2 * r - 1}, r);
    check_layout({0, 2 * r + 1, 4 * r + 2}, r);
    check_layout({0}, r);  // no document
    std::vector<int32_t> many{0};
    for (int i = 0; i < 50; ++i) many.push_back(many.back() + 1 + (i * 7) % 23);
    check_layout(many, r);
  }
}

TEST(Zigzag, LocalTokensPadAndShard) {
  // Two documents over r = 2, u = 2, positions padded to a multiple of 6 (pads).
  const std::vector<int32_t> cu{0, 5, 8};
  std::vector<int32_t> ids(8), pos(8), tgt(8);
  for (int t = 0; t < 8; ++t) ids[t] = 100 + t, pos[t] = t < 5 ? t : t - 5, tgt[t] = t;
  const ZigzagLayout z = zigzag_layout(cu.data(), 2, 2);
  const auto padded = cp_padded_tokens(z, 6);
  std::vector<int32_t> all_ids;
  for (int member = 0; member < 4; ++member) {
    std::vector<int32_t> i, p, t;
    cp_local_tokens(ids.data(), pos.data(), tgt.data(), z, padded, 2, member, i, p, t);
    EXPECT_EQ(i.size(), 3u);
    for (size_t k = 0; k < i.size(); ++k) {
      if (t[k] < 0) {  // padding: token 0 at position 0, no target
        EXPECT_EQ(i[k], 0);
        EXPECT_EQ(p[k], 0);
      } else {
        EXPECT_EQ(i[k], 100 + t[k]);
        EXPECT_EQ(p[k], pos[t[k]]);
        all_ids.push_back(i[k]);
      }
    }
  }
  std::sort(all_ids.begin(), all_ids.end());
  EXPECT_EQ(all_ids, (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 106, 107}));
}

}  // namespace
}  // namespace flexsp
