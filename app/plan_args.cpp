#include "app/plan_args.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "app/options.h"
#include "io/dataset/token_dataset.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

namespace {

std::vector<int64_t> read_lengths(const std::string& path) {
  std::ifstream f(path);
  FLEXSP_CHECK(f.good(), "--lengths: cannot open '{}'", path);
  std::vector<int64_t> out;
  std::string line;
  for (int64_t no = 1; std::getline(f, line); ++no) {
    const size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos) continue;
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(line.substr(a), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const std::string rest = line.substr(a + used);
    FLEXSP_CHECK(used > 0 && v >= 0 && rest.find_first_not_of(" \t\r") == std::string::npos,
                 "--lengths: {}:{}: '{}' is not a length", path, no, line);
    out.push_back(v);
  }
  FLEXSP_CHECK(!out.empty(), "--lengths: '{}' holds no lengths", path);
  return out;
}

}  // namespace

void add_plan_options(po::options_description& o, PlanArgs& a, const std::string& batch_default) {
  const std::string seqs_help = "sequences per step (default " + batch_default + ")";
  o.add_options()
      ("data", po::value(&a.data), "HDF5 token dataset (its document lengths are sampled)")
      ("lengths", po::value(&a.lengths), "file with one document length per line")
      ("gpus-per-node", po::value(&a.gpus_per_node)->default_value(a.gpus_per_node), "GPUs per node")
      ("tp", po::value(&a.tp)->default_value(a.tp),
       "tensor-parallel size (1, 2, 4, 8; divides --gpus-per-node): the planner's devices are groups of tp GPUs")
      ("model", po::value(&a.model)->default_value(a.model), "model preset (tiny ... 65b)")
      ("kv-heads", po::value(&a.kv_heads)->default_value(a.kv_heads),
       "key/value heads of the model (as model.kv_heads; must divide its heads; 0: the preset's)")
      ("offload", po::value(&a.offload)->default_value(a.offload)->implicit_value("checkpoints"),
       "activation offload (as train.offload): off, checkpoints (every micro-batch; the default of a bare "
       "--offload) or auto (the planner's choice per micro-batch): fewer activations per device, the host "
       "copies priced at the cost model's bw_h2d")
      ("offload-ahead", po::value(&a.offload_ahead)->default_value(a.offload_ahead),
       "with --offload: layers a block is fetched ahead of its backward (as train.offload_ahead)")
      ("cp-mode", po::value(&a.cp_mode)->default_value(a.cp_mode),
       "SP groups as Ulysses x ring (as parallel.cp_mode): ulysses (groups split the heads), ring, usp or auto "
       "(groups wider than the heads run a ring; see --ring-groups)")
      ("ring-groups", po::value(&a.ring_groups)->default_value(a.ring_groups),
       "with --cp-mode ring/usp/auto: groups wider than the widest Ulysses group hold any sequence the cost "
       "model puts there (any), or only the sequences a Ulysses group cannot hold (needed)")
      ("pp", po::value(&a.pp)->default_value(a.pp),
       "pipeline stages (as parallel.pp_size): the plan is one stage's, on gpus / pp GPUs, priced with the bubble")
      ("pp-schedule", po::value(&a.pp_schedule)->default_value(a.pp_schedule),
       "pipeline schedule (as parallel.pp_schedule): 1f1b or seq1f1b")
      ("seq-chunks", po::value(&a.seq_chunks)->default_value(a.seq_chunks),
       "seq1f1b: chunks per micro-batch (as parallel.seq_chunks)")
      ("zero", po::value(&a.zero)->default_value(a.zero),
       "ZeRO stage 0-3 (as parallel.zero), its shards over a stage's GPUs")
      ("micro-batch-tokens", po::value(&a.micro_batch_tokens)->default_value(a.micro_batch_tokens),
       "tokens per GPU per micro-batch at most (as train.micro_batch_tokens; 0: memory decides)")
      ("cost-model", po::value(&a.cost_model), "cost-model file (default: built-in FlexSP GPT-7B figures)")
      ("mem-per-gpu-gb", po::value(&a.mem_gb)->default_value(a.mem_gb), "device memory per GPU, GB")
      ("max-seq-len", po::value(&a.max_seq_len)->default_value(a.max_seq_len),
       "longer documents are cut into pieces of max-seq-len + 1 tokens (as data.max_seq_len)")
      ("global-batch-seqs", po::value(&a.batch_seqs), seqs_help.c_str())
      ("global-batch-tokens", po::value(&a.batch_tokens), "tokens per step (instead of sequences)")
      ("steps", po::value(&a.steps)->default_value(a.steps), "steps to plan")
      ("seed", po::value(&a.seed)->default_value(a.seed), "sampler seed (as train.seed)")
      ("time-limit-ms", po::value(&a.time_limit_ms)->default_value(a.time_limit_ms),
       "solver time limit per step (as planner.time_limit_ms)")
      ("time-step-share", po::value(&a.time_step_share)->default_value(a.time_step_share),
       "planning time per step at most this share of the predicted step (as planner.time_step_share; 0: "
       "--time-limit-ms alone)")
      ("json", po::bool_switch(&a.json), "print JSON instead of the text output");
}

void check_plan_args(const PlanArgs& a, const char* verb) {
  FLEXSP_CHECK(a.data.empty() != a.lengths.empty(), "{}: give exactly one of --data FILE or --lengths FILE", verb);
  FLEXSP_CHECK(a.gpus_per_node >= 1, "--gpus-per-node: must be positive, got {}", a.gpus_per_node);
  FLEXSP_CHECK((a.tp == 1 || a.tp == 2 || a.tp == 4 || a.tp == 8) && a.gpus_per_node % a.tp == 0,
               "--tp: must be 1, 2, 4 or 8 and divide --gpus-per-node {}, got {}", a.gpus_per_node, a.tp);
  FLEXSP_CHECK(a.mem_gb > 0, "--mem-per-gpu-gb: must be positive, got {}", a.mem_gb);
  FLEXSP_CHECK(a.max_seq_len >= 1, "--max-seq-len: must be positive, got {}", a.max_seq_len);
  FLEXSP_CHECK(!(a.batch_seqs > 0 && a.batch_tokens > 0),
               "{}: give --global-batch-seqs or --global-batch-tokens, not both", verb);
  FLEXSP_CHECK(a.batch_seqs >= 0 && a.batch_tokens >= 0, "--global-batch-seqs/--global-batch-tokens: must be positive");
  FLEXSP_CHECK(a.steps >= 1, "--steps: must be positive, got {}", a.steps);
  FLEXSP_CHECK(a.time_limit_ms >= 0, "--time-limit-ms: must be >= 0, got {}", a.time_limit_ms);
  FLEXSP_CHECK(a.time_step_share >= 0 && a.time_step_share <= 1, "--time-step-share: must be in [0, 1], got {}",
               a.time_step_share);
  FLEXSP_CHECK(a.kv_heads >= 0, "--kv-heads: must be positive (0: the preset's), got {}", a.kv_heads);
  FLEXSP_CHECK(a.cp_mode == "ulysses" || a.cp_mode == "ring" || a.cp_mode == "usp" || a.cp_mode == "auto",
               "--cp-mode: '{}' is not one of ulysses, ring, usp, auto", a.cp_mode);
  FLEXSP_CHECK(a.ring_groups == "needed" || a.ring_groups == "any",
               "--ring-groups: '{}' is not needed or any", a.ring_groups);
  FLEXSP_CHECK(a.pp >= 1, "--pp: must be positive, got {}", a.pp);
  FLEXSP_CHECK(a.pp_schedule == "1f1b" || a.pp_schedule == "seq1f1b",
               "--pp-schedule: '{}' is not one of 1f1b, seq1f1b", a.pp_schedule);
  FLEXSP_CHECK(a.seq_chunks >= 1, "--seq-chunks: must be positive, got {}", a.seq_chunks);
  FLEXSP_CHECK(a.seq_chunks == 1 || a.pp_schedule == "seq1f1b",
               "--seq-chunks: {} chunks need --pp-schedule seq1f1b", a.seq_chunks);
  FLEXSP_CHECK(a.zero >= 0 && a.zero <= 3, "--zero: stage must be 0-3, got {}", a.zero);
  FLEXSP_CHECK(a.micro_batch_tokens >= 0, "--micro-batch-tokens: must be >= 0, got {}", a.micro_batch_tokens);
}

void check_plan_layout(const PlanArgs& a, int gpus, const ModelConfig& model) {
  FLEXSP_CHECK(gpus % (a.tp * a.pp) == 0, "--pp: {} stages of tp {} do not divide the {} GPUs", a.pp, a.tp, gpus);
  FLEXSP_CHECK(a.pp <= model.layers, "--pp: {} stages for a model of {} layers", a.pp, model.layers);
}

RunConfig plan_run_config(const PlanArgs& a, const PlanInputs& in) {
  RunConfig cfg;
  ParallelSection& p = cfg.parallel;
  p.sp_mode = SpMode::flexsp;
  p.tp_size = a.tp;
  p.cp_mode = cp_mode_parse(a.cp_mode);
  p.pp_size = a.pp;
  p.pp_schedule = pp_schedule_parse(a.pp_schedule);
  p.seq_chunks = a.seq_chunks;
  p.zero = a.zero;
  p.zero_param_group = p.zero_grad_group = p.zero_optim_group = ZeroGroup::world;
  cfg.planner.mem_per_gpu_gb = a.mem_gb;
  cfg.planner.time_limit_ms = a.time_limit_ms;
  cfg.planner.time_step_share = a.time_step_share;
  cfg.data.max_seq_len = in.max_seq_len - 1;
  cfg.train.micro_batch_tokens = a.micro_batch_tokens;
  cfg.train.offload = in.offload;
  return cfg;
}

PlannerContext plan_context(const PlanArgs& a, const PlanInputs& in, int gpus) {
  check_plan_layout(a, gpus, in.model);
  PlannerContext ctx = planner_context(plan_run_config(a, in), in.model, in.cost, gpus, a.gpus_per_node);
  ctx.ring_only_when_needed = a.ring_groups == "needed";
  return ctx;
}

PlanInputs load_plan_inputs(const PlanArgs& a) {
  PlanInputs in;
  int vocab = 32000;
  if (!a.lengths.empty()) {
    in.docs = read_lengths(a.lengths);
  } else {
    TokenDataset ds = TokenDataset::open({a.data});
    vocab = ds.vocab_size();
    in.docs.resize(static_cast<size_t>(ds.num_docs()));
    for (int64_t i = 0; i < ds.num_docs(); ++i) in.docs[static_cast<size_t>(i)] = ds.doc_length(i);
  }
  ModelSection ms;
  ms.preset = a.model;
  ms.kv_heads = a.kv_heads;
  try {
    in.model = resolve_model_config(ms, a.kv_heads > 0 ? std::set<std::string>{"model.kv_heads"} : std::set<std::string>{},
                                    vocab);
  } catch (const Error& e) {
    fail(fmt::format("--model: {}", e.what()));
  }
  FLEXSP_CHECK(a.offload_ahead >= 1, "--offload-ahead: must be >= 1, got {}", a.offload_ahead);
  const std::optional<Offload> offload = enum_parse<Offload>(a.offload);
  FLEXSP_CHECK(offload.has_value(), "--offload: '{}' is not one of {}", a.offload, enum_choices<Offload>());
  in.offload = *offload;
  in.model.offload = in.offload != Offload::off;
  in.model.offload_ahead = a.offload_ahead;
  in.cost = a.cost_model.empty() ? cost_model_default() : cost_model_load(a.cost_model);
  if (in.cost.model != a.model)
    std::fprintf(stderr, "flexsp: note: cost model %s was measured with model %s; planning %s with it\n",
                 in.cost.source.c_str(), in.cost.model.c_str(), a.model.c_str());
  int64_t longest_doc = 0;
  for (int64_t l : in.docs) longest_doc = std::max(longest_doc, l);
  in.max_seq_len = std::min(a.max_seq_len + 1, longest_doc);  // the longest piece training makes
  return in;
}

SamplerOptions plan_batch(const PlanArgs& a, int64_t default_seqs) {
  SamplerOptions so;
  so.seed = a.seed;
  so.max_seq_len = a.max_seq_len;
  so.batch_seqs = a.batch_seqs;
  so.batch_tokens = a.batch_tokens;
  if (so.batch_seqs == 0 && so.batch_tokens == 0) so.batch_seqs = default_seqs;
  return so;
}

int run_on_rank0(const CommandContext& ctx, const Args& args, const char* verb,
                 const po::options_description& opts, const std::string& usage,
                 const std::function<void()>& run) {
  bool help = false;
  agree(ctx.world, [&] {
    po::variables_map vm;
    parse_verb_options(verb, args, opts, vm);
    help = vm.count("help") != 0;
  });
  if (help) {
    if (ctx.rank == 0) std::cout << usage << "\n\n" << opts << "\n";
    return 0;
  }
  agree(ctx.world, [&] {
    if (ctx.rank == 0) run();
  });
  std::fflush(stdout);
  return 0;
}

}  // namespace flexsp
