// NCCL implementation of Comm, over device buffers of the CUDA backend.
//
// Design choices:
//  - One communication stream per purpose (Streams; lib/comm/groups.h: gradient
//    reductions, parameter gathers, Ulysses all-to-alls), each with its own communicators
//    split from the world (operations of one ncclComm_t are not issued from several
//    streams), apart from the backend's compute stream. An operation first makes its
//    stream wait for the compute work enqueued so far (event `ready`), runs there, and the
//    compute stream waits for it (event `done`) only when the result is needed: blocking
//    operations at once, started ones (start_*) at wait(). The host never waits: "blocking"
//    in the Comm interface means the result is visible to everything enqueued after the
//    call, which stream order gives. (Reads by the host go through the backend's copies,
//    which synchronize the compute stream, hence every stream's work it waited for.) So a
//    unit's started gradient reduce-scatter runs on the gradient stream while the next
//    unit's parameter gather runs on the gather stream and the backward computes; neither
//    queues behind the other as on one first-in-first-out stream.
//  - Ordering across communicators: started and blocking operations are issued in the same
//    order on every rank (the rule of every Comm), so two streams' kernels wait only for
//    peers that have issued (or will issue, without waiting on anything else) the matching
//    operation. NCCL documents concurrent communicators as safe only while their kernels
//    can be resident together; its kernels use a few blocks each, far below an H100's SMs,
//    and nothing in a step synchronizes the device (stream-ordered allocation, no
//    cudaMalloc) -- the GPU tests run this order (tests/gpu/mpi_comm_nccl.cpp).
//  - all_to_all_v is one NCCL group of ncclSend/ncclRecv, a pair per peer with a non-zero
//    count (self included: NCCL copies it). start_send_recv is one group of at most one
//    send and one receive (zero counts skipped: sender and receiver agree on the count),
//    started like the collectives: on the comm stream, the compute stream waiting at wait().
//  - Communicators are made once (ncclCommInitRank for the first world, ncclCommSplit for
//    the rest, with the colors of groups_create); ranks outside every complete block of a
//    size pass NCCL_SPLIT_NOCOLOR. NCCL connects peers on first use, so the groups a
//    purpose never uses (world and node for all-to-alls) cost no buffers. barrier() is the
//    host twin's (MPI) once the stream is idle.
//  - While an exception unwinds (another rank may be stuck in a collective) the
//    communicators are aborted rather than destroyed, which could wait on peers.
#include "kernels/cuda/comm_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <exception>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/nccl_check.h"

namespace flexsp {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  fail(fmt::format("NCCL communicator: unknown dtype {}", int(t)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  fail(fmt::format("NCCL communicator: unknown reduction {}", int(op)));
}

// The comm stream and the two events that order it against the compute stream.
class Streams {
 public:
  explicit Streams(cudaStream_t compute) : compute_(compute) {
    FLEXSP_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
    FLEXSP_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    FLEXSP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~Streams() {  // no throw; errors were reported by the calls that caused them
    cudaStreamSynchronize(comm_);
    cudaEventDestroy(done_);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(comm_);
  }
  Streams(const Streams&) = delete;
  Streams& operator=(const Streams&) = delete;

  cudaStream_t comm() const { return comm_; }
  cudaStream_t compute() const { return compute_; }
  // Before an operation: the comm stream waits for the compute stream's work so far.
  void begin() {
    FLEXSP_CUDA_CHECK(cudaEventRecord(ready_, compute_));
    FLEXSP_CUDA_CHECK(cudaStreamWaitEvent(comm_, ready_, 0));
  }
  // After it: later compute work waits for it (the host does not).
  void end() {
    FLEXSP_CUDA_CHECK(cudaEventRecord(done_, comm_));
    FLEXSP_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
  }

 private:
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
};

// A started operation: an event on the comm stream after it; wait() makes the compute
// stream wait for that event (the host never waits).
class NcclRequest final : public CommRequest {
 public:
  explicit NcclRequest(const Streams& s) : compute_(s.compute()) {
    FLEXSP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    FLEXSP_CUDA_CHECK(cudaEventRecord(done_, s.comm()));
  }
  ~NcclRequest() override {
    if (std::uncaught_exceptions() == 0 && done_ != nullptr) cudaStreamWaitEvent(compute_, done_, 0);
    if (done_ != nullptr) cudaEventDestroy(done_);
  }
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;
  void wait() override {
    if (done_ == nullptr) return;
    FLEXSP_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
    FLEXSP_CUDA_CHECK(cudaEventDestroy(done_));
    done_ = nullptr;
  }
  // The device has run the operation (a query of its event: no waiting, no progress).
  bool done() const override { return done_ == nullptr || cudaEventQuery(done_) == cudaSuccess; }

 private:
  cudaStream_t compute_;
  cudaEvent_t done_ = nullptr;
};

class NcclComm final : public Comm {
 public:
  NcclComm(ncclComm_t c, std::shared_ptr<Streams> s, Comm& host)
      : comm_(c), s_(std::move(s)), host_(host) {
    FLEXSP_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    FLEXSP_NCCL_CHECK(ncclCommCount(comm_, &size_));
    FLEXSP_CHECK(rank_ == host.rank() && size_ == host.size(),
                 "NCCL communicator: rank {} of {} where MPI has rank {} of {}", rank_, size_,
                 host.rank(), host.size());
  }
  ~NcclComm() override {
    if (std::uncaught_exceptions() > 0)
      ncclCommAbort(comm_);
    else
      ncclCommDestroy(comm_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "nccl"; }

  void all_reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    if (count == 0) return;  // the same count on every rank: all skip
    s_->begin();
    FLEXSP_NCCL_CHECK(
        ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), comm_, s_->comm()));
    s_->end();
  }

  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType t,
                      ReduceOp op) override {
    if (recv_count == 0) return;
    s_->begin();
    FLEXSP_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type(t), nccl_op(op),
                                        comm_, s_->comm()));
    s_->end();
  }

  std::unique_ptr<CommRequest> start_all_reduce(const void* send, void* recv, size_t count,
                                                DType t, ReduceOp op) override {
    if (count == 0) return done_request();
    s_->begin();
    FLEXSP_NCCL_CHECK(
        ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), comm_, s_->comm()));
    return std::make_unique<NcclRequest>(*s_);
  }

  std::unique_ptr<CommRequest> start_reduce_scatter(const void* send, void* recv,
                                                    size_t recv_count, DType t,
                                                    ReduceOp op) override {
    if (recv_count == 0) return done_request();
    s_->begin();
    FLEXSP_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type(t), nccl_op(op),
                                        comm_, s_->comm()));
    return std::make_unique<NcclRequest>(*s_);
  }

  void all_gather(const void* send, void* recv, size_t send_count, DType t) override {
    if (send_count == 0) return;
    s_->begin();
    FLEXSP_NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type(t), comm_, s_->comm()));
    s_->end();
  }

  std::unique_ptr<CommRequest> start_all_gather(const void* send, void* recv, size_t send_count,
                                                DType t) override {
    if (send_count == 0) return done_request();
    s_->begin();
    FLEXSP_NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type(t), comm_, s_->comm()));
    return std::make_unique<NcclRequest>(*s_);
  }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_offsets,
                    void* recv, const size_t* recv_counts, const size_t* recv_offsets,
                    DType t) override {
    const size_t es = dtype_size(t);
    const ncclDataType_t nt = nccl_type(t);
    const char* s = static_cast<const char*>(send);
    char* r = static_cast<char*>(recv);
    s_->begin();
    FLEXSP_NCCL_CHECK(ncclGroupStart());
    for (int p = 0; p < size_; ++p) {
      if (send_counts[p] > 0)
        FLEXSP_NCCL_CHECK(
            ncclSend(s + send_offsets[p] * es, send_counts[p], nt, p, comm_, s_->comm()));
      if (recv_counts[p] > 0)
        FLEXSP_NCCL_CHECK(
            ncclRecv(r + recv_offsets[p] * es, recv_counts[p], nt, p, comm_, s_->comm()));
    }
    FLEXSP_NCCL_CHECK(ncclGroupEnd());
    s_->end();
  }

  void broadcast(void* buf, size_t count, DType t, int root) override {
    if (count == 0) return;
    s_->begin();
    FLEXSP_NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_type(t), root, comm_, s_->comm()));
    s_->end();
  }

  std::unique_ptr<CommRequest> start_send_recv(const void* send, size_t send_count, int dest,
                                               void* recv, size_t recv_count, int src,
                                               DType t) override {
    FLEXSP_CHECK(dest >= -1 && dest < size_ && src >= -1 && src < size_,
                 "send_recv: peer {} / {} outside a communicator of {} ranks", dest, src, size_);
    const bool do_send = dest >= 0 && send_count > 0, do_recv = src >= 0 && recv_count > 0;
    if (!do_send && !do_recv) return done_request();
    const ncclDataType_t nt = nccl_type(t);
    s_->begin();
    FLEXSP_NCCL_CHECK(ncclGroupStart());
    if (do_send) FLEXSP_NCCL_CHECK(ncclSend(send, send_count, nt, dest, comm_, s_->comm()));
    if (do_recv) FLEXSP_NCCL_CHECK(ncclRecv(recv, recv_count, nt, src, comm_, s_->comm()));
    FLEXSP_NCCL_CHECK(ncclGroupEnd());
    return std::make_unique<NcclRequest>(*s_);
  }

  void barrier() override {
    FLEXSP_CUDA_CHECK(cudaStreamSynchronize(s_->comm()));
    host_.barrier();
  }

 private:
  ncclComm_t comm_ = nullptr;
  std::shared_ptr<Streams> s_;
  Comm& host_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

int nccl_version() {
  int v = 0;
  FLEXSP_NCCL_CHECK(ncclGetVersion(&v));
  return v;
}

namespace {

// The groups of `host` over NCCL with `world` as this set's world (owned by the set).
std::unique_ptr<CommSet> split_set(ncclComm_t world, const CommSet& host, const Grid& g,
                                   const std::shared_ptr<Streams>& streams) {
  auto set = std::make_unique<CommSet>();
  auto wrap = [&](ncclComm_t c, Comm& twin) { return std::make_unique<NcclComm>(c, streams, twin); };
  auto split = [&](int color, int key) {
    ncclComm_t c = nullptr;
    FLEXSP_NCCL_CHECK(ncclCommSplit(world, color, key, &c, nullptr));
    return c;
  };
  set->world = wrap(world, *host.world);
  set->node = wrap(split(g.node, g.local_rank), *host.node);
  set->cross_node = wrap(split(g.local_rank, g.node), *host.cross_node);
  for (size_t k = 0; k < host.blocks.size(); ++k) {
    const int d = 1 << k;
    const bool complete = host.blocks[k] != nullptr;  // as groups_create decided
    ncclComm_t c = split(complete ? g.rank / d : NCCL_SPLIT_NOCOLOR, g.rank);
    set->blocks.push_back(complete ? wrap(c, *host.blocks[k]) : nullptr);
  }
  return set;
}

}  // namespace

std::array<std::unique_ptr<CommSet>, kCommPurposes> nccl_comm_sets(const CommSet& host,
                                                                   const Grid& g, Backend& be) {
  auto* cuda = dynamic_cast<CudaBackend*>(&be);
  FLEXSP_CHECK(cuda != nullptr, "parallel.comm: 'nccl' needs the cuda backend, not {}", be.name());
  FLEXSP_CUDA_CHECK(cudaSetDevice(cuda->device()));

  ncclUniqueId id{};
  if (host.world->rank() == 0) FLEXSP_NCCL_CHECK(ncclGetUniqueId(&id));
  host.world->broadcast(&id, sizeof(id), DType::u8, 0);
  ncclComm_t first = nullptr;
  FLEXSP_NCCL_CHECK(ncclCommInitRank(&first, host.world->size(), id, host.world->rank()));

  std::array<std::unique_ptr<CommSet>, kCommPurposes> sets;
  for (size_t p = 0; p < kCommPurposes; ++p) {
    ncclComm_t world = first;
    if (p > 0) FLEXSP_NCCL_CHECK(ncclCommSplit(first, 0, g.rank, &world, nullptr));
    sets[p] = split_set(world, host, g, std::make_shared<Streams>(cuda->stream()));
  }
  return sets;
}

}  // namespace flexsp
