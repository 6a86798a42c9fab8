// The HDF5 file driver of the files flexsp creates: POSIX pread/pwrite like HDF5's own
// sec2 driver, except that a write that fails is not reported to HDF5 but latched.
//
// HDF5 1.10 cannot recover from a failed write: the close that flushes the metadata
// fails, the file stays in the library's tables, and its clean-up at exit (run from
// MPI_Finalize, through an attribute on MPI_COMM_SELF) complains or crashes. So this
// driver records the first failing write's (or truncate's, or close's) errno in a
// WriteLatch the caller owns and tells HDF5 the write went through: the library's close
// always succeeds and leaves nothing behind, and the caller, which reads the latch after
// the close (h5::NewFile), reports one clear error and removes the file.
//
// After the first failure nothing more reaches the file (it is lost anyway), but what HDF5
// writes from then on is kept in memory and served to its reads, so that the library
// never reads back a structure it did not write (it cannot crash or loop on one). That is
// metadata -- and its global heap, which HDF5 passes as raw data -- written between the
// failure and the caller's next check: kilobytes to megabytes. Large raw writes (dataset
// elements) are dropped: HDF5 reads those back only to merge partial writes, whose values
// do not matter in a file about to go.
#pragma once

#include <hdf5.h>

namespace flexsp::h5 {

// What the driver reports of a file's writes. Owned by the caller; must outlive every
// file opened through the access list that points at it.
struct WriteLatch {
  int error = 0;         // errno of the first failed write, truncate or close; 0: none
  bool discard = false;  // set by the caller: write nothing more (the file is to be removed)
};

// Makes fapl (a file access list) open files through the latching driver, reporting into
// *latch. Returns < 0 on failure, with HDF5's error stack set.
herr_t set_latch_driver(hid_t fapl, WriteLatch* latch);

}  // namespace flexsp::h5
