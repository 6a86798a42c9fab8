// What cuDNN's fused attention (attention_cudnn.h) is told about a layout of packed
// documents: host-side and CUDA-free (C++17), so the CPU unit tests check it on every
// machine (tests/unit/test_attention_cudnn_index.cpp).
//
// Design choices:
//  - cuDNN sees the packed rows [T, heads, d] as a ragged batch: `batch` sequences of at
//    most `max_seqlen` rows, each starting at a ragged offset (in elements) and as long as
//    its entry in a sequence-length array. A cuDNN graph is built for fixed dims, so the
//    dims are rounded up to buckets (powers of two: batch, max_seqlen >= 64, the token
//    bound >= 1024): a run meets a handful of buckets and builds each graph once. Padding
//    sequences have length 0 and start at T.
//  - The token bound (max_total_seq_len) sizes the backward's fp32 workspaces (dQ
//    accumulator, GQA's full-head dK/dV) by tokens, not batch x max_seqlen, which for many
//    short documents and one long one would be tens of gigabytes.
//  - Offsets are int32 elements: a layout whose T x heads x d reaches 2^31 is not taken.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace flexsp::cuda {

// The dims of the graph a layout runs under.
struct CudnnBucket {
  int64_t batch = 1, max_seqlen = 64, max_tokens = 1024;
  bool operator==(const CudnnBucket& o) const {
    return batch == o.batch && max_seqlen == o.max_seqlen && max_tokens == o.max_tokens;
  }
};

inline int64_t cudnn_pow2_at_least(int64_t n, int64_t lo) {
  int64_t p = lo;
  while (p < n) p *= 2;
  return p;
}

// The bucket of the layout cu[0..nseq] (cu[0] = 0, non-decreasing).
inline CudnnBucket cudnn_bucket(const int32_t* cu, int nseq) {
  int64_t longest = 0;
  for (int i = 0; i < nseq; ++i) longest = std::max<int64_t>(longest, cu[i + 1] - cu[i]);
  CudnnBucket b;
  b.batch = cudnn_pow2_at_least(std::max(nseq, 1), 1);
  b.max_seqlen = cudnn_pow2_at_least(longest, 64);
  b.max_tokens = cudnn_pow2_at_least(nseq > 0 ? cu[nseq] : 0, 1024);
  return b;
}

// Whether the int32 element offsets of a layout with `tokens` rows fit (heads: the larger
// of the query and key/value head counts).
inline bool cudnn_offsets_fit(int64_t tokens, int heads, int head_dim) {
  return tokens * heads * head_dim < (int64_t{1} << 31);
}

// The index arrays of one layout, one int32 buffer (offsets in elements of `index`):
//   seqlen[batch]        rows per sequence (queries = keys), 0 for padding sequences
//   ragged_q[batch + 1]  cu[i] * heads * d: Q, O, dO, dQ
//   ragged_kv[batch + 1] cu[i] * kv_heads * d: K, V, dK, dV
//   ragged_lse[batch + 1] cu[i] * heads: the log-sum-exp, [T, heads] fp32
struct CudnnIndex {
  std::vector<int32_t> data;
  int64_t seqlen = 0, ragged_q = 0, ragged_kv = 0, ragged_lse = 0;  // offsets into data
};

inline CudnnIndex cudnn_index(const int32_t* cu, int nseq, int64_t batch, int heads,
                              int kv_heads, int head_dim) {
  CudnnIndex x;
  x.seqlen = 0;
  x.ragged_q = batch;
  x.ragged_kv = x.ragged_q + batch + 1;
  x.ragged_lse = x.ragged_kv + batch + 1;
  x.data.assign(static_cast<size_t>(x.ragged_lse + batch + 1), 0);
  const int32_t tokens = nseq > 0 ? cu[nseq] : 0;
  for (int64_t i = 0; i <= batch; ++i) {
    const int32_t row = i <= nseq ? cu[i] : tokens;
    if (i < batch) x.data[static_cast<size_t>(x.seqlen + i)] = i < nseq ? cu[i + 1] - cu[i] : 0;
    x.data[static_cast<size_t>(x.ragged_q + i)] = row * heads * head_dim;
    x.data[static_cast<size_t>(x.ragged_kv + i)] = row * kv_heads * head_dim;
    x.data[static_cast<size_t>(x.ragged_lse + i)] = row * heads;
  }
  return x;
}

}  // namespace flexsp::cuda
