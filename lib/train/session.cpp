#include "lib/train/session.h"

#include <fmt/format.h>

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <vector>

#include "io/checkpoint/checkpoint.h"
#include "io/weights/weights.h"
#include "lib/model/params.h"
#include "lib/model/rope.h"
#include "lib/model/tensor_parallel.h"
#include "lib/planner/memory_model.h"
#include "lib/runtime/ulysses.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

// Tokens of the largest global batch the sampler can produce.
int64_t max_batch_tokens(const RunConfig& cfg) {
  const int64_t seq = cfg.data.max_seq_len + 1;
  int64_t whole = cfg.train.global_batch_tokens;
  if (cfg.train.global_batch_seqs > 0) {
    const int64_t by_seqs = cfg.train.global_batch_seqs * seq;
    whole = whole > 0 ? std::min(whole, by_seqs) : by_seqs;
  }
  return whole;
}

}  // namespace

TrainSession::TrainSession(const RunConfig& config, const Grid& grid, Groups& groups,
                           const TokenDataset& ds, const TrainOptions& opts)
    : cfg_(config), grid_(grid), groups_(groups), opts_(opts) {
  // The configuration that runs: the CUDA numerics keys with their environment overrides
  // (FLEXSP_CUDA_TF32, FLEXSP_CUDA_ATTENTION) applied, so that checkpoints and reports
  // record what ran.
  agree(grid.comm, [&] {
    const BackendOptions bo = with_env_overrides(
        {cfg_.train.backend, cfg_.train.precision, cfg_.train.tf32, cfg_.train.cuda_attention});
    cfg_.train.tf32 = bo.tf32;
    cfg_.train.cuda_attention = bo.cuda_attention;
  });
  agree(grid.comm, [&] {
    mc_ = resolve_model_config(cfg_.model, cfg_.set_keys, ds.vocab_size());
    FLEXSP_CHECK(mc_.vocab >= ds.vocab_size(),
                 "model.vocab: {} is smaller than the dataset's vocab_size {}", mc_.vocab,
                 ds.vocab_size());
    // Where training starts, decided before the model is built: its RoPE may come from there.
    const std::string& ckdir = cfg_.checkpoint.dir;
    FLEXSP_CHECK(opts.resume.empty() || opts.load_weights.empty(),
                 "--resume and --load-weights cannot be used together");
    if (!opts.resume.empty()) resume_path_ = checkpoint_resolve(opts.resume, ckdir);
    if (!ckdir.empty() && grid.rank == 0) {
      std::error_code ec;
      std::filesystem::create_directories(ckdir, ec);
      FLEXSP_CHECK(std::filesystem::is_directory(ckdir, ec), "checkpoint.dir: cannot create {}", ckdir);
    }
    const std::string& from = resume_path_.empty() ? opts.load_weights : resume_path_;
    if (!from.empty()) {
      const std::string note = adopt_file_rope(mc_, read_weights_config(from), cfg_.set_keys);
      if (grid.rank == 0 && !note.empty()) std::printf("%s: %s\n", from.c_str(), note.c_str());
    }
    FLEXSP_CHECK(cfg_.parallel.tp_size == grid.tp_size,
                 "parallel.tp_size: {} but the grid was built with {}", cfg_.parallel.tp_size, grid.tp_size);
    tp_check(mc_, grid.tp_size);
    FLEXSP_CHECK(cfg_.parallel.pp_size == 1,
                 "parallel.pp_size = {}: pipeline parallelism is not implemented yet (use 1)",
                 cfg_.parallel.pp_size);
    if (cfg_.parallel.sp_mode == "static" && cfg_.is_set("parallel.sp_size")) {
      FLEXSP_CHECK(grid.dp_size % cfg_.parallel.sp_size == 0,
                   "parallel.sp_size: {} does not divide the {} devices ({} ranks / tp {})",
                   cfg_.parallel.sp_size, grid.dp_size, grid.size, grid.tp_size);
      const ModelConfig lc = tp_local_config(mc_, grid.tp_size);
      cp_split(cp_mode_parse(cfg_.parallel.cp_mode), cfg_.parallel.sp_size, lc.heads,
               lc.kv_heads, grid.ranks_per_node / grid.tp_size);  // throws what cannot run
    }
    zero_check(cfg_.parallel);
    pctx_ = planner_context(cfg_, mc_, grid.size, grid.ranks_per_node);
    memory_require_fit(pctx_);  // refuses, with the numbers, a layout the memory model rejects
    limits_ = plan_limits(pctx_, plan_costs(pctx_));
    be_ = make_backend(
        {cfg_.train.backend, cfg_.train.precision, cfg_.train.tf32, cfg_.train.cuda_attention});
  });
  // Communicators for buffers in backend memory (parallel.comm), built once for the run.
  const bool own_gpus = ranks_have_own_gpus(grid, *groups.world);
  agree(grid.comm, [&] {
    comm_choice_ = choose_comm(cfg_.parallel.comm, be_->name(), nccl_built(), own_gpus);
  });
  backend_comms_ = std::make_unique<BackendComms>(groups, grid, *be_, comm_choice_);
  const int tp = grid.tp_size;
  TpGroup tpg;
  dp_ = &groups;
  if (tp > 1) {
    dp_grid_ = grid_dp(grid);
    dp_own_ = std::make_unique<Groups>(groups_create(dp_grid_));
    dp_backend_comms_ = std::make_unique<BackendComms>(*dp_own_, dp_grid_, *be_, comm_choice_);
    dp_ = dp_own_.get();
    tpg = {&groups.for_backend(CommPurpose::all_to_all).block(tp), tp, grid.tp_rank};
  }

  // Workspace bounds: the planner puts at most E tokens on a device per micro-batch; a
  // tensor-parallel group's stream gains fewer than d * tp padding tokens.
  const int64_t whole = max_batch_tokens(cfg_);
  const int64_t E = limits_.max_tokens_per_rank;
  max_local_ = std::min(E, whole) + (tp > 1 ? tp : 0);
  const int64_t max_group = std::min(E * grid.dp_size, whole) + (tp > 1 ? grid.size : 0);
  exec_ = std::make_unique<PlanExecutor>(*be_, mc_, *dp_, max_local_, max_group, tpg);
  exec_->set_context_parallel(cp_mode_parse(cfg_.parallel.cp_mode), grid.ranks_per_node / tp);
  zero_ = std::make_unique<ZeroOptimizer>(*be_, exec_->model().params(), cfg_.parallel, *dp_,
                                          ZeroTp{&groups, tp});
}

TrainSession::~TrainSession() {
  zero_.reset();
  exec_.reset();
  dp_backend_comms_.reset();
  backend_comms_.reset();
  be_.reset();
  dp_own_.reset();
  if (dp_grid_.comm != MPI_COMM_NULL) grid_destroy(dp_grid_);
}

// Weights files hold whole tensors (the table of tp = 1).
void TrainSession::read_weights(const std::string& path, float* block) {
  const ParamTable& table = exec_->model().params();
  if (grid_.tp_size == 1) return load_weights(path, mc_, table, block);
  const ParamTable full = make_param_table(mc_);
  std::vector<float> whole(static_cast<size_t>(full.total));
  load_weights(path, mc_, full, whole.data());
  tp_extract(full, whole.data(), table, block);
}

void TrainSession::start(BatchSampler& sampler) {
  const ParamTable& table = exec_->model().params();
  const std::string& ckdir = cfg_.checkpoint.dir;
  const std::string& resume_path = resume_path_;
  if (!resume_path.empty()) {
    CheckpointMeta meta;
    agree(grid_.comm, [&] {
      meta = checkpoint_read_meta(resume_path, mc_);
      sampler.seek(meta.cursor);
    });
    const ShardRanges ps = zero_->param_shards(), ss = zero_->state_shards();
    std::vector<float> p(static_cast<size_t>(ps.size())), m(static_cast<size_t>(ss.size())),
        v(static_cast<size_t>(ss.size()));
    checkpoint_load(grid_.comm, resume_path, mc_, table, ps, p.data(), ss, m.data(), v.data());
    zero_->set_state(p.data(), m.data(), v.data());
    zero_->set_adam_steps(meta.adam_steps);
    start_ = meta.step;
    consumed = meta.consumed_tokens;
    if (grid_.rank == 0) {
      std::printf("resumed from %s: step %lld, %lld tokens, saved by %lld ranks (ZeRO %lld)\n",
                  resume_path.c_str(), static_cast<long long>(start_), static_cast<long long>(consumed),
                  static_cast<long long>(meta.world_size), static_cast<long long>(meta.zero));
      if (meta.seed != cfg_.train.seed)
        std::printf("note: train.seed is %llu in the checkpoint but %llu in this run: the data order changes\n",
                    static_cast<unsigned long long>(meta.seed),
                    static_cast<unsigned long long>(cfg_.train.seed));
    }
  } else {
    if (grid_.rank == 0 && opts_.resume == "auto")
      std::printf("no checkpoint in %s: starting fresh\n", ckdir.c_str());
    std::vector<float> host(static_cast<size_t>(table.total), 0.f);
    agree(grid_.comm, [&] {
      if (!opts_.load_weights.empty())
        read_weights(opts_.load_weights, host.data());
      else
        init_params(mc_, table, cfg_.train.seed, host.data(), 0, table.total);
    });
    zero_->set_params(host.data());
  }
  // Never overwrite or rotate away checkpoints newer than where this run starts.
  agree(grid_.comm, [&] {
    const std::vector<int64_t> have = checkpoint_steps(ckdir);
    FLEXSP_CHECK(have.empty() || have.back() <= start_,
                 "checkpoint.dir: {} already holds {} (a run past step {}); resume it with "
                 "--resume auto or choose another directory",
                 ckdir, checkpoint_file_name(have.empty() ? 0 : have.back()), start_);
  });
}

std::string TrainSession::save_checkpoint(int64_t step, const SamplerCursor& next) {
  CheckpointShard mine;
  mine.shards = zero_->state_shards();
  const size_t n = static_cast<size_t>(mine.shards.size());
  std::vector<float> p(n), m(n), v(n);
  zero_->get_state(p.data(), m.data(), v.data());
  mine.params = p.data();
  mine.exp_avg = m.data();
  mine.exp_avg_sq = v.data();
  CheckpointMeta meta;
  meta.step = step;
  meta.consumed_tokens = consumed;
  meta.seed = cfg_.train.seed;
  meta.cursor = next;
  meta.world_size = grid_.size;
  meta.zero = cfg_.parallel.zero;
  meta.adam_steps = zero_->adam_steps();
  meta.config_ini = config_to_ini(cfg_);
  meta.version = FLEXSP_VERSION;
  return checkpoint_save(grid_.comm, cfg_.checkpoint.dir, cfg_.checkpoint.keep, mc_,
                         exec_->model().params(), meta, mine);
}

void TrainSession::dump_weights(const std::string& path) {
  const ParamTable& table = exec_->model().params();
  std::vector<float> host(static_cast<size_t>(table.total));
  zero_->get_params(host.data());  // collective: ZeRO-3 gathers the shards
  if (grid_.tp_size == 1) {
    agree(grid_.comm, [&] {
      if (grid_.rank == 0) flexsp::dump_weights(path, mc_, table, host.data());
    });
    return;
  }
  // Each block once (copy 0 of a replicated one), summed over the tp group.
  const ParamTable full = make_param_table(mc_);
  std::vector<float> whole(static_cast<size_t>(full.total), 0.f);
  for (const ParamView& v : table.views)
    if (v.tp_replica != 0) std::fill_n(host.begin() + v.offset, v.numel(), 0.f);
  tp_insert(table, host.data(), full, whole.data());
  groups_.block(grid_.tp_size).all_reduce(whole.data(), whole.data(), whole.size(), DType::f32,
                                          ReduceOp::sum);
  agree(grid_.comm, [&] {
    if (grid_.rank == 0) flexsp::dump_weights(path, mc_, full, whole.data());
  });
}

std::string TrainSession::describe() const {
  return fmt::format(
      "model: {}; {}; backend {} ({} activations); comm {}; tf32 {}; cuda_attention {}; sp_mode {}; "
      "ZeRO {}; tp {}; up to {} tokens per device per micro-batch\n",
      model_config_summary(mc_), rope_summary(mc_), be_->name(), dtype_name(be_->act_dtype()),
      comm_choice_name(comm_choice_), cfg_.train.tf32 ? "on" : "off", cfg_.train.cuda_attention,
      cfg_.parallel.sp_mode, cfg_.parallel.zero, grid_.tp_size, max_local_);
}

}  // namespace flexsp
