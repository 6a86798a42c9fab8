// The CUDA backend's copy stream (Backend::copy_to_host_async / copy_from_host_async /
// wait_copies): a second stream on which the activation offload's copies run beside the
// compute stream, over page-locked host memory (alloc_host), so they use the copy engines
// while kernels run.
//
// Design: a copy first makes the copy stream wait for an event recorded on the compute
// stream (it starts after the work issued before it), then records an event of the ring
// below after it: ticket t's event is events_[t % kEvents]. wait(t) makes the compute
// stream wait for that event (cudaStreamWaitEvent: no host synchronization). When the
// event has since been recorded again for a later ticket the compute stream waits for the
// later copy, which finished after t's on the same in-order stream: safe, only later.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace flexsp::cuda {

class CopyStream {
 public:
  explicit CopyStream(cudaStream_t compute);
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  uint64_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
  void wait(uint64_t ticket);
  void synchronize();

 private:
  static constexpr size_t kEvents = 64;
  cudaStream_t compute_ = nullptr, stream_ = nullptr;
  cudaEvent_t order_ = nullptr;  // the compute stream's work before a copy
  std::array<cudaEvent_t, kEvents> events_{};
  uint64_t issued_ = 0;
};

}  // namespace flexsp::cuda
