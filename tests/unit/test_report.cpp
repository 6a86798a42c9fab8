// Timing reports: steps.csv grows line by line, report.h5 holds the same columns and the
// run's description, summary.json the means; a figure above the peak is an error. With
// pipeline stages both hold the per-stage figures, and a broken /pipeline is an error.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/hdf5/h5.h"
#include "io/report/report.h"
#include "lib/util/error.h"
#include "support/temp_dir_test.h"

namespace flexsp {
namespace {

using ReportTest = TempDirTest;

ReportRow row(int64_t step) {
  ReportRow r;
  r.step = step;
  r.wall_ms = 100.0 * step;
  r.loss = 5.0 - 0.1 * step;
  r.tokens = 1000;
  r.sequences = 3;
  r.flops = 2e12;  // 2 TFLOP over 0.1*step s on 2 ranks
  r.predicted_ms = 50;
  r.phases.mean.add(Phase::forward, 10.0 * step);
  r.phases.max.add(Phase::forward, 12.0 * step);
  r.plan = "2+1+1 | 4";
  return r;
}

int count_lines(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST_F(ReportTest, CsvH5AndSummaryAgree) {
  ReportRunInfo info;
  info.world = 2;
  info.sp_mode = "flexsp";
  info.peak_tflops = 100;
  const std::string dir = path("run/report");
  {
    ReportWriter w(dir, info, 2);
    w.add(row(1));
    EXPECT_EQ(count_lines(dir + "/steps.csv"), 2);  // header + 1, flushed at once
    w.add(row(2));
    w.add(row(3));
    EXPECT_NEAR(w.rows()[0].tflops_per_gpu, 10.0, 1e-9);  // 2e12 / 0.1 s / 2 ranks
    EXPECT_NEAR(w.rows()[0].mfu, 0.1, 1e-12);
    const std::string text = w.finish();
    EXPECT_NE(text.find("3 steps"), std::string::npos) << text;
  }
  EXPECT_EQ(count_lines(dir + "/steps.csv"), 4);
  h5::Id f = h5::open_file(dir + "/report.h5");
  EXPECT_EQ(h5::read_attr_string(f.get(), "schema"), "flexsp.report");
  EXPECT_EQ(h5::read_attr_int(f.get(), "world_size"), 2);
  h5::Id d = h5::open_dataset(f.get(), "steps/loss");
  EXPECT_EQ(h5::extent_1d(d.get(), "loss"), 3);
  std::vector<double> loss(3);
  H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, loss.data());
  EXPECT_DOUBLE_EQ(loss[2], 5.0 - 0.3);
  EXPECT_TRUE(h5::exists(f.get(), "steps/forward_max_ms"));
  EXPECT_TRUE(h5::exists(f.get(), "steps/plan"));
  nlohmann::json j;
  std::ifstream(dir + "/summary.json") >> j;
  EXPECT_EQ(j["steps"], 3);
  EXPECT_EQ(j["tokens"], 3000);
  EXPECT_NEAR(j["mean_step_ms"].get<double>(), 250.0, 1e-9);  // steps 2 and 3
  EXPECT_NEAR(j["phase_share"]["forward"].get<double>(), 0.1, 1e-9);
  EXPECT_NEAR(j["predicted_over_measured"].get<double>(), 100.0 / 500.0, 1e-9);
  // Without pipeline stages the report has no pipeline figures (the format is unchanged).
  EXPECT_FALSE(h5::exists(f.get(), "pipeline"));
  EXPECT_EQ(read_pipeline_h5(f.get(), dir).stages, 0);
  EXPECT_FALSE(j.contains("pipeline"));
}

// A hand-made run of uneven steps: the run's figures are totals over totals (the first step
// left out), not means of the per-step rates.
TEST_F(ReportTest, SummaryIsTotalsOverTotals) {
  ReportRunInfo info;
  info.world = 4;
  info.peak_tflops = 50;
  const std::string dir = path("uneven");
  // step, wall ms, tokens, FLOPs (all ranks): a slow long step among fast short ones.
  const double table[4][4] = {{1, 900, 100, 1e12}, {2, 100, 1000, 4e12}, {3, 300, 4000, 30e12},
                              {4, 100, 1000, 4e12}};
  {
    ReportWriter w(dir, info, 10);
    for (const auto& t : table) {
      ReportRow r;
      r.step = int64_t(t[0]);
      r.wall_ms = t[1];
      r.tokens = int64_t(t[2]);
      r.flops = t[3];
      w.add(r);
    }
    // Step 2: 4e12 / 0.1 s / 4 = 10 TFLOP/s per GPU, MFU 0.2; step 3: 25, 0.5.
    EXPECT_NEAR(w.rows()[1].tflops_per_gpu, 10.0, 1e-9);
    EXPECT_NEAR(w.rows()[2].mfu, 0.5, 1e-12);
    const std::string text = w.finish();
    EXPECT_NE(text.find("over the 3 timed steps"), std::string::npos) << text;
    EXPECT_NE(text.find("MFU 38%"), std::string::npos) << text;
  }
  nlohmann::json j;
  std::ifstream(dir + "/summary.json") >> j;
  // Steps 2-4: 500 ms, 6000 tokens, 38e12 FLOPs.
  EXPECT_EQ(j["timed_steps"], 3);
  EXPECT_NEAR(j["mean_step_ms"].get<double>(), 500.0 / 3, 1e-9);
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 12000.0, 1e-6);
  EXPECT_NEAR(j["tflops_per_gpu"].get<double>(), 19.0, 1e-9);  // 38e12 / 0.5 s / 4
  EXPECT_NEAR(j["mfu"].get<double>(), 0.38, 1e-12);            // not (0.2 + 0.5 + 0.2) / 3 = 0.3
  EXPECT_EQ(mfu_text(0.386), "38.6%");
  EXPECT_EQ(mfu_text(1.23e-5), "0.00123%");
}

ReportPipeline two_stages() {
  ReportPipeline p;
  p.stages = 2;
  p.schedule = "seq1f1b";
  p.seq_chunks = 3;
  for (int s = 0; s < 2; ++s) {
    ReportStage x;
    x.first_layer = 2 * s;
    x.layers = 2;
    x.forward_ms = 10 + s;
    x.backward_ms = 20 + s;
    x.p2p_ms = 5 - s;
    x.schedule_ms = 50;
    x.units = 6;
    x.bubble = x.p2p_ms / x.schedule_ms;
    x.bubble_formula = 1.0 / 7.0;
    x.activation_bytes = 2e6 * (2 - s);
    p.stage.push_back(x);
  }
  return p;
}

TEST_F(ReportTest, PipelineStagesInH5AndSummary) {
  ReportRunInfo info;
  const std::string dir = path("pp");
  {
    ReportWriter w(dir, info, 1);
    w.add(row(1));
    w.set_pipeline(two_stages());
    w.finish();
  }
  h5::Id f = h5::open_file(dir + "/report.h5");
  const ReportPipeline p = read_pipeline_h5(f.get(), dir);
  ASSERT_EQ(p.stages, 2);
  EXPECT_EQ(p.schedule, "seq1f1b");
  EXPECT_EQ(p.seq_chunks, 3);
  ASSERT_EQ(p.stage.size(), 2u);
  EXPECT_EQ(p.stage[1].first_layer, 2);
  EXPECT_EQ(p.stage[1].layers, 2);
  EXPECT_DOUBLE_EQ(p.stage[1].forward_ms, 11);
  EXPECT_DOUBLE_EQ(p.stage[1].backward_ms, 21);
  EXPECT_DOUBLE_EQ(p.stage[0].p2p_ms, 5);
  EXPECT_DOUBLE_EQ(p.stage[0].bubble, 0.1);
  EXPECT_DOUBLE_EQ(p.stage[0].bubble_formula, 1.0 / 7.0);
  EXPECT_DOUBLE_EQ(p.stage[0].activation_bytes, 4e6);
  nlohmann::json j;
  std::ifstream(dir + "/summary.json") >> j;
  ASSERT_TRUE(j.contains("pipeline"));
  EXPECT_EQ(j["pipeline"]["stages"], 2);
  ASSERT_EQ(j["pipeline"]["per_stage"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["pipeline"]["per_stage"][1]["backward_ms"].get<double>(), 21);
  EXPECT_EQ(j["pipeline"]["per_stage"][1]["first_layer"], 2);
  const std::string table = pipeline_table(p);
  EXPECT_NE(table.find("2 stages, seq1f1b x 3 chunks"), std::string::npos) << table;
  EXPECT_NE(table.find("      1     2-3      11.0      21.0       4.0    8.0%    14.3%      2.00 MB"),
            std::string::npos) << table;
}

TEST_F(ReportTest, PipelineGroupMissingAFieldIsAnError) {
  const std::string file = path("bad.h5");
  {
    h5::NewFile f = h5::create_file(file);
    write_pipeline_h5(f.get(), two_stages(), file);
    h5::check_status(H5Ldelete(f.get(), "pipeline/p2p_ms", H5P_DEFAULT), "delete");
  }
  h5::Id f = h5::open_file(file);
  try {
    read_pipeline_h5(f.get(), file);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/pipeline/p2p_ms"), std::string::npos) << e.what();
  }
}

TEST_F(ReportTest, AboveThePeakIsAnError) {
  ReportRunInfo info;
  info.peak_tflops = 1;
  ReportWriter w(path("r"), info, 1);
  EXPECT_THROW(w.add(row(1)), Error);  // 20 TFLOP/s on one rank
}

TEST_F(ReportTest, UnwritableDirectoryIsAnError) {
  std::ofstream(path("file")) << "x";
  EXPECT_THROW(ReportWriter(path("file/sub"), ReportRunInfo{}, 1), Error);
}

}  // namespace
}  // namespace flexsp
