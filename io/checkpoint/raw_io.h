// Moving file runs (layout.h) between host buffers and a checkpoint file with POSIX calls.
//
// Stretches of runs that are contiguous in the file go out in one pwritev / preadv (up to
// IOV_MAX pieces and kRawChunk bytes a call, so a stop request is seen between calls):
// large sequential transfers from the caller's buffers, no staging copy, no HDF5 state.
// A failure is one Error naming the file and the reason; nothing is retried but EINTR and
// partial transfers.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "io/checkpoint/layout.h"

namespace flexsp {

constexpr size_t kRawChunk = size_t(64) << 20;  // bytes per system call, at most

// Writes runs (sorted by file offset) from bufs to fd. Throws Error "NAME: cannot write:
// REASON". Returns early, without error, once *stop is set.
void write_runs(int fd, const std::vector<FileRun>& runs, const float* const bufs[kCheckpointGroups],
                const std::string& name, const std::atomic<bool>* stop);

// Reads runs [first, last) (sorted by file offset) from fd into bufs. Throws Error naming
// the file on a read error or a short read (a truncated file).
void read_runs(int fd, const std::vector<FileRun>& runs, size_t first, size_t last,
               float* const bufs[kCheckpointGroups], const std::string& name);

}  // namespace flexsp
