// Files that appear whole or not at all (docs/errors.md: nothing existing is half-written
// or lost): write to temp_path(path), then publish_file(tmp, path) renames it into place.
// A rename within one directory is atomic on POSIX file systems. Checkpoints add an
// fsync and their own names (io/checkpoint) but follow the same rule.
#pragma once

#include <cstdint>
#include <string>

namespace flexsp {

// "<path>.tmp.<pid>": unique per process, next to the target (same file system).
std::string temp_path(const std::string& path);

// Renames tmp to path, replacing it. On failure removes tmp and throws Error naming path.
void publish_file(const std::string& tmp, const std::string& path);

// Throws Error "PATH: not enough space in DIR: WHAT needs N MB, M MB are free" unless the
// file system holding path's directory has `bytes` free. Writers call it before writing
// what they know the size of: HDF5 does not recover from a write that fails midway (a
// file it cannot close crashes or hangs its clean-up at exit; in parallel, ranks part
// ways inside collective calls), so a full disk is best found before HDF5 writes.
void check_room(const std::string& path, uint64_t bytes, const std::string& what);

}  // namespace flexsp
