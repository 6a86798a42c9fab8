// Communicators. A small C-style interface over collective operations, with one
// implementation per transport: MPI (host buffers), MPI staged through host copies
// (comm_staged.h) and NCCL (kernels/cuda/comm_nccl.h) for buffers in device memory.
// Counts are in elements of the given DType; buffers are owned by the caller.
// Every operation is collective over the communicator and blocking: on return its result
// is visible to whatever the caller does next (with device buffers: to work enqueued on
// the backend's stream afterwards; the host itself may not have waited).
// all_reduce, reduce_scatter and all_gather also come started (start_*): they return a
// CommRequest at once and run beside the caller's compute (MPI: a nonblocking collective
// that the set's progress engine advances, lib/comm/progress.h; staged MPI: the same on
// host copies; NCCL: queued on the communicator's stream). The ordering rule of every
// collective holds for them too: started and blocking collectives are issued in the same
// order on every rank of a communicator.
// Point-to-point (start_send_recv / send_recv): one rank sends to one and receives from
// one (ring shifts of ring attention, activations between pipeline stages); either side
// may be left out. Not collective: only the ranks named take part, and each send must be
// matched by the receiver's receive of the same count and type. Between one pair of ranks
// on one communicator, messages are matched in the order they were started (MPI: one tag
// reserved for them; NCCL: grouped send/recv on the comm stream, in issue order).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "lib/util/dtype.h"

namespace flexsp {

enum class ReduceOp : int { sum, max, min };

// A collective started by a start_* call. wait() completes it: afterwards its result is
// visible as after the blocking call (device buffers: to work enqueued on the backend's
// stream afterwards). Until then the caller leaves the buffers alone. Destroying a request
// that was not waited for waits (except while an exception unwinds).
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  // True once the transfer has completed as far as can be seen without progressing it
  // (no MPI call: it reads what the progress engine, or the device, has recorded). wait()
  // is still needed to make the result visible (staged: the copy back). A request that no
  // engine or device advances reports false until wait().
  virtual bool done() const = 0;
};

class ProgressEngine;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* kind() const = 0;  // "mpi", "mpi-staged", "nccl"

  // recv = reduce over ranks of send; in place when send == recv.
  virtual void all_reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) = 0;
  // send holds size() blocks of recv_count elements; rank r receives reduced block r.
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DType t,
                              ReduceOp op) = 0;
  // all_reduce and reduce_scatter, started: returns while it runs where the transport
  // allows (MPI: a nonblocking collective; NCCL: queued on the comm stream, the compute
  // stream not made to wait until wait()); by default it runs to completion here.
  virtual std::unique_ptr<CommRequest> start_all_reduce(const void* send, void* recv,
                                                        size_t count, DType t, ReduceOp op);
  virtual std::unique_ptr<CommRequest> start_reduce_scatter(const void* send, void* recv,
                                                            size_t recv_count, DType t,
                                                            ReduceOp op);
  // recv holds size() blocks of send_count elements, block r from rank r.
  virtual void all_gather(const void* send, void* recv, size_t send_count, DType t) = 0;
  // all_gather, started (ZeRO-3's prefetch of the next unit's parameters).
  virtual std::unique_ptr<CommRequest> start_all_gather(const void* send, void* recv,
                                                        size_t send_count, DType t);
  // Per-peer counts and offsets (elements), as MPI_Alltoallv.
  virtual void all_to_all_v(const void* send, const size_t* send_counts,
                            const size_t* send_offsets, void* recv, const size_t* recv_counts,
                            const size_t* recv_offsets, DType t) = 0;
  virtual void broadcast(void* buf, size_t count, DType t, int root) = 0;
  // Sends send_count elements to rank dest and receives recv_count from rank src (either
  // side may be skipped with dest/src = -1); returns a request as the other start_ calls.
  // The receive buffer must not overlap the send buffer. dest == src == rank() copies.
  virtual std::unique_ptr<CommRequest> start_send_recv(const void* send, size_t send_count,
                                                       int dest, void* recv,
                                                       size_t recv_count, int src,
                                                       DType t) = 0;
  // The same, blocking (start + wait).
  void send_recv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count,
                 int src, DType t) {
    start_send_recv(send, send_count, dest, recv, recv_count, src, t)->wait();
  }
  virtual void barrier() = 0;
};

// Wraps an MPI communicator. With owned=true the Comm frees it on destruction. Its started
// collectives are advanced by `progress` while they run (null: only inside MPI calls and
// wait()).
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, bool owned,
                                    std::shared_ptr<ProgressEngine> progress = nullptr);

// A request that is complete when made: what transports without a started form return.
std::unique_ptr<CommRequest> done_request();

// The MPI communicator behind an MPI Comm (nullptr-equivalent MPI_COMM_NULL otherwise).
MPI_Comm mpi_handle(const Comm& c);

}  // namespace flexsp
