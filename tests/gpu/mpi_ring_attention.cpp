// Multi-rank, CUDA backend (fp32), staged communicators: ring attention and USP on device
// buffers (span attention, merge and the overlapped block shifts through Comm) equal the
// CPU backend's full attention over the whole stream, forward and backward, for documents
// of 1, 2, odd and 2r-1 tokens and GQA. Registered for 2 and 4 ranks (on a one-GPU machine
// the ranks share the GPU).
#include "lib/runtime/ring_attention.h"
#include "mpi_gpu_fixture.h"
#include "support/attention_reference.h"

namespace flexsp::testing {
namespace {

using GpuMpiRing = MpiGpuTest;

std::vector<float> rows(const std::vector<float>& x, size_t w, const std::vector<int64_t>& idx,
                        int64_t lo, int64_t hi) {
  std::vector<float> out;
  for (int64_t i = lo; i < hi; ++i)
    for (size_t c = 0; c < w; ++c)
      out.push_back(i < static_cast<int64_t>(idx.size()) ? x[idx[i] * w + c] : 0.f);
  return out;
}

void check_case(Groups& groups, Backend& gpu, int d, int u, int kv_heads,
                const std::vector<int32_t>& cu) {
  const ModelConfig c = attention_model(4, kv_heads, 1);
  auto cpu = make_cpu_backend();
  const FullAttention f = full_attention(*cpu, c, cu);
  Comm& group = groups.for_backend(CommPurpose::all_to_all).block(d);
  const int j = group.rank(), r = d / u;
  const ZigzagLayout z = zigzag_layout(cu.data(), static_cast<int>(cu.size()) - 1, r);
  const auto padded = cp_padded_tokens(z, u);
  const auto idx = zigzag_indices(z, j / u);
  const auto off = shard_offsets(padded[j / u], u);
  const int64_t lo = off[j % u], hi = off[j % u + 1];
  const size_t Q = 4 * 8, K = static_cast<size_t>(kv_heads) * 8;
  RingAttention ring(gpu, c, cu.back() + d);
  ring.set_layout(group, groups.for_backend(CommPurpose::all_to_all).block(u), z, padded);
  auto q = upload_act(gpu, rows(f.q, Q, idx, lo, hi)), k = upload_act(gpu, rows(f.k, K, idx, lo, hi)),
       v = upload_act(gpu, rows(f.v, K, idx, lo, hi)), dout = upload_act(gpu, rows(f.dout, Q, idx, lo, hi));
  auto o = upload_act(gpu, std::vector<float>(q.n)), dq = upload_act(gpu, std::vector<float>(q.n)),
       dk = upload_act(gpu, std::vector<float>(k.n)), dv = upload_act(gpu, std::vector<float>(k.n));
  ring.forward(0, q.get(), k.get(), v.get(), o.get());
  ring.backward(0, dout.get(), q.get(), k.get(), v.get(), o.get(), dq.get(), dk.get(), dv.get());
  const std::string what = "d=" + std::to_string(d) + " u=" + std::to_string(u);
  if (hi == lo) return;
  expect_close(download_act(gpu, o), rows(f.out, Q, idx, lo, hi), 1e-4, "out " + what);
  expect_close(download_act(gpu, dq), rows(f.dq, Q, idx, lo, hi), 1e-4, "dq " + what);
  expect_close(download_act(gpu, dk), rows(f.dk, K, idx, lo, hi), 1e-4, "dk " + what);
  expect_close(download_act(gpu, dv), rows(f.dv, K, idx, lo, hi), 1e-4, "dv " + what);
}

TEST_F(GpuMpiRing, EqualsCpuFullAttention) {
  auto gpu = make_cuda_backend(DType::f32);
  BackendComms comms(groups_, grid_, *gpu, CommChoice::staged);
  for (int d = 2; d <= grid_.size; d *= 2)
    for (int u = 1; u < d; u *= 2) {
      const int r = d / u;
      check_case(groups_, *gpu, d, u, 4, {0, 1, 3, 10, 10 + 2 * r - 1, 150, 151, 300});
      check_case(groups_, *gpu, d, u, 1, {0, 2, 9, 200});
    }
}

}  // namespace
}  // namespace flexsp::testing
