// Moving file runs (layout.h) between host buffers and a checkpoint file with POSIX calls.
//
// Stretches of runs that are contiguous in the file go out in one pwritev / preadv (up to
// IOV_MAX pieces and kRawChunk bytes a call, so a stop request is seen between calls):
// large sequential transfers from the caller's buffers, no staging copy, no HDF5 state.
// A failure is one Error naming the file and the reason; nothing is retried but EINTR and
// partial transfers.
//
// Writes can bypass the page cache (O_DIRECT): on the disks checkpoints go to, buffered
// writes of a file the size of the training state run at a fraction of the device's speed
// (the page cache fills, then writeback throttles the writer: bench/results). Direct I/O
// needs aligned offsets, lengths and memory, which a rank's share is not in general (ZeRO
// shards start mid-tensor), so the bytes pass through an aligned staging buffer (a copy at
// memory speed, overlapped with the previous block's write); each stretch's unaligned
// head and tail go through the ordinary descriptor. File systems without O_DIRECT
// (tmpfs) take the buffered path.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "io/checkpoint/layout.h"

namespace flexsp {

constexpr size_t kRawChunk = size_t(64) << 20;  // bytes per system call, at most

// Writes runs (sorted by file offset) from bufs to fd. Throws Error "NAME: cannot write:
// REASON". Returns early, without error, once *stop is set.
void write_runs(int fd, const std::vector<FileRun>& runs, const float* const bufs[kCheckpointGroups],
                const std::string& name, const std::atomic<bool>* stop);

// The same through direct_fd (the file opened with O_DIRECT) for every aligned block, and
// fd (the same file, buffered) for the rest.
void write_runs_direct(int direct_fd, int fd, const std::vector<FileRun>& runs,
                       const float* const bufs[kCheckpointGroups], const std::string& name,
                       const std::atomic<bool>* stop);

// The file opened for writing with O_DIRECT, or -1 where the file system refuses it.
int open_direct_for_write(const std::string& path);

// Reads runs [first, last) (sorted by file offset) from fd into bufs. Throws Error naming
// the file on a read error or a short read (a truncated file).
void read_runs(int fd, const std::vector<FileRun>& runs, size_t first, size_t last,
               float* const bufs[kCheckpointGroups], const std::string& name);

// The file opened for reading with O_DIRECT, or -1 where the file system refuses it.
int open_direct_for_read(const std::string& path);

// Reads runs (sorted by file offset) from direct_fd (opened with O_DIRECT) into bufs:
// aligned blocks of up to kStageBytes, gaps between runs of up to a few MiB read through
// rather than split. After each block, progress(b): every run's bytes below file byte b
// are in place. Throws Error naming the file on a read error or a short read (a truncated
// file).
void read_runs_direct(int direct_fd, const std::vector<FileRun>& runs, float* const bufs[kCheckpointGroups],
                      const std::string& name, const std::function<void(uint64_t)>& progress);

}  // namespace flexsp
