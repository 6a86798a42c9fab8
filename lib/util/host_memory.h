// The host memory a process can still allocate without swapping: Linux's MemAvailable
// (free memory plus the page cache and slabs the kernel can reclaim).
#pragma once

#include <cstdint>

namespace flexsp {

// Bytes available for new allocations on this node; 0 when unknown.
uint64_t host_memory_available();

}  // namespace flexsp
