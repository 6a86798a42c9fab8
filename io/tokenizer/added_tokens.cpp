// Added-token matching (see added_tokens.h). Candidates are indexed by their first byte,
// longest first, so a scan tests a position only when some token can start there; the
// first position with a hit gives the leftmost-longest match. The word and space tests
// are Rust regex's \w and \s, one code point at a time.
#include "io/tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>

#include "io/tokenizer/text.h"

namespace flexsp {

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens)
    : by_first_byte_(256),
      word_("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]", false, "word class"),
      space_("\\s", false, "space class") {
  for (AddedToken& t : tokens)
    if (!t.content.empty()) tokens_.push_back(std::move(t));
  for (size_t i = 0; i < tokens_.size(); ++i)
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(static_cast<int>(i));
  for (auto& v : by_first_byte_)
    std::stable_sort(v.begin(), v.end(), [&](int a, int b) {
      return tokens_[static_cast<size_t>(a)].content.size() > tokens_[static_cast<size_t>(b)].content.size();
    });
}

int AddedTokenMatcher::longest_at(std::string_view s, size_t at) const {
  for (int k : by_first_byte_[static_cast<unsigned char>(s[at])]) {
    const std::string& c = tokens_[static_cast<size_t>(k)].content;
    if (c.size() <= s.size() - at && std::memcmp(s.data() + at, c.data(), c.size()) == 0) return k;
  }
  return -1;
}

bool AddedTokenMatcher::word_char_before(std::string_view s, size_t end) const {
  if (end == 0) return false;
  const size_t b = utf8_prev(s, end);
  return word_.matches_whole(s.substr(b, end - b));
}

bool AddedTokenMatcher::word_char_at(std::string_view s, size_t at) const {
  if (at >= s.size()) return false;
  size_t len = 0;
  utf8_decode(s, at, &len);
  return word_.matches_whole(s.substr(at, len));
}

bool AddedTokenMatcher::space_at(std::string_view s, size_t at, size_t* len) const {
  utf8_decode(s, at, len);
  return space_.matches_whole(s.substr(at, *len));
}

size_t AddedTokenMatcher::space_before(std::string_view s, size_t end) const {
  while (end > 0) {
    const size_t b = utf8_prev(s, end);
    if (!space_.matches_whole(s.substr(b, end - b))) break;
    end = b;
  }
  return end;
}

void AddedTokenMatcher::split(std::string_view s, std::vector<TextPiece>& out) const {
  size_t done = 0;  // s[0, done) is covered
  for (size_t at = 0; at < s.size();) {
    const int k = by_first_byte_[static_cast<unsigned char>(s[at])].empty() ? -1 : longest_at(s, at);
    if (k < 0) {
      ++at;
      continue;
    }
    const AddedToken& t = tokens_[static_cast<size_t>(k)];
    size_t start = at, stop = at + t.content.size();
    at = stop;  // the next match starts after this one, whether it is kept or not
    if (t.single_word && (word_char_before(s, start) || word_char_at(s, stop))) continue;
    if (t.lstrip) start = std::max(space_before(s, start), done);
    if (t.rstrip) {
      size_t len = 0;
      while (stop < s.size() && space_at(s, stop, &len)) stop += len;
    }
    if (done < start) out.push_back({done, start, -1});
    out.push_back({start, stop, t.id});
    done = stop;
  }
  if (done < s.size()) out.push_back({done, s.size(), -1});
}

}  // namespace flexsp
