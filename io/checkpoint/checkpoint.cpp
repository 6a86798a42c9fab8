// Checkpoint files (see checkpoint.h for the layout and the choices). This file: the
// per-rank reader, `inspect`'s verification, `latest` and the directory rules; the writer
// is writer.cpp.
#include "io/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "io/checkpoint/checksum.h"
#include "io/checkpoint/file_format.h"
#include "io/checkpoint/layout.h"
#include "io/checkpoint/raw_io.h"
#include "io/hdf5/h5.h"
#include "io/weights/weights.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace flexsp {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kSchemaVersion = 1;

int64_t geti(hid_t obj, const char* name) { return h5::read_attr_int(obj, name); }

// Selects block elements [a, b) (row-major in v's block; valid rows) in the full tensor's
// dataspace, OR'ed with what is selected.
void select_range(hid_t space, const ParamView& v, int64_t a, int64_t b, bool& first) {
  auto block = [&](hsize_t r, hsize_t c, hsize_t nr, hsize_t nc) {
    const H5S_seloper_t op = first ? H5S_SELECT_SET : H5S_SELECT_OR;
    first = false;
    r += static_cast<hsize_t>(v.row0);
    c += static_cast<hsize_t>(v.col0);
    if (v.is_1d) {
      const hsize_t start = r * static_cast<hsize_t>(v.full_cols) + c, count = nr * nc;
      h5::check_status(H5Sselect_hyperslab(space, op, &start, nullptr, &count, nullptr), v.name);
    } else {
      const hsize_t start[2] = {r, c}, count[2] = {nr, nc};
      h5::check_status(H5Sselect_hyperslab(space, op, start, nullptr, count, nullptr), v.name);
    }
  };
  const int64_t C = v.cols;
  int64_t r0 = a / C, c0 = a % C;
  const int64_t r1 = b / C, c1 = b % C;
  if (r0 == r1) return block(r0, c0, 1, c1 - c0);
  if (c0 > 0) block(r0++, c0, 1, C - c0);
  if (r1 > r0) block(r0, 0, r1 - r0, C);
  if (c1 > 0) block(r1, 0, 1, c1);
}

}  // namespace

std::string checkpoint_file_name(int64_t step) { return fmt::format("step_{:08}.h5", step); }

std::vector<int64_t> checkpoint_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return steps;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() < 9 || n.rfind("step_", 0) != 0 || n.substr(n.size() - 3) != ".h5") continue;
    const std::string digits = n.substr(5, n.size() - 8);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; }) || digits.size() > 18)
      continue;
    steps.push_back(std::stoll(digits));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string checkpoint_resolve(const std::string& resume, const std::string& dir) {
  std::error_code ec;
  if (resume != "auto") {
    FLEXSP_CHECK(fs::is_regular_file(resume, ec), "--resume {}: no such file", resume);
    return resume;
  }
  FLEXSP_CHECK(!dir.empty(), "--resume auto: checkpoint.dir is not set");
  const fs::path latest = fs::path(dir) / "latest";
  if (!fs::exists(latest, ec)) {
    const std::vector<int64_t> steps = checkpoint_steps(dir);
    FLEXSP_CHECK(steps.empty(),
                 "{}: holds checkpoints (newest {}) but no 'latest' file; resume one with --resume PATH",
                 dir, checkpoint_file_name(steps.empty() ? 0 : steps.back()));
    return "";
  }
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  FLEXSP_CHECK(!name.empty() && name.find('/') == std::string::npos,
               "{}: malformed (expected one line naming a checkpoint file)", latest.string());
  const fs::path path = fs::path(dir) / name;
  FLEXSP_CHECK(fs::is_regular_file(path, ec), "{}: names {}, which does not exist", latest.string(),
               path.string());
  return path.string();
}

CheckpointMeta checkpoint_read_meta(const std::string& path, const ModelConfig& c) {
  h5::Id f = h5::open_file(path);
  const std::string schema =
      h5::has_attr(f.get(), "schema") ? h5::read_attr_string(f.get(), "schema") : std::string();
  FLEXSP_CHECK(schema == "flexsp.checkpoint", "{}: not a flexsp checkpoint (schema '{}')", path, schema);
  const int64_t version = h5::read_attr_int(f.get(), "schema_version");
  FLEXSP_CHECK(version == kSchemaVersion, "{}: checkpoint schema_version {} is not supported (expected {})",
               path, version, kSchemaVersion);
  FLEXSP_CHECK(h5::exists(f.get(), "model"), "{}: no /model group", path);
  {
    h5::Quiet q;
    h5::Id g = h5::group_id(h5::check(H5Gopen2(f.get(), "model", H5P_DEFAULT), path + ": cannot open /model"));
    check_model_attrs(read_model_attrs(g.get()), c, path);
  }
  CheckpointMeta m;
  const hid_t id = f.get();
  m.step = geti(id, "step");
  m.consumed_tokens = geti(id, "consumed_tokens");
  m.seed = static_cast<uint64_t>(geti(id, "seed"));
  if (h5::has_attr(id, "data_sources"))
    m.cursor = cursor_from_json(h5::read_attr_string(id, "data_sources"), path);
  else  // one source, written before per-source cursors
    m.cursor.sources = {{geti(id, "data_epoch"), geti(id, "data_position"), geti(id, "data_piece"), 0}};
  m.world_size = geti(id, "world_size");
  m.zero = geti(id, "zero");
  m.adam_steps = geti(id, "adam_steps");
  m.config_ini = h5::read_attr_string(id, "config");
  m.version = h5::read_attr_string(id, "flexsp_version");
  FLEXSP_CHECK(m.step >= 0 && m.adam_steps >= 0 && m.consumed_tokens >= 0,
               "{}: attributes step / adam_steps / consumed_tokens are negative", path);
  return m;
}

namespace {

// Reads this rank's pieces of a tensor stored otherwise than raw float32 (HDF5 converts).
void read_through_hdf5(const StoredTensor& st, const std::string& path, const std::string& full,
                       const ParamView& v, const ShardRanges& s, float* buf) {
  h5::Quiet q;
  h5::Id space = h5::space_id(H5Dget_space(st.ds.get()));
  for (const Piece& p : pieces_of(s, false, v.offset, valid_end(v))) {
    bool first = true;
    select_range(space.get(), v, p.begin - v.offset, p.end - v.offset, first);
    const hsize_t count = static_cast<hsize_t>(p.end - p.begin);
    h5::Id mem = h5::space_id(h5::check(H5Screate_simple(1, &count, nullptr), v.name));
    h5::check_status(H5Dread(st.ds.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, buf + p.at),
                     fmt::format("{}: cannot read /{}", path, full));
  }
}

// Reads the runs (direct I/O where the file system has it: raw_io.h) while a second
// thread hashes each tensor's share (cover pieces; copy 0 of a tp-replicated tensor) as
// soon as the reads have passed its end in the file, so the checksum costs no time of its
// own. offsets: kNoOffset for tensors
// already read (through HDF5).
void read_and_hash(const std::string& path, const ParamTable& t, const std::vector<uint64_t>& offsets,
                   const std::vector<FileRun>& runs, const ShardRanges* const shards[kCheckpointGroups],
                   float* const bufs[kCheckpointGroups], std::vector<uint64_t>& sums) {
  const size_t n = t.views.size();
  std::vector<uint64_t> end(offsets.size(), 0);  // where each tensor ends in the file
  for (size_t j = 0; j < offsets.size(); ++j)
    if (offsets[j] != kNoOffset) {
      uint64_t numel = 1;
      for (const int64_t d : t.views[j % n].full_shape()) numel *= static_cast<uint64_t>(d);
      end[j] = offsets[j] + 4 * numel;
    }
  std::vector<size_t> order(offsets.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return end[a] < end[b]; });
  std::mutex mu;
  std::condition_variable cv;
  uint64_t progress = 0;  // every run below this byte is read
  bool failed = false;
  std::thread hasher([&] {
    for (const size_t j : order) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return failed || progress >= end[j]; });
        if (failed) return;
      }
      const int k = static_cast<int>(j / n);
      const ParamView& v = t.views[j % n];
      if (v.tp_replica != 0) continue;
      for (const Piece& p : pieces_of(*shards[k], true, v.offset, valid_end(v)))
        sums[j] += block_checksum(v, bufs[k] + p.at, p.begin - v.offset, p.end - v.offset);
    }
  });
  auto advance = [&](uint64_t to, bool fail) {
    {
      std::lock_guard<std::mutex> lock(mu);
      progress = to;
      failed = fail;
    }
    cv.notify_all();
  };
  try {
    const int direct_fd = open_direct_for_read(path);
    const int fd = direct_fd >= 0 ? direct_fd : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    FLEXSP_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
    struct Close {
      int fd;
      ~Close() { ::close(fd); }
    } closer{fd};
    if (direct_fd >= 0) {
      read_runs_direct(fd, runs, bufs, path, [&](uint64_t to) { advance(to, false); });
    } else {  // a file system without direct I/O (tmpfs): the page cache is memory anyway
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
      for (size_t r = 0; r < runs.size();) {
        size_t e = r;
        for (uint64_t bytes = 0; e < runs.size() && bytes < kRawChunk; ++e) bytes += 4 * static_cast<uint64_t>(runs[e].n);
        read_runs(fd, runs, r, e, bufs, path);
        advance(runs[e - 1].file + 4 * static_cast<uint64_t>(runs[e - 1].n), false);
        r = e;
      }
    }
  } catch (...) {
    advance(0, true);
    hasher.join();
    throw;
  }
  advance(~0ull, false);
  hasher.join();
}

// The ranks of comm that hold the same elements of a buffer as this one (the replicas of
// s: equal ranges of equal views), ordered by replica, or MPI_COMM_NULL where s has one
// replica or the ranks do not line up that way (then every rank reads all it holds).
// Collective over comm.
MPI_Comm replica_comm(MPI_Comm comm, const ParamTable& t, const ShardRanges& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over what makes two ranks' buffers equal
  auto mix = [&h](int64_t x) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((static_cast<uint64_t>(x) >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  mix(s.replicas);
  for (const auto& [b, e] : s.ranges) {
    mix(b);
    mix(e);
  }
  for (const ParamView& v : t.views)
    for (const int64_t x : {v.offset, v.rows, v.cols, v.row0, v.col0, v.full_rows, v.full_cols}) mix(x);
  MPI_Comm out = MPI_COMM_NULL;
  MPI_Comm_split(comm, s.replicas > 1 ? static_cast<int>(h & 0x3fffffff) : MPI_UNDEFINED, s.replica, &out);
  int ok = 1;
  if (out != MPI_COMM_NULL) {
    int size = 0, rank = 0;
    MPI_Comm_size(out, &size);
    MPI_Comm_rank(out, &rank);
    uint64_t lo = h, hi = h;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, out);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, out);
    ok = size == s.replicas && rank == s.replica && lo == hi;
  }
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  if (!ok && out != MPI_COMM_NULL) MPI_Comm_free(&out);
  return ok ? out : MPI_COMM_NULL;
}

// The replicas' shares of s's ranges (pieces_of's cover) through a node's shared memory,
// kSlot elements of each share a round: every rank copies its share's next slot into its
// window, then the others' out of theirs. One copy in and one out per element, whatever
// the MPI library's transport (Open MPI without single-copy moves a large broadcast in
// 32 KiB fragments through two copies and a handshake each: 93 MB/s on 4 ranks of 2 cores
// where the shared window moves GB/s). False, doing nothing, when the replicas span nodes
// (grid_node: this rank's node as the grid numbers them) or do not share memory.
bool exchange_on_node(MPI_Comm replicas, int grid_node, const ShardRanges& s, float* buf) {
  MPI_Comm shared = MPI_COMM_NULL, node = MPI_COMM_NULL;
  MPI_Comm_split_type(replicas, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
  MPI_Comm_split(shared, grid_node, 0, &node);
  MPI_Comm_free(&shared);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  int all = node_size == s.replicas;  // the same answer on every replica
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, replicas);
  if (!all) {
    MPI_Comm_free(&node);
    return false;
  }
  constexpr int64_t kSlot = int64_t(16) << 20;  // elements a rank passes on per round
  float* mine = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  MPI_Win_allocate_shared(kSlot * static_cast<MPI_Aint>(sizeof(float)), sizeof(float), MPI_INFO_NULL, node,
                          &mine, &win);
  std::vector<const float*> slot(static_cast<size_t>(s.replicas));
  for (int q = 0; q < s.replicas; ++q) {
    MPI_Aint size = 0;
    int unit = 0;
    float* p = nullptr;
    MPI_Win_shared_query(win, q, &size, &unit, &p);
    slot[q] = p;
  }
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
  int64_t at = 0;
  for (const auto& [b, e] : s.ranges) {
    const int64_t len = e - b, R = s.replicas;
    auto lo = [&](int q) { return at + len * q / R; };
    auto hi = [&](int q) { return at + len * (q + 1) / R; };
    auto bytes = [&](int q, int64_t off) {  // of q's share in the round at `off`
      return 4 * static_cast<size_t>(std::clamp<int64_t>(hi(q) - lo(q) - off, 0, kSlot));
    };
    for (int64_t off = 0; off < (len + R - 1) / R; off += kSlot) {
      std::memcpy(mine, buf + lo(s.replica) + off, bytes(s.replica, off));
      MPI_Win_sync(win);
      MPI_Barrier(node);
      MPI_Win_sync(win);
      for (int q = 0; q < R; ++q)
        if (q != s.replica)
          std::memcpy(buf + lo(q) + off, slot[q], bytes(q, off));
      MPI_Barrier(node);  // the slots are free again
    }
    at += len;
  }
  MPI_Win_unlock_all(win);
  MPI_Win_free(&win);
  MPI_Comm_free(&node);
  return true;
}

// Every replica's share of s's ranges (pieces_of's cover) from that replica to the
// others: after it, buf holds all of s wherever each rank read its share. Collective over
// replicas.
void exchange_shares(MPI_Comm replicas, int grid_node, const ShardRanges& s, float* buf) {
  if (exchange_on_node(replicas, grid_node, s, buf)) return;
  constexpr int64_t kMaxCount = int64_t(1) << 26;  // elements per broadcast (an int count)
  int64_t at = 0;
  for (const auto& [b, e] : s.ranges) {
    const int64_t len = e - b;
    for (int r = 0; r < s.replicas; ++r)
      for (int64_t lo = at + len * r / s.replicas, hi = at + len * (r + 1) / s.replicas; lo < hi; lo += kMaxCount)
        MPI_Bcast(buf + lo, static_cast<int>(std::min(kMaxCount, hi - lo)), MPI_FLOAT, r, replicas);
    at += len;
  }
}

}  // namespace

void checkpoint_load(MPI_Comm comm, int node, const std::string& path, const ModelConfig& c,
                     const ParamTable& t, const ShardRanges& pshards, float* params,
                     const ShardRanges& sshards, float* exp_avg, float* exp_avg_sq) {
  const size_t n = t.views.size();
  std::vector<uint64_t> sums(kCheckpointGroups * n, 0), expected(sums.size(), 0);
  float* const bufs[kCheckpointGroups] = {params, exp_avg, exp_avg_sq};
  const ShardRanges* const shards[kCheckpointGroups] = {&pshards, &sshards, &sshards};
  // Replicas read a share each and pass it on: one read of the file's bytes, not one per
  // replica (a memory copy is cheaper than a disk read).
  MPI_Comm pcomm = replica_comm(comm, t, pshards), scomm = replica_comm(comm, t, sshards);
  struct Free {
    MPI_Comm* c;
    ~Free() {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
  } free_p{&pcomm}, free_s{&scomm};
  const MPI_Comm share[kCheckpointGroups] = {pcomm, scomm, scomm};
  RunPart parts[kCheckpointGroups];
  for (int k = 0; k < kCheckpointGroups; ++k) parts[k] = share[k] != MPI_COMM_NULL ? kRunShare : kRunHeld;
  agree(comm, [&] {
    std::vector<uint64_t> offsets(sums.size(), kNoOffset);
    {
      h5::Id f = h5::open_file(path);
      {
        h5::Quiet q;
        h5::Id g = h5::group_id(h5::check(H5Gopen2(f.get(), "model", H5P_DEFAULT), path + ": cannot open /model"));
        check_model_attrs(read_model_attrs(g.get()), c, path);
      }
      for (int k = 0; k < kCheckpointGroups; ++k)
        for (size_t i = 0; i < n; ++i) {
          const ParamView& v = t.views[i];
          const std::string full = fmt::format("{}/{}", kCheckpointGroupNames[k], v.name);
          const StoredTensor st = open_stored_tensor(f.get(), path, full, v);
          expected[k * n + i] = st.checksum;
          offsets[k * n + i] = st.offset;
          if (st.offset == kNoOffset) read_through_hdf5(st, path, full, v, *shards[k], bufs[k]);
        }
    }
    read_and_hash(path, t, offsets, file_runs(t, offsets, shards, parts), shards, bufs, sums);
  });
  for (int k = 0; k < kCheckpointGroups; ++k)
    if (share[k] != MPI_COMM_NULL) exchange_shares(share[k], node, *shards[k], bufs[k]);
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, comm);
  agree(comm, [&] {
    for (size_t j = 0; j < sums.size(); ++j)
      FLEXSP_CHECK(sums[j] == expected[j],
                   "{}: checksum mismatch in /{}/{} (stored {:016x}, computed {:016x}): the file is corrupt",
                   path, kCheckpointGroupNames[j / n], t.views[j % n].name, expected[j], sums[j]);
  });
}

std::vector<CheckpointTensor> checkpoint_verify(const std::string& path) {
  h5::Id f = h5::open_file(path);
  ModelConfig c;
  {
    h5::Quiet q;
    FLEXSP_CHECK(h5::exists(f.get(), "model"), "{}: no /model group", path);
    h5::Id g = h5::group_id(h5::check(H5Gopen2(f.get(), "model", H5P_DEFAULT), path + ": cannot open /model"));
    c = read_model_attrs(g.get());
  }
  const ParamTable t = make_param_table(c);
  std::vector<CheckpointTensor> out;
  std::vector<float> buf;
  for (const char* group : kCheckpointGroupNames) {
    for (const ParamView& v : t.views) {
      CheckpointTensor ct{fmt::format("{}/{}", group, v.name), v.shape(), false};
      const StoredTensor st = open_stored_tensor(f.get(), path, ct.name, v);
      buf.resize(static_cast<size_t>(v.numel()));
      h5::Quiet q;
      h5::check_status(H5Dread(st.ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()),
                       fmt::format("{}: cannot read /{}", path, ct.name));
      ct.ok = checksum_f32(buf.data(), 0, v.numel()) == st.checksum;
      out.push_back(std::move(ct));
    }
  }
  return out;
}

}  // namespace flexsp
