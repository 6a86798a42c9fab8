// MPI implementation of Comm. Host buffers only. MPI counts are int, so large
// all-reduce and broadcast are cut into chunks; the per-peer collectives check their
// counts instead (a single message over 2^31 elements is not a case flexsp produces).
// Started collectives are MPI's nonblocking ones; with a progress engine (progress.h) the
// engine owns the request until it completes or wait() takes it back. start_send_recv is
// an MPI_Irecv and an MPI_Isend with a tag of its own (kSendRecvTag; collectives never
// match point-to-point messages, and no other point-to-point traffic uses it), each its
// own request watched by the engine; the pair completes when both have.
#include <climits>
#include <exception>
#include <vector>

#include "lib/comm/comm.h"
#include "lib/comm/progress.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::bf16: return MPI_UINT16_T;  // moved as bits; never reduced here
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

void check_reducible(DType t) {
  FLEXSP_CHECK(t != DType::bf16, "MPI communicator cannot reduce bf16 buffers");
}

int as_int(size_t n) {
  FLEXSP_CHECK(n <= static_cast<size_t>(INT_MAX), "message of {} elements exceeds MPI's int count", n);
  return static_cast<int>(n);
}

constexpr size_t kChunk = size_t(1) << 30;  // elements per MPI call in chunked collectives
constexpr int kSendRecvTag = 16019;  // the tag of start_send_recv's messages

class DoneRequest final : public CommRequest {
 public:
  void wait() override {}
  bool done() const override { return true; }
};

// A nonblocking collective: start() hands the MPI request to the engine (if any); wait()
// takes it back unless the engine completed it, and completes it itself.
class MpiRequest final : public CommRequest {
 public:
  explicit MpiRequest(std::shared_ptr<ProgressEngine> engine)
      : engine_(std::move(engine)), t_(std::make_shared<ProgressTicket>()) {}
  ~MpiRequest() override {
    if (std::uncaught_exceptions() == 0) wait();
  }
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;

  MPI_Request* handle() { return &t_->req; }
  // After the MPI_I* call that filled handle().
  void start() {
    if (engine_) engine_->watch(t_);
  }
  void wait() override {
    if (t_->done.load(std::memory_order_acquire)) return;
    if (!engine_ || engine_->reclaim(*t_)) MPI_Wait(&t_->req, MPI_STATUS_IGNORE);
    t_->done.store(true, std::memory_order_release);
  }
  bool done() const override { return t_->done.load(std::memory_order_acquire); }

 private:
  std::shared_ptr<ProgressEngine> engine_;
  std::shared_ptr<ProgressTicket> t_;  // shared with the engine while it watches
};

// Requests that complete together (a send and a receive).
class RequestGroup final : public CommRequest {
 public:
  void add(std::unique_ptr<CommRequest> r) { parts_.push_back(std::move(r)); }
  void wait() override {
    for (auto& r : parts_) r->wait();
  }
  bool done() const override {
    for (const auto& r : parts_)
      if (!r->done()) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<CommRequest>> parts_;
};

class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm c, bool owned, std::shared_ptr<ProgressEngine> progress)
      : comm_(c), owned_(owned), progress_(std::move(progress)) {
    MPI_Comm_rank(c, &rank_);
    MPI_Comm_size(c, &size_);
  }
  ~MpiComm() override {
    if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_; }

  void all_reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    check_reducible(t);
    const size_t es = dtype_size(t);
    for (size_t off = 0; off < count; off += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, count - off));
      char* r = static_cast<char*>(recv) + off * es;
      const void* s = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + off * es;
      MPI_Allreduce(s, r, n, mpi_type(t), mpi_op(op), comm_);
    }
  }

  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType t,
                      ReduceOp op) override {
    check_reducible(t);
    MPI_Reduce_scatter_block(send, recv, as_int(recv_count), mpi_type(t), mpi_op(op), comm_);
  }

  std::unique_ptr<CommRequest> start_all_reduce(const void* send, void* recv, size_t count,
                                                DType t, ReduceOp op) override {
    if (count > static_cast<size_t>(INT_MAX)) return Comm::start_all_reduce(send, recv, count, t, op);
    check_reducible(t);
    auto r = std::make_unique<MpiRequest>(progress_);
    MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                   mpi_type(t), mpi_op(op), comm_, r->handle());
    r->start();
    return r;
  }

  std::unique_ptr<CommRequest> start_reduce_scatter(const void* send, void* recv,
                                                    size_t recv_count, DType t,
                                                    ReduceOp op) override {
    check_reducible(t);
    auto r = std::make_unique<MpiRequest>(progress_);
    MPI_Ireduce_scatter_block(send, recv, as_int(recv_count), mpi_type(t), mpi_op(op), comm_,
                              r->handle());
    r->start();
    return r;
  }

  std::unique_ptr<CommRequest> start_all_gather(const void* send, void* recv, size_t send_count,
                                                DType t) override {
    auto r = std::make_unique<MpiRequest>(progress_);
    MPI_Iallgather(send, as_int(send_count), mpi_type(t), recv, as_int(send_count), mpi_type(t),
                   comm_, r->handle());
    r->start();
    return r;
  }

  void all_gather(const void* send, void* recv, size_t send_count, DType t) override {
    MPI_Allgather(send, as_int(send_count), mpi_type(t), recv, as_int(send_count), mpi_type(t),
                  comm_);
  }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_offsets,
                    void* recv, const size_t* recv_counts, const size_t* recv_offsets,
                    DType t) override {
    std::vector<int> sc(size_), so(size_), rc(size_), ro(size_);
    for (int p = 0; p < size_; ++p) {
      sc[p] = as_int(send_counts[p]);
      so[p] = as_int(send_offsets[p]);
      rc[p] = as_int(recv_counts[p]);
      ro[p] = as_int(recv_offsets[p]);
    }
    MPI_Alltoallv(send, sc.data(), so.data(), mpi_type(t), recv, rc.data(), ro.data(),
                  mpi_type(t), comm_);
  }

  void broadcast(void* buf, size_t count, DType t, int root) override {
    const size_t es = dtype_size(t);
    for (size_t off = 0; off < count; off += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, count - off));
      MPI_Bcast(static_cast<char*>(buf) + off * es, n, mpi_type(t), root, comm_);
    }
  }

  void barrier() override { MPI_Barrier(comm_); }

  std::unique_ptr<CommRequest> start_send_recv(const void* send, size_t send_count, int dest,
                                               void* recv, size_t recv_count, int src,
                                               DType t) override {
    FLEXSP_CHECK(dest >= -1 && dest < size_ && src >= -1 && src < size_,
                 "send_recv: peer {} / {} outside a communicator of {} ranks", dest, src, size_);
    auto group = std::make_unique<RequestGroup>();
    if (src >= 0) {  // the receive first: a message to self finds it posted
      auto r = std::make_unique<MpiRequest>(progress_);
      MPI_Irecv(recv, as_int(recv_count), mpi_type(t), src, kSendRecvTag, comm_, r->handle());
      r->start();
      group->add(std::move(r));
    }
    if (dest >= 0) {
      auto r = std::make_unique<MpiRequest>(progress_);
      MPI_Isend(send, as_int(send_count), mpi_type(t), dest, kSendRecvTag, comm_, r->handle());
      r->start();
      group->add(std::move(r));
    }
    return group;
  }

 private:
  MPI_Comm comm_;
  bool owned_;
  std::shared_ptr<ProgressEngine> progress_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<CommRequest> Comm::start_all_reduce(const void* send, void* recv, size_t count,
                                                    DType t, ReduceOp op) {
  all_reduce(send, recv, count, t, op);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<CommRequest> Comm::start_reduce_scatter(const void* send, void* recv,
                                                        size_t recv_count, DType t,
                                                        ReduceOp op) {
  reduce_scatter(send, recv, recv_count, t, op);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<CommRequest> Comm::start_all_gather(const void* send, void* recv,
                                                    size_t send_count, DType t) {
  all_gather(send, recv, send_count, t);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<CommRequest> done_request() { return std::make_unique<DoneRequest>(); }

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, bool owned,
                                    std::shared_ptr<ProgressEngine> progress) {
  return std::make_unique<MpiComm>(comm, owned, std::move(progress));
}

MPI_Comm mpi_handle(const Comm& c) {
  auto* m = dynamic_cast<const MpiComm*>(&c);
  return m ? m->handle() : MPI_COMM_NULL;
}

}  // namespace flexsp
