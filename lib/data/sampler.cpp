#include "lib/data/sampler.h"

#include <cmath>
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

BatchSampler::BatchSampler(std::vector<int64_t> doc_lengths, const SamplerOptions& opts,
                           std::vector<SamplerSource> sources)
    : lengths_(std::move(doc_lengths)), opts_(opts) {
  FLEXSP_CHECK(opts_.max_seq_len >= 1, "data.max_seq_len: must be >= 1");
  FLEXSP_CHECK(opts_.batch_tokens > 0 || opts_.batch_seqs > 0,
               "train.global_batch_tokens or train.global_batch_seqs must be > 0");
  FLEXSP_CHECK(opts_.batch_tokens == 0 || opts_.batch_tokens >= opts_.max_seq_len + 1,
               "train.global_batch_tokens: {} is smaller than one sequence (data.max_seq_len + 1 = {})",
               opts_.batch_tokens, opts_.max_seq_len + 1);
  const int64_t n = static_cast<int64_t>(lengths_.size());
  if (sources.empty()) sources.push_back({0, n, 1.0});
  int64_t end = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const SamplerSource& sp = sources[i];
    FLEXSP_CHECK(sp.first_doc >= end && sp.num_docs >= 0 && sp.first_doc + sp.num_docs <= n,
                 "data source {}: documents [{}, {}) overlap another source or leave the {} documents", i,
                 sp.first_doc, sp.first_doc + sp.num_docs, n);
    FLEXSP_CHECK(sp.weight > 0 && std::isfinite(sp.weight), "data source {}: weight {} is not a positive number",
                 i, sp.weight);
    end = sp.first_doc + sp.num_docs;
    Source s;
    s.spec = sp;
    // Source 0 draws from the seed itself: a one-source mixture is its dataset alone.
    s.seed = i == 0 ? opts_.seed : splitmix64(opts_.seed ^ splitmix64(0xda7a5eedull + i));
    for (int64_t d = sp.first_doc; d < end; ++d)
      if (lengths_[d] >= 2) {
        s.usable.push_back(d);
        s.epoch_tokens += lengths_[d] - 1 + pieces_of(lengths_[d]);
        s.epoch_pieces += pieces_of(lengths_[d]);
      }
    FLEXSP_CHECK(!s.usable.empty(), "{} has no document with at least 2 tokens",
                 sources.size() == 1 ? std::string("the dataset") : fmt::format("data source {}", i));
    src_.push_back(std::move(s));
  }
  cursor_.sources.resize(src_.size());
}

int64_t BatchSampler::usable_docs() const {
  int64_t n = 0;
  for (const Source& s : src_) n += static_cast<int64_t>(s.usable.size());
  return n;
}

double BatchSampler::share(int s) const {
  double total = 0;
  for (const Source& x : src_) total += x.spec.weight;
  return src_[static_cast<size_t>(s)].spec.weight / total;
}

double BatchSampler::epochs_done(const SamplerCursor& c, int s) const {
  const SourceCursor& k = c.sources.at(static_cast<size_t>(s));
  return static_cast<double>(k.epoch) +
         static_cast<double>(k.position) / static_cast<double>(src_[static_cast<size_t>(s)].usable.size());
}

double BatchSampler::epochs_after(const SamplerCursor& c, int s, int64_t steps) const {
  double batch = static_cast<double>(opts_.batch_tokens);
  if (batch <= 0) {
    double mean = 0;  // tokens of the mixture's mean sequence
    for (int k = 0; k < num_sources(); ++k)
      mean += share(k) * static_cast<double>(src_[k].epoch_tokens) / static_cast<double>(src_[k].epoch_pieces);
    batch = static_cast<double>(opts_.batch_seqs) * mean;
  }
  return epochs_done(c, s) +
         share(s) * batch * static_cast<double>(steps) / static_cast<double>(src_[static_cast<size_t>(s)].epoch_tokens);
}

std::vector<int64_t> BatchSampler::source_tokens(const std::vector<SeqRef>& batch) const {
  std::vector<int64_t> t(src_.size(), 0);
  for (const SeqRef& q : batch) {
    size_t s = 0;
    while (s + 1 < src_.size() && q.doc >= src_[s + 1].spec.first_doc) ++s;
    t[s] += q.length;
  }
  return t;
}

int64_t BatchSampler::pieces_of(int64_t len) const {
  // ceil((len - 1) / L): each piece holds up to L targets.
  return (len - 1 + opts_.max_seq_len - 1) / opts_.max_seq_len;
}

void BatchSampler::draw_permutation(Source& s, int64_t epoch) {
  if (s.perm_epoch == epoch) return;
  // Permute the usable documents only, so skipping short ones does not change how
  // the others are ordered relative to each other between datasets.
  const int64_t n = static_cast<int64_t>(s.usable.size());
  const std::vector<int64_t> p = epoch_permutation(n, s.seed, epoch);
  s.perm.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) s.perm[i] = s.usable[p[i]];
  s.perm_epoch = epoch;
}

int BatchSampler::pick() const {
  int best = 0;
  for (int s = 1; s < num_sources(); ++s) {
    const double a = static_cast<double>(cursor_.sources[s].tokens) / src_[s].spec.weight;
    const double b = static_cast<double>(cursor_.sources[best].tokens) / src_[best].spec.weight;
    if (a < b) best = s;
  }
  return best;
}

void BatchSampler::seek(const SamplerCursor& c) {
  FLEXSP_CHECK(c.sources.size() == src_.size(),
               "data cursor has {} sources but data.path has {} (a run resumes the mixture it was saved with)",
               c.sources.size(), src_.size());
  for (size_t i = 0; i < src_.size(); ++i) {
    const SourceCursor& k = c.sources[i];
    Source& s = src_[i];
    const int64_t usable = static_cast<int64_t>(s.usable.size());
    FLEXSP_CHECK(k.epoch >= 0 && k.position >= 0 && k.position < usable && k.piece >= 0 && k.tokens >= 0,
                 "data cursor (epoch {}, position {}, piece {}) is outside {} of {} usable documents", k.epoch,
                 k.position, k.piece, src_.size() == 1 ? "this dataset" : fmt::format("data source {}", i), usable);
    draw_permutation(s, k.epoch);
    FLEXSP_CHECK(k.piece < pieces_of(lengths_[s.perm[k.position]]), "data cursor piece {} is outside document {}",
                 k.piece, s.perm[k.position]);
  }
  cursor_ = c;
}

std::vector<SeqRef> BatchSampler::next() {
  std::vector<SeqRef> batch;
  int64_t tokens = 0;
  for (;;) {
    if (opts_.batch_seqs > 0 && int64_t(batch.size()) >= opts_.batch_seqs) break;
    const int si = pick();
    Source& s = src_[static_cast<size_t>(si)];
    SourceCursor& c = cursor_.sources[static_cast<size_t>(si)];
    draw_permutation(s, c.epoch);
    const int64_t doc = s.perm[c.position];
    const int64_t n = lengths_[doc];
    const int64_t start = c.piece * opts_.max_seq_len;
    const int64_t len = std::min(opts_.max_seq_len + 1, n - start);
    if (opts_.batch_tokens > 0 && tokens + len > opts_.batch_tokens) break;
    batch.push_back({doc, start, len});
    tokens += len;
    c.tokens += len;
    if (start + len < n) {
      ++c.piece;
    } else {
      c.piece = 0;
      if (++c.position == static_cast<int64_t>(s.usable.size())) {
        c.position = 0;
        ++c.epoch;
      }
    }
  }
  FLEXSP_ASSERT(!batch.empty());
  return batch;
}

std::string cursor_text(const SamplerCursor& c) {
  std::string s;
  for (size_t i = 0; i < c.sources.size(); ++i) {
    const SourceCursor& k = c.sources[i];
    if (c.sources.size() > 1) s += fmt::format("{}source {}: ", i ? "; " : "", i);
    s += fmt::format("epoch {}, position {}, piece {}", k.epoch, k.position, k.piece);
  }
  return s;
}

uint64_t batch_fingerprint(const std::vector<SeqRef>& batch) {
  uint64_t h = splitmix64(batch.size());
  for (const SeqRef& s : batch)
    h = splitmix64(h ^ splitmix64(s.doc ^ splitmix64(s.start ^ splitmix64(s.length))));
  return h;
}

}  // namespace flexsp
