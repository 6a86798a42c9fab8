// Varlen causal GQA attention, forward and backward, CUDA vs the CPU twin
// (kernels/cpu/attention.cpp): 1-token sequences, many short sequences, an empty
// sequence, lengths around the tile sizes (32 on the GPU, 64 on the CPU), GQA 1:1, 2:1,
// 4:1, head_dim 16 .. 256 (256 needs the raised shared-memory limit). fp32: <= 1e-5.
// bf16 (GpuAttentionBf16): the CUDA backend with bf16 activations against the CPU
// backend's bf16 emulation on identical bf16 inputs, GQA 4:1 and 1:1, head_dim 64, 128
// and 256, the same kinds of sequences plus a ~1000-token one; the backward runs on both
// from the CPU's out and lse. out, dq, dk, dv <= 1e-2 (kBf16Tol); lse (fp32 from identical
// inputs) <= 1e-5.
#include <string>

#include "gpu_test_common.h"

namespace flexsp::testing {
namespace {

struct AttnCase {
  std::vector<int> lens;
  int heads, kv_heads, head_dim;
};

std::string describe(const AttnCase& c) {
  std::string s = "heads=" + std::to_string(c.heads) + " kv=" + std::to_string(c.kv_heads) +
                  " d=" + std::to_string(c.head_dim) + " lens=";
  for (size_t i = 0; i < c.lens.size() && i < 8; ++i) s += std::to_string(c.lens[i]) + ",";
  if (c.lens.size() > 8) s += "... (" + std::to_string(c.lens.size()) + " seqs)";
  return s;
}

// The case's shape; cu_seqlens left for the caller (host or device copy).
AttnShape shape_of(const AttnCase& c) {
  AttnShape s;
  s.nseq = static_cast<int>(c.lens.size());
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  return s;
}

void run_case(Backend& gpu, const AttnCase& c, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> cu{0};
  for (int l : c.lens) cu.push_back(cu.back() + l);
  const int64_t T = cu.back(), qn = T * c.heads * c.head_dim, kn = T * c.kv_heads * c.head_dim;
  auto q = random_floats(r, qn), k = random_floats(r, kn), v = random_floats(r, kn);
  auto dout = random_floats(r, qn);
  AttnShape s = shape_of(c);
  // CPU reference.
  std::vector<float> out(qn), lse(T * c.heads), dq(qn), dk(kn), dv(kn);
  s.cu_seqlens = cu.data();
  cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                          v.data(), out.data(), lse.data(), s);
  // GPU.
  auto gcu = upload(gpu, cu);
  auto gq = upload(gpu, q), gk = upload(gpu, k), gv = upload(gpu, v);
  auto gdo = upload(gpu, dout);
  auto gout = upload(gpu, poison(qn)), glse = upload(gpu, poison(T * c.heads));
  auto gdq = upload(gpu, poison(qn)), gdk = upload(gpu, poison(kn)), gdv = upload(gpu, poison(kn));
  s.cu_seqlens = gcu.get();
  s.cu_seqlens_host = cu.data();  // the tile map is built from the host copy
  gpu.attention_forward(gout.get(), glse.get(), gq.get(), gk.get(), gv.get(), s);
  gpu.attention_backward(gdq.get(), gdk.get(), gdv.get(), gdo.get(), gq.get(), gk.get(), gv.get(),
                         gout.get(), glse.get(), s);
  std::string what = " ";  // (GCC 12 warns falsely (-Wrestrict) on " " + std::string)
  what += describe(c);
  expect_close(download(gpu, gout), out, kFp32Tol, "attn out" + what);
  expect_close(download(gpu, glse), lse, kFp32Tol, "attn lse" + what);
  // 1-token sequences have exactly zero dq/dk, computed as dP - D of terms of the inputs'
  // size (O(1) here): their rounding noise is relative to 1, the floor (on an H100 the
  // fp32 kernel's noise was 5.8e-5 of a 1e-3 floor, i.e. 6e-8 absolute).
  expect_close(download(gpu, gdq), dq, kFp32Tol, "attn dq" + what, 1.0);
  expect_close(download(gpu, gdk), dk, kFp32Tol, "attn dk" + what, 1.0);
  expect_close(download(gpu, gdv), dv, kFp32Tol, "attn dv" + what, 1e-3);
}

class GpuAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    FLEXSP_REQUIRE_GPU();
    gpu = make_cuda_backend(DType::f32);
  }
  std::unique_ptr<Backend> gpu;
};

TEST_F(GpuAttention, OneTokenSequences) {
  run_case(*gpu, {{1}, 4, 4, 16}, 1);
  run_case(*gpu, {{1, 1, 1, 1, 1}, 4, 2, 16}, 2);
}

TEST_F(GpuAttention, OddLengthsAroundTiles) {
  const std::vector<int> lens{5, 31, 32, 33, 64, 65, 1, 100, 0, 3};
  for (int d : {16, 64, 128}) {
    run_case(*gpu, {lens, 4, 4, d}, 10 + d);  // 1:1
    run_case(*gpu, {lens, 4, 2, d}, 20 + d);  // 2:1
    run_case(*gpu, {lens, 8, 2, d}, 30 + d);  // 4:1
  }
}

TEST_F(GpuAttention, ManyShortSequences) {
  Rng r(3);
  std::vector<int> lens(120);
  for (auto& l : lens) l = 1 + r.below(9);
  run_case(*gpu, {lens, 8, 2, 64}, 4);
}

TEST_F(GpuAttention, LongSequenceAndLargeHeadDim) {
  run_case(*gpu, {{300, 77}, 4, 1, 64}, 5);
  run_case(*gpu, {{70, 2}, 2, 1, 256}, 6);  // > 48 KB shared memory per block
}

TEST_F(GpuAttention, NoTokens) {
  run_case(*gpu, {{}, 4, 2, 16}, 7);
  run_case(*gpu, {{0, 0}, 4, 2, 16}, 8);
}

// ---- bf16 ------------------------------------------------------------------------------

void run_case_bf16(Backend& gpu, Backend& cpu, const AttnCase& c, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> cu{0};
  for (int l : c.lens) cu.push_back(cu.back() + l);
  const int64_t T = cu.back(), qn = T * c.heads * c.head_dim, kn = T * c.kv_heads * c.head_dim;
  const auto q = random_bf16(r, qn), k = random_bf16(r, kn), v = random_bf16(r, kn);
  const auto dout = random_bf16(r, qn);
  AttnShape s = shape_of(c);
  std::string what = " bf16 ";
  what += describe(c);
  // Forward on both.
  auto ccu = upload(cpu, cu), gcu = upload(gpu, cu);
  auto cq = upload_act(cpu, q), ck = upload_act(cpu, k), cv = upload_act(cpu, v);
  auto gq = upload_act(gpu, q), gk = upload_act(gpu, k), gv = upload_act(gpu, v);
  auto cout_ = upload_act(cpu, poison(qn)), gout = upload_act(gpu, poison(qn));
  auto clse = upload(cpu, poison(T * c.heads)), glse = upload(gpu, poison(T * c.heads));
  s.cu_seqlens = ccu.get();
  cpu.attention_forward(cout_.get(), clse.get(), cq.get(), ck.get(), cv.get(), s);
  s.cu_seqlens = gcu.get();
  s.cu_seqlens_host = cu.data();  // the tile map is built from the host copy
  gpu.attention_forward(gout.get(), glse.get(), gq.get(), gk.get(), gv.get(), s);
  const std::vector<float> out = download_act(cpu, cout_), lse = download(cpu, clse);
  expect_close(download_act(gpu, gout), out, kBf16Tol, "attn out" + what);
  expect_close(download(gpu, glse), lse, kFp32Tol, "attn lse" + what);
  // Backward on both from the CPU's out and lse.
  auto cdo = upload_act(cpu, dout), gdo = upload_act(gpu, dout);
  auto gout_c = upload_act(gpu, out);
  auto glse_c = upload(gpu, lse);
  auto cdq = upload_act(cpu, poison(qn)), cdk = upload_act(cpu, poison(kn));
  auto cdv = upload_act(cpu, poison(kn));
  auto gdq = upload_act(gpu, poison(qn)), gdk = upload_act(gpu, poison(kn));
  auto gdv = upload_act(gpu, poison(kn));
  s.cu_seqlens = ccu.get();
  cpu.attention_backward(cdq.get(), cdk.get(), cdv.get(), cdo.get(), cq.get(), ck.get(),
                         cv.get(), cout_.get(), clse.get(), s);
  s.cu_seqlens = gcu.get();
  s.cu_seqlens_host = cu.data();  // the tile map is built from the host copy
  gpu.attention_backward(gdq.get(), gdk.get(), gdv.get(), gdo.get(), gq.get(), gk.get(),
                         gv.get(), gout_c.get(), glse_c.get(), s);
  // 1-token sequences have exactly zero dq/dk (a floor keeps rounding noise relative).
  expect_close(download_act(gpu, gdq), download_act(cpu, cdq), kBf16Tol, "attn dq" + what, 1e-3);
  expect_close(download_act(gpu, gdk), download_act(cpu, cdk), kBf16Tol, "attn dk" + what, 1e-3);
  expect_close(download_act(gpu, gdv), download_act(cpu, cdv), kBf16Tol, "attn dv" + what, 1e-3);
}

class GpuAttentionBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    FLEXSP_REQUIRE_GPU();
    gpu = make_cuda_backend(DType::bf16);
    cpu = make_cpu_backend(DType::bf16);
  }
  void run(const AttnCase& c, uint64_t seed) { run_case_bf16(*gpu, *cpu, c, seed); }
  std::unique_ptr<Backend> gpu, cpu;
};

TEST_F(GpuAttentionBf16, OneTokenSequences) {
  run({{1}, 4, 4, 64}, 101);
  run({{1, 1, 1, 1, 1}, 8, 2, 128}, 102);
}

TEST_F(GpuAttentionBf16, OddLengthsAroundTiles) {
  const std::vector<int> lens{5, 31, 32, 33, 64, 65, 1, 100, 0, 3};
  for (int d : {64, 128, 256}) {
    run({lens, 4, 4, d}, 110 + d);  // 1:1
    run({lens, 8, 2, d}, 130 + d);  // 4:1
  }
}

TEST_F(GpuAttentionBf16, ManyShortSequences) {
  Rng r(103);
  std::vector<int> lens(120);
  for (auto& l : lens) l = 1 + r.below(9);
  run({lens, 8, 2, 64}, 104);
  run({lens, 4, 4, 128}, 105);
}

TEST_F(GpuAttentionBf16, LongSequence) {
  run({{1000}, 8, 2, 64}, 106);
  run({{997, 3}, 4, 4, 128}, 107);
  run({{301}, 4, 1, 256}, 108);
}

TEST_F(GpuAttentionBf16, NoTokens) { run({{0, 0}, 4, 2, 64}, 109); }

}  // namespace
}  // namespace flexsp::testing
