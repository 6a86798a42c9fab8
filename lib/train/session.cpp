#include "lib/train/session.h"

#include <fmt/format.h>

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "io/checkpoint/checkpoint.h"
#include "io/weights/weights.h"
#include "lib/model/params.h"
#include "lib/model/rope.h"
#include "lib/model/tensor_parallel.h"
#include "lib/planner/memory_model.h"
#include "lib/runtime/pipeline_schedule.h"
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
  // record what ran. FLEXSP_CUDA_GEMM (no key) shows in the run's closing kernel note.
  agree(grid.comm, [&] {
    backend_opts_ = with_env_overrides(
        {cfg_.train.backend, cfg_.train.precision, cfg_.train.tf32, cfg_.train.cuda_attention});
    cfg_.train.tf32 = backend_opts_.tf32;
    cfg_.train.cuda_attention = backend_opts_.cuda_attention;
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
      const ModelConfig file = read_weights_config(from);
      // An imported model keeps its vocabulary (Qwen's is larger than its tokenizer's ids).
      if (!cfg_.is_set("model.vocab")) mc_.vocab = file.vocab;
      FLEXSP_CHECK(mc_.vocab >= ds.vocab_size(), "{}: the model's vocabulary ({}) is smaller than the dataset's vocab_size {} ({})",
                   from, mc_.vocab, ds.vocab_size(), ds.tokenizer());
      const std::string note = adopt_file_rope(mc_, file, cfg_.set_keys);
      if (grid.rank == 0 && !note.empty()) std::printf("%s: %s\n", from.c_str(), note.c_str());
    }
    FLEXSP_CHECK(cfg_.parallel.tp_size == grid.tp_size,
                 "parallel.tp_size: {} but the grid was built with {}", cfg_.parallel.tp_size, grid.tp_size);
    tp_check(mc_, grid.tp_size);
    int stage_layers = 0;
    FLEXSP_CHECK(cfg_.parallel.pp_size == grid.pp_size,
                 "parallel.pp_size: {} but the grid was built with {}", cfg_.parallel.pp_size, grid.pp_size);
    if (grid.pp_size > 1) {
      double first = 0, last = 0;
      pipeline_edge_costs(mc_, &first, &last);
      const std::vector<int> split =
          pipeline_layers(mc_.layers, grid.pp_size, pp_layers_parse(cfg_.parallel.pp_layers), first, last);
      stage_layers = *std::max_element(split.begin(), split.end());
      zero_check(cfg_.parallel);
    }
    if (cfg_.parallel.sp_mode == "static" && cfg_.is_set("parallel.sp_size")) {
      FLEXSP_CHECK(grid.dp_size % cfg_.parallel.sp_size == 0,
                   "parallel.sp_size: {} does not divide the {} devices ({} ranks / tp {})",
                   cfg_.parallel.sp_size, grid.dp_size, grid.ranks_per_stage(), grid.tp_size);
      const ModelConfig lc = tp_local_config(mc_, grid.tp_size);
      cp_split(cp_mode_parse(cfg_.parallel.cp_mode), cfg_.parallel.sp_size, lc.heads,
               lc.kv_heads, std::min(grid.ranks_per_node, grid.ranks_per_stage()) / grid.tp_size);
    }
    zero_check(cfg_.parallel);
    // The planner plans for the ranks of one stage (world / pp, lib/planner/planner.h).
    pctx_ = planner_context(cfg_, mc_, grid.size, grid.ranks_per_node);
    if (grid.pp_size > 1) {
      pctx_.pipeline.stage_layers = stage_layers;  // the split that runs (memory, the slowest stage)
    }
    memory_require_fit(pctx_);  // refuses, with the numbers, a layout the memory model rejects
    limits_ = plan_limits(pctx_, plan_costs(pctx_));
    be_ = make_backend(backend_opts_);
  });
  // Communicators for buffers in backend memory (parallel.comm), built once for the run.
  const bool own_gpus = ranks_have_own_gpus(grid, *groups.world);
  agree(grid.comm, [&] {
    comm_choice_ = choose_comm(cfg_.parallel.comm, be_->name(), nccl_built(), own_gpus);
  });
  backend_comms_ = std::make_unique<BackendComms>(groups, grid, *be_, comm_choice_);
  if (grid.pp_size > 1) {
    pipe_ = pipeline_stage_create(grid, cfg_, mc_);
    pipeline_stage_backend(*pipe_, *be_, comm_choice_, groups);
  }
  // The model's grid and groups: the stage's (the world's without a pipeline).
  const Grid& sg = pipe_ ? pipe_->grid : grid;
  Groups& sgroups = pipe_ ? *pipe_->groups : groups;
  const int tp = grid.tp_size;
  TpGroup tpg;
  dp_ = &sgroups;
  if (tp > 1) {
    dp_grid_ = grid_dp(sg);
    dp_own_ = std::make_unique<Groups>(groups_create(dp_grid_));
    dp_backend_comms_ = std::make_unique<BackendComms>(*dp_own_, dp_grid_, *be_, comm_choice_);
    dp_ = dp_own_.get();
    tpg = {&sgroups.for_backend(CommPurpose::all_to_all).block(tp), tp, grid.tp_rank};
  }

  // Workspace bounds: the planner puts at most E tokens on a device per micro-batch; a
  // tensor-parallel group's stream gains fewer than d * tp padding tokens.
  const int64_t whole = max_batch_tokens(cfg_);
  const int64_t E = limits_.max_tokens_per_rank;
  max_local_ = std::min(E, whole) + (tp > 1 ? tp : 0);
  const int64_t max_group = std::min(E * sg.dp_size, whole) + (tp > 1 ? sg.size : 0);
  if (pipe_) {
    const int chunks = cfg_.parallel.pp_schedule == "seq1f1b" ? cfg_.parallel.seq_chunks : 1;
    // Partners: the same position in the neighbouring stages (world ranks).
    const int rps = grid.ranks_per_stage();
    PipelineRole role{pipe_->stage, pipe_->stages, pipe_->p2p, -1, -1, chunks};
    if (!pipe_->first()) role.prev = grid.rank - rps;
    if (!pipe_->last()) role.next = grid.rank + rps;
    pexec_ = std::make_unique<PipelineExecutor>(*be_, pipe_->model, *dp_, max_local_, max_group,
                                                tpg, role);
    // The stage's devices per node, as the planner counts them (planner_context).
    pexec_->set_context_parallel(cp_mode_parse(cfg_.parallel.cp_mode),
                                 std::min(grid.ranks_per_node, rps) / tp);
  } else {
    exec_ = std::make_unique<PlanExecutor>(*be_, mc_, *dp_, max_local_, max_group, tpg);
    exec_->set_context_parallel(cp_mode_parse(cfg_.parallel.cp_mode), grid.ranks_per_node / tp);
  }
  zero_ = std::make_unique<ZeroOptimizer>(*be_, table(), cfg_.parallel, *dp_, ZeroTp{&sgroups, tp});
  // parallel.reduce_overlap = auto overlaps the gradient all-reduce with the last backward
  // only where something can run beside it: not on CPU ranks that outnumber their host's
  // cores (issue 17: 4 ranks on 2 cores stepped 2.6% faster without it -- the progress
  // thread's rounds lengthened the backward and the reduction finished no sooner). Agreed
  // over the world: every rank must make the same collective calls.
  const unsigned cores = std::thread::hardware_concurrency();
  // A pipeline's ZeRO 0-2 read the full buffers (run_plan) and reduce after the schedule.
  const std::string& ro = cfg_.parallel.reduce_overlap;
  int64_t overlap = !pipe_ && (ro == "on" || (ro == "auto" && (std::string(be_->name()) != "cpu" || cores == 0 ||
                                                               grid.real_ranks_per_node <= static_cast<int>(cores))));
  groups.world->all_reduce(&overlap, &overlap, 1, DType::i64, ReduceOp::min);
  zero_->set_overlap(overlap != 0);
  if (pipe_) {
    zero_->set_pipeline({pipe_->tied, pipe_->peers_host.get(), pipe_->last() && mc_.tie_embeddings});
    if (zero_->stage() != 3) {
      pflat_ = std::make_unique<FlatParams>(table());
      pflat_->set(zero_->params(), zero_->grads());
    }
  }
}

const ParamTable& TrainSession::table() const {
  return pexec_ ? pexec_->table() : exec_->model().params();
}

ExecStats TrainSession::run_plan(const Plan& plan, const std::vector<SeqRef>& batch,
                                 const TokenDataset& ds, double loss_scale, PhaseTimes* timers) {
  if (pexec_) {
    // ZeRO-3 serves the stage's units one by one in the schedule's order, as without a
    // pipeline; ZeRO 0-2 read the full buffers (their per-unit overlap of the last
    // micro-batch's reductions assumes plan order).
    if (zero_->stage() == 3) return pexec_->run(plan, batch, ds, zero_->provider(), loss_scale, timers);
    return pexec_->run(plan, batch, ds, *pflat_, loss_scale, timers);
  }
  return exec_->run(plan, batch, ds, zero_->provider(), loss_scale, timers);
}

ParamTable TrainSession::full_table() const {
  return make_param_table(mc_, grid_.tp_size, grid_.tp_rank);
}

void TrainSession::from_full(const ParamTable& full, const float* src, float* dst) const {
  if (pipe_) return pipeline_from_full(*pipe_, full, src, table(), dst);
  std::copy_n(src, full.total, dst);
}

void TrainSession::to_full(const float* src, const ParamTable& full, float* dst) const {
  if (pipe_) return pipeline_to_full(*pipe_, table(), src, full, dst);
  std::copy_n(src, full.total, dst);
}

TrainSession::~TrainSession() {
  zero_.reset();
  pflat_.reset();
  pexec_.reset();
  exec_.reset();
  pipe_.reset();
  dp_backend_comms_.reset();
  backend_comms_.reset();
  be_.reset();
  dp_own_.reset();
  if (dp_grid_.comm != MPI_COMM_NULL) grid_destroy(dp_grid_);
}

// Weights files hold whole tensors (the table of tp = 1).
void TrainSession::read_weights(const std::string& path, float* block) {
  const ParamTable& table = this->table();
  if (grid_.tp_size == 1 && !pipe_) return load_weights(path, mc_, table, block);
  const ParamTable full = make_param_table(mc_);
  std::vector<float> whole(static_cast<size_t>(full.total));
  load_weights(path, mc_, full, whole.data());
  if (!pipe_) return tp_extract(full, whole.data(), table, block);
  const ParamTable mine = full_table();
  std::vector<float> part(static_cast<size_t>(mine.total));
  tp_extract(full, whole.data(), mine, part.data());
  from_full(mine, part.data(), block);
}

void TrainSession::start(BatchSampler& sampler) {
  const ParamTable& table = this->table();
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
    if (!pipe_) {
      checkpoint_load(grid_.comm, resume_path, mc_, table, ps, p.data(), ss, m.data(), v.data());
    } else {  // this stage's units of the whole model
      const ParamTable full = full_table();
      const ShardRanges fps = pipeline_shards(*pipe_, table, full, ps),
                        fss = pipeline_shards(*pipe_, table, full, ss);
      std::vector<float> fp(static_cast<size_t>(fps.size())), fm(static_cast<size_t>(fss.size())),
          fv(fm);
      checkpoint_load(grid_.comm, resume_path, mc_, full, fps, fp.data(), fss, fm.data(), fv.data());
      pipeline_unpack(*pipe_, table, full, ps, fp.data(), p.data());
      pipeline_unpack(*pipe_, table, full, ss, fm.data(), m.data());
      pipeline_unpack(*pipe_, table, full, ss, fv.data(), v.data());
      pipeline_tied_restore(*pipe_, table, *dp_->world, ps, ss, p.data(), m.data(), v.data());
    }
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
      if (!opts_.load_weights.empty()) {
        read_weights(opts_.load_weights, host.data());
      } else if (pipe_) {  // drawn for the whole model, then this stage's units
        const ParamTable full = full_table();
        std::vector<float> whole(static_cast<size_t>(full.total));
        init_params(mc_, full, cfg_.train.seed, whole.data(), 0, full.total);
        from_full(full, whole.data(), host.data());
      } else {
        init_params(mc_, table, cfg_.train.seed, host.data(), 0, table.total);
      }
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
  const ParamTable full = full_table();
  std::vector<float> fp, fm, fv;
  if (pipe_) {  // the parts in units this stage owns, in the whole model's layout
    const ShardRanges s = mine.shards;
    mine.shards = pipeline_shards(*pipe_, table(), full, s);
    const size_t k = static_cast<size_t>(mine.shards.size());
    fp.resize(k), fm.resize(k), fv.resize(k);
    pipeline_pack(*pipe_, table(), full, s, p.data(), fp.data());
    pipeline_pack(*pipe_, table(), full, s, m.data(), fm.data());
    pipeline_pack(*pipe_, table(), full, s, v.data(), fv.data());
    mine.params = fp.data();
    mine.exp_avg = fm.data();
    mine.exp_avg_sq = fv.data();
  }
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
                         pipe_ ? full : table(), meta, mine);
}

void TrainSession::dump_weights(const std::string& path) {
  std::vector<float> host(static_cast<size_t>(this->table().total));
  zero_->get_params(host.data());  // collective: ZeRO-3 gathers the shards
  const ParamTable table = full_table();
  if (pipe_) {  // each stage's units, summed over the stages
    std::vector<float> mine(std::move(host));
    host.assign(static_cast<size_t>(table.total), 0.f);
    to_full(mine.data(), table, host.data());
    pipe_->peers_host->all_reduce(host.data(), host.data(), host.size(), DType::f32, ReduceOp::sum);
  }
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
      "ZeRO {}{}; tp {}; {}up to {} tokens per device per micro-batch\n",
      model_config_summary(mc_), rope_summary(mc_), be_->name(), dtype_name(be_->act_dtype()),
      comm_choice_name(comm_choice_), cfg_.train.tf32 ? "on" : "off", cfg_.train.cuda_attention,
      cfg_.parallel.sp_mode, cfg_.parallel.zero,
      zero_->overlaps_reduce() ? " (all-reduce overlapped with the backward)" : "", grid_.tp_size,
      pipe_ ? fmt::format("pp {} {} ({}); ", pipe_->stages, cfg_.parallel.pp_schedule,
                          pipeline_describe(pipe_->layers))
            : "",
      max_local_);
}

// ---- issue 19: the pipeline's per-stage figures (the table and the timing report) ----
ReportPipeline TrainSession::pipeline_summary() {
  ReportPipeline out;
  if (!pipe_) return out;
  const PipelineStats& st = pexec_->stats();
  const double steps = std::max<double>(1, static_cast<double>(st.steps));
  constexpr int kFields = 7;
  const double mine[kFields] = {static_cast<double>(pipe_->stage), st.forward_ms / steps,
                                st.backward_ms / steps, st.p2p_ms / steps, st.wall_ms / steps,
                                static_cast<double>(st.units) / steps,
                                static_cast<double>(st.activation_bytes)};
  std::vector<double> all(static_cast<size_t>(kFields * grid_.size));
  groups_.world->all_gather(mine, all.data(), kFields, DType::f64);
  if (grid_.rank != 0) return out;
  const int P = pipe_->stages;
  out.stages = P;
  out.schedule = cfg_.parallel.pp_schedule;
  out.seq_chunks = cfg_.parallel.seq_chunks;
  int first = 0;
  for (int s = 0; s < P; ++s) {
    double sum[kFields] = {}, peak = 0;
    int n = 0;
    for (int r = 0; r < grid_.size; ++r) {
      const double* x = all.data() + static_cast<size_t>(kFields * r);
      if (static_cast<int>(x[0]) != s) continue;
      for (int k = 0; k < kFields; ++k) sum[k] += x[k];
      peak = std::max(peak, x[6]);
      ++n;
    }
    for (double& v : sum) v /= std::max(1, n);
    ReportStage rs;
    rs.first_layer = first;
    rs.layers = pipe_->layers[static_cast<size_t>(s)];
    rs.forward_ms = sum[1];
    rs.backward_ms = sum[2];
    rs.p2p_ms = sum[3];
    rs.schedule_ms = sum[4];
    rs.units = sum[5];
    rs.bubble = sum[4] > 0 ? sum[3] / sum[4] : 0.0;
    rs.bubble_formula = (P - 1) / (sum[5] + P - 1);
    rs.activation_bytes = peak;
    out.stage.push_back(rs);
    first += rs.layers;
  }
  return out;
}
// ---- end issue 19 ----

}  // namespace flexsp
