// The CUDA backend's copy stream (copy_stream.h).
#include "kernels/cuda/copy_stream.h"

#include "kernels/cuda/cuda_check.h"

namespace flexsp::cuda {

CopyStream::CopyStream(cudaStream_t compute) : compute_(compute) {
  FLEXSP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FLEXSP_CUDA_CHECK(cudaEventCreateWithFlags(&order_, cudaEventDisableTiming));
  for (cudaEvent_t& e : events_) FLEXSP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

CopyStream::~CopyStream() {
  // No throwing from a destructor (see ~CudaBackend).
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : events_)
    if (e != nullptr) cudaEventDestroy(e);
  if (order_ != nullptr) cudaEventDestroy(order_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

uint64_t CopyStream::copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const uint64_t t = ++issued_;
  FLEXSP_CUDA_CHECK(cudaEventRecord(order_, compute_));
  FLEXSP_CUDA_CHECK(cudaStreamWaitEvent(stream_, order_, 0));
  if (bytes > 0) FLEXSP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream_));
  FLEXSP_CUDA_CHECK(cudaEventRecord(events_[t % kEvents], stream_));
  return t;
}

void CopyStream::wait(uint64_t ticket) {
  if (ticket == 0 || ticket > issued_) return;
  FLEXSP_CUDA_CHECK(cudaStreamWaitEvent(compute_, events_[ticket % kEvents], 0));
}

void CopyStream::synchronize() { FLEXSP_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace flexsp::cuda
