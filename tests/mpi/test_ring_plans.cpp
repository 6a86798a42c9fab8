// PlanExecutor with hand-built plans whose groups run as Ulysses, ring or USP (the model has
// 2 heads, so a group of 4 or 8 is USP with u = 2 under auto, a ring under ring): the
// gradients summed over the world and the loss equal one process running the whole batch,
// for documents of 1, 2, odd and 2r-1 tokens and many per group. On 8 ranks one
// micro-batch holds a USP group next to a Ulysses group and single ranks. A model with
// activation offload follows each micro-batch's offload flag.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "io/dataset/token_dataset.h"
#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/model/params.h"
#include "lib/runtime/executor.h"
#include "lib/runtime/micro_batch.h"
#include "support/rel_err.h"

namespace flexsp {
namespace {

ModelConfig model() {
  ModelConfig c;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 2;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.ffn = 48;
  c.vocab = 64;
  return c;
}

// Documents of 1, 2, odd and 2r-1 (r = 2, 4) tokens next to longer ones.
const std::vector<int> kLens{1, 2, 3, 7, 15, 5, 41, 121, 64, 9, 33, 6, 17, 200, 1, 2, 11, 70};

struct Data {
  std::string path;
  TokenDataset ds;
  std::vector<SeqRef> batch;
};

std::string write_data(int rank) {
  const std::string path =
      "/tmp/flexsp_ring_plans_" + std::to_string(getpid()) + "_" + std::to_string(rank) + ".h5";
  {
    TokenWriterOptions o;
    o.vocab_size = 64;
    o.eos_id = 63;
    o.tokenizer = "test";
    TokenWriter w(path, o);
    for (size_t i = 0; i < kLens.size(); ++i) {
      std::vector<int32_t> t(static_cast<size_t>(kLens[i]));
      for (size_t j = 0; j < t.size(); ++j) t[j] = static_cast<int32_t>((i * 17 + j * 5) % 63);
      w.add_document(t.data(), static_cast<int64_t>(t.size()));
    }
    w.close();
  }
  return path;
}

Data make_data(int rank) {
  const std::string path = write_data(rank);
  Data d{path, TokenDataset::open({path}), {}};
  for (size_t i = 0; i < kLens.size(); ++i)
    d.batch.push_back(SeqRef{static_cast<int64_t>(i), 0, kLens[i]});
  return d;
}

PlanGroup group(int first, int size, std::vector<int32_t> seqs) {
  return PlanGroup{first, size, std::move(seqs)};
}

struct Result {
  std::vector<float> grads;
  double loss = 0;
};

int64_t total_tokens() {
  int64_t total = 0;
  for (int l : kLens) total += l;
  return total;
}

// stores, when given, counts the model's blocks stored to the host (activation offload).
Result run(Groups& groups, Backend& be, const Plan& plan, const Data& d, CpMode mode,
           const ModelConfig& c = model(), int* stores = nullptr) {
  const int64_t total = total_tokens();
  PlanExecutor ex(be, c, SpGroups{&groups, {}, mode, 0}, total + 8, total + 8);
  if (stores != nullptr)
    ex.model().set_offload_trace([stores](const OffloadEvent& e) { *stores += e.step == OffloadStep::store; });
  const ParamTable& t = ex.model().params();
  std::vector<float> params(static_cast<size_t>(t.total)), grads(params.size(), 0.f);
  init_params(c, t, 5, params.data(), 0, t.total);
  const double scale = 1.0 / static_cast<double>(count_predictions(d.batch));
  const ExecStats st = ex.run(plan, d.batch, d.ds, params.data(), grads.data(), scale);
  Result r;
  r.grads = grads;
  r.loss = st.loss_sum;
  groups.world->all_reduce(r.grads.data(), r.grads.data(), r.grads.size(), DType::f32,
                           ReduceOp::sum);
  groups.world->all_reduce(&r.loss, &r.loss, 1, DType::f64, ReduceOp::sum);
  return r;
}

// The world's grid and groups, a backend and this rank's copy of the data.
struct World {
  Grid g = grid_create(MPI_COMM_WORLD, 0);
  Groups groups = groups_create(g);
  std::unique_ptr<Backend> be = make_cpu_backend();
  Data d = make_data(g.rank);
  ~World() {
    std::remove(d.path.c_str());
    groups = Groups{};
    grid_destroy(g);
  }
};

TEST(RingPlans, MixedGroupsEqualOneProcess) {
  World w;
  Groups& groups = w.groups;
  Backend* be = w.be.get();
  const Data& d = w.d;
  const int W = w.g.size;
  std::vector<int32_t> all;
  for (size_t i = 0; i < kLens.size(); ++i) all.push_back(static_cast<int32_t>(i));

  // Reference: rank 0 runs the whole batch alone.
  Plan ref;
  ref.micro_batches.emplace_back();
  for (int r = 0; r < W; ++r) ref.micro_batches[0].groups.push_back(group(r, 1, r == 0 ? all : std::vector<int32_t>{}));
  const Result want = run(groups, *be, ref, d, CpMode::automatic);

  // Micro-batch 0: the whole world as one group (USP u = 2, or a ring); micro-batch 1
  // (8 ranks): a USP group of 4 beside a Ulysses group of 2 and two single ranks.
  Plan p;
  PlanMicroBatch m0, m1;
  m0.groups.push_back(group(0, W, {0, 1, 2, 3, 4, 5, 6, 7, 8}));
  if (W >= 8) {
    m1.groups = {group(0, 4, {9, 10, 11, 12, 13}), group(4, 2, {14, 15}), group(6, 1, {16}),
                 group(7, 1, {17})};
  } else {
    m1.groups.push_back(group(0, W, {9, 10, 11, 12, 13, 14, 15, 16, 17}));
  }
  p.micro_batches = {m0, m1};
  for (CpMode mode : {CpMode::automatic, CpMode::ring}) {
    const Result got = run(groups, *be, p, d, mode);
    EXPECT_LT(std::abs(got.loss - want.loss), 1e-5 * std::abs(want.loss)) << cp_mode_name(mode);
    EXPECT_LT(norm_rel_err(got.grads, want.grads), 1e-5) << cp_mode_name(mode);
  }
}

// The executor hands each micro-batch's offload flag to the model: one built with offload
// and offload_plain_tokens stores every layer's block of a micro-batch the plan offloads
// and none of another's, on single ranks and in a group of the world, with the gradients
// of the same plan run without offload.
TEST(RingPlans, MicroBatchesOffloadAsPlanned) {
  World w;
  const int W = w.g.size;
  ModelConfig plain = model();
  plain.layers = 4;
  ModelConfig off = plain;
  off.offload = true;
  off.offload_ahead = 1;  // a ring of 3 slots for 4 layers
  off.offload_plain_tokens = total_tokens() + 8;
  for (const bool single : {true, false})
    for (const bool offload : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (single ? "single ranks" : "a group of the world")
                                        << ", offload " << offload);
      PlanMicroBatch m;
      m.offload = offload;
      std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(single ? W : 1));
      for (size_t i = 0; i < kLens.size(); ++i) seqs[i % seqs.size()].push_back(static_cast<int32_t>(i));
      for (size_t r = 0; r < seqs.size(); ++r)
        m.groups.push_back(group(static_cast<int>(r), single ? 1 : W, seqs[r]));
      Plan p;
      p.micro_batches = {m};
      int stores = 0;
      const Result want = run(w.groups, *w.be, p, w.d, CpMode::automatic, plain);
      const Result got = run(w.groups, *w.be, p, w.d, CpMode::automatic, off, &stores);
      EXPECT_EQ(stores, offload ? 4 : 0);
      EXPECT_EQ(got.loss, want.loss);
      EXPECT_TRUE(got.grads == want.grads);
    }
}

}  // namespace
}  // namespace flexsp
