// The HDF5 structure and attributes of a checkpoint file (see file_format.h).
#include "io/checkpoint/file_format.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/weights/weights.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

constexpr int64_t kSchemaVersion = 1;
constexpr const char* kAlgorithm =
    "sum mod 2^64 of splitmix64(index * 0x9e3779b97f4a7c15 + float32 bits) over the elements";
constexpr hsize_t kAlignFrom = 64 << 10, kAlign = 4096;  // datasets of 64 KiB and more

// The checksum attribute's value until fill_checksums writes it: 16 characters, unique
// per dataset, not hex (an unfilled file fails the load's checksum check).
std::string placeholder(size_t j) { return fmt::format("~{:015}", j); }

h5::Id make_group(hid_t loc, const char* name) {
  return h5::group_id(h5::check(H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                fmt::format("cannot create group /{}", name)));
}

void write_root_attrs(hid_t id, const CheckpointMeta& meta) {
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
}

// Contiguous, space allocated at creation, never filled (every byte is written later).
h5::Id dataset_plist() {
  h5::Id dcpl = h5::plist_id(h5::check(H5Pcreate(H5P_DATASET_CREATE), "cannot create a dataset list"));
  h5::check_status(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), "H5Pset_layout");
  h5::check_status(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  h5::check_status(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time");
  return dcpl;
}

// Creates the datasets of group k under g; fills their offsets.
void create_datasets(hid_t g, int k, const ParamTable& t, hid_t dcpl, const std::string& path,
                     std::vector<uint64_t>& offsets) {
  const size_t n = t.views.size();
  for (size_t i = 0; i < n; ++i) {
    const ParamView& v = t.views[i];
    const std::vector<hsize_t> dims = dims_of(v);
    h5::Id space = h5::space_id(
        h5::check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), v.name));
    const std::string what = fmt::format("{}: cannot create /{}/{}", path, kCheckpointGroupNames[k], v.name);
    h5::Id ds = h5::dataset_id(h5::check(
        H5Dcreate2(g, v.name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl, H5P_DEFAULT), what));
    const haddr_t at = H5Dget_offset(ds.get());
    FLEXSP_CHECK(at != HADDR_UNDEF, "{} (no storage allocated)", what);
    offsets[k * n + i] = static_cast<uint64_t>(at);
    h5::write_attr(ds.get(), "checksum", placeholder(k * n + i));
  }
}

// Allocates the file's blocks up front (fallocate; HDF5 shrinks the file to what it uses
// when it closes it): a disk that fills up now fails here, with one line, before HDF5
// has written anything but its first block, and the writes that follow cannot run out of
// space on file systems that reserve (ext4, xfs, tmpfs). Where there is no such call the
// writes themselves find out.
void reserve_space(const std::string& tmp, const std::string& path, uint64_t bytes) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
  FLEXSP_CHECK(fd >= 0, "{}: cannot open for writing: {}", path, std::strerror(errno));
  int rc = 0;
  while ((rc = ::fallocate(fd, 0, 0, static_cast<off_t>(bytes))) != 0 && errno == EINTR) {
  }
  const int err = errno;
  ::close(fd);
  if (rc == 0 || err == EOPNOTSUPP || err == ENOSYS) return;
  const std::string dir = std::filesystem::path(path).parent_path().string();
  fail(fmt::format("{}: not enough space in {}: a checkpoint needs {:.1f} MB ({})", path, dir.empty() ? "." : dir,
                   bytes / 1e6, std::strerror(err)));
}

}  // namespace

std::vector<hsize_t> dims_of(const ParamView& v) {
  const std::vector<int64_t> s = v.full_shape();
  return std::vector<hsize_t>(s.begin(), s.end());
}

std::vector<uint64_t> create_checkpoint_file(const std::string& tmp, const std::string& path,
                                             const ModelConfig& c, const ParamTable& t,
                                             const CheckpointMeta& meta, uint64_t reserve) {
  h5::Quiet q;
  std::vector<uint64_t> offsets(kCheckpointGroups * t.views.size(), kNoOffset);
  h5::Id fapl = h5::default_fapl();
  h5::check_status(H5Pset_alignment(fapl.get(), kAlignFrom, kAlign), "H5Pset_alignment");
  h5::NewFile f = h5::create_file(tmp, fapl.get());
  h5::Id model, opt, g1, g2;
  try {
    reserve_space(tmp, path, reserve);
    const h5::Id dcpl = dataset_plist();
    model = make_group(f.get(), "model");
    write_model_attrs(model.get(), c);
    opt = make_group(f.get(), "optimizer");
    g1 = make_group(opt.get(), "exp_avg");
    g2 = make_group(opt.get(), "exp_avg_sq");
    const hid_t groups[kCheckpointGroups] = {model.get(), g1.get(), g2.get()};
    for (int k = 0; k < kCheckpointGroups; ++k) create_datasets(groups[k], k, t, dcpl.get(), path, offsets);
    write_root_attrs(f.get(), meta);
    model.reset(), g1.reset(), g2.reset(), opt.reset();
    f.close_or_throw(path);
  } catch (...) {
    f.discard_and_rethrow(path, {&model, &g1, &g2, &opt});
  }
  return offsets;
}

void fill_checksums(const std::string& tmp, const std::string& path, const ParamTable& t,
                    const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& sums) {
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CLOEXEC);
  FLEXSP_CHECK(fd >= 0, "{}: cannot open for writing: {}", path, std::strerror(errno));
  struct Close {
    int fd;
    ~Close() { if (fd >= 0) ::close(fd); }
  } closer{fd};
  struct stat st {};
  FLEXSP_CHECK(::fstat(fd, &st) == 0, "{}: cannot stat: {}", path, std::strerror(errno));
  // The bytes outside the datasets (HDF5's metadata), in file order.
  const size_t n = t.views.size();
  std::vector<std::pair<uint64_t, uint64_t>> data;  // [begin, end) of each dataset
  for (size_t j = 0; j < offsets.size(); ++j) {
    uint64_t numel = 1;
    for (const int64_t d : t.views[j % n].full_shape()) numel *= static_cast<uint64_t>(d);
    data.emplace_back(offsets[j], offsets[j] + 4 * numel);
  }
  std::sort(data.begin(), data.end());
  std::vector<uint64_t> found(sums.size(), 0), count(sums.size(), 0);
  std::string buf;
  uint64_t at = 0;
  for (size_t d = 0; d <= data.size(); ++d) {
    const uint64_t end = d < data.size() ? data[d].first : static_cast<uint64_t>(st.st_size);
    if (end > at) {
      buf.resize(end - at);
      FLEXSP_CHECK(::pread(fd, buf.data(), buf.size(), static_cast<off_t>(at)) == static_cast<ssize_t>(buf.size()),
                   "{}: cannot read back its metadata: {}", path, std::strerror(errno));
      for (size_t p = buf.find('~'); p != std::string::npos && p + 16 <= buf.size(); p = buf.find('~', p + 1)) {
        const std::string digits = buf.substr(p + 1, 15);
        if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
        const size_t j = std::stoull(digits);
        if (j < sums.size()) found[j] = at + p, ++count[j];
      }
    }
    if (d < data.size()) at = std::max(at, data[d].second);
  }
  for (size_t j = 0; j < sums.size(); ++j) {
    FLEXSP_CHECK(count[j] == 1, "{}: cannot place the checksum of /{}/{} (its placeholder occurs {} times)", path,
                 kCheckpointGroupNames[j / n], t.views[j % n].name, count[j]);
    const std::string hex = fmt::format("{:016x}", sums[j]);
    FLEXSP_CHECK(::pwrite(fd, hex.data(), hex.size(), static_cast<off_t>(found[j])) == 16,
                 "{}: cannot write the checksums: {}", path, std::strerror(errno));
  }
  FLEXSP_CHECK(::fsync(fd) == 0, "{}: cannot write (fsync): {}", path, std::strerror(errno));
  closer.fd = -1;
  FLEXSP_CHECK(::close(fd) == 0, "{}: cannot write (close): {}", path, std::strerror(errno));
}

StoredTensor open_stored_tensor(hid_t file, const std::string& path, const std::string& full,
                                const ParamView& v) {
  FLEXSP_CHECK(h5::exists(file, full), "{}: tensor /{} is missing", path, full);
  h5::Quiet q;
  StoredTensor st;
  st.ds = h5::open_dataset(file, full);
  const hid_t ds = st.ds.get();
  h5::Id space = h5::space_id(H5Dget_space(ds));
  const int nd = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  std::vector<hsize_t> dims(nd > 0 ? nd : 0);
  if (nd > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  FLEXSP_CHECK(dims == dims_of(v), "{}: tensor /{} has shape [{}], expected [{}]", path, full,
               fmt::join(dims, ", "), fmt::join(v.shape(), ", "));
  h5::Id type = h5::type_id(H5Dget_type(ds));
  FLEXSP_CHECK(type.valid() && H5Tget_class(type.get()) == H5T_FLOAT, "{}: tensor /{} is not float",
               path, full);
  const std::string hex = h5::has_attr(ds, "checksum") ? h5::read_attr_string(ds, "checksum") : "";
  char* end = nullptr;
  st.checksum = std::strtoull(hex.c_str(), &end, 16);
  FLEXSP_CHECK(hex.size() == 16 && end == hex.c_str() + 16, "{}: tensor /{} has no valid checksum attribute",
               path, full);
  // Raw reads: contiguous little-endian float32 in this file, space allocated.
  h5::Id dcpl = h5::plist_id(H5Dget_create_plist(ds));
  const haddr_t at = H5Dget_offset(ds);
  if (dcpl.valid() && H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS && H5Pget_external_count(dcpl.get()) == 0 &&
      H5Tequal(type.get(), H5T_IEEE_F32LE) > 0 && at != HADDR_UNDEF)
    st.offset = static_cast<uint64_t>(at);
  return st;
}

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

}  // namespace flexsp
