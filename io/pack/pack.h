// Packing a corpus into a token dataset (docs/datasets.md), apart from the command line.
//
// Inputs are taken in a fixed order, so the same corpus always packs to the same file:
// the inputs as given, each directory walked recursively with its files sorted by path.
// A file is one document, except JSON lines (`*.jsonl`, or every file with `jsonl`): one
// document per line, {"text": "..."} or {"tokens": [ids]}; and `*.npy`: a 1-D integer
// numpy array of token ids is one document. Every document gets eos_id appended; empty
// ones are skipped and counted. Memory is bounded by one document (for a context-free
// tokenizer such as `bytes`, by a fixed block) plus the writer's chunk buffers. Under
// mpirun the ranks share the reading (the tokenizing) and the file is the same. With `bos`
// every (non-empty) document also starts with the tokenizer's BOS id, as LLaMA models
// expect; pre-tokenized inputs included, so that every document of a dataset is alike.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flexsp {

class Tokenizer;

struct PackStats {
  int64_t files = 0;      // input files read
  int64_t documents = 0;  // documents written
  int64_t tokens = 0;     // tokens written, EOS included
  int64_t skipped = 0;    // empty documents (empty files, empty lines' text/tokens)
  int64_t bytes_read = 0;
  double seconds = 0;
  // CPU time (this thread's) reading and tokenizing, the least and most of any rank and
  // their sum, and rank 0's joining the other ranks' parts: how even the ranks' shares
  // were, and what the ranks would take on cores of their own.
  double read_cpu_min = 0, read_cpu_max = 0, read_cpu_sum = 0, join_cpu = 0;

  double mb_per_s() const { return seconds > 0 ? bytes_read / 1e6 / seconds : 0; }
  double tokens_per_s() const { return seconds > 0 ? tokens / seconds : 0; }
};

struct PackOptions {
  std::string out;                  // the dataset file to write
  std::vector<std::string> inputs;  // files and directories
  std::string glob;                 // file-name filter inside directories ("*.h"); "" = all
  bool jsonl = false;               // treat every input file as JSON lines
  bool bos = false;                 // prepend the tokenizer's BOS id (Error if it has none)
  int compression = 0;              // gzip level 0..9
  bool force = false;               // overwrite an existing output
  // /tokens chunk size; 0 picks 1 M tokens, or 64 K when compressed: a read decompresses
  // whole chunks, and training reads documents in random order.
  int64_t chunk_tokens = 0;
  // Called about every progress_seconds with the running totals; may be empty.
  std::function<void(const PackStats&)> progress;
  double progress_seconds = 10;
};

// The input files in packing order (see above). Throws Error naming an input that does
// not exist or a directory that cannot be listed.
std::vector<std::string> list_pack_inputs(const std::vector<std::string>& inputs,
                                          const std::string& glob);

// Packs opts.inputs into opts.out with tok. Throws Error naming the file (and line) for
// bad input; the output is then left as it was (it is written under a temporary name).
PackStats pack(const PackOptions& opts, const Tokenizer& tok);

// The same on every rank of comm (collective; every rank holds the same options and
// tokenizer): the inputs, JSON lines files cut into line-aligned ranges, are dealt out
// in about equal bytes, each rank tokenizes its share into a part beside opts.out
// ("<out>.part<r>.tmp.<pid>", removed at the end; every rank must see that directory),
// and rank 0 writes the dataset from the parts -- byte for byte the one-process pack's. Bad input on
// any rank is agreed (lib/util/agree.h): every rank throws AgreedFailure, nothing is
// written. The counts are the totals; progress is rank 0's.
PackStats pack(const PackOptions& opts, const Tokenizer& tok, MPI_Comm comm);

}  // namespace flexsp
