// PCRE2 behind the Regex interface (regex.h). The JIT is used when it compiles; matching
// skips PCRE2's UTF check because callers pass repaired text (io/tokenizer/text.h).
#include "io/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "lib/util/error.h"

namespace flexsp {

std::string regex_onig_compatible(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    const char c = pattern[++i];
    if (c == 's')
      out += "\\p{White_Space}";
    else if (c == 'S')
      out += "\\P{White_Space}";
    else
      out += {'\\', c};  // any other escape, \\ included, stays as it is
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_data* md = nullptr;
  bool jit = false;
  ~Impl() {
    if (md) pcre2_match_data_free(md);
    if (code) pcre2_code_free(code);
  }
  int match(std::string_view s, size_t at, uint32_t options) const {
    const auto* p = reinterpret_cast<PCRE2_SPTR>(s.data());
    if (jit && options == 0) return pcre2_jit_match(code, p, s.size(), at, 0, md, nullptr);
    return pcre2_match(code, p, s.size(), at, options | PCRE2_NO_UTF_CHECK, md, nullptr);
  }
};

Regex::Regex(const std::string& pattern, bool literal, const std::string& what)
    : impl_(std::make_unique<Impl>()) {
  const std::string p = literal ? pattern : regex_onig_compatible(pattern);
  int err = 0;
  PCRE2_SIZE at = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), options, &err,
                              &at, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    fail(fmt::format("{}: bad regular expression at offset {}: {}", what, at,
                     reinterpret_cast<const char*>(buf)));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
  impl_->md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  FLEXSP_CHECK(impl_->md != nullptr, "{}: out of memory for regex match data", what);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  size_t at = 0;
  while (at <= s.size()) {
    const int rc = impl_->match(s, at, 0);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    FLEXSP_CHECK(rc >= 0, "regular expression: match failed (PCRE2 error {})", rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(impl_->md);
    const size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      at = e;
      continue;
    }
    if (e == s.size()) return;
    at = e + 1;  // empty match: step over one code point
    while (at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) ++at;
  }
}

bool Regex::matches_whole(std::string_view s) const {
  return impl_->match(s, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED) >= 0;
}

}  // namespace flexsp
