// The splits and passes of memory-bound batches (lib/planner/mb/): mb_exchange lowers
// the makespans' sum where an exchange provably helps, keeps every micro-batch within
// memory and every sequence exactly once, stops at its cap and at the clock; the tiered
// split stacks the pieces that need wide groups; plan_step stays valid and deterministic
// with both, and never slower than without the exchange pass. mb_partner fills the slack of
// a wide piece's group with a sequence of another micro-batch (the 80 GB long-tail case).
// Seeded splits (mb_split_seeded): the given pieces stay in their micro-batches, pieces of
// one size share a group while its memory holds them, the rest goes where the estimate
// (all devices, the fixed groups' slack included) grows least; an invalid seed gives no
// split; plan_step with PlannerContext::seed_split stays valid. Levels (mb_seed_levels):
// each level's pieces run within its head's time on the devices of one micro-batch, longest
// first; plan_step with them is valid, deterministic and never slower than without.
// mb_resplit: two micro-batches pooled and split again get faster and stay sound.
// mb_pooled: uniform groups for micro-batches at least 90% full to the token. Past 256
// devices, a sample's split replicated: plan_step valid, deterministic, faster on a batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

#include "lib/plan/plan.h"
#include "lib/planner/mb/mb_solver.h"
#include "lib/planner/planner.h"
#include "support/planner_context.h"

namespace flexsp {
namespace {

PlannerContext ctx64() { return testing::planner_context_7b_64(196608); }

// plan_step's predicted step with a pass on (knob = on) and off (0), after checking that
// the plan with it is valid and deterministic.
std::pair<double, double> with_and_without(PlannerContext ctx, const std::vector<int64_t>& len,
                                           int PlannerContext::*knob, int on) {
  ctx.*knob = on;
  PlanStats st;
  const Plan p = plan_step(ctx, len, &st);
  EXPECT_NO_THROW(plan_validate(p, len, plan_limits(ctx, plan_costs(ctx))));
  EXPECT_EQ(plan_encode(p), plan_encode(plan_step(ctx, len))) << "not deterministic";
  ctx.*knob = 0;
  PlanStats off;
  plan_step(ctx, len, &off);
  return {st.predicted_ms, off.predicted_ms};
}

double sum_ms(const std::vector<MbPlan>& plans) {
  double t = 0;
  for (const MbPlan& p : plans) t += p.makespan_ms;
  return t;
}

// Every sequence once, every micro-batch within memory, every group within its memory.
void expect_sound(const PlanCosts& c, const std::vector<int64_t>& len,
                  const std::vector<std::vector<int32_t>>& mbs, const std::vector<MbPlan>& plans) {
  ASSERT_EQ(mbs.size(), plans.size());
  std::vector<int> seen(len.size(), 0);
  for (size_t k = 0; k < mbs.size(); ++k) {
    int64_t tok = 0;
    std::vector<int32_t> in_plan;
    for (const PlanGroup& g : plans[k].groups) {
      int64_t gt = 0;
      for (int32_t s : g.seqs) gt += len[s], in_plan.push_back(s);
      EXPECT_LE(gt, c.tokens_per_rank * g.size);
    }
    for (int32_t s : mbs[k]) tok += len[s], seen[s]++;
    EXPECT_LE(tok, c.tokens_per_rank * c.world);
    std::vector<int32_t> a = mbs[k];
    std::sort(a.begin(), a.end());
    std::sort(in_plan.begin(), in_plan.end());
    EXPECT_EQ(a, in_plan) << "micro-batch " << k;
    EXPECT_NEAR(plans[k].makespan_ms, mb_makespan(c, len, plans[k].groups), 1e-6);
  }
  for (int n : seen) EXPECT_EQ(n, 1);
}

// Micro-batch 0: four 192K pieces (each needs a 16-GPU group: E = 17114, so they take all
// 64 devices) and a 60K sequence, which can only sit beside a piece on its group and
// lengthens it by 2.6 s; micro-batch 1: short sequences with memory to spare, where the
// 60K sequence costs far less. No plan of micro-batch 0 beats a piece alone: the pass
// must reach that, at a lower sum.
TEST(MbExchange, MovesFillerOffTheLongPieces) {
  const PlanCosts c = plan_costs(ctx64());
  ASSERT_EQ(c.min_size(196609), 16);
  std::vector<int64_t> len(4, 196609);
  std::vector<std::vector<int32_t>> mbs(2);
  for (int32_t i = 0; i < 4; ++i) mbs[0].push_back(i);
  mbs[0].push_back(4), len.push_back(60000);
  for (int i = 0; i < 100; ++i) mbs[1].push_back(static_cast<int32_t>(len.size())), len.push_back(8000);
  std::vector<MbPlan> plans = {mb_greedy(c, len, mbs[0]), mb_greedy(c, len, mbs[1])};
  ASSERT_TRUE(plans[0].ok && plans[1].ok);
  const double piece = c.seq_ms(196609, 16);
  ASSERT_GT(plans[0].makespan_ms, piece * 1.01);
  const double before = sum_ms(plans);
  const int kept = mb_exchange(c, len, mbs, plans, 1000);
  EXPECT_GE(kept, 1);
  EXPECT_LT(sum_ms(plans), before - 1000);
  EXPECT_NEAR(plans[0].makespan_ms, piece, 1e-6 * piece);  // the optimum of micro-batch 0
  expect_sound(c, len, mbs, plans);
  // Deterministic: the same input gives the same split.
  std::vector<std::vector<int32_t>> mbs2(2);
  for (int32_t i = 0; i < 5; ++i) mbs2[0].push_back(i);
  for (int32_t i = 5; i < 105; ++i) mbs2[1].push_back(i);
  std::vector<MbPlan> plans2 = {mb_greedy(c, len, mbs2[0]), mb_greedy(c, len, mbs2[1])};
  mb_exchange(c, len, mbs2, plans2, 1000);
  EXPECT_EQ(mbs, mbs2);
}

// A full micro-batch takes a long sequence only against shorter ones of at least the
// tokens it lacks: memory holds after any number of exchanges on a memory-bound batch.
TEST(MbExchange, KeepsMemoryOnFullMicroBatches) {
  const PlanCosts c = plan_costs(ctx64());
  const int64_t cap = c.tokens_per_rank * c.world;
  std::mt19937_64 g(3);
  std::lognormal_distribution<double> d(8.0, 1.6);
  std::vector<int64_t> len;
  std::vector<std::vector<int32_t>> mbs(1);
  int64_t tok = 0;
  // Fill micro-batches to within a few tokens of memory, in arrival order.
  for (int i = 0; i < 600; ++i) {
    const int64_t l = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 196609);
    if (tok + l > cap) mbs.emplace_back(), tok = 0;
    mbs.back().push_back(static_cast<int32_t>(len.size()));
    len.push_back(l);
    tok += l;
  }
  std::vector<MbPlan> plans;
  for (const auto& m : mbs) plans.push_back(mb_greedy(c, len, m));
  for (const MbPlan& p : plans) ASSERT_TRUE(p.ok);
  const double before = sum_ms(plans);
  EXPECT_GE(mb_exchange(c, len, mbs, plans, 64), 1);
  EXPECT_LT(sum_ms(plans), before);
  expect_sound(c, len, mbs, plans);
}

// The cap and the clock stop the pass: out_of_time is asked before each re-planned pair.
TEST(MbExchange, StopsAtTheCapAndTheClock) {
  const PlanCosts c = plan_costs(ctx64());
  std::vector<int64_t> len(4, 196609);
  std::vector<std::vector<int32_t>> mbs(2);
  for (int32_t i = 0; i < 4; ++i) mbs[0].push_back(i);
  mbs[0].push_back(4), len.push_back(60000);
  for (int i = 0; i < 100; ++i) mbs[1].push_back(static_cast<int32_t>(len.size())), len.push_back(8000);
  const auto start_mbs = mbs;
  std::vector<MbPlan> plans = {mb_greedy(c, len, mbs[0]), mb_greedy(c, len, mbs[1])};
  const auto start_plans = plans;
  EXPECT_EQ(mb_exchange(c, len, mbs, plans, 0), 0);
  EXPECT_EQ(mbs, start_mbs);
  int asked = 0;
  EXPECT_EQ(mb_exchange(c, len, mbs, plans, 1000, [&] { return ++asked > 0; }), 0);
  EXPECT_EQ(mbs, start_mbs);
  EXPECT_GE(asked, 1);
  // One pair re-planned at most: the piece tried first does not help, so nothing moves.
  EXPECT_EQ(mb_exchange(c, len, mbs, plans, 1), 0);
  EXPECT_EQ(mbs, start_mbs);
  EXPECT_EQ(sum_ms(plans), sum_ms(start_plans));
}

// The tiered split stacks the pieces that need wide groups (four per micro-batch here)
// and keeps every micro-batch under the cap it is given.
TEST(MbSplitTiered, StacksWidePiecesUnderTheCap) {
  const PlanCosts c = plan_costs(ctx64());
  std::vector<int64_t> len;
  for (int i = 0; i < 6; ++i) len.push_back(196609);
  for (int i = 0; i < 300; ++i) len.push_back(1000 + 37 * i);
  int64_t total = 0;
  for (int64_t l : len) total += l;
  const int64_t cap = c.tokens_per_rank * c.world;
  const int m = static_cast<int>((total + cap - 1) / cap) + 1;
  const int64_t soft = (total / m + cap) / 2;
  const auto mbs = mb_split_tiered(c, len, m, soft, c.ranks_per_node / 2);
  ASSERT_EQ(static_cast<int>(mbs.size()), m);
  std::vector<int> pieces(m, 0);
  for (int k = 0; k < m; ++k) {
    int64_t tok = 0;
    for (int32_t s : mbs[k]) tok += len[s], pieces[k] += len[s] == 196609;
    EXPECT_LE(tok, soft);
  }
  EXPECT_EQ(pieces[0], 4);
  EXPECT_EQ(pieces[1], 2);
  EXPECT_TRUE(mb_split_tiered(c, len, 1, cap, 4).empty());  // does not fit one micro-batch
}

// Micro-batch 0: three 192K pieces and a 151K one, each on the 16-GPU group its memory
// needs; the 151K group finishes early. Micro-batch 1: a 101K sequence, which sets its
// makespan, and short ones. The 101K fits beside the 151K within memory and the pieces'
// time: it moves there, micro-batch 0 keeps its makespan and micro-batch 1 gets faster.
TEST(MbPartner, FillsTheSlackOfAWidePiecesGroup) {
  const PlanCosts c = plan_costs(ctx64());
  std::vector<int64_t> len = {196609, 196609, 196609, 151000, 101000};
  ASSERT_EQ(c.min_size(151000), 16);
  ASSERT_LE(151000 + 101000, c.tokens_per_rank * 16);
  const double piece = c.seq_ms(196609, 16);
  ASSERT_LE(c.seq_ms(151000, 16) + c.seq_ms(101000, 16), piece);
  std::vector<std::vector<int32_t>> mbs = {{0, 1, 2, 3}, {4}};
  for (int i = 0; i < 100; ++i) mbs[1].push_back(static_cast<int32_t>(len.size())), len.push_back(4000);
  std::vector<MbPlan> plans = {mb_greedy(c, len, mbs[0]), mb_greedy(c, len, mbs[1])};
  ASSERT_TRUE(plans[0].ok && plans[1].ok);
  ASSERT_NEAR(plans[0].makespan_ms, piece, 1e-6 * piece);
  const MbPlan rest = mb_greedy(c, len, std::vector<int32_t>(mbs[1].begin() + 1, mbs[1].end()));
  ASSERT_LT(rest.makespan_ms, plans[1].makespan_ms * 0.9);  // the 101K sets the makespan
  const double before = sum_ms(plans);
  EXPECT_GE(mb_partner(c, len, mbs, plans, 1000), 1);
  expect_sound(c, len, mbs, plans);
  ASSERT_EQ(mbs.size(), 2u);
  EXPECT_NE(std::find(mbs[0].begin(), mbs[0].end(), 4), mbs[0].end());
  EXPECT_NEAR(plans[0].makespan_ms, piece, 1e-6 * piece);
  EXPECT_LT(sum_ms(plans), before - 0.1 * (before - piece));
  // Nothing fits pieces without slack (four 192K), and the cap of 0 moves nothing.
  std::vector<int64_t> full = {196609, 196609, 196609, 196609, 101000};
  std::vector<std::vector<int32_t>> fm = {{0, 1, 2, 3}, {4}};
  std::vector<MbPlan> fp = {mb_greedy(c, full, fm[0]), mb_greedy(c, full, fm[1])};
  EXPECT_EQ(mb_partner(c, full, fm, fp, 1000), 0);
  EXPECT_EQ(fm[1], std::vector<int32_t>{4});
  const auto start = mbs;
  EXPECT_EQ(mb_partner(c, len, mbs, plans, 0), 0);
  EXPECT_EQ(mbs, start);
}

// A source that empties is dropped: a micro-batch of short sequences that all fit the
// slack of another's groups costs its fixed cost no more.
TEST(MbPartner, DropsAnEmptiedMicroBatch) {
  const PlanCosts c = plan_costs(ctx64());
  std::vector<int64_t> len = {196609, 151000, 3000, 3000, 3000};
  std::vector<std::vector<int32_t>> mbs = {{0, 1}, {2, 3, 4}};
  std::vector<MbPlan> plans = {mb_greedy(c, len, mbs[0]), mb_greedy(c, len, mbs[1])};
  ASSERT_TRUE(plans[0].ok && plans[1].ok);
  const double ms0 = plans[0].makespan_ms;
  EXPECT_EQ(mb_partner(c, len, mbs, plans, 1000), 3);
  ASSERT_EQ(mbs.size(), 1u);
  EXPECT_EQ(mbs[0].size(), 5u);
  EXPECT_NEAR(plans[0].makespan_ms, ms0, 1e-6 * ms0);
  expect_sound(c, len, mbs, plans);
}

// Two micro-batches of short sequences fit one by memory: dissolving the faster saves its
// fixed cost and most of its makespan. Pieces that fill memory cannot be dissolved.
TEST(MbDissolve, SpreadsAMicroBatchOverTheOthers) {
  const PlanCosts c = plan_costs(ctx64());
  std::vector<int64_t> len;
  std::vector<std::vector<int32_t>> mbs(3);
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 60 - 20 * k + 10; ++i) mbs[k].push_back(int32_t(len.size())), len.push_back(6000 + 100 * i);
  std::vector<MbPlan> plans;
  for (const auto& m : mbs) plans.push_back(mb_greedy(c, len, m));
  const double before = sum_ms(plans) + 3 * c.fixed_ms;
  const auto start = mbs;
  EXPECT_EQ(mb_dissolve(c, len, mbs, plans, 0), 0);
  EXPECT_EQ(mbs, start);
  EXPECT_EQ(mb_dissolve(c, len, mbs, plans, 4), 1);
  ASSERT_EQ(mbs.size(), 2u);
  expect_sound(c, len, mbs, plans);
  EXPECT_EQ(mbs[0].size() + mbs[1].size(), len.size());
  EXPECT_LT(sum_ms(plans) + 2 * c.fixed_ms, before);
  // Seven 192K pieces per micro-batch: the tokens of one more fit nowhere.
  std::vector<int64_t> full(14, 196609);
  ASSERT_GT(8 * 196609, c.tokens_per_rank * c.world);
  std::vector<std::vector<int32_t>> fm = {{0, 1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12, 13}};
  std::vector<MbPlan> fp = {mb_greedy(c, full, fm[0]), mb_greedy(c, full, fm[1])};
  EXPECT_EQ(mb_dissolve(c, full, fm, fp, 4), 0);
  EXPECT_EQ(fm.size(), 2u);
}

// plan_step with the pass: valid (plan_validate runs inside), deterministic with the
// clock out of play, never slower than without it, and faster on the planner
// benchmark's long tail (lognormal(8, 1.6), 192K pieces, 80 GB).
TEST(MbExchange, PlanStepValidDeterministicNotSlower) {
  PlannerContext ctx = ctx64();
  std::mt19937_64 g(21);
  std::lognormal_distribution<double> d(8.0, 1.6);
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> len(512);
    for (int64_t& x : len) x = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 196609);
    ctx.exchange_max_tries = 32;
    ctx.partner_max_tries = 32;
    ctx.dissolve_max_tries = 4;
    ctx.swap_max_tries = 128;
    PlanStats st;
    const Plan p = plan_step(ctx, len, &st);
    EXPECT_EQ(plan_encode(p), plan_encode(plan_step(ctx, len))) << "not deterministic";
    ctx.exchange_max_tries = 0;
    ctx.partner_max_tries = 0;
    ctx.dissolve_max_tries = 0;
    ctx.swap_max_tries = 0;
    PlanStats off;
    plan_step(ctx, len, &off);
    EXPECT_EQ(off.exchanges, 0);
    EXPECT_EQ(off.partners, 0);
    EXPECT_EQ(off.dissolved, 0);
    EXPECT_LE(st.dissolved, 1);  // one micro-batch at most per step
    EXPECT_LE(st.predicted_ms, off.predicted_ms * (1 + 1e-9)) << step;
    EXPECT_GE(st.predicted_ms, st.lower_bound_ms * (1 - 1e-9));
  }
}

bool has(const std::vector<int32_t>& v, int32_t s) { return std::find(v.begin(), v.end(), s) != v.end(); }

// Micro-batch 0: three 192K pieces and a 151K one on 16-GPU groups (all 64 devices); the
// 151K group finishes early, so a 101K sequence fits its slack (memory and time): it goes
// there, not into micro-batch 1, which holds nothing yet (mb_split_tiered, which counts
// only the devices the fixed groups leave, would send it there).
TEST(MbSplitSeeded, KeepsThePiecesAndFillsTheSlack) {
  const PlanCosts c = plan_costs(ctx64());
  ASSERT_EQ(c.min_size(196609), 16);
  std::vector<int64_t> len = {196609, 196609, 196609, 151000, 101000};
  ASSERT_LE(151000 + 101000, 16 * c.tokens_per_rank);
  ASSERT_LE(c.seq_ms(151000, 16) + c.seq_ms(101000, 16), c.seq_ms(196609, 16));
  for (int i = 0; i < 40; ++i) len.push_back(4000);
  const std::vector<std::vector<SeedPiece>> seed = {{{0, 16}, {1, 16}, {2, 16}, {3, 16}}, {}};
  const auto mbs = mb_split_seeded(c, len, seed, c.tokens_per_rank * c.world);
  ASSERT_EQ(mbs.size(), 2u);
  for (int32_t s = 0; s < 5; ++s) EXPECT_TRUE(has(mbs[0], s)) << s;
  for (int32_t s = 5; s < static_cast<int32_t>(len.size()); ++s) EXPECT_NE(has(mbs[0], s), has(mbs[1], s)) << s;
  EXPECT_EQ(mbs[0].size() + mbs[1].size(), len.size());
}

// Five pieces on 16-GPU groups fit 64 devices only because the two 90K ones share a
// group (their memory holds both); invalid seeds give {}.
TEST(MbSplitSeeded, SharesGroupsAndRejectsBadSeeds) {
  const PlanCosts c = plan_costs(ctx64());
  std::vector<int64_t> len = {196609, 196609, 196609, 90000, 90000, 3000};
  ASSERT_LE(180000, 16 * c.tokens_per_rank);
  const int64_t cap = c.tokens_per_rank * c.world;
  const auto ok = mb_split_seeded(c, len, {{{0, 16}, {1, 16}, {2, 16}, {3, 16}, {4, 16}}}, cap);
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].size(), len.size());
  EXPECT_TRUE(mb_split_seeded(c, len, {{{0, 16}, {0, 16}}}, cap).empty());    // a piece twice
  EXPECT_TRUE(mb_split_seeded(c, len, {{{0, 8}}}, cap).empty());              // 8 devices do not hold it
  EXPECT_TRUE(mb_split_seeded(c, len, {{{9, 16}}}, cap).empty());             // no such sequence
  EXPECT_TRUE(mb_split_seeded(c, len, {{{0, 64}, {1, 16}}}, cap).empty());    // more than the world
  EXPECT_TRUE(mb_split_seeded(c, len, {{{0, 16}}}, 200000).empty());          // the rest over the cap
}

// plan_step from a seed: a valid plan of every sequence, deterministic.
TEST(MbSplitSeeded, PlanStepFromASeedIsValid) {
  PlannerContext ctx = ctx64();
  ctx.time_limit_ms = 0;
  std::vector<int64_t> len = {196609, 196609, 196609, 196609, 196609, 151000, 101000};
  for (int i = 0; i < 60; ++i) len.push_back(2000 + 300 * i);
  ctx.seed_split = {{{0, 16}, {1, 16}, {2, 16}, {3, 16}}, {{4, 16}, {5, 16}}};
  PlanStats st;
  const Plan p = plan_step(ctx, len, &st);
  EXPECT_NO_THROW(plan_validate(p, len, plan_limits(ctx, plan_costs(ctx))));
  const Plan q = plan_step(ctx, len);
  EXPECT_DOUBLE_EQ(p.predicted_ms, q.predicted_ms);
  EXPECT_LE(st.micro_batches, 2);
}


// Micro-batch 0: three 192K pieces and a 138K one, each on a 16-GPU group (all 64
// devices; 17.15 s). Micro-batch 1: 133K, 130K and 125K pieces (32, 16 and 16 GPUs). The
// 133K pairs with the 138K within that group's memory: micro-batch 0 gets slower (18.4 s)
// and micro-batch 1 faster by more. The plain moves only go to faster micro-batches and
// mb_partner only where the destination keeps its makespan (none of the three fits the
// 138K group's slack): only the last round (any_dst) finds it.
TEST(MbExchange, AnyDestinationPairsALongPieceInASlowerMicroBatch) {
  const PlanCosts c = plan_costs(ctx64());
  const std::vector<int64_t> len = {196609, 196609, 196609, 138395, 133413, 130000, 125000};
  ASSERT_LE(138395 + 133413, 16 * c.tokens_per_rank);
  const std::vector<std::vector<int32_t>> start = {{0, 1, 2, 3}, {4, 5, 6}};
  auto planned = [&](const std::vector<std::vector<int32_t>>& mbs) {
    return std::vector<MbPlan>{mb_greedy(c, len, mbs[0]), mb_greedy(c, len, mbs[1])};
  };
  std::vector<std::vector<int32_t>> plain = start, any = start;
  std::vector<MbPlan> plain_plans = planned(plain), any_plans = planned(any);
  ASSERT_TRUE(plain_plans[0].ok && plain_plans[1].ok);
  const double before = sum_ms(plain_plans);
  EXPECT_EQ(mb_exchange(c, len, plain, plain_plans, 1000), 0);
  EXPECT_EQ(mb_partner(c, len, plain, plain_plans, 1000), 0);
  EXPECT_GE(mb_exchange(c, len, any, any_plans, 1000, {}, true), 1);
  EXPECT_LT(sum_ms(any_plans), before - 1000);
  ASSERT_EQ(any.size(), 2u);
  EXPECT_TRUE(has(any[0], 4)) << "the 133K joins the 192K pieces";
  expect_sound(c, len, any, any_plans);
}

// The 120 GB long tail's widest step (64 GPUs): three 192K pieces, then 138K down to
// 84K. Every level fits the world, its pieces take the narrowest group that runs them
// within the head's time and at least alpha of it, the heads come longest first (their
// times need not: a level's head runs on its own smallest group), no piece twice; the
// levels stop at a head under beta x avg; m entries.
TEST(MbSeedLevels, EachLevelFinishesWithinItsHead) {
  PlannerContext ctx = ctx64();
  ctx.mem_per_gpu_gb = 120;
  const PlanCosts c = plan_costs(ctx);
  std::vector<int64_t> len = {196609, 196609, 196609, 138395, 133413, 123143, 112430, 111348, 104642, 99471, 96835,
                              90817, 84161};
  for (int i = 0; i < 200; ++i) len.push_back(1000 + 150 * i);
  for (int widen : {0, 1, 2})  // 2: once, the first level too
    for (double alpha : {0.3, 0.5}) {
      const auto seed = mb_seed_levels(c, len, 4, 0, std::min(widen, 1), alpha, 0.5, 0, widen == 2);
      ASSERT_EQ(seed.size(), 4u);
      std::vector<int> seen(len.size(), 0);
      int64_t prev_head = len[0];
      for (const auto& level : seed) {
        if (level.empty()) continue;
        int devices = 0;
        const double head = c.seq_ms(len[level[0].seq], level[0].size);
        EXPECT_LE(len[level[0].seq], prev_head);
        prev_head = len[level[0].seq];
        for (const SeedPiece& p : level) {
          devices += p.size;
          ++seen[p.seq];
          ASSERT_TRUE(c.holds(len[p.seq], p.size));
          EXPECT_LE(c.seq_ms(len[p.seq], p.size), head * (1 + 1e-4));
          EXPECT_GE(c.seq_ms(len[p.seq], p.size), alpha * head);
          if (p.size > 1 && c.holds(len[p.seq], p.size / 2)) {  // the narrowest within the head's time
            EXPECT_GT(c.seq_ms(len[p.seq], p.size / 2), head * (1 + 1e-4));
          }
        }
        EXPECT_LE(devices, c.world);
      }
      for (int n : seen) EXPECT_LE(n, 1);
      for (int32_t s = 0; s < 3; ++s) EXPECT_EQ(seen[s], 1) << "the 192K pieces lead";
    }
  // A head under beta x avg ends the levels: nothing is built.
  EXPECT_TRUE(mb_seed_levels(c, len, 4, 1e9, 0, 0.5, 0.5).empty());
}

// 80 GB: three 192K pieces and a 138K one take a 16-GPU group each (all 64 devices). The
// 133K piece, with no devices left, joins the 138K one's group under share 0.1 (18.4 s
// against the level's 17.15 s; memory holds both), not under share 0 or 0.05, nor does it
// join a 192K piece's group (memory).
TEST(MbSeedLevels, SharesAGroupWithinTheTolerance) {
  const PlanCosts c = plan_costs(ctx64());
  std::vector<int64_t> len = {196609, 196609, 196609, 138395, 133413};
  for (int i = 0; i < 100; ++i) len.push_back(500 + 100 * i);
  ASSERT_EQ(c.min_size(138395), 16);
  const double level = c.seq_ms(196609, 16), pair = c.seq_ms(138395, 16) + c.seq_ms(133413, 16);
  ASSERT_GT(pair, level * 1.05);
  ASSERT_LT(pair, level * 1.1);
  auto in_first = [&](const std::vector<std::vector<SeedPiece>>& seed, int32_t s) {
    return std::any_of(seed[0].begin(), seed[0].end(), [&](const SeedPiece& p) { return p.seq == s; });
  };
  for (double share : {0.0, 0.05}) EXPECT_FALSE(in_first(mb_seed_levels(c, len, 2, 0, 0, 0.3, 0.5, share), 4));
  const auto seed = mb_seed_levels(c, len, 2, 0, 0, 0.3, 0.5, 0.1);
  ASSERT_TRUE(in_first(seed, 4));
  for (const SeedPiece& p : seed[0]) EXPECT_EQ(p.size, 16);
  const auto mbs = mb_split_seeded(c, len, seed, c.tokens_per_rank * c.world);
  ASSERT_EQ(mbs.size(), 2u);
  const MbPlan first = mb_greedy(c, len, mbs[0]);
  ASSERT_TRUE(first.ok);
  EXPECT_TRUE(has(mbs[0], 3) && has(mbs[0], 4));
}

// A Pareto-tail step at 80 GB (64 GPUs): two 192K pieces, then 109K down to 61K. Levels
// led by the 192K pieces on their smallest (16-GPU) groups take the rest beside them, all
// within 17.15 s; with the first level widened the 192K pieces take 32 GPUs each (9.5 s,
// all 64 devices) and the others a level of their own (109K on 16), and the split, each
// micro-batch planned greedily, is faster.
TEST(MbSeedLevels, WidenFirstGivesTheLongestPiecesALevelOfTheirOwn) {
  const PlanCosts c = plan_costs(ctx64());
  std::vector<int64_t> len = {196609, 196609, 108868, 81666, 68455, 66762, 60525};
  for (int i = 0; i < 300; ++i) len.push_back(300 + 7 * i);
  auto split_ms = [&](const std::vector<std::vector<SeedPiece>>& seed) {
    const auto mbs = mb_split_seeded(c, len, seed, c.tokens_per_rank * c.world);
    double total = 0;
    for (const auto& mb : mbs) {
      const MbPlan p = mb_greedy(c, len, mb);
      EXPECT_TRUE(p.ok);
      total += c.fixed_ms + p.makespan_ms;
    }
    return total;
  };
  const auto beside = mb_seed_levels(c, len, 3, 0, 1, 0.3, 0.5);
  ASSERT_FALSE(beside.empty());
  for (const SeedPiece& p : beside[0]) EXPECT_TRUE(p.seq >= 2 || p.size == 16);
  EXPECT_TRUE(std::any_of(beside[0].begin(), beside[0].end(), [](const SeedPiece& p) { return p.seq == 2; }));
  const auto own = mb_seed_levels(c, len, 3, 0, 1, 0.3, 0.5, 0, true);
  ASSERT_EQ(own.size(), 3u);
  ASSERT_EQ(own[0].size(), 2u);
  for (const SeedPiece& p : own[0]) EXPECT_EQ(p.size, 32);
  ASSERT_FALSE(own[1].empty());
  EXPECT_EQ(own[1][0].seq, 2);
  EXPECT_EQ(own[1][0].size, 16);
  EXPECT_LT(split_ms(own), split_ms(beside));
}

// plan_step with the levels splits (levels_max_counts 3) against without (0) on lognormal
// batches at 120 GB: valid, deterministic, never slower, and faster on some step.
TEST(MbSeedLevels, PlanStepNotSlowerWithLevels) {
  PlannerContext ctx = ctx64();
  ctx.mem_per_gpu_gb = 120;
  ctx.time_limit_ms = 0;
  std::mt19937_64 g(5);
  std::lognormal_distribution<double> d(8.0, 1.6);
  int faster = 0;
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> len(512);
    for (int64_t& x : len) x = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 196609);
    const auto [on, off] = with_and_without(ctx, len, &PlannerContext::levels_max_counts, 3);
    EXPECT_LE(on, off * (1 + 1e-9)) << step;
    faster += on < off * (1 - 1e-3);
    std::printf("step %d: %.0f ms with levels, %.0f without\n", step, on, off);
  }
  EXPECT_GE(faster, 1);
}

// Past 256 devices, the split of a sample planned on 64 devices and replicated
// (sample_devices): on a lognormal batch at 512 GPUs (4,096 sequences; the generator's
// second batch, where it wins) plan_step stays valid and deterministic and is faster than
// without it (0: off). It wins on few batches: 1 of 16 such ones, 4 of 12 heavy-tailed
// steps at 512 and 1024 GPUs.
TEST(SampleSplit, PlanStepFasterPast256Devices) {
  PlannerContext ctx = ctx64();
  ctx.world = 512;
  ctx.zero = {3, 512, 512, 512};
  std::mt19937_64 g(3);
  std::lognormal_distribution<double> d(8.0, 1.6);
  std::vector<int64_t> len(4096);
  for (int step = 0; step < 2; ++step)
    for (int64_t& x : len) x = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 196609);
  const auto [on, off] = with_and_without(ctx, len, &PlannerContext::sample_devices, 64);
  EXPECT_LT(on, off * 0.995);
  std::printf("%.0f ms with the sample, %.0f without\n", on, off);
}

// Two micro-batches dealt round robin from a lognormal batch at 80 GB (each holds 192K
// pieces beside short sequences): pooled and split again by the planner's rules they are
// faster; every sequence stays once, within memory. max_tries 0 changes nothing.
TEST(MbResplit, PoolsAPairAndSplitsItFaster) {
  const PlanCosts c = plan_costs(ctx64());
  std::mt19937_64 g(3);
  std::lognormal_distribution<double> d(8.0, 1.6);
  std::vector<int64_t> len(120);
  for (int64_t& x : len) x = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 196609);
  for (int i = 0; i < 4; ++i) len[static_cast<size_t>(i)] = 196609;
  std::vector<std::vector<int32_t>> mbs(2);
  int64_t tok[2] = {0, 0};
  for (int32_t s : mb_longest_first(len)) {  // round robin, memory permitting
    int k = static_cast<int>(mbs[0].size() + mbs[1].size()) % 2;
    if (tok[k] + len[s] > c.tokens_per_rank * c.world) k = 1 - k;
    mbs[k].push_back(s), tok[k] += len[s];
  }
  std::vector<MbPlan> plans = {mb_greedy(c, len, mbs[0]), mb_greedy(c, len, mbs[1])};
  ASSERT_TRUE(plans[0].ok && plans[1].ok);
  auto total = [&](const std::vector<MbPlan>& ps) { return sum_ms(ps) + c.fixed_ms * static_cast<double>(ps.size()); };
  const double before = total(plans);
  std::vector<std::vector<int32_t>> same = mbs;
  std::vector<MbPlan> same_plans = plans;
  EXPECT_EQ(mb_resplit(c, len, same, same_plans, 0), 0);
  EXPECT_EQ(same, mbs);
  EXPECT_GE(mb_resplit(c, len, mbs, plans, 64), 1);
  EXPECT_LT(total(plans), before * 0.97);
  expect_sound(c, len, mbs, plans);
}

// A micro-batch of short sequences 94% full to the token at 80 GB: the uniform plans are
// valid and within memory, mb_greedy_pooled is never slower than mb_greedy and here faster
// (groups of 8 pool memory that groups of 1-4 strand); under 90% full mb_pooled gives none.
TEST(MbPooled, UniformGroupsForFullMicroBatches) {
  const PlanCosts c = plan_costs(ctx64());
  std::mt19937_64 g(11);
  std::lognormal_distribution<double> d(8.0, 1.4);
  std::vector<int64_t> len;
  const int64_t target = c.tokens_per_rank * c.world * 94 / 100;
  for (int64_t tok = 0; tok < target;) {
    const int64_t x = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 60000);
    if (tok + x > target) break;
    len.push_back(x), tok += x;
  }
  std::vector<int32_t> seqs(len.size());
  std::iota(seqs.begin(), seqs.end(), 0);
  const MbPlan greedy = mb_greedy(c, len, seqs), pooled = mb_pooled(c, len, seqs);
  ASSERT_TRUE(greedy.ok && pooled.ok);
  expect_sound(c, len, {seqs}, {pooled});
  const MbPlan both = mb_greedy_pooled(c, len, seqs);
  EXPECT_LE(both.makespan_ms, greedy.makespan_ms * (1 + 1e-12));
  EXPECT_LT(both.makespan_ms, greedy.makespan_ms * 0.995);
  const std::vector<int32_t> most(seqs.begin(), seqs.begin() + static_cast<std::ptrdiff_t>(seqs.size() * 8 / 10));
  EXPECT_FALSE(mb_pooled(c, len, most).ok);
}

}  // namespace
}  // namespace flexsp
