// GEMMs through cuBLASLt (design notes in gemm_lt.h). Host code over libcublasLt.
#include "kernels/cuda/gemm_lt.h"

#include <cublasLt.h>

#include <map>
#include <tuple>

#include "kernels/cuda/cublas_check.h"

namespace flexsp::cuda {

int gemm_lt_alignment(const void* p) {
  const auto x = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && x % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

namespace {

struct PlanKey {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  int ab_type, c_type, compute, align_a, align_b, align_c;
  auto tie() const {
    return std::tie(ta, tb, m, n, k, lda, ldb, ldc, ab_type, c_type, compute, align_a, align_b,
                    align_c);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

// Descriptors and the chosen algorithm of one GEMM shape (ok = false: none found).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

}  // namespace

struct GemmLt::Impl {
  cudaStream_t stream;
  Scratch& scratch;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  size_t built = 0;

  Impl(cudaStream_t st, Scratch& s) : stream(st), scratch(s) {
    FLEXSP_CUBLAS_CHECK(cublasLtCreate(&handle));
    workspace = scratch.acquire(kWorkspaceBytes);
  }
  ~Impl() {
    plans.clear();
    if (workspace != nullptr) scratch.release(workspace);
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  // The row-major GEMM as cuBLASLt's column-major one: A' = B (op tb), B' = A (op ta),
  // C' = C^T of n x m.
  std::unique_ptr<Plan> make_plan(const GemmLtArgs& g, const PlanKey& key) {
    auto p = std::make_unique<Plan>();
    ++built;
    FLEXSP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, g.compute, CUDA_R_32F));
    const cublasOperation_t op_a = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    FLEXSP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                       &op_a, sizeof op_a));
    FLEXSP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                       &op_b, sizeof op_b));
    auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
    FLEXSP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, g.ab_type, u(g.tb ? g.k : g.n),
                                                   u(g.tb ? g.n : g.k), g.ldb));
    FLEXSP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, g.ab_type, u(g.ta ? g.m : g.k),
                                                   u(g.ta ? g.k : g.m), g.lda));
    FLEXSP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, g.c_type, u(g.n), u(g.m), g.ldc));
    cublasLtMatmulPreference_t pref = nullptr;
    FLEXSP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    // Partial sums in the compute type only: a bf16 C is rounded once, as gemm_act's
    // CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION keeps it.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    const uint32_t al_a = static_cast<uint32_t>(key.align_b), al_b = static_cast<uint32_t>(key.align_a),
                   al_c = static_cast<uint32_t>(key.align_c);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                &schemes, sizeof schemes);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &al_a, sizeof al_a);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &al_b, sizeof al_b);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &al_c, sizeof al_c);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->a, p->b, p->c, p->c, pref, 1,
                                          &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    p->ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p->ok) p->algo = result.algo;
    return p;
  }
};

GemmLt::GemmLt(cudaStream_t stream, Scratch& scratch)
    : impl_(std::make_unique<Impl>(stream, scratch)) {}
GemmLt::~GemmLt() = default;
size_t GemmLt::plans_built() const { return impl_->built; }

bool GemmLt::run(const GemmLtArgs& g) {
  const PlanKey key{g.ta, g.tb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc,
                    static_cast<int>(g.ab_type), static_cast<int>(g.c_type),
                    static_cast<int>(g.compute), gemm_lt_alignment(g.a),
                    gemm_lt_alignment(g.b), gemm_lt_alignment(g.c)};
  auto it = impl_->plans.find(key);
  if (it == impl_->plans.end()) {
    if (impl_->plans.size() >= kMaxPlans) impl_->plans.clear();
    it = impl_->plans.emplace(key, impl_->make_plan(g, key)).first;
  }
  const Plan& p = *it->second;
  if (!p.ok) return false;
  FLEXSP_CUBLAS_CHECK(cublasLtMatmul(impl_->handle, p.desc, &g.alpha, g.b, p.a, g.a, p.b,
                                     &g.beta, g.c, p.c, g.c, p.c, &p.algo, impl_->workspace,
                                     kWorkspaceBytes, impl_->stream));
  return true;
}

}  // namespace flexsp::cuda
