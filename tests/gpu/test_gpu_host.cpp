// Host-side logic of the CUDA backend, run on every machine (GPU or not): make_backend's
// choice (backend, activation type, the CUDA numerics keys) and its errors without a
// device. (The tile map's host logic is a CPU unit test: unit/test_attention_tiles.cpp.)
#include <cstdlib>

#include "gpu_test_common.h"
#include "lib/util/error.h"

namespace flexsp::testing {
namespace {

TEST(GpuHostBackend, SelectionWithoutDevice) {
  // train.precision: auto is fp32 on the CPU, bf16 on a GPU; fp32 and bf16 are taken as said.
  EXPECT_EQ(make_backend({"cpu"})->act_dtype(), DType::f32);
  EXPECT_EQ(make_backend({"cpu", "bf16"})->act_dtype(), DType::bf16);
  EXPECT_THROW(make_backend({"cpu", "fp16"}), Error);
  if (cuda_device_count() > 0) {
    auto be = make_backend({"auto"});
    EXPECT_STREQ(be->name(), "cuda");
    EXPECT_EQ(be->act_dtype(), DType::bf16);
    EXPECT_STREQ(make_backend({"cuda"})->name(), "cuda");
    EXPECT_EQ(make_backend({"cuda", "fp32"})->act_dtype(), DType::f32);
    EXPECT_EQ(make_backend({"cuda", "bf16"})->act_dtype(), DType::bf16);
    EXPECT_STREQ(make_backend({"cuda", "bf16", true, "simple"})->name(), "cuda");
    // tc needs bf16 activations: an error naming the key.
    try {
      make_backend({"cuda", "fp32", false, "tc"});
      ADD_FAILURE() << "cuda_attention = tc with fp32 activations did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("train.cuda_attention"), std::string::npos) << e.what();
    }
    return;
  }
  EXPECT_EQ(make_backend({"auto"})->act_dtype(), DType::f32);
  EXPECT_STREQ(make_backend({"auto"})->name(), "cpu");
  try {
    make_backend({"cuda"});
    ADD_FAILURE() << "make_backend(\"cuda\") without a device did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.backend"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flexsp::testing
