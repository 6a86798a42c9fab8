// The run configuration: the INI sections and keys of docs/commands.md, one struct per
// section. Values come from an INI file (--config) and are overridden by
// --section.key=value on the command line; an unknown key or a bad value is an Error naming
// the key and where it came from. Every key has a default here, so a run config always
// dumps completely (config_to_ini) for checkpoints and reports. Model fields left at 0 take
// the preset's value (lib/model resolves presets); is_set() tells what the user gave
// explicitly.
//
// Every key with a fixed set of values is an enumeration, parsed once at load: a bad value
// is an Error there, naming the key and the choices, and nothing after the load compares
// a config value as text. Each enumeration keeps its names beside it (lib/util/
// enum_names.h): the owner's where a lower layer owns the concept (SpMode, CpMode,
// PpSchedule in lib/plan, CommMode in lib/comm, the backend's in lib/backend), here
// otherwise; config_to_ini writes the same names back.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "lib/backend/backend_options.h"
#include "lib/comm/comm_choice.h"
#include "lib/plan/context_parallel.h"
#include "lib/plan/pp_schedule.h"
#include "lib/plan/sp_mode.h"
#include "lib/util/enum_names.h"

namespace flexsp {

// model.rope_scaling: HF's RoPE scaling types (lib/model/rope.h).
enum class RopeScaling { none, linear, llama3 };
template <>
struct EnumNames<RopeScaling> {
  static constexpr std::array all{std::pair{RopeScaling::none, "none"},
                                  std::pair{RopeScaling::linear, "linear"},
                                  std::pair{RopeScaling::llama3, "llama3"}};
};

// parallel.zero_{param,grad,optim}_group: the ranks a ZeRO state is sharded over (the
// data-parallel peers of one node, or of the whole stage).
enum class ZeroGroup { node, world };
template <>
struct EnumNames<ZeroGroup> {
  static constexpr std::array all{std::pair{ZeroGroup::node, "node"},
                                  std::pair{ZeroGroup::world, "world"}};
};

// parallel.reduce_overlap (lib/parallel/parallel_state.h decides what auto means).
enum class ReduceOverlap { automatic, on, off };
template <>
struct EnumNames<ReduceOverlap> {
  static constexpr std::array all{std::pair{ReduceOverlap::automatic, "auto"},
                                  std::pair{ReduceOverlap::on, "on"},
                                  std::pair{ReduceOverlap::off, "off"}};
};

// train.offload (lib/model/offload.h): never, every micro-batch, or where the planner finds
// it cheaper than a wider group.
enum class Offload { off, checkpoints, automatic };
template <>
struct EnumNames<Offload> {
  static constexpr std::array all{std::pair{Offload::off, "off"},
                                  std::pair{Offload::checkpoints, "checkpoints"},
                                  std::pair{Offload::automatic, "auto"}};
};

struct ModelSection {
  std::string preset = "tiny";
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0;
  int vocab = 0;  // 0: the dataset's vocab_size
  double rope_theta = 0, norm_eps = 0;
  // RoPE scaling (lib/model/rope.h). Like rope_theta, taken from the weights or checkpoint
  // a run starts from unless set.
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_scaling_factor = 1, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  int rope_original_max_position = 8192;
  bool tie_embeddings = false;
  bool checkpoint_activations = false;
  double init_std = 0.02;
};

struct DataSection {
  std::string path;  // a file, a comma-separated list, or a glob
  int max_seq_len = 4096;
};

struct ParallelSection {
  SpMode sp_mode = SpMode::flexsp;
  int sp_size = 1;  // in devices: tensor-parallel groups of tp_size ranks
  int tp_size = 1;
  int zero = 0;
  ZeroGroup zero_param_group = ZeroGroup::world, zero_grad_group = ZeroGroup::world,
            zero_optim_group = ZeroGroup::world;
  int ranks_per_node = 0;  // 0: detect from shared memory
  CommMode comm = CommMode::automatic;
  CpMode cp_mode = CpMode::automatic;
  // ZeRO 0-1 start each unit's gradient all-reduce inside the last backward (auto: on,
  // except on CPU ranks that outnumber their host's cores)
  ReduceOverlap reduce_overlap = ReduceOverlap::automatic;
  int pp_size = 1;               // pipeline stages (outermost grid dimension)
  std::string pp_layers;         // layers per stage, comma-separated (empty: even by cost)
  PpSchedule pp_schedule = PpSchedule::one_f_one_b;
  int seq_chunks = 1;            // seq1f1b: chunks per micro-batch along its sequences
};

// parallel.pp_layers as numbers (empty when not given). Throws Error naming the key.
std::vector<int> pp_layers_parse(const std::string& s);

struct PlannerSection {
  std::string cost_model;  // file; empty: built-in defaults
  int time_limit_ms = 1000;
  double time_step_share = 0;
  double mem_per_gpu_gb = 80;
};

struct OptimSection {
  double lr = 3e-4, min_lr = 3e-5;
  int warmup_steps = 100;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, grad_clip = 1.0;
};

struct TrainSection {
  int64_t steps = 100;
  int64_t global_batch_tokens = 65536;
  int64_t global_batch_seqs = 0;
  uint64_t seed = 1234;
  int64_t micro_batch_tokens = 0;  // tokens per rank per micro-batch at most (0: no limit)
  BackendKind backend = BackendKind::automatic;
  Precision precision = Precision::automatic;  // auto: bf16 on cuda, fp32 on cpu
  bool tf32 = false;                           // TF32 tensor cores in all-fp32 GEMMs (cuda)
  CudaAttention cuda_attention = CudaAttention::automatic;  // attention kernels (cuda)
  CudaGemm cuda_gemm = CudaGemm::automatic;                 // activation GEMMs (cuda)
  double max_minutes = 0;        // 0: no limit
  // Layers run over chunks of this many of a device's tokens (0: off; docs/token-chunks.md).
  int64_t token_chunk = 0;
  Offload offload = Offload::off;  // activation offload to host memory
  int offload_ahead = 2;           // layers a block is fetched ahead of its backward
};

struct CheckpointSection {
  std::string dir;
  int64_t every = 0;
  int keep = 2;
  bool async = true;  // write in the background where host memory holds a snapshot
};

struct ReportSection {
  std::string dir;
  int64_t every = 1;
  double peak_tflops = 989;
};

struct RunConfig {
  ModelSection model;
  DataSection data;
  ParallelSection parallel;
  PlannerSection planner;
  OptimSection optim;
  TrainSection train;
  CheckpointSection checkpoint;
  ReportSection report;

  std::string config_file;         // where the INI came from ("" if none)
  std::set<std::string> set_keys;  // "section.key" given in the file or on the command line
  bool is_set(const std::string& key) const { return set_keys.count(key) != 0; }
};

// The [section] keys bound to the fields of cfg (for --help and parsing).
boost::program_options::options_description config_options(RunConfig& cfg);

// Parses a verb's command line: the verb's own flags (`flags`, filled into `vm`), then
// --config FILE and --section.key=value overrides into cfg. Validates the values.
// Throws Error naming the key and its source. `--ranks-per-node N` is accepted as
// --parallel.ranks_per_node.
void parse_run_config(const std::vector<std::string>& args,
                      const boost::program_options::options_description& flags,
                      boost::program_options::variables_map& vm, RunConfig& cfg);

// Checks value ranges; throws Error naming the key.
void validate_run_config(const RunConfig& cfg);

// The complete configuration as INI text (every key, defaults included).
std::string config_to_ini(const RunConfig& cfg);

// Parses INI text as written by config_to_ini (for checkpoints); throws Error.
RunConfig config_from_ini(const std::string& ini);

}  // namespace flexsp
