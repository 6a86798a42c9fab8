// The latching file driver behind h5::create_file: the files it writes are ordinary HDF5
// files cut to what HDF5 allocated; a write that fails midway (a file size limit makes
// the writes past a byte fail with EFBIG, in this process, without a shim) is reported
// once, at the close, as one line, while HDF5 -- reading back through a cache too small
// to hold the structure -- sees every value it wrote and keeps no file open afterwards
// (what would crash its clean-up at exit).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>
#include <string>

#include "io/hdf5/h5.h"
#include "lib/util/error.h"
#include "support/error_of.h"
#include "support/temp_dir_test.h"

using namespace flexsp;

namespace {

using H5Latch = TempDirTest;

// Files (of any driver) HDF5 holds open.
ssize_t open_files() { return H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE); }

// A file access list whose metadata cache holds 1 KiB: HDF5 evicts and reads back its
// structure while writing it.
h5::Id tiny_cache_fapl() {
  h5::Id fapl = h5::default_fapl();
  H5AC_cache_config_t cfg{};
  cfg.version = H5AC__CURR_CACHE_CONFIG_VERSION;
  EXPECT_GE(H5Pget_mdc_config(fapl.get(), &cfg), 0);
  cfg.set_initial_size = true;
  cfg.initial_size = cfg.min_size = cfg.max_size = 1024;
  cfg.incr_mode = H5C_incr__off;
  cfg.flash_incr_mode = H5C_flash_incr__off;
  cfg.decr_mode = H5C_decr__off;
  EXPECT_GE(H5Pset_mdc_config(fapl.get(), &cfg), 0);
  return fapl;
}

// Groups g0..g{n-1} under the root, each with attributes "i" = i and "s" = "value i".
void write_groups(hid_t f, int n) {
  for (int i = 0; i < n; ++i) {
    h5::Id g = h5::group_id(h5::check(
        H5Gcreate2(f, fmt::format("g{}", i).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group"));
    h5::write_attr(g.get(), "i", int64_t{i});
    h5::write_attr(g.get(), "s", fmt::format("value {}", i));
  }
}

void expect_groups(hid_t f, int n) {
  for (int i = 0; i < n; ++i) {
    h5::Id g = h5::group_id(h5::check(H5Gopen2(f, fmt::format("g{}", i).c_str(), H5P_DEFAULT), "open"));
    EXPECT_EQ(h5::read_attr_int(g.get(), "i"), i);
    EXPECT_EQ(h5::read_attr_string(g.get(), "s"), fmt::format("value {}", i));
  }
}

}  // namespace

TEST_F(H5Latch, FilesAreOrdinaryHdf5CutToTheirSize) {
  const std::string file = path("plain.h5");
  const ssize_t before = open_files();
  h5::NewFile f = h5::create_file(file, tiny_cache_fapl().get());
  {  // space reserved beyond what HDF5 will use: the close cuts it off
    const int fd = ::open(file.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);
    ::close(fd);
  }
  write_groups(f.get(), 200);
  expect_groups(f.get(), 200);
  f.close_or_throw(file);
  EXPECT_EQ(open_files(), before);
  EXPECT_LT(std::filesystem::file_size(file), uintmax_t{1} << 20);
  h5::Id r = h5::open_file(file);  // HDF5's default driver
  expect_groups(r.get(), 200);
}

TEST_F(H5Latch, AFailedWriteIsOneErrorAtTheCloseAndHdf5KeepsNothing) {
  const std::string file = path("broken.h5");
  const ssize_t before = open_files();
  h5::NewFile f = h5::create_file(file, tiny_cache_fapl().get());
  // Writes past 8 kB fail (EFBIG; its signal ignored): inside the groups' metadata.
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ign, &old), 0);
  rlimit lim{}, saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  lim = saved;
  lim.rlim_cur = 8192;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  write_groups(f.get(), 200);  // the cache, evicting, has written some: a check finds out
  EXPECT_EQ(error_of([&] { f.check_written(file); }), file + ": cannot write: File too large");
  expect_groups(f.get(), 200);  // HDF5 reads back what it wrote, landed or not
  const std::string err = error_of([&] { f.close_or_throw(file); });
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  ASSERT_EQ(::sigaction(SIGXFSZ, &old, nullptr), 0);
  EXPECT_EQ(err, file + ": cannot write: File too large");
  EXPECT_EQ(open_files(), before);  // nothing left for HDF5 to tear down at exit
  f.discard({});
  EXPECT_FALSE(std::filesystem::exists(file));
  EXPECT_EQ(error_of([&] { f.check_written(file); }), file + ": cannot write: File too large");
}
