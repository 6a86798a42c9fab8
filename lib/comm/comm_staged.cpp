// The staging Comm (design in comm_staged.h): copy in, the host Comm's operation on host
// buffers, copy out. Only the bytes an operation reads are copied in and only those it
// writes are copied back.
#include "lib/comm/comm_staged.h"

#include <algorithm>

#include "lib/util/error.h"

namespace flexsp {

class StagingArea {
 public:
  explicit StagingArea(std::shared_ptr<HostMover> m) : mover_(std::move(m)) {}
  ~StagingArea() {
    mover_->free_host(send_.p);
    mover_->free_host(recv_.p);
  }
  StagingArea(const StagingArea&) = delete;
  StagingArea& operator=(const StagingArea&) = delete;

  HostMover& mover() { return *mover_; }
  char* send(size_t bytes) { return grow(send_, bytes); }
  char* recv(size_t bytes) { return grow(recv_, bytes); }
  size_t bytes() const { return send_.cap + recv_.cap; }
  size_t allocations() const { return allocations_; }

 private:
  struct Buf {
    char* p = nullptr;
    size_t cap = 0;
  };
  // Grows by at least half, so that slowly rising sizes settle after a few calls.
  char* grow(Buf& b, size_t n) {
    if (n <= b.cap) return b.p;
    const size_t cap = std::max(n, b.cap + b.cap / 2);
    mover_->free_host(b.p);
    b = Buf{};
    b.p = static_cast<char*>(mover_->alloc_host(cap));
    FLEXSP_CHECK(b.p != nullptr, "cannot allocate {} bytes of host staging memory", cap);
    b.cap = cap;
    ++allocations_;
    return b.p;
  }

  std::shared_ptr<HostMover> mover_;
  Buf send_, recv_;
  size_t allocations_ = 0;
};

std::shared_ptr<StagingArea> make_staging_area(std::shared_ptr<HostMover> mover) {
  return std::make_shared<StagingArea>(std::move(mover));
}
size_t staging_area_bytes(const StagingArea& a) { return a.bytes(); }
size_t staging_area_allocations(const StagingArea& a) { return a.allocations(); }

void block_runs(const size_t* counts, const size_t* offsets, int n, size_t elem_bytes,
                std::vector<ByteRun>& out) {
  out.clear();
  for (int p = 0; p < n; ++p)
    if (counts[p] > 0) out.push_back({offsets[p] * elem_bytes, counts[p] * elem_bytes});
  std::sort(out.begin(), out.end(),
            [](const ByteRun& a, const ByteRun& b) { return a.offset < b.offset; });
  size_t k = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (k > 0 && out[i].offset <= out[k - 1].offset + out[k - 1].bytes) {
      ByteRun& last = out[k - 1];
      last.bytes = std::max(last.offset + last.bytes, out[i].offset + out[i].bytes) - last.offset;
    } else {
      out[k++] = out[i];
    }
  }
  out.resize(k);
}

namespace {

size_t extent(const std::vector<ByteRun>& runs) {
  return runs.empty() ? 0 : runs.back().offset + runs.back().bytes;
}

class StagedComm final : public Comm {
 public:
  StagedComm(Comm& host, std::shared_ptr<StagingArea> area)
      : host_(host), area_(std::move(area)), m_(area_->mover()) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  const char* kind() const override { return "mpi-staged"; }

  void all_reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    const size_t n = count * dtype_size(t);
    if (send == recv) {  // in place stays in place, as the host Comm would see it
      char* h = area_->recv(n);
      in(h, recv, n);
      host_.all_reduce(h, h, count, t, op);
      out(recv, h, n);
      return;
    }
    char* hs = area_->send(n);
    char* hr = area_->recv(n);
    in(hs, send, n);
    host_.all_reduce(hs, hr, count, t, op);
    out(recv, hr, n);
  }

  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType t,
                      ReduceOp op) override {
    const size_t n = recv_count * dtype_size(t);
    char* hs = area_->send(n * static_cast<size_t>(size()));
    char* hr = area_->recv(n);
    in(hs, send, n * static_cast<size_t>(size()));
    host_.reduce_scatter(hs, hr, recv_count, t, op);
    out(recv, hr, n);
  }

  void all_gather(const void* send, void* recv, size_t send_count, DType t) override {
    const size_t n = send_count * dtype_size(t);
    char* hs = area_->send(n);
    char* hr = area_->recv(n * static_cast<size_t>(size()));
    in(hs, send, n);
    host_.all_gather(hs, hr, send_count, t);
    out(recv, hr, n * static_cast<size_t>(size()));
  }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_offsets,
                    void* recv, const size_t* recv_counts, const size_t* recv_offsets,
                    DType t) override {
    const size_t es = dtype_size(t);
    block_runs(send_counts, send_offsets, size(), es, send_runs_);
    block_runs(recv_counts, recv_offsets, size(), es, recv_runs_);
    // Host buffers mirror the caller's layout (same offsets), so the counts and offsets
    // pass through unchanged.
    char* hs = area_->send(extent(send_runs_));
    char* hr = area_->recv(extent(recv_runs_));
    for (const ByteRun& r : send_runs_) in(hs + r.offset, static_cast<const char*>(send) + r.offset, r.bytes);
    host_.all_to_all_v(hs, send_counts, send_offsets, hr, recv_counts, recv_offsets, t);
    for (const ByteRun& r : recv_runs_) out(static_cast<char*>(recv) + r.offset, hr + r.offset, r.bytes);
  }

  void broadcast(void* buf, size_t count, DType t, int root) override {
    const size_t n = count * dtype_size(t);
    char* h = area_->recv(n);
    if (rank() == root) in(h, buf, n);
    host_.broadcast(h, count, t, root);
    if (rank() != root) out(buf, h, n);
  }

  void barrier() override { host_.barrier(); }

 private:
  void in(void* host_dst, const void* src, size_t n) {
    if (n > 0) m_.to_host(host_dst, src, n);
  }
  void out(void* dst, const void* host_src, size_t n) {
    if (n > 0) m_.from_host(dst, host_src, n);
  }

  Comm& host_;
  std::shared_ptr<StagingArea> area_;
  HostMover& m_;
  std::vector<ByteRun> send_runs_, recv_runs_;  // reused: no allocation once warm
};

}  // namespace

std::unique_ptr<Comm> make_staged_comm(Comm& host, std::shared_ptr<StagingArea> area) {
  FLEXSP_ASSERT(area != nullptr);
  return std::make_unique<StagedComm>(host, std::move(area));
}

}  // namespace flexsp
