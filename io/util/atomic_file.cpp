#include "io/util/atomic_file.h"

#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

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

namespace {

// Bytes an unprivileged writer can still use on the file system holding dir; the maximum
// when that cannot be told.
uint64_t free_bytes(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

}  // namespace

void check_room(const std::string& path, uint64_t bytes, const std::string& what) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const uint64_t have = free_bytes(dir);
  FLEXSP_CHECK(have >= bytes, "{}: not enough space in {}: {} needs {:.1f} MB, {:.1f} MB are free", path, dir,
               what, bytes / 1e6, have / 1e6);
}

}  // namespace flexsp
