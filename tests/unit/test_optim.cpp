// Optimizer: LR schedule, clipping factor, decay segments (no decay on norms), AdamW over
// the model's flat buffers, and sharded optimizers (ZeRO-1 style ranges) equal to one.
#include <cmath>
#include <numbers>

#include "lib/optim/optim.h"
#include "lib/util/error.h"
#include "test_model_common.h"

namespace flexsp {
namespace {

TEST(Optim, WarmupThenCosineToMinLr) {
  OptimSection o;
  o.lr = 1e-3;
  o.min_lr = 1e-4;
  o.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(lr_at(o, 1, 110), 1e-4);
  EXPECT_DOUBLE_EQ(lr_at(o, 5, 110), 5e-4);
  EXPECT_DOUBLE_EQ(lr_at(o, 10, 110), 1e-3);
  EXPECT_NEAR(lr_at(o, 60, 110), 0.55e-3, 1e-15);  // half way down the cosine
  EXPECT_NEAR(lr_at(o, 35, 110), 1e-4 + 0.45e-3 * (1 + std::cos(std::numbers::pi / 4)), 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(o, 110, 110), 1e-4);
  EXPECT_DOUBLE_EQ(lr_at(o, 200, 110), 1e-4);
  for (int s = 11; s < 110; ++s) EXPECT_LT(lr_at(o, s + 1, 110), lr_at(o, s, 110));
  o.warmup_steps = 0;
  EXPECT_LT(lr_at(o, 1, 100), 1e-3);
  EXPECT_GT(lr_at(o, 1, 100), 0.99e-3);
  o.warmup_steps = 100;  // warm-up longer than the run
  EXPECT_DOUBLE_EQ(lr_at(o, 50, 20), 0.5e-3);
}

TEST(Optim, ClipScaleLikeTorch) {
  EXPECT_DOUBLE_EQ(clip_scale(4.0, 1.0), 1.0 / (2.0 + 1e-6));
  EXPECT_DOUBLE_EQ(clip_scale(0.25, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_scale(100.0, 0.0), 1.0);  // clipping off
  EXPECT_TRUE(std::isnan(clip_scale(INFINITY, 1.0)));
  EXPECT_TRUE(std::isnan(clip_scale(NAN, 1.0)));
}

TEST(Optim, NoDecayOnNorms) {
  const ModelConfig c = testing::tiny_config(97);
  const ParamTable t = make_param_table(c);
  const auto segs = decay_segments(t, 0, t.total);
  auto decay_at = [&](int64_t i) {
    for (const auto& s : segs)
      if (s.begin <= i && i < s.end) return s.decay;
    ADD_FAILURE() << "element " << i << " not covered";
    return false;
  };
  EXPECT_EQ(segs.front().begin, 0);
  EXPECT_EQ(segs.back().end, t.total);
  for (size_t i = 1; i < segs.size(); ++i) EXPECT_EQ(segs[i].begin, segs[i - 1].end);
  for (const ParamView& v : t.views) {
    EXPECT_EQ(decay_at(v.offset), !v.is_1d) << v.name;
    EXPECT_EQ(decay_at(v.offset + v.numel() - 1), !v.is_1d) << v.name;
  }
  // A sub-range starts and ends where asked.
  const auto sub = decay_segments(t, 100, 5000);
  EXPECT_EQ(sub.front().begin, 100);
  EXPECT_EQ(sub.back().end, 5000);
}

// One AdamW step on the model's buffers: matrices decay, norms do not; and optimizers on
// three shards of the buffer give exactly what one optimizer over all of it gives.
TEST(Optim, AdamWOnFlatBuffersAndShards) {
  testing::ModelFixture f(testing::tiny_config(97), 64, 2);
  testing::Rng r(3);
  const auto b = testing::pack({testing::random_tokens(r, 50, 97)});
  f.loss_and_grad(b, 1.0 / 49);
  const ParamTable& t = f.table();
  OptimSection o;
  o.weight_decay = 0.5;
  const std::vector<float> p0(f.params.get(), f.params.get() + t.total);
  std::vector<float> whole = p0, sharded = p0;
  AdamW one(*f.be, t);
  for (int step = 1; step <= 3; ++step) one.step(whole.data(), f.grads.get(), o, 1e-2, 0.5);
  EXPECT_EQ(one.steps(), 3);
  const int64_t cuts[] = {0, 1000, t.total / 2 + 3, t.total};
  for (int i = 0; i < 3; ++i) {
    AdamW part(*f.be, t, cuts[i], cuts[i + 1]);
    for (int step = 1; step <= 3; ++step)
      part.step(sharded.data() + cuts[i], f.grads.get() + cuts[i], o, 1e-2, 0.5);
  }
  EXPECT_EQ(whole, sharded);
  // Decay: a weight with zero gradient shrinks by (1 - lr wd) per step in a matrix only.
  std::vector<float> zero(t.total, 0.0f), p = p0;
  AdamW z(*f.be, t);
  z.step(p.data(), zero.data(), o, 1e-2);
  const ParamView& q = t.get(TensorKind::q_proj, 0);
  const ParamView& n = t.get(TensorKind::attn_norm, 0);
  EXPECT_FLOAT_EQ(p[q.offset], p0[q.offset] * (1 - 1e-2f * 0.5f));
  EXPECT_EQ(p[n.offset], p0[n.offset]);
  EXPECT_THROW(z.step(p.data(), zero.data(), o, 1e-2, std::nan("")), Error);
  EXPECT_EQ(z.steps(), 1);
}

}  // namespace
}  // namespace flexsp
