// Token-chunked layers (docs/token-chunks.md): a micro-batch of T local tokens runs each
// layer over chunks of C tokens (ModelConfig::token_chunk), so that what a layer computes
// and throws away -- the norms' outputs, q, the attention output, the MLP's gate, up and
// SwiGLU of width ffn, their gradients, the logits -- is sized by C, not T.
//
// Design choices:
//  - What a layer's backward needs of other tokens stays whole: the layer's input (the
//    checkpoint; chunking requires activation checkpointing, so a layer keeps nothing
//    else), k and v of all T tokens, and their gradients dk, dv, which every later query
//    chunk adds to. The residual stream's gradient is whole as it is without chunks.
//  - Local attention (this rank's whole sequences) runs each query chunk against the
//    keys of its sequences one key block of C rows at a time, merged by log-sum-exp
//    (Backend::attention_merge, as ring attention merges its blocks): the diagonal block
//    (the chunk against itself, causal) first, then, for the one sequence that began
//    before the chunk, each earlier block, all of it visible. Given the merged out and
//    lse, each block's backward gives exactly its share of dq, dk, dv. No buffer of the
//    op grows with T.
//  - Backward recomputes a layer chunk by chunk, last chunk first: k and v of all rows
//    first, then per chunk its forward (norms, q, attention, MLP), its backward, and --
//    since the chunks after it have already added their shares -- its rows of dk and dv
//    are final, so the input gradient of q, k, v and the first norm's backward finish the
//    chunk at once. One recompute per layer, as without chunks.
//  - Another AttentionOp (Ulysses, ring, Seq1F1B's chunk attention) takes whole q, k, v:
//    the model then keeps q, the attention output and their gradients whole (allocated at
//    the first such micro-batch) and runs everything else per chunk around one call of
//    the op.
//  - A micro-batch of at most C tokens runs the unchunked code (bit-identical results);
//    tensor parallelism's exchanges are not chunked, so token_chunk requires tp = 1.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/model/model_config.h"

namespace flexsp {

// Throws Error naming train.token_chunk when c.token_chunk cannot run: negative, without
// activation checkpointing, or with tensor parallelism (tp > 1).
void chunk_check(const ModelConfig& c, int tp);

// Causal attention of query chunks over this rank's whole sequences (see above). c: the
// rank's shape (heads, kv heads, head_dim); chunk: C.
class ChunkAttention {
 public:
  ChunkAttention(Backend& be, const ModelConfig& c, int64_t chunk);
  // The micro-batch's sequences (host cu_seqlens over its tokens, validated by the model).
  void set_layout(const int32_t* cu_seqlens, int nseq, int64_t tokens);
  // out [n rows] = attention of query rows [c0, c0 + n) (q: those rows; n <= C, c0 a
  // multiple of C) over k, v (all rows). Keeps the chunk's lse for backward.
  void forward(int64_t c0, int64_t n, const act_t* q, const act_t* k, const act_t* v, act_t* out);
  // The backward of the last forward (same chunk, its out): dq [n rows] overwritten, the
  // chunk's share added to dk, dv (all rows).
  void backward(int64_t c0, int64_t n, const act_t* dout, const act_t* q, const act_t* k,
                const act_t* v, const act_t* out, act_t* dq, act_t* dk, act_t* dv);
  size_t workspace_bytes() const;

 private:
  // One attention call of a chunk: query rows [q0, q0 + qrows) of the chunk against key
  // rows [k0, k0 + krows) of k/v; spans at `at` of spans_ (cu_q, cu_k, offsets).
  struct Call {
    int64_t q0 = 0, qrows = 0, k0 = 0, krows = 0;
    size_t at = 0;
    int nseq = 0;
    bool diagonal = false;
  };
  void plan_calls(int64_t c0, int64_t n);
  AttnShape shape(const Call& c) const;

  Backend& be_;
  ModelConfig cfg_;
  int64_t chunk_ = 0, tokens_ = 0;
  size_t es_ = 4;
  std::vector<int32_t> cu_;  // the micro-batch's cu_seqlens
  std::vector<Call> calls_;  // the last chunk's
  std::vector<int32_t> spans_host_;
  Buffer<int32_t> spans_;
  Buffer<float> lse_, lse_part_;
  Buffer<unsigned char> o_part_, dq_part_, dkv_part_;
};

}  // namespace flexsp
