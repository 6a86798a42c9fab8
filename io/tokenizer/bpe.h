// The byte-level BPE model of GPT-2 / Llama 3 / Qwen tokenizer.json files: a vocabulary
// whose tokens are strings over GPT-2's 256-character byte alphabet (bytes_to_unicode),
// and merges by rank. Tokens are kept as the bytes they stand for, so a word is merged
// from its bytes directly, never from mapped characters.
//
// Merging follows Hugging Face `tokenizers` exactly (models/bpe/word.rs): all mergeable
// adjacent pairs in a queue ordered by (rank, position); the lowest is merged, stale
// entries are skipped, the new symbol's pairs with its neighbours are queued. A byte with
// no token of its own becomes the unknown token when the model has one (fused when
// fuse_unk) and is dropped otherwise, as there. With ignore_merges, a word that is a token
// is that token. Words are cached (up to a bound), like the library's cache.
// Not thread-safe (the cache): one instance per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flexsp {

// The model section of tokenizer.json, as read.
struct BpeSpec {
  std::vector<std::pair<std::string, int32_t>> vocab;        // byte-level token -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::string unk_token;                                    // "" = none
  bool fuse_unk = false;
  bool ignore_merges = false;
};

// The character GPT-2's byte-level alphabet shows byte b as.
char32_t byte_to_unicode(unsigned char b);

// The bytes a byte-level token string stands for; false when it holds a character outside
// the alphabet (such a token can only be an added one).
bool byte_level_to_bytes(std::string_view token, std::string* bytes);

class ByteLevelBpe {
 public:
  // Throws Error naming `what` (the file) for a merge whose parts or result are not in
  // the vocabulary, or an unknown token that is not.
  ByteLevelBpe(const BpeSpec& spec, const std::string& what);
  ~ByteLevelBpe();

  // Appends the ids of one pre-tokenized word (its raw bytes) to out.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // The bytes of token id ("" when the id has none: not in the vocabulary, or not
  // byte-level).
  std::string_view token_bytes(int32_t id) const;
  // The id of the token standing for these bytes, or -1.
  int32_t find(std::string_view bytes) const;
  // The highest id of the vocabulary (-1 when empty).
  int32_t max_id() const { return max_id_; }

 private:
  struct Merges;
  void merge(std::string_view word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;  // bytes -> id
  std::vector<std::string> bytes_of_;               // id -> bytes
  int32_t byte_id_[256];                            // -1: no token for the byte
  std::unique_ptr<Merges> merges_;
  int32_t unk_ = -1;
  bool fuse_unk_ = false, ignore_merges_ = false;
  int32_t max_id_ = -1;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace flexsp
