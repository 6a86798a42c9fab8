// Run configuration: INI + command-line overrides, unknown keys, bad values, round trip.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
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
  EXPECT_EQ(parse({}).parallel.comm, CommMode::automatic);
  EXPECT_EQ(parse({"--parallel.comm=auto"}).parallel.comm, CommMode::automatic);
  EXPECT_EQ(parse({"--parallel.comm=mpi"}).parallel.comm, CommMode::mpi);
  EXPECT_EQ(parse({"--parallel.comm=nccl"}).parallel.comm, CommMode::nccl);
  EXPECT_EQ(parse({"--parallel.comm=mpi-staged"}).parallel.comm, CommMode::mpi_staged);
}

TEST(Config, ReduceOverlapKey) {
  EXPECT_EQ(parse({}).parallel.reduce_overlap, ReduceOverlap::automatic);
  EXPECT_EQ(parse({"--parallel.reduce_overlap=on"}).parallel.reduce_overlap, ReduceOverlap::on);
  EXPECT_EQ(parse({"--parallel.reduce_overlap=off"}).parallel.reduce_overlap, ReduceOverlap::off);
  const std::string e = error_of({"--parallel.reduce_overlap=yes"});
  EXPECT_NE(e.find("parallel.reduce_overlap"), std::string::npos) << e;
  EXPECT_NE(e.find("auto, on, off"), std::string::npos) << e;
}

TEST(Config, PipelineAndContextParallelKeys) {
  const RunConfig d = parse({});
  EXPECT_EQ(d.parallel.cp_mode, CpMode::automatic);
  EXPECT_EQ(d.parallel.pp_size, 1);
  EXPECT_EQ(d.parallel.pp_schedule, PpSchedule::one_f_one_b);
  EXPECT_EQ(d.parallel.seq_chunks, 1);
  const RunConfig c = parse({"--parallel.cp_mode=usp", "--parallel.pp_size=2",
                             "--parallel.pp_layers=3,1", "--parallel.pp_schedule=seq1f1b",
                             "--parallel.seq_chunks=4"});
  EXPECT_EQ(c.parallel.cp_mode, CpMode::usp);
  EXPECT_EQ(c.parallel.pp_schedule, PpSchedule::seq1f1b);
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

// train.cuda_gemm: a key like cuda_attention, written to the INI (after cuda_attention:
// every earlier line of a run's config is unchanged).
TEST(Config, CudaGemmKey) {
  EXPECT_EQ(parse({}).train.cuda_gemm, CudaGemm::automatic);
  EXPECT_EQ(parse({"--train.cuda_gemm=cublas"}).train.cuda_gemm, CudaGemm::cublas);
  const RunConfig c = parse({"--train.cuda_gemm=lt"});
  EXPECT_EQ(c.train.cuda_gemm, CudaGemm::lt);
  const std::string ini = config_to_ini(c);
  const size_t attn = ini.find("cuda_attention = auto\n"), gemm = ini.find("cuda_gemm = lt\n");
  ASSERT_NE(gemm, std::string::npos) << ini;
  EXPECT_LT(attn, gemm) << ini;
  EXPECT_EQ(config_from_ini(ini).train.cuda_gemm, CudaGemm::lt);
  EXPECT_EQ(error_of({"--train.cuda_gemm=cutlass"}),
            "command line: train.cuda_gemm: 'cutlass' is not one of auto, cublas, lt");
}

// FLEXSP_CUDA_GEMM overrides the key as FLEXSP_CUDA_ATTENTION overrides its own.
TEST(Config, CudaGemmEnvironmentOverride) {
  BackendOptions o;
  o.cuda_gemm = CudaGemm::lt;
  unsetenv("FLEXSP_CUDA_GEMM");
  EXPECT_EQ(with_env_overrides(o).cuda_gemm, CudaGemm::lt);
  setenv("FLEXSP_CUDA_GEMM", "cublas", 1);
  EXPECT_EQ(with_env_overrides(o).cuda_gemm, CudaGemm::cublas);
  setenv("FLEXSP_CUDA_GEMM", "auto", 1);
  EXPECT_EQ(with_env_overrides(o).cuda_gemm, CudaGemm::automatic);
  setenv("FLEXSP_CUDA_GEMM", "fast", 1);
  try {
    with_env_overrides(o);
    ADD_FAILURE() << "FLEXSP_CUDA_GEMM=fast accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "FLEXSP_CUDA_GEMM: 'fast' is not auto, cublas or lt");
  }
  unsetenv("FLEXSP_CUDA_GEMM");
}

// Every enumeration key is parsed at load, from the command line or the INI file: a bad
// value is one error naming the source, the key, the value and the choices; the INI text
// names the values as they were given, and reads back to the same enumerations.
TEST(Config, EnumerationKeysParseAtLoad) {
  const RunConfig d = parse({});
  EXPECT_EQ(d.model.rope_scaling, RopeScaling::none);
  EXPECT_EQ(d.parallel.sp_mode, SpMode::flexsp);
  EXPECT_EQ(d.parallel.zero_param_group, ZeroGroup::world);
  EXPECT_EQ(d.train.backend, BackendKind::automatic);
  EXPECT_EQ(d.train.precision, Precision::automatic);
  EXPECT_EQ(d.train.cuda_attention, CudaAttention::automatic);
  const RunConfig c = parse({"--model.rope_scaling=llama3", "--parallel.sp_mode=static",
                             "--parallel.zero_param_group=node", "--parallel.zero_grad_group=node",
                             "--parallel.zero_optim_group=node", "--train.backend=cpu",
                             "--train.precision=bf16", "--train.cuda_attention=tc"});
  EXPECT_EQ(c.model.rope_scaling, RopeScaling::llama3);
  EXPECT_EQ(c.parallel.sp_mode, SpMode::static_sp);
  EXPECT_EQ(c.parallel.zero_param_group, ZeroGroup::node);
  EXPECT_EQ(c.parallel.zero_grad_group, ZeroGroup::node);
  EXPECT_EQ(c.parallel.zero_optim_group, ZeroGroup::node);
  EXPECT_EQ(c.train.backend, BackendKind::cpu);
  EXPECT_EQ(c.train.precision, Precision::bf16);
  EXPECT_EQ(c.train.cuda_attention, CudaAttention::tc);
  const std::string ini = config_to_ini(c);
  for (const char* line : {"rope_scaling = llama3\n", "sp_mode = static\n", "zero_param_group = node\n",
                           "backend = cpu\n", "precision = bf16\n", "cuda_attention = tc\n",
                           "comm = auto\n", "cp_mode = auto\n", "reduce_overlap = auto\n",
                           "pp_schedule = 1f1b\n"})
    EXPECT_NE(ini.find(line), std::string::npos) << line << ini;
  const RunConfig back = config_from_ini(ini);
  EXPECT_EQ(back.parallel.sp_mode, SpMode::static_sp);
  EXPECT_EQ(back.model.rope_scaling, RopeScaling::llama3);
  EXPECT_EQ(config_to_ini(back), ini);

  EXPECT_EQ(error_of({"--parallel.sp_mode=ring"}),
            "command line: parallel.sp_mode: 'ring' is not one of flexsp, static, batch_adaptive");
  EXPECT_EQ(error_of({"--model.rope_scaling=yarn"}),
            "command line: model.rope_scaling: 'yarn' is not one of none, linear, llama3");
  EXPECT_EQ(error_of({"--train.precision=fp16"}),
            "command line: train.precision: 'fp16' is not one of auto, fp32, bf16");
  EXPECT_EQ(error_of({"--parallel.cp_mode=tree"}),
            "command line: parallel.cp_mode: 'tree' is not one of ulysses, ring, usp, auto");
  const std::string file = write_ini("[parallel]\nzero_grad_group = rack\n");
  EXPECT_EQ(error_of({"--config", file}),
            file + ": parallel.zero_grad_group: 'rack' is not one of node, world");
  std::remove(file.c_str());
  for (const char* key : {"model.rope_scaling", "parallel.sp_mode", "parallel.zero_param_group",
                          "parallel.zero_grad_group", "parallel.zero_optim_group", "parallel.comm",
                          "parallel.cp_mode", "parallel.reduce_overlap", "parallel.pp_schedule",
                          "train.backend", "train.precision", "train.cuda_attention",
                          "train.cuda_gemm"}) {
    const std::string e = error_of({std::string("--") + key + "=bogus"});
    EXPECT_EQ(e.rfind(std::string("command line: ") + key + ": 'bogus' is not one of ", 0), 0u) << e;
  }
}

}  // namespace
}  // namespace flexsp
