// The CPU backend: fp32 host memory, GEMMs through OpenBLAS, every other op forwarded to
// the reference kernels in kernels/cpu (OpenMP inside). Synchronous, so synchronize() is
// a no-op. Allocations are 64-byte aligned (cache lines, AVX-512 loads) and counted, so
// tests and benchmarks can report the peak memory the model asked for.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "lib/backend/backend.h"
#include "lib/util/error.h"

#ifdef FLEXSP_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#endif

namespace flexsp {
namespace {

class CpuBackend final : public Backend {
 public:
  ~CpuBackend() override {
    for (auto& [p, n] : sizes_) std::free(p);
  }
  const char* name() const override { return "cpu"; }

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
  void synchronize() override {}
  size_t allocated_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  size_t peak_allocated_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

  void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override {
    cpu::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  double sum(const float* x, int64_t n) override { return cpu::sum(x, n); }
  double sum_squares(const float* x, int64_t n) override { return cpu::sum_squares(x, n); }
  void scale(float* x, int64_t n, float alpha) override { cpu::scale(x, n, alpha); }
  void axpy(float* y, const float* x, int64_t n, float alpha) override {
    cpu::axpy(y, x, n, alpha);
  }

  void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n,
                         int64_t dim) override {
    cpu::embedding_forward(out, table, ids, n, dim);
  }
  void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                          int64_t dim) override {
    cpu::embedding_backward(dtable, dout, ids, n, dim);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t n,
                       int64_t dim, double eps) override {
    cpu::rmsnorm_forward(out, rstd, x, w, n, dim, eps);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                        const float* w, const float* rstd, int64_t n, int64_t dim) override {
    cpu::rmsnorm_backward(dx, dw, dout, x, w, rstd, n, dim);
  }
  void rope_forward(float* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                    double theta) override {
    cpu::rope_forward(x, pos, n, heads, head_dim, theta);
  }
  void rope_backward(float* dx, const int32_t* pos, int64_t n, int heads, int head_dim,
                     double theta) override {
    cpu::rope_backward(dx, pos, n, heads, head_dim, theta);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) override {
    cpu::swiglu_forward(out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, int64_t n) override {
    cpu::swiglu_backward(dgate, dup, dout, gate, up, n);
  }
  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         const AttnShape& s) override {
    cpu::attention_forward(out, lse, q, k, v, s);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                          const float* k, const float* v, const float* out, const float* lse,
                          const AttnShape& s) override {
    cpu::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, s);
  }
  void cross_entropy_forward(float* loss, float* lse, const float* logits,
                             const int32_t* targets, int64_t n, int64_t vocab) override {
    cpu::cross_entropy_forward(loss, lse, logits, targets, n, vocab);
  }
  void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                              const int32_t* targets, int64_t n, int64_t vocab,
                              double scale) override {
    cpu::cross_entropy_backward(dlogits, logits, lse, targets, n, vocab, scale);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                    const AdamWArgs& a) override {
    cpu::adamw_update(p, g, m, v, n, a);
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;
  size_t current_ = 0, peak_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

std::unique_ptr<Backend> make_backend(const std::string& kind) {
  if (kind == "cpu") return make_cpu_backend();
#ifdef FLEXSP_HAVE_CUDA
  if (kind == "auto") return cuda_device_count() > 0 ? make_cuda_backend() : make_cpu_backend();
  if (kind == "cuda") {
    if (cuda_device_count() > 0) return make_cuda_backend();
    fail("train.backend: 'cuda' needs a CUDA device, and none is visible (no GPU or driver); "
         "use 'cpu' or 'auto'");
  }
#else
  if (kind == "auto") return make_cpu_backend();
  if (kind == "cuda")
    fail("train.backend: 'cuda' is not available in this build (built without CUDA)");
#endif
  fail(fmt::format("train.backend: unknown backend '{}' (expected auto, cpu or cuda)", kind));
}

}  // namespace flexsp
