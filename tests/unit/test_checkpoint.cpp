// Checkpoint files on one process: the checksum is independent of how a tensor is cut,
// a save reads back exactly through any set of shard ranges, bit flips are caught,
// `latest` and checkpoint.keep rotate, and bad `latest` / model shapes are named.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/checkpoint/checkpoint.h"
#include "io/hdf5/h5.h"
#include "lib/config/config.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"
#include "support/temp_dir_test.h"

namespace flexsp {
namespace {

using CheckpointTest = TempDirTest;

ModelConfig tiny(int hidden = 64) {
  ModelSection m;
  m.preset = "tiny";
  m.hidden = hidden;
  return resolve_model_config(m, {}, 300);
}

struct State {
  std::vector<float> p, m, v;
};

State random_state(int64_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  State s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  for (int64_t i = 0; i < n; ++i) s.p[i] = d(g), s.m[i] = d(g), s.v[i] = std::abs(d(g));
  return s;
}

ShardRanges whole(int64_t total) {
  ShardRanges s;
  s.ranges.emplace_back(0, total);
  return s;
}

std::string save(const std::string& dir, int64_t step, const ModelConfig& c, const ParamTable& t,
                 const State& st, int keep = 2) {
  CheckpointMeta meta;
  meta.step = step;
  meta.consumed_tokens = 1000 * step;
  meta.seed = 7;
  meta.cursor.sources = {{1, 2, 3, 40}, {0, 5, 0, 17}};
  meta.world_size = 1;
  meta.adam_steps = step;
  meta.config_ini = "[train]\nsteps = 20\n";
  meta.version = "test";
  CheckpointShard mine{whole(t.total), st.p.data(), st.m.data(), st.v.data()};
  return checkpoint_save(MPI_COMM_WORLD, dir, keep, c, t, meta, mine);
}

TEST(CheckpointChecksum, IndependentOfCuts) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  const uint64_t all = checksum_f32(x.data(), 0, 1000);
  EXPECT_EQ(all, checksum_f32(x.data(), 0, 333) + checksum_f32(x.data() + 333, 333, 667));
  std::vector<float> y = x;
  std::swap(y[10], y[11]);
  EXPECT_NE(all, checksum_f32(y.data(), 0, 1000));
  uint32_t bits;
  std::memcpy(&bits, &x[500], 4);
  bits ^= 1u << 7;
  std::memcpy(&y[500], &bits, 4);
  std::swap(y[10], y[11]);
  EXPECT_NE(all, checksum_f32(y.data(), 0, 1000));
}

TEST_F(CheckpointTest, RoundTripThroughAnyRanges) {
  const ModelConfig c = tiny();
  const ParamTable t = make_param_table(c);
  const State st = random_state(t.total, 1);
  const std::string path = save(dir_, 10, c, t, st);
  EXPECT_EQ(path, this->path("step_00000010.h5"));

  const CheckpointMeta m = checkpoint_read_meta(path, c);
  EXPECT_EQ(m.step, 10);
  EXPECT_EQ(m.consumed_tokens, 10000);
  EXPECT_EQ(m.seed, 7u);
  EXPECT_EQ(m.cursor, (SamplerCursor{{{1, 2, 3, 40}, {0, 5, 0, 17}}}));
  EXPECT_EQ(m.config_ini, "[train]\nsteps = 20\n");

  // Three ranges that cut tensors in the middle of rows.
  ShardRanges three;
  const int64_t a = t.total / 3 + 5, b = 2 * t.total / 3 + 11;
  three.ranges = {{0, a}, {a, b}, {b, t.total}};
  State back{std::vector<float>(t.total), std::vector<float>(t.total), std::vector<float>(t.total)};
  checkpoint_load(MPI_COMM_WORLD, 0, path, c, t, three, back.p.data(), whole(t.total), back.m.data(),
                  back.v.data());
  for (const ParamView& v : t.views)
    for (int64_t i = v.offset; i < v.offset + v.numel(); ++i) {
      ASSERT_EQ(back.p[i], st.p[i]) << v.name;
      ASSERT_EQ(back.m[i], st.m[i]) << v.name;
      ASSERT_EQ(back.v[i], st.v[i]) << v.name;
    }
  for (const CheckpointTensor& x : checkpoint_verify(path)) EXPECT_TRUE(x.ok) << x.name;
}

TEST_F(CheckpointTest, BitFlipNamesTheTensor) {
  const ModelConfig c = tiny();
  const ParamTable t = make_param_table(c);
  const State st = random_state(t.total, 2);
  const std::string path = save(dir_, 5, c, t, st);
  haddr_t offset = 0;
  {
    h5::Id f = h5::open_file(path);
    h5::Id d = h5::open_dataset(f.get(), "optimizer/exp_avg/model.norm.weight");
    offset = H5Dget_offset(d.get());
  }
  {
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(offset) + 9);
    char ch = 0;
    io.get(ch);
    io.seekp(static_cast<std::streamoff>(offset) + 9);
    io.put(static_cast<char>(ch ^ 0x10));
  }
  int bad = 0;
  for (const CheckpointTensor& x : checkpoint_verify(path)) {
    if (!x.ok) {
      EXPECT_EQ(x.name, "optimizer/exp_avg/model.norm.weight");
      ++bad;
    }
  }
  EXPECT_EQ(bad, 1);
  std::vector<float> p(t.total), m(t.total), v(t.total);
  EXPECT_THROW(checkpoint_load(MPI_COMM_WORLD, 0, path, c, t, whole(t.total), p.data(), whole(t.total),
                               m.data(), v.data()),
               AgreedFailure);
}

TEST_F(CheckpointTest, LatestAndKeep) {
  const ModelConfig c = tiny();
  const ParamTable t = make_param_table(c);
  const State st = random_state(t.total, 3);
  EXPECT_EQ(checkpoint_resolve("auto", dir_), "");  // empty directory: fresh start
  for (int64_t s : {5, 10, 15}) save(dir_, s, c, t, st, 2);
  EXPECT_EQ(checkpoint_steps(dir_), (std::vector<int64_t>{10, 15}));
  EXPECT_EQ(checkpoint_resolve("auto", dir_), path("step_00000015.h5"));
  EXPECT_FALSE(std::filesystem::exists(path("step_00000015.h5.partial")));

  std::ofstream(path("latest")) << "step_00000099.h5\n";
  try {
    checkpoint_resolve("auto", dir_);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step_00000099.h5, which does not exist"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path("latest"));
  EXPECT_THROW(checkpoint_resolve("auto", dir_), Error);  // checkpoints without `latest`
  EXPECT_THROW(checkpoint_resolve("auto", ""), Error);
  EXPECT_THROW(checkpoint_resolve(path("nope.h5"), dir_), Error);
}

TEST_F(CheckpointTest, OtherModelNamesTheField) {
  const ModelConfig c = tiny();
  const ParamTable t = make_param_table(c);
  const std::string path = save(dir_, 1, c, t, random_state(t.total, 4));
  try {
    checkpoint_read_meta(path, tiny(128));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.hidden"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flexsp
