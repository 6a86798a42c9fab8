// Device memory and host-to-device copies of the CUDA backend, both stream-ordered so
// that nothing on a training step's path makes the host wait for the device.
//
// DevicePool: CUDA's stream-ordered allocator (cudaMallocFromPoolAsync / cudaFreeAsync)
// over a pool of the backend's own, instead of a hand-written caching allocator (the
// choice and its reasons: docs/cuda-memory.md).
//  - The pool's release threshold is UINT64_MAX: memory freed into it stays reserved for
//    the process, so once a step has run, the next identical step maps nothing new (the
//    GPU tests check ReservedMemCurrent / ReservedMemHigh across warm steps).
//  - One pool per backend, not the device's default pool: its statistics are the
//    backend's alone (several backends in one test process, NCCL's buffers elsewhere).
//  - Allocation and free are enqueued on the compute stream: a block freed after work was
//    enqueued is reused only by work after it, with no synchronization (cudaMalloc and
//    cudaFree may synchronize the device, which also stalls communication kernels).
//  - allocated_bytes / peak_allocated_bytes count the bytes asked for (a thin counter,
//    what the model holds, as the CPU backend counts); reserved_bytes is the pool's.
//  - Out of memory: the pool trims its free blocks back to the driver after the stream
//    drains and tries once more (other pools, NCCL, may need what this one keeps), then
//    fails with a message that names the device and the bytes.
//
// PinnedRing: copy_from_host's staging. cudaMemcpyAsync from pageable host memory may
// return only after the copy, and the old copy_from_host synchronized the stream so that
// the caller could reuse its buffer. Instead the bytes are copied into one slot of a ring
// of page-locked buffers, the slot's DMA is enqueued with an event after it, and the call
// returns: the caller's buffer is free at once and the device copy runs in stream order.
// A slot is reused only after its event completed; waiting for it happens only when the
// host runs a whole ring of uploads ahead of the device (counted: waits()). Large copies
// go through the slots in turn.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace flexsp::cuda {

class DevicePool {
 public:
  DevicePool(int device, cudaStream_t stream);
  ~DevicePool();  // the stream must be idle (the backend synchronizes it first)
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // A block of `bytes` (nullptr for 0), usable by work enqueued on the stream from now
  // on. Contents undefined. Throws Error when the device is out of memory.
  void* allocate(size_t bytes);
  // Returns p to the pool after the work enqueued so far; false when p is not live.
  bool deallocate(void* p);

  size_t allocated_bytes() const;
  size_t peak_allocated_bytes() const;
  void reset_peak();  // the peak restarts from what is allocated now
  size_t reserved_bytes() const;       // device memory the pool holds now
  size_t reserved_peak_bytes() const;  // and at most, since construction

 private:
  int device_;
  cudaStream_t stream_;
  cudaMemPool_t pool_ = nullptr;
  mutable std::mutex mu_;  // single-threaded use is the contract; this keeps misuse safe
  std::unordered_map<void*, size_t> live_;
  size_t current_ = 0, peak_ = 0;
};

class PinnedRing {
 public:
  PinnedRing(cudaStream_t stream, size_t slot_bytes = size_t(2) << 20, int slots = 8);
  ~PinnedRing();  // the stream must be idle
  PinnedRing(const PinnedRing&) = delete;
  PinnedRing& operator=(const PinnedRing&) = delete;

  // dst (device) = src (host, any memory; the caller may reuse it on return), in stream
  // order.
  void copy_to_device(void* dst, const void* src, size_t bytes);
  size_t waits() const { return waits_; }  // slots still in flight when needed again

 private:
  struct Slot {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
    bool used = false;
  };
  cudaStream_t stream_;
  size_t slot_bytes_;
  std::vector<Slot> slots_;
  size_t next_ = 0, waits_ = 0;
};

}  // namespace flexsp::cuda
