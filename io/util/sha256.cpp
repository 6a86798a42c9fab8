// SHA-256 through OpenSSL's EVP interface (see sha256.h); files are read in blocks.
#include "io/util/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "lib/util/error.h"

namespace flexsp {

namespace {

using Ctx = std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)>;

Ctx start() {
  Ctx ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  FLEXSP_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "SHA-256: cannot start a digest");
  return ctx;
}

std::string finish(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  FLEXSP_CHECK(EVP_DigestFinal_ex(ctx, md, &n) == 1, "SHA-256: cannot finish a digest");
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  Ctx ctx = start();
  EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  return finish(ctx.get());
}

std::string sha256_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  FLEXSP_CHECK(f != nullptr, "{}: cannot open ({})", path, std::strerror(errno));
  Ctx ctx = start();
  std::vector<char> buf(size_t(1) << 20);
  for (;;) {
    const size_t got = std::fread(buf.data(), 1, buf.size(), f.get());
    FLEXSP_CHECK(got == buf.size() || !std::ferror(f.get()), "{}: read error ({})", path, std::strerror(errno));
    EVP_DigestUpdate(ctx.get(), buf.data(), got);
    if (got < buf.size()) break;
  }
  return finish(ctx.get());
}

}  // namespace flexsp
