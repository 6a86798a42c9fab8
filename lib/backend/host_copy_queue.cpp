// The CPU backend's copy stream (host_copy_queue.h).
#include "lib/backend/host_copy_queue.h"

#include <cstring>

namespace flexsp {

uint64_t HostCopyQueue::push(void* dst, const void* src, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back({dst, src, bytes});
  return ++queued_;
}

void HostCopyQueue::wait(uint64_t t) {
  std::lock_guard<std::mutex> lock(mu_);
  while (done_ < t && !queue_.empty()) {
    const Copy c = queue_.front();
    queue_.pop_front();
    if (c.bytes > 0) std::memcpy(c.dst, c.src, c.bytes);
    ++done_;
  }
}

}  // namespace flexsp
