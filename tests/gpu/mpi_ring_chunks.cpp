// Multi-rank, CUDA backend (fp32), staged communicators: Seq1F1B's chunks in a ring / USP
// group (lib/runtime/ring_chunks.h) on device buffers -- each chunk zigzag-split over the
// ring, the earlier chunks' keys/values carried behind the block, their gradients brought
// back -- equal the CPU backend's full attention over the whole stream, chunk by chunk,
// forward and backward (the GPU twin of tests/mpi/test_ring_chunks.cpp). Registered for 2
// and 4 ranks (on a one-GPU machine the ranks share the GPU).
#include <memory>

#include "lib/runtime/ring_chunks.h"
#include "mpi_gpu_fixture.h"
#include "support/attention_reference.h"

namespace flexsp::testing {
namespace {

using GpuMpiRingChunks = MpiGpuTest;

struct Member : RingChunkMember {
  std::unique_ptr<ActBuffer> q, k, v, dout, o;
};

void check_case(Groups& groups, Backend& gpu, int d, int u, int kv_heads, int chunks,
                const std::vector<int32_t>& cu) {
  const ModelConfig c = attention_model(4, kv_heads, 1);
  auto cpu = make_cpu_backend();
  const FullAttention f = full_attention(*cpu, c, cu);
  const CommSet& set = groups.for_backend(CommPurpose::all_to_all);
  Comm& group = set.block(d);
  const size_t Q = 4 * 8, K = static_cast<size_t>(kv_heads) * 8;
  const std::vector<HostMicroBatch> parts = stream_chunks(cu, chunks);
  SeqChunkScratch scratch;
  std::vector<Member> m(static_cast<size_t>(chunks));
  std::vector<RingChunkAttention*> before;
  for (int i = 0; i < chunks; ++i) {
    Member& x = m[i];
    ring_chunk_member(gpu, c, parts[i], u, u, group, set.block(u), cu.back() + d, scratch, before, x);
    auto up = [&](const std::vector<float>& a, size_t w) {
      return std::make_unique<ActBuffer>(upload_act(gpu, share_rows(a, w, x.src, x.lo, x.hi, 0.f)));
    };
    x.q = up(f.q, Q), x.k = up(f.k, K), x.v = up(f.v, K), x.dout = up(f.dout, Q);
    x.o = std::make_unique<ActBuffer>(upload_act(gpu, std::vector<float>(x.q->n)));
    x.op->forward(0, x.q->get(), x.k->get(), x.v->get(), x.o->get());
  }
  for (int i = chunks - 1; i >= 0; --i) {
    Member& x = m[i];
    auto dq = upload_act(gpu, std::vector<float>(x.q->n)), dk = upload_act(gpu, std::vector<float>(x.k->n)),
         dv = upload_act(gpu, std::vector<float>(x.k->n));
    x.op->backward(0, x.dout->get(), x.q->get(), x.k->get(), x.v->get(), x.o->get(), dq.get(), dk.get(),
                   dv.get());
    const std::string what = "d=" + std::to_string(d) + " u=" + std::to_string(u) + " chunk " + std::to_string(i);
    expect_close(download_act(gpu, *x.o), share_rows(f.out, Q, x.src, x.lo, x.hi, 0.f), 1e-4, "out " + what);
    expect_close(download_act(gpu, dq), share_rows(f.dq, Q, x.src, x.lo, x.hi, 0.f), 1e-4, "dq " + what);
    expect_close(download_act(gpu, dk), share_rows(f.dk, K, x.src, x.lo, x.hi, 0.f), 1e-4, "dk " + what);
    expect_close(download_act(gpu, dv), share_rows(f.dv, K, x.src, x.lo, x.hi, 0.f), 1e-4, "dv " + what);
  }
}

TEST_F(GpuMpiRingChunks, EqualsCpuFullAttention) {
  auto gpu = make_cuda_backend(DType::f32);
  BackendComms comms(groups_, grid_, *gpu, CommChoice::staged);
  for (int d = 2; d <= grid_.size; d *= 2)
    for (int u = 1; u < d; u *= 2) {
      const int r = d / u;
      check_case(groups_, *gpu, d, u, 4, 2, {0, 1, 3, 10, 10 + 2 * r - 1, 150, 151, 300});
      check_case(groups_, *gpu, d, u, 1, 3, {0, 2, 9, 200});
    }
}

}  // namespace
}  // namespace flexsp::testing
