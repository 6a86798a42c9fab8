// Model configuration (presets, overrides, validation messages, parameter counts, FLOPs),
// the flat parameter table, the shard-independent initialisation and the weights file.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "io/hdf5/h5.h"
#include "io/weights/weights.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"
#include "lib/model/rope.h"
#include "lib/util/error.h"
#include "support/error_of.h"
#include "test_kernels_common.h"

namespace flexsp {
namespace {

ModelConfig resolve(ModelSection m, std::set<std::string> keys = {}, int dataset_vocab = 300) {
  return resolve_model_config(m, keys, dataset_vocab);
}

TEST(ModelConfig, PresetsAndOverrides) {
  ModelSection m;
  m.preset = "tiny";
  ModelConfig c = resolve(m);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.ffn, 176);
  EXPECT_EQ(c.vocab, 300);  // the dataset's
  EXPECT_EQ(c.rope_theta, 10000);
  EXPECT_EQ(c.norm_eps, 1e-5);
  m.layers = 3;
  m.kv_heads = 4;
  m.rope_theta = 5e5;
  m.vocab = 512;
  m.tie_embeddings = true;
  c = resolve(m);
  EXPECT_EQ(c.layers, 3);
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.rope_theta, 5e5);
  EXPECT_EQ(c.vocab, 512);
  EXPECT_TRUE(c.tie_embeddings);
  for (const std::string& p : model_preset_names()) {
    ModelSection s;
    s.preset = p;
    if (p == "tiny" || p == "small")
      EXPECT_THROW(resolve(s, {}, 0), Error) << p;  // the vocabulary comes from the data
    else
      EXPECT_NO_THROW(resolve(s, {}, 0)) << p;  // LLaMA sizes fall back to vocab 32000
  }
  ModelSection big;
  big.preset = "30b";
  c = resolve(big, {}, 0);
  EXPECT_EQ(c.hidden, 6656);
  EXPECT_EQ(c.heads, 52);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.ffn, 17920);
  EXPECT_EQ(c.vocab, 32000);
}

TEST(ModelConfig, ErrorsNameTheKey) {
  ModelSection m;
  m.heads = 6;
  EXPECT_EQ(error_of([&] { resolve(m); }), "model.heads: 6 does not divide model.hidden 64");
  m = {};
  m.kv_heads = 3;
  EXPECT_EQ(error_of([&] { resolve(m); }), "model.kv_heads: 3 does not divide model.heads 4");
  m = {};
  m.hidden = 36;
  m.heads = 4;
  m.kv_heads = 4;
  EXPECT_NE(error_of([&] { resolve(m); }).find("must be even"), std::string::npos);
  m = {};
  m.preset = "huge";
  EXPECT_NE(error_of([&] { resolve(m); }).find("model.preset: unknown preset 'huge'"),
            std::string::npos);
  m = {};
  m.hidden = -64;
  EXPECT_EQ(error_of([&] { resolve(m); }), "model.hidden: must be positive, got -64");
  m = {};
  m.vocab = 100;
  EXPECT_EQ(error_of([&] { resolve(m); }),
            "model.vocab: 100 is smaller than the dataset's vocabulary size 300");
  m = {};
  EXPECT_NE(error_of([&] { resolve(m, {}, 0); }).find("model.vocab"), std::string::npos);
  m = {};
  m.layers = 0;  // explicitly 0 is an error, not "the preset's"
  EXPECT_EQ(error_of([&] { resolve(m, {"model.layers"}); }), "model.layers: must be positive, got 0");
}

TEST(ModelConfig, ParameterCountsOfLlamaPresets) {
  ModelSection m;
  m.preset = "7b";
  EXPECT_EQ(model_num_params(resolve(m, {}, 32000)), 6738415616);   // LLaMA-7B
  m.preset = "13b";
  EXPECT_EQ(model_num_params(resolve(m, {}, 32000)), 13015864320);  // LLaMA-13B
  // FLOPs: dense part ~ 6 N per token; attention grows with s^2.
  m.preset = "7b";
  const ModelConfig c = resolve(m, {}, 32000);
  EXPECT_NEAR(model_dense_flops_per_token(c) / (6.0 * model_num_params(c)), 1.0, 0.02);
  EXPECT_DOUBLE_EQ(model_attention_flops(c, 4096), 12.0 * 32 * 32 * 128 * 4096.0 * 4097 / 2);
  EXPECT_DOUBLE_EQ(model_train_flops(c, {4096, 1}),
                   model_dense_flops_per_token(c) * 4097 + model_attention_flops(c, 4096) +
                       model_attention_flops(c, 1));
}

TEST(ModelParams, TableHasHfNamesShapesAndContiguousLayers) {
  ModelSection m;
  const ModelConfig c = resolve(m, {}, 300);
  const ParamTable t = make_param_table(c);
  ASSERT_EQ(t.views.size(), 1u + 2 * 9 + 2);
  EXPECT_EQ(t.views[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(t.views[0].shape(), (std::vector<int64_t>{300, 64}));
  const ParamView& k = t.get(TensorKind::k_proj, 1);
  EXPECT_EQ(k.name, "model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(t.get(TensorKind::down_proj, 0).shape(), (std::vector<int64_t>{64, 176}));
  EXPECT_EQ(t.get(TensorKind::attn_norm, 1).shape(), (std::vector<int64_t>{64}));
  EXPECT_EQ(t.get(TensorKind::lm_head).name, "lm_head.weight");
  EXPECT_EQ(t.find("model.norm.weight"), &t.get(TensorKind::final_norm));
  int64_t n = 0, prev_end = 0;
  for (const ParamView& v : t.views) {
    n += v.numel();
    EXPECT_EQ(v.offset % kParamAlign, 0) << v.name;
    EXPECT_GE(v.offset, prev_end) << v.name;
    prev_end = v.offset + v.numel();
    if (v.layer >= 0) {
      EXPECT_GE(v.offset, t.layer_begin(v.layer));
      EXPECT_LE(v.offset + v.numel(), t.layer_end(v.layer));
    }
  }
  EXPECT_EQ(n, model_num_params(c));
  EXPECT_EQ(t.layer_end(0), t.layer_begin(1));
  ModelConfig tied = c;
  tied.tie_embeddings = true;
  const ParamTable tt = make_param_table(tied);
  EXPECT_EQ(tt.find("lm_head.weight"), nullptr);
  EXPECT_EQ(tt.views.size(), t.views.size() - 1);
}

TEST(ModelParams, InitIsShardIndependentAndScaled) {
  ModelSection m;
  m.preset = "small";
  const ModelConfig c = resolve(m, {}, 1000);
  const ParamTable t = make_param_table(c);
  std::vector<float> full(t.total), shards(t.total);
  init_params(c, t, 42, full.data(), 0, t.total);
  const int64_t cuts[] = {0, 1, 12345, t.total / 2 + 7, t.total - 3, t.total};
  for (int i = 0; i + 1 < 6; ++i)
    init_params(c, t, 42, shards.data() + cuts[i], cuts[i], cuts[i + 1]);
  EXPECT_EQ(full, shards);
  auto stddev = [&](const ParamView& v) {
    double s = 0;
    for (int64_t i = 0; i < v.numel(); ++i) s += double(full[v.offset + i]) * full[v.offset + i];
    return std::sqrt(s / v.numel());
  };
  EXPECT_NEAR(stddev(t.get(TensorKind::gate_proj, 2)), 0.02, 0.001);
  EXPECT_NEAR(stddev(t.get(TensorKind::embed)), 0.02, 0.001);
  EXPECT_NEAR(stddev(t.get(TensorKind::down_proj, 1)), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_NEAR(stddev(t.get(TensorKind::o_proj, 0)), 0.02 / std::sqrt(8.0), 0.0005);
  const ParamView& norm = t.get(TensorKind::mlp_norm, 3);
  for (int64_t i = 0; i < norm.numel(); ++i) ASSERT_EQ(full[norm.offset + i], 1.0f);
  // q_proj and k_proj of one layer differ (tensor index is part of the key); seeds differ.
  const ParamView &q = t.get(TensorKind::q_proj, 0), &kk = t.get(TensorKind::k_proj, 0);
  EXPECT_NE(full[q.offset], full[kk.offset]);
  std::vector<float> other(t.total);
  init_params(c, t, 43, other.data(), 0, t.total);
  EXPECT_NE(full[q.offset], other[q.offset]);
}

std::string temp_path(const char* tag) {
  return std::string("/tmp/flexsp_weights_") + tag + "_" + std::to_string(getpid()) + ".h5";
}

TEST(Weights, RoundTripAndMismatches) {
  ModelSection m;
  const ModelConfig c = resolve(m, {}, 300);
  const ParamTable t = make_param_table(c);
  std::vector<float> w(t.total), back(t.total, 0.0f);
  init_params(c, t, 3, w.data(), 0, t.total);
  const std::string path = temp_path("rt");
  dump_weights(path, c, t, w.data());
  const ModelConfig fc = read_weights_config(path);
  EXPECT_EQ(fc.hidden, 64);
  EXPECT_EQ(fc.kv_heads, 2);
  EXPECT_EQ(fc.vocab, 300);
  EXPECT_EQ(fc.head_dim, 16);
  load_weights(path, c, t, back.data());
  EXPECT_EQ(w, back);

  ModelConfig other = c;
  other.ffn = 192;
  EXPECT_EQ(error_of([&] { load_weights(path, other, make_param_table(other), back.data()); }),
            path + ": model.ffn is 176 in the file but 192 in this run");
  other = c;
  other.tie_embeddings = true;
  EXPECT_NE(error_of([&] { load_weights(path, other, make_param_table(other), back.data()); })
                .find("model.tie_embeddings"),
            std::string::npos);

  // A file with a tensor missing, and one with a wrong shape.
  ModelConfig tied = c;
  tied.tie_embeddings = true;
  const ParamTable tt = make_param_table(tied);
  const std::string p2 = temp_path("tied");
  dump_weights(p2, tied, tt, w.data());
  {
    // Same config as c except tie: rewrite the attribute so the config check passes.
    h5::Id f = h5::open_file(p2, true);
    h5::Id g = h5::group_id(H5Gopen2(f.get(), "model", H5P_DEFAULT));
    H5Adelete(g.get(), "tie_embeddings");
    h5::write_attr(g.get(), "tie_embeddings", 0);
  }
  EXPECT_EQ(error_of([&] { load_weights(p2, c, t, back.data()); }),
            p2 + ": tensor lm_head.weight is missing");
  {
    h5::Id f = h5::open_file(p2, true);
    h5::Id g = h5::group_id(H5Gopen2(f.get(), "model", H5P_DEFAULT));
    std::vector<float> z(300 * 32);
    write_f32(g.get(), "lm_head.weight", z.data(), {300, 32});
  }
  EXPECT_EQ(error_of([&] { load_weights(p2, c, t, back.data()); }),
            p2 + ": tensor lm_head.weight has shape [300, 32], expected [300, 64]");
  EXPECT_NE(error_of([&] { read_weights_config("/tmp/flexsp_no_such_weights.h5"); })
                .find("/tmp/flexsp_no_such_weights.h5"),
            std::string::npos);
  std::remove(path.c_str());
  std::remove(p2.c_str());
}

// RoPE scaling: validation names the key; a run takes the starting file's RoPE for every
// key it does not set; the weights file keeps it. (The tables themselves are checked
// against the PyTorch reference: e2e_model_reference.)
TEST(ModelConfig, RopeScaling) {
  ModelSection m;
  m.rope_scaling = RopeScaling::linear;
  m.rope_scaling_factor = 0.5;
  EXPECT_EQ(error_of([&] { resolve(m); }), "model.rope_scaling_factor: must be >= 1, got 0.5");
  m = {};
  m.rope_scaling = RopeScaling::llama3;
  m.rope_scaling_factor = 8;
  m.rope_low_freq_factor = 4;
  m.rope_high_freq_factor = 4;
  EXPECT_NE(error_of([&] { resolve(m); }).find("model.rope_high_freq_factor"), std::string::npos);

  ModelConfig file = resolve({});
  file.rope_theta = 500000;
  file.rope_scaling = RopeScaling::llama3;
  file.rope_scaling_factor = 8;
  ModelConfig run = resolve({});
  EXPECT_EQ(adopt_file_rope(run, file, {}), "");  // the file's RoPE, unchanged: no note
  EXPECT_EQ(rope_summary(run), rope_summary(file));
  run.rope_theta = 1e6;
  run.rope_scaling = RopeScaling::linear;
  run.rope_scaling_factor = 4;
  EXPECT_EQ(adopt_file_rope(run, file, {"model.rope_theta", "model.rope_scaling"}),
            "RoPE changes from the file's rope_theta 500000, llama3 (factor 8, low 1, high 4, original "
            "8192) to rope_theta 1000000, linear (factor 8)");

  const ParamTable t = make_param_table(run);
  std::vector<float> w(t.total, 0.5f);
  const std::string path = temp_path("rope");
  dump_weights(path, run, t, w.data());
  const ModelConfig back = read_weights_config(path);
  EXPECT_EQ(rope_summary(back), rope_summary(run));
  EXPECT_EQ(rope_inv_freq(back), rope_inv_freq(run));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace flexsp
