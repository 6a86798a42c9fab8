// Config parsing with Boost.Program_options. The keys of every section are bound to
// the fields of RunConfig; the command line is stored first so that it wins over the
// INI file (Boost keeps the first value stored for a key). Errors are rethrown as
// flexsp::Error naming the key and the file or "command line".
#include "lib/config/config.h"

#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <type_traits>

#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

// An enumeration key's value that is none of its names. Boost adds the key's name while
// the error propagates (it derives from error_with_option_name); rethrow_as_error words it.
class BadEnumValue : public po::error_with_option_name {
 public:
  BadEnumValue(const std::string& value, const std::string& choices)
      : po::error_with_option_name("'" + value + "' is not one of " + choices) {}
};

// Boost.Program_options reads and writes values of enumeration keys through these (found
// by argument-dependent lookup in this namespace): by the enumeration's names.
template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
static void validate(boost::any& v, const std::vector<std::string>& values, E*, int) {
  po::validators::check_first_occurrence(v);
  const std::string& s = po::validators::get_single_string(values);
  const std::optional<E> e = enum_parse<E>(s);
  if (!e) throw BadEnumValue(s, enum_choices<E>());
  v = boost::any(*e);
}

template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
static std::ostream& operator<<(std::ostream& os, E v) {
  return os << enum_name(v);
}

po::options_description config_options(RunConfig& c) {
  po::options_description d("Run configuration ([section] key in the INI file, or --section.key=value)");
  auto& m = c.model;
  auto& da = c.data;
  auto& p = c.parallel;
  auto& pl = c.planner;
  auto& o = c.optim;
  auto& t = c.train;
  auto& ck = c.checkpoint;
  auto& r = c.report;
  d.add_options()
      ("model.preset", po::value(&m.preset)->default_value(m.preset), "tiny, small, 125m, 350m, 1.3b, 7b, 13b, 30b, 65b")
      ("model.hidden", po::value(&m.hidden)->default_value(m.hidden), "hidden size (0: preset)")
      ("model.layers", po::value(&m.layers)->default_value(m.layers), "transformer blocks (0: preset)")
      ("model.heads", po::value(&m.heads)->default_value(m.heads), "attention heads (0: preset)")
      ("model.kv_heads", po::value(&m.kv_heads)->default_value(m.kv_heads), "key/value heads, divides heads (0: preset)")
      ("model.ffn", po::value(&m.ffn)->default_value(m.ffn), "MLP inner size (0: preset)")
      ("model.vocab", po::value(&m.vocab)->default_value(m.vocab), "vocabulary size (0: the dataset's)")
      ("model.rope_theta", po::value(&m.rope_theta)->default_value(m.rope_theta), "RoPE base (0: the starting weights' or checkpoint's, else 10000)")
      ("model.rope_scaling", po::value(&m.rope_scaling)->default_value(m.rope_scaling), "RoPE scaling: none, linear or llama3 (HF's definitions; unset: the starting weights' or checkpoint's)")
      ("model.rope_scaling_factor", po::value(&m.rope_scaling_factor)->default_value(m.rope_scaling_factor), "linear and llama3: the context extension factor (>= 1)")
      ("model.rope_low_freq_factor", po::value(&m.rope_low_freq_factor)->default_value(m.rope_low_freq_factor), "llama3: wavelengths above rope_original_max_position / this are scaled by the factor")
      ("model.rope_high_freq_factor", po::value(&m.rope_high_freq_factor)->default_value(m.rope_high_freq_factor), "llama3: wavelengths below rope_original_max_position / this are kept")
      ("model.rope_original_max_position", po::value(&m.rope_original_max_position)->default_value(m.rope_original_max_position), "llama3: the context length the model was pretrained for")
      ("model.norm_eps", po::value(&m.norm_eps)->default_value(m.norm_eps), "RMSNorm epsilon (0: preset)")
      ("model.tie_embeddings", po::value(&m.tie_embeddings)->default_value(m.tie_embeddings), "lm_head shares the embedding matrix")
      ("model.checkpoint_activations", po::value(&m.checkpoint_activations)->default_value(m.checkpoint_activations), "recompute each layer in backward")
      ("model.init_std", po::value(&m.init_std)->default_value(m.init_std), "std of the normal weight init")
      ("data.path", po::value(&da.path)->default_value(da.path), "dataset: a file, a comma-separated list, or a glob")
      ("data.max_seq_len", po::value(&da.max_seq_len)->default_value(da.max_seq_len), "longer documents are cut into pieces of max_seq_len+1 tokens")
      ("parallel.sp_mode", po::value(&p.sp_mode)->default_value(p.sp_mode), "flexsp, static or batch_adaptive")
      ("parallel.sp_size", po::value(&p.sp_size)->default_value(p.sp_size), "SP group size for sp_mode=static, in devices (tensor-parallel groups)")
      ("parallel.tp_size", po::value(&p.tp_size)->default_value(p.tp_size), "tensor-parallel ranks per device: 1, 2, 4 or 8; blocks of consecutive ranks inside a node; must divide the ranks per node, the heads and the FFN width, and divide the kv heads or be a multiple of them")
      ("parallel.zero", po::value(&p.zero)->default_value(p.zero), "ZeRO stage 0-3")
      ("parallel.zero_param_group", po::value(&p.zero_param_group)->default_value(p.zero_param_group), "shard parameters over node or world")
      ("parallel.zero_grad_group", po::value(&p.zero_grad_group)->default_value(p.zero_grad_group), "shard gradients over node or world")
      ("parallel.zero_optim_group", po::value(&p.zero_optim_group)->default_value(p.zero_optim_group), "shard optimizer states over node or world")
      ("parallel.ranks_per_node", po::value(&p.ranks_per_node)->default_value(p.ranks_per_node), "emulate nodes of N ranks (0: detect)")
      ("parallel.comm", po::value(&p.comm)->default_value(p.comm), "communicator for buffers in backend memory: auto (nccl with the cuda backend where NCCL is built and every rank has a GPU of its own, else mpi), mpi (MPI; GPU buffers are staged through pinned host memory), nccl, or mpi-staged (stage even the CPU backend's buffers: a test of that path)")
      ("parallel.cp_mode", po::value(&p.cp_mode)->default_value(p.cp_mode), "SP groups as Ulysses x ring: ulysses (Ulysses only; a group must split the heads), ring (ring attention only), usp (Ulysses inside a node as wide as the heads allow, a ring across), auto (Ulysses as wide as the heads allow, a ring for the rest)")
      ("parallel.reduce_overlap", po::value(&p.reduce_overlap)->default_value(p.reduce_overlap), "ZeRO 0-1 on several ranks: on (each unit's gradient all-reduce starts in the step's last backward, as soon as the unit's gradient is final), off (the whole gradient is all-reduced once after the backward), auto (on, except on CPU ranks that outnumber their host's cores, where nothing runs beside the backward)")
      ("parallel.pp_size", po::value(&p.pp_size)->default_value(p.pp_size), "pipeline stages (outermost grid dimension; must divide the ranks): the planner plans for one stage's ranks, tp, SP groups and ZeRO 0-3 run inside each stage")
      ("parallel.pp_layers", po::value(&p.pp_layers)->default_value(p.pp_layers), "layers per pipeline stage, comma-separated, summing to model.layers (empty: split evenly by cost, the head counted on the last stage)")
      ("parallel.pp_schedule", po::value(&p.pp_schedule)->default_value(p.pp_schedule), "pipeline schedule: 1f1b (warm-up, one forward one backward, cool-down) or seq1f1b (the same over chunks of each micro-batch along its sequences: less activation memory and bubble)")
      ("parallel.seq_chunks", po::value(&p.seq_chunks)->default_value(p.seq_chunks), "seq1f1b: chunks each micro-batch is cut into along its sequences (of about equal cost under causal attention)")
      ("planner.cost_model", po::value(&pl.cost_model)->default_value(pl.cost_model), "cost-model file (empty: built-in)")
      ("planner.time_limit_ms", po::value(&pl.time_limit_ms)->default_value(pl.time_limit_ms), "guard on the planner's MILPs per step: they stop on node counts, so plans are reproducible unless it strikes (0: greedy plans only)")
      ("planner.time_step_share", po::value(&pl.time_step_share)->default_value(pl.time_step_share), "planning runs during the previous step: a step plans under at most this share of its first split's predicted step, and time_limit_ms (0: time_limit_ms alone)")
      ("planner.mem_per_gpu_gb", po::value(&pl.mem_per_gpu_gb)->default_value(pl.mem_per_gpu_gb), "device memory per rank (GB)")
      ("optim.lr", po::value(&o.lr)->default_value(o.lr), "peak learning rate")
      ("optim.min_lr", po::value(&o.min_lr)->default_value(o.min_lr), "floor of the cosine decay")
      ("optim.warmup_steps", po::value(&o.warmup_steps)->default_value(o.warmup_steps), "linear warm-up steps")
      ("optim.weight_decay", po::value(&o.weight_decay)->default_value(o.weight_decay), "AdamW decoupled weight decay")
      ("optim.beta1", po::value(&o.beta1)->default_value(o.beta1), "AdamW beta1")
      ("optim.beta2", po::value(&o.beta2)->default_value(o.beta2), "AdamW beta2")
      ("optim.eps", po::value(&o.eps)->default_value(o.eps), "AdamW epsilon")
      ("optim.grad_clip", po::value(&o.grad_clip)->default_value(o.grad_clip), "global gradient-norm clip (0: off)")
      ("train.steps", po::value(&t.steps)->default_value(t.steps), "optimizer steps")
      ("train.global_batch_tokens", po::value(&t.global_batch_tokens)->default_value(t.global_batch_tokens), "tokens per global batch (0: unlimited)")
      ("train.global_batch_seqs", po::value(&t.global_batch_seqs)->default_value(t.global_batch_seqs), "sequences per global batch (0: unlimited)")
      ("train.micro_batch_tokens", po::value(&t.micro_batch_tokens)->default_value(t.micro_batch_tokens), "tokens per rank per micro-batch at most (0: no limit)")
      ("train.seed", po::value(&t.seed)->default_value(t.seed), "seed of data order and init")
      ("train.backend", po::value(&t.backend)->default_value(t.backend), "auto, cpu or cuda")
      ("train.precision", po::value(&t.precision)->default_value(t.precision), "activations and compute weights: auto (bf16 on cuda, fp32 on cpu), fp32 or bf16 (mixed precision: fp32 master weights, gradients and optimizer states; on cpu an emulation for tests)")
      ("train.tf32", po::value(&t.tf32)->default_value(t.tf32), "cuda: allow TF32 tensor cores in all-fp32 GEMMs (changes fp32 numerics; env FLEXSP_CUDA_TF32 overrides)")
      ("train.cuda_attention", po::value(&t.cuda_attention)->default_value(t.cuda_attention), "cuda attention kernels: auto (the fastest that takes the shape: cuDNN's fused attention where built, else the tensor-core bf16 kernels for head_dim 64/128, else simple), cudnn or tc (require them) or simple (fp32 CUDA cores); env FLEXSP_CUDA_ATTENTION overrides")
      ("train.cuda_gemm", po::value(&t.cuda_gemm)->default_value(t.cuda_gemm), "cuda activation GEMMs: auto (cublas, until cuBLASLt is measured faster on a GPU), cublas (cublasGemmEx) or lt (cuBLASLt with cached plans); env FLEXSP_CUDA_GEMM overrides")
      ("train.offload", po::value(&t.offload)->default_value(t.offload), "activation offload: off, checkpoints (what each layer keeps for its backward -- its checkpoint, or its activations without checkpointing -- goes to a host pool after its forward and comes back train.offload_ahead layers before its backward, on a copy stream) or auto (where the planner prices it below a wider SP group)")
      ("train.offload_ahead", po::value(&t.offload_ahead)->default_value(t.offload_ahead), "activation offload: layers a block is fetched back ahead of its backward (>= 1; the device keeps offload_ahead + 2 blocks)")
      ("train.max_minutes", po::value(&t.max_minutes)->default_value(t.max_minutes), "checkpoint and stop after this wall time (0: off)")
      ("train.token_chunk", po::value(&t.token_chunk)->default_value(t.token_chunk), "run each layer and the loss over chunks of this many of a device's tokens, so that a layer's temporaries grow with the chunk, not the sequence (0: off; needs model.checkpoint_activations)")
      ("checkpoint.dir", po::value(&ck.dir)->default_value(ck.dir), "checkpoint directory (empty: none)")
      ("checkpoint.every", po::value(&ck.every)->default_value(ck.every), "steps between checkpoints (0: only at the end)")
      ("checkpoint.keep", po::value(&ck.keep)->default_value(ck.keep), "checkpoints kept")
      ("checkpoint.async", po::value(&ck.async)->default_value(ck.async), "write checkpoints on a background thread from a host snapshot of the state (off where host memory is short)")
      ("report.dir", po::value(&r.dir)->default_value(r.dir), "timing report directory (empty: none)")
      ("report.every", po::value(&r.every)->default_value(r.every), "steps between progress lines")
      ("report.peak_tflops", po::value(&r.peak_tflops)->default_value(r.peak_tflops), "peak TFLOP/s per GPU for MFU");
  return d;
}

namespace {

std::string option_name(const po::error_with_option_name& e) {
  std::string n = e.get_option_name();
  while (!n.empty() && n[0] == '-') n.erase(0, 1);
  return n.substr(0, n.find('='));
}

// Runs a Boost parse/store step and rethrows its errors as one-line Errors.
template <class F>
void rethrow_as_error(const std::string& source, F&& f) {
  try {
    f();
  } catch (const BadEnumValue& e) {
    fail(fmt::format("{}: {}: {}", source, option_name(e), e.what()));
  } catch (const po::unknown_option& e) {
    fail(fmt::format("{}: unknown key '{}' (see --help)", source, option_name(e)));
  } catch (const po::invalid_option_value& e) {
    fail(fmt::format("{}: {}", source, e.what()));
  } catch (const po::error_with_option_name& e) {
    fail(fmt::format("{}: key '{}': {}", source, option_name(e), e.what()));
  } catch (const po::error& e) {
    fail(fmt::format("{}: {}", source, e.what()));
  }
}

void collect_set_keys(const po::variables_map& vm, const po::options_description& keys,
                      RunConfig& cfg) {
  for (const auto& opt : keys.options()) {
    const std::string& k = opt->long_name();
    auto it = vm.find(k);
    if (it != vm.end() && !it->second.defaulted()) cfg.set_keys.insert(k);
  }
}

}  // namespace

void parse_run_config(const std::vector<std::string>& args, const po::options_description& flags,
                      po::variables_map& vm, RunConfig& cfg) {
  po::options_description keys = config_options(cfg);
  po::options_description cli;
  cli.add(flags).add(keys);
  cli.add_options()("config", po::value(&cfg.config_file), "INI file with the run configuration")(
      "ranks-per-node", po::value<int>(), "same as --parallel.ranks_per_node");

  rethrow_as_error("command line", [&] {
    po::store(po::command_line_parser(args).options(cli).run(), vm);
  });
  if (vm.count("config")) {
    const std::string path = vm["config"].as<std::string>();
    std::ifstream in(path);
    FLEXSP_CHECK(in.good(), "--config: cannot open '{}'", path);
    rethrow_as_error(path, [&] { po::store(po::parse_config_file(in, keys, false), vm); });
  }
  rethrow_as_error("command line", [&] { po::notify(vm); });
  collect_set_keys(vm, keys, cfg);
  if (vm.count("ranks-per-node")) {
    FLEXSP_CHECK(!cfg.is_set("parallel.ranks_per_node"),
                 "command line: give --ranks-per-node or parallel.ranks_per_node, not both");
    cfg.parallel.ranks_per_node = vm["ranks-per-node"].as<int>();
    cfg.set_keys.insert("parallel.ranks_per_node");
  }
  validate_run_config(cfg);
}

std::vector<int> pp_layers_parse(const std::string& s) {
  std::vector<int> out;
  if (s.empty()) return out;
  size_t at = 0;
  while (true) {
    const size_t comma = s.find(',', at);
    const std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FLEXSP_CHECK(used > 0 && used == item.size() && v >= 1,
                 "parallel.pp_layers: '{}' is not a list of positive layer counts", s);
    out.push_back(v);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

void validate_run_config(const RunConfig& c) {
  FLEXSP_CHECK(c.data.max_seq_len >= 1, "data.max_seq_len: must be >= 1, got {}", c.data.max_seq_len);
  const int sp = c.parallel.sp_size;
  FLEXSP_CHECK(sp >= 1 && (sp & (sp - 1)) == 0, "parallel.sp_size: must be a power of two, got {}", sp);
  FLEXSP_CHECK(c.parallel.zero >= 0 && c.parallel.zero <= 3, "parallel.zero: must be 0..3, got {}", c.parallel.zero);
  const int tp = c.parallel.tp_size;
  FLEXSP_CHECK(tp == 1 || tp == 2 || tp == 4 || tp == 8, "parallel.tp_size: must be 1, 2, 4 or 8, got {}", tp);
  FLEXSP_CHECK(c.parallel.ranks_per_node >= 0, "parallel.ranks_per_node: must be >= 0");
  FLEXSP_CHECK(c.parallel.pp_size >= 1, "parallel.pp_size: must be >= 1, got {}", c.parallel.pp_size);
  const std::vector<int> pp_layers = pp_layers_parse(c.parallel.pp_layers);
  FLEXSP_CHECK(pp_layers.empty() || static_cast<int>(pp_layers.size()) == c.parallel.pp_size,
               "parallel.pp_layers: {} stages listed, parallel.pp_size is {}", pp_layers.size(),
               c.parallel.pp_size);
  FLEXSP_CHECK(c.parallel.seq_chunks >= 1, "parallel.seq_chunks: must be >= 1, got {}", c.parallel.seq_chunks);
  FLEXSP_CHECK(c.planner.time_limit_ms >= 0, "planner.time_limit_ms: must be >= 0");
  FLEXSP_CHECK(c.planner.time_step_share >= 0 && c.planner.time_step_share <= 1,
               "planner.time_step_share: must be in [0, 1], got {}", c.planner.time_step_share);
  FLEXSP_CHECK(c.planner.mem_per_gpu_gb > 0, "planner.mem_per_gpu_gb: must be > 0");
  FLEXSP_CHECK(c.optim.lr >= 0 && c.optim.min_lr >= 0, "optim.lr/optim.min_lr: must be >= 0");
  FLEXSP_CHECK(c.optim.warmup_steps >= 0, "optim.warmup_steps: must be >= 0");
  FLEXSP_CHECK(c.optim.beta1 >= 0 && c.optim.beta1 < 1, "optim.beta1: must be in [0, 1)");
  FLEXSP_CHECK(c.optim.beta2 >= 0 && c.optim.beta2 < 1, "optim.beta2: must be in [0, 1)");
  FLEXSP_CHECK(c.optim.eps > 0, "optim.eps: must be > 0");
  FLEXSP_CHECK(c.optim.grad_clip >= 0, "optim.grad_clip: must be >= 0");
  FLEXSP_CHECK(c.train.steps >= 0, "train.steps: must be >= 0");
  FLEXSP_CHECK(c.train.global_batch_tokens >= 0 && c.train.global_batch_seqs >= 0,
               "train.global_batch_tokens/train.global_batch_seqs: must be >= 0");
  FLEXSP_CHECK(c.train.global_batch_tokens > 0 || c.train.global_batch_seqs > 0,
               "train.global_batch_tokens or train.global_batch_seqs must be > 0");
  FLEXSP_CHECK(c.train.global_batch_tokens == 0 || c.train.global_batch_tokens >= c.data.max_seq_len + 1,
               "train.global_batch_tokens: {} is smaller than one sequence (data.max_seq_len + 1 = {})",
               c.train.global_batch_tokens, c.data.max_seq_len + 1);
  FLEXSP_CHECK(c.train.micro_batch_tokens >= 0, "train.micro_batch_tokens: must be >= 0");
  FLEXSP_CHECK(c.train.max_minutes >= 0, "train.max_minutes: must be >= 0");
  FLEXSP_CHECK(c.train.token_chunk >= 0, "train.token_chunk: must be >= 0 (0: off), got {}", c.train.token_chunk);
  FLEXSP_CHECK(c.train.offload_ahead >= 1, "train.offload_ahead: must be >= 1, got {}", c.train.offload_ahead);
  FLEXSP_CHECK(c.checkpoint.every >= 0, "checkpoint.every: must be >= 0");
  FLEXSP_CHECK(c.checkpoint.keep >= 1, "checkpoint.keep: must be >= 1");
  FLEXSP_CHECK(c.report.every >= 1, "report.every: must be >= 1");
  FLEXSP_CHECK(c.report.peak_tflops > 0, "report.peak_tflops: must be > 0");
}

namespace {

// The name of v if it holds one of the enumerations E.
template <class... E>
std::optional<std::string> enum_text(const boost::any& v) {
  std::optional<std::string> out;
  ((out = out                         ? out
          : boost::any_cast<E>(&v) ? std::optional<std::string>(enum_name(*boost::any_cast<E>(&v)))
                                   : std::nullopt),
   ...);
  return out;
}

std::string value_text(const boost::any& v) {
  if (auto* s = boost::any_cast<std::string>(&v)) return *s;
  if (auto e = enum_text<RopeScaling, SpMode, ZeroGroup, CommMode, CpMode, ReduceOverlap,
                         PpSchedule, BackendKind, Precision, CudaAttention, CudaGemm, Offload>(v))
    return *e;
  if (auto* i = boost::any_cast<int>(&v)) return std::to_string(*i);
  if (auto* l = boost::any_cast<int64_t>(&v)) return std::to_string(*l);
  if (auto* u = boost::any_cast<uint64_t>(&v)) return std::to_string(*u);
  if (auto* b = boost::any_cast<bool>(&v)) return *b ? "true" : "false";
  if (auto* d = boost::any_cast<double>(&v)) return fmt::format("{}", *d);  // shortest round-trip
  FLEXSP_ASSERT(false);
}

}  // namespace

std::string config_to_ini(const RunConfig& cfg) {
  // config_options() takes each field's current value as the option's default, so a
  // description built over a copy of cfg holds exactly cfg's values.
  RunConfig copy = cfg;
  const po::options_description keys = config_options(copy);
  std::ostringstream out;
  std::string section;
  for (const auto& opt : keys.options()) {
    const std::string& k = opt->long_name();
    const auto dot = k.find('.');
    const std::string sec = k.substr(0, dot), key = k.substr(dot + 1);
    if (sec != section) {
      out << (section.empty() ? "" : "\n") << "[" << sec << "]\n";
      section = sec;
    }
    boost::any value;
    opt->semantic()->apply_default(value);
    out << key << " = " << value_text(value) << "\n";
  }
  return out.str();
}

RunConfig config_from_ini(const std::string& ini) {
  RunConfig cfg;
  po::options_description keys = config_options(cfg);
  po::variables_map vm;
  std::istringstream in(ini);
  rethrow_as_error("stored run config", [&] {
    po::store(po::parse_config_file(in, keys, false), vm);
    po::notify(vm);
  });
  collect_set_keys(vm, keys, cfg);
  return cfg;
}

}  // namespace flexsp
