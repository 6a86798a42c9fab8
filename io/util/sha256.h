// SHA-256 of files and buffers, as lowercase hex, through OpenSSL's libcrypto (Debian's
// libssl-dev): a dataset records the tokenizer file it was packed with by this digest.
#pragma once

#include <string>
#include <string_view>

namespace flexsp {

std::string sha256_hex(std::string_view bytes);

// Throws Error naming path when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace flexsp
