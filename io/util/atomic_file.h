// Files that appear whole or not at all (docs/errors.md: nothing existing is half-written
// or lost): write to temp_path(path), then publish_file(tmp, path) renames it into place.
// A rename within one directory is atomic on POSIX file systems. Checkpoints add an
// fsync and their own names (io/checkpoint) but follow the same rule.
#pragma once

#include <string>

namespace flexsp {

// "<path>.tmp.<pid>": unique per process, next to the target (same file system).
std::string temp_path(const std::string& path);

// Renames tmp to path, replacing it. On failure removes tmp and throws Error naming path.
void publish_file(const std::string& tmp, const std::string& path);

}  // namespace flexsp
