// The staging Comm (design in comm_staged.h): copy in, the host Comm's operation on host
// buffers, copy out. Only the bytes an operation reads are copied in and only those it
// writes are copied back.
#include "lib/comm/comm_staged.h"

#include <algorithm>
#include <deque>
#include <exception>

#include "lib/util/error.h"

namespace flexsp {

class StagingArea {
 public:
  explicit StagingArea(std::shared_ptr<HostMover> m) : mover_(std::move(m)) {}
  ~StagingArea() {
    mover_->free_host(send_.p);
    mover_->free_host(recv_.p);
    for (Lease& l : leases_) mover_->free_host(l.buf.p);
  }
  StagingArea(const StagingArea&) = delete;
  StagingArea& operator=(const StagingArea&) = delete;

  HostMover& mover() { return *mover_; }
  char* send(size_t bytes) { return grow(send_, bytes); }
  char* recv(size_t bytes) { return grow(recv_, bytes); }
  size_t bytes() const {
    size_t n = send_.cap + recv_.cap;
    for (const Lease& l : leases_) n += l.buf.cap;
    return n;
  }
  size_t allocations() const { return allocations_; }

  // A buffer of at least `bytes` for one started operation, until give_back(). Prefers
  // the smallest free one that fits, else regrows a free one, else adds one.
  char* lease(size_t bytes) {
    Lease* best = nullptr;
    for (Lease& l : leases_)
      if (!l.busy && l.buf.cap >= bytes && (best == nullptr || l.buf.cap < best->buf.cap)) best = &l;
    if (best == nullptr)
      for (Lease& l : leases_)
        if (!l.busy) best = &l;
    if (best == nullptr) best = &leases_.emplace_back();
    best->busy = true;
    return grow(best->buf, std::max<size_t>(bytes, 1));
  }
  void give_back(char* p) {
    for (Lease& l : leases_)
      if (l.buf.p == p) l.busy = false;
  }

 private:
  struct Buf {
    char* p = nullptr;
    size_t cap = 0;
  };
  struct Lease {
    Buf buf;
    bool busy = false;
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
  std::deque<Lease> leases_;  // a deque: leased pointers stay put as it grows
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

// A started operation: the host Comm's request over a leased host buffer whose
// [result, result + bytes) goes back to `dst` at wait().
class StagedRequest final : public CommRequest {
 public:
  StagedRequest(std::shared_ptr<StagingArea> area, char* lease, std::unique_ptr<CommRequest> host,
                void* dst, const char* result, size_t bytes)
      : area_(std::move(area)), lease_(lease), host_(std::move(host)), dst_(dst), result_(result),
        bytes_(bytes) {}
  ~StagedRequest() override {
    // While an exception unwinds the host transfer may still write into the lease: it is
    // never handed out again (a leak on an error path, not a corruption).
    if (std::uncaught_exceptions() == 0) wait();
  }
  StagedRequest(const StagedRequest&) = delete;
  StagedRequest& operator=(const StagedRequest&) = delete;

  void wait() override {
    if (!host_) return;
    host_->wait();
    host_.reset();
    if (bytes_ > 0) area_->mover().from_host(dst_, result_, bytes_);
    area_->give_back(lease_);
  }
  bool done() const override { return !host_ || host_->done(); }

 private:
  std::shared_ptr<StagingArea> area_;
  char* lease_;
  std::unique_ptr<CommRequest> host_;
  void* dst_;
  const char* result_;
  size_t bytes_;
};

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

  // Started: input copied into one lease (send part, then receive part), the host's
  // nonblocking collective on it, the result copied back at wait().
  std::unique_ptr<CommRequest> start_all_reduce(const void* send, void* recv, size_t count,
                                                DType t, ReduceOp op) override {
    const size_t n = count * dtype_size(t);
    const bool in_place = send == recv;  // stays in place, as the host Comm would see it
    char* h = area_->lease(in_place ? n : 2 * n);
    char* r = in_place ? h : h + n;
    in(h, send, n);
    auto req = host_.start_all_reduce(h, r, count, t, op);
    return std::make_unique<StagedRequest>(area_, h, std::move(req), recv, r, n);
  }

  std::unique_ptr<CommRequest> start_reduce_scatter(const void* send, void* recv,
                                                    size_t recv_count, DType t,
                                                    ReduceOp op) override {
    const size_t n = recv_count * dtype_size(t), all = n * static_cast<size_t>(size());
    char* h = area_->lease(all + n);
    in(h, send, all);
    auto req = host_.start_reduce_scatter(h, h + all, recv_count, t, op);
    return std::make_unique<StagedRequest>(area_, h, std::move(req), recv, h + all, n);
  }

  std::unique_ptr<CommRequest> start_all_gather(const void* send, void* recv, size_t send_count,
                                                DType t) override {
    const size_t n = send_count * dtype_size(t), all = n * static_cast<size_t>(size());
    char* h = area_->lease(n + all);
    in(h, send, n);
    auto req = host_.start_all_gather(h, h + n, send_count, t);
    return std::make_unique<StagedRequest>(area_, h, std::move(req), recv, h + n, all);
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

  // Started: the send part copied into a lease (then room for the receive), the host's
  // send/recv on it, the received part copied back at wait().
  std::unique_ptr<CommRequest> start_send_recv(const void* send, size_t send_count, int dest,
                                               void* recv, size_t recv_count, int src,
                                               DType t) override {
    const size_t es = dtype_size(t);
    const size_t sn = dest >= 0 ? send_count * es : 0, rn = src >= 0 ? recv_count * es : 0;
    char* h = area_->lease(sn + rn);
    in(h, send, sn);
    auto req = host_.start_send_recv(h, send_count, dest, h + sn, recv_count, src, t);
    return std::make_unique<StagedRequest>(area_, h, std::move(req), recv, h + sn, rn);
  }

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
