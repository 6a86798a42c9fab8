// Small RAII layer over the HDF5 C API, shared by datasets, checkpoints and reports.
//
// Design: an h5::Id owns one hid_t and knows which H5*close releases it, so every handle
// is released on every path (including exceptions) without a class per HDF5 object kind.
// Failures become flexsp::Error carrying one line: our own description ("x.h5: cannot
// read /offsets"), plus, where HDF5 recorded one, the innermost reason from its error
// stack. HDF5's habit of printing that stack to stderr is switched off for the lifetime
// of an h5::Quiet guard; every helper here takes one, so callers only need their own
// guard around raw H5* calls that may fail.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace flexsp::h5 {

// Owns an HDF5 identifier. Move-only; closes with the function given at construction.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer close) : id_(id), close_(close) {}
  Id(Id&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& o) noexcept;
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();  // closes now; errors on close are ignored (nothing useful to do)
  // Closes now and reports failure (for files: the last flush happens here).
  void close_or_throw(const std::string& what);

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// A file being written whose write failed (a full disk): empties it, closes `handles`
// (its datasets and groups first, the file last) and removes it. Emptying frees its
// space, so that what HDF5 still flushes on close (metadata, cached chunks) goes
// through: a file HDF5 cannot close stays in its tables and crashes its clean-up at exit.
void discard_file(const std::string& path, std::initializer_list<Id*> handles);

// Suppresses HDF5's automatic error-stack printing while alive; restores it afterwards.
class Quiet {
 public:
  Quiet();
  ~Quiet();
  Quiet(const Quiet&) = delete;
  Quiet& operator=(const Quiet&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Throws flexsp::Error(what + HDF5's innermost reason, if any) when id / status < 0.
// Build `what` without HDF5 calls (file_name() included): they clear the error stack.
hid_t check(hid_t id, const std::string& what);
void check_status(herr_t status, const std::string& what);
// The innermost message on HDF5's error stack ("" when empty); clears the stack.
std::string last_error();

// Typed wrappers for the identifiers returned by the matching H5*create/open calls.
inline Id file_id(hid_t id) { return Id(id, H5Fclose); }
inline Id group_id(hid_t id) { return Id(id, H5Gclose); }
inline Id dataset_id(hid_t id) { return Id(id, H5Dclose); }
inline Id space_id(hid_t id) { return Id(id, H5Sclose); }
inline Id attr_id(hid_t id) { return Id(id, H5Aclose); }
inline Id type_id(hid_t id) { return Id(id, H5Tclose); }
inline Id plist_id(hid_t id) { return Id(id, H5Pclose); }

// ---- files -------------------------------------------------------------------------------
// Opens an existing file read-only (or read-write). Distinguishes "no such file",
// "not an HDF5 file" and other failures in the message, which names the path.
Id open_file(const std::string& path, bool writable = false, hid_t fapl = H5P_DEFAULT);
// A file access list with flexsp's defaults (file locking where the library has it), to
// add settings to before open_file / create_file.
Id default_fapl();
// Creates (truncating) a file; fails if the directory is missing or not writable.
Id create_file(const std::string& path, hid_t fapl = H5P_DEFAULT, hid_t fcpl = H5P_DEFAULT);
// True for a readable HDF5 file; false for missing, unreadable or non-HDF5 files.
bool is_hdf5(const std::string& path);
// The file name of any object id (for error messages).
std::string file_name(hid_t obj);

// ---- objects -----------------------------------------------------------------------------
bool exists(hid_t loc, const std::string& name);  // a link named name under loc
Id open_dataset(hid_t loc, const std::string& name, hid_t dapl = H5P_DEFAULT);
// Rank-1 extent of a dataset; throws naming the dataset if it is not one-dimensional.
int64_t extent_1d(hid_t dset, const std::string& name);

// ---- attributes (scalar or one-element) --------------------------------------------------
bool has_attr(hid_t obj, const std::string& name);
void write_attr(hid_t obj, const std::string& name, int64_t value);
inline void write_attr(hid_t obj, const std::string& name, int value) {
  write_attr(obj, name, static_cast<int64_t>(value));
}
void write_attr(hid_t obj, const std::string& name, double value);
void write_attr(hid_t obj, const std::string& name, const std::string& value);  // UTF-8, vlen
inline void write_attr(hid_t obj, const std::string& name, const char* value) {
  write_attr(obj, name, std::string(value));
}
// Readers throw Error naming file and attribute when it is missing or of the wrong class.
int64_t read_attr_int(hid_t obj, const std::string& name);
double read_attr_double(hid_t obj, const std::string& name);
std::string read_attr_string(hid_t obj, const std::string& name);  // fixed or vlen
std::vector<std::string> attr_names(hid_t obj);

// ---- datatypes -------------------------------------------------------------------------------
// Short numpy-like name of a dataset's stored type: "uint16", "int32", "float32", ...
std::string type_name(hid_t dtype);

}  // namespace flexsp::h5
