#include "lib/train/session.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint.h"
#include "io/weights/weights.h"
#include "lib/model/chunked_layer.h"
#include "lib/model/cut_costs.h"
#include "lib/platform/backend_factory.h"
#include "lib/model/params.h"
#include "lib/model/rope.h"
#include "lib/model/tensor_parallel.h"
#include "lib/planner/cost/memory_model.h"
#include "lib/plan/pipeline_schedule.h"
#include "lib/runtime/ulysses.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"
#include "lib/util/host_memory.h"

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

TrainSession::TrainSession(const RunConfig& config, ParallelState& ps, const TokenDataset& ds,
                           const TrainOptions& opts)
    : cfg_(config), ps_(ps), opts_(opts) {
  const MPI_Comm world = ps.world().comm;
  // The configuration that runs: the CUDA numerics keys with their environment overrides
  // (FLEXSP_CUDA_TF32, FLEXSP_CUDA_ATTENTION, FLEXSP_CUDA_GEMM) applied, so that the
  // start-up line, checkpoints and reports record what ran.
  agree(world, [&] {
    backend_opts_ = with_env_overrides({cfg_.train.backend, cfg_.train.precision, cfg_.train.tf32,
                                        cfg_.train.cuda_attention, cfg_.train.cuda_gemm});
    cfg_.train.tf32 = backend_opts_.tf32;
    cfg_.train.cuda_attention = backend_opts_.cuda_attention;
    cfg_.train.cuda_gemm = backend_opts_.cuda_gemm;
  });
  agree(world, [&] {
    resolve_model(ds);
    check_layout();
    be_ = make_backend(backend_opts_);
  });
  attached_ = ps_.attach_backend(*be_);
  build_runtime();
}

TrainSession::~TrainSession() = default;

// The model, and where training starts (decided before the model is built: its RoPE may
// come from there).
void TrainSession::resolve_model(const TokenDataset& ds) {
  mc_ = resolve_model_config(cfg_.model, cfg_.set_keys, ds.vocab_size());
  mc_.token_chunk = cfg_.train.token_chunk;
  mc_.offload = cfg_.train.offload != Offload::off;
  mc_.offload_ahead = cfg_.train.offload_ahead;
  FLEXSP_CHECK(mc_.vocab >= ds.vocab_size(),
               "model.vocab: {} is smaller than the dataset's vocab_size {}", mc_.vocab,
               ds.vocab_size());
  const std::string& ckdir = cfg_.checkpoint.dir;
  FLEXSP_CHECK(opts_.resume.empty() || opts_.load_weights.empty(),
               "--resume and --load-weights cannot be used together");
  if (!opts_.resume.empty()) resume_path_ = checkpoint_resolve(opts_.resume, ckdir);
  if (!ckdir.empty() && ps_.rank() == 0) {
    std::error_code ec;
    std::filesystem::create_directories(ckdir, ec);
    FLEXSP_CHECK(std::filesystem::is_directory(ckdir, ec), "checkpoint.dir: cannot create {}", ckdir);
  }
  const std::string& from = resume_path_.empty() ? opts_.load_weights : resume_path_;
  if (!from.empty()) {
    const ModelConfig file = read_weights_config(from);
    // An imported model keeps its vocabulary (Qwen's is larger than its tokenizer's ids).
    if (!cfg_.is_set("model.vocab")) mc_.vocab = file.vocab;
    FLEXSP_CHECK(mc_.vocab >= ds.vocab_size(),
                 "{}: the model's vocabulary ({}) is smaller than the dataset's vocab_size {} ({})", from,
                 mc_.vocab, ds.vocab_size(), ds.tokenizer());
    const std::string note = adopt_file_rope(mc_, file, cfg_.set_keys);
    if (ps_.rank() == 0 && !note.empty()) std::printf("%s: %s\n", from.c_str(), note.c_str());
  }
}

// What the model and the layout must agree on, and the planner's context for the ranks of
// one stage (lib/planner/planner.h).
void TrainSession::check_layout() {
  tp_check(mc_, ps_.tp());
  chunk_check(mc_, ps_.tp());
  if (cfg_.train.offload == Offload::automatic) {  // offload where the layout needs it
    ModelConfig plain = mc_;
    plain.offload = false;
    const PlannerContext pc = planner_context(cfg_, plain, ps_.size(), ps_.world().ranks_per_node);
    // Without a pipeline the planner chooses per micro-batch (offload_choice); with one,
    // once per run: offload if the layout does not fit without it.
    mc_.offload = pc.offload_choice || !memory_fits(pc);
  }
  if (ps_.pp() > 1)
    pipe_ = std::make_unique<PipelineStage>(pipeline_stage_create(ps_.pp_rank(), ps_.pp(), cfg_, mc_));
  zero_check(cfg_.parallel);
  if (cfg_.parallel.sp_mode == SpMode::static_sp && cfg_.is_set("parallel.sp_size")) {
    FLEXSP_CHECK(ps_.dp() % cfg_.parallel.sp_size == 0,
                 "parallel.sp_size: {} does not divide the {} devices ({} ranks / tp {})",
                 cfg_.parallel.sp_size, ps_.dp(), ps_.stage().size, ps_.tp());
    const ModelConfig lc = tp_local_config(mc_, ps_.tp());
    cp_split(cfg_.parallel.cp_mode, cfg_.parallel.sp_size, lc.heads, lc.kv_heads,
             ps_.devices_per_node());
  }
  pctx_ = planner_context(cfg_, mc_, ps_.size(), ps_.world().ranks_per_node);
  // The split that runs (memory, the slowest stage).
  if (pipe_) pctx_.pipeline.stage_layers = *std::max_element(pipe_->layers.begin(), pipe_->layers.end());
  memory_require_fit(pctx_);  // refuses, with the numbers, a layout the memory model rejects
  const PlanCosts costs = plan_costs(pctx_);
  limits_ = plan_limits(pctx_, costs);
  if (pctx_.offload_choice) {
    // The model offloads where a plan says so: every micro-batch when nothing fits without
    // it, none when offload holds no more of the batch (the planner then never chooses it);
    // otherwise a micro-batch kept on the device has at most the memory's tokens without
    // offload (the model's two layouts, llama.h).
    const bool gains = costs.offload_costs != nullptr &&
                       local_tokens(limits_.max_tokens_per_rank) < local_tokens(limits_.max_tokens_per_rank_offload);
    mc_.offload = costs.offload || gains;
    mc_.offload_plain_tokens = gains ? local_tokens(limits_.max_tokens_per_rank) : 0;
    if (!gains) limits_.max_tokens_per_rank_offload = 0;
  }
  // build_runtime's workspace bound (tp = 1 with chunks): a chunk past it never runs.
  const int64_t most = std::min(most_tokens_per_rank(), max_batch_tokens(cfg_));
  FLEXSP_CHECK(mc_.token_chunk <= most,
               "train.token_chunk: {} tokens is larger than a micro-batch (at most {} tokens per device: "
               "the global batch, train.micro_batch_tokens and the memory bound)",
               mc_.token_chunk, most);
  require_offload_host_memory();
}

// The most tokens a device holds in a micro-batch of either layout (offload or not).
int64_t TrainSession::most_tokens_per_rank() const {
  return std::max(limits_.max_tokens_per_rank, limits_.max_tokens_per_rank_offload);
}

// A device's workspace for micro-batches of at most E tokens per device: no more than the
// batch, and a tensor-parallel group's stream gains fewer than tp padding tokens.
int64_t TrainSession::local_tokens(int64_t E) const {
  return std::min(E, max_batch_tokens(cfg_)) + (ps_.tp() > 1 ? ps_.tp() : 0);
}

// The activation offload's host pools of this node's ranks, sized once for the largest
// micro-batch, must fit the host memory available now.
void TrainSession::require_offload_host_memory() const {
  const double per_token =
      memory_estimate_context(pctx_.offload_choice ? planner_offload_side(pctx_) : pctx_).host_per_token;
  if (per_token <= 0 || !mc_.offload) return;
  const int64_t local = local_tokens(most_tokens_per_rank());
  const int ranks = std::max(1, ps_.world().ranks_per_node);
  const double need = per_token * static_cast<double>(local) * ranks;
  const double avail = static_cast<double>(host_memory_available());
  FLEXSP_CHECK(avail <= 0 || need <= avail,
               "train.offload: the activation offload's host pools need {:.3g} GB on a node ({} ranks x {} "
               "tokens x {:.4g} bytes), more than the {:.3g} GB of host memory available",
               need / 1e9, ranks, local, per_token, avail / 1e9);
}

// The executor and the optimizer, on the parallel state's groups.
void TrainSession::build_runtime() {
  // Workspace bounds: the planner puts at most E tokens on a device per micro-batch; a
  // tensor-parallel group's stream gains fewer than d * tp padding tokens.
  const int tp = ps_.tp();
  const int64_t whole = max_batch_tokens(cfg_), E = most_tokens_per_rank();
  max_local_ = local_tokens(E);
  const int64_t max_group = std::min(E * ps_.dp(), whole) + (tp > 1 ? ps_.stage().size : 0);
  const SpGroups groups = ps_.sp_groups();
  if (pipe_)
    pexec_ = std::make_unique<PipelineExecutor>(*be_, pipe_->model, groups, max_local_, max_group,
                                                ps_.pipeline_role());
  else
    exec_ = std::make_unique<PlanExecutor>(*be_, mc_, groups, max_local_, max_group);
  zero_ = make_zero_optimizer(*be_, table(), cfg_.parallel, ps_.zero_peers());
}

const ParamTable& TrainSession::table() const {
  return pexec_ ? pexec_->table() : exec_->model().params();
}

ExecStats TrainSession::run_plan(const Plan& plan, const std::vector<SeqRef>& batch,
                                 const TokenDataset& ds, double loss_scale, PhaseTimes* timers) {
  // With a pipeline, ZeRO 0-2's provider reads the full buffers without overlapping the
  // all-reduce (ParallelState decides so: its per-unit reductions assume plan order), and
  // ZeRO-3 serves the stage's units one by one in the schedule's order.
  if (pexec_) return pexec_->run(plan, batch, ds, zero_->provider(), loss_scale, timers);
  return exec_->run(plan, batch, ds, zero_->provider(), loss_scale, timers);
}

ParamTable TrainSession::full_table() const {
  return make_param_table(mc_, ps_.tp(), ps_.tp_rank());
}

void TrainSession::from_full(const ParamTable& full, const float* src, float* dst) const {
  if (pipe_) return pipeline_from_full(*pipe_, full, src, table(), dst);
  std::copy_n(src, full.total, dst);
}

void TrainSession::to_full(const float* src, const ParamTable& full, float* dst) const {
  if (pipe_) return pipeline_to_full(*pipe_, table(), src, full, dst);
  std::copy_n(src, full.total, dst);
}

// Weights files hold whole tensors (the table of tp = 1).
void TrainSession::read_weights(const std::string& path, float* block) {
  const ParamTable& table = this->table();
  if (ps_.tp() == 1 && !pipe_) return load_weights(path, mc_, table, block);
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
  const std::string& ckdir = cfg_.checkpoint.dir;
  if (!resume_path_.empty()) {
    resume(sampler);
  } else {
    if (ps_.rank() == 0 && opts_.resume == "auto")
      std::printf("no checkpoint in %s: starting fresh\n", ckdir.c_str());
    init_weights();
  }
  // Never overwrite or rotate away checkpoints newer than where this run starts.
  agree(ps_.world().comm, [&] {
    const std::vector<int64_t> have = checkpoint_steps(ckdir);
    FLEXSP_CHECK(have.empty() || have.back() <= start_,
                 "checkpoint.dir: {} already holds {} (a run past step {}); resume it with "
                 "--resume auto or choose another directory",
                 ckdir, checkpoint_file_name(have.empty() ? 0 : have.back()), start_);
  });
  if (!ckdir.empty()) {  // a save's buffers: this rank's state shards (with stages: packed whole)
    const ShardRanges s = zero_->state_shards();
    const int64_t n = pipe_ ? pipeline_shards(*pipe_, table(), full_table(), s).size() : s.size();
    ckpt_ = std::make_unique<TrainCheckpoints>(cfg_.checkpoint, ps_.world().comm, *be_, n);
  }
}

void TrainSession::resume(BatchSampler& sampler) {
  const ParamTable& table = this->table();
  const MPI_Comm world = ps_.world().comm;
  CheckpointMeta meta;
  agree(world, [&] {
    meta = checkpoint_read_meta(resume_path_, mc_);
    sampler.seek(meta.cursor);
  });
  const ShardRanges ps = zero_->param_shards(), ss = zero_->state_shards();
  std::vector<float> p(static_cast<size_t>(ps.size())), m(static_cast<size_t>(ss.size())),
      v(static_cast<size_t>(ss.size()));
  if (!pipe_) {
    checkpoint_load(world, ps_.world().node, resume_path_, mc_, table, ps, p.data(), ss, m.data(), v.data());
  } else {  // this stage's units of the whole model
    const ParamTable full = full_table();
    const ShardRanges fps = pipeline_shards(*pipe_, table, full, ps),
                      fss = pipeline_shards(*pipe_, table, full, ss);
    std::vector<float> fp(static_cast<size_t>(fps.size())), fm(static_cast<size_t>(fss.size())),
        fv(fm);
    checkpoint_load(world, ps_.world().node, resume_path_, mc_, full, fps, fp.data(), fss, fm.data(), fv.data());
    pipeline_unpack(*pipe_, table, full, ps, fp.data(), p.data());
    pipeline_unpack(*pipe_, table, full, ss, fm.data(), m.data());
    pipeline_unpack(*pipe_, table, full, ss, fv.data(), v.data());
    pipeline_tied_restore(*pipe_, table, ps_.tied_host(), *ps_.dp_groups().world, ps, ss,
                          p.data(), m.data(), v.data());
  }
  zero_->set_state(p.data(), m.data(), v.data());
  zero_->set_adam_steps(meta.adam_steps);
  start_ = meta.step;
  consumed = meta.consumed_tokens;
  if (ps_.rank() != 0) return;
  std::printf("resumed from %s: step %lld, %lld tokens, saved by %lld ranks (ZeRO %lld)\n",
              resume_path_.c_str(), static_cast<long long>(start_), static_cast<long long>(consumed),
              static_cast<long long>(meta.world_size), static_cast<long long>(meta.zero));
  if (meta.seed != cfg_.train.seed)
    std::printf("note: train.seed is %llu in the checkpoint but %llu in this run: the data order changes\n",
                static_cast<unsigned long long>(meta.seed),
                static_cast<unsigned long long>(cfg_.train.seed));
}

void TrainSession::init_weights() {
  const ParamTable& table = this->table();
  std::vector<float> host(static_cast<size_t>(table.total), 0.f);
  agree(ps_.world().comm, [&] {
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

std::string TrainSession::save_checkpoint(int64_t step, const SamplerCursor& next, bool wait) {
  float* const* snap = ckpt_->snapshot();  // waits for the write in flight: it reads them
  const auto t0 = std::chrono::steady_clock::now();
  ShardRanges shards = zero_->state_shards();
  const ParamTable full = full_table();
  if (!pipe_) {
    zero_->get_state(snap[0], snap[1], snap[2]);
  } else {  // the parts in units this stage owns, in the whole model's layout
    const size_t n = static_cast<size_t>(shards.size());
    std::vector<float> p(n), m(n), v(n);
    zero_->get_state(p.data(), m.data(), v.data());
    const ShardRanges s = shards;
    shards = pipeline_shards(*pipe_, table(), full, s);
    pipeline_pack(*pipe_, table(), full, s, p.data(), snap[0]);
    pipeline_pack(*pipe_, table(), full, s, m.data(), snap[1]);
    pipeline_pack(*pipe_, table(), full, s, v.data(), snap[2]);
  }
  const double snapshot_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CheckpointMeta meta;
  meta.step = step;
  meta.consumed_tokens = consumed;
  meta.seed = cfg_.train.seed;
  meta.cursor = next;
  meta.world_size = ps_.size();
  meta.zero = cfg_.parallel.zero;
  meta.adam_steps = zero_->adam_steps();
  meta.config_ini = config_to_ini(cfg_);
  meta.version = FLEXSP_VERSION;
  return ckpt_->start(mc_, pipe_ ? full : table(), meta, shards, snapshot_ms, wait);
}

void TrainSession::poll_checkpoint() {
  if (ckpt_) ckpt_->poll();
}

std::vector<CheckpointSaved> TrainSession::take_saved_checkpoints() {
  return ckpt_ ? ckpt_->take_saved() : std::vector<CheckpointSaved>{};
}

void TrainSession::dump_weights(const std::string& path) {
  std::vector<float> host(static_cast<size_t>(this->table().total));
  zero_->get_params(host.data());  // collective: ZeRO-3 gathers the shards
  const ParamTable table = full_table();
  if (pipe_) {  // each stage's units, summed over the stages
    std::vector<float> mine(std::move(host));
    host.assign(static_cast<size_t>(table.total), 0.f);
    to_full(mine.data(), table, host.data());
    ps_.peers_host()->all_reduce(host.data(), host.data(), host.size(), DType::f32, ReduceOp::sum);
  }
  if (ps_.tp() == 1) {
    agree(ps_.world().comm, [&] {
      if (ps_.rank() == 0) flexsp::dump_weights(path, mc_, table, host.data());
    });
    return;
  }
  // Each block once (copy 0 of a replicated one), summed over the tp group.
  const ParamTable full = make_param_table(mc_);
  std::vector<float> whole(static_cast<size_t>(full.total), 0.f);
  for (const ParamView& v : table.views)
    if (v.tp_replica != 0) std::fill_n(host.begin() + v.offset, v.numel(), 0.f);
  tp_insert(table, host.data(), full, whole.data());
  ps_.tp_host().all_reduce(whole.data(), whole.data(), whole.size(), DType::f32, ReduceOp::sum);
  agree(ps_.world().comm, [&] {
    if (ps_.rank() == 0) flexsp::dump_weights(path, mc_, full, whole.data());
  });
}

std::string TrainSession::describe() const {
  // The CPU kernels' instruction set (attention_isa), where they are what runs.
  const bool cpu = std::string(be_->name()) == "cpu";
  const std::string kernels = cpu ? fmt::format("cpu kernels {}; ", cpu::attention_isa()) : "";
  return fmt::format(
      "model: {}; {}; backend {} ({} activations); {}comm {}; tf32 {}; cuda_attention {}; "
      "cuda_gemm {}; offload {}; sp_mode {}; ZeRO {}{}; tp {}; {}up to {} tokens per device per micro-batch{}\n",
      model_config_summary(mc_), rope_summary(mc_), be_->name(), dtype_name(be_->act_dtype()),
      kernels, comm_choice_name(ps_.comm_choice()), cfg_.train.tf32 ? "on" : "off",
      enum_name(cfg_.train.cuda_attention), enum_name(cfg_.train.cuda_gemm),
      mc_.offload ? fmt::format("{} (ahead {}{})", enum_name(cfg_.train.offload), mc_.offload_ahead,
                                mc_.offload_plain_tokens > 0
                                    ? fmt::format("; per micro-batch, up to {} tokens per device without",
                                                  mc_.offload_plain_tokens)
                                    : std::string())
                  : std::string(cfg_.train.offload == Offload::automatic ? "auto (not needed)" : "off"),
      enum_name(cfg_.parallel.sp_mode), cfg_.parallel.zero,
      zero_->overlaps_reduce() ? " (all-reduce overlapped with the backward)" : "", ps_.tp(),
      pipe_ ? fmt::format("pp {} {} ({}); ", pipe_->stages, enum_name(cfg_.parallel.pp_schedule),
                          pipeline_describe(pipe_->layers))
            : "",
      max_local_, mc_.token_chunk > 0 ? fmt::format(", layers in chunks of {}", mc_.token_chunk) : "");
}

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
  std::vector<double> all(static_cast<size_t>(kFields * ps_.size()));
  ps_.world_groups().world->all_gather(mine, all.data(), kFields, DType::f64);
  if (ps_.rank() != 0) return out;
  const int P = pipe_->stages;
  out.stages = P;
  out.schedule = enum_name(cfg_.parallel.pp_schedule);
  out.seq_chunks = cfg_.parallel.seq_chunks;
  int first = 0;
  for (int s = 0; s < P; ++s) {
    double sum[kFields] = {}, peak = 0;
    int n = 0;
    for (int r = 0; r < ps_.size(); ++r) {
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

}  // namespace flexsp
