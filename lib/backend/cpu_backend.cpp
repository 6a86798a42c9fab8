// The CPU backend: host memory, GEMMs through OpenBLAS, every other op forwarded to the
// reference kernels in kernels/cpu (OpenMP inside). Synchronous, so synchronize() is a
// no-op. Allocations are 64-byte aligned (cache lines, AVX-512 loads) and counted, so
// tests and benchmarks can report the peak memory the model asked for. The asynchronous
// copies run when waited for (host_copy_queue.h), the CPU's copy stream.
//
// Activations are fp32, or bf16 to emulate a GPU's mixed precision: each op then widens
// its bf16 inputs into fp32 scratch, runs the fp32 reference kernel and rounds its outputs
// once (Widened below), which is the contract the CUDA bf16 kernels are tested against.
// The emulation costs a copy per operand: a test mode, not a fast path.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/backend/host_copy_queue.h"
#include "lib/util/error.h"


namespace flexsp {
namespace {

void widen(float* dst, const uint16_t* src, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void narrow(uint16_t* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

// fp32 views of act_t buffers for one op. In fp32 mode the buffers themselves; in bf16
// mode fp32 copies, the outputs rounded back into their buffers when the view goes out
// of scope (after the kernel ran). Inputs are copies, so an output may alias an input.
class Widened {
 public:
  explicit Widened(DType act) : bf16_(act == DType::bf16) {}
  Widened(const Widened&) = delete;
  Widened& operator=(const Widened&) = delete;
  ~Widened() {
    for (auto& o : outs_) narrow(o.dst, o.buf.data(), static_cast<int64_t>(o.buf.size()));
  }
  const float* in(const act_t* x, int64_t n) {
    if (!bf16_) return static_cast<const float*>(x);
    ins_.emplace_back(static_cast<size_t>(n));
    widen(ins_.back().data(), static_cast<const uint16_t*>(x), n);
    return ins_.back().data();
  }
  // read: the op reads the old value too (in place, or +=).
  float* out(act_t* x, int64_t n, bool read) {
    if (!bf16_) return static_cast<float*>(x);
    outs_.push_back(Out{static_cast<uint16_t*>(x), std::vector<float>(static_cast<size_t>(n))});
    if (read) widen(outs_.back().buf.data(), outs_.back().dst, n);
    return outs_.back().buf.data();
  }

 private:
  struct Out {
    uint16_t* dst;
    std::vector<float> buf;
  };
  bool bf16_;
  std::vector<std::vector<float>> ins_;
  std::vector<Out> outs_;
};

// Rows x cols of a matrix with row stride ld, as a dense fp32 copy (ld = cols) and back.
std::vector<float> widen_matrix(const void* x, DType t, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    if (t == DType::f32)
      std::memcpy(out.data() + r * cols, static_cast<const float*>(x) + r * ld,
                  static_cast<size_t>(cols) * sizeof(float));
    else
      widen(out.data() + r * cols, static_cast<const uint16_t*>(x) + r * ld, cols);
  }
  return out;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(DType act) : act_(act) {
    FLEXSP_CHECK(act == DType::f32 || act == DType::bf16,
                 "cpu backend: activations must be f32 or bf16, not {}", dtype_name(act));
  }
  ~CpuBackend() override {
    for (auto& [p, n] : sizes_) std::free(p);
  }
  const char* name() const override { return "cpu"; }
  DType act_dtype() const override { return act_; }

  void* alloc(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) return nullptr;
    void* p = std::aligned_alloc(64, rounded);
    FLEXSP_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
    std::memset(p, 0, rounded);
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = rounded;
    current_ += rounded;
    if (current_ > peak_) peak_ = current_;
    return p;
  }
  void free(void* p) override {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sizes_.find(p);
      FLEXSP_ASSERT(it != sizes_.end());
      current_ -= it->second;
      sizes_.erase(it);
    }
    std::free(p);
  }
  void zero(void* p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) override {
    if (width == 0) return;
    for (size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                  static_cast<const char*>(src) + r * src_pitch, width);
  }
  void* alloc_host(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    FLEXSP_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
    return p;
  }
  void free_host(void* p) override { std::free(p); }
  uint64_t copy_to_host_async(void* dst, const void* src, size_t bytes) override {
    return copies_.push(dst, src, bytes);
  }
  uint64_t copy_from_host_async(void* dst, const void* src, size_t bytes) override {
    return copies_.push(dst, src, bytes);
  }
  void wait_copies(uint64_t ticket) override { copies_.wait(ticket); }
  void synchronize() override { copies_.wait(UINT64_MAX); }
  size_t allocated_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  size_t peak_allocated_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }
  void reset_peak_allocated_bytes() override {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = current_;
  }

  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override {
    cpu::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_act(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const act_t* a,
                int64_t lda, const act_t* b, int64_t ldb, float beta, void* c, DType c_type,
                int64_t ldc) override {
    FLEXSP_CHECK(c_type == act_ || c_type == DType::f32,
                 "gemm_act: C must be {} or f32, not {}", dtype_name(act_), dtype_name(c_type));
    if (act_ == DType::f32) {
      cpu::gemm(ta, tb, m, n, k, alpha, static_cast<const float*>(a), lda,
                static_cast<const float*>(b), ldb, beta, static_cast<float*>(c), ldc);
      return;
    }
    if (m == 0 || n == 0) return;
    const std::vector<float> wa = widen_matrix(a, act_, ta ? k : m, ta ? m : k, lda);
    const std::vector<float> wb = widen_matrix(b, act_, tb ? n : k, tb ? k : n, ldb);
    if (c_type == DType::f32) {
      cpu::gemm(ta, tb, m, n, k, alpha, wa.data(), ta ? m : k, wb.data(), tb ? k : n, beta,
                static_cast<float*>(c), ldc);
      return;
    }
    std::vector<float> wc = beta != 0.0f ? widen_matrix(c, act_, m, n, ldc)
                                         : std::vector<float>(static_cast<size_t>(m * n));
    cpu::gemm(ta, tb, m, n, k, alpha, wa.data(), ta ? m : k, wb.data(), tb ? k : n, beta,
              wc.data(), n);
    for (int64_t r = 0; r < m; ++r)
      narrow(static_cast<uint16_t*>(c) + r * ldc, wc.data() + r * n, n);
  }
  void cast(void* dst, DType dt, const void* src, DType st, int64_t n) override {
    FLEXSP_CHECK((dt == DType::f32 || dt == DType::bf16) && (st == DType::f32 || st == DType::bf16),
                 "cast: {} -> {} is not supported (f32 and bf16 only)", dtype_name(st),
                 dtype_name(dt));
    FLEXSP_CHECK(dt == st || dst != src || n == 0, "cast: {} -> {} cannot run in place",
                 dtype_name(st), dtype_name(dt));
    if (dt == st)
      copy(dst, src, static_cast<size_t>(n) * dtype_size(dt));
    else if (dt == DType::bf16)
      narrow(static_cast<uint16_t*>(dst), static_cast<const float*>(src), n);
    else
      widen(static_cast<float*>(dst), static_cast<const uint16_t*>(src), n);
  }
  double sum(const float* x, int64_t n) override { return cpu::sum(x, n); }
  double sum_squares(const float* x, int64_t n) override { return cpu::sum_squares(x, n); }
  void scale(float* x, int64_t n, float alpha) override { cpu::scale(x, n, alpha); }
  void axpy(float* y, const float* x, int64_t n, float alpha) override {
    cpu::axpy(y, x, n, alpha);
  }
  void axpy_act(act_t* y, const act_t* x, int64_t n, float alpha) override {
    Widened w(act_);
    const float* xf = w.in(x, n);
    cpu::axpy(w.out(y, n, true), xf, n, alpha);
  }

  void embedding_forward(act_t* out, const act_t* table, const int32_t* ids, int64_t n,
                         int64_t dim) override {
    if (act_ == DType::bf16) {  // a gather: copy the bf16 rows, nothing to round
      for (int64_t t = 0; t < n; ++t) {
        uint16_t* row = static_cast<uint16_t*>(out) + t * dim;
        if (ids[t] < 0)
          std::memset(row, 0, static_cast<size_t>(dim) * sizeof(uint16_t));
        else
          std::memcpy(row, static_cast<const uint16_t*>(table) + static_cast<int64_t>(ids[t]) * dim,
                      static_cast<size_t>(dim) * sizeof(uint16_t));
      }
      return;
    }
    cpu::embedding_forward(static_cast<float*>(out), static_cast<const float*>(table), ids, n,
                           dim);
  }
  void embedding_backward(float* dtable, const act_t* dout, const int32_t* ids, int64_t n,
                          int64_t dim) override {
    Widened w(act_);
    cpu::embedding_backward(dtable, w.in(dout, n * dim), ids, n, dim);
  }
  void rmsnorm_forward(act_t* out, float* rstd, const act_t* x, const act_t* w, int64_t n,
                       int64_t dim, double eps) override {
    Widened v(act_);
    const float *xf = v.in(x, n * dim), *wf = v.in(w, dim);
    cpu::rmsnorm_forward(v.out(out, n * dim, false), rstd, xf, wf, n, dim, eps);
  }
  void rmsnorm_backward(act_t* dx, float* dw, const act_t* dout, const act_t* x, const act_t* w,
                        const float* rstd, int64_t n, int64_t dim) override {
    Widened v(act_);
    const float *df = v.in(dout, n * dim), *xf = v.in(x, n * dim), *wf = v.in(w, dim);
    cpu::rmsnorm_backward(v.out(dx, n * dim, true), dw, df, xf, wf, rstd, n, dim);
  }
  void rope_forward(act_t* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                    const double* inv_freq) override {
    Widened v(act_);
    cpu::rope_forward(v.out(x, n * heads * head_dim, true), pos, n, heads, head_dim, inv_freq);
  }
  void rope_backward(act_t* dx, const int32_t* pos, int64_t n, int heads, int head_dim,
                     const double* inv_freq) override {
    Widened v(act_);
    cpu::rope_backward(v.out(dx, n * heads * head_dim, true), pos, n, heads, head_dim, inv_freq);
  }
  void swiglu_forward(act_t* out, const act_t* gate, const act_t* up, int64_t n) override {
    Widened v(act_);
    const float *gf = v.in(gate, n), *uf = v.in(up, n);
    cpu::swiglu_forward(v.out(out, n, false), gf, uf, n);
  }
  void swiglu_backward(act_t* dgate, act_t* dup, const act_t* dout, const act_t* gate,
                       const act_t* up, int64_t n) override {
    Widened v(act_);
    const float *df = v.in(dout, n), *gf = v.in(gate, n), *uf = v.in(up, n);
    float* dg = v.out(dgate, n, false);
    cpu::swiglu_backward(dg, v.out(dup, n, false), df, gf, uf, n);
  }
  void attention_forward(act_t* out, float* lse, const act_t* q, const act_t* k, const act_t* v,
                         const AttnShape& s) override {
    const auto [tq, tk] = cpu::attention_rows(s);
    const int64_t nq = tq * s.heads * s.head_dim, nk = tk * s.kv_heads * s.head_dim;
    Widened w(act_);
    const float *qf = w.in(q, nq), *kf = w.in(k, nk), *vf = w.in(v, nk);
    cpu::attention_forward(w.out(out, nq, false), lse, qf, kf, vf, s);
  }
  void attention_backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dout, const act_t* q,
                          const act_t* k, const act_t* v, const act_t* out, const float* lse,
                          const AttnShape& s) override {
    const auto [tq, tk] = cpu::attention_rows(s);
    const int64_t nq = tq * s.heads * s.head_dim, nk = tk * s.kv_heads * s.head_dim;
    Widened w(act_);
    const float *df = w.in(dout, nq), *qf = w.in(q, nq), *kf = w.in(k, nk), *vf = w.in(v, nk),
                *of = w.in(out, nq);
    float *dqf = w.out(dq, nq, false), *dkf = w.out(dk, nk, false);
    cpu::attention_backward(dqf, dkf, w.out(dv, nk, false), df, qf, kf, vf, of, lse, s);
  }
  void attention_merge(act_t* out, float* lse, const act_t* out_b, const float* lse_b,
                       int64_t rows, int heads, int head_dim) override {
    const int64_t n = rows * heads * head_dim;
    Widened w(act_);
    const float* ob = w.in(out_b, n);
    cpu::attention_merge(w.out(out, n, true), lse, ob, lse_b, rows, heads, head_dim);
  }
  void cross_entropy_forward(float* loss, float* lse, const act_t* logits,
                             const int32_t* targets, int64_t n, int64_t vocab) override {
    Widened w(act_);
    cpu::cross_entropy_forward(loss, lse, w.in(logits, n * vocab), targets, n, vocab);
  }
  void cross_entropy_backward(act_t* dlogits, const act_t* logits, const float* lse,
                              const int32_t* targets, int64_t n, int64_t vocab,
                              double scale) override {
    Widened w(act_);
    const float* lf = w.in(logits, n * vocab);
    cpu::cross_entropy_backward(w.out(dlogits, n * vocab, false), lf, lse, targets, n, vocab,
                                scale);
  }
  void cross_entropy_shard_stats(float* stats, const act_t* logits, const int32_t* targets,
                                 int64_t n, int64_t vocab, int64_t valid) override {
    Widened w(act_);
    cpu::cross_entropy_shard_stats(stats, w.in(logits, n * vocab), targets, n, vocab, valid);
  }
  void cross_entropy_shard_loss(float* loss, float* lse, const float* stats, int parts,
                                const int32_t* targets, int64_t n) override {
    cpu::cross_entropy_shard_loss(loss, lse, stats, parts, targets, n);
  }
  void cross_entropy_shard_backward(act_t* dlogits, const act_t* logits, const float* lse,
                                    const int32_t* targets, int64_t n, int64_t vocab,
                                    int64_t valid, double scale) override {
    Widened w(act_);
    const float* lf = w.in(logits, n * vocab);
    cpu::cross_entropy_shard_backward(w.out(dlogits, n * vocab, false), lf, lse, targets, n,
                                      vocab, valid, scale);
  }
  void add_f32(act_t* y, const float* x, int64_t n) override {
    Widened w(act_);
    cpu::axpy(w.out(y, n, true), x, n, 1.0f);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                    const AdamWArgs& a) override {
    cpu::adamw_update(p, g, m, v, n, a);
  }

 private:
  DType act_;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;
  size_t current_ = 0, peak_ = 0;
  HostCopyQueue copies_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(DType act) { return std::make_unique<CpuBackend>(act); }

}  // namespace flexsp
