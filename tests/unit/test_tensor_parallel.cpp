// Tensor-parallel parameter blocks (lib/model/tensor_parallel.h, params.h): the blocks of
// tp ranks tile every tensor exactly once (replicated ones on each rank), their seeded
// initialisation is the full model's, extract/insert are inverse, a vocabulary that is
// not a multiple of tp is padded with zero rows, and shapes tp cannot split are errors
// naming parallel.tp_size.
#include <gtest/gtest.h>

#include <vector>

#include "lib/model/params.h"
#include "lib/model/tensor_parallel.h"
#include "lib/util/error.h"
#include "support/error_of.h"

namespace flexsp {
namespace {

ModelConfig model(int heads, int kv_heads, int vocab) {
  ModelConfig c;
  c.hidden = heads * 8;
  c.layers = 2;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = 8;
  c.ffn = 48;
  c.vocab = vocab;
  return c;
}

TEST(TensorParallel, BlocksTileTheModelAndInitialiseAsIt) {
  for (const ModelConfig& c : {model(8, 8, 257), model(8, 2, 64), model(4, 1, 31)}) {
    const ParamTable full = make_param_table(c);
    std::vector<float> want(static_cast<size_t>(full.total));
    init_params(c, full, 7, want.data(), 0, full.total);
    for (int tp : {1, 2, 4, 8}) {
      if (c.heads % tp != 0) continue;
      tp_check(c, tp);
      std::vector<float> got(want.size(), -1.0f);
      std::vector<int> writes(want.size(), 0);
      for (int r = 0; r < tp; ++r) {
        const ParamTable b = make_param_table(c, tp, r);
        ASSERT_EQ(b.views.size(), full.views.size());
        std::vector<float> mine(static_cast<size_t>(b.total)), ext(mine.size());
        init_params(c, b, 7, mine.data(), 0, b.total);
        tp_extract(full, want.data(), b, ext.data());
        EXPECT_EQ(mine, ext) << "tp " << tp << " rank " << r;  // bit for bit
        tp_insert(b, mine.data(), full, got.data());
        for (size_t i = 0; i < b.views.size(); ++i) {
          const ParamView& v = b.views[i];
          if (v.tp_replica != 0) continue;  // count each replicated block once
          for (int64_t e = 0; e < v.valid_rows() * v.cols; ++e)
            ++writes[static_cast<size_t>(full.views[i].offset + v.full_index(e))];
          // Vocabulary padding rows are zero.
          for (int64_t e = v.valid_rows() * v.cols; e < v.numel(); ++e)
            EXPECT_EQ(mine[static_cast<size_t>(v.offset + e)], 0.0f) << v.name;
        }
      }
      for (const ParamView& v : full.views)
        for (int64_t e = 0; e < v.numel(); ++e) {
          const size_t i = static_cast<size_t>(v.offset + e);
          ASSERT_EQ(writes[i], 1) << v.name << " element " << e << " tp " << tp;
          ASSERT_EQ(got[i], want[i]) << v.name << " element " << e << " tp " << tp;
        }
    }
  }
}

TEST(TensorParallel, LocalShapesAndReplicas) {
  const ModelConfig c = model(8, 2, 257);
  const ModelConfig l = tp_local_config(c, 4);
  EXPECT_EQ(l.heads, 2);
  EXPECT_EQ(l.kv_heads, 1);  // 2 kv heads over 4 ranks: each keeps its q heads' one
  EXPECT_EQ(l.ffn, 12);
  EXPECT_EQ(l.vocab, 65);
  EXPECT_EQ(l.hidden, c.hidden);
  const VocabShard last = tp_vocab_shard(c, 4, 3);
  EXPECT_EQ(last.begin, 195);
  EXPECT_EQ(last.valid, 62);
  const ParamTable b = make_param_table(c, 4, 3);
  const ParamView& k = b.get(TensorKind::k_proj, 1);
  EXPECT_EQ(k.rows, 8);
  EXPECT_EQ(k.row0, 8);  // rank 3's q heads 6, 7 use kv head 1
  EXPECT_EQ(k.tp_replicas, 2);
  EXPECT_EQ(k.tp_replica, 1);
  const ParamView& o = b.get(TensorKind::o_proj, 0);
  EXPECT_EQ(o.cols, 16);
  EXPECT_EQ(o.col0, 48);
  // Replicated: two norms per layer, the final norm, and k, v of every layer.
  EXPECT_EQ(tp_replicated_ranges(b).size(), 2u * 2 + 1 + 2u * 2);
  EXPECT_TRUE(tp_replicated_ranges(make_param_table(c, 2, 1)).size() == 2u * 2 + 1);
}

TEST(TensorParallel, ShapesTpCannotSplitAreErrors) {
  EXPECT_NE(error_of([] { tp_check(model(8, 8, 64), 3); }).find("parallel.tp_size: must be 1, 2, 4 or 8"),
            std::string::npos);
  EXPECT_NE(error_of([] { tp_check(model(4, 4, 64), 8); }).find("attention heads"), std::string::npos);
  ModelConfig c = model(8, 8, 64);
  c.ffn = 50;
  EXPECT_NE(error_of([&] { tp_check(c, 4); }).find("FFN width 50"), std::string::npos);
  EXPECT_NE(error_of([] { tp_check(model(8, 6, 64), 4); }).find("kv heads"), std::string::npos);
}

}  // namespace
}  // namespace flexsp
