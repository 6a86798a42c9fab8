// Communicators. A small C-style interface over collective operations, with one
// implementation per transport: MPI (host buffers), MPI staged through host copies
// (comm_staged.h) and NCCL (kernels/cuda/comm_nccl.h) for buffers in device memory.
// Counts are in elements of the given DType; buffers are owned by the caller.
// Every operation is collective over the communicator and blocking: on return its result
// is visible to whatever the caller does next (with device buffers: to work enqueued on
// the backend's stream afterwards; the host itself may not have waited).
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
};

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
  // all_reduce and reduce_scatter, started: returns while it runs where the transport allows (MPI: a
  // nonblocking collective; NCCL: queued on the comm stream, the compute stream not made
  // to wait until wait()); by default it runs to completion here. Started and blocking
  // collectives go in the same order on every rank, like any collective.
  virtual std::unique_ptr<CommRequest> start_all_reduce(const void* send, void* recv,
                                                        size_t count, DType t, ReduceOp op);
  virtual std::unique_ptr<CommRequest> start_reduce_scatter(const void* send, void* recv,
                                                            size_t recv_count, DType t,
                                                            ReduceOp op);
  // recv holds size() blocks of send_count elements, block r from rank r.
  virtual void all_gather(const void* send, void* recv, size_t send_count, DType t) = 0;
  // Per-peer counts and offsets (elements), as MPI_Alltoallv.
  virtual void all_to_all_v(const void* send, const size_t* send_counts,
                            const size_t* send_offsets, void* recv, const size_t* recv_counts,
                            const size_t* recv_offsets, DType t) = 0;
  virtual void broadcast(void* buf, size_t count, DType t, int root) = 0;
  virtual void barrier() = 0;
};

// Wraps an MPI communicator. With owned=true the Comm frees it on destruction.
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, bool owned);

// The MPI communicator behind an MPI Comm (nullptr-equivalent MPI_COMM_NULL otherwise).
MPI_Comm mpi_handle(const Comm& c);

}  // namespace flexsp
