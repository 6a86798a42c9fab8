// CPU reference kernels: the math of every model op, one file per op family.
//
// These plain functions are the definition of each op. The CPU backend forwards to them
// (fp32) and the CUDA kernels are tested against them. The element-wise and attention
// kernels are templates instantiated for float (the backend) and double (the tests check
// backward passes against finite differences in double precision).
//
// Conventions: row-major; a [T, n] activation has one row per token. Kernels that produce
// a weight gradient *accumulate* into it (dw +=); kernels that produce an activation
// gradient overwrite it unless the comment says "+=". Weight-gradient reductions over
// tokens (RMSNorm, embedding) and attention are ordered independently of the number of
// OpenMP threads (each thread owns a block of columns, or whole output rows, and walks
// the tokens in order), so their results are bit-identical for any thread count; only
// sum/sum_squares (scalars, accumulated in double) use OpenMP reductions.
// Kernels allocate nothing per element; attention allocates a few tiles per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace flexsp::cpu {

// ---- GEMM (gemm.cpp) ----------------------------------------------------------------
// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, row-major, through cblas_sgemm.
// op(X) = X^T when trans_x. lda/ldb/ldc are row strides of A, B, C as stored.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);

// ---- embedding (embedding.cpp) -----------------------------------------------------------
// out[t,:] = table[ids[t],:], or 0 when ids[t] < 0 (a token whose row another tensor-
// parallel rank holds: the vocabulary-parallel embedding sums the ranks' outputs).
template <class T>
void embedding_forward(T* out, const T* table, const int32_t* ids, int64_t n, int64_t dim);
// dtable[ids[t],:] += dout[t,:]   (tokens summed in order t = 0..n-1; ids < 0 skipped)
template <class T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t n, int64_t dim);

// ---- RMSNorm (rmsnorm.cpp) ----------------------------------------------------------------
// rstd[t] = 1/sqrt(mean(x[t,:]^2) + eps); out[t,j] = w[j] * (x[t,j] * rstd[t]) (HF order).
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t n, int64_t dim,
                     double eps);
// dx += d/dx, dw += d/dw of sum(dout * out).
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                      int64_t n, int64_t dim);

// ---- RoPE (rope.cpp) ------------------------------------------------------------------------
// In place on x[t, heads, head_dim], HF "rotate half": for i < head_dim/2, with
// a = pos[t] * inv_freq[i]:  (x_i, x_{i+h/2}) <- (x_i cos a - x_{i+h/2} sin a,
// x_{i+h/2} cos a + x_i sin a). Angles are computed in double from the position.
// inv_freq [head_dim/2]: the frequency table (lib/model/rope.h: theta^(-2i/head_dim),
// scaled as the model's RoPE scaling says), in the same memory as x.
template <class T>
void rope_forward(T* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                  const double* inv_freq);
// In place: the transpose (inverse) rotation applied to the gradient.
template <class T>
void rope_backward(T* dx, const int32_t* pos, int64_t n, int heads, int head_dim,
                   const double* inv_freq);
// The unscaled table theta^(-2i/head_dim), for kernel tests (models use rope_inv_freq).
std::vector<double> rope_default_inv_freq(int head_dim, double theta);

// ---- SwiGLU (swiglu.cpp) ----------------------------------------------------------------------
// out = silu(gate) * up, element-wise over n elements.
template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n);
// dgate, dup from dout. dgate may alias dout (each element is read before it is written).
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);

// ---- varlen causal attention (attention.cpp) ---------------------------------------------------
// q [T, heads, d], k and v [T, kv_heads, d], out [T, heads, d], lse [T, heads].
// Sequence s is rows cu_seqlens[s] .. cu_seqlens[s+1]-1; a query attends to keys of its own
// sequence at positions <= its own (causal). Query head h reads kv head h / (heads/kv_heads).
// Blockwise with an online softmax (tiles of kAttnTile queries x kAttnTile keys): memory is
// O(tiles), never O(s^2). lse = log-sum-exp of the scaled scores per query row and head,
// saved for the backward.
// Spans (ring attention, Seq1F1B chunks): the keys of a sequence may be other rows than its
// queries (cu_seqlens_k: k, v, dk, dv are [cu_seqlens_k[nseq], kv_heads, d]) with a causal
// alignment per sequence (causal_offset): query i sees key j iff j <= i + offset. A query
// row that sees no key gets out = 0 and lse = -inf. Key tiles no query row of a tile sees
// are skipped. The backward recomputes the probabilities as exp(score - lse) from the lse
// passed in and D = rowsum(dout * out) from the out passed in, so with out/lse merged over
// several key blocks (attention_merge) each block's backward gives exactly its share of
// the gradients; rows with lse = -inf contribute nothing.
constexpr int kAttnTile = 64;
struct AttnShape {
  const int32_t* cu_seqlens = nullptr;  // [nseq + 1], cu_seqlens[0] = 0
  int nseq = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  double scale = 0;  // softmax scale, usually 1/sqrt(head_dim)
  // The same offsets in host memory, when cu_seqlens is a device's: what a GPU builds its
  // tile map from without reading the device copy back (required by the CUDA backend).
  const int32_t* cu_seqlens_host = nullptr;
  // Keys/values rows per sequence when they differ from the queries' (nullptr: the same
  // offsets as cu_seqlens). Host copy for the CUDA tile map as with cu_seqlens_host.
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* cu_seqlens_k_host = nullptr;
  // Causal alignment per sequence: key j of sequence s is visible to query i iff
  // j <= i + causal_offset[s]. nullptr: klen - qlen (queries are the last rows of their
  // sequence, as flash attention's varlen; 0 when keys are the queries). Host copy likewise.
  const int32_t* causal_offset = nullptr;
  const int32_t* causal_offset_host = nullptr;
};
// One sequence of an AttnShape resolved: query rows [q, q + qlen) of q/out, key rows
// [k, k + klen) of k/v, and the causal offset.
struct AttnSpan {
  int64_t q = 0, k = 0, qlen = 0, klen = 0, off = 0;
  // Query i (relative) sees keys [0, keys_seen(i)).
  int64_t keys_seen(int64_t i) const {
    const int64_t n = i + off + 1;
    return n < 0 ? 0 : (n > klen ? klen : n);
  }
  // The first query row that sees key j (qlen or more: none).
  int64_t first_query(int64_t j) const { return j - off > 0 ? j - off : 0; }
};
// The spans of s, read from its host-side copies (cu_seqlens_host etc.: a device backend's
// tile map) when host_copies, else from the pointers themselves (host memory). Throws
// Error when a copy that is needed is missing or lengths are negative.
std::vector<AttnSpan> attention_spans(const AttnShape& s, bool host_copies = false);
// Rows of q/out (first) and of k/v (second): cu_seqlens[nseq], cu_seqlens_k[nseq] (host).
std::pair<int64_t, int64_t> attention_rows(const AttnShape& s);
template <class T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const AttnShape& s);
// dq, dk, dv (overwritten) from dout; recomputes probabilities tile by tile from lse.
// Two passes so that no two threads write the same row: keys (dk, dv; one work item owns a
// key tile of one kv head and loops over its query heads), then queries (dq).
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const AttnShape& s);
// Online-softmax merge of two attention results over disjoint key sets of the same queries
// (ring attention): per row and head, lse' = log(e^lse + e^lse_b) and out' = (e^lse out +
// e^lse_b out_b) / e^lse'; out [rows, heads, head_dim] and lse [rows, heads] in place. A
// side with lse = -inf (saw no key) contributes nothing; both -inf leaves the row as is.
template <class T>
void attention_merge(T* out, T* lse, const T* out_b, const T* lse_b, int64_t rows, int heads,
                     int head_dim);
// The instruction set the attention kernels use: "avx2+fma" (x86-64 with AVX2 and FMA,
// picked at run time) or "portable" (forced by FLEXSP_CPU_PORTABLE=1 in the environment).
const char* attention_isa();

// ---- softmax cross-entropy (cross_entropy.cpp) ---------------------------------------------------
// Per row t of logits [n, vocab]: lse[t] = logsumexp(logits[t,:]); loss[t] = lse[t] -
// logits[t, target[t]], or 0 when target[t] < 0 (no prediction).
template <class T>
void cross_entropy_forward(T* loss, T* lse, const T* logits, const int32_t* targets, int64_t n,
                           int64_t vocab);
// dlogits[t,:] = scale * (softmax(logits[t,:]) - onehot(target[t])), 0 for ignored rows.
// dlogits may alias logits.
template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* lse, const int32_t* targets,
                            int64_t n, int64_t vocab, double scale);

// The same over a vocabulary split into shards (tensor parallelism: each rank holds the
// logits of its columns; nothing gathers whole rows). logits [n, vocab] is one shard, of
// which the first `valid` columns are real (the rest pad the vocabulary to a multiple of
// the shards and are never predicted). Shard targets: -1 = no prediction, 0 <= target <
// valid = this shard's column, anything else = another shard's.
// stats[t*3 + {0, 1, 2}] = the row's max over the valid columns (-inf when none), the sum
// of exp(z - max) over them (in double), and z[target] when the target is here (else 0).
void cross_entropy_shard_stats(float* stats, const float* logits, const int32_t* targets,
                               int64_t n, int64_t vocab, int64_t valid);
// From the stats of all `parts` shards (parts blocks of [n, 3], as an all-gather leaves
// them): lse[t] = M + log(sum_r s_r exp(m_r - M)) with M = max_r m_r (in double);
// loss[t] = lse[t] - sum_r z_r, or 0 when targets[t] < 0.
void cross_entropy_shard_loss(float* loss, float* lse, const float* stats, int parts,
                              const int32_t* targets, int64_t n);
// dlogits = scale * (softmax - onehot) on this shard's valid columns with the full row's
// lse, 0 on padding columns and ignored rows. dlogits may alias logits.
template <class T>
void cross_entropy_shard_backward(T* dlogits, const T* logits, const float* lse,
                                  const int32_t* targets, int64_t n, int64_t vocab,
                                  int64_t valid, double scale);

// ---- optimizer (adamw.cpp) -------------------------------------------------------------------------
// PyTorch's AdamW on n elements, g taken as grad_scale * g (gradient clipping folded in):
//   p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc_i = 1 - beta_i^step.
struct AdamWArgs {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  int64_t step = 1;  // 1 for the first update
  float grad_scale = 1;
};
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& a);
// One range of a multi-range update: elements [begin, end) of p, g, m, v with their own
// weight decay (AdamWArgs::weight_decay is not used then).
struct AdamWRange {
  int64_t begin = 0, end = 0;
  float weight_decay = 0;
};
// ---- reductions and vector ops (vector.cpp) -----------------------------------------------------
// Sum and sum of squares, accumulated in double.
double sum(const float* x, int64_t n);
double sum_squares(const float* x, int64_t n);
// x *= alpha; y += alpha * x.
void scale(float* x, int64_t n, float alpha);
void axpy(float* y, const float* x, int64_t n, float alpha);

}  // namespace flexsp::cpu
