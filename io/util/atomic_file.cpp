#include "io/util/atomic_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "lib/util/error.h"

namespace flexsp {

std::string temp_path(const std::string& path) {
  return fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
}

void publish_file(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) == 0) return;
  const std::string why = std::strerror(errno);
  std::remove(tmp.c_str());
  fail(fmt::format("{}: cannot rename {} into place: {}", path, tmp, why));
}

}  // namespace flexsp
