// The CPU backend's copy stream: copies between its memory and host buffers queued in
// order and run when a wait (or synchronize) asks for them, so that the activation
// offload (lib/model/offload.h) takes the same path on the CPU as on a GPU -- copies
// queued, compute going on, a wait before the data is used.
//
// Design choice: a copy runs as late as the contract allows, not on a thread beside the
// compute. Nothing overlaps (a CPU rank has no copy engine to gain from), but an order the
// offload gets wrong -- a slot rewritten before its copy to the host, a block read before
// its fetch was waited for -- gives wrong numbers every time, where a thread would race
// and usually win: the tests that compare offload bit for bit catch it deterministically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

namespace flexsp {

class HostCopyQueue {
 public:
  // Queues memcpy(dst, src, bytes); returns its ticket (1, 2, ...).
  uint64_t push(void* dst, const void* src, size_t bytes);
  // Runs every queued copy up to ticket t (UINT64_MAX: all).
  void wait(uint64_t t);

 private:
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  std::mutex mu_;
  std::deque<Copy> queue_;
  uint64_t queued_ = 0, done_ = 0;
};

}  // namespace flexsp
