#include "lib/data/sampler.h"

#include <numeric>

#include "lib/util/error.h"

namespace flexsp {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform integer in [0, bound) without modulo bias (Lemire's multiply-shift with rejection).
uint64_t uniform_below(uint64_t& state, uint64_t bound) {
  const uint64_t threshold = -bound % bound;
  for (;;) {
    const uint64_t r = splitmix64(state++);
    const __uint128_t m = static_cast<__uint128_t>(r) * bound;
    if (static_cast<uint64_t>(m) >= threshold) return static_cast<uint64_t>(m >> 64);
  }
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), int64_t{0});
  uint64_t state = splitmix64(seed ^ splitmix64(0x5eedull + static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(uniform_below(state, static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

std::vector<SeqRef> split_document(int64_t doc, int64_t n, int64_t max_seq_len) {
  std::vector<SeqRef> out;
  for (int64_t start = 0;; start += max_seq_len) {
    const int64_t len = std::min(max_seq_len + 1, n - start);
    out.push_back({doc, start, len});
    if (start + len >= n) break;
  }
  return out;
}

BatchSampler::BatchSampler(std::vector<int64_t> doc_lengths, const SamplerOptions& opts)
    : lengths_(std::move(doc_lengths)), opts_(opts) {
  FLEXSP_CHECK(opts_.max_seq_len >= 1, "data.max_seq_len: must be >= 1");
  FLEXSP_CHECK(opts_.batch_tokens > 0 || opts_.batch_seqs > 0,
               "train.global_batch_tokens or train.global_batch_seqs must be > 0");
  FLEXSP_CHECK(opts_.batch_tokens == 0 || opts_.batch_tokens >= opts_.max_seq_len + 1,
               "train.global_batch_tokens: {} is smaller than one sequence (data.max_seq_len + 1 = {})",
               opts_.batch_tokens, opts_.max_seq_len + 1);
  for (int64_t n : lengths_) usable_ += n >= 2;
  FLEXSP_CHECK(usable_ > 0, "the dataset has no document with at least 2 tokens");
}

int64_t BatchSampler::pieces_of(int64_t len) const {
  // ceil((len - 1) / L): each piece holds up to L targets.
  return (len - 1 + opts_.max_seq_len - 1) / opts_.max_seq_len;
}

void BatchSampler::draw_permutation(int64_t epoch) {
  if (perm_epoch_ == epoch) return;
  // Permute the usable documents only, so skipping short ones does not change how
  // the others are ordered relative to each other between datasets.
  std::vector<int64_t> usable;
  usable.reserve(usable_);
  for (int64_t i = 0; i < int64_t(lengths_.size()); ++i)
    if (lengths_[i] >= 2) usable.push_back(i);
  const std::vector<int64_t> p = epoch_permutation(usable_, opts_.seed, epoch);
  perm_.resize(usable_);
  for (int64_t i = 0; i < usable_; ++i) perm_[i] = usable[p[i]];
  perm_epoch_ = epoch;
}

void BatchSampler::seek(const SamplerCursor& c) {
  FLEXSP_CHECK(c.epoch >= 0 && c.position >= 0 && c.position < usable_ && c.piece >= 0,
               "data cursor (epoch {}, position {}, piece {}) is outside this dataset of {} usable documents",
               c.epoch, c.position, c.piece, usable_);
  draw_permutation(c.epoch);
  FLEXSP_CHECK(c.piece < pieces_of(lengths_[perm_[c.position]]),
               "data cursor piece {} is outside document {}", c.piece, perm_[c.position]);
  cursor_ = c;
}

std::vector<SeqRef> BatchSampler::next() {
  std::vector<SeqRef> batch;
  int64_t tokens = 0;
  for (;;) {
    if (opts_.batch_seqs > 0 && int64_t(batch.size()) >= opts_.batch_seqs) break;
    draw_permutation(cursor_.epoch);
    const int64_t doc = perm_[cursor_.position];
    const int64_t n = lengths_[doc];
    const int64_t start = cursor_.piece * opts_.max_seq_len;
    const int64_t len = std::min(opts_.max_seq_len + 1, n - start);
    if (opts_.batch_tokens > 0 && tokens + len > opts_.batch_tokens) break;
    batch.push_back({doc, start, len});
    tokens += len;
    if (start + len < n) {
      ++cursor_.piece;
    } else {
      cursor_.piece = 0;
      if (++cursor_.position == usable_) {
        cursor_.position = 0;
        ++cursor_.epoch;
      }
    }
  }
  FLEXSP_ASSERT(!batch.empty());
  return batch;
}

uint64_t batch_fingerprint(const std::vector<SeqRef>& batch) {
  uint64_t h = splitmix64(batch.size());
  for (const SeqRef& s : batch)
    h = splitmix64(h ^ splitmix64(s.doc ^ splitmix64(s.start ^ splitmix64(s.length))));
  return h;
}

}  // namespace flexsp
