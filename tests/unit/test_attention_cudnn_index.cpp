// What cuDNN's attention is told about a layout (kernels/cuda/attention_cudnn_index.h;
// CUDA-free, so it runs on every machine): buckets round the batch, the longest sequence
// and the tokens up to powers of two with floors; the index arrays give each sequence its
// length and its first element in Q/O, K/V and the log-sum-exp, padding sequences empty at
// the end; offsets past int32 are refused.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/attention_cudnn_index.h"

namespace flexsp::cuda {
namespace {

TEST(AttentionCudnnIndex, Buckets) {
  const std::vector<int32_t> cu{0, 1, 8, 8, 71, 200};  // lengths 1, 7, 0, 63, 129
  const CudnnBucket b = cudnn_bucket(cu.data(), 5);
  EXPECT_EQ(b.batch, 8);
  EXPECT_EQ(b.max_seqlen, 256);
  EXPECT_EQ(b.max_tokens, 1024);
  const std::vector<int32_t> one{0, 5000};
  EXPECT_EQ(cudnn_bucket(one.data(), 1), (CudnnBucket{1, 8192, 8192}));
  const std::vector<int32_t> tiny{0, 3};
  EXPECT_EQ(cudnn_bucket(tiny.data(), 1), (CudnnBucket{1, 64, 1024}));
  const std::vector<int32_t> none{0};
  EXPECT_EQ(cudnn_bucket(none.data(), 0), (CudnnBucket{1, 64, 1024}));
  // Layouts of one bucket share a graph: 17-32 sequences of up to 4096 rows, <= 16K tokens.
  std::vector<int32_t> a{0}, c{0};
  for (int i = 0; i < 17; ++i) a.push_back(a.back() + 300);
  for (int i = 0; i < 32; ++i) c.push_back(c.back() + (i == 0 ? 4096 : 100));
  EXPECT_EQ(cudnn_bucket(a.data(), 17).batch, cudnn_bucket(c.data(), 32).batch);
  EXPECT_EQ(cudnn_bucket(c.data(), 32), (CudnnBucket{32, 4096, 8192}));
}

TEST(AttentionCudnnIndex, Arrays) {
  const std::vector<int32_t> cu{0, 1, 8, 8, 71, 200};
  const int heads = 4, kv_heads = 2, d = 64;
  const CudnnIndex x = cudnn_index(cu.data(), 5, 8, heads, kv_heads, d);
  ASSERT_EQ(x.data.size(), 8u + 3 * 9);
  const std::vector<int32_t> lens{1, 7, 0, 63, 129, 0, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x.data[size_t(x.seqlen + i)], lens[size_t(i)]) << i;
  for (int i = 0; i <= 8; ++i) {
    const int32_t row = i <= 5 ? cu[size_t(i)] : 200;
    EXPECT_EQ(x.data[size_t(x.ragged_q + i)], row * heads * d) << i;
    EXPECT_EQ(x.data[size_t(x.ragged_kv + i)], row * kv_heads * d) << i;
    EXPECT_EQ(x.data[size_t(x.ragged_lse + i)], row * heads) << i;
  }
}

TEST(AttentionCudnnIndex, OffsetsFitInt32) {
  EXPECT_TRUE(cudnn_offsets_fit(131072, 32, 128));   // 2^29 elements
  EXPECT_TRUE(cudnn_offsets_fit(524287, 32, 128));
  EXPECT_FALSE(cudnn_offsets_fit(524288, 32, 128));  // 2^31
}

}  // namespace
}  // namespace flexsp::cuda
