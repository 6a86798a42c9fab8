// The compute fit of flexsp profile (lib/planner/analysis/compute_fit.h): synthetic probe timings
// made from known coefficients come back out of fit_compute, packed probes are what tell
// the per-micro-batch cost from the per-sequence one, and the per_sequence_ms key (file
// round trip, old files, bad values, the planner's seq_ms) prices every sequence.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/model/model_config.h"
#include "lib/planner/analysis/compute_fit.h"
#include "lib/planner/cost/cost_model.h"
#include "lib/planner/planner.h"
#include "lib/util/error.h"

using namespace flexsp;

namespace {

// Probes of the mixes on d = 1, 2, 4 timed by the model with the given coefficients (and a
// comm term for d > 1 that the fit must take off, not fit).
std::vector<ComputeProbe> synthetic(const ComputeFit& truth, const std::vector<std::vector<int64_t>>& mixes) {
  std::vector<ComputeProbe> out;
  for (int d : {1, 2, 4})
    for (const auto& mix : mixes) {
      ComputeProbe p{mix, d, 0, 0};
      int64_t tokens = 0;
      for (int64_t l : mix) tokens += l;
      p.comm_ms = d == 1 ? 0 : 1e-3 * double(tokens) / d;
      p.ms = truth.predict_ms(p);
      out.push_back(p);
    }
  return out;
}

ComputeFit coefficients(double fixed, double per_seq, double a2, double a1) {
  ComputeFit f;
  f.fixed_ms = fixed, f.per_sequence_ms = per_seq, f.a2_ms = a2, f.a1_ms = a1;
  return f;
}

void expect_recovered(const ComputeFit& got, const ComputeFit& want) {
  EXPECT_NEAR(got.fixed_ms, want.fixed_ms, 1e-6 * (1 + want.fixed_ms));
  EXPECT_NEAR(got.per_sequence_ms, want.per_sequence_ms, 1e-6 * (1 + want.per_sequence_ms));
  EXPECT_NEAR(got.a2_ms, want.a2_ms, 1e-8 + 1e-6 * want.a2_ms);
  EXPECT_NEAR(got.a1_ms, want.a1_ms, 1e-12 + 1e-6 * want.a1_ms);
  EXPECT_LT(got.rms, 1e-6);
}

}  // namespace

TEST(ComputeFit, MixesPackShorterLengthsToTheLongest) {
  const auto m = compute_probe_mixes({128, 256, 512, 1024});
  ASSERT_EQ(m.size(), 7u);
  EXPECT_EQ(m[0], std::vector<int64_t>{128});
  EXPECT_EQ(m[3], std::vector<int64_t>{1024});
  EXPECT_EQ(m[4], std::vector<int64_t>(8, 128));
  EXPECT_EQ(m[5], std::vector<int64_t>(4, 256));
  EXPECT_EQ(m[6], std::vector<int64_t>(2, 512));
  EXPECT_EQ(compute_probe_mixes({64, 128, 4096}, 8)[3], std::vector<int64_t>(8, 64));  // capped
}

TEST(ComputeFit, RecoversKnownCoefficientsFromPackedProbes) {
  const auto mixes = compute_probe_mixes({128, 256, 512, 1024});
  for (const ComputeFit& truth : {coefficients(7, 2.5, 0.4, 3e-4), coefficients(0, 9, 0.35, 4e-4),
                                  coefficients(20, 0, 0.5, 1e-4), coefficients(12, 3, 0.2, 0)}) {
    SCOPED_TRACE(testing::Message() << truth.fixed_ms << " " << truth.per_sequence_ms);
    expect_recovered(fit_compute(synthetic(truth, mixes)), truth);
  }
}

TEST(ComputeFit, OneSequenceProbesCannotTellPerSequenceFromFixed) {
  // k = 1 in every probe: the intercept is booked as fixed (an old profile's meaning).
  const std::vector<std::vector<int64_t>> singles{{128}, {256}, {512}, {1024}};
  const ComputeFit f = fit_compute(synthetic(coefficients(5, 4, 0.4, 3e-4), singles));
  EXPECT_NEAR(f.fixed_ms, 9, 1e-6);
  EXPECT_EQ(f.per_sequence_ms, 0);
  EXPECT_NEAR(f.a2_ms, 0.4, 1e-8);
}

TEST(ComputeFit, NoisyTimingsKeepTermsNonNegative) {
  const auto mixes = compute_probe_mixes({128, 256, 512, 1024});
  std::vector<ComputeProbe> p = synthetic(coefficients(0, 0, 0.4, 3e-4), mixes);
  for (size_t i = 0; i < p.size(); ++i) p[i].ms *= i % 2 ? 1.03 : 0.97;
  const ComputeFit f = fit_compute(p);
  EXPECT_GE(f.fixed_ms, 0);
  EXPECT_GE(f.per_sequence_ms, 0);
  EXPECT_GE(f.a1_ms, 0);
  EXPECT_NEAR(f.a2_ms, 0.4, 0.05);
  EXPECT_LT(f.rms, 0.05);
}

TEST(ComputeFit, TooFewLengthsIsAnError) {
  EXPECT_THROW(fit_compute({}), Error);
}

TEST(ComputeFit, PerSequenceKeyRoundTripsAndDefaultsToZero) {
  CostModel cm = cost_model_default();
  EXPECT_EQ(cm.per_sequence_ms, 0);
  EXPECT_EQ(cost_model_parse("a1_ms = 1e-4\nfixed_ms = 3\n", "old.ini").per_sequence_ms, 0);
  cm.per_sequence_ms = 2.25;
  EXPECT_DOUBLE_EQ(cost_model_parse(cost_model_to_ini(cm, "t"), "t").per_sequence_ms, 2.25);
  try {
    cost_model_parse("per_sequence_ms = -1\n", "cm.ini");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cm.ini:1: per_sequence_ms"), std::string::npos) << e.what();
  }
}

TEST(ComputeFit, PlannerPaysPerSequenceOnEverySequence) {
  PlannerContext ctx;
  ctx.world = 4;
  ctx.ranks_per_node = 2;
  ctx.model = resolve_model_config(ModelSection{.preset = "small"}, {}, 256);
  ctx.cost = cost_model_parse("model = small\na1_ms = 3e-4\na2_ms = 0.4\nfixed_ms = 20\nbw_intra_2 = 3\n"
                              "bw_inter_4 = 2.5\nparam_bytes = 4\ngrad_bytes = 4\noptim_bytes = 8\n",
                              "cm.ini");
  ctx.mem_per_gpu_gb = 2;
  PlannerContext with = ctx;
  with.cost.per_sequence_ms = 6;
  const PlanCosts c0 = plan_costs(ctx), c1 = plan_costs(with);
  for (int d : c0.sizes) EXPECT_NEAR(c1.seq_ms(512, d) - c0.seq_ms(512, d), 6, 1e-9);
  // Whatever the plan, 8 sequences pay 8 per-sequence costs over the groups that hold them.
  const std::vector<int64_t> lens(8, 256);
  const Plan p = plan_step(ctx, lens);
  double shift = 0;
  for (const PlanMicroBatch& mb : p.micro_batches) {
    double worst = 0;
    for (const PlanGroup& g : mb.groups) worst = std::max(worst, double(g.seqs.size()));
    shift += 6 * worst;  // an upper bound of the makespan's growth
  }
  const double grew = plan_predict_ms(c1, p, lens) - plan_predict_ms(c0, p, lens);
  EXPECT_GT(grew, 0);
  EXPECT_LE(grew, shift + 1e-9);
}
