// The CUDA backend's activation GEMMs through cuBLASLt (kernels/cuda/gemm_lt.h; opt-in,
// FLEXSP_CUDA_GEMM=lt) against the CPU reference cpu::gemm on the same bf16-representable
// inputs: every transpose, beta 0 and 1, padded leading dimensions, fp32 and bf16
// activations with a C of the activation type or fp32, a pointer off its 256-byte
// alignment (the plan must be chosen for it). fp32 C within 1e-5 (kFp32Tol), bf16 C within
// one rounding (kBf16Tol). Plans are cached: the same shape again chooses no new plan.
// gemm_lt_alignment's classes are host logic, checked on every machine.
#include <string>

#include "gpu_test_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/gemm_lt.h"

namespace flexsp::testing {
namespace {

TEST(GemmLtHost, AlignmentClasses) {
  alignas(256) static char buf[512];
  EXPECT_EQ(cuda::gemm_lt_alignment(buf), 256);
  EXPECT_EQ(cuda::gemm_lt_alignment(buf + 512 - 256), 256);
  EXPECT_EQ(cuda::gemm_lt_alignment(buf + 128), 128);
  EXPECT_EQ(cuda::gemm_lt_alignment(buf + 2), 2);
  EXPECT_EQ(cuda::gemm_lt_alignment(buf + 1), 1);
}

TEST(GpuGemmLt, MatchesCpu) {
  FLEXSP_REQUIRE_GPU();
  Rng r(31);
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {130, 3, 257}, {1000, 2048, 512}};
  for (DType act : {DType::f32, DType::bf16})
    for (DType c_type : {act, DType::f32}) {
      if (act == DType::f32 && c_type != act) continue;
      auto gpu = make_cuda_backend(act, false, CudaAttention::automatic, /*gemm_lt=*/true);
      auto* cb = dynamic_cast<CudaBackend*>(gpu.get());
      ASSERT_TRUE(cb != nullptr && cb->gemm_lt());
      for (const auto& sh : shapes)
        for (int ta = 0; ta < 2; ++ta)
          for (int tb = 0; tb < 2; ++tb)
            for (float beta : {0.0f, 1.0f})
              for (int64_t off : {int64_t{0}, int64_t{1}}) {
                const int64_t m = sh[0], n = sh[1], k = sh[2];
                if (off && m * n * k > 10000) continue;  // the odd pointer on small shapes
                const int64_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
                auto a = random_bf16(r, (ta ? k : m) * lda + off);
                auto b = random_bf16(r, (tb ? n : k) * ldb);
                auto c = random_bf16(r, m * ldc);
                auto want = c;
                cpu::gemm(ta, tb, m, n, k, -0.6f, a.data() + off, lda, b.data(), ldb, beta,
                          want.data(), ldc);
                auto da = upload_act(*gpu, a), db = upload_act(*gpu, b);
                const std::string what = std::string(dtype_name(act)) + " C " +
                                         dtype_name(c_type) + " " + std::to_string(m) + "x" +
                                         std::to_string(n) + "x" + std::to_string(k) +
                                         " ta=" + std::to_string(ta) + " tb=" +
                                         std::to_string(tb) + " beta=" +
                                         std::to_string(beta) + " off=" + std::to_string(off);
                const act_t* pa = act_at(da.get(), off, gpu->act_size());
                if (c_type == DType::f32) {
                  auto dc = upload(*gpu, c);
                  gpu->gemm_act(ta, tb, m, n, k, -0.6f, pa, lda, db.get(), ldb, beta, dc.get(),
                                DType::f32, ldc);
                  expect_close(download(*gpu, dc), want, kFp32Tol, what);
                } else {
                  auto dc = upload_act(*gpu, c);
                  gpu->gemm_act(ta, tb, m, n, k, -0.6f, pa, lda, db.get(), ldb, beta, dc.get(),
                                c_type, ldc);
                  expect_close(download_act(*gpu, dc), want, kBf16Tol, what);
                }
              }
      const std::string note = cb->kernel_note();
      EXPECT_NE(note.find("cuBLASLt"), std::string::npos) << note;
    }
}

TEST(GpuGemmLt, PlansAreCachedPerShape) {
  FLEXSP_REQUIRE_GPU();
  auto gpu = make_cuda_backend(DType::bf16, false, CudaAttention::automatic, true);
  Rng r(5);
  const int64_t m = 64, n = 96, k = 128;
  // Room for m + 1 rows: the last GEMM is one row longer.
  auto a = upload_act(*gpu, random_bf16(r, (m + 1) * k));
  auto b = upload_act(*gpu, random_bf16(r, n * k));
  auto c = upload_act(*gpu, std::vector<float>((m + 1) * n));
  auto plans = [&] {
    const std::string note = gpu->kernel_note();
    const size_t at = note.find("cuBLASLt, ");
    return at == std::string::npos ? -1 : std::stoi(note.substr(at + 10));
  };
  gpu->gemm_act(false, true, m, n, k, 1.0f, a.get(), k, b.get(), k, 0.0f, c.get(), DType::bf16, n);
  const int first = plans();
  EXPECT_GE(first, 1);
  for (int i = 0; i < 3; ++i)
    gpu->gemm_act(false, true, m, n, k, 1.0f, a.get(), k, b.get(), k, 0.0f, c.get(), DType::bf16,
                  n);
  EXPECT_EQ(plans(), first) << "the same GEMM chose a new plan";
  gpu->gemm_act(false, true, m + 1, n, k, 1.0f, a.get(), k, b.get(), k, 0.0f, c.get(),
                DType::bf16, n);
  EXPECT_EQ(plans(), first + 1);
}

}  // namespace
}  // namespace flexsp::testing
