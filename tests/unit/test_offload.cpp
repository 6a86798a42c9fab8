// Activation offload (lib/model/offload.h) on the CPU backend, whose copies run on a
// worker thread: the gradients are bit-identical to the run without offload, the blocks
// come back ahead of their layer's backward, and the allocator's high-water mark drops by
// what the ring saves, computed here from the model's shapes. With offload_plain_tokens
// the same for micro-batches alternately offloaded and kept on the device, whose
// high-water mark is the larger of the two layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lib/planner/cost/cost_model.h"
#include "lib/planner/cost/memory_model.h"
#include "test_model_common.h"

namespace flexsp::testing {
namespace {

ModelConfig deep_config(bool checkpoint, bool offload, int ahead = 2) {
  ModelConfig c = tiny_config(97, 2, false, checkpoint);
  c.layers = 8;
  c.offload = offload;
  c.offload_ahead = ahead;
  return c;
}

PackedBatch batch(uint64_t seed, std::vector<int> lens) {
  Rng r(seed);
  std::vector<std::vector<int32_t>> seqs;
  for (int n : lens) seqs.push_back(random_tokens(r, n, 97));
  return pack(seqs);
}

struct Result {
  std::vector<double> losses;
  std::vector<float> grads;
};

// Two micro-batches of different sizes (the host pool and the ring reused), gradients
// accumulated.
Result run(const ModelConfig& c, DType act = DType::f32) {
  ModelFixture f(c, 160, 7, make_cpu_backend(act));
  f.be->zero(f.grads.get(), f.grads.bytes());
  Result r;
  for (const PackedBatch& b : {batch(1, {70, 50, 33}), batch(2, {41, 19})}) {
    r.losses.push_back(f.model->forward(f.params.get(), b.mb()).loss_sum);
    f.model->backward(f.params.get(), f.grads.get(), 1.0 / 150);
  }
  r.grads = f.grad_vec();
  return r;
}

TEST(Offload, BitIdenticalToNoOffload) {
  for (const bool ckpt : {true, false})
    for (const DType act : {DType::f32, DType::bf16})
      for (const int ahead : {1, 3}) {
        SCOPED_TRACE(::testing::Message() << "checkpointing " << ckpt << ", " << dtype_name(act)
                                          << ", ahead " << ahead);
        const Result a = run(deep_config(ckpt, false), act), b = run(deep_config(ckpt, true, ahead), act);
        EXPECT_EQ(a.losses, b.losses);
        ASSERT_EQ(a.grads.size(), b.grads.size());
        EXPECT_TRUE(a.grads == b.grads);
      }
}

// The provider marks where each layer's backward asks for its weights; the offload's
// trace adds its copies and waits to the same log.
class LoggingParams final : public ParamProvider {
 public:
  LoggingParams(const ParamTable& t, const float* p, float* g, std::vector<std::string>* log)
      : flat_(t), log_(log), layers_(t.layers) {
    flat_.set(p, g);
  }
  const float* unit_params(int u) override {
    if (u >= 1 && u <= layers_) log_->push_back("B" + std::to_string(u - 1));
    return flat_.unit_params(u);
  }
  float* unit_grads(int u) override { return flat_.unit_grads(u); }
  void unit_done(int, bool) override {}

 private:
  FlatParams flat_;
  std::vector<std::string>* log_;
  int layers_;
};

TEST(Offload, BlocksComeBackAheadOfTheirBackward) {
  for (const bool ckpt : {true, false}) {
    const int ahead = 3, L = 8, slots = ahead + 2;
    const ModelConfig c = deep_config(ckpt, true, ahead);
    ModelFixture f(c, 160);
    std::vector<std::string> log;
    f.model->set_offload_trace([&](const OffloadEvent& e) {
      const char* k = e.step == OffloadStep::store ? "S" : e.step == OffloadStep::fetch ? "F" : "W";
      log.push_back(k + std::to_string(e.layer));
    });
    LoggingParams pp(f.table(), f.params.get(), f.grads.get(), &log);
    const PackedBatch b = batch(3, {90, 60});
    for (int rep = 0; rep < 2; ++rep) {  // the second micro-batch reuses the pool
      SCOPED_TRACE(::testing::Message() << "checkpointing " << ckpt << ", micro-batch " << rep);
      f.model->forward(pp, b.mb());
      std::vector<std::string> stores;
      for (const std::string& s : log)
        if (s[0] == 'S') stores.push_back(s);
      ASSERT_EQ(stores.size(), static_cast<size_t>(L));  // every layer's block, in order
      for (int l = 0; l < L; ++l) EXPECT_EQ(stores[static_cast<size_t>(l)], "S" + std::to_string(l));
      log.clear();
      f.model->backward(pp, 1.0);
      auto pos = [&](const std::string& s) {
        const auto it = std::find(log.begin(), log.end(), s);
        return it == log.end() ? -1 : static_cast<int>(it - log.begin());
      };
      // The last `slots` blocks never left their slots; every earlier one is fetched once,
      // queued at the backward of the layer `ahead` above it, so that `ahead - 1` whole
      // layers' backward run while it travels; the compute waits for it at its own layer.
      for (int l = 0; l < L; ++l) {
        const int fetched = static_cast<int>(std::count(log.begin(), log.end(), "F" + std::to_string(l)));
        if (l >= L - slots) {
          EXPECT_EQ(fetched, 0) << "layer " << l;
          continue;
        }
        ASSERT_EQ(fetched, 1) << "layer " << l;
        const int f_at = pos("F" + std::to_string(l)), b_at = pos("B" + std::to_string(l));
        const int w_at = pos("W" + std::to_string(l));
        int between = 0;
        for (int i = f_at + 1; i < b_at; ++i) between += log[static_cast<size_t>(i)][0] == 'B';
        EXPECT_GE(between, ahead - 1) << "layer " << l << ": fetched too late";
        EXPECT_GT(w_at, b_at) << "layer " << l;
      }
      log.clear();
    }
  }
}

// A micro-batch of one sequence: its tokens, and whether its blocks go to the host.
struct Step {
  int64_t tokens;
  bool offload;
};

// Peak bytes the allocator sees from the construction of a model for T tokens to the end
// of its micro-batches (each a forward and a backward).
size_t peak_of_steps(const ModelConfig& c, int64_t T, const std::vector<Step>& steps) {
  auto be = make_cpu_backend();
  Buffer<float> params, grads;
  {
    Llama probe(*be, c, T);
    params = Buffer<float>(*be, static_cast<size_t>(probe.params().total));
    grads = Buffer<float>(*be, static_cast<size_t>(probe.params().total));
    init_params(c, probe.params(), 1, params.get(), 0, probe.params().total);
  }
  be->reset_peak_allocated_bytes();
  const size_t before = be->allocated_bytes();
  {
    Llama m(*be, c, T);
    for (const Step& s : steps) {
      const PackedBatch b = batch(5, {static_cast<int>(s.tokens)});
      MicroBatch mb = b.mb();
      mb.offload = s.offload;
      m.forward(params.get(), mb);
      m.backward(params.get(), grads.get(), 1.0);
    }
  }
  return be->peak_allocated_bytes() - before;
}

size_t peak_of_step(const ModelConfig& c, int64_t T) { return peak_of_steps(c, T, {{T, true}}); }

TEST(Offload, HighWaterMarkDropsByTheRing) {
  const int64_t T = 256;
  for (const bool ckpt : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "checkpointing " << ckpt);
    const int ahead = 2, L = 8, slots = ahead + 2;
    const ModelConfig c = deep_config(ckpt, false);
    const int64_t H = c.hidden, Q = c.q_dim(), K = c.kv_dim(), F = c.ffn;
    // What one layer keeps for its backward: its input, and without checkpointing
    // ln1, q, k, v, att, xmid, ln2, gate, up and two rows of norm statistics (fp32 here).
    const double block = ckpt ? 4.0 * T * H : 4.0 * T * (H + H + Q + 2 * K + Q + H + H + 2 * F + 2);
    const double saved = (L - slots) * block;
    const double off = static_cast<double>(peak_of_step(deep_config(ckpt, true, ahead), T));
    const double on = static_cast<double>(peak_of_step(c, T));
    EXPECT_GE(on - off, saved);
    EXPECT_LE(on - off, saved * 1.05 + 64.0 * 4 * 12 * (L - slots));  // the pieces' 64-element alignment
  }
}

// ---- micro-batches that keep their blocks on the device (offload_plain_tokens) ---------------

constexpr int64_t kPlain = 100;  // P

ModelConfig mixed_config(bool checkpoint, bool offload, int64_t chunk = 0) {
  ModelConfig c = deep_config(checkpoint, offload);
  c.offload_plain_tokens = offload ? kPlain : 0;
  c.token_chunk = chunk;
  return c;
}

// Micro-batches of different sizes, alternately offloaded and kept on the device (those
// at most P tokens, two of them exactly P, one within a 32-token chunk).
struct MixedStep {
  std::vector<int> lens;
  bool offload;
};
const std::vector<MixedStep> kMixed{{{70, 50, 33}, true}, {{60, 40}, false}, {{41, 19}, true},
                                    {{20, 9}, false},     {{90, 40}, true},  {{100}, false}};

// Losses, gradients and, per micro-batch, the blocks stored to the host.
struct MixedResult {
  std::vector<double> losses;
  std::vector<float> grads;
  std::vector<int> stores;
};

MixedResult run_mixed(const ModelConfig& c, DType act) {
  ModelFixture f(c, 160, 7, make_cpu_backend(act));
  f.be->zero(f.grads.get(), f.grads.bytes());
  int stores = 0;
  f.model->set_offload_trace([&](const OffloadEvent& e) { stores += e.step == OffloadStep::store; });
  MixedResult r;
  uint64_t seed = 10;
  for (const MixedStep& s : kMixed) {
    const PackedBatch b = batch(seed++, s.lens);
    MicroBatch mb = b.mb();
    mb.offload = s.offload;
    stores = 0;
    r.losses.push_back(f.model->forward(f.params.get(), mb).loss_sum);
    f.model->backward(f.params.get(), f.grads.get(), 1.0 / 600);
    r.stores.push_back(stores);
  }
  r.grads = f.grad_vec();
  return r;
}

TEST(Offload, MixedMicroBatchesBitIdenticalToNoOffload) {
  struct Case {
    bool ckpt;
    DType act;
    int64_t chunk;
  };
  for (const Case k : {Case{true, DType::f32, 0}, Case{true, DType::bf16, 0}, Case{false, DType::f32, 0},
                       Case{false, DType::bf16, 0}, Case{true, DType::f32, 32}}) {
    SCOPED_TRACE(::testing::Message() << "checkpointing " << k.ckpt << ", " << dtype_name(k.act)
                                      << ", token chunk " << k.chunk);
    const MixedResult a = run_mixed(mixed_config(k.ckpt, false, k.chunk), k.act);
    const MixedResult b = run_mixed(mixed_config(k.ckpt, true, k.chunk), k.act);
    EXPECT_EQ(a.losses, b.losses);
    ASSERT_EQ(a.grads.size(), b.grads.size());
    EXPECT_TRUE(a.grads == b.grads);
    // Every layer's block goes to the host in an offloaded micro-batch, none in another.
    for (size_t i = 0; i < kMixed.size(); ++i)
      EXPECT_EQ(b.stores[i], kMixed[i].offload ? 8 : 0) << "micro-batch " << i;
  }
}

// The saved activations of micro-batches of t tokens (fp32) in `slots` input slots and the
// head's: each layer's input, and one layer's activations per slot (one under
// checkpointing) -- ln1, q, k, v, att, xmid, ln2, gate, up and two rows of statistics.
double layout_bytes(const ModelConfig& c, int64_t t, int slots) {
  const double H = c.hidden, Q = c.q_dim(), K = c.kv_dim(), F = c.ffn;
  const double acts = 4.0 * t * (H + Q + 2 * K + Q + H + H + 2 * F + 2);
  return 4.0 * t * H * (slots + 1) + (c.checkpoint_activations ? 1 : slots) * acts;
}

TEST(Offload, MixedHighWaterMarkIsTheLargerLayout) {
  const int64_t T = 512;  // and P: multiples of 64, so no piece is padded
  const int L = 8, slots = 4;
  for (const bool ckpt : {true, false})
    for (const int64_t P : {128, 448}) {  // the ring's layout the larger, then the plain one's
      SCOPED_TRACE(::testing::Message() << "checkpointing " << ckpt << ", P " << P);
      ModelConfig mixed = deep_config(ckpt, true);
      mixed.offload_plain_tokens = P;
      const ModelConfig plain = deep_config(ckpt, false);
      const std::vector<Step> steps{{T, true}, {P, false}};
      const double on = static_cast<double>(peak_of_steps(plain, T, steps));
      const double off = static_cast<double>(peak_of_steps(mixed, T, steps));
      // Everything but the saved activations is the same in both models.
      const double rest = on - layout_bytes(plain, T, L);
      EXPECT_LE(off - rest, std::max(layout_bytes(plain, T, slots), layout_bytes(plain, P, L)));
      EXPECT_LT(off, on);
    }
}

TEST(Offload, PlainMicroBatchAboveItsBoundIsRefused) {
  ModelConfig c = mixed_config(true, true);
  ModelFixture f(c, 160);
  const PackedBatch b = batch(4, {60, 41});  // P + 1 tokens
  MicroBatch mb = b.mb();
  mb.offload = false;
  try {
    f.model->forward(f.params.get(), mb);
    ADD_FAILURE() << "a micro-batch of P + 1 tokens kept on the device";
  } catch (const Error& e) {
    const std::string s = e.what();
    EXPECT_NE(s.find("offload_plain_tokens = 100"), std::string::npos) << s;
    EXPECT_NE(s.find("101 tokens"), std::string::npos) << s;
  }
  // Nothing lost: one kept at P runs, and so does the refused one offloaded.
  const PackedBatch at_p = batch(4, {60, 40});
  MicroBatch kept = at_p.mb();
  kept.offload = false;
  mb.offload = true;
  for (const MicroBatch& m : {kept, mb}) {
    EXPECT_NO_THROW(f.model->forward(f.params.get(), m));
    EXPECT_NO_THROW(f.model->backward(f.params.get(), f.grads.get(), 1.0));
  }
  c.offload_plain_tokens = -1;
  try {
    ModelFixture g(c, 160);
    ADD_FAILURE() << "offload_plain_tokens = -1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offload_plain_tokens"), std::string::npos) << e.what();
  }
}

// bw_h2d: a default where a file lacks it, read and written back where it has it.
TEST(Offload, CostModelKeepsBwH2d) {
  EXPECT_EQ(cost_model_parse("model = 7b\n", "old.ini").bw_h2d_gbs, 25);
  const CostModel cm = cost_model_parse("model = 7b\nbw_h2d = 52.5\n", "new.ini");
  EXPECT_EQ(cm.bw_h2d_gbs, 52.5);
  EXPECT_EQ(cost_model_parse(cost_model_to_ini(cm, "round trip"), "again.ini").bw_h2d_gbs, 52.5);
  EXPECT_THROW(cost_model_parse("bw_h2d = 0\n", "bad.ini"), Error);
}

// The host pool the memory model predicts is the one the model allocates, per token.
TEST(Offload, HostBytesAsPredicted) {
  for (const bool ckpt : {true, false}) {
    const ModelConfig c = deep_config(ckpt, true);
    const int64_t T = 640;  // a multiple of 64: no alignment padding
    auto be = make_cpu_backend();
    Llama m(*be, c, T);
    CostModel cm;
    cm.bytes_per_element = 4;
    EXPECT_EQ(static_cast<double>(m.offload_host_bytes()), memory_offload_host_per_token(cm, c, 1) * T)
        << "checkpointing " << ckpt;
  }
}

}  // namespace
}  // namespace flexsp::testing
