// The bf16 attention kernels -- flexsp's tensor-core ones (kernels/cuda/attention_tc.cu)
// and cuDNN's fused attention (attention_cudnn.h, where built) -- against the CPU reference
// cpu::attention_forward / attention_backward<float> run on the same bf16-representable
// inputs (random fp32 rounded with round_bf16, uploaded as bf16 bits). cuDNN's cases are
// fewer (each new shape builds a graph) and skip Determinism (its dQ uses atomics).
//  - Cases: head_dim 64 and 128 x GQA 1:1, 2:1, 4:1 (4 query heads over 4, 2, 1 kv heads)
//    x layouts: one 1-token sequence, one 1000-token sequence, a mix of 1, 7, 0, 63, 64,
//    65, 130, 517 tokens, 200 sequences of 1-40 tokens, one 4096-token sequence.
//  - Forward: out (bf16) within 1e-2 of the reference relative to the tensor's largest
//    element (max|got - want| / max|want|); lse (fp32) within 1e-3 absolute.
//  - Backward: both sides run from the same out (the reference's, rounded to bf16) and
//    lse (the reference's), so its check does not inherit the forward's rounding;
//    dq, dk, dv within 1e-2 relative (floor 1e-3: 1-token sequences have dq = dk = 0).
//  - Outputs start poisoned (NaN bits): an unwritten element fails. PaddedRows puts NaN
//    in every input row past the last sequence: the kernels must never read them, and
//    must leave the output rows there untouched. Determinism: two runs, identical bits.
// On a failure the first mismatching elements are printed as (row = sequence:position,
// head, column, got, want), with the count of bad elements per position % 64 (a tile-edge
// or mask bug shows as a few positions); every case prints its errors in one
// "[attention_tc]" line, to judge the margins.
// Without a device (or on a device the kernels do not support) the tests skip, visibly.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <ostream>
#include <string>
#include <vector>

#include "gpu_test_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/cuda_check.h"
#include "lib/util/dtype.h"

namespace flexsp::testing {
namespace {

constexpr double kTcTol = 1e-2;        // out, dq, dk, dv: relative to max|want|
constexpr double kTcLseTol = 1e-3;     // lse: absolute
constexpr double kTcGradFloor = 1e-3;  // smallest denominator for dq, dk, dv
constexpr uint16_t kPoisonBf16 = 0xFFFF;      // a NaN
constexpr uint32_t kPoisonF32 = 0xFFFFFFFFu;  // a NaN
constexpr int kMaxPrinted = 8;

// Device memory of a fixed size, freed on scope exit.
class DevBuf {
 public:
  explicit DevBuf(size_t bytes) : bytes_(bytes) {
    FLEXSP_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(bytes, 16)));
  }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void* get() const { return p_; }
  void upload(const void* src) {
    if (bytes_ > 0) FLEXSP_CUDA_CHECK(cudaMemcpy(p_, src, bytes_, cudaMemcpyHostToDevice));
  }
  void download(void* dst) const {
    if (bytes_ > 0) FLEXSP_CUDA_CHECK(cudaMemcpy(dst, p_, bytes_, cudaMemcpyDeviceToHost));
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

template <class T>
std::unique_ptr<DevBuf> upload_vec(const std::vector<T>& v) {
  auto b = std::make_unique<DevBuf>(v.size() * sizeof(T));
  b->upload(v.data());
  return b;
}

template <class T>
std::vector<T> download_vec(const DevBuf& b, size_t n) {
  std::vector<T> v(n);
  b.download(v.data());
  return v;
}

// Scratch and the tile map's memory over the stream-ordered allocator, on the legacy
// default stream (0) that the test uses for everything (uploads: plain cudaMemcpy).
class AsyncScratch final : public cuda::Scratch, public cuda::TileUploader {
 public:
  void* acquire(size_t bytes) override {
    void* p = nullptr;
    FLEXSP_CUDA_CHECK(cudaMallocAsync(&p, std::max<size_t>(bytes, 16), 0));
    return p;
  }
  void release(void* p) override {
    if (p != nullptr) FLEXSP_CUDA_CHECK(cudaFreeAsync(p, 0));
  }
  void* alloc(size_t bytes) override { return acquire(bytes); }
  void free(void* p) override { release(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    FLEXSP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
};

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16(v[i]);
  return b;
}

std::vector<float> from_bf16_bits(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_float(b[i]);
  return v;
}

std::vector<float> from_f32_bits(const std::vector<uint32_t>& b) {
  std::vector<float> v(b.size());
  std::memcpy(v.data(), b.data(), b.size() * sizeof(float));
  return v;
}

// ---- cases --------------------------------------------------------------------------------

enum class Kernel { tc, cudnn };

struct Case {
  std::string name;
  Kernel kernel = Kernel::tc;
  std::vector<int> lens;
  int heads = 4, kv_heads = 4, head_dim = 64;
  int pad = 0;  // rows past the last sequence (inputs NaN there, outputs must stay poisoned)
};

std::vector<int> layout_lens(const std::string& layout) {
  if (layout == "one1") return {1};
  if (layout == "one1000") return {1000};
  if (layout == "mix") return {1, 7, 0, 63, 64, 65, 130, 517};
  if (layout == "one4096") return {4096};
  EXPECT_EQ(layout, "short200");
  Rng r(200);
  std::vector<int> lens(200);
  for (int& l : lens) l = 1 + r.below(40);
  return lens;
}

// Host inputs, [rows = T + pad] rows; rows >= T hold NaN.
struct Inputs {
  std::vector<int32_t> cu{0};
  int64_t tokens = 0, rows = 0;
  std::vector<float> q, k, v, dout;
  cpu::AttnShape shape;  // cu_seqlens set by the user (host or device)
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Inputs in;
  for (int l : c.lens) in.cu.push_back(in.cu.back() + l);
  in.tokens = in.cu.back();
  in.rows = in.tokens + c.pad;
  Rng r(seed);
  const size_t qn = static_cast<size_t>(in.rows) * c.heads * c.head_dim;
  const size_t kn = static_cast<size_t>(in.rows) * c.kv_heads * c.head_dim;
  in.q = random_bf16(r, qn);
  in.k = random_bf16(r, kn);
  in.v = random_bf16(r, kn);
  in.dout = random_bf16(r, qn);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const size_t qt = static_cast<size_t>(in.tokens) * c.heads * c.head_dim;
  const size_t kt = static_cast<size_t>(in.tokens) * c.kv_heads * c.head_dim;
  std::fill(in.q.begin() + qt, in.q.end(), nan);
  std::fill(in.dout.begin() + qt, in.dout.end(), nan);
  std::fill(in.k.begin() + kt, in.k.end(), nan);
  std::fill(in.v.begin() + kt, in.v.end(), nan);
  in.shape.nseq = static_cast<int>(c.lens.size());
  in.shape.heads = c.heads;
  in.shape.kv_heads = c.kv_heads;
  in.shape.head_dim = c.head_dim;
  in.shape.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  return in;
}

// The reference: forward, then backward from out rounded to bf16 (what the GPU backward
// is given too); rows past the sequences NaN.
struct Reference {
  std::vector<float> out, lse, out_bf16, dq, dk, dv;
};

Reference reference(Inputs& in, const Case& c) {
  Reference ref;
  const size_t qn = in.q.size(), kn = in.k.size();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ref.out.assign(qn, nan);
  ref.lse.assign(static_cast<size_t>(in.rows) * c.heads, nan);
  ref.dq.assign(qn, nan);
  ref.dk.assign(kn, nan);
  ref.dv.assign(kn, nan);
  in.shape.cu_seqlens = in.cu.data();
  cpu::attention_forward<float>(ref.out.data(), ref.lse.data(), in.q.data(), in.k.data(),
                                in.v.data(), in.shape);
  ref.out_bf16 = ref.out;
  for (float& x : ref.out_bf16) x = round_bf16(x);
  cpu::attention_backward<float>(ref.dq.data(), ref.dk.data(), ref.dv.data(), in.dout.data(),
                                 in.q.data(), in.k.data(), in.v.data(), ref.out_bf16.data(),
                                 ref.lse.data(), in.shape);
  in.shape.cu_seqlens = nullptr;
  return ref;
}

// What the GPU wrote, as raw bits (poison where it wrote nothing).
struct GpuResult {
  std::vector<uint16_t> out, dq, dk, dv;
  std::vector<uint32_t> lse;
};

// cuDNN's attention on the default stream, one for the whole test program: its graphs are
// built once per shape. Never destroyed: at exit the CUDA runtime may be gone before it.
cuda::CudnnAttention& cudnn_attention() {
  static auto* attention = new cuda::CudnnAttention(0, *new AsyncScratch);
  return *attention;
}

// Forward from the inputs; backward from the reference's out (bf16) and lse.
GpuResult run_gpu(Inputs& in, const Reference& ref, Kernel kernel) {
  const size_t qn = in.q.size(), kn = in.k.size(), ln = ref.lse.size();
  auto cu = upload_vec(in.cu);
  auto q = upload_vec(to_bf16_bits(in.q)), k = upload_vec(to_bf16_bits(in.k));
  auto v = upload_vec(to_bf16_bits(in.v)), dout = upload_vec(to_bf16_bits(in.dout));
  auto out_in = upload_vec(to_bf16_bits(ref.out_bf16));
  auto lse_in = upload_vec(ref.lse);
  auto out = upload_vec(std::vector<uint16_t>(qn, kPoisonBf16));
  auto lse = upload_vec(std::vector<uint32_t>(ln, kPoisonF32));
  auto dq = upload_vec(std::vector<uint16_t>(qn, kPoisonBf16));
  auto dk = upload_vec(std::vector<uint16_t>(kn, kPoisonBf16));
  auto dv = upload_vec(std::vector<uint16_t>(kn, kPoisonBf16));
  in.shape.cu_seqlens = static_cast<const int32_t*>(cu->get());
  AsyncScratch scratch;
  if (kernel == Kernel::cudnn) {
    in.shape.cu_seqlens_host = in.cu.data();
    cuda::CudnnAttention& a = cudnn_attention();
    EXPECT_TRUE(a.forward(out->get(), static_cast<float*>(lse->get()), q->get(), k->get(),
                          v->get(), in.shape, scratch))
        << a.refusal();
    EXPECT_TRUE(a.backward(dq->get(), dk->get(), dv->get(), dout->get(), q->get(), k->get(),
                           v->get(), out_in->get(), static_cast<const float*>(lse_in->get()),
                           in.shape, scratch))
        << a.refusal();
    in.shape.cu_seqlens_host = nullptr;
  } else {
    cuda::TileMapCache tiles(scratch);
    const cuda::TileList map = tiles.get(in.cu.data(), in.shape.nseq, cuda::kAttnTcTile);
    cuda::attention_tc_forward(out->get(), static_cast<float*>(lse->get()), q->get(),
                               k->get(), v->get(), in.shape, map, 0);
    cuda::attention_tc_backward(dq->get(), dk->get(), dv->get(), dout->get(), q->get(),
                                k->get(), v->get(), out_in->get(),
                                static_cast<const float*>(lse_in->get()), in.shape, map,
                                scratch, 0);
  }
  FLEXSP_CUDA_CHECK(cudaDeviceSynchronize());
  FLEXSP_CUDA_CHECK(cudaGetLastError());
  in.shape.cu_seqlens = nullptr;
  GpuResult g;
  g.out = download_vec<uint16_t>(*out, qn);
  g.lse = download_vec<uint32_t>(*lse, ln);
  g.dq = download_vec<uint16_t>(*dq, qn);
  g.dk = download_vec<uint16_t>(*dk, kn);
  g.dv = download_vec<uint16_t>(*dv, kn);
  return g;
}

// ---- checks -------------------------------------------------------------------------------

// "row 612 (seq 6:35)": the packed row, its sequence and position in it; pos (if not
// null) gets the position, -1 past the sequences.
std::string where(const std::vector<int32_t>& cu, int64_t row, int64_t* pos = nullptr) {
  const auto it = std::upper_bound(cu.begin(), cu.end(), static_cast<int32_t>(row));
  const int64_t seq = (it - cu.begin()) - 1;
  const bool inside = seq >= 0 && seq + 1 < static_cast<int64_t>(cu.size());
  if (pos != nullptr) *pos = inside ? row - cu[seq] : -1;
  std::ostringstream os;
  os << "row " << row;
  if (inside)
    os << " (seq " << seq << ":" << row - cu[seq] << ")";
  else
    os << " (padding)";
  return os.str();
}

// Element i of a [rows, heads, cols] tensor as "row 612 (seq 6:35) head 1 col 17".
std::string element(const Inputs& in, size_t i, int heads, int cols, int64_t* pos = nullptr) {
  const int64_t row = static_cast<int64_t>(i / (size_t(heads) * cols));
  std::ostringstream os;
  os << where(in.cu, row, pos) << " head " << (i / cols) % heads << " col " << i % cols;
  return os.str();
}

// Compares the rows inside the sequences of a [rows, heads, cols] tensor: error =
// max|got - want| / max(max|want|, floor) (relative) or max|got - want| (absolute), <= tol,
// no non-finite value. On failure prints the first mismatching elements and how the bad
// elements fall on positions inside 64-row tiles (pos % 64: a tile-edge or mask bug shows
// as a few positions). Returns the error.
double check_tensor(const std::string& what, const std::vector<float>& got,
                    const std::vector<float>& want, const Inputs& in, int heads, int cols,
                    double tol, bool relative, double floor = 1e-30) {
  const size_t n = static_cast<size_t>(in.tokens) * heads * cols;
  double maxref = 0;
  for (size_t i = 0; i < n; ++i) maxref = std::max(maxref, std::fabs(double(want[i])));
  const double denom = relative ? std::max(maxref, floor) : 1.0;
  double worst = 0;
  size_t worst_at = 0, bad = 0;
  std::map<int64_t, size_t> by_pos;  // pos % 64 -> bad elements
  std::ostringstream msg;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    const bool finite = std::isfinite(got[i]);
    if (finite && d > worst) worst = d, worst_at = i;
    if (finite && d <= tol * denom) continue;
    int64_t pos = 0;
    const std::string at = element(in, i, heads, cols, &pos);
    ++by_pos[pos % 64];
    if (bad++ < static_cast<size_t>(kMaxPrinted))
      msg << "\n  " << at << ": got " << got[i] << " want " << want[i];
  }
  if (bad > 0) {
    msg << "\n  bad elements by position % 64:";
    int shown = 0;
    for (const auto& [p, count] : by_pos)
      if (shown++ < 16) msg << " " << p << ":" << count;
    if (by_pos.size() > 16) msg << " ... (" << by_pos.size() << " positions)";
  }
  const double err = bad > 0 && worst <= tol * denom ? std::numeric_limits<double>::infinity()
                                                      : worst / denom;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements off (max|want| "
                     << maxref << ", worst finite error " << worst << " at "
                     << element(in, worst_at, heads, cols) << ")" << msg.str();
  EXPECT_LE(err, tol) << what;
  return err;
}

// Rows past the sequences (row_size elements each) must keep the poison bits.
template <class T>
void check_untouched(const std::string& what, const std::vector<T>& bits, int64_t tokens,
                     size_t row_size, T poison) {
  for (size_t i = static_cast<size_t>(tokens) * row_size; i < bits.size(); ++i)
    if (bits[i] != poison) {
      ADD_FAILURE() << what << ": row " << i / row_size << " (past the last sequence, which ends "
                    << "at row " << tokens << ") was written";
      return;
    }
}

// Runs one case and checks every output; prints one line of errors.
void run_case(const Case& c, uint64_t seed) {
  if (c.kernel == Kernel::cudnn && !cuda::cudnn_attention_built())
    GTEST_SKIP() << "this build has no cuDNN attention";
  if (c.kernel == Kernel::tc && !cuda::attention_tc_supported(c.head_dim))
    GTEST_SKIP() << "attention_tc does not support head_dim " << c.head_dim
                 << " on this device";
  Inputs in = make_inputs(c, seed);
  const Reference ref = reference(in, c);
  const GpuResult g = run_gpu(in, ref, c.kernel);
  const std::string tag = c.name + " ";
  const int d = c.head_dim;
  const double e_out = check_tensor(tag + "out", from_bf16_bits(g.out), ref.out, in, c.heads, d,
                                    kTcTol, true);
  const double e_lse = check_tensor(tag + "lse", from_f32_bits(g.lse), ref.lse, in, c.heads, 1,
                                    kTcLseTol, false);
  const double e_dq = check_tensor(tag + "dq", from_bf16_bits(g.dq), ref.dq, in, c.heads, d,
                                   kTcTol, true, kTcGradFloor);
  const double e_dk = check_tensor(tag + "dk", from_bf16_bits(g.dk), ref.dk, in, c.kv_heads, d,
                                   kTcTol, true, kTcGradFloor);
  const double e_dv = check_tensor(tag + "dv", from_bf16_bits(g.dv), ref.dv, in, c.kv_heads, d,
                                   kTcTol, true, kTcGradFloor);
  const size_t rq = size_t(c.heads) * d, rk = size_t(c.kv_heads) * d;
  check_untouched(tag + "out", g.out, in.tokens, rq, kPoisonBf16);
  check_untouched(tag + "lse", g.lse, in.tokens, size_t(c.heads), kPoisonF32);
  check_untouched(tag + "dq", g.dq, in.tokens, rq, kPoisonBf16);
  check_untouched(tag + "dk", g.dk, in.tokens, rk, kPoisonBf16);
  check_untouched(tag + "dv", g.dv, in.tokens, rk, kPoisonBf16);
  std::printf("[attention_%s] %-28s T=%-6lld out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
              c.kernel == Kernel::tc ? "tc" : "cudnn", c.name.c_str(),
              static_cast<long long>(in.tokens), e_out, e_lse, e_dq, e_dk,
              e_dv);
}

// ---- tests --------------------------------------------------------------------------------

struct Param {
  std::string layout;
  int head_dim, group;  // group = heads / kv_heads
};

std::string param_name(const Param& p) {
  return p.layout + "_d" + std::to_string(p.head_dim) + "_gqa" + std::to_string(p.group) + "to1";
}

// gtest prints a parameter in test listings: its name, not its bytes.
void PrintTo(const Param& p, std::ostream* os) { *os << param_name(p); }

// A seed from the case's name (FNV-1a): the same inputs on every platform and run.
uint64_t name_seed(const std::string& name) {
  uint64_t h = 14695981039346656037ull;
  for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

// One parameterized case: 4 query heads over 4 / group kv heads.
void run_param(const Param& p, Kernel kernel) {
  Case c;
  c.name = param_name(p);
  c.kernel = kernel;
  c.lens = layout_lens(p.layout);
  c.heads = 4;
  c.kv_heads = 4 / p.group;
  c.head_dim = p.head_dim;
  run_case(c, name_seed(c.name));
}

std::string param_test_name(const ::testing::TestParamInfo<Param>& i) {
  return param_name(i.param);
}

class GpuAttentionTc : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { FLEXSP_REQUIRE_GPU(); }
};

TEST_P(GpuAttentionTc, MatchesCpuReference) { run_param(GetParam(), Kernel::tc); }

std::vector<Param> all_params() {
  std::vector<Param> ps;
  for (const char* layout : {"one1", "one1000", "mix", "short200", "one4096"})
    for (int d : {64, 128})
      for (int g : {1, 2, 4}) ps.push_back({layout, d, g});
  return ps;
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuAttentionTc, ::testing::ValuesIn(all_params()),
                         param_test_name);

// cuDNN's attention: GQA 1:1 and 4:1 only (2:1 adds nothing its kernels see differently),
// no one1000 (mix and one4096 cover one long sequence).
class GpuAttentionCudnn : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { FLEXSP_REQUIRE_GPU(); }
};

TEST_P(GpuAttentionCudnn, MatchesCpuReference) { run_param(GetParam(), Kernel::cudnn); }

std::vector<Param> cudnn_params() {
  std::vector<Param> ps;
  for (const char* layout : {"one1", "mix", "short200", "one4096"})
    for (int d : {64, 128})
      for (int g : {1, 4}) ps.push_back({layout, d, g});
  return ps;
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuAttentionCudnn, ::testing::ValuesIn(cudnn_params()),
                         param_test_name);

// Last of cuDNN's tests in this file: how many graphs they built, and how long that took.
TEST(GpuAttentionCudnnExtra, PaddedRowsAndNoTokens) {
  FLEXSP_REQUIRE_GPU();
  Case c;
  c.name = "padded_mix_d128";
  c.kernel = Kernel::cudnn;
  c.lens = layout_lens("mix");
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 128;
  c.pad = 37;
  run_case(c, 77 + 128);
  c.name = "no_tokens";
  c.lens = {0, 0};
  c.pad = 3;
  run_case(c, 5);
  if (cuda::cudnn_attention_built())
    std::printf("[attention_cudnn] %zu graphs built in %.1f s\n", cudnn_attention().graph_builds(),
                cudnn_attention().graph_build_seconds());
}

TEST(GpuAttentionTcExtra, PaddedRowsHoldNaNAndStayUntouched) {
  FLEXSP_REQUIRE_GPU();
  for (int d : {64, 128}) {
    Case c;
    c.name = "padded_mix_d" + std::to_string(d);
    c.lens = layout_lens("mix");
    c.heads = 4;
    c.kv_heads = 2;
    c.head_dim = d;
    c.pad = 37;
    run_case(c, 77 + d);
  }
}

TEST(GpuAttentionTcExtra, NoTokens) {
  FLEXSP_REQUIRE_GPU();
  for (const std::vector<int>& lens : {std::vector<int>{}, std::vector<int>{0, 0}}) {
    Case c;
    c.name = "no_tokens";
    c.lens = lens;
    c.heads = 4;
    c.kv_heads = 2;
    c.pad = 3;
    run_case(c, 5);
  }
}

TEST(GpuAttentionTcExtra, Deterministic) {
  FLEXSP_REQUIRE_GPU();
  for (int d : {64, 128}) {
    if (!cuda::attention_tc_supported(d)) GTEST_SKIP() << "head_dim " << d << " unsupported";
    Case c;
    c.lens = layout_lens("mix");
    c.lens.push_back(1000);
    c.heads = 8;
    c.kv_heads = 2;
    c.head_dim = d;
    Inputs in = make_inputs(c, 9 + d);
    const Reference ref = reference(in, c);
    const GpuResult a = run_gpu(in, ref, Kernel::tc), b = run_gpu(in, ref, Kernel::tc);
    auto same = [&](const char* what, const auto& x, const auto& y, int heads) {
      for (size_t i = 0; i < x.size(); ++i)
        if (x[i] != y[i]) {
          ADD_FAILURE() << "d=" << d << " " << what << " differs between two runs at "
                        << element(in, i, heads, d);
          return;
        }
    };
    same("out", a.out, b.out, c.heads);
    same("dq", a.dq, b.dq, c.heads);
    same("dk", a.dk, b.dk, c.kv_heads);
    same("dv", a.dv, b.dv, c.kv_heads);
    EXPECT_EQ(a.lse, b.lse) << "d=" << d << " lse differs between two runs";
  }
}

TEST(GpuAttentionTcExtra, Supported) {
  FLEXSP_REQUIRE_GPU();
  EXPECT_FALSE(cuda::attention_tc_supported(32));
  EXPECT_FALSE(cuda::attention_tc_supported(96));
  EXPECT_FALSE(cuda::attention_tc_supported(256));
  int dev = 0, major = 0;
  FLEXSP_CUDA_CHECK(cudaGetDevice(&dev));
  FLEXSP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major >= 9) {  // Hopper and newer: the kernels must be available for both sizes
    EXPECT_TRUE(cuda::attention_tc_supported(64));
    EXPECT_TRUE(cuda::attention_tc_supported(128));
  }
}

}  // namespace
}  // namespace flexsp::testing
