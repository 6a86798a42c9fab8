// Training checkpoints (docs/checkpoints.md): one HDF5 file per save,
// `DIR/step_00000100.h5`,
//   /model/<HF name>                    float32 master weights, full logical shape
//   /optimizer/exp_avg/<HF name>        AdamW first moment, full shape
//   /optimizer/exp_avg_sq/<HF name>     AdamW second moment, full shape
//   attributes of /model: the resolved model config (io/weights' write_model_attrs), so
//     eval / export / inspect read /model exactly like a weights file;
//   attribute `checksum` of every dataset (see below);
//   root attributes: schema = "flexsp.checkpoint", schema_version, step, consumed_tokens,
//     seed, data_sources (the cursor of the next batch to train: JSON, per source of the
//     data its epoch, position, piece and tokens drawn) with data_epoch / data_position /
//     data_piece (the first source's, as files without data_sources have them),
//     world_size, zero (the layout at save, for information), config (the run config as
//     INI), flexsp_version, adam_steps, checksum_algorithm.
//
// Writing (writer.h): rank 0 creates the file's HDF5 structure -- every dataset
// contiguous, its space allocated -- and closes it; then every rank writes the bytes of
// its share of the flat layout (ShardRanges in lib/model/params.h: its ZeRO shard, cut
// among the ranks that replicate it) at the datasets' offsets with plain pwritev, from
// host buffers, on a background thread (file_format.h says why not through parallel
// HDF5). The file is written as NAME.partial, fsync'ed, given its checksums and renamed;
// then `latest` (one line, the file name) is replaced by write-temp + rename, and rank 0
// removes all but the newest checkpoint.keep. A process killed at any point leaves the
// previous checkpoint and `latest` intact. A write that fails (a full disk, any I/O
// error) on any rank fails on all at the next agreement: rank 0 removes the file, and the
// run ends with one line; `latest` and the earlier checkpoints are left as they were.
//
// Reading: every rank opens the file read-only, takes the datasets' offsets from HDF5 and
// reads the pieces of the layout it runs now past the page cache (raw_io.h; HDF5
// hyperslab reads for datasets stored any other way), so a checkpoint written by N ranks
// with ZeRO layout X loads on M ranks with layout Y. Ranks that hold the same elements
// (replicas) read a share each and pass it to the others (a node's shared memory): the
// file is read once, not once per replica. Read errors stay per rank, so agree() reports
// them on every rank without a hang, before any exchange.
//
// Checksums: our own, not HDF5's Fletcher32 filter. Fletcher32 needs chunked datasets,
// and filtered datasets can be written in parallel only through HDF5's collective
// chunk-redistribution path (1.10.2+), which turns every shard write into chunk
// ownership exchanges and fixes the chunking at save time; it also checks a chunk only
// when that chunk is read. Ours is layout-free and reduction-friendly: the sum, mod 2^64,
// of splitmix64(element index in the tensor, float32 bits) over the tensor's elements.
// Any partition of a tensor over ranks sums to the same value (one all-reduce), a bit
// flip or a moved element changes it, and a resharded reader verifies the whole file by
// hashing its share of a partition of what it reads.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint/checksum.h"
#include "lib/data/sampler.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"

namespace flexsp {

struct CheckpointMeta {
  int64_t step = 0;             // updates applied
  int64_t consumed_tokens = 0;  // tokens trained on
  uint64_t seed = 0;
  SamplerCursor cursor;  // where the next batch to train starts
  int64_t world_size = 0;
  int64_t zero = 0;
  int64_t adam_steps = 0;
  std::string config_ini, version;
};

// This rank's part of the training state for a save (host memory): parameters and both
// moments over `shards`, ranges concatenated in order.
struct CheckpointShard {
  ShardRanges shards;
  const float* params = nullptr;
  const float* exp_avg = nullptr;
  const float* exp_avg_sq = nullptr;
};

// "step_00000100.h5".
std::string checkpoint_file_name(int64_t step);

// Collective over comm; every rank passes the same dir, keep, c, t and meta. Writes
// dir/step_<meta.step>.h5 (the directory must exist), points `latest` at it and keeps the
// newest `keep`. Returns the path. Runs its own agree() phases (call it outside one).
// Synchronous: CheckpointWriter (writer.h) start + poll(wait), defined in writer.cpp.
std::string checkpoint_save(MPI_Comm comm, const std::string& dir, int keep, const ModelConfig& c,
                            const ParamTable& t, const CheckpointMeta& meta,
                            const CheckpointShard& mine);

// The checkpoint to resume from: resume = "auto" -> the file named by dir/latest, or ""
// when the directory holds no checkpoint (no `latest`, no step_*.h5); otherwise resume is
// the path. Throws Error when `latest` names a missing file, when checkpoints exist
// without `latest`, or when the path does not exist. Local (no MPI).
std::string checkpoint_resolve(const std::string& resume, const std::string& dir);

// Steps of the step_*.h5 files in dir, ascending (none if dir is missing).
std::vector<int64_t> checkpoint_steps(const std::string& dir);

// The root attributes; checks the schema and that /model matches c (Error naming the
// file and field). Local.
CheckpointMeta checkpoint_read_meta(const std::string& path, const ModelConfig& c);

// Collective over comm (own agree() phases; call it outside one): reads the parameters
// over pshards into params and the moments over sshards into exp_avg / exp_avg_sq (host,
// ranges concatenated), and verifies every dataset's checksum over all ranks (Error
// naming the tensor on a mismatch). node: this rank's node as the process grid numbers
// them (Grid::node, nodes emulated by --ranks-per-node included): replicas pass their
// shares through shared memory only among ranks of one node that share memory, and by
// broadcasts otherwise.
void checkpoint_load(MPI_Comm comm, int node, const std::string& path, const ModelConfig& c,
                     const ParamTable& t, const ShardRanges& pshards, float* params,
                     const ShardRanges& sshards, float* exp_avg, float* exp_avg_sq);

// One process, whole tensors: recomputes every dataset's checksum. Returns the names of
// the datasets that do not match (empty: all good); throws on unreadable files.
struct CheckpointTensor {
  std::string name;  // "model/model.norm.weight", "optimizer/exp_avg/..."
  std::vector<int64_t> shape;
  bool ok = false;
};
std::vector<CheckpointTensor> checkpoint_verify(const std::string& path);

}  // namespace flexsp
