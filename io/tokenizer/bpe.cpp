// Byte-level BPE (see bpe.h). The merge table is an open-addressing hash of the pair
// (left id, right id) -> (rank, merged id): the lookup is the inner loop of packing.
#include "io/tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "io/tokenizer/text.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

constexpr size_t kCacheWords = size_t(1) << 17;  // words cached before the cache restarts
constexpr size_t kCacheLongest = 64;            // longer words are merged every time

// GPT-2's table: printable Latin-1 bytes show as themselves, the other 68 as U+0100 on.
struct ByteAlphabet {
  char32_t to_cp[256];
  int16_t from_cp[324];  // code point -> byte, -1: not in the alphabet
  ByteAlphabet() {
    std::fill(std::begin(from_cp), std::end(from_cp), int16_t{-1});
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool shown = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = shown ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

char32_t byte_to_unicode(unsigned char b) { return alphabet().to_cp[b]; }

bool byte_level_to_bytes(std::string_view token, std::string* bytes) {
  bytes->clear();
  const std::string fixed = utf8_repair(token);
  if (fixed.size() != token.size() || fixed != token) return false;
  for (size_t i = 0; i < token.size();) {
    size_t len = 0;
    const char32_t cp = utf8_decode(token, i, &len);
    if (cp >= 324 || alphabet().from_cp[cp] < 0) return false;
    bytes->push_back(static_cast<char>(alphabet().from_cp[cp]));
    i += len;
  }
  return true;
}

// (left, right) -> (rank, id), linear probing over a power-of-two table at most half full.
struct ByteLevelBpe::Merges {
  struct Slot {
    uint64_t key = ~uint64_t{0};
    int32_t rank = 0, id = 0;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;

  explicit Merges(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t key(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }
  static uint64_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
  }
  // Later duplicates replace earlier ones, as a map built from the list does.
  void put(int32_t a, int32_t b, int32_t rank, int32_t id) {
    const uint64_t k = key(a, b);
    for (uint64_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k || slots[i].key == ~uint64_t{0}) {
        slots[i] = {k, rank, id};
        return;
      }
    }
  }
  const Slot* get(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    for (uint64_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == ~uint64_t{0}) return nullptr;
    }
  }
};

ByteLevelBpe::ByteLevelBpe(const BpeSpec& spec, const std::string& what) {
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
  std::string bytes;
  for (const auto& [token, id] : spec.vocab) {
    FLEXSP_CHECK(id >= 0, "{}: model.vocab: token '{}' has a negative id {}", what, token, id);
    max_id_ = std::max(max_id_, id);
    if (static_cast<size_t>(id) >= bytes_of_.size()) bytes_of_.resize(static_cast<size_t>(id) + 1);
    if (!byte_level_to_bytes(token, &bytes)) continue;  // not reachable from bytes
    bytes_of_[static_cast<size_t>(id)] = bytes;
    vocab_[bytes] = id;
    if (bytes.size() == 1) byte_id_[static_cast<unsigned char>(bytes[0])] = id;
  }
  merges_ = std::make_unique<Merges>(spec.merges.size());
  std::string a, b;
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [left, right] = spec.merges[r];
    auto id_of = [&](const std::string& tok, std::string* raw) {
      auto it = byte_level_to_bytes(tok, raw) ? vocab_.find(*raw) : vocab_.end();
      FLEXSP_CHECK(it != vocab_.end(), "{}: model.merges[{}] '{} {}': '{}' is not in the vocabulary",
                   what, r, left, right, tok);
      return it->second;
    };
    const int32_t ia = id_of(left, &a), ib = id_of(right, &b);
    auto joined = vocab_.find(a + b);
    FLEXSP_CHECK(joined != vocab_.end(), "{}: model.merges[{}] '{} {}': '{}{}' is not in the vocabulary",
                 what, r, left, right, left, right);
    merges_->put(ia, ib, static_cast<int32_t>(r), joined->second);
  }
  if (!spec.unk_token.empty()) {
    FLEXSP_CHECK(byte_level_to_bytes(spec.unk_token, &bytes) && vocab_.count(bytes),
                 "{}: model.unk_token '{}' is not in the vocabulary", what, spec.unk_token);
    unk_ = vocab_[bytes];
  }
  fuse_unk_ = spec.fuse_unk;
  ignore_merges_ = spec.ignore_merges;
}

ByteLevelBpe::~ByteLevelBpe() = default;

std::string_view ByteLevelBpe::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= bytes_of_.size()) return {};
  return bytes_of_[static_cast<size_t>(id)];
}

int32_t ByteLevelBpe::find(std::string_view bytes) const {
  auto it = vocab_.find(std::string(bytes));
  return it == vocab_.end() ? -1 : it->second;
}

void ByteLevelBpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (word.size() > kCacheLongest) return merge(word, out);
  std::string key(word);
  auto hit = cache_.find(key);
  if (hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  const size_t first = out.size();
  merge(word, out);
  if (cache_.size() >= kCacheWords) cache_.clear();
  cache_.emplace(std::move(key), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
}

void ByteLevelBpe::merge(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id, prev, next;
    bool gone;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  bool pending_unk = false;  // an unknown run not yet added (fused)
  auto add = [&](int32_t id) {
    const int32_t n = static_cast<int32_t>(sym.size());
    if (n > 0) sym.back().next = n;
    sym.push_back({id, n - 1, -1, false});
  };
  for (unsigned char c : word) {
    const int32_t id = byte_id_[c];
    if (id >= 0) {
      if (pending_unk) add(unk_);
      pending_unk = false;
      add(id);
    } else if (unk_ >= 0) {
      if (pending_unk && !fuse_unk_) add(unk_);
      pending_unk = true;
    }
  }
  if (pending_unk) add(unk_);

  struct Entry {
    int32_t rank, pos, id;
    bool operator<(const Entry& o) const {  // the queue's top: lowest rank, then position
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Entry> queue;
  for (size_t i = 0; i + 1 < sym.size(); ++i)
    if (const Merges::Slot* m = merges_->get(sym[i].id, sym[i + 1].id))
      queue.push({m->rank, static_cast<int32_t>(i), m->id});
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    Symbol& s = sym[static_cast<size_t>(top.pos)];
    if (s.gone || s.next < 0) continue;
    const Symbol right = sym[static_cast<size_t>(s.next)];
    const Merges::Slot* m = merges_->get(s.id, right.id);
    if (!m || m->id != top.id) continue;  // stale: the pair changed since it was queued
    s.id = top.id;
    sym[static_cast<size_t>(s.next)].gone = true;
    s.next = right.next;
    if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = top.pos;
    if (s.prev >= 0)
      if (const Merges::Slot* p = merges_->get(sym[static_cast<size_t>(s.prev)].id, s.id))
        queue.push({p->rank, s.prev, p->id});
    if (s.next >= 0)
      if (const Merges::Slot* n = merges_->get(s.id, sym[static_cast<size_t>(s.next)].id))
        queue.push({n->rank, top.pos, n->id});
  }
  for (const Symbol& s : sym)
    if (!s.gone) out.push_back(s.id);
}

}  // namespace flexsp
