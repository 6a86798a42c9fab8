// Text clean-up before a Hugging Face tokenizer sees it. `tokenizers` takes Python
// strings, so text read from files reaches it decoded: invalid UTF-8 replaced by U+FFFD the
// way Python's bytes.decode("utf-8", errors="replace") does it (one U+FFFD per maximal
// ill-formed subpart, Unicode's recommended practice), which is what utf8_repair() does;
// the ids of a file are then the ids of that string. NFC (the normalizer of Qwen's
// tokenizer.json) goes through ICU, Debian's libicu.
#pragma once

#include <string>
#include <string_view>

namespace flexsp {

// True when every byte is < 0x80.
bool is_ascii(std::string_view s);

// s with every ill-formed UTF-8 subpart replaced by U+FFFD (EF BF BD); s itself when valid.
std::string utf8_repair(std::string_view s);

// Unicode normalization form C of valid UTF-8 text.
std::string utf8_nfc(std::string_view s);

// The code point starting at s[i] (valid UTF-8) and its length in bytes.
char32_t utf8_decode(std::string_view s, size_t i, size_t* len);

// The start of the code point that ends just before byte `end` (valid UTF-8, end > 0).
size_t utf8_prev(std::string_view s, size_t end);

}  // namespace flexsp
