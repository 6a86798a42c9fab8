// Regular expressions for pre-tokenizers, through PCRE2 (Debian's libpcre2-8, JIT-compiled
// where the platform allows). Patterns are the Oniguruma patterns of tokenizer.json,
// compiled in UTF mode with Unicode properties. One difference is bridged: with Unicode
// properties PCRE2's \s also matches U+180E, Oniguruma's (and Rust's) does not, so \s and
// \S are rewritten to \p{White_Space} and \P{White_Space} (valid inside classes too).
// A Regex holds its match data: one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flexsp {

class Regex {
 public:
  // Throws Error "WHAT: bad regular expression at offset N: why" when it does not compile.
  // literal: the pattern is a plain string to find.
  Regex(const std::string& pattern, bool literal, const std::string& what);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Appends to out the [begin, end) spans of the leftmost non-overlapping matches in s
  // (valid UTF-8); an empty match advances one code point. Offsets are bytes.
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;
  // True when the pattern matches the whole of s.
  bool matches_whole(std::string_view s) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The pattern with \s / \S rewritten (see above); exposed for tests.
std::string regex_onig_compatible(const std::string& pattern);

}  // namespace flexsp
