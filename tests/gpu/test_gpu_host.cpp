// Host-side logic of the CUDA backend, run on every machine (GPU or not): make_backend's
// choice (backend, activation type, the CUDA numerics keys) and its errors without a
// device. (The tile map's host logic is a CPU unit test: unit/test_attention_tiles.cpp.)
#include <cstdlib>

#include "gpu_test_common.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/cuda_backend.h"
#include "lib/platform/backend_factory.h"
#include "lib/util/error.h"

namespace flexsp::testing {
namespace {

TEST(GpuHostBackend, SelectionWithoutDevice) {
  // train.precision: auto is fp32 on the CPU, bf16 on a GPU; fp32 and bf16 are taken as said.
  EXPECT_EQ(make_backend({BackendKind::cpu})->act_dtype(), DType::f32);
  EXPECT_EQ(make_backend({BackendKind::cpu, Precision::bf16})->act_dtype(), DType::bf16);
  if (cuda_device_count() > 0) {
    auto be = make_backend({BackendKind::automatic});
    EXPECT_STREQ(be->name(), "cuda");
    EXPECT_EQ(be->act_dtype(), DType::bf16);
    EXPECT_STREQ(make_backend({BackendKind::cuda})->name(), "cuda");
    EXPECT_EQ(make_backend({BackendKind::cuda, Precision::fp32})->act_dtype(), DType::f32);
    EXPECT_EQ(make_backend({BackendKind::cuda, Precision::bf16})->act_dtype(), DType::bf16);
    EXPECT_STREQ(make_backend({BackendKind::cuda, Precision::bf16, true, CudaAttention::simple})->name(), "cuda");
    // tc needs bf16 activations: an error naming the key.
    try {
      make_backend({BackendKind::cuda, Precision::fp32, false, CudaAttention::tc});
      ADD_FAILURE() << "cuda_attention = tc with fp32 activations did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("train.cuda_attention"), std::string::npos) << e.what();
    }
    return;
  }
  EXPECT_EQ(make_backend({BackendKind::automatic})->act_dtype(), DType::f32);
  EXPECT_STREQ(make_backend({BackendKind::automatic})->name(), "cpu");
  try {
    make_backend({BackendKind::cuda});
    ADD_FAILURE() << "make_backend(\"cuda\") without a device did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.backend"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no GPU"), std::string::npos) << e.what();
  }
}

// train.cuda_attention = cudnn: refused before any device call where it cannot run.
TEST(GpuHostBackend, CudnnAttentionNeedsBf16AndTheBuild) {
  auto expect_error = [](DType act, const char* part) {
    try {
      CudaBackend be(0, act, false, CudaAttention::cudnn);
      ADD_FAILURE() << "cuda_attention = cudnn with " << dtype_name(act) << " did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("train.cuda_attention: 'cudnn'"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error(DType::f32, "f32 activations");
  if (!cuda::cudnn_attention_built()) expect_error(DType::bf16, "not built");
}

// Which shapes cuDNN's attention takes: host logic, before any graph is built.
TEST(GpuHostBackend, CudnnAttentionShapes) {
  const std::vector<int32_t> cu{0, 3, 10};
  cpu::AttnShape s;
  s.cu_seqlens_host = cu.data();
  s.nseq = 2;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 128;
  if (!cuda::cudnn_attention_built()) {
    EXPECT_NE(cuda::cudnn_attention_unsupported(s, true), "");
    return;
  }
  EXPECT_EQ(cuda::cudnn_attention_unsupported(s, true), "");
  EXPECT_NE(cuda::cudnn_attention_unsupported(s, false).find("bf16"), std::string::npos);
  for (int d : {64, 96, 8}) {
    s.head_dim = d;
    EXPECT_EQ(cuda::cudnn_attention_unsupported(s, true), "") << d;
  }
  for (int d : {100, 256, 4}) {
    s.head_dim = d;
    EXPECT_NE(cuda::cudnn_attention_unsupported(s, true).find("head_dim"), std::string::npos) << d;
  }
  s.head_dim = 64;
  s.cu_seqlens_k = cu.data();  // ring attention's spans
  EXPECT_NE(cuda::cudnn_attention_unsupported(s, true).find("ring"), std::string::npos);
  s.cu_seqlens_k = nullptr;
  s.cu_seqlens_host = nullptr;
  EXPECT_NE(cuda::cudnn_attention_unsupported(s, true), "");
}

}  // namespace
}  // namespace flexsp::testing
