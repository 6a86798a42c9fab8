// The HDF5 side of a checkpoint file (the layout: checkpoint.h): its structure and
// attributes, written by one process; the tensors' bytes go in and out around HDF5
// (raw_io.h) at the byte offsets this module reports.
//
// A save creates the whole structure first -- groups, the model config, the root
// attributes, every dataset contiguous float32 little-endian with its space allocated and
// never filled, its checksum attribute a placeholder -- and closes the file before any
// tensor byte is written. Writing the tensors then involves no HDF5 state on any rank: a
// write that fails (a full disk) is an ordinary POSIX error, and the file is simply
// removed, where a parallel HDF5 file would have to be closed collectively by ranks whose
// metadata flushes diverge. HDF5's own writes of the structure go through the latching
// driver (io/hdf5/latch_driver.h): one that fails is reported after the close, as
// "PATH: cannot write: REASON", and the file removed. The checksums, known once
// every rank has hashed its share, replace the placeholders in place. Large datasets
// start on 4 KiB boundaries (whole pages for the page cache).
//
// Reading takes the offsets of datasets stored that way and falls back to HDF5 reads for
// any other layout (chunked, filtered, another float type: files written by other tools).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint.h"
#include "io/checkpoint/layout.h"
#include "io/hdf5/h5.h"

namespace flexsp {

// Creates file `tmp` with everything of a checkpoint of t but the tensors' bytes and the
// checksums, its blocks allocated up to `reserve` bytes (at least the whole file); closes
// it; returns each dataset's byte offset, offsets[k * n + i] for view i of group k
// (layout.h). Errors name `path` (the checkpoint's final name). One process.
std::vector<uint64_t> create_checkpoint_file(const std::string& tmp, const std::string& path,
                                             const ModelConfig& c, const ParamTable& t,
                                             const CheckpointMeta& meta, uint64_t reserve);

// Writes every dataset's checksum (sums in the order of the offsets) into the file
// create_checkpoint_file made, once its bytes are in, and fsyncs it. The attribute was
// created with a unique 16-character placeholder; its value lies verbatim in HDF5's
// global heap (a variable-length string: no length change, no HDF5 checksum over it), so
// it is found in the bytes outside the datasets and overwritten in place with plain
// POSIX calls: no HDF5 state, so this can run off the caller's thread. A placeholder
// found other than exactly once is an Error (nothing is guessed). One process.
void fill_checksums(const std::string& tmp, const std::string& path, const ParamTable& t,
                    const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& sums);

// A tensor of a checkpoint being read.
struct StoredTensor {
  h5::Id ds;
  uint64_t checksum = 0;        // the stored checksum
  uint64_t offset = kNoOffset;  // where its bytes start when they can be read raw
};

// Opens /<full> (full: "group/name") of file f, checks it has v's full shape and a float
// type and a valid checksum attribute; errors name `path` and the tensor.
StoredTensor open_stored_tensor(hid_t f, const std::string& path, const std::string& full,
                                const ParamView& v);

// The data cursor as the root attribute data_sources holds it, one object per source:
// [{"epoch", "position", "piece", "tokens"}, ...]; reading it back names `path` on error.
std::string cursor_json(const SamplerCursor& c);
SamplerCursor cursor_from_json(const std::string& text, const std::string& path);

// The dataset's shape in the file: the full (tp = 1) tensor, whatever block v is of it.
std::vector<hsize_t> dims_of(const ParamView& v);

}  // namespace flexsp
