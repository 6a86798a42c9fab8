// Checkpoint files (see checkpoint.h for the layout and the choices). This file: the
// checksum, shard pieces and hyperslab selections, the collective writer, the per-rank
// reader, `latest` and the directory rules.
#include "io/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/hdf5/h5.h"
#include "io/util/atomic_file.h"
#include "io/weights/weights.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace flexsp {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kSchemaVersion = 1;
constexpr const char* kAlgorithm =
    "sum mod 2^64 of splitmix64(index * 0x9e3779b97f4a7c15 + float32 bits) over the elements";
const char* const kGroups[3] = {"model", "optimizer/exp_avg", "optimizer/exp_avg_sq"};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A piece of one tensor: flat elements [begin, end) at offset `at` of a concatenated buffer.
struct Piece {
  int64_t begin = 0, end = 0, at = 0;
};

// The pieces of flat [tb, te) in s's ranges (cover: only this rank's share of each range).
std::vector<Piece> pieces_of(const ShardRanges& s, bool cover, int64_t tb, int64_t te) {
  std::vector<Piece> out;
  int64_t at = 0;
  for (const auto& [b, e] : s.ranges) {
    int64_t lo = b, hi = e;
    if (cover) {
      const int64_t len = e - b;
      lo = b + len * s.replica / s.replicas;
      hi = b + len * (s.replica + 1) / s.replicas;
    }
    lo = std::max(lo, tb);
    hi = std::min(hi, te);
    if (lo < hi) out.push_back({lo, hi, at + (lo - b)});
    at += e - b;
  }
  return out;
}

// The tensor's shape in the file: the full (tp = 1) tensor, whatever block v is of it.
std::vector<hsize_t> dims_of(const ParamView& v) {
  const std::vector<int64_t> s = v.full_shape();
  return std::vector<hsize_t>(s.begin(), s.end());
}

// The elements of a piece of v that the file holds: not the vocabulary padding rows past
// the tensor's end (they come last in the block).
int64_t valid_end(const ParamView& v) { return v.offset + v.valid_rows() * v.cols; }

// The checksum terms of block elements [a, b) (valid rows), indexed in the full tensor.
uint64_t block_checksum(const ParamView& v, const float* data, int64_t a, int64_t b) {
  uint64_t sum = 0;
  for (int64_t e = a; e < b;) {
    const int64_t n = std::min(b, (e / v.cols + 1) * v.cols) - e;  // to the row's end
    sum += checksum_f32(data + (e - a), v.full_index(e), n);
    e += n;
  }
  return sum;
}

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

h5::Id make_group(hid_t loc, const char* name) {
  return h5::group_id(h5::check(H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                fmt::format("cannot create group /{}", name)));
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;  // best effort: durability, not correctness
  ::fsync(fd);
  ::close(fd);
}

// Rank 0, after the file is complete: rename it into place, point `latest` at it, prune.
// The new `latest` is written (the last write, which a full disk can still refuse) before
// anything becomes visible; on any failure the new files go and the old state stays.
void publish(const std::string& dir, const std::string& tmp, const std::string& path, int keep) {
  const std::string latest = (fs::path(dir) / "latest").string(), ltmp = latest + ".tmp";
  try {
    fsync_path(tmp);
    {
      std::ofstream out(ltmp, std::ios::trunc);
      out << fs::path(path).filename().string() << "\n";
      out.close();
      FLEXSP_CHECK(out.good(), "{}: cannot write: {}", ltmp, std::strerror(errno));
    }
    fsync_path(ltmp);
    FLEXSP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "{}: cannot rename {} into place: {}",
                 path, tmp, std::strerror(errno));
    if (std::rename(ltmp.c_str(), latest.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      std::remove(path.c_str());  // `latest` must name the newest checkpoint (resume refuses newer ones)
      fail(fmt::format("{}: cannot replace: {}", latest, why));
    }
  } catch (...) {
    std::remove(ltmp.c_str());
    std::remove(tmp.c_str());
    throw;
  }
  fsync_path(dir);
  const std::vector<int64_t> steps = checkpoint_steps(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i) {
    std::error_code ec;
    fs::remove(fs::path(dir) / checkpoint_file_name(steps[i]), ec);
  }
}

int64_t geti(hid_t obj, const char* name) { return h5::read_attr_int(obj, name); }

// The handles of a save in progress, closed children first.
struct SaveFile {
  h5::Id file;
  std::vector<h5::Id> groups;  // model, optimizer/exp_avg, optimizer/exp_avg_sq
  std::vector<h5::Id> dsets;
  void close(const std::string& path) {
    dsets.clear();
    groups.clear();
    file.close_or_throw(fmt::format("{}: cannot write (close)", path));
  }
};

// The bytes a checkpoint of t takes: three float32 copies of the whole tensors (t may be a
// tensor-parallel block of them), and room for HDF5's metadata (object headers,
// attributes, the run config).
uint64_t checkpoint_bytes(const ParamTable& t) {
  uint64_t b = 64 << 10;
  for (const ParamView& v : t.views) {
    uint64_t numel = 1;
    for (const int64_t d : v.full_shape()) numel *= static_cast<uint64_t>(d);
    b += 3 * (4 * numel + 2048);
  }
  return b;
}

// The data cursor, one object per source: [{"epoch", "position", "piece", "tokens"}, ...].
std::string cursor_json(const SamplerCursor& c) {
  nlohmann::json j = nlohmann::json::array();
  for (const SourceCursor& k : c.sources)
    j.push_back({{"epoch", k.epoch}, {"position", k.position}, {"piece", k.piece}, {"tokens", k.tokens}});
  return j.dump();
}

SamplerCursor cursor_from_json(const std::string& text, const std::string& path) {
  SamplerCursor c;
  try {
    for (const nlohmann::json& k : nlohmann::json::parse(text))
      c.sources.push_back({k.at("epoch").get<int64_t>(), k.at("position").get<int64_t>(),
                           k.at("piece").get<int64_t>(), k.at("tokens").get<int64_t>()});
  } catch (const nlohmann::json::exception&) {
    fail(fmt::format("{}: attribute data_sources is not a data cursor ('{}')", path, text));
  }
  return c;
}

// After an agreed failure of a save, on every rank: close the file and remove it. The
// metadata is already on disk (phase 1), so closing writes nothing new; emptying the file
// first frees its space all the same, so that whatever HDF5 still writes on close goes
// through on every rank (a close failing on some ranks only would hang the others, and a
// file left open crashes HDF5's clean-up at exit); then the file goes. Earlier
// checkpoints and `latest` are never touched.
void abandon(MPI_Comm comm, int rank, const std::string& tmp, SaveFile& f) {
  if (rank == 0) (void)::truncate(tmp.c_str(), 0);  // fails harmlessly when there is no file
  MPI_Barrier(comm);
  f.dsets.clear();
  f.groups.clear();
  f.file.reset();
  MPI_Barrier(comm);
  if (rank == 0) std::remove(tmp.c_str());
}

}  // namespace

uint64_t checksum_f32(const float* data, int64_t first, int64_t n) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof bits);
    sum += splitmix64(static_cast<uint64_t>(first + i) * 0x9e3779b97f4a7c15ull + bits);
  }
  return sum;
}

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

std::string checkpoint_save(MPI_Comm comm, const std::string& dir, int keep, const ModelConfig& c,
                            const ParamTable& t, const CheckpointMeta& meta,
                            const CheckpointShard& mine) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const std::string path = (fs::path(dir) / checkpoint_file_name(meta.step)).string();
  const std::string tmp = path + ".partial";
  const float* bufs[3] = {mine.params, mine.exp_avg, mine.exp_avg_sq};
  const size_t n = t.views.size();

  // Phase 0: room for the whole file (rank 0), and the checksums (this rank's share,
  // summed over all ranks): both before the file exists.
  agree(comm, [&] {
    if (rank == 0) check_room(path, checkpoint_bytes(t), "a checkpoint");
  });
  // This rank's pieces of tensor v: one copy of a tensor that tp ranks replicate writes it.
  auto my_pieces = [&](const ParamView& v) {
    return v.tp_replica == 0 ? pieces_of(mine.shards, true, v.offset, valid_end(v)) : std::vector<Piece>{};
  };
  std::vector<uint64_t> sums(3 * n, 0);
  for (int k = 0; k < 3; ++k)
    for (size_t i = 0; i < n; ++i) {
      const ParamView& v = t.views[i];
      for (const Piece& p : my_pieces(v))
        sums[k * n + i] += block_checksum(v, bufs[k] + p.at, p.begin - v.offset, p.end - v.offset);
    }
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, comm);

  SaveFile f;
  h5::Id dxpl;
  try {
    // Phase 1: all metadata (collective calls; every rank passes the same values): the
    // file, groups, datasets with their space allocated, attributes; flushed. Raw data
    // comes after, so the metadata is on disk before a write can fail.
    agree(comm, [&] {
      h5::Quiet q;
      h5::Id fapl = h5::plist_id(h5::check(H5Pcreate(H5P_FILE_ACCESS), "cannot create a file access list"));
      h5::check_status(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), "H5Pset_fapl_mpio");
      h5::check_status(H5Pset_all_coll_metadata_ops(fapl.get(), true), "H5Pset_all_coll_metadata_ops");
      h5::check_status(H5Pset_coll_metadata_write(fapl.get(), true), "H5Pset_coll_metadata_write");
      f.file = h5::create_file(tmp, fapl.get());
      h5::Id dcpl = h5::plist_id(h5::check(H5Pcreate(H5P_DATASET_CREATE), "cannot create a dataset list"));
      H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
      H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);
      dxpl = h5::plist_id(h5::check(H5Pcreate(H5P_DATASET_XFER), "cannot create a transfer list"));
      h5::check_status(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio");
      f.groups.push_back(make_group(f.file.get(), "model"));
      write_model_attrs(f.groups.back().get(), c);
      h5::Id opt = make_group(f.file.get(), "optimizer");
      f.groups.push_back(make_group(opt.get(), "exp_avg"));
      f.groups.push_back(make_group(opt.get(), "exp_avg_sq"));
      for (int k = 0; k < 3; ++k)
        for (size_t i = 0; i < n; ++i) {
          const ParamView& v = t.views[i];
          const std::vector<hsize_t> dims = dims_of(v);
          h5::Id space = h5::space_id(h5::check(
              H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), v.name));
          f.dsets.push_back(h5::dataset_id(h5::check(
              H5Dcreate2(f.groups[k].get(), v.name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                         dcpl.get(), H5P_DEFAULT),
              fmt::format("{}: cannot create /{}/{}", path, kGroups[k], v.name))));
          h5::write_attr(f.dsets.back().get(), "checksum", fmt::format("{:016x}", sums[k * n + i]));
        }
      const hid_t id = f.file.get();
      h5::write_attr(id, "schema", "flexsp.checkpoint");
      h5::write_attr(id, "schema_version", kSchemaVersion);
      h5::write_attr(id, "step", meta.step);
      h5::write_attr(id, "consumed_tokens", meta.consumed_tokens);
      h5::write_attr(id, "seed", static_cast<int64_t>(meta.seed));
      const SourceCursor first = meta.cursor.sources.empty() ? SourceCursor{} : meta.cursor.sources[0];
      h5::write_attr(id, "data_epoch", first.epoch);
      h5::write_attr(id, "data_position", first.position);
      h5::write_attr(id, "data_piece", first.piece);
      h5::write_attr(id, "data_sources", cursor_json(meta.cursor));
      h5::write_attr(id, "world_size", meta.world_size);
      h5::write_attr(id, "zero", meta.zero);
      h5::write_attr(id, "adam_steps", meta.adam_steps);
      h5::write_attr(id, "config", meta.config_ini);
      h5::write_attr(id, "flexsp_version", meta.version);
      h5::write_attr(id, "checksum_algorithm", kAlgorithm);
      h5::check_status(H5Fflush(id, H5F_SCOPE_GLOBAL), fmt::format("{}: cannot write (flush)", path));
    });
    // Phase 2: this rank's hyperslabs of every dataset. One agreement per dataset: a write
    // can fail on some ranks only (the MPI-IO aggregators, on a full disk), and the others
    // must not go on into the next collective write (a hang).
    std::vector<float> buf;
    for (int k = 0; k < 3; ++k)
      for (size_t i = 0; i < n; ++i)
        agree(comm, [&] {
          h5::Quiet q;
          const ParamView& v = t.views[i];
          h5::Id space = h5::space_id(h5::check(H5Dget_space(f.dsets[k * n + i].get()), v.name));
          buf.clear();
          bool first = true;
          H5Sselect_none(space.get());
          for (const Piece& p : my_pieces(v)) {
            select_range(space.get(), v, p.begin - v.offset, p.end - v.offset, first);
            buf.insert(buf.end(), bufs[k] + p.at, bufs[k] + p.at + (p.end - p.begin));
          }
          const hsize_t count = buf.size();
          if (buf.empty()) buf.push_back(0.f);  // a valid pointer for an empty selection
          h5::Id mem = h5::space_id(h5::check(H5Screate_simple(1, &count, nullptr), v.name));
          if (count == 0) H5Sselect_none(mem.get());
          h5::check_status(H5Dwrite(f.dsets[k * n + i].get(), H5T_NATIVE_FLOAT, mem.get(), space.get(),
                                    dxpl.get(), buf.data()),
                           fmt::format("{}: cannot write /{}/{}", path, kGroups[k], v.name));
        });
    // Phase 3: close.
    agree(comm, [&] { f.close(path); });
  } catch (const AgreedFailure&) {
    abandon(comm, rank, tmp, f);
    throw;
  }

  // Phase 4: rank 0 makes it visible.
  agree(comm, [&] {
    if (rank == 0) publish(dir, tmp, path, keep);
  });
  return path;
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

// Opens /<group>/<name>, checks its shape against v; returns the dataset and its checksum.
h5::Id open_tensor(hid_t file, const std::string& path, const std::string& full, const ParamView& v,
                   uint64_t* expected) {
  FLEXSP_CHECK(h5::exists(file, full), "{}: tensor /{} is missing", path, full);
  h5::Quiet q;
  h5::Id ds = h5::open_dataset(file, full);
  h5::Id space = h5::space_id(H5Dget_space(ds.get()));
  const int nd = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  std::vector<hsize_t> dims(nd > 0 ? nd : 0);
  if (nd > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  FLEXSP_CHECK(dims == dims_of(v), "{}: tensor /{} has shape [{}], expected [{}]", path, full,
               fmt::join(dims, ", "), fmt::join(v.shape(), ", "));
  h5::Id type = h5::type_id(H5Dget_type(ds.get()));
  FLEXSP_CHECK(type.valid() && H5Tget_class(type.get()) == H5T_FLOAT, "{}: tensor /{} is not float",
               path, full);
  const std::string hex = h5::has_attr(ds.get(), "checksum") ? h5::read_attr_string(ds.get(), "checksum") : "";
  char* end = nullptr;
  *expected = std::strtoull(hex.c_str(), &end, 16);
  FLEXSP_CHECK(hex.size() == 16 && end == hex.c_str() + 16, "{}: tensor /{} has no valid checksum attribute",
               path, full);
  return ds;
}

}  // namespace

void checkpoint_load(MPI_Comm comm, const std::string& path, const ModelConfig& c,
                     const ParamTable& t, const ShardRanges& pshards, float* params,
                     const ShardRanges& sshards, float* exp_avg, float* exp_avg_sq) {
  const size_t n = t.views.size();
  std::vector<uint64_t> sums(3 * n, 0), expected(3 * n, 0);
  float* bufs[3] = {params, exp_avg, exp_avg_sq};
  const ShardRanges* shards[3] = {&pshards, &sshards, &sshards};
  agree(comm, [&] {
    h5::Id f = h5::open_file(path);
    {
      h5::Quiet q;
      h5::Id g = h5::group_id(h5::check(H5Gopen2(f.get(), "model", H5P_DEFAULT), path + ": cannot open /model"));
      check_model_attrs(read_model_attrs(g.get()), c, path);
    }
    for (int k = 0; k < 3; ++k) {
      for (size_t i = 0; i < n; ++i) {
        const ParamView& v = t.views[i];
        const std::string full = fmt::format("{}/{}", kGroups[k], v.name);
        h5::Id ds = open_tensor(f.get(), path, full, v, &expected[k * n + i]);
        h5::Quiet q;
        h5::Id space = h5::space_id(H5Dget_space(ds.get()));
        for (const Piece& p : pieces_of(*shards[k], false, v.offset, valid_end(v))) {
          bool first = true;
          select_range(space.get(), v, p.begin - v.offset, p.end - v.offset, first);
          const hsize_t count = static_cast<hsize_t>(p.end - p.begin);
          h5::Id mem = h5::space_id(h5::check(H5Screate_simple(1, &count, nullptr), v.name));
          h5::check_status(H5Dread(ds.get(), H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT,
                                   bufs[k] + p.at),
                           fmt::format("{}: cannot read /{}", path, full));
        }
        if (v.tp_replica != 0) continue;  // copy 0 of a replicated tensor checks it
        for (const Piece& p : pieces_of(*shards[k], true, v.offset, valid_end(v)))
          sums[k * n + i] += block_checksum(v, bufs[k] + p.at, p.begin - v.offset, p.end - v.offset);
      }
    }
  });
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, comm);
  agree(comm, [&] {
    for (size_t j = 0; j < sums.size(); ++j)
      FLEXSP_CHECK(sums[j] == expected[j],
                   "{}: checksum mismatch in /{}/{} (stored {:016x}, computed {:016x}): the file is corrupt",
                   path, kGroups[j / n], t.views[j % n].name, expected[j], sums[j]);
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
  for (const char* group : kGroups) {
    for (const ParamView& v : t.views) {
      CheckpointTensor ct{fmt::format("{}/{}", group, v.name), v.shape(), false};
      uint64_t expected = 0;
      h5::Id ds = open_tensor(f.get(), path, ct.name, v, &expected);
      buf.resize(static_cast<size_t>(v.numel()));
      h5::Quiet q;
      h5::check_status(H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()),
                       fmt::format("{}: cannot read /{}", path, ct.name));
      ct.ok = checksum_f32(buf.data(), 0, v.numel()) == expected;
      out.push_back(std::move(ct));
    }
  }
  return out;
}

}  // namespace flexsp
