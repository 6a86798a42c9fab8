// UTF-8 repair and NFC (see text.h). The repair walks the bytes once and copies nothing
// while the text is valid; NFC converts to UTF-16 for ICU only when the text is not ASCII
// and ICU's quick check says it may change.
#include "io/tokenizer/text.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>

#include "lib/util/error.h"

namespace flexsp {

namespace {

// The length of the well-formed prefix of the sequence starting at s[i] (a lead byte
// >= 0x80), and whether that prefix is complete. Unicode Table 3-7: the second byte's
// range depends on the lead byte, the others are 80..BF.
size_t utf8_prefix(std::string_view s, size_t i, bool* complete) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    *complete = false;  // 80..C1, F5..FF never start a sequence
    return 1;
  }
  size_t n = 1;
  for (; n <= need; ++n) {
    if (i + n >= s.size()) break;
    const unsigned char x = b(i + n);
    const unsigned char l = n == 1 ? lo : 0x80, h = n == 1 ? hi : 0xBF;
    if (x < l || x > h) break;
  }
  *complete = n == need + 1;
  return n;
}

}  // namespace

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

std::string utf8_repair(std::string_view s) {
  std::string out;
  size_t copied = 0;  // s[copied, i) is valid and not yet in out
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    bool complete = false;
    const size_t n = utf8_prefix(s, i, &complete);
    if (complete) {
      i += n;
      continue;
    }
    if (out.empty()) out.reserve(s.size() + 16);
    out.append(s.data() + copied, i - copied);
    out.append("\xEF\xBF\xBD");
    i += n;
    copied = i;
  }
  if (copied == 0) return std::string(s);
  out.append(s.data() + copied, s.size() - copied);
  return out;
}

std::string utf8_nfc(std::string_view s) {
  if (is_ascii(s)) return std::string(s);
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  FLEXSP_CHECK(U_SUCCESS(err), "ICU: no NFC normalizer ({})", u_errorName(err));
  int32_t n16 = 0;
  u_strFromUTF8(nullptr, 0, &n16, s.data(), static_cast<int32_t>(s.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) err = U_ZERO_ERROR;
  FLEXSP_CHECK(U_SUCCESS(err), "ICU: cannot convert text to UTF-16 ({})", u_errorName(err));
  std::vector<UChar> src(static_cast<size_t>(n16));
  u_strFromUTF8(src.data(), n16, nullptr, s.data(), static_cast<int32_t>(s.size()), &err);
  FLEXSP_CHECK(U_SUCCESS(err), "ICU: cannot convert text to UTF-16 ({})", u_errorName(err));
  if (unorm2_isNormalized(nfc, src.data(), n16, &err) && U_SUCCESS(err)) return std::string(s);
  err = U_ZERO_ERROR;
  std::vector<UChar> dst(src.size() + src.size() / 2 + 16);
  int32_t nd = unorm2_normalize(nfc, src.data(), n16, dst.data(), static_cast<int32_t>(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    dst.resize(static_cast<size_t>(nd));
    nd = unorm2_normalize(nfc, src.data(), n16, dst.data(), nd, &err);
  }
  FLEXSP_CHECK(U_SUCCESS(err), "ICU: NFC failed ({})", u_errorName(err));
  int32_t n8 = 0;
  u_strToUTF8(nullptr, 0, &n8, dst.data(), nd, &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) err = U_ZERO_ERROR;
  std::string out(static_cast<size_t>(n8), '\0');
  u_strToUTF8(out.data(), n8, nullptr, dst.data(), nd, &err);
  FLEXSP_CHECK(U_SUCCESS(err), "ICU: cannot convert text to UTF-8 ({})", u_errorName(err));
  return out;
}

char32_t utf8_decode(std::string_view s, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[k])); };
  const char32_t c = b(i);
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  if (c < 0xE0) {
    *len = 2;
    return ((c & 0x1F) << 6) | (b(i + 1) & 0x3F);
  }
  if (c < 0xF0) {
    *len = 3;
    return ((c & 0x0F) << 12) | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
  }
  *len = 4;
  return ((c & 0x07) << 18) | ((b(i + 1) & 0x3F) << 12) | ((b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
}

size_t utf8_prev(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace flexsp
