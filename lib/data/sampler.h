// The global batch sampler (docs/batches.md). Works on document lengths only, so every rank
// computes the same batches on its own, cheaply, and the batch of step k depends only on
// the datasets, their weights, the seed and k -- never on the number of ranks or the plan.
//
// Each epoch draws a permutation of the documents from (seed, epoch) with a counter-based
// generator and Fisher-Yates (std::shuffle is not portable across standard libraries).
// A document longer than max_seq_len + 1 tokens is cut into pieces of at most that many
// tokens that overlap by one, so every next-token target survives. Documents with fewer
// than 2 tokens hold no target and are skipped. A batch takes sequences in order until
// the next one would exceed batch_tokens (or batch_seqs sequences are taken); an epoch
// boundary falls inside a batch when the permutation runs out.
//
// A mixture (data.path = a.h5:0.6, b.h5:0.4) is several sources, each a range of the
// documents with a weight: each source has its own permutations and epochs (source 0's
// drawn from the seed itself, so a one-source mixture is its dataset alone; source s > 0's
// from the seed and s), and the next sequence comes from the source furthest behind its
// share of the tokens drawn so far -- the least tokens / weight, ties to the first -- so
// every source's share of the tokens stays within one sequence of its weight, from the
// first batch on, deterministically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flexsp {

// Tokens [start, start + length) of document doc.
struct SeqRef {
  int64_t doc = 0;
  int64_t start = 0;
  int64_t length = 0;
  bool operator==(const SeqRef&) const = default;
};

struct SamplerOptions {
  uint64_t seed = 0;
  int64_t max_seq_len = 4096;  // a piece holds at most max_seq_len + 1 tokens
  int64_t batch_tokens = 0;    // 0: no token limit
  int64_t batch_seqs = 0;      // 0: no sequence limit
};

// Documents [first_doc, first_doc + num_docs) drawn with this weight (> 0; the weights
// need not sum to 1).
struct SamplerSource {
  int64_t first_doc = 0, num_docs = 0;
  double weight = 1;
};

// Where one source stands: its next sequence is piece `piece` of the document at index
// `position` of epoch `epoch`'s permutation; `tokens` it has given so far.
struct SourceCursor {
  int64_t epoch = 0;
  int64_t position = 0;
  int64_t piece = 0;
  int64_t tokens = 0;
  bool operator==(const SourceCursor&) const = default;
};

// Where the sampler stands: one cursor per source. Saved in checkpoints.
struct SamplerCursor {
  std::vector<SourceCursor> sources;
  bool operator==(const SamplerCursor&) const = default;
};

class BatchSampler {
 public:
  // doc_lengths[i] = tokens of document i; sources: ranges of them with weights (empty:
  // one source of all documents). Throws Error if a source has no document with 2 tokens,
  // the sources overlap or leave the documents, or the options cannot form a batch.
  BatchSampler(std::vector<int64_t> doc_lengths, const SamplerOptions& opts,
               std::vector<SamplerSource> sources = {});

  // The next global batch; advances the cursor.
  std::vector<SeqRef> next();

  const SamplerCursor& cursor() const { return cursor_; }
  void seek(const SamplerCursor& c);  // throws Error if c is outside the data

  const SamplerOptions& options() const { return opts_; }
  int64_t usable_docs() const;  // over all sources
  int num_sources() const { return static_cast<int>(src_.size()); }
  const SamplerSource& source(int s) const { return src_[static_cast<size_t>(s)].spec; }
  // The source's weight over all weights.
  double share(int s) const;
  // Tokens one epoch of source s gives: its usable documents cut into pieces.
  int64_t epoch_tokens(int s) const { return src_[static_cast<size_t>(s)].epoch_tokens; }
  // How far source s is through its epochs at cursor c: epoch + documents done / usable.
  double epochs_done(const SamplerCursor& c, int s) const;
  // Source s's epochs after `steps` more batches from cursor c, estimated: its share of
  // the tokens of a batch (batch_tokens, or batch_seqs sequences of the mixture's mean
  // length) over the tokens of its epoch.
  double epochs_after(const SamplerCursor& c, int s, int64_t steps) const;
  // Tokens of the batch by source.
  std::vector<int64_t> source_tokens(const std::vector<SeqRef>& batch) const;

 private:
  struct Source {
    SamplerSource spec;
    uint64_t seed = 0;
    std::vector<int64_t> usable;  // documents with >= 2 tokens, in order
    std::vector<int64_t> perm;    // usable documents permuted for perm_epoch
    int64_t perm_epoch = -1;
    int64_t epoch_tokens = 0, epoch_pieces = 0;
  };
  void draw_permutation(Source& s, int64_t epoch);
  int64_t pieces_of(int64_t len) const;
  int pick() const;  // the source the next sequence comes from

  std::vector<int64_t> lengths_;
  SamplerOptions opts_;
  std::vector<Source> src_;
  SamplerCursor cursor_;
};

// Pieces of a document of n tokens (docs/batches.md): starts 0, L, 2L, ...; lengths
// <= L + 1.
std::vector<SeqRef> split_document(int64_t doc, int64_t n, int64_t max_seq_len);

// The permutation of [0, n) for (seed, epoch); exposed for tests.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// "epoch E, position P, piece C" (one source); "source 0: epoch ...; source 1: ..." (more).
std::string cursor_text(const SamplerCursor& c);

// A 64-bit fingerprint of a batch (to compare batches across ranks and runs).
uint64_t batch_fingerprint(const std::vector<SeqRef>& batch);

}  // namespace flexsp
