// The CUDA backend's memory pool and upload ring (design in device_memory.h).
#include "kernels/cuda/device_memory.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/cuda_check.h"

namespace flexsp::cuda {

DevicePool::DevicePool(int device, cudaStream_t stream) : device_(device), stream_(stream) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  FLEXSP_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
  uint64_t keep = UINT64_MAX;  // never hand freed memory back on a synchronization
  FLEXSP_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
}

DevicePool::~DevicePool() {
  // No throw. Blocks still live are released with the pool once their frees complete.
  for (auto& [p, bytes] : live_) cudaFreeAsync(p, stream_);
  cudaStreamSynchronize(stream_);
  cudaMemPoolDestroy(pool_);
}

void* DevicePool::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  cudaError_t err = cudaMallocFromPoolAsync(&p, bytes, pool_, stream_);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky; clear it before retrying
    // Free blocks of this pool go back to the driver once the stream's frees are done.
    cudaStreamSynchronize(stream_);
    cudaMemPoolTrimTo(pool_, 0);
    err = cudaMallocFromPoolAsync(&p, bytes, pool_, stream_);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail(fmt::format("out of GPU memory on device {} allocating {} bytes ({} allocated by "
                     "flexsp, {} free of {}): {}",
                     device_, bytes, allocated_bytes(), free_b, total_b,
                     cudaGetErrorString(err)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  live_[p] = bytes;
  current_ += bytes;
  peak_ = std::max(peak_, current_);
  return p;
}

bool DevicePool::deallocate(void* p) {
  if (p == nullptr) return true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    current_ -= it->second;
    live_.erase(it);
  }
  FLEXSP_CUDA_CHECK(cudaFreeAsync(p, stream_));
  return true;
}

size_t DevicePool::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

size_t DevicePool::peak_allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void DevicePool::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = current_;
}

size_t DevicePool::reserved_bytes() const {
  uint64_t v = 0;
  FLEXSP_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &v));
  return static_cast<size_t>(v);
}

size_t DevicePool::reserved_peak_bytes() const {
  uint64_t v = 0;
  FLEXSP_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &v));
  return static_cast<size_t>(v);
}

PinnedRing::PinnedRing(cudaStream_t stream, size_t slot_bytes, int slots)
    : stream_(stream), slot_bytes_(slot_bytes), slots_(static_cast<size_t>(slots)) {
  for (Slot& s : slots_) {
    FLEXSP_CUDA_CHECK(cudaMallocHost(&s.host, slot_bytes_));
    FLEXSP_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
}

PinnedRing::~PinnedRing() {
  cudaStreamSynchronize(stream_);
  for (Slot& s : slots_) {
    if (s.done != nullptr) cudaEventDestroy(s.done);
    if (s.host != nullptr) cudaFreeHost(s.host);
  }
}

void PinnedRing::copy_to_device(void* dst, const void* src, size_t bytes) {
  for (size_t off = 0; off < bytes; off += slot_bytes_) {
    const size_t n = std::min(slot_bytes_, bytes - off);
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    if (s.used) {
      const cudaError_t q = cudaEventQuery(s.done);
      if (q == cudaErrorNotReady) {
        ++waits_;
        FLEXSP_CUDA_CHECK(cudaEventSynchronize(s.done));
      } else {
        FLEXSP_CUDA_CHECK(q);
      }
    }
    std::memcpy(s.host, static_cast<const char*>(src) + off, n);
    FLEXSP_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, s.host, n,
                                      cudaMemcpyHostToDevice, stream_));
    FLEXSP_CUDA_CHECK(cudaEventRecord(s.done, stream_));
    s.used = true;
  }
}

}  // namespace flexsp::cuda
