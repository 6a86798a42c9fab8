// flexsp profile: measures this machine and fits a cost-model file (lib/planner/cost/cost_model.h).
//
// It measures what training would run: the backend of --backend/--precision/--tf32/
// --cuda-attention (as the train.* keys of the same names, environment overrides included;
// a GPU with bf16 activations where there is one) and the
// communicators of --comm (as parallel.comm: NCCL between GPUs), so the all-to-all payload
// is counted in the backend's activation bytes.
//  - all-to-all: for each power-of-two group size d, all groups of the grid at once
//    exchange a buffer of s/d tokens x (q, k, v, o widths) per rank, as Ulysses does; the
//    slowest rank's time is fitted through the origin to t = bytes per rank / bw, per
//    (d, span), span = inside a node or not (nodes emulated with --ranks-per-node).
//  - compute: forward + backward of the model on a packed micro-batch -- each length of the
//    grid alone, and k sequences of each shorter length packed to the longest's tokens
//    (compute_probe_mixes) -- for each group size d the model can run: d = 1 on every rank
//    at once, d > 1 as Ulysses SP on every block of d ranks at once (lib/runtime/ulysses,
//    all-to-alls included); the slowest rank counts. All ranks compute together as they do
//    in a training micro-batch, so ranks that share cores (more ranks than cores, as the
//    CPU tests run) or a network are timed as training will find them; a profile predicts
//    runs with its own rank count and ranks per host. The compute terms are fitted by
//    least squares over all points (lib/planner/analysis/compute_fit.h): t - comm = fixed +
//    per_sequence k + (a2 sum s + a1 sum s^2) / d, with comm from the all-to-all fit (so
//    the all-to-alls are timed first). The packed points are what tell the cost a
//    micro-batch pays once (fixed) from the one each sequence pays (per_sequence).
//  - point-to-point: every rank sends a k/v block to the next rank of a ring inside its
//    node and one node over, at once (Comm::send_recv): bw_p2p_intra / bw_p2p_inter.
//  - per step: ZeRO's all-reduce of the model's flat gradient inside a node and over the
//    world (bw_zero_intra / bw_zero_inter), every rank at once, and the optimizer (gradient
//    norm + AdamW) per parameter element (optimizer_ns_per_param), each rank alone; and
//    the gradient to pinned host memory and back on the copy stream, every rank at once
//    (bw_h2d: the activation offload's transfers).
//  - memory: activation bytes per local token, with and without activation checkpointing,
//    as the backend's allocator counts them over a forward + backward (the model's
//    workspace and attention state, and Ulysses' buffers for the widest runnable group;
//    slope over the shortest and longest length): the planner's tokens-per-rank bound.
// Every timing that spans ranks starts with a world barrier (all groups at once) and then a
// barrier of the ranks that exchange data: a world barrier over slow links releases ranks
// milliseconds apart (tests/cluster/cluster.sh shape: an intra-node all-to-all read 0.03
// instead of 1.6 GB/s), and that skew would count in the time of every group.
// Then the fits' relative RMS errors are printed and the file written by rank 0. Each
// phase runs in its own agree() so that a failure on one rank ends all of them.
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "app/commands.h"
#include "app/options.h"
#include "lib/backend/backend.h"
#include "lib/platform/backend_factory.h"
#include "lib/platform/backend_comms.h"
#include "lib/platform/device_binding.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/model/llama.h"
#include "lib/model/params.h"
#include "lib/optim/optim.h"
#include "lib/planner/analysis/compute_fit.h"
#include "lib/planner/cost/cost_model.h"
#include "lib/plan/plan.h"
#include "lib/runtime/sequence_probe.h"
#include "lib/runtime/ulysses.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

namespace {

using Clock = std::chrono::steady_clock;

struct ProfileArgs {
  std::string model = "tiny", out, seq_lens = "64,128,256,512";
  std::string backend = "auto", precision = "auto", comm = "auto", cuda_attention = "auto";
  bool tf32 = false;
  int ranks_per_node = 0, repeats = 3;
  int64_t micro_batch_tokens = 0;  // > 0: also time full micro-batches of the longest length
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0;  // the preset's shape unless > 0
};

std::vector<int64_t> parse_list(const std::string& s, const char* opt) {
  const std::vector<int64_t> v = parse_int_list(s, opt, 2, INT64_MAX, "a length >= 2");
  FLEXSP_CHECK(v.size() >= 3, "{}: give at least 3 lengths to fit the compute terms (a1, a2, per-sequence, fixed)", opt);
  return v;
}

// Median over repeats of forward + backward of a packed micro-batch (`lens`) on this
// rank's group of d ranks (`dev`: the block's communicator for backend buffers that Ulysses
// uses; d = 1: null, LocalAttention), timed over `group` (barrier before, then `dev`'s;
// slowest rank after; null: this rank alone). Collective over `group`.
double time_compute_ms(Backend& be, const ModelConfig& cfg, const std::vector<int64_t>& lens,
                       Comm* group, Comm* dev, int repeats) {
  ProbeWeights w(be, cfg);
  SequenceProbe probe(be, cfg, lens, dev);
  std::vector<double> t;
  for (int r = 0; r <= repeats; ++r) {  // the first run warms up
    if (group != nullptr) group->barrier();
    if (dev != nullptr) dev->barrier();
    const auto t0 = Clock::now();
    probe.run(w);
    be.synchronize();
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (group != nullptr) group->all_reduce(&ms, &ms, 1, DType::f64, ReduceOp::max);
    if (r > 0) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median over repeats of f(), the first run a warm-up; ms. alone: each rank in turn while
// the others wait at a barrier, the mean over ranks; else every rank at once (barrier
// before, then one of `members`, the ranks f() exchanges with), the slowest rank.
// Collective over world.
template <class F>
double time_ranks_ms(Backend& be, Comm& world, Comm* members, int repeats, bool alone, F&& f) {
  auto median = [&] {
    std::vector<double> t;
    for (int r = 0; r <= repeats; ++r) {
      if (!alone) world.barrier();
      if (!alone && members != nullptr) members->barrier();
      const auto t0 = Clock::now();
      f();
      be.synchronize();
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (!alone) world.all_reduce(&ms, &ms, 1, DType::f64, ReduceOp::max);
      if (r > 0) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  if (!alone) return median();
  double mine = 0;
  for (int r = 0; r < world.size(); ++r) {
    world.barrier();
    if (r == world.rank()) mine = median();
  }
  world.all_reduce(&mine, &mine, 1, DType::f64, ReduceOp::sum);
  return mine / world.size();
}

// What every training step pays besides its micro-batches, on the model's flat
// fp32 gradient (at most 2^26 elements): ZeRO's ring all-reduce inside each node
// (bw_zero_intra) and over the world when it spans nodes (bw_zero_inter), all rings at
// once -- bandwidth = the 2 (n - 1) / n of the buffer a rank moves / time, the definition
// of sim_ring_bytes -- and the optimizer: gradient sum of squares + AdamW over the buffer
// (optimizer_ns_per_param), timed on each rank alone. With a GPU per rank alone is all at
// once; with ranks sharing cores, a training step's optimizer phase was measured at about
// one rank's time alone, several times less than 4 ranks on 2 cores updating at once take
// (bench/results/2026-11-25-prediction-accuracy.md). A span this grid lacks keeps 0.
void profile_step_costs(const ProfileArgs& a, const Grid& grid, const Groups& groups, Backend& be,
                        const ModelConfig& cfg, CostModel& cm) {
  const ParamTable table = make_param_table(cfg);
  const int64_t n = std::min<int64_t>(table.total, int64_t{1} << 26);
  const double bytes = static_cast<double>(n) * sizeof(float);
  Buffer<float> g(be, static_cast<size_t>(n)), p(be, static_cast<size_t>(n));
  be.zero(g.get(), g.bytes());
  be.zero(p.get(), p.bytes());
  Comm& world = *groups.world;
  const CommSet& rc = groups.for_backend(CommPurpose::grad_reduce);
  auto ring_gbs = [&](Comm& c) {
    const double ms = time_ranks_ms(be, world, &c, a.repeats, false, [&] {
      c.all_reduce(g.get(), g.get(), static_cast<size_t>(n), DType::f32, ReduceOp::sum);
    });
    return 2.0 * (c.size() - 1) / c.size() * bytes / (ms * 1e6);
  };
  if (grid.ranks_per_node >= 2) cm.bw_zero_intra_gbs = ring_gbs(*rc.node);
  if (grid.nodes >= 2) cm.bw_zero_inter_gbs = ring_gbs(*rc.world);
  AdamW adamw(be, table, 0, n);
  const OptimSection o;
  const double ms = time_ranks_ms(be, world, nullptr, a.repeats, true, [&] {
    const double sumsq = grad_sum_squares(be, g.get(), n);
    adamw.step(p.get(), g.get(), o, o.lr, clip_scale(sumsq, o.grad_clip));
  });
  cm.optimizer_ns_per_param = ms * 1e6 / static_cast<double>(n);
  // Activation offload: the buffer to pinned host memory and back on the copy stream, every
  // rank at once (a node's GPUs share its host links).
  void* host = be.alloc_host(static_cast<size_t>(bytes));
  const double h2d_ms = time_ranks_ms(be, world, nullptr, a.repeats, false, [&] {
    be.copy_to_host_async(host, g.get(), static_cast<size_t>(bytes));
    be.wait_copies(be.copy_from_host_async(p.get(), host, static_cast<size_t>(bytes)));
  });
  be.free_host(host);
  cm.bw_h2d_gbs = 2 * bytes / (h2d_ms * 1e6);
  if (grid.rank == 0)
    std::printf("per step: ZeRO all-reduce of %lld fp32 elements %.3f GB/s per rank inside a node, %.3f "
                "across nodes (0: no such span); optimizer %.4g ns per parameter; host copies %.3f GB/s "
                "per rank\n",
                static_cast<long long>(n), cm.bw_zero_intra_gbs, cm.bw_zero_inter_gbs, cm.optimizer_ns_per_param,
                cm.bw_h2d_gbs);
}

// All-to-all per group size d, all groups of the grid at once, the slowest rank counting:
// bandwidth per rank fitted through the origin to t = bytes per rank / bw, per (d, span).
void profile_all_to_all(const ProfileArgs& a, const Grid& grid, const Groups& groups, Backend& be,
                        const ModelConfig& cfg, const std::vector<int64_t>& lens, CostModel& cm) {
  const bool root = grid.rank == 0;
  cm.bw_intra_gbs.clear();
  cm.bw_inter_gbs.clear();
  const int64_t width = 2 * cfg.q_dim() + 2 * cfg.kv_dim();
  for (int d = 2; d <= grid.size; d *= 2) {
    if (grid.size % d != 0) break;
    Comm& block = groups.for_backend(CommPurpose::all_to_all).block(d);
    std::vector<double> bytes, secs;
    for (int64_t s : lens) {
      const size_t per_peer = static_cast<size_t>(std::max<int64_t>(1, s / d / d * width));
      Buffer<unsigned char> send(be, per_peer * d * be.act_size()),
          recv(be, per_peer * d * be.act_size());
      std::vector<size_t> counts(d, per_peer), offs(d);
      for (int p = 0; p < d; ++p) offs[p] = p * per_peer;
      double best = 1e300;
      for (int r = 0; r <= a.repeats; ++r) {
        groups.world->barrier();
        block.barrier();
        const auto t0 = Clock::now();
        block.all_to_all_v(send.get(), counts.data(), offs.data(), recv.get(), counts.data(),
                           offs.data(), be.act_dtype());
        be.synchronize();
        double t = std::chrono::duration<double>(Clock::now() - t0).count();
        groups.world->all_reduce(&t, &t, 1, DType::f64, ReduceOp::max);
        if (r > 0) best = std::min(best, t);
      }
      bytes.push_back(double(send.bytes()));
      secs.push_back(best);
    }
    double sbb = 0, sbt = 0;
    for (size_t i = 0; i < bytes.size(); ++i) sbb += bytes[i] * bytes[i], sbt += bytes[i] * secs[i];
    const double bw = sbb / std::max(sbt, 1e-30) / 1e9;  // GB/s per rank
    double err = 0;
    for (size_t i = 0; i < bytes.size(); ++i)
      err += std::pow((bytes[i] / (bw * 1e9) - secs[i]) / secs[i], 2);
    err = std::sqrt(err / bytes.size());
    const bool inter = d > grid.ranks_per_node;
    (inter ? cm.bw_inter_gbs : cm.bw_intra_gbs)[d] = bw;
    if (root)
      std::printf("all-to-all d=%-3d %-6s bandwidth %8.3f GB/s per rank; relative RMS error %.1f%%\n",
                  d, inter ? "inter" : "intra", bw, 100 * err);
  }
  if (cm.bw_intra_gbs.empty() && cm.bw_inter_gbs.empty()) cm.bw_intra_gbs[2] = 1.0;  // one rank: unused
}

// Tensor-parallel exchanges per size inside a node: an all-gather of activation rows and
// a reduce-scatter of fp32 rows, [hidden] wide, as the model runs them around its
// column- and row-parallel GEMMs; bandwidth = bytes a rank moves ((tp - 1) / tp of the
// rows) / the pair's time, the definition cost_tp_bytes_per_token divides by.
void profile_tensor_parallel(const ProfileArgs& a, const Grid& grid, const Groups& groups, Backend& be,
                             const ModelConfig& cfg, const std::vector<int64_t>& lens, CostModel& cm) {
  const bool root = grid.rank == 0;
  cm.bw_tp_gbs.clear();
  for (int tp = 2; tp <= std::min(grid.ranks_per_node, 8); tp *= 2) {
    if (grid.ranks_per_node % tp != 0) break;
    Comm& block = groups.for_backend(CommPurpose::all_to_all).block(tp);
    double moved = 0, took = 0;
    for (int64_t s : lens) {
      const int64_t rows = std::max<int64_t>(tp, s / tp * tp), mine = rows / tp;
      const size_t n = static_cast<size_t>(mine * cfg.hidden);
      Buffer<unsigned char> x(be, n * be.act_size()), full(be, n * tp * be.act_size());
      Buffer<float> part(be, n * tp), red(be, n);
      double best = 1e300;
      for (int r = 0; r <= a.repeats; ++r) {
        groups.world->barrier();
        const auto t0 = Clock::now();
        block.all_gather(x.get(), full.get(), n, be.act_dtype());
        block.reduce_scatter(part.get(), red.get(), n, DType::f32, ReduceOp::sum);
        be.synchronize();
        double t = std::chrono::duration<double>(Clock::now() - t0).count();
        groups.world->all_reduce(&t, &t, 1, DType::f64, ReduceOp::max);
        if (r > 0) best = std::min(best, t);
      }
      moved += (tp - 1.0) / tp * static_cast<double>(rows * cfg.hidden) * (be.act_size() + 4.0);
      took += best;
    }
    cm.bw_tp_gbs[tp] = moved / std::max(took, 1e-30) / 1e9;
    if (root)
      std::printf("tensor-parallel tp=%-3d bandwidth %8.3f GB/s per rank (all-gather + reduce-scatter)\n",
                  tp, cm.bw_tp_gbs[tp]);
  }
}

// Point-to-point (ring shifts, pipeline stage boundaries): every rank at once sends a
// block of keys and values (s / size tokens x 2 kv_dim) to the next rank of a ring and
// receives from the previous one -- inside its node (intra) and one node over (inter);
// bandwidth per rank fitted through the origin. A span this grid lacks keeps the default.
void profile_p2p(const ProfileArgs& a, const Grid& grid, const Groups& groups, Backend& be,
                 const ModelConfig& cfg, const std::vector<int64_t>& lens, CostModel& cm) {
  const bool root = grid.rank == 0;
  Comm& world = *groups.for_backend(CommPurpose::all_to_all).world;
  const int rpn = grid.ranks_per_node, local = grid.rank % rpn, base = grid.rank - local;
  auto measure = [&](int dest, int src, Comm* members) {
    double sbb = 0, sbt = 0;
    for (int64_t s : lens) {
      const size_t n = static_cast<size_t>(std::max<int64_t>(1, s / grid.size * 2 * cfg.kv_dim()));
      Buffer<unsigned char> send(be, n * be.act_size()), recv(be, n * be.act_size());
      double best = 1e300;
      for (int r = 0; r <= a.repeats; ++r) {
        groups.world->barrier();
        if (members != nullptr) members->barrier();
        const auto t0 = Clock::now();
        world.send_recv(send.get(), n, dest, recv.get(), n, src, be.act_dtype());
        be.synchronize();
        double t = std::chrono::duration<double>(Clock::now() - t0).count();
        groups.world->all_reduce(&t, &t, 1, DType::f64, ReduceOp::max);
        if (r > 0) best = std::min(best, t);
      }
      const double b = static_cast<double>(send.bytes());
      sbb += b * b, sbt += b * best;
    }
    return sbb / std::max(sbt, 1e-30) / 1e9;
  };
  if (rpn >= 2) {
    cm.bw_p2p_intra_gbs = measure(base + (local + 1) % rpn, base + (local + rpn - 1) % rpn,
                                  groups.for_backend(CommPurpose::all_to_all).node.get());
    if (root) std::printf("point-to-point intra  bandwidth %8.3f GB/s per rank\n", cm.bw_p2p_intra_gbs);
  }
  if (grid.size >= 2 * rpn && grid.size % rpn == 0) {
    cm.bw_p2p_inter_gbs =
        measure((grid.rank + rpn) % grid.size, (grid.rank + grid.size - rpn) % grid.size, nullptr);
    if (root) std::printf("point-to-point inter  bandwidth %8.3f GB/s per rank\n", cm.bw_p2p_inter_gbs);
  }
}

// Compute: each d on every block of d ranks at once, timed over the world (barrier,
// slowest rank), as a micro-batch runs its groups; single sequences and packed
// micro-batches (compute_probe_mixes). Rank 0 keeps the points.
std::vector<ComputeProbe> profile_compute(const ProfileArgs& a, const Grid& grid, const Groups& groups, Backend& be,
                                          const ModelConfig& cfg, const std::vector<int64_t>& lens) {
  const bool root = grid.rank == 0;
  std::vector<ComputeProbe> pts;
  for (int d = 1; d <= grid.size && grid.size % d == 0; d *= 2) {
    if (d > 1 && !sp_group_runnable(cfg.heads, cfg.kv_heads, d)) continue;
    std::vector<std::vector<int64_t>> mixes = compute_probe_mixes(lens);
    if (a.micro_batch_tokens > 0) {  // as training fills a group: micro_batch_tokens per rank
      const int64_t longest = *std::max_element(lens.begin(), lens.end());
      const int64_t k = a.micro_batch_tokens * d / longest;
      if (k >= 2) mixes.emplace_back(static_cast<size_t>(k), longest);
    }
    for (const std::vector<int64_t>& mix : mixes) {
      if (mix.front() < d) continue;
      agree(grid.comm, [&] {
        Comm* dev = d == 1 ? nullptr : &groups.for_backend(CommPurpose::all_to_all).block(d);
        const double ms = time_compute_ms(be, cfg, mix, groups.world.get(), dev, a.repeats);
        if (root) pts.push_back({mix, d, ms, 0.0});
      });
    }
  }
  return pts;
}

// Rank 0: the compute terms fitted over the points (their all-to-alls priced by the fit
// above), the points against the fit, and the cost-model file.
void fit_and_write(const ProfileArgs& a, const Grid& grid, Backend& be, const ModelConfig& cfg,
                   std::vector<ComputeProbe> pts, CostModel& cm) {
  const bool root = grid.rank == 0;
  double rms = 0;
  agree(grid.comm, [&] {
    if (!root) return;
    auto comm_ms = [&](int64_t s, int d) {
      return d == 1 ? 0.0
                    : cost_comm_bytes(cm, cfg, s) /
                          (d * cost_bandwidth_gbs(cm, d, d > grid.ranks_per_node) * 1e9) * 1e3;
    };
    for (ComputeProbe& p : pts) {
      int64_t tokens = 0;
      for (int64_t l : p.lens) tokens += l;
      p.comm_ms = comm_ms(tokens, p.d);  // linear in tokens: the pack's sum
    }
    const ComputeFit fit = fit_compute(pts);
    cm.fixed_ms = fit.fixed_ms, cm.per_sequence_ms = fit.per_sequence_ms;
    cm.a2_ms = fit.a2_ms, cm.a1_ms = fit.a1_ms;
    rms = fit.rms;
    for (const ComputeProbe& p : pts) {
      std::string mix = std::to_string(p.lens.front());
      if (p.lens.size() > 1) mix = std::to_string(p.lens.size()) + "x" + mix;
      std::printf("compute  s=%-7s d=%-3d measured %9.3f ms  fit %9.3f ms\n", mix.c_str(), p.d, p.ms,
                  fit.predict_ms(p));
    }
    std::printf("compute fit over %zu (micro-batch, d) points: a1 = %.4g ms/token^2, a2 = %.4g ms/token, "
                "per sequence = %.4g ms, fixed = %.4g ms; relative RMS error %.1f%%\n",
                pts.size(), cm.a1_ms, cm.a2_ms, cm.per_sequence_ms, cm.fixed_ms, 100 * rms);
    const std::string header = fmt::format(
        "flexsp profile: model {}, {} ranks ({} per node), {} backend, {} activations, "
        "lengths {}\ncompute fit relative RMS error {:.1f}%", cfg.preset, grid.size,
        grid.ranks_per_node, be.name(), dtype_name(be.act_dtype()), a.seq_lens, 100 * rms);
    std::ofstream f(a.out);
    FLEXSP_CHECK(f.good(), "--out: cannot write '{}'", a.out);
    f << cost_model_to_ini(cm, header);
    FLEXSP_CHECK(f.good(), "--out: error writing '{}'", a.out);
    std::printf("wrote %s\n", a.out.c_str());
  });
}

void run_profile(const ProfileArgs& a, const Grid& grid, const Groups& groups, Backend& be,
                 const ModelConfig& cfg, const std::vector<int64_t>& lens) {
  CostModel cm;
  cm.model = cfg.preset;
  cm.model_hidden = cfg.hidden, cm.model_layers = cfg.layers;
  cm.source = a.out;
  cm.bytes_per_element = static_cast<double>(be.act_size());  // the all-to-alls' activations
  cm.param_bytes = 4, cm.grad_bytes = 4, cm.optim_bytes = 8;
  profile_all_to_all(a, grid, groups, be, cfg, lens, cm);
  profile_tensor_parallel(a, grid, groups, be, cfg, lens, cm);
  profile_p2p(a, grid, groups, be, cfg, lens, cm);
  agree(grid.comm, [&] { profile_step_costs(a, grid, groups, be, cfg, cm); });
  std::vector<ComputeProbe> pts = profile_compute(a, grid, groups, be, cfg, lens);
  const ActivationProfile act = profile_activation_memory(grid, groups, be, cfg, lens.front(),
                                                         lens.back());
  cm.activation_mb_per_token = act.bytes_per_token / 1e6;
  cm.activation_mb_per_token_ckpt = act.bytes_per_token_ckpt / 1e6;
  if (grid.rank == 0)
    std::printf("activations: %.4g MB per token, %.4g with checkpointing (model workspace and "
                "Ulysses buffers, groups of 1..%d ranks)\n", cm.activation_mb_per_token,
                cm.activation_mb_per_token_ckpt, act.widest);
  fit_and_write(a, grid, be, cfg, std::move(pts), cm);
}

}  // namespace

int cmd_profile(const CommandContext& ctx, const Args& args) {
  ProfileArgs a;
  po::options_description opts("flexsp profile options");
  opts.add_options()
      ("help,h", "this help")
      ("model", po::value(&a.model)->default_value(a.model), "model preset to time")
      ("hidden", po::value(&a.hidden)->default_value(0), "as model.hidden (0: the preset's)")
      ("layers", po::value(&a.layers)->default_value(0), "as model.layers (0: the preset's)")
      ("heads", po::value(&a.heads)->default_value(0), "as model.heads (0: the preset's)")
      ("kv-heads", po::value(&a.kv_heads)->default_value(0), "as model.kv_heads (0: the preset's)")
      ("ffn", po::value(&a.ffn)->default_value(0), "as model.ffn (0: the preset's)")
      ("out", po::value(&a.out), "cost-model file to write (required)")
      ("seq-lens", po::value(&a.seq_lens)->default_value(a.seq_lens), "comma-separated sequence lengths")
      ("repeats", po::value(&a.repeats)->default_value(a.repeats), "timed repeats per point")
      ("micro-batch-tokens", po::value(&a.micro_batch_tokens)->default_value(0),
       "as train.micro_batch_tokens: also time, on each group of d ranks, a micro-batch of "
       "d x N tokens of the longest --seq-lens length (0: not timed)")
      ("ranks-per-node", po::value(&a.ranks_per_node)->default_value(0),
       "emulate nodes of N ranks (0: detect)")
      ("backend", po::value(&a.backend)->default_value(a.backend), "as train.backend: auto, cpu or cuda")
      ("precision", po::value(&a.precision)->default_value(a.precision),
       "as train.precision: auto (bf16 on cuda, fp32 on cpu), fp32 or bf16")
      ("tf32", po::value(&a.tf32)->default_value(a.tf32), "as train.tf32: TF32 in fp32 GEMMs (cuda)")
      ("cuda-attention", po::value(&a.cuda_attention)->default_value(a.cuda_attention),
       "as train.cuda_attention: auto, cudnn, tc or simple")
      ("comm", po::value(&a.comm)->default_value(a.comm),
       "as parallel.comm: auto, mpi, nccl or mpi-staged");
  bool help = false;
  std::vector<int64_t> lens;
  ModelConfig cfg;
  agree(ctx.world, [&] {
    po::variables_map vm;
    parse_verb_options("profile", args, opts, vm);
    help = vm.count("help") != 0;
    if (help) return;
    FLEXSP_CHECK(!a.out.empty(), "profile: --out FILE is required");
    FLEXSP_CHECK(a.repeats >= 1, "--repeats: must be positive, got {}", a.repeats);
    FLEXSP_CHECK(enum_parse<BackendKind>(a.backend), "--backend: '{}' is not one of {}", a.backend,
                 enum_choices<BackendKind>());
    FLEXSP_CHECK(enum_parse<Precision>(a.precision), "--precision: '{}' is not one of {}", a.precision,
                 enum_choices<Precision>());
    FLEXSP_CHECK(enum_parse<CudaAttention>(a.cuda_attention), "--cuda-attention: '{}' is not one of {}",
                 a.cuda_attention, enum_choices<CudaAttention>());
    FLEXSP_CHECK(enum_parse<CommMode>(a.comm), "--comm: '{}' is not one of {}", a.comm,
                 enum_choices<CommMode>());
    lens = parse_list(a.seq_lens, "--seq-lens");
    FLEXSP_CHECK(a.micro_batch_tokens >= 0, "--micro-batch-tokens: must be >= 0, got {}", a.micro_batch_tokens);
    ModelSection ms;
    ms.preset = a.model;
    ms.hidden = a.hidden, ms.layers = a.layers, ms.heads = a.heads, ms.kv_heads = a.kv_heads, ms.ffn = a.ffn;
    cfg = resolve_model_config(ms, {}, 256);
  });
  if (help) {
    if (ctx.rank == 0)
      std::cout << "usage: mpirun -np N flexsp profile --out FILE [options]\n\n"
                   "Times this machine's all-to-alls per group size, tensor-parallel exchanges, point-to-point "
                   "sends between rank pairs inside and across (emulated) nodes (bw_p2p_intra, bw_p2p_inter: "
                   "ring shifts, pipeline stage boundaries), forward/backward per sequence length and group "
                   "size, alone and packed several to a micro-batch (fixed_ms, per_sequence_ms, a1_ms, a2_ms), the per-step ZeRO all-reduce (bw_zero_intra, bw_zero_inter) and optimizer (optimizer_ns_per_param), "
                   "and activation bytes per token; writes the fitted cost-model file.\n\n"
                << opts << "\n";
    return 0;
  }
  Grid grid;
  agree(ctx.world, [&] {
    grid = grid_create(ctx.world, a.ranks_per_node);
    grid_bind_device(grid);
  });
  {
    Groups groups = groups_create(grid);
    std::unique_ptr<Backend> be;
    BackendOptions bo;
    agree(grid.comm, [&] {
      bo = with_env_overrides({*enum_parse<BackendKind>(a.backend), *enum_parse<Precision>(a.precision),
                               a.tf32, *enum_parse<CudaAttention>(a.cuda_attention)});
      be = make_backend(bo);
    });
    CommChoice choice = CommChoice::host;
    const bool own_gpus = ranks_have_own_gpus(grid, *groups.world);
    agree(grid.comm, [&] { choice = choose_comm(*enum_parse<CommMode>(a.comm), be->name(), nccl_built(), own_gpus); });
    BackendComms comms(groups, grid, *be, choice);
    if (grid.rank == 0)
      std::printf("profiling on the %s backend (%s activations), comm %s; tf32 %s; "
                  "cuda_attention %s\n", be->name(), dtype_name(be->act_dtype()),
                  comm_choice_name(choice), bo.tf32 ? "on" : "off", enum_name(bo.cuda_attention));
    run_profile(a, grid, groups, *be, cfg, lens);
  }
  grid_destroy(grid);
  std::fflush(stdout);
  return 0;
}

}  // namespace flexsp
