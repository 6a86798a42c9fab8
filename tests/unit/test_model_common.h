// Helpers for the model tests: a tiny config, random packed batches, a model with its
// parameter and gradient buffers.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/model/llama.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"
#include "test_kernels_common.h"

namespace flexsp::testing {

inline ModelConfig tiny_config(int vocab = 97, int kv_heads = 2, bool tie = false,
                               bool checkpoint = false) {
  ModelSection m;
  m.preset = "tiny";
  m.vocab = vocab;
  m.kv_heads = kv_heads;
  m.tie_embeddings = tie;
  m.checkpoint_activations = checkpoint;
  return resolve_model_config(m, {}, 0);
}

struct PackedBatch {
  std::vector<int32_t> ids, pos, tgt, cu;
  MicroBatch mb() const {
    return {static_cast<int64_t>(ids.size()), ids.data(), pos.data(), tgt.data(),
            static_cast<int>(cu.size()) - 1, cu.data()};
  }
};

// Sequences with the given token ids, packed in order; next-token targets.
inline PackedBatch pack(const std::vector<std::vector<int32_t>>& seqs) {
  PackedBatch b;
  b.cu.push_back(0);
  for (const auto& s : seqs) {
    b.ids.insert(b.ids.end(), s.begin(), s.end());
    b.cu.push_back(static_cast<int32_t>(b.ids.size()));
  }
  const int nseq = static_cast<int>(seqs.size());
  b.pos.resize(b.ids.size());
  b.tgt.resize(b.ids.size());
  packed_positions(b.cu.data(), nseq, b.pos.data());
  packed_next_token_targets(b.ids.data(), b.cu.data(), nseq, b.tgt.data());
  return b;
}

inline std::vector<int32_t> random_tokens(Rng& r, int n, int vocab) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = r.below(vocab);
  return t;
}

// A model with initialised parameters and zero gradients on a CPU backend (fp32, or the
// bf16 emulation).
struct ModelFixture {
  std::unique_ptr<Backend> be;
  ModelConfig cfg;
  std::unique_ptr<Llama> model;
  Buffer<float> params, grads;

  ModelFixture(const ModelConfig& c, int64_t max_tokens, uint64_t seed = 1,
               std::unique_ptr<Backend> backend = make_cpu_backend())
      : be(std::move(backend)), cfg(c) {
    model = std::make_unique<Llama>(*be, c, max_tokens);
    const ParamTable& t = model->params();
    params = Buffer<float>(*be, static_cast<size_t>(t.total));
    grads = Buffer<float>(*be, static_cast<size_t>(t.total));
    init_params(c, t, seed, params.get(), 0, t.total);  // CPU backend: host memory
  }
  const ParamTable& table() const { return model->params(); }
  // Loss sum of one forward (no backward).
  double loss(const PackedBatch& b) { return model->forward(params.get(), b.mb()).loss_sum; }
  // Zero grads, forward, backward with `scale`; returns the loss sum.
  double loss_and_grad(const PackedBatch& b, double scale = 1.0) {
    be->zero(grads.get(), grads.bytes());
    const double l = model->forward(params.get(), b.mb()).loss_sum;
    model->backward(params.get(), grads.get(), scale);
    return l;
  }
  std::vector<float> grad_vec() const {
    return std::vector<float>(grads.get(), grads.get() + grads.size());
  }
};

}  // namespace flexsp::testing
