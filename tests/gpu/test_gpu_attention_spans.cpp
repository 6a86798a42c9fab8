// Attention over spans (AttnShape::cu_seqlens_k, causal_offset: ring attention, Seq1F1B
// chunks) and attention_merge on the CUDA backend against the CPU backend (the CPU twin),
// for the simple kernels (fp32 and bf16) and the tensor-core ones (bf16, head_dim 64/128,
// skipped where unsupported): keys longer than the queries with the default alignment,
// explicit offsets with key blocks before, across and after the queries, rows and whole
// sequences that see no key (out 0, lse -inf, zero gradients), 1-, 2- and odd-length
// sequences, an empty one. Backward on both from the CPU's out and lse. Tolerances as
// test_gpu_attention (fp32 1e-5, bf16 1e-2; lse 1e-5).
#include <string>

#include "gpu_test_common.h"
#include "kernels/cuda/attention_tc.h"

namespace flexsp::testing {
namespace {

struct SpanCase {
  std::vector<int> qlens, klens;
  std::vector<int32_t> off;  // empty: the default alignment (klen - qlen)
  int heads, kv_heads, head_dim;
};

std::vector<int32_t> cu_of(const std::vector<int>& lens) {
  std::vector<int32_t> cu{0};
  for (int l : lens) cu.push_back(cu.back() + l);
  return cu;
}

// -inf in the CPU's lse exactly where the GPU's is (expect_close skips non-finite wants).
void expect_same_empty_rows(const std::vector<float>& got, const std::vector<float>& want,
                            const std::string& what) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if ((want[i] == -INFINITY) != (got[i] == -INFINITY) && bad++ == 0)
      ADD_FAILURE() << what << ": lse element " << i << " is " << got[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0u) << what;
}

void run_span_case(Backend& gpu, Backend& cpu, const SpanCase& c, uint64_t seed,
                   const std::string& label) {
  Rng r(seed);
  const auto cuq = cu_of(c.qlens), cuk = cu_of(c.klens);
  const int64_t tq = cuq.back(), tk = cuk.back();
  const int64_t qn = tq * c.heads * c.head_dim, kn = tk * c.kv_heads * c.head_dim;
  const auto q = random_bf16(r, qn, -2, 2), k = random_bf16(r, kn, -2, 2);
  const auto v = random_bf16(r, kn), dout = random_bf16(r, qn);
  const double tol = gpu.act_dtype() == DType::bf16 ? kBf16Tol : kFp32Tol;
  const std::string what = " " + label + " seed " + std::to_string(seed);
  AttnShape s;
  s.nseq = static_cast<int>(c.qlens.size());
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  auto bind = [&](Backend& be, const Buffer<int32_t>& bq, const Buffer<int32_t>& bk,
                  const Buffer<int32_t>& bo) {
    s.cu_seqlens = bq.get();
    s.cu_seqlens_k = bk.get();
    s.causal_offset = c.off.empty() ? nullptr : bo.get();
    const bool host = &be == &gpu;
    s.cu_seqlens_host = host ? cuq.data() : nullptr;
    s.cu_seqlens_k_host = host ? cuk.data() : nullptr;
    s.causal_offset_host = host && !c.off.empty() ? c.off.data() : nullptr;
  };
  const std::vector<int32_t> off = c.off.empty() ? std::vector<int32_t>{0} : c.off;
  auto ccq = upload(cpu, cuq), cck = upload(cpu, cuk), cco = upload(cpu, off);
  auto gcq = upload(gpu, cuq), gck = upload(gpu, cuk), gco = upload(gpu, off);
  auto cq = upload_act(cpu, q), ck = upload_act(cpu, k), cv = upload_act(cpu, v);
  auto gq = upload_act(gpu, q), gk = upload_act(gpu, k), gv = upload_act(gpu, v);
  auto cout_ = upload_act(cpu, poison(qn)), gout = upload_act(gpu, poison(qn));
  auto clse = upload(cpu, poison(tq * c.heads)), glse = upload(gpu, poison(tq * c.heads));
  bind(cpu, ccq, cck, cco);
  cpu.attention_forward(cout_.get(), clse.get(), cq.get(), ck.get(), cv.get(), s);
  bind(gpu, gcq, gck, gco);
  gpu.attention_forward(gout.get(), glse.get(), gq.get(), gk.get(), gv.get(), s);
  const std::vector<float> out = download_act(cpu, cout_), lse = download(cpu, clse);
  expect_close(download_act(gpu, gout), out, tol, "span out" + what);
  const std::vector<float> got_lse = download(gpu, glse);
  expect_close(got_lse, lse, kFp32Tol, "span lse" + what);
  expect_same_empty_rows(got_lse, lse, "span lse" + what);

  auto cdo = upload_act(cpu, dout), gdo = upload_act(gpu, dout);
  auto gout_c = upload_act(gpu, out);
  auto glse_c = upload(gpu, lse);
  auto cdq = upload_act(cpu, poison(qn)), cdk = upload_act(cpu, poison(kn));
  auto cdv = upload_act(cpu, poison(kn));
  auto gdq = upload_act(gpu, poison(qn)), gdk = upload_act(gpu, poison(kn));
  auto gdv = upload_act(gpu, poison(kn));
  bind(cpu, ccq, cck, cco);
  cpu.attention_backward(cdq.get(), cdk.get(), cdv.get(), cdo.get(), cq.get(), ck.get(),
                         cv.get(), cout_.get(), clse.get(), s);
  bind(gpu, gcq, gck, gco);
  gpu.attention_backward(gdq.get(), gdk.get(), gdv.get(), gdo.get(), gq.get(), gk.get(),
                         gv.get(), gout_c.get(), glse_c.get(), s);
  expect_close(download_act(gpu, gdq), download_act(cpu, cdq), tol, "span dq" + what, 1e-3);
  expect_close(download_act(gpu, gdk), download_act(cpu, cdk), tol, "span dk" + what, 1e-3);
  expect_close(download_act(gpu, gdv), download_act(cpu, cdv), tol, "span dv" + what, 1e-3);
}

// (activation type, train.cuda_attention): the simple kernels in fp32 and bf16, the
// tensor-core ones in bf16.
struct Mode {
  DType act;
  const char* attention;
};

class GpuAttentionSpans : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    FLEXSP_REQUIRE_GPU();
    if (std::string(GetParam().attention) == "tc" && !cuda::attention_tc_supported(64))
      GTEST_SKIP() << "no tensor-core attention on this device";
    gpu = make_cuda_backend(GetParam().act, false, *enum_parse<CudaAttention>(GetParam().attention));
    cpu = make_cpu_backend(GetParam().act);
  }
  void run(const SpanCase& c, uint64_t seed, const std::string& label) {
    run_span_case(*gpu, *cpu, c, seed, label + " " + GetParam().attention);
  }
  std::unique_ptr<Backend> gpu, cpu;
};

TEST_P(GpuAttentionSpans, Seq1F1BChunks) {
  // Queries: a later chunk; keys: the sequence up to the chunk's end (default alignment).
  const std::vector<int> q{1, 2, 33, 70, 0, 130, 64}, k{1, 5, 73, 170, 5, 200, 128};
  run({q, k, {}, 4, 2, 64}, 1, "seq1f1b d64");
  run({q, k, {}, 4, 4, 128}, 2, "seq1f1b d128");
}

TEST_P(GpuAttentionSpans, RingBlocks) {
  // Keys entirely before the queries (all visible), across the diagonal at unaligned
  // offsets, starting inside the query block (early rows see nothing), entirely after.
  const std::vector<int> q{50, 70, 65, 1, 2, 97}, k{40, 64, 65, 3, 1, 97};
  run({q, k, {60, 10, -20, -5, 0, 0}, 4, 2, 64}, 3, "ring d64");
  run({q, k, {64, -33, 31, 1, -1, -64}, 8, 2, 64}, 4, "ring d64 gqa4");
  run({q, k, {100, -1, 3, 0, 1, 33}, 2, 1, 128}, 5, "ring d128");
}

TEST_P(GpuAttentionSpans, NothingVisible) {
  run({{33, 64, 1}, {10, 64, 2}, {-1000, -64, -1}, 4, 2, 64}, 6, "none visible");
}

TEST_P(GpuAttentionSpans, Merge) {
  Rng r(7);
  const int64_t rows = 77;
  const int heads = 4, d = 64;
  const auto out = random_bf16(r, rows * heads * d), out_b = random_bf16(r, rows * heads * d);
  auto lse = random_floats(r, rows * heads, -3, 3), lse_b = random_floats(r, rows * heads, -3, 3);
  for (int64_t i = 0; i < rows * heads; i += 5) lse[i] = -INFINITY;  // one side saw no key
  for (int64_t i = 0; i < rows * heads; i += 3) lse_b[i] = -INFINITY;  // both, at 15 i
  std::vector<std::vector<float>> results;
  for (Backend* be : {cpu.get(), gpu.get()}) {
    auto o = upload_act(*be, out), ob = upload_act(*be, out_b);
    auto l = upload(*be, lse), lb = upload(*be, lse_b);
    be->attention_merge(o.get(), l.get(), ob.get(), lb.get(), rows, heads, d);
    results.push_back(download_act(*be, o));
    results.push_back(download(*be, l));
  }
  const double tol = gpu->act_dtype() == DType::bf16 ? kBf16Tol : kFp32Tol;
  expect_close(results[2], results[0], tol, "merge out");
  expect_close(results[3], results[1], kFp32Tol, "merge lse");
  expect_same_empty_rows(results[3], results[1], "merge lse");
}

INSTANTIATE_TEST_SUITE_P(Kernels, GpuAttentionSpans,
                         ::testing::Values(Mode{DType::f32, "simple"},
                                           Mode{DType::bf16, "simple"},
                                           Mode{DType::bf16, "tc"}),
                         [](const ::testing::TestParamInfo<Mode>& i) {
                           return std::string(i.param.act == DType::bf16 ? "bf16_" : "f32_") +
                                  i.param.attention;
                         });

}  // namespace
}  // namespace flexsp::testing
