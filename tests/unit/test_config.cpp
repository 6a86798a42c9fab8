// Run configuration: INI + command-line overrides, unknown keys, bad values, round trip.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "lib/config/config.h"
#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {
namespace {

std::string write_ini(const std::string& text) {
  char name[] = "/tmp/flexsp_cfg_XXXXXX";
  const int fd = mkstemp(name);
  close(fd);
  std::ofstream(name) << text;
  return name;
}

RunConfig parse(const std::vector<std::string>& args) {
  RunConfig cfg;
  po::variables_map vm;
  po::options_description flags("flags");
  flags.add_options()("dry-run", "");
  parse_run_config(args, flags, vm, cfg);
  return cfg;
}

std::string error_of(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, IniThenCommandLineWins) {
  const std::string ini = write_ini(
      "[model]\npreset = small\nhidden = 128\n[data]\npath = a.h5\nmax_seq_len = 256\n"
      "[train]\nsteps = 7\n");
  RunConfig c = parse({"--config", ini, "--model.hidden=96", "--train.seed=5"});
  EXPECT_EQ(c.model.preset, "small");
  EXPECT_EQ(c.model.hidden, 96);
  EXPECT_EQ(c.data.path, "a.h5");
  EXPECT_EQ(c.data.max_seq_len, 256);
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.train.seed, 5u);
  EXPECT_TRUE(c.is_set("model.hidden"));
  EXPECT_TRUE(c.is_set("train.seed"));
  EXPECT_FALSE(c.is_set("model.layers"));
  std::remove(ini.c_str());
}

TEST(Config, UnknownKeysNameTheKeyAndSource) {
  const std::string ini = write_ini("[model]\nhiden = 3\n");
  const std::string e1 = error_of({"--config", ini});
  EXPECT_NE(e1.find(ini), std::string::npos) << e1;
  EXPECT_NE(e1.find("model.hiden"), std::string::npos) << e1;
  const std::string e2 = error_of({"--trian.steps=3"});
  EXPECT_NE(e2.find("'trian.steps'"), std::string::npos) << e2;
  EXPECT_NE(e2.find("command line"), std::string::npos) << e2;
  std::remove(ini.c_str());
}

TEST(Config, BadValuesNameTheKey) {
  EXPECT_NE(error_of({"--model.hidden=abc"}).find("model.hidden"), std::string::npos);
  EXPECT_NE(error_of({"--parallel.sp_mode=ring"}).find("parallel.sp_mode"), std::string::npos);
  EXPECT_NE(error_of({"--parallel.zero=4"}).find("parallel.zero"), std::string::npos);
  EXPECT_NE(error_of({"--parallel.sp_size=3"}).find("parallel.sp_size"), std::string::npos);
  EXPECT_NE(error_of({"--parallel.zero_optim_group=rack"}).find("zero_optim_group"), std::string::npos);
  EXPECT_NE(error_of({"--train.backend=tpu"}).find("train.backend"), std::string::npos);
  EXPECT_NE(error_of({"--parallel.comm=gloo"}).find("parallel.comm"), std::string::npos);
  EXPECT_NE(error_of({"--config", "/nonexistent/x.ini"}).find("/nonexistent/x.ini"), std::string::npos);
  EXPECT_NE(error_of({"--train.global_batch_tokens=100", "--data.max_seq_len=200"})
                .find("train.global_batch_tokens"),
            std::string::npos);
}

TEST(Config, CommChoices) {
  EXPECT_EQ(parse({}).parallel.comm, "auto");
  for (const char* v : {"auto", "mpi", "nccl", "mpi-staged"})
    EXPECT_EQ(parse({std::string("--parallel.comm=") + v}).parallel.comm, v);
}

TEST(Config, ReduceOverlapKey) {
  EXPECT_EQ(parse({}).parallel.reduce_overlap, "auto");
  for (const char* v : {"auto", "on", "off"})
    EXPECT_EQ(parse({std::string("--parallel.reduce_overlap=") + v}).parallel.reduce_overlap, v);
  const std::string e = error_of({"--parallel.reduce_overlap=yes"});
  EXPECT_NE(e.find("parallel.reduce_overlap"), std::string::npos) << e;
  EXPECT_NE(e.find("auto, on, off"), std::string::npos) << e;
}

TEST(Config, PipelineAndContextParallelKeys) {
  const RunConfig d = parse({});
  EXPECT_EQ(d.parallel.cp_mode, "auto");
  EXPECT_EQ(d.parallel.pp_size, 1);
  EXPECT_EQ(d.parallel.pp_schedule, "1f1b");
  EXPECT_EQ(d.parallel.seq_chunks, 1);
  const RunConfig c = parse({"--parallel.cp_mode=usp", "--parallel.pp_size=2",
                             "--parallel.pp_layers=3,1", "--parallel.pp_schedule=seq1f1b",
                             "--parallel.seq_chunks=4"});
  EXPECT_EQ(c.parallel.cp_mode, "usp");
  EXPECT_EQ(pp_layers_parse(c.parallel.pp_layers), (std::vector<int>{3, 1}));
  EXPECT_EQ(c.parallel.seq_chunks, 4);
  EXPECT_NE(error_of({"--parallel.cp_mode=tree"}).find("parallel.cp_mode"), std::string::npos);
  EXPECT_NE(error_of({"--parallel.pp_size=0"}).find("parallel.pp_size"), std::string::npos);
  EXPECT_NE(error_of({"--parallel.pp_schedule=gpipe"}).find("parallel.pp_schedule"), std::string::npos);
  EXPECT_NE(error_of({"--parallel.seq_chunks=0"}).find("parallel.seq_chunks"), std::string::npos);
  EXPECT_NE(error_of({"--parallel.pp_size=2", "--parallel.pp_layers=1,x"}).find("parallel.pp_layers"),
            std::string::npos);
  EXPECT_NE(error_of({"--parallel.pp_size=2", "--parallel.pp_layers=0,2"}).find("parallel.pp_layers"),
            std::string::npos);
  EXPECT_NE(error_of({"--parallel.pp_size=3", "--parallel.pp_layers=1,2"}).find("3"), std::string::npos);
}

TEST(Config, RanksPerNodeAlias) {
  EXPECT_EQ(parse({"--ranks-per-node", "2"}).parallel.ranks_per_node, 2);
  EXPECT_EQ(parse({"--parallel.ranks_per_node=4"}).parallel.ranks_per_node, 4);
}

TEST(Config, IniRoundTripKeepsEveryValue) {
  RunConfig c = parse({"--model.preset=7b", "--optim.lr=0.00123", "--data.path=x,y",
                       "--model.tie_embeddings=true", "--train.max_minutes=1.5"});
  const std::string ini = config_to_ini(c);
  EXPECT_NE(ini.find("[optim]"), std::string::npos);
  EXPECT_NE(ini.find("lr = 0.00123"), std::string::npos) << ini;
  RunConfig back = config_from_ini(ini);
  EXPECT_EQ(config_to_ini(back), ini);
  EXPECT_EQ(back.model.preset, "7b");
  EXPECT_TRUE(back.model.tie_embeddings);
  EXPECT_DOUBLE_EQ(back.optim.lr, 0.00123);
  EXPECT_EQ(back.data.path, "x,y");
  EXPECT_DOUBLE_EQ(back.train.max_minutes, 1.5);
}

}  // namespace
}  // namespace flexsp
