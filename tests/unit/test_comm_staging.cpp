// Host-side logic of the backend communicators (lib/comm/comm_staged.h,
// lib/platform/backend_comms.h), in one process: the byte runs staging copies, the
// parallel.comm choice and its errors, GPU-UUID distinctness, and a staged Comm over
// MPI_COMM_SELF with a counting mover: results equal the host Comm's, receive gaps stay
// untouched, and a steady state allocates no host memory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "lib/platform/backend_comms.h"
#include "support/comm_check.h"
#include "support/error_of.h"

namespace flexsp::testing {
namespace {

std::vector<ByteRun> runs(const std::vector<size_t>& counts, const std::vector<size_t>& offsets,
                          size_t es) {
  std::vector<ByteRun> out{{99, 99}};  // cleared by block_runs
  block_runs(counts.data(), offsets.data(), static_cast<int>(counts.size()), es, out);
  return out;
}

TEST(CommStaging, BlockRuns) {
  using R = std::vector<ByteRun>;
  EXPECT_EQ(runs({}, {}, 4), R{});
  EXPECT_EQ(runs({0, 0}, {0, 10}, 4), R{});
  // Contiguous blocks become one run.
  EXPECT_EQ(runs({3, 2, 5}, {0, 3, 5}, 4), (R{{0, 40}}));
  // Gaps stay gaps; zero-count blocks vanish.
  EXPECT_EQ(runs({3, 0, 2}, {0, 3, 10}, 4), (R{{0, 12}, {40, 8}}));
  // Out of order and overlapping blocks are sorted and merged.
  EXPECT_EQ(runs({2, 4, 1}, {10, 0, 3}, 2), (R{{0, 8}, {20, 4}}));
  EXPECT_EQ(runs({5, 2}, {0, 1}, 1), (R{{0, 5}}));
  // A block touching the previous one's end merges with it.
  EXPECT_EQ(runs({2, 2}, {6, 4}, 8), (R{{32, 32}}));
}

TEST(CommStaging, ChoiceTable) {
  const auto C = [](const char* mode, const char* be, bool built, bool own) {
    return choose_comm(*enum_parse<CommMode>(mode), be, built, own);
  };
  for (bool built : {false, true})
    for (bool own : {false, true}) {
      EXPECT_EQ(C("auto", "cpu", built, own), CommChoice::host);
      EXPECT_EQ(C("mpi", "cpu", built, own), CommChoice::host);
      EXPECT_EQ(C("mpi-staged", "cpu", built, own), CommChoice::staged);
      EXPECT_EQ(C("mpi", "cuda", built, own), CommChoice::staged);
      EXPECT_EQ(C("mpi-staged", "cuda", built, own), CommChoice::staged);
      EXPECT_EQ(C("auto", "cuda", built, own),
                built && own ? CommChoice::nccl : CommChoice::staged);
    }
  EXPECT_EQ(C("nccl", "cuda", true, true), CommChoice::nccl);
  EXPECT_STREQ(comm_choice_name(CommChoice::host), "mpi");
  EXPECT_STREQ(comm_choice_name(CommChoice::staged), "mpi-staged");
  EXPECT_STREQ(comm_choice_name(CommChoice::nccl), "nccl");
}

TEST(CommStaging, ChoiceErrorsNameTheKey) {
  const auto err = [](const char* mode, const char* be, bool built, bool own) {
    return error_of([&] { choose_comm(*enum_parse<CommMode>(mode), be, built, own); });
  };
  for (const std::string& e : {err("nccl", "cpu", true, true), err("nccl", "cuda", false, true),
                               err("nccl", "cuda", true, false)})
    EXPECT_EQ(e.rfind("parallel.comm: ", 0), 0u) << e;
  EXPECT_NE(err("nccl", "cpu", true, true).find("train.backend = cuda"), std::string::npos);
  EXPECT_NE(err("nccl", "cuda", false, true).find("not available in this build"), std::string::npos);
  EXPECT_NE(err("nccl", "cuda", true, false).find("GPU of its own"), std::string::npos);
}

TEST(CommStaging, IdsDistinct) {
  const uint8_t a[] = {1, 2, 3, 1, 2, 4, 9, 9, 9};
  EXPECT_TRUE(ids_distinct(a, 3, 3));
  EXPECT_TRUE(ids_distinct(a, 0, 3));
  const uint8_t b[] = {1, 2, 3, 7, 7, 7, 1, 2, 3};
  EXPECT_FALSE(ids_distinct(b, 3, 3));
  EXPECT_TRUE(ids_distinct(b, 2, 3));
}

// A malloc mover that counts what staging asks of it.
struct CountingMover final : HostMover {
  size_t allocs = 0, frees = 0, bytes_in = 0, bytes_out = 0;
  void to_host(void* h, const void* s, size_t n) override {
    std::memcpy(h, s, n);
    bytes_in += n;
  }
  void from_host(void* d, const void* h, size_t n) override {
    std::memcpy(d, h, n);
    bytes_out += n;
  }
  void* alloc_host(size_t n) override {
    ++allocs;
    return std::malloc(n);
  }
  void free_host(void* p) override {
    if (p != nullptr) ++frees;
    std::free(p);
  }
};

TEST(CommStaging, SelfCommMatchesHostAndSettles) {
  auto be = make_cpu_backend();
  auto host = make_mpi_comm(MPI_COMM_SELF, /*owned=*/false);
  auto mover = std::make_shared<CountingMover>();
  {
    auto area = make_staging_area(mover);
    auto staged = make_staged_comm(*host, area);
    EXPECT_STREQ(staged->kind(), "mpi-staged");
    check_comm_matches_host(*staged, *host, *be, 1, false);
    const size_t warm = staging_area_allocations(*area), held = staging_area_bytes(*area);
    EXPECT_GT(warm, 0u);
    for (uint64_t pass = 2; pass < 5; ++pass) check_comm_matches_host(*staged, *host, *be, pass, false);
    EXPECT_EQ(staging_area_allocations(*area), warm) << "host staging allocated in a steady state";
    EXPECT_EQ(staging_area_bytes(*area), held);
    EXPECT_EQ(mover->allocs, warm);

    // all_to_all_v copies only its blocks: 2 of 10 elements out and back.
    const size_t in0 = mover->bytes_in, out0 = mover->bytes_out;
    const size_t c = 2, o = 4, ro = 7;
    std::vector<float> s(10, 1.f), d(10, 0.f);
    staged->all_to_all_v(s.data(), &c, &o, d.data(), &c, &ro, DType::f32);
    EXPECT_EQ(mover->bytes_in - in0, 2 * sizeof(float));
    EXPECT_EQ(mover->bytes_out - out0, 2 * sizeof(float));
    EXPECT_EQ(d, (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 1, 1, 0}));
  }
  EXPECT_EQ(mover->frees, mover->allocs) << "the area frees what it allocated";
}

}  // namespace
}  // namespace flexsp::testing
