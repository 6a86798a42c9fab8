// Where a rank's share of the training state lies in a checkpoint file.
//
// A checkpoint stores each tensor as a contiguous float32 dataset of its full logical
// shape (checkpoint.h). A rank holds its state as ranges of the flat parameter layout
// (ShardRanges, lib/model/params.h), concatenated in host buffers; a tensor-parallel
// rank's views are blocks of the full tensors. This module maps one onto the other:
// pieces (a tensor's flat elements a rank holds, and where they sit in its buffer) and
// runs (elements that lie back to back both in a buffer and in the file), which the
// writer and the loader move with plain pwritev / preadv, without HDF5 in the way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/model/params.h"

namespace flexsp {

// The groups of a checkpoint in file order; group k's datasets hold buffer k of a
// CheckpointShard (parameters, first moments, second moments).
constexpr int kCheckpointGroups = 3;
extern const char* const kCheckpointGroupNames[kCheckpointGroups];

// A piece of one tensor: flat elements [begin, end) at element `at` of a buffer.
struct Piece {
  int64_t begin = 0, end = 0, at = 0;
};

// The pieces of flat [tb, te) in s's ranges (cover: only this rank's share of each range,
// the part it writes and checksums; else all it holds).
std::vector<Piece> pieces_of(const ShardRanges& s, bool cover, int64_t tb, int64_t te);

// The end of v's elements that the file holds: not the vocabulary padding rows past the
// tensor's end (they come last in the block).
int64_t valid_end(const ParamView& v);

// n float32 elements at byte `file` of the file and element `at` of buffer `buf`.
struct FileRun {
  uint64_t file = 0;
  int64_t at = 0, n = 0;
  int buf = 0;
};

// A byte offset that marks a dataset the runs skip (read through HDF5 instead).
constexpr uint64_t kNoOffset = ~0ull;

// Which of buffer k's elements the runs take: kRunWritten, this rank's share of its
// ranges (only copy 0 of a tensor that tp ranks replicate: what a write covers);
// kRunHeld, all it holds (a read); kRunShare, its share of every tensor (a read whose
// replicas exchange the rest).
enum RunPart { kRunWritten, kRunHeld, kRunShare };

// The runs of every tensor's pieces, sorted by file offset, neighbours merged.
// offsets[k * t.views.size() + i]: the byte offset of view i's dataset in group k.
// shards[k]: the ranges buffer k holds; parts[k]: which of them.
std::vector<FileRun> file_runs(const ParamTable& t, const std::vector<uint64_t>& offsets,
                               const ShardRanges* const shards[kCheckpointGroups],
                               const RunPart parts[kCheckpointGroups]);

// The same part of every buffer: a write's share (cover) or all this rank holds.
std::vector<FileRun> file_runs(const ParamTable& t, const std::vector<uint64_t>& offsets,
                               const ShardRanges* const shards[kCheckpointGroups], bool cover);

// Bytes the runs cover.
uint64_t run_bytes(const std::vector<FileRun>& runs);

}  // namespace flexsp
