// Communicators over memory that MPI cannot read directly (a GPU's, under an MPI that is
// not CUDA-aware, such as Debian's Open MPI): a Comm decorator that copies each buffer
// to host memory, runs the host Comm's operation there and copies the result back.
//
// Design choices:
//  - The decorator knows nothing of CUDA: a HostMover supplies the copies and the host
//    buffers (lib/platform/backend_comms.cpp adapts any Backend: copy_to_host /
//    copy_from_host and its page-locked alloc_host). So it builds and is tested on CPU.
//  - The staged Comm does not own the host Comm it forwards to; it takes the same MPI
//    calls in the same order, so its results are bit-identical to the host Comm's.
//  - Host buffers are grow-only and shared by every staged Comm of a set (StagingArea):
//    blocking operations come from one thread, so one send and one receive buffer serve
//    all groups, and a steady state allocates nothing.
//  - Started operations (start_all_reduce / start_reduce_scatter / start_all_gather) copy
//    their input to a host buffer leased from the area for the operation's lifetime, start
//    the host Comm's nonblocking collective there (advanced by its progress engine while
//    the caller computes) and copy the result back in wait(); start_send_recv likewise
//    (the send part in, the received part back). Leases come from a free list
//    of grow-only buffers, so a steady state allocates nothing either.
//  - all_to_all_v copies only the bytes its blocks cover (adjacent blocks merged into one
//    copy), and writes back nothing outside the receive blocks.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "lib/comm/comm.h"

namespace flexsp {

// What staging needs from the owner of the memory.
class HostMover {
 public:
  virtual ~HostMover() = default;
  virtual void to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void from_host(void* dst, const void* host_src, size_t bytes) = 0;
  // Host buffers these copies are fastest with (page-locked for a GPU); free_host(nullptr)
  // is a no-op.
  virtual void* alloc_host(size_t bytes) = 0;
  virtual void free_host(void* p) = 0;
};

// The mover and the grow-only host buffers shared by the staged Comms of one set.
class StagingArea;
std::shared_ptr<StagingArea> make_staging_area(std::shared_ptr<HostMover> mover);
// Host bytes the area holds (all buffers), and how many times it allocated them.
size_t staging_area_bytes(const StagingArea& a);
size_t staging_area_allocations(const StagingArea& a);

// The groups and ranks of `host`, over buffers in the area's memory. host must outlive it.
std::unique_ptr<Comm> make_staged_comm(Comm& host, std::shared_ptr<StagingArea> area);

// A byte range [offset, offset + bytes) of a buffer.
struct ByteRun {
  size_t offset = 0, bytes = 0;
  bool operator==(const ByteRun&) const = default;
};

// The ranges that n per-peer blocks (counts and offsets in elements of elem_bytes) cover:
// ascending, blocks that touch or overlap merged, empty blocks left out. Into `out`
// (cleared first; its capacity is reused).
void block_runs(const size_t* counts, const size_t* offsets, int n, size_t elem_bytes,
                std::vector<ByteRun>& out);

}  // namespace flexsp
