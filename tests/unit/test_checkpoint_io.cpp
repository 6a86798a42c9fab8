// The pieces under the checkpoint format, on one process: the vectorized checksum equals
// its definition; file runs put every element of a tensor-parallel block at its place in
// the full tensor and back; checksums are filled in place once, and a file without their
// placeholders is refused; the loader falls back to HDF5 for a dataset stored otherwise
// (chunked float64); a background write is published by poll; an abandoned one leaves a
// complete `latest` and no partial file; direct writes put every byte of unaligned runs in
// place and touch nothing else.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "io/checkpoint/checkpoint.h"
#include "io/checkpoint/file_format.h"
#include "io/checkpoint/layout.h"
#include "io/checkpoint/raw_io.h"
#include "io/checkpoint/writer.h"
#include "io/hdf5/h5.h"
#include "lib/config/config.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"
#include "support/temp_dir_test.h"

namespace flexsp {
namespace {

using CheckpointIoTest = TempDirTest;

ModelConfig tiny() {
  ModelSection m;
  m.preset = "tiny";
  return resolve_model_config(m, {}, 301);  // a vocabulary that tp 2 pads
}

std::vector<float> random_floats(int64_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(g);
  return x;
}

ShardRanges whole(int64_t total) {
  ShardRanges s;
  s.ranges.emplace_back(0, total);
  return s;
}

CheckpointMeta meta_of(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.world_size = 1;
  m.config_ini = "[train]\nsteps = 20\n";
  m.version = "test";
  return m;
}

TEST(CheckpointChecksum, MatchesItsDefinition) {
  const std::vector<float> x = random_floats(100003, 1);
  uint64_t want = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    uint64_t z = (static_cast<uint64_t>(i) + 17) * 0x9e3779b97f4a7c15ull + bits + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    want += z ^ (z >> 31);
  }
  EXPECT_EQ(checksum_f32(x.data(), 17, static_cast<int64_t>(x.size())), want);
}

// Every element of every block of a tp 2 table (row blocks, column blocks, replicated
// norms, the padded vocabulary) lands at its full-tensor index and reads back.
TEST(CheckpointLayout, RunsPlaceBlocksInTheFullTensors) {
  const ModelConfig c = tiny();
  for (int tp_rank = 0; tp_rank < 2; ++tp_rank) {
    const ParamTable t = make_param_table(c, 2, tp_rank);
    const size_t n = t.views.size();
    std::vector<uint64_t> offsets(kCheckpointGroups * n);
    uint64_t at = 4096;
    for (size_t j = 0; j < offsets.size(); ++j) {
      offsets[j] = at;
      uint64_t numel = 1;
      for (const int64_t d : t.views[j % n].full_shape()) numel *= static_cast<uint64_t>(d);
      at += 4 * numel + 4 * (j % 3);  // gaps of 0, 4 and 8 bytes between datasets
    }
    std::vector<float> file(at / 4, -1.f);
    ShardRanges s = whole(t.total);
    const ShardRanges* shards[kCheckpointGroups] = {&s, &s, &s};
    std::vector<std::vector<float>> bufs;
    for (int k = 0; k < kCheckpointGroups; ++k) bufs.push_back(random_floats(t.total, 10 + k));
    for (const FileRun& r : file_runs(t, offsets, shards, /*cover=*/false))
      std::memcpy(&file[r.file / 4], bufs[r.buf].data() + r.at, 4 * r.n);
    for (int k = 0; k < kCheckpointGroups; ++k)
      for (size_t i = 0; i < n; ++i) {
        const ParamView& v = t.views[i];
        for (int64_t e = 0; e < v.valid_rows() * v.cols; ++e)
          ASSERT_EQ(file[offsets[k * n + i] / 4 + v.full_index(e)], bufs[k][v.offset + e]) << v.name;
      }
    // Writing covers only copy 0 of a block that tp ranks replicate.
    for (const FileRun& r : file_runs(t, offsets, shards, /*cover=*/true))
      for (size_t j = 0; j < offsets.size(); ++j) {
        const ParamView& v = t.views[j % n];
        if (v.tp_replica == 0) continue;
        const uint64_t end = offsets[j] + 4 * static_cast<uint64_t>(v.full_rows * v.full_cols);
        ASSERT_TRUE(r.file + 4 * r.n <= offsets[j] || r.file >= end) << v.name;
      }
    std::vector<std::vector<float>> back(3, std::vector<float>(t.total, 0.f));
    for (const FileRun& r : file_runs(t, offsets, shards, /*cover=*/false))
      std::memcpy(back[r.buf].data() + r.at, &file[r.file / 4], 4 * r.n);
    for (int k = 0; k < kCheckpointGroups; ++k)
      for (const ParamView& v : t.views)
        for (int64_t e = 0; e < v.valid_rows() * v.cols; ++e)
          ASSERT_EQ(back[k][v.offset + e], bufs[k][v.offset + e]) << v.name;
  }
}

TEST_F(CheckpointIoTest, ChecksumsAreFilledOnce) {
  const ModelConfig c = tiny();
  const ParamTable t = make_param_table(c);
  const std::string tmp = path("x.h5.partial");
  const std::vector<uint64_t> offsets = create_checkpoint_file(tmp, path("x.h5"), c, t, meta_of(1), 4 << 20);
  std::vector<uint64_t> sums(offsets.size());
  for (size_t j = 0; j < sums.size(); ++j) sums[j] = 0x0123456789abcdefull + j;
  fill_checksums(tmp, path("x.h5"), t, offsets, sums);
  {
    h5::Id f = h5::open_file(tmp);
    h5::Id d = h5::open_dataset(f.get(), "optimizer/exp_avg_sq/lm_head.weight");
    EXPECT_EQ(h5::read_attr_string(d.get(), "checksum"), fmt::format("{:016x}", sums.back()));
  }
  try {
    fill_checksums(tmp, path("x.h5"), t, offsets, sums);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot place the checksum of /model/"), std::string::npos) << e.what();
  }
}

// A dataset another tool stored chunked in float64 loads through HDF5 and still verifies.
TEST_F(CheckpointIoTest, LoadsDatasetsStoredOtherwise) {
  const ModelConfig c = tiny();
  const ParamTable t = make_param_table(c);
  const std::vector<float> p = random_floats(t.total, 3), m = random_floats(t.total, 4), v = random_floats(t.total, 5);
  const std::string file = checkpoint_save(MPI_COMM_WORLD, dir_, 1, c, t, meta_of(3),
                                           CheckpointShard{whole(t.total), p.data(), m.data(), v.data()});
  const ParamView& w = *t.find("model.layers.1.mlp.down_proj.weight");
  {
    h5::Id f = h5::open_file(file, /*writable=*/true);
    const std::string name = "model/" + w.name;
    h5::Id old = h5::open_dataset(f.get(), name);
    const std::string sum = h5::read_attr_string(old.get(), "checksum");
    old.reset();
    ASSERT_GE(H5Ldelete(f.get(), name.c_str(), H5P_DEFAULT), 0);
    const hsize_t dims[2] = {static_cast<hsize_t>(w.full_rows), static_cast<hsize_t>(w.full_cols)}, chunk[2] = {8, 8};
    h5::Id space = h5::space_id(H5Screate_simple(2, dims, nullptr));
    h5::Id dcpl = h5::plist_id(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_chunk(dcpl.get(), 2, chunk);
    h5::Id d = h5::dataset_id(
        H5Dcreate2(f.get(), name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
    std::vector<double> x(p.begin() + w.offset, p.begin() + w.offset + w.numel());
    ASSERT_GE(H5Dwrite(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0);
    h5::write_attr(d.get(), "checksum", sum);
  }
  std::vector<float> bp(t.total), bm(t.total), bv(t.total);
  checkpoint_load(MPI_COMM_WORLD, 0, file, c, t, whole(t.total), bp.data(), whole(t.total), bm.data(), bv.data());
  EXPECT_EQ(bp, p);
  EXPECT_EQ(bm, m);
  EXPECT_EQ(bv, v);
}

TEST_F(CheckpointIoTest, PollPublishesABackgroundWrite) {
  const ModelConfig c = tiny();
  const ParamTable t = make_param_table(c);
  const std::vector<float> p = random_floats(t.total, 6), m = random_floats(t.total, 7), v = random_floats(t.total, 8);
  CheckpointWriter w(MPI_COMM_WORLD, dir_, 2);
  EXPECT_EQ(w.start(c, t, meta_of(4), CheckpointShard{whole(t.total), p.data(), m.data(), v.data()}, 1.5),
            path("step_00000004.h5"));
  EXPECT_TRUE(w.in_flight());
  std::optional<CheckpointSaved> s;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(s = w.poll(/*wait=*/false)) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(w.in_flight());
  EXPECT_EQ(s->path, path("step_00000004.h5"));
  EXPECT_EQ(s->step, 4);
  EXPECT_EQ(s->bytes, std::filesystem::file_size(s->path));
  EXPECT_EQ(s->snapshot_ms, 1.5);
  EXPECT_GE(s->stall_ms, 1.5);
  EXPECT_GT(s->write_ms, 0);
  EXPECT_EQ(checkpoint_resolve("auto", dir_), s->path);
  for (const CheckpointTensor& x : checkpoint_verify(s->path)) EXPECT_TRUE(x.ok) << x.name;
  EXPECT_FALSE(w.poll(/*wait=*/true).has_value());  // nothing in flight
}

// A writer dropped mid-write (a run failing elsewhere) stops its threads; `latest` names
// a complete checkpoint (the previous one, or the new one if it was already published)
// and no partial file stays.
TEST_F(CheckpointIoTest, AbandonedWriteLeavesACompleteLatest) {
  const ModelConfig c = tiny();
  const ParamTable t = make_param_table(c);
  const std::vector<float> p = random_floats(t.total, 9);
  const CheckpointShard mine{whole(t.total), p.data(), p.data(), p.data()};
  checkpoint_save(MPI_COMM_WORLD, dir_, 2, c, t, meta_of(1), mine);
  {
    CheckpointWriter w(MPI_COMM_WORLD, dir_, 2);
    w.start(c, t, meta_of(2), mine);
  }
  EXPECT_FALSE(std::filesystem::exists(path("step_00000002.h5.partial")));
  const std::string latest = checkpoint_resolve("auto", dir_);
  for (const CheckpointTensor& x : checkpoint_verify(latest)) EXPECT_TRUE(x.ok) << x.name;
}

// Runs that start and end off the 4 KiB grid, stretches shorter than a block, one inside
// a single block, gaps, and a stretch longer than both staging buffers together: the file
// holds each run's bytes at its offset, and the bytes between runs are untouched.
TEST_F(CheckpointIoTest, DirectWritesPutEveryByteInPlace) {
  const std::string file = path("direct.bin");
  const uint64_t size = uint64_t(80) << 20;
  { std::ofstream(file, std::ios::binary) << std::string(size, '\xab'); }
  const std::vector<float> a = random_floats(18 << 20, 1), b = random_floats(1 << 20, 2);
  const float* bufs[kCheckpointGroups] = {a.data(), b.data(), nullptr};
  const std::vector<FileRun> runs = {
      {6, 0, 5, 0},                                      // inside the first block
      {4096 + 12, 5, 1000, 0}, {4096 + 4012, 7, 3, 1},   // unaligned both ends, two buffers
      {3 * 4096, 2000, 2048, 0},                          // exactly two blocks
      {5 * 4096, 9000, 1025, 1},                          // aligned start, unaligned end
      {uint64_t(1) << 20, 100000, 17 << 20, 0},           // 68 MiB: more than both buffers
      {(uint64_t(1) << 20) + (uint64_t(68) << 20), 40, 10, 1},
  };
  const int fd = ::open(file.c_str(), O_WRONLY), dfd = open_direct_for_write(file);
  ASSERT_GE(fd, 0);
  if (dfd < 0) GTEST_SKIP() << "the temporary directory's file system refuses O_DIRECT";
  write_runs_direct(dfd, fd, runs, bufs, file, nullptr);
  ASSERT_EQ(::fsync(fd), 0);
  ::close(dfd);
  ::close(fd);

  std::string want(size, '\xab');
  for (const FileRun& r : runs)
    std::memcpy(want.data() + r.file, bufs[r.buf] + r.at, 4 * static_cast<size_t>(r.n));
  std::ifstream in(file, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < size; ++i)
    ASSERT_EQ(got[i], want[i]) << "byte " << i;
}

TEST_F(CheckpointIoTest, DirectReadsFetchEveryRunAndFindTruncation) {
  const std::string file = path("read.bin");
  const uint64_t size = (uint64_t(90) << 20) + 7;  // ends off a block boundary
  const std::vector<float> bytes = random_floats(static_cast<int64_t>(size / 4) + 1, 3);
  { std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), size); }
  const std::vector<FileRun> runs = {
      {6, 0, 5, 0},                                       // inside the first block
      {4096 + 12, 5, 1000, 0}, {4096 + 4012, 7, 3, 1},    // unaligned both ends, two buffers
      {(uint64_t(1) << 20) + 4, 2000, 17 << 20, 0},       // 68 MiB: three blocks, three in flight
      {uint64_t(80) << 20, 9000, 1025, 1},                // past a gap of more than the read-through
      {size - 4 * 3 - 3, 12000, 3, 1},                    // the file's last whole elements
  };
  std::vector<float> a(20 << 20, -1.f), b(1 << 20, -1.f);
  float* bufs[kCheckpointGroups] = {a.data(), b.data(), nullptr};
  const int fd = open_direct_for_read(file);
  if (fd < 0) GTEST_SKIP() << "the temporary directory's file system refuses O_DIRECT";
  uint64_t reached = 0;
  read_runs_direct(fd, runs, bufs, file, [&](uint64_t to) {
    EXPECT_GT(to, reached);
    reached = to;
  });
  EXPECT_EQ(reached, runs.back().file + 12);
  for (const FileRun& r : runs)
    ASSERT_EQ(std::memcmp(bufs[r.buf] + r.at, reinterpret_cast<const char*>(bytes.data()) + r.file, 4 * r.n), 0)
        << "run at byte " << r.file;
  ::close(fd);

  ASSERT_EQ(::truncate(file.c_str(), static_cast<off_t>(size - 9)), 0);
  const int cut = open_direct_for_read(file);
  try {
    read_runs_direct(cut, runs, bufs, file, [](uint64_t) {});
    ADD_FAILURE() << "a truncated file read without error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  ::close(cut);
}

}  // namespace
}  // namespace flexsp
