// Small RAII layer over the HDF5 C API, shared by datasets, checkpoints and reports.
//
// Design: an h5::Id owns one hid_t and knows which H5*close releases it, so every handle
// is released on every path (including exceptions) without a class per HDF5 object kind.
// Failures become flexsp::Error carrying one line: our own description ("x.h5: cannot
// read /offsets"), plus, where HDF5 recorded one, the innermost reason from its error
// stack. HDF5's habit of printing that stack to stderr is switched off for the lifetime
// of an h5::Quiet guard; every helper here takes one, so callers only need their own
// guard around raw H5* calls that may fail. Files are created through the latching driver
// (latch_driver.h): a write that fails is kept from HDF5, which cannot recover from one,
// and reported by h5::NewFile once the file is closed.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "io/hdf5/latch_driver.h"

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
  void reset() { (void)close(); }  // closes now, errors ignored (nothing useful to do)
  herr_t close();                   // closes now; the closer's status (< 0: failed)
  // Closes now and reports failure (for files: the last flush happens here).
  void close_or_throw(const std::string& what);

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

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
// A file being created. It is written through the latching driver (latch_driver.h): HDF5
// never sees a write fail, so its close always succeeds and it keeps nothing of the file;
// the first failure is reported here instead, as "NAME: cannot write: REASON". Move-only;
// destroying it closes the file and leaves it where it is.
class NewFile {
 public:
  NewFile() = default;
  NewFile(NewFile&&) = default;
  NewFile& operator=(NewFile&& o) noexcept;  // closes this file before its latch goes
  hid_t get() const { return file_.get(); }
  bool valid() const { return file_.valid(); }
  // Throws "NAME: cannot write: REASON" once a write has failed: checking between large
  // writes spares those that would follow.
  void check_written(const std::string& name) const;
  // Closes the file (its objects first: handles still open are closed with it), then
  // throws as check_written, or when HDF5 itself fails to close it.
  void close_or_throw(const std::string& name);
  // Writes nothing more, closes `handles` (the file's datasets and groups) and the file,
  // and removes it. Never throws.
  void discard(std::initializer_list<Id*> handles);
  // From a catch block: discard(handles), then throw as check_written -- a failed write
  // is the cause of whatever failed after it -- or else rethrow what is being handled.
  [[noreturn]] void discard_and_rethrow(const std::string& name, std::initializer_list<Id*> handles);

 private:
  friend NewFile create_file(const std::string& path, hid_t fapl, hid_t fcpl);
  std::string path_;
  std::unique_ptr<WriteLatch> latch_;  // before file_: outlives the file's close
  Id file_;
};

// Creates (truncating) a file; fails if the directory is missing or not writable. fapl's
// settings are copied (its driver is replaced).
NewFile create_file(const std::string& path, hid_t fapl = H5P_DEFAULT, hid_t fcpl = H5P_DEFAULT);
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
