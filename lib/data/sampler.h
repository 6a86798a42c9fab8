// The global batch sampler (docs/batches.md). Works on document lengths only, so every rank
// computes the same batches on its own, cheaply, and the batch of step k depends only
// on the dataset, the seed and k -- never on the number of ranks or the plan.
//
// Each epoch draws a permutation of the documents from (seed, epoch) with a counter-based
// generator and Fisher-Yates (std::shuffle is not portable across standard libraries).
// A document longer than max_seq_len + 1 tokens is cut into pieces of at most that many
// tokens that overlap by one, so every next-token target survives. Documents with fewer
// than 2 tokens hold no target and are skipped. A batch takes sequences in order until
// the next one would exceed batch_tokens (or batch_seqs sequences are taken); an epoch
// boundary falls inside a batch when the permutation runs out.
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

// Where the sampler stands: the next sequence is piece `piece` of the document at index
// `position` of epoch `epoch`'s permutation. Saved in checkpoints.
struct SamplerCursor {
  int64_t epoch = 0;
  int64_t position = 0;
  int64_t piece = 0;
  bool operator==(const SamplerCursor&) const = default;
};

class BatchSampler {
 public:
  // doc_lengths[i] = tokens of document i. Throws Error if no document has 2 tokens or
  // the options cannot form a batch.
  BatchSampler(std::vector<int64_t> doc_lengths, const SamplerOptions& opts);

  // The next global batch; advances the cursor.
  std::vector<SeqRef> next();

  const SamplerCursor& cursor() const { return cursor_; }
  void seek(const SamplerCursor& c);  // throws Error if c is outside the data

  const SamplerOptions& options() const { return opts_; }
  int64_t usable_docs() const { return usable_; }

 private:
  void draw_permutation(int64_t epoch);
  int64_t pieces_of(int64_t len) const;

  std::vector<int64_t> lengths_;
  SamplerOptions opts_;
  int64_t usable_ = 0;          // documents with >= 2 tokens
  std::vector<int64_t> perm_;   // usable document indices, permuted for cursor_.epoch
  int64_t perm_epoch_ = -1;
  SamplerCursor cursor_;
};

// Pieces of a document of n tokens (docs/batches.md): starts 0, L, 2L, ...; lengths
// <= L + 1.
std::vector<SeqRef> split_document(int64_t doc, int64_t n, int64_t max_seq_len);

// The permutation of [0, n) for (seed, epoch); exposed for tests.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// A 64-bit fingerprint of a batch (to compare batches across ranks and runs).
uint64_t batch_fingerprint(const std::vector<SeqRef>& batch);

}  // namespace flexsp
