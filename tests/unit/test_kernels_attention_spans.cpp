// Attention over spans (AttnShape::cu_seqlens_k, causal_offset) and attention_merge against
// plain causal attention of whole sequences (the kernel test_kernels_attention checks
// against a naive implementation): Seq1F1B chunks (queries = a chunk, keys = the sequence
// up to the chunk's end, default alignment), ring attention (key blocks with explicit
// offsets before, across and after the queries, merged), and rows that see no key. Each
// in double (1e-12) and float (1e-5), on whichever ISA runs (unit_kernels_portable repeats
// the Kernel* tests on the portable one).
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_common.h"

namespace flexsp {
namespace {

using testing::random_vec;
using testing::rel_err;
using testing::Rng;

constexpr int kHeads = 4, kKvHeads = 2, kDim = 16;
const std::vector<int> kLens{1, 2, 67, 130, 5, 64};  // 1, 2, odd, around the tile size

template <class T>
struct Full {
  std::vector<int32_t> cu;
  std::vector<T> q, k, v, dout, out, lse, dq, dk, dv;
};

cpu::AttnShape base_shape() {
  cpu::AttnShape s;
  s.heads = kHeads;
  s.kv_heads = kKvHeads;
  s.head_dim = kDim;
  s.scale = 1 / std::sqrt(static_cast<double>(kDim));
  return s;
}

// Whole sequences, plain causal attention: the reference.
template <class T>
Full<T> full_attention(uint64_t seed) {
  Full<T> f;
  f.cu.assign(1, 0);
  for (int l : kLens) f.cu.push_back(f.cu.back() + l);
  const size_t n = static_cast<size_t>(f.cu.back());
  Rng r(seed);
  auto vec = [&](size_t count, double lo, double hi) {
    const auto v = random_vec(r, count, lo, hi);
    return std::vector<T>(v.begin(), v.end());
  };
  f.q = vec(n * kHeads * kDim, -2, 2);
  f.k = vec(n * kKvHeads * kDim, -2, 2);
  f.v = vec(n * kKvHeads * kDim, -1, 1);
  f.dout = vec(n * kHeads * kDim, -1, 1);
  f.out.resize(f.q.size());
  f.lse.resize(n * kHeads);
  f.dq.resize(f.q.size());
  f.dk.resize(f.k.size());
  f.dv.resize(f.k.size());
  cpu::AttnShape s = base_shape();
  s.cu_seqlens = f.cu.data();
  s.nseq = static_cast<int>(kLens.size());
  cpu::attention_forward(f.out.data(), f.lse.data(), f.q.data(), f.k.data(), f.v.data(), s);
  cpu::attention_backward(f.dq.data(), f.dk.data(), f.dv.data(), f.dout.data(), f.q.data(),
                          f.k.data(), f.v.data(), f.out.data(), f.lse.data(), s);
  return f;
}

// Rows [a, b) of each sequence (relative to its start): a packed sub-stream.
struct Rows {
  std::vector<int> a, b;
  std::vector<int32_t> cu() const {
    std::vector<int32_t> c(1, 0);
    for (size_t i = 0; i < a.size(); ++i) c.push_back(c.back() + b[i] - a[i]);
    return c;
  }
};

// x's rows `rows` (width elements each) gathered from, or added back into, a full tensor.
template <class T>
std::vector<T> gather(const std::vector<T>& x, const std::vector<int32_t>& cu, const Rows& rows,
                      int width) {
  std::vector<T> g;
  for (size_t s = 0; s < rows.a.size(); ++s)
    g.insert(g.end(), x.begin() + (cu[s] + rows.a[s]) * width,
             x.begin() + (cu[s] + rows.b[s]) * width);
  return g;
}
template <class T>
void scatter_add(std::vector<T>& x, const std::vector<T>& g, const std::vector<int32_t>& cu,
                 const Rows& rows, int width) {
  size_t o = 0;
  for (size_t s = 0; s < rows.a.size(); ++s)
    for (int64_t e = (cu[s] + rows.a[s]) * width; e < (cu[s] + rows.b[s]) * width; ++e)
      x[static_cast<size_t>(e)] += g[o++];
}

// One span call: queries `qr`, keys `kr` of each sequence; offsets qr.a - kr.a (explicit)
// or the default (nullptr) when `explicit_offset` is false.
template <class T>
struct SpanRun {
  std::vector<int32_t> cuq, cuk, off;
  std::vector<T> q, k, v, dout, out, lse, dq, dk, dv;
  cpu::AttnShape shape(bool explicit_offset) const {
    cpu::AttnShape s = base_shape();
    s.cu_seqlens = cuq.data();
    s.cu_seqlens_k = cuk.data();
    s.causal_offset = explicit_offset ? off.data() : nullptr;
    s.nseq = static_cast<int>(cuq.size()) - 1;
    return s;
  }
};

template <class T>
SpanRun<T> span_forward(const Full<T>& f, const Rows& qr, const Rows& kr, bool explicit_offset) {
  SpanRun<T> r;
  r.cuq = qr.cu();
  r.cuk = kr.cu();
  for (size_t s = 0; s < qr.a.size(); ++s) r.off.push_back(qr.a[s] - kr.a[s]);
  r.q = gather(f.q, f.cu, qr, kHeads * kDim);
  r.dout = gather(f.dout, f.cu, qr, kHeads * kDim);
  r.k = gather(f.k, f.cu, kr, kKvHeads * kDim);
  r.v = gather(f.v, f.cu, kr, kKvHeads * kDim);
  r.out.assign(r.q.size(), T(7));  // overwritten
  r.lse.assign(r.q.size() / kDim, T(7));
  cpu::attention_forward(r.out.data(), r.lse.data(), r.q.data(), r.k.data(), r.v.data(),
                         r.shape(explicit_offset));
  return r;
}

// The backward of r with the given out and lse (its own, or merged ones).
template <class T>
void span_backward(SpanRun<T>& r, const std::vector<T>& out, const std::vector<T>& lse,
                   bool explicit_offset) {
  r.dq.assign(r.q.size(), T(7));
  r.dk.assign(r.k.size(), T(7));
  r.dv.assign(r.k.size(), T(7));
  cpu::attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), r.dout.data(), r.q.data(),
                          r.k.data(), r.v.data(), out.data(), lse.data(),
                          r.shape(explicit_offset));
}

template <class T>
std::vector<double> d(const std::vector<T>& x) {
  return std::vector<double>(x.begin(), x.end());
}
template <class T>
double tol() {
  return std::is_same_v<T, double> ? 1e-12 : 2e-5;
}

// Boundaries of `parts` blocks of each sequence: block p is [len p / parts, len (p+1) / parts).
Rows block(int p, int parts) {
  Rows r;
  for (int l : kLens) {
    r.a.push_back(l * p / parts);
    r.b.push_back(l * (p + 1) / parts);
  }
  return r;
}

template <class T>
void check_seq1f1b() {
  const Full<T> f = full_attention<T>(11);
  const int chunks = 3;
  std::vector<T> out(f.out.size()), lse(f.lse.size()), dq(f.dq.size()), dk(f.dk.size()),
      dv(f.dv.size());
  for (int c = 0; c < chunks; ++c) {
    const Rows qr = block(c, chunks);
    Rows kr = qr;
    std::fill(kr.a.begin(), kr.a.end(), 0);  // keys: the sequence up to the chunk's end
    SpanRun<T> r = span_forward(f, qr, kr, false);
    span_backward(r, r.out, r.lse, false);
    scatter_add(out, r.out, f.cu, qr, kHeads * kDim);
    scatter_add(lse, r.lse, f.cu, qr, kHeads);
    scatter_add(dq, r.dq, f.cu, qr, kHeads * kDim);
    scatter_add(dk, r.dk, f.cu, kr, kKvHeads * kDim);  // summed over the chunks
    scatter_add(dv, r.dv, f.cu, kr, kKvHeads * kDim);
  }
  EXPECT_LT(rel_err(d(out), d(f.out)), tol<T>());
  EXPECT_LT(rel_err(d(lse), d(f.lse)), tol<T>());
  EXPECT_LT(rel_err(d(dq), d(f.dq), 0.1), tol<T>());
  EXPECT_LT(rel_err(d(dk), d(f.dk), 0.1), tol<T>());
  EXPECT_LT(rel_err(d(dv), d(f.dv), 0.1), tol<T>());
}

// Query blocks of `qparts`, key blocks of `kparts` per sequence: every query block merges
// its forward over all key blocks (each with its explicit offset), then every pair's
// backward runs with the merged out and lse; gradients summed equal full attention's.
template <class T>
void check_ring(int qparts, int kparts) {
  SCOPED_TRACE(::testing::Message() << qparts << " query blocks, " << kparts << " key blocks");
  const Full<T> f = full_attention<T>(12);
  std::vector<T> out(f.out.size()), lse(f.lse.size()), dq(f.dq.size()), dk(f.dk.size()),
      dv(f.dv.size());
  for (int qp = 0; qp < qparts; ++qp) {
    const Rows qr = block(qp, qparts);
    std::vector<SpanRun<T>> runs;
    std::vector<T> mo, ml;
    for (int kp = 0; kp < kparts; ++kp) {
      runs.push_back(span_forward(f, qr, block(kp, kparts), true));
      const SpanRun<T>& r = runs.back();
      if (kp == 0) {
        mo = r.out, ml = r.lse;
      } else {
        cpu::attention_merge(mo.data(), ml.data(), r.out.data(), r.lse.data(),
                             static_cast<int64_t>(ml.size() / kHeads), kHeads, kDim);
      }
    }
    for (int kp = 0; kp < kparts; ++kp) {
      SpanRun<T>& r = runs[static_cast<size_t>(kp)];
      span_backward(r, mo, ml, true);
      scatter_add(dq, r.dq, f.cu, qr, kHeads * kDim);
      scatter_add(dk, r.dk, f.cu, block(kp, kparts), kKvHeads * kDim);
      scatter_add(dv, r.dv, f.cu, block(kp, kparts), kKvHeads * kDim);
    }
    scatter_add(out, mo, f.cu, qr, kHeads * kDim);
    scatter_add(lse, ml, f.cu, qr, kHeads);
  }
  EXPECT_LT(rel_err(d(out), d(f.out)), tol<T>());
  EXPECT_LT(rel_err(d(lse), d(f.lse)), tol<T>());
  EXPECT_LT(rel_err(d(dq), d(f.dq), 0.1), tol<T>());
  EXPECT_LT(rel_err(d(dk), d(f.dk), 0.1), tol<T>());
  EXPECT_LT(rel_err(d(dv), d(f.dv), 0.1), tol<T>());
}

TEST(KernelAttentionSpans, Seq1F1BChunksEqualFullAttention) {
  check_seq1f1b<double>();
  check_seq1f1b<float>();
}

TEST(KernelAttentionSpans, RingBlocksMergedEqualFullAttention) {
  check_ring<double>(3, 3);  // key blocks before, on and after the query block's diagonal
  check_ring<double>(3, 4);  // key blocks that start inside the query block
  check_ring<float>(3, 4);
  check_ring<double>(1, 5);  // whole sequences against 5 key blocks
}

// Queries of a sequence whose keys start later: the first rows see nothing (out 0,
// lse -inf, no gradient), the others equal a span of just them.
template <class T>
void check_unseen() {
  const Full<T> f = full_attention<T>(13);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  Rows qr, kr, late;  // queries: the whole sequence; keys: its second half
  for (int l : kLens) {
    qr.a.push_back(0), qr.b.push_back(l);
    kr.a.push_back(l / 2), kr.b.push_back(l);
    late.a.push_back(l / 2), late.b.push_back(l);
  }
  SpanRun<T> r = span_forward(f, qr, kr, true);
  span_backward(r, r.out, r.lse, true);
  SpanRun<T> ref = span_forward(f, late, kr, true);  // offset 0: only the rows that see keys
  span_backward(ref, ref.out, ref.lse, true);
  std::vector<T> out(r.out.size(), T(0)), lse(r.lse.size(), neg_inf), dq(r.dq.size(), T(0));
  const std::vector<int32_t> cuq = qr.cu();
  Rows tail = late;  // where the reference's rows sit in r's packed queries
  scatter_add(out, ref.out, cuq, tail, kHeads * kDim);
  for (size_t i = 0; i < lse.size(); ++i) lse[i] = T(0);
  scatter_add(lse, ref.lse, cuq, tail, kHeads);
  scatter_add(dq, ref.dq, cuq, tail, kHeads * kDim);
  size_t unseen = 0;
  for (size_t s = 0; s < kLens.size(); ++s)
    for (int i = 0; i < kLens[s] / 2; ++i)
      for (int h = 0; h < kHeads; ++h) {
        const size_t row = static_cast<size_t>(cuq[s] + i) * kHeads + h;
        EXPECT_EQ(r.lse[row], neg_inf);
        r.lse[row] = T(0);  // compared below as 0
        ++unseen;
      }
  EXPECT_GT(unseen, 0u);
  EXPECT_LT(rel_err(d(r.out), d(out)), tol<T>());  // zeros included
  EXPECT_LT(rel_err(d(r.lse), d(lse)), tol<T>());
  EXPECT_LT(rel_err(d(r.dq), d(dq), 0.1), tol<T>());
  EXPECT_LT(rel_err(d(r.dk), d(ref.dk), 0.1), tol<T>());
  EXPECT_LT(rel_err(d(r.dv), d(ref.dv), 0.1), tol<T>());

  // A span that sees nothing at all: zeros everywhere, gradients overwritten with 0.
  SpanRun<T> none = span_forward(f, block(0, 1), block(0, 1), true);
  for (int32_t& o : none.off) o = -1000;
  none.out.assign(none.out.size(), T(7));
  cpu::attention_forward(none.out.data(), none.lse.data(), none.q.data(), none.k.data(),
                         none.v.data(), none.shape(true));
  span_backward(none, none.out, none.lse, true);
  for (T x : none.lse) EXPECT_EQ(x, neg_inf);
  for (const auto* v : {&none.out, &none.dq, &none.dk, &none.dv})
    for (T x : *v) ASSERT_EQ(x, T(0));
}

TEST(KernelAttentionSpans, RowsThatSeeNoKey) {
  check_unseen<double>();
  check_unseen<float>();
}

TEST(KernelAttentionSpans, MergeHandlesEmptySides) {
  const double ninf = -std::numeric_limits<double>::infinity();
  // rows: (a, b) = (finite, finite), (-inf, finite), (finite, -inf), (-inf, -inf); 1 head, d 2
  std::vector<double> out{1, 2, 0, 0, 5, 6, 0, 0}, lse{std::log(1.0), ninf, 0.5, ninf};
  const std::vector<double> ob{3, 4, 7, 8, 9, 9, 9, 9}, lb{std::log(3.0), 0.25, ninf, ninf};
  cpu::attention_merge(out.data(), lse.data(), ob.data(), lb.data(), 4, 1, 2);
  EXPECT_NEAR(out[0], 0.25 * 1 + 0.75 * 3, 1e-15);
  EXPECT_NEAR(out[1], 0.25 * 2 + 0.75 * 4, 1e-15);
  EXPECT_NEAR(lse[0], std::log(4.0), 1e-15);
  EXPECT_EQ(out[2], 7);
  EXPECT_EQ(out[3], 8);
  EXPECT_EQ(lse[1], 0.25);
  EXPECT_EQ(out[4], 5);
  EXPECT_EQ(lse[2], 0.5);
  EXPECT_EQ(out[6], 0);
  EXPECT_EQ(lse[3], ninf);
}

}  // namespace
}  // namespace flexsp
