// HDF5 helpers (see h5.h). Every function takes an h5::Quiet guard so that probing a
// file that may be broken prints nothing; failures turn into one-line flexsp::Error.
// Files are opened with best-effort file locking: HDF5 1.10 refuses to open files on
// file systems without flock (some Lustre and NFS mounts) unless told to carry on.
#include "io/hdf5/h5.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "lib/util/error.h"

namespace flexsp::h5 {

Id& Id::operator=(Id&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

herr_t Id::close() {
  herr_t st = 0;
  if (id_ >= 0 && close_ != nullptr) {
    Quiet q;
    st = close_(id_);
  }
  id_ = H5I_INVALID_HID;
  return st;
}

void Id::close_or_throw(const std::string& what) {
  Quiet q;
  check_status(close(), what);
}

Quiet::Quiet() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Quiet::~Quiet() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

namespace {

// The description of a failed system call ("file write failed: time = ..., errno = 28,
// error message = 'No space left on device', ...", over two lines) is cut to its error
// message: errors are one line.
std::string one_line(std::string desc) {
  const std::string key = "error message = '";
  if (const size_t at = desc.find(key); at != std::string::npos) {
    const size_t end = desc.find('\'', at + key.size());
    const std::string head = desc.substr(0, desc.find(':'));
    return head + ": " + desc.substr(at + key.size(), end == std::string::npos ? end : end - at - key.size());
  }
  std::replace(desc.begin(), desc.end(), '\n', ' ');
  return desc;
}

herr_t innermost(unsigned /*n*/, const H5E_error2_t* err, void* out) {
  if (err != nullptr && err->desc != nullptr && err->desc[0] != '\0')
    *static_cast<std::string*>(out) = one_line(err->desc);
  return 0;
}

[[noreturn]] void fail_why(const std::string& what, const std::string& why) {
  if (why.empty()) fail(what);
  fail(fmt::format("{} (HDF5: {})", what, why));
}

// what must not call HDF5 (that would clear the error stack before we read it).
[[noreturn]] void fail_h5(const std::string& what) { fail_why(what, last_error()); }

// For messages that name obj's file: reads the reason before asking for the name.
[[noreturn]] void fail_obj(hid_t obj, const std::string& what) {
  std::string why = last_error();
  fail_why(fmt::format("{}: {}", file_name(obj), what), why);
}

Id open_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0)
    fail(fmt::format("{}: attribute '{}' is missing", file_name(obj), name));
  Id a = attr_id(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  if (!a.valid()) fail_obj(obj, fmt::format("cannot open attribute '{}'", name));
  Id space = space_id(H5Aget_space(a.get()));
  hssize_t n = space.valid() ? H5Sget_simple_extent_npoints(space.get()) : -1;
  if (n != 1)
    fail(fmt::format("{}: attribute '{}' must hold one value (it holds {})", file_name(obj), name,
                     n));
  return a;
}

H5T_class_t attr_class(hid_t attr) {
  Id t = type_id(H5Aget_type(attr));
  return t.valid() ? H5Tget_class(t.get()) : H5T_NO_CLASS;
}

void write_attr_raw(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type,
                    const void* value) {
  Quiet q;
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Id space = space_id(check(H5Screate(H5S_SCALAR), "cannot create a dataspace"));
  Id a = attr_id(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid()) fail_obj(obj, fmt::format("cannot create attribute '{}'", name));
  if (H5Awrite(a.get(), mem_type, value) < 0)
    fail_obj(obj, fmt::format("cannot write attribute '{}'", name));
}

}  // namespace

std::string last_error() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, innermost, &s);
  H5Eclear2(H5E_DEFAULT);
  return s;
}

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) fail_h5(what);
  return id;
}

void check_status(herr_t status, const std::string& what) {
  if (status < 0) fail_h5(what);
}

// ---- files ---------------------------------------------------------------------------------

bool is_hdf5(const std::string& path) {
  Quiet q;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  if (::access(path.c_str(), R_OK) != 0) return false;
  htri_t r = H5Fis_hdf5(path.c_str());
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

// A file access property list with best-effort locking (see the top of this file).
Id default_fapl() {
  Quiet q;
  Id fapl = plist_id(check(H5Pcreate(H5P_FILE_ACCESS), "cannot create a file access list"));
#if H5_VERSION_GE(1, 10, 7)
  H5Pset_file_locking(fapl.get(), true, true);
#endif
  return fapl;
}

Id open_file(const std::string& path, bool writable, hid_t fapl) {
  Quiet q;
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) fail(fmt::format("{}: no such file", path));
  if (std::filesystem::is_directory(st)) fail(fmt::format("{}: is a directory, not a file", path));
  if (::access(path.c_str(), writable ? (R_OK | W_OK) : R_OK) != 0)
    fail(fmt::format("{}: permission denied", path));
  htri_t r = H5Fis_hdf5(path.c_str());
  if (r <= 0) {
    H5Eclear2(H5E_DEFAULT);
    fail(fmt::format("{}: not an HDF5 file", path));
  }
  Id own_fapl;
  if (fapl == H5P_DEFAULT) {
    own_fapl = default_fapl();
    fapl = own_fapl.get();
  }
  hid_t f = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl);
  if (f < 0) fail_h5(fmt::format("{}: cannot open HDF5 file", path));
  return file_id(f);
}

NewFile create_file(const std::string& path, hid_t fapl, hid_t fcpl) {
  Quiet q;
  NewFile nf;
  nf.path_ = path;
  nf.latch_ = std::make_unique<WriteLatch>();
  Id own = fapl == H5P_DEFAULT ? default_fapl() : plist_id(check(H5Pcopy(fapl), "cannot copy a file access list"));
  check_status(set_latch_driver(own.get(), nf.latch_.get()), fmt::format("{}: cannot create file", path));
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, own.get());
  if (f < 0) {
    // The driver may have created (or truncated) it before HDF5 gave up: callers create
    // temporary names, of which nothing is worth keeping.
    std::error_code ec;
    std::filesystem::remove(path, ec);
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
      fail(
          fmt::format("{}: cannot create file: directory '{}' does not exist", path, dir.string()));
    fail_h5(fmt::format("{}: cannot create file", path));
  }
  nf.file_ = file_id(f);
  return nf;
}

NewFile& NewFile::operator=(NewFile&& o) noexcept {
  if (this != &o) {
    file_.reset();
    path_ = std::move(o.path_);
    latch_ = std::move(o.latch_);
    file_ = std::move(o.file_);
  }
  return *this;
}

void NewFile::check_written(const std::string& name) const {
  if (latch_ != nullptr && latch_->error != 0)
    fail(fmt::format("{}: cannot write: {}", name, std::strerror(latch_->error)));
}

void NewFile::close_or_throw(const std::string& name) {
  Quiet q;
  const herr_t st = file_.close();
  check_written(name);
  check_status(st, fmt::format("{}: cannot write (close)", name));
}

void NewFile::discard(std::initializer_list<Id*> handles) {
  if (latch_ != nullptr) latch_->discard = true;
  for (Id* h : handles) h->reset();
  file_.reset();
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove(path_, ec);
}

void NewFile::discard_and_rethrow(const std::string& name, std::initializer_list<Id*> handles) {
  discard(handles);
  check_written(name);
  throw;
}

std::string file_name(hid_t obj) {
  Quiet q;
  ssize_t n = H5Fget_name(obj, nullptr, 0);
  if (n <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return "<hdf5>";
  }
  std::string s(static_cast<size_t>(n) + 1, '\0');
  H5Fget_name(obj, s.data(), s.size());
  s.resize(static_cast<size_t>(n));
  return s;
}

// ---- objects ----------------------------------------------------------------------------------

bool exists(hid_t loc, const std::string& name) {
  Quiet q;
  // H5Lexists fails rather than answering "no" when an intermediate group is missing,
  // so walk the path one component at a time.
  std::string prefix;
  size_t pos = 0;
  if (!name.empty() && name[0] == '/') {
    prefix = "/";
    pos = 1;
  }
  while (pos <= name.size()) {
    size_t slash = name.find('/', pos);
    std::string part =
        name.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    if (!part.empty()) {
      prefix += (prefix.empty() || prefix.back() == '/') ? part : "/" + part;
      htri_t r = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
      if (r <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
    }
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return true;
}

Id open_dataset(hid_t loc, const std::string& name, hid_t dapl) {
  Quiet q;
  if (!exists(loc, name)) fail(fmt::format("{}: dataset '{}' is missing", file_name(loc), name));
  hid_t d = H5Dopen2(loc, name.c_str(), dapl);
  if (d < 0) fail_obj(loc, fmt::format("cannot open dataset '{}'", name));
  return dataset_id(d);
}

int64_t extent_1d(hid_t dset, const std::string& name) {
  Quiet q;
  Id space = space_id(H5Dget_space(dset));
  if (!space.valid()) fail_obj(dset, fmt::format("cannot read the shape of '{}'", name));
  int nd = H5Sget_simple_extent_ndims(space.get());
  if (nd != 1)
    fail(fmt::format("{}: '{}' must be one-dimensional (it has {} dimensions)", file_name(dset),
                     name, nd));
  hsize_t dim = 0;
  H5Sget_simple_extent_dims(space.get(), &dim, nullptr);
  return static_cast<int64_t>(dim);
}

// ---- attributes -----------------------------------------------------------------------------

bool has_attr(hid_t obj, const std::string& name) {
  Quiet q;
  htri_t r = H5Aexists(obj, name.c_str());
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

void write_attr(hid_t obj, const std::string& name, int64_t value) {
  write_attr_raw(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_attr(hid_t obj, const std::string& name, double value) {
  write_attr_raw(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  Quiet q;
  // Variable-length UTF-8, the form h5py writes for Python str: reads back as str there.
  Id t = type_id(check(H5Tcopy(H5T_C_S1), "cannot create a string type"));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  const char* p = value.c_str();
  write_attr_raw(obj, name, t.get(), t.get(), &p);
}

int64_t read_attr_int(hid_t obj, const std::string& name) {
  Quiet q;
  Id a = open_attr(obj, name);
  if (attr_class(a.get()) != H5T_INTEGER)
    fail(fmt::format("{}: attribute '{}' must be an integer", file_name(obj), name));
  int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0)
    fail_obj(obj, fmt::format("cannot read attribute '{}'", name));
  return v;
}

double read_attr_double(hid_t obj, const std::string& name) {
  Quiet q;
  Id a = open_attr(obj, name);
  H5T_class_t c = attr_class(a.get());
  if (c != H5T_INTEGER && c != H5T_FLOAT)
    fail(fmt::format("{}: attribute '{}' must be a number", file_name(obj), name));
  double v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0)
    fail_obj(obj, fmt::format("cannot read attribute '{}'", name));
  return v;
}

std::string read_attr_string(hid_t obj, const std::string& name) {
  Quiet q;
  Id a = open_attr(obj, name);
  Id ft = type_id(H5Aget_type(a.get()));
  if (!ft.valid() || H5Tget_class(ft.get()) != H5T_STRING)
    fail(fmt::format("{}: attribute '{}' must be a string", file_name(obj), name));
  Id mt = type_id(check(H5Tcopy(H5T_C_S1), "cannot create a string type"));
  H5Tset_cset(mt.get(), H5Tget_cset(ft.get()));
  std::string out;
  if (H5Tis_variable_str(ft.get()) > 0) {
    H5Tset_size(mt.get(), H5T_VARIABLE);
    char* p = nullptr;
    if (H5Aread(a.get(), mt.get(), &p) < 0)
      fail_obj(obj, fmt::format("cannot read attribute '{}'", name));
    if (p != nullptr) {
      out = p;
      H5free_memory(p);
    }
  } else {
    size_t n = H5Tget_size(ft.get());
    std::string buf(n + 1, '\0');
    H5Tset_size(mt.get(), n + 1);  // room for the terminator whatever the stored padding
    H5Tset_strpad(mt.get(), H5T_STR_NULLTERM);
    if (H5Aread(a.get(), mt.get(), buf.data()) < 0)
      fail_obj(obj, fmt::format("cannot read attribute '{}'", name));
    out.assign(buf.c_str());
    while (!out.empty() && out.back() == ' ') out.pop_back();  // H5T_STR_SPACEPAD
  }
  return out;
}

namespace {
herr_t collect_name(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> attr_names(hid_t obj) {
  Quiet q;
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names) < 0)
    fail_obj(obj, "cannot list attributes");
  return names;
}

// ---- datatypes --------------------------------------------------------------------------------

std::string type_name(hid_t dtype) {
  size_t bits = H5Tget_size(dtype) * 8;
  switch (H5Tget_class(dtype)) {
    case H5T_INTEGER:
      return fmt::format("{}int{}", H5Tget_sign(dtype) == H5T_SGN_NONE ? "u" : "", bits);
    case H5T_FLOAT:
      return fmt::format("float{}", bits);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    default:
      return "other";
  }
}

}  // namespace flexsp::h5
