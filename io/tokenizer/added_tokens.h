// Added and special tokens of a tokenizer.json: found in the text before anything else
// and given their ids whole, the way Hugging Face `tokenizers` does it
// (tokenizer/added_vocabulary.rs): leftmost-longest non-overlapping matches of the
// contents; a single_word token only where no word character (Alphabetic, Mark, Nd, Pc,
// Join_Control) touches it; lstrip / rstrip take the white space on their side into the
// token. Tokens with normalized = false are matched in the raw text, the others in the
// normalized pieces between them (two matchers).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer/regex.h"

namespace flexsp {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// A piece of text: [begin, end) and the added token it is, or -1 for plain text.
struct TextPiece {
  size_t begin = 0, end = 0;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }
  // Covers s (valid UTF-8) with pieces, in order; plain pieces are never empty.
  void split(std::string_view s, std::vector<TextPiece>& out) const;

 private:
  // The longest token starting at s[at], or -1.
  int longest_at(std::string_view s, size_t at) const;
  bool word_char_before(std::string_view s, size_t end) const;
  bool word_char_at(std::string_view s, size_t at) const;
  bool space_at(std::string_view s, size_t at, size_t* len) const;
  size_t space_before(std::string_view s, size_t end) const;  // start of trailing white space

  std::vector<AddedToken> tokens_;
  std::vector<std::vector<int>> by_first_byte_;  // token indices, longest first
  Regex word_, space_;
};

}  // namespace flexsp
