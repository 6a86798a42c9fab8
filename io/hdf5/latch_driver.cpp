// The latching HDF5 file driver (see latch_driver.h), on HDF5 1.10's driver interface
// (H5FD_class_t). Only what a POSIX file needs is implemented; HDF5 supplies the rest
// (allocation, driver info copies; no flush: like sec2 it has no buffers, and durability
// is the caller's fsync). Files it writes are plain HDF5 files: no driver
// information goes into the superblock, so any reader opens them with the default driver.
#include "io/hdf5/latch_driver.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace flexsp::h5 {

namespace {

// Raw writes up to this size are kept after a failure (global heap collections, small
// data); larger ones are dataset elements (latch_driver.h).
constexpr size_t kKeepRaw = size_t(1) << 20;
constexpr haddr_t kMaxAddr = (haddr_t(1) << 63) - 1;  // off_t's range, as sec2

// The driver information an access list carries: where to report.
struct Info {
  WriteLatch* latch;
};

// A write HDF5 made after the first failure, served to its reads.
struct Kept {
  haddr_t addr;
  std::string bytes;
};

struct File {
  H5FD_t pub{};  // first: HDF5 sees a File as its H5FD_t
  int fd = -1;
  haddr_t eoa = 0;
  haddr_t eof = 0;  // as HDF5 sees it: what was written counts, whether or not it landed
  dev_t dev = 0;
  ino_t ino = 0;
  WriteLatch* latch = nullptr;
  std::vector<Kept> kept;  // in write order: later entries win

  bool writing() const { return latch->error == 0 && !latch->discard; }
  void fail(int err) {
    if (latch->error == 0) latch->error = err;
  }
};

File* as_file(H5FD_t* f) { return reinterpret_cast<File*>(f); }
const File* as_file(const H5FD_t* f) { return reinterpret_cast<const File*>(f); }

// Pushes "what: name = ..., errno = E, error message = '...'" (the form of HDF5's own
// system-call errors, which h5.cpp cuts to one line).
void push_errno(const char* func, H5E_minor_t minor, const char* what, int err) {
  H5Epush2(H5E_DEFAULT, __FILE__, func, __LINE__, H5E_ERR_CLS, H5E_VFL, minor,
           "%s: errno = %d, error message = '%s'", what, err, std::strerror(err));
}

H5FD_t* open_file(const char* name, unsigned flags, hid_t fapl, haddr_t /*maxaddr*/) {
  const auto* info = static_cast<const Info*>(H5Pget_driver_info(fapl));
  if (info == nullptr || info->latch == nullptr) {
    H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, H5E_VFL, H5E_BADVALUE,
             "the latching driver has no latch");
    return nullptr;
  }
  int o = (flags & H5F_ACC_RDWR) ? O_RDWR : O_RDONLY;
  if (flags & H5F_ACC_TRUNC) o |= O_TRUNC;
  if (flags & H5F_ACC_CREAT) o |= O_CREAT;
  if (flags & H5F_ACC_EXCL) o |= O_EXCL;
  const int fd = ::open(name, o | O_CLOEXEC, 0666);
  if (fd < 0) {
    push_errno(__func__, H5E_CANTOPENFILE, "unable to open file", errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    push_errno(__func__, H5E_BADFILE, "unable to fstat file", errno);
    ::close(fd);
    return nullptr;
  }
  File* f = new File;
  f->fd = fd;
  f->eof = static_cast<haddr_t>(st.st_size);
  f->dev = st.st_dev;
  f->ino = st.st_ino;
  f->latch = info->latch;
  return &f->pub;
}

// Always succeeds, so that HDF5 lets go of the file; a failure (NFS reports write errors
// here) goes to the latch.
herr_t close_file(H5FD_t* file) {
  File* f = as_file(file);
  if (::close(f->fd) != 0 && f->writing()) f->fail(errno);
  delete f;
  return 0;
}

int compare(const H5FD_t* a, const H5FD_t* b) {
  const File *x = as_file(a), *y = as_file(b);
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
  return 0;
}

// sec2's I/O optimisations; not its POSIX handle (there is no get_handle).
herr_t query(const H5FD_t* /*file*/, unsigned long* flags) {
  *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
           H5FD_FEAT_AGGREGATE_SMALLDATA;
  return 0;
}

haddr_t get_eoa(const H5FD_t* file, H5FD_mem_t /*type*/) { return as_file(file)->eoa; }

herr_t set_eoa(H5FD_t* file, H5FD_mem_t /*type*/, haddr_t addr) {
  as_file(file)->eoa = addr;
  return 0;
}

haddr_t get_eof(const H5FD_t* file, H5FD_mem_t /*type*/) { return as_file(file)->eof; }

// The file's bytes (zeros past its end, as sec2), overlaid with what was kept.
herr_t read_at(H5FD_t* file, H5FD_mem_t /*type*/, hid_t /*dxpl*/, haddr_t addr, size_t size, void* buf) {
  File* f = as_file(file);
  if (addr > f->eoa || size > f->eoa - addr) {
    H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, H5E_IO, H5E_OVERFLOW,
             "read past the end of the allocated space");
    return -1;
  }
  char* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::pread(f->fd, p + got, size - got, static_cast<off_t>(addr + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      push_errno(__func__, H5E_READERROR, "file read failed", errno);
      return -1;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  std::memset(p + got, 0, size - got);
  for (const Kept& k : f->kept) {
    const haddr_t lo = std::max(addr, k.addr), hi = std::min(addr + size, k.addr + k.bytes.size());
    if (lo < hi) std::memcpy(p + (lo - addr), k.bytes.data() + (lo - k.addr), hi - lo);
  }
  return 0;
}

void keep(File* f, haddr_t addr, size_t size, const void* buf) {
  std::erase_if(f->kept, [&](const Kept& k) { return k.addr >= addr && k.addr + k.bytes.size() <= addr + size; });
  f->kept.push_back({addr, std::string(static_cast<const char*>(buf), size)});
}

// Succeeds whatever happens (latch_driver.h): the first failure is latched, and from then
// on the bytes are kept instead of written.
herr_t write_at(H5FD_t* file, H5FD_mem_t type, hid_t /*dxpl*/, haddr_t addr, size_t size, const void* buf) {
  File* f = as_file(file);
  if (addr > f->eoa || size > f->eoa - addr) {
    H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, H5E_IO, H5E_OVERFLOW,
             "write past the end of the allocated space");
    return -1;
  }
  const char* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (f->writing() && done < size) {
    const ssize_t n = ::pwrite(f->fd, p + done, size - done, static_cast<off_t>(addr + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) f->fail(n < 0 ? errno : EIO);
    else done += static_cast<size_t>(n);
  }
  if (done < size && (type != H5FD_MEM_DRAW || size <= kKeepRaw)) keep(f, addr, size, buf);
  f->eof = std::max(f->eof, addr + size);
  return 0;
}

// Sets the file's size to what HDF5 allocated. The size is the file's own, not what was
// written: a caller may have reserved blocks past the end (fallocate).
herr_t truncate_file(H5FD_t* file, hid_t /*dxpl*/, hbool_t /*closing*/) {
  File* f = as_file(file);
  struct stat st {};
  if (f->writing() && (::fstat(f->fd, &st) != 0 ||
                       (static_cast<haddr_t>(st.st_size) != f->eoa && ::ftruncate(f->fd, static_cast<off_t>(f->eoa)) != 0)))
    f->fail(errno);
  f->eof = f->eoa;
  return 0;
}

// As sec2 with file locking's "ignore when disabled": a file system without flock is no
// reason to refuse the file.
herr_t lock_file(H5FD_t* file, hbool_t rw) {
  if (::flock(as_file(file)->fd, (rw ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0 || errno == ENOSYS) return 0;
  push_errno(__func__, H5E_CANTLOCKFILE, "unable to lock file", errno);
  return -1;
}

herr_t unlock_file(H5FD_t* file) {
  if (::flock(as_file(file)->fd, LOCK_UN) == 0 || errno == ENOSYS) return 0;
  push_errno(__func__, H5E_CANTUNLOCKFILE, "unable to unlock file", errno);
  return -1;
}

H5FD_class_t make_class() {
  H5FD_class_t c{};
  c.name = "flexsp_latch";
  c.maxaddr = kMaxAddr;
  // Strong: H5Fclose closes the file and its objects at once, so the latch is final
  // when it returns.
  c.fc_degree = H5F_CLOSE_STRONG;
  c.fapl_size = sizeof(Info);
  c.open = open_file;
  c.close = close_file;
  c.cmp = compare;
  c.query = query;
  c.get_eoa = get_eoa;
  c.set_eoa = set_eoa;
  c.get_eof = get_eof;
  c.read = read_at;
  c.write = write_at;
  c.truncate = truncate_file;
  c.lock = lock_file;
  c.unlock = unlock_file;
  const H5FD_mem_t map[H5FD_MEM_NTYPES] = H5FD_FLMAP_DICHOTOMY;
  std::copy(std::begin(map), std::end(map), std::begin(c.fl_map));
  return c;
}

}  // namespace

herr_t set_latch_driver(hid_t fapl, WriteLatch* latch) {
  // Registered once per process; HDF5 keeps the class until it shuts down.
  static const H5FD_class_t cls = make_class();
  static const hid_t id = H5FDregister(&cls);
  if (id < 0) return -1;
  const Info info{latch};
  return H5Pset_driver(fapl, id, &info);
}

}  // namespace flexsp::h5
