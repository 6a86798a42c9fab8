// Every op of the CUDA backend in fp32 mode (make_cuda_backend(DType::f32)) against its
// CPU twin (kernels/cpu) on random inputs of several shapes: odd sizes, 1-element cases,
// many short sequences, 1-token sequences, GQA 1:1, 2:1, 4:1. Outputs start poisoned
// (NaN) so unwritten elements fail. fp32: rel_err <= 1e-5. The bf16 mode is tested in
// test_gpu_ops_bf16.cpp. Without a CUDA device every test skips with "no CUDA device".
#include <algorithm>
#include <string>

#include "gpu_test_common.h"
#include "lib/util/error.h"

namespace flexsp::testing {
namespace {

class GpuOps : public ::testing::Test {
 protected:
  void SetUp() override {
    FLEXSP_REQUIRE_GPU();
    gpu = make_cuda_backend(DType::f32);
  }
  std::unique_ptr<Backend> gpu;
};

TEST_F(GpuOps, Gemm) {
  Rng r(1);
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 97, 33}, {130, 3, 257}};
  for (const auto& sh : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t m = sh[0], n = sh[1], k = sh[2];
        // Padded leading dimensions (+3) check the stride handling.
        const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 3, ldc = n + 3;
        auto a = random_floats(r, (ta ? k : m) * lda), b = random_floats(r, (tb ? n : k) * ldb);
        auto c = random_floats(r, m * ldc);
        auto want = c;
        cpu::gemm(ta, tb, m, n, k, 0.7f, a.data(), lda, b.data(), ldb, 0.3f, want.data(), ldc);
        auto da = upload(*gpu, a), db = upload(*gpu, b), dc = upload(*gpu, c);
        gpu->gemm(ta, tb, m, n, k, 0.7f, da.get(), lda, db.get(), ldb, 0.3f, dc.get(), ldc);
        expect_close(download(*gpu, dc), want, kFp32Tol,
                     "gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                         std::to_string(k) + " ta=" + std::to_string(ta) + " tb=" +
                         std::to_string(tb));
      }
}

// gemm_act on an fp32 backend: cublasGemmEx with every type f32 (C must be f32 too), the
// same results as gemm; a C of another type is refused.
TEST_F(GpuOps, GemmActFp32) {
  EXPECT_EQ(gpu->act_dtype(), DType::f32);
  Rng r(12);
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {130, 3, 257}};
  for (const auto& sh : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.0f, 1.0f}) {
          const int64_t m = sh[0], n = sh[1], k = sh[2];
          const int64_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
          auto a = random_floats(r, (ta ? k : m) * lda), b = random_floats(r, (tb ? n : k) * ldb);
          auto c = random_floats(r, m * ldc);
          auto want = c;
          cpu::gemm(ta, tb, m, n, k, -0.6f, a.data(), lda, b.data(), ldb, beta, want.data(), ldc);
          auto da = upload(*gpu, a), db = upload(*gpu, b), dc = upload(*gpu, c);
          gpu->gemm_act(ta, tb, m, n, k, -0.6f, da.get(), lda, db.get(), ldb, beta, dc.get(),
                        DType::f32, ldc);
          expect_close(download(*gpu, dc), want, kFp32Tol,
                       "gemm_act f32 " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                           std::to_string(k) + " ta=" + std::to_string(ta) +
                           " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta));
        }
  Buffer<float> x(*gpu, 4);
  EXPECT_THROW(gpu->gemm_act(false, false, 2, 2, 2, 1.0f, x.get(), 2, x.get(), 2, 0.0f, x.get(),
                             DType::bf16, 2),
               Error);
}

TEST_F(GpuOps, VectorOps) {
  Rng r(2);
  for (int64_t n : {1, 7, 1000, 65537, 3000001}) {
    auto x = random_floats(r, n), y = random_floats(r, n);
    auto dx = upload(*gpu, x), dy = upload(*gpu, y);
    const double s = gpu->sum(dx.get(), n), ss = gpu->sum_squares(dx.get(), n);
    EXPECT_NEAR(s, cpu::sum(x.data(), n), 1e-9 * (1 + std::fabs(cpu::sum(x.data(), n)))) << n;
    EXPECT_NEAR(ss, cpu::sum_squares(x.data(), n), 1e-9 * cpu::sum_squares(x.data(), n)) << n;
    // Deterministic: the same bits again.
    EXPECT_EQ(s, gpu->sum(dx.get(), n));
    EXPECT_EQ(ss, gpu->sum_squares(dx.get(), n));
    gpu->axpy(dy.get(), dx.get(), n, -0.37f);
    cpu::axpy(y.data(), x.data(), n, -0.37f);
    gpu->scale(dy.get(), n, 1.9f);
    cpu::scale(y.data(), n, 1.9f);
    expect_close(download(*gpu, dy), y, kFp32Tol, "axpy+scale n=" + std::to_string(n));
  }
  EXPECT_EQ(gpu->sum(nullptr, 0), 0.0);
}

TEST_F(GpuOps, Embedding) {
  Rng r(3);
  for (int64_t n : {1, 5, 333})
    for (int64_t dim : {1, 64, 100}) {
      const int vocab = 17;  // few rows: many repeated ids in backward
      auto table = random_floats(r, vocab * dim), dout = random_floats(r, n * dim);
      auto dtable = random_floats(r, vocab * dim);
      std::vector<int32_t> ids(n);
      for (auto& i : ids) i = r.below(vocab + 3) - 3;  // some negative: zero rows, no gradient
      std::vector<float> out(n * dim), want_dt = dtable;
      cpu::embedding_forward(out.data(), table.data(), ids.data(), n, dim);
      cpu::embedding_backward(want_dt.data(), dout.data(), ids.data(), n, dim);
      auto dids = upload(*gpu, ids);
      auto dtab = upload(*gpu, table), dout_d = upload(*gpu, dout);
      auto dres = upload(*gpu, poison(n * dim)), ddt = upload(*gpu, dtable);
      gpu->embedding_forward(dres.get(), dtab.get(), dids.get(), n, dim);
      gpu->embedding_backward(ddt.get(), dout_d.get(), dids.get(), n, dim);
      const std::string what = " n=" + std::to_string(n) + " dim=" + std::to_string(dim);
      expect_close(download(*gpu, dres), out, 0.0, "embedding fwd" + what);
      expect_close(download(*gpu, ddt), want_dt, kFp32Tol, "embedding bwd" + what);
    }
}

TEST_F(GpuOps, RmsNorm) {
  Rng r(4);
  for (int64_t n : {1, 3, 257, 600})
    for (int64_t dim : {1, 64, 97, 1000}) {
      auto x = random_floats(r, n * dim), w = random_floats(r, dim, 0.5, 1.5);
      auto dout = random_floats(r, n * dim), dx0 = random_floats(r, n * dim);
      auto dw0 = random_floats(r, dim);
      std::vector<float> out(n * dim), rstd(n), dx = dx0, dw = dw0;
      cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, dim, 1e-5);
      cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(),
                            n, dim);
      auto gx = upload(*gpu, x), gw = upload(*gpu, w), gdo = upload(*gpu, dout);
      auto gout = upload(*gpu, poison(n * dim)), grs = upload(*gpu, poison(n));
      auto gdx = upload(*gpu, dx0), gdw = upload(*gpu, dw0);
      gpu->rmsnorm_forward(gout.get(), grs.get(), gx.get(), gw.get(), n, dim, 1e-5);
      gpu->rmsnorm_backward(gdx.get(), gdw.get(), gdo.get(), gx.get(), gw.get(), grs.get(), n,
                            dim);
      const std::string what = " n=" + std::to_string(n) + " dim=" + std::to_string(dim);
      expect_close(download(*gpu, gout), out, kFp32Tol, "rmsnorm out" + what);
      expect_close(download(*gpu, grs), rstd, kFp32Tol, "rmsnorm rstd" + what);
      // dx = w rstd (dout - xhat mean(dout xhat)) cancels (to w rstd dout eps/x^2 at dim 1):
      // its rounding noise is relative to the terms, w rstd dout, the floor (an H100 was
      // 1.2e-5 off dx's own scale at n = 1, dim = 1).
      double terms = 0;
      for (int64_t i = 0; i < n * dim; ++i)
        terms = std::max(terms, std::abs(double(w[i % dim]) * rstd[i / dim] * dout[i]));
      expect_close(download(*gpu, gdx), dx, kFp32Tol, "rmsnorm dx (+=)" + what, terms);
      expect_close(download(*gpu, gdw), dw, kFp32Tol, "rmsnorm dw (+=)" + what);
    }
}

TEST_F(GpuOps, Rope) {
  Rng r(5);
  for (int64_t n : {1, 37})
    for (int heads : {1, 4})
      for (int hd : {2, 16, 64})
        for (const std::vector<double>& inv : rope_tables(hd)) {
          std::vector<int32_t> pos(n);
          for (auto& p : pos) p = r.below(5000);
          auto x = random_floats(r, n * heads * hd);
          auto fwd = x, bwd = x;
          cpu::rope_forward(fwd.data(), pos.data(), n, heads, hd, inv.data());
          cpu::rope_backward(bwd.data(), pos.data(), n, heads, hd, inv.data());
          auto gpos = upload(*gpu, pos);
          auto ginv = upload(*gpu, inv);
          auto gf = upload(*gpu, x), gb = upload(*gpu, x);
          gpu->rope_forward(gf.get(), gpos.get(), n, heads, hd, ginv.get());
          gpu->rope_backward(gb.get(), gpos.get(), n, heads, hd, ginv.get());
          const std::string what = " n=" + std::to_string(n) + " heads=" + std::to_string(heads) +
                                   " hd=" + std::to_string(hd) + " inv_freq[last]=" +
                                   std::to_string(inv.back());
          expect_close(download(*gpu, gf), fwd, kFp32Tol, "rope fwd" + what);
          expect_close(download(*gpu, gb), bwd, kFp32Tol, "rope bwd" + what);
        }
}

TEST_F(GpuOps, SwiGlu) {
  Rng r(6);
  for (int64_t n : {1, 7, 1000, 65537}) {
    auto g = random_floats(r, n, -6, 6), u = random_floats(r, n), d = random_floats(r, n);
    std::vector<float> out(n), dg(n), du(n);
    cpu::swiglu_forward(out.data(), g.data(), u.data(), n);
    cpu::swiglu_backward(dg.data(), du.data(), d.data(), g.data(), u.data(), n);
    auto gg = upload(*gpu, g), gu = upload(*gpu, u), gd = upload(*gpu, d);
    auto gout = upload(*gpu, poison(n)), gdu = upload(*gpu, poison(n));
    gpu->swiglu_forward(gout.get(), gg.get(), gu.get(), n);
    gpu->swiglu_backward(gd.get(), gdu.get(), gd.get(), gg.get(), gu.get(), n);  // dgate = dout
    const std::string what = " n=" + std::to_string(n);
    expect_close(download(*gpu, gout), out, kFp32Tol, "swiglu fwd" + what);
    expect_close(download(*gpu, gd), dg, kFp32Tol, "swiglu dgate (aliasing dout)" + what);
    expect_close(download(*gpu, gdu), du, kFp32Tol, "swiglu dup" + what);
  }
}

TEST_F(GpuOps, CrossEntropy) {
  Rng r(7);
  for (int64_t n : {1, 9, 130})
    for (int64_t vocab : {2, 97, 5000}) {
      auto z = random_floats(r, n * vocab, -8, 8);
      std::vector<int32_t> tg(n);
      for (auto& t : tg) t = r.below(4) == 0 ? -1 : r.below(static_cast<int>(vocab));
      std::vector<float> loss(n), lse(n), dz(n * vocab);
      cpu::cross_entropy_forward(loss.data(), lse.data(), z.data(), tg.data(), n, vocab);
      cpu::cross_entropy_backward(dz.data(), z.data(), lse.data(), tg.data(), n, vocab, 0.25);
      auto gtg = upload(*gpu, tg);
      auto gz = upload(*gpu, z);
      auto gl = upload(*gpu, poison(n)), glse = upload(*gpu, poison(n));
      gpu->cross_entropy_forward(gl.get(), glse.get(), gz.get(), gtg.get(), n, vocab);
      const std::string what = " n=" + std::to_string(n) + " vocab=" + std::to_string(vocab);
      expect_close(download(*gpu, gl), loss, kFp32Tol, "ce loss" + what);
      expect_close(download(*gpu, glse), lse, kFp32Tol, "ce lse" + what);
      gpu->cross_entropy_backward(gz.get(), gz.get(), glse.get(), gtg.get(), n, vocab, 0.25);
      expect_close(download(*gpu, gz), dz, kFp32Tol, "ce dlogits (in place)" + what);
    }
}

// The vocabulary-shard forms: a row split over 3 shards, the last padded.
TEST_F(GpuOps, CrossEntropyShards) {
  Rng r(17);
  for (int64_t n : {1, 130})
    for (int64_t w : {2, 97, 1700}) {
      const int parts = 3;
      const int64_t valid_last = w - 1;
      std::vector<float> stats(parts * n * 3);
      std::vector<int32_t> global(n);
      for (auto& t : global) t = r.below(4) == 0 ? -1 : r.below(static_cast<int>(w * parts - 1));
      std::vector<Buffer<float>> gstats;
      std::vector<float> lse(n), loss(n);
      auto gall = upload(*gpu, poison(parts * n * 3));
      for (int p = 0; p < parts; ++p) {
        const int64_t valid = p + 1 < parts ? w : valid_last;
        auto z = random_floats(r, n * w, -8, 8);
        std::vector<int32_t> tg(n);
        for (int64_t t = 0; t < n; ++t)
          tg[t] = global[t] < 0 ? -1 : (global[t] / w == p ? global[t] % w : 1 << 30);
        cpu::cross_entropy_shard_stats(stats.data() + p * n * 3, z.data(), tg.data(), n, w, valid);
        auto gz = upload(*gpu, z);
        auto gtg = upload(*gpu, tg);
        auto gs = upload(*gpu, poison(n * 3));
        gpu->cross_entropy_shard_stats(gs.get(), gz.get(), gtg.get(), n, w, valid);
        const std::string what = " n=" + std::to_string(n) + " w=" + std::to_string(w) +
                                 " part " + std::to_string(p);
        expect_close(download(*gpu, gs), std::vector<float>(stats.begin() + p * n * 3,
                                                            stats.begin() + (p + 1) * n * 3),
                     kFp32Tol, "shard stats" + what);
        if (p == 0) {
          cpu::cross_entropy_shard_loss(loss.data(), lse.data(), stats.data(), 1, global.data(), n);
        }
        std::vector<float> dz(n * w);
        cpu::cross_entropy_shard_backward(dz.data(), z.data(), lse.data(), tg.data(), n, w, valid,
                                          0.25);
        auto glse = upload(*gpu, lse);
        gpu->cross_entropy_shard_backward(gz.get(), gz.get(), glse.get(), gtg.get(), n, w, valid,
                                          0.25);
        expect_close(download(*gpu, gz), dz, kFp32Tol, "shard dlogits (in place)" + what);
      }
      auto ga = upload(*gpu, stats);
      auto gg = upload(*gpu, global);
      auto gl = upload(*gpu, poison(n)), gls = upload(*gpu, poison(n));
      cpu::cross_entropy_shard_loss(loss.data(), lse.data(), stats.data(), parts, global.data(), n);
      gpu->cross_entropy_shard_loss(gl.get(), gls.get(), ga.get(), parts, gg.get(), n);
      expect_close(download(*gpu, gl), loss, kFp32Tol, "shard loss");
      expect_close(download(*gpu, gls), lse, kFp32Tol, "shard lse");
    }
}

TEST_F(GpuOps, AddF32) {
  Rng r(19);
  for (int64_t n : {1, 1000, 100003}) {
    auto y = random_floats(r, n), x = random_floats(r, n);
    auto gy = upload(*gpu, y), gx = upload(*gpu, x);
    gpu->add_f32(gy.get(), gx.get(), n);
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
    expect_close(download(*gpu, gy), y, 0.0, "add_f32 n=" + std::to_string(n));
  }
}

TEST_F(GpuOps, AdamW) {
  Rng r(8);
  for (int64_t n : {1, 1000, 100003})
    for (int64_t step : {1, 10}) {
      auto p = random_floats(r, n), g = random_floats(r, n), m = random_floats(r, n, -0.1, 0.1);
      auto v = random_floats(r, n, 0, 0.01);
      AdamWArgs a;
      a.lr = 3e-3f;
      a.weight_decay = 0.1f;
      a.step = step;
      a.grad_scale = 0.5f;
      auto gp = upload(*gpu, p), gg = upload(*gpu, g), gm = upload(*gpu, m), gv = upload(*gpu, v);
      cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, a);
      gpu->adamw_update(gp.get(), gg.get(), gm.get(), gv.get(), n, a);
      const std::string what = " n=" + std::to_string(n) + " step=" + std::to_string(step);
      expect_close(download(*gpu, gp), p, kFp32Tol, "adamw p" + what);
      expect_close(download(*gpu, gm), m, kFp32Tol, "adamw m" + what);
      expect_close(download(*gpu, gv), v, kFp32Tol, "adamw v" + what);
    }
}

// Multi-tensor AdamW: 150 ranges (three launches of up to 64), empty ones and gaps between
// them included, decay on every other one; equal to the CPU's range-by-range update, and
// the gaps untouched.
TEST_F(GpuOps, AdamWRanges) {
  Rng r(9);
  std::vector<AdamWRange> ranges;
  int64_t at = 0;
  for (int i = 0; i < 150; ++i) {
    const int64_t len = i % 7 == 3 ? 0 : 1 + (i * 7919) % 3000;
    ranges.push_back({at, at + len, i % 2 ? 0.1f : 0.0f});
    at += len + (i % 5 == 0 ? 16 : 0);
  }
  const int64_t n = at;
  auto p = random_floats(r, n), g = random_floats(r, n), m = random_floats(r, n, 0, 0.1);
  auto v = random_floats(r, n, 0, 0.1);
  Buffer<float> gp = upload(*gpu, p), gg = upload(*gpu, g), gm = upload(*gpu, m), gv = upload(*gpu, v);
  AdamWArgs a;
  a.lr = 3e-3f;
  a.step = 4;
  a.grad_scale = 0.5f;
  auto cpu_be = make_cpu_backend();
  cpu_be->adamw_update_ranges(p.data(), g.data(), m.data(), v.data(), ranges.data(),
                              static_cast<int>(ranges.size()), a);
  gpu->adamw_update_ranges(gp.get(), gg.get(), gm.get(), gv.get(), ranges.data(),
                           static_cast<int>(ranges.size()), a);
  expect_close(download(*gpu, gp), p, kFp32Tol, "adamw ranges p");
  expect_close(download(*gpu, gm), m, kFp32Tol, "adamw ranges m");
  expect_close(download(*gpu, gv), v, kFp32Tol, "adamw ranges v");
}

TEST_F(GpuOps, MemoryOpsAndAllocator) {
  auto* cb = dynamic_cast<CudaBackend*>(gpu.get());
  ASSERT_NE(cb, nullptr);
  EXPECT_STREQ(gpu->name(), "cuda");
  Rng r(9);
  auto x = random_floats(r, 1001);
  auto a = upload(*gpu, x);
  Buffer<float> b(*gpu, 1001), z(*gpu, 1001);
  EXPECT_EQ(download(*gpu, z), std::vector<float>(1001, 0.0f));  // alloc zero-fills
  gpu->copy(b.get(), a.get(), a.bytes());
  EXPECT_EQ(download(*gpu, b), x);
  gpu->zero(b.get(), 10 * sizeof(float));
  EXPECT_EQ(download(*gpu, b)[9], 0.0f);
  EXPECT_EQ(download(*gpu, b)[10], x[10]);
  // Warm pool: the same pattern of sizes again reserves no new device memory (the release
  // threshold keeps freed blocks in the pool, even across synchronizations).
  const size_t peak = gpu->peak_allocated_bytes();
  EXPECT_GE(peak, gpu->allocated_bytes());
  const size_t live = gpu->allocated_bytes();
  for (int i = 0; i < 3; ++i) {
    Buffer<float> t1(*gpu, 123457), t2(*gpu, 99);
  }
  gpu->synchronize();
  const size_t reserved = cb->pool().reserved_bytes();
  EXPECT_GE(reserved, live + 123457 * sizeof(float)) << "freed memory went back to the driver";
  for (int i = 0; i < 5; ++i) {
    Buffer<float> t1(*gpu, 123457), t2(*gpu, 99);
    gpu->synchronize();
  }
  EXPECT_EQ(cb->pool().reserved_bytes(), reserved) << "the pool grew in a steady state";
  EXPECT_EQ(gpu->allocated_bytes(), live);
  EXPECT_EQ(gpu->peak_allocated_bytes(), std::max(peak, live + (123457 + 99) * sizeof(float)));
}

TEST_F(GpuOps, Copy2dAndPinnedHostMemory) {
  // copy_2d packs column blocks (Ulysses): the same result as the CPU backend's loop.
  Rng r(11);
  const size_t rows = 37, src_cols = 48, dst_cols = 20, width = 12;
  auto x = random_floats(r, rows * src_cols);
  std::vector<float> want(rows * dst_cols, -1.0f);
  auto cpu = make_cpu_backend();
  cpu->copy_2d(want.data() + 3, dst_cols * 4, x.data() + 5, src_cols * 4, width * 4, rows);
  auto src = upload(*gpu, x);
  auto dst = upload(*gpu, std::vector<float>(rows * dst_cols, -1.0f));
  gpu->copy_2d(dst.get() + 3, dst_cols * 4, src.get() + 5, src_cols * 4, width * 4, rows);
  gpu->copy_2d(dst.get(), 4, src.get(), 4, 0, rows);  // nothing to copy
  EXPECT_EQ(download(*gpu, dst), want);
  // alloc_host: page-locked, usable by the copies, not counted as device memory.
  const size_t before = gpu->allocated_bytes();
  auto* h = static_cast<float*>(gpu->alloc_host(x.size() * sizeof(float)));
  ASSERT_NE(h, nullptr);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, h), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  gpu->copy_to_host(h, src.get(), x.size() * sizeof(float));
  EXPECT_EQ(std::vector<float>(h, h + x.size()), x);
  EXPECT_EQ(gpu->allocated_bytes(), before);
  gpu->free_host(h);
  gpu->free_host(nullptr);
  EXPECT_EQ(gpu->alloc_host(0), nullptr);
}

}  // namespace
}  // namespace flexsp::testing
