// ZeRO stages 0-2 (zero.h): every rank keeps full replicas of the parameters and the
// gradients; stages 1-2 shard the AdamW states (and stage 2 the reduced gradients) over
// the optimizer shard group. The flat buffers are padded to a multiple of the shard count
// so that every shard has the same size (all-gather and reduce-scatter need equal blocks);
// the padding stays zero.
#include <algorithm>
#include <cmath>
#include <optional>

#include "lib/runtime/zero_parts.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

class ZeroReplicated final : public ZeroBase {
 public:
  ZeroReplicated(Backend& be, const ParamTable& table, const ParallelSection& p,
                 const ZeroPeers& peers);

  ParamProvider& provider() override;
  bool overlaps_reduce() const override {
    return stage_ <= 1 && groups_.world->size() > 1 && peers_.overlap;
  }
  void set_params(const float* host) override;
  void get_params(float* host) override;
  ShardRanges state_shards() const override;
  ShardRanges param_shards() const override;
  void get_state(float* params, float* exp_avg, float* exp_avg_sq) override;
  void set_state(const float* params, const float* exp_avg, const float* exp_avg_sq) override;
  int64_t adam_steps() const override { return adamw_->steps(); }
  void set_adam_steps(int64_t s) override { adamw_->set_steps(s); }
  void zero_grads() override;
  double step(const OptimSection& o, double lr, PhaseTimes* timers) override;

 private:
  // Stages 0-1 on several ranks: the full buffers, each unit's gradient all-reduce started
  // once the last micro-batch's backward is done with it (overlaps_reduce()).
  class ReducingFlat final : public ParamProvider {
   public:
    explicit ReducingFlat(ZeroReplicated& z) : z_(z) {}
    const float* unit_params(int u) override { return z_.flat_.unit_params(u); }
    float* unit_grads(int u) override { return z_.flat_.unit_grads(u); }
    void unit_done(int u, bool backward) override;
    void begin_micro_batch(bool last) override;
    bool collective() const override { return true; }

   private:
    ZeroReplicated& z_;
    bool last_ = false;
    std::vector<int> dones_;  // backward dones per unit in this micro-batch
  };

  // The gradient reduction: all-reduced (stages 0-1) or reduce-scattered into this rank's
  // block (stage 2). Returns this rank's share of the norm's square.
  double reduce(float* g, int64_t embed, PhaseTimes* timers);

  // Communicators come from Groups::for_backend() for buffers and from the host set for
  // scalars (the gradient norm): with NCCL the two differ.
  Comm* shard_comm_ = nullptr;  // the optimizer shard group (world or node)
  Comm* shard_host_ = nullptr;  // the same group, host set
  int64_t padded_ = 0, begin_ = 0, end_ = 0, block_ = 0;
  Buffer<float> params_, grads_, scratch_;  // scratch_: one block, for the collectives
  FlatParams flat_;
  ReducingFlat reducing_flat_{*this};
  std::vector<std::unique_ptr<CommRequest>> unit_reductions_;  // started this step
  std::unique_ptr<AdamW> adamw_;
};

ZeroReplicated::ZeroReplicated(Backend& be, const ParamTable& table, const ParallelSection& p,
                               const ZeroPeers& peers)
    : ZeroBase(be, table, p, peers), flat_(table) {
  const bool optim_node = p.zero_optim_group == ZeroGroup::node;
  const CommSet& bc = groups_.for_backend();
  shard_comm_ = optim_node ? bc.node.get() : bc.world.get();
  shard_host_ = optim_node ? groups_.node.get() : groups_.world.get();
  const int64_t shards = stage_ == 0 ? 1 : shard_comm_->size();
  padded_ = (table.total + shards - 1) / shards * shards;
  block_ = padded_ / shards;
  const int me = stage_ == 0 ? 0 : shard_comm_->rank();
  begin_ = std::min<int64_t>(me * block_, table.total);
  end_ = std::min<int64_t>(begin_ + block_, table.total);
  params_ = Buffer<float>(be, static_cast<size_t>(padded_));
  grads_ = Buffer<float>(be, static_cast<size_t>(padded_));
  if (stage_ >= 1) scratch_ = Buffer<float>(be, static_cast<size_t>(block_));
  adamw_ = std::make_unique<AdamW>(be, table, begin_, end_);
  flat_.set(params_.get(), grads_.get());
}

ParamProvider& ZeroReplicated::provider() {
  if (overlaps_reduce()) return reducing_flat_;
  return flat_;
}

void ZeroReplicated::ReducingFlat::begin_micro_batch(bool last) {
  last_ = last;
  dones_.assign(static_cast<size_t>(param_units(z_.table_)), 0);
}

void ZeroReplicated::ReducingFlat::unit_done(int u, bool backward) {
  if (!backward || !last_) return;
  // With tied embeddings the embedding's gradient is handed out twice per backward (its
  // lm_head part, then the lookup): it is final after the second.
  const int expected = u == 0 && z_.table_.tied ? 2 : 1;
  if (++dones_[static_cast<size_t>(u)] != expected) return;
  const int64_t b = param_unit_begin(z_.table_, u), e = param_unit_end(z_.table_, u);
  float* g = z_.grads_.get() + b;
  z_.unit_reductions_.push_back(z_.groups_.for_backend().world->start_all_reduce(
      g, g, static_cast<size_t>(e - b), DType::f32, ReduceOp::sum));
}

void ZeroReplicated::set_params(const float* host) {
  be_.copy_from_host(params_.get(), host, static_cast<size_t>(table_.total) * sizeof(float));
}

void ZeroReplicated::get_params(float* host) {
  be_.copy_to_host(host, params_.get(), static_cast<size_t>(table_.total) * sizeof(float));
}

ShardRanges ZeroReplicated::state_shards() const {
  ShardRanges s;
  s.ranges.emplace_back(begin_, end_);
  if (stage_ == 0) {
    s.replica = groups_.world->rank();
    s.replicas = groups_.world->size();
  } else if (shard_host_ != groups_.world.get()) {
    s.replica = groups_.cross_node->rank();
    s.replicas = groups_.cross_node->size();
  }
  return s;
}

ShardRanges ZeroReplicated::param_shards() const {
  ShardRanges s;
  s.ranges.emplace_back(0, table_.total);
  s.replica = groups_.world->rank();
  s.replicas = groups_.world->size();
  return s;
}

void ZeroReplicated::get_state(float* params, float* exp_avg, float* exp_avg_sq) {
  const size_t bytes = static_cast<size_t>(end_ - begin_) * sizeof(float);
  if (bytes == 0) return;
  be_.copy_to_host(params, params_.get() + begin_, bytes);
  be_.copy_to_host(exp_avg, adamw_->exp_avg(), bytes);
  be_.copy_to_host(exp_avg_sq, adamw_->exp_avg_sq(), bytes);
}

void ZeroReplicated::set_state(const float* params, const float* exp_avg, const float* exp_avg_sq) {
  set_params(params);
  const size_t bytes = static_cast<size_t>(end_ - begin_) * sizeof(float);
  if (bytes == 0) return;
  be_.copy_from_host(adamw_->exp_avg(), exp_avg, bytes);
  be_.copy_from_host(adamw_->exp_avg_sq(), exp_avg_sq, bytes);
}

void ZeroReplicated::zero_grads() {
  for (auto& r : unit_reductions_) r->wait();  // a step that did not reach step()
  unit_reductions_.clear();
  be_.zero(grads_.get(), grads_.bytes());
}

double ZeroReplicated::reduce(float* g, int64_t embed, PhaseTimes* timers) {
  const CommSet& bc = groups_.for_backend();
  Comm& world = *bc.world;
  if (stage_ <= 1) {
    // Either every unit's all-reduce was started during the last micro-batch (padding
    // beyond the units is zero on every rank) or none was (one rank, or no micro-batch).
    const size_t started = unit_reductions_.size();
    FLEXSP_ASSERT(started == 0 || started == static_cast<size_t>(param_units(table_)));
    for (auto& r : unit_reductions_) r->wait();
    unit_reductions_.clear();
    if (started == 0)
      world.all_reduce(g, g, static_cast<size_t>(padded_), DType::f32, ReduceOp::sum);
    double sumsq = -tp_reduce(g, 0, table_.total, timers);
    sumsq += be_.sum_squares(g, table_.total);
    if (peers_.skip_embedding) sumsq -= be_.sum_squares(g, embed);
    return sumsq;
  }
  // Reduce-scatter into this rank's block (in place: the block's own slot of g).
  const size_t B = static_cast<size_t>(block_);
  float* shard_g = g + begin_;
  Comm& sc = *shard_comm_;
  const size_t my = static_cast<size_t>(sc.rank()) * B;
  sc.reduce_scatter(g, scratch_.get(), B, DType::f32, ReduceOp::sum);
  be_.copy(g + my, scratch_.get(), B * sizeof(float));
  if (&sc != &world) bc.cross_node->all_reduce(g + my, g + my, B, DType::f32, ReduceOp::sum);
  double sumsq = -tp_reduce(shard_g, begin_, end_, timers);
  sumsq += be_.sum_squares(shard_g, end_ - begin_);
  if (peers_.skip_embedding && begin_ < embed)
    sumsq -= be_.sum_squares(shard_g, std::min(end_, embed) - begin_);
  shard_host_->all_reduce(&sumsq, &sumsq, 1, DType::f64, ReduceOp::sum);
  return sumsq;
}

double ZeroReplicated::step(const OptimSection& o, double lr, PhaseTimes* timers) {
  float* g = grads_.get();
  std::optional<ScopedPhase> timed(std::in_place, timers, Phase::grad_reduce);
  // A tied embedding's copies (first and last pipeline stage), summed before the
  // data-parallel reduction: the sum is the same either way, and here both copies are
  // whole on every rank.
  const int64_t embed = param_unit_end(table_, 0);
  if (peers_.tied) peers_.tied->all_reduce(g, g, static_cast<size_t>(embed), DType::f32, ReduceOp::sum);
  double sumsq = reduce(g, embed, timers);
  sum_over_tp_and_stages(&sumsq);
  timed.emplace(timers, Phase::optimizer);
  double scale = 0, norm = 0;
  if (!clip(sumsq, o, &scale, &norm)) return norm;
  adamw_->step(params_.get() + begin_, g + begin_, o, lr, scale);
  if (stage_ >= 1) {
    // Every rank contributes its updated block; padding blocks are zeros.
    const size_t B = static_cast<size_t>(block_);
    Comm& sc = *shard_comm_;
    be_.copy(scratch_.get(), params_.get() + static_cast<size_t>(sc.rank()) * B, B * sizeof(float));
    sc.all_gather(scratch_.get(), params_.get(), B, DType::f32);
  }
  return norm;
}

}  // namespace

std::unique_ptr<ZeroOptimizer> make_zero_replicated(Backend& be, const ParamTable& table,
                                                    const ParallelSection& p,
                                                    const ZeroPeers& peers) {
  return std::make_unique<ZeroReplicated>(be, table, p, peers);
}

}  // namespace flexsp
