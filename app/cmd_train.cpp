// flexsp train: configuration -> process grid -> dataset -> batches -> steps.
// Start-up runs in agree() phases so that bad input ends every rank with one line.
// --dry-run stops after showing the grid and the first global batches; it is how the
// demo and the tests see what a run would train on without training. The loop itself
// lives in lib/train, checkpoints and --resume included.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>

#include "app/commands.h"
#include "io/dataset/data_sources.h"
#include "io/dataset/token_dataset.h"
#include "lib/config/config.h"
#include "lib/data/mixture.h"
#include "lib/data/sampler.h"
#include "lib/parallel/parallel_state.h"
#include "lib/train/trainer.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

namespace {

po::options_description train_flags() {
  po::options_description d("flexsp train options");
  d.add_options()("help,h", "show this help")(
      "dry-run", "print the process grid and the global batches of the first train.steps steps, then stop")(
      "load-weights", po::value<std::string>(), "start from these weights (HDF5, /model/<HF name>)")(
      "dump-weights", po::value<std::string>(), "write the final weights here (HDF5, /model/<HF name>)")(
      "print-plans", "rank 0 prints every step's plan (micro-batches, SP groups, tokens)")(
      "resume", po::value<std::string>(),
      "continue from a checkpoint: 'auto' (the one checkpoint.dir/latest names; none: start "
      "fresh) or a checkpoint file");
  return d;
}

std::string lengths_text(const std::vector<SeqRef>& batch, size_t max_shown) {
  std::string s;
  for (size_t i = 0; i < batch.size() && i < max_shown; ++i)
    s += fmt::format("{}{}", i ? " " : "", batch[i].length);
  if (batch.size() > max_shown) s += fmt::format(" ... (+{} more)", batch.size() - max_shown);
  return s;
}

// Every rank computes the batches; ranks must agree (a fingerprint all-reduce), and
// rank 0 prints them.
void print_batches(const Grid& grid, Comm& world, BatchSampler& sampler, int64_t steps) {
  for (int64_t step = 0; step < steps; ++step) {
    const std::vector<SeqRef> batch = sampler.next();
    int64_t tokens = 0;
    for (const SeqRef& s : batch) tokens += s.length;
    const uint64_t fp = batch_fingerprint(batch);
    int64_t lo = static_cast<int64_t>(fp), hi = lo;
    world.all_reduce(&lo, &lo, 1, DType::i64, ReduceOp::min);
    world.all_reduce(&hi, &hi, 1, DType::i64, ReduceOp::max);
    FLEXSP_ASSERT(lo == hi);  // every rank drew the same batch
    if (grid.rank == 0)
      std::printf("step %lld: %zu sequences, %lld tokens, fingerprint %016llx, lengths [%s]\n",
                  static_cast<long long>(step), batch.size(), static_cast<long long>(tokens),
                  static_cast<unsigned long long>(fp), lengths_text(batch, 64).c_str());
  }
  if (grid.rank == 0) {
    std::printf("data cursor after %lld steps: %s\n", static_cast<long long>(steps),
                cursor_text(sampler.cursor()).c_str());
  }
}

}  // namespace

int cmd_train(const CommandContext& ctx, const Args& args) {
  RunConfig cfg;
  po::variables_map vm;
  const po::options_description flags = train_flags();
  agree(ctx.world, [&] { parse_run_config(args, flags, vm, cfg); });
  if (vm.count("help")) {
    if (ctx.rank == 0) {
      std::cout << "usage: flexsp train --config run.ini [--section.key=value ...] [--dry-run]\n"
                << "                    [--load-weights W.h5] [--dump-weights W.h5] [--resume auto|CKPT.h5]\n\n"
                << flags << "\n" << config_options(cfg) << "\n";
    }
    return 0;
  }
  agree(ctx.world, [&] {
    FLEXSP_CHECK(!cfg.data.path.empty(), "data.path: no dataset given (set [data] path or --data.path)");
  });

  ParallelState ps(ctx.world, cfg);
  const Grid& grid = ps.world();

  // Every rank opens the dataset (offsets only); rank 0 validates every token once.
  // A mixture's sources are opened as one dataset, each a range of its documents.
  std::unique_ptr<TokenDataset> ds;
  std::vector<DataSource> sources;
  agree(grid.comm, [&] {
    sources = expand_data_sources(cfg.data.path);
    ds = std::make_unique<TokenDataset>(TokenDataset::open(data_files(sources)));
    if (grid.rank == 0) ds->validate();
  });
  std::vector<int64_t> lengths(ds->num_docs());
  for (int64_t i = 0; i < ds->num_docs(); ++i) lengths[i] = ds->doc_length(i);

  std::unique_ptr<BatchSampler> sampler;
  agree(grid.comm, [&] {
    sampler = std::make_unique<BatchSampler>(
        std::move(lengths),
        SamplerOptions{cfg.train.seed, cfg.data.max_seq_len, cfg.train.global_batch_tokens,
                       cfg.train.global_batch_seqs},
        sampler_sources(*ds, sources));
  });

  const std::string grid_text = grid_describe(grid);
  if (grid.rank == 0) {
    std::printf("%s", grid_text.c_str());
    std::printf("dataset: %s: %lld documents (%lld with targets), %lld tokens, vocab %d\n",
                cfg.data.path.c_str(), static_cast<long long>(ds->num_docs()),
                static_cast<long long>(sampler->usable_docs()),
                static_cast<long long>(ds->num_tokens()), ds->vocab_size());
  }
  int rc = 0;
  if (vm.count("dry-run")) {
    if (grid.rank == 0)
      std::printf("%s", describe_mixture(*sampler, parse_data_path(cfg.data.path), cfg.train.steps).c_str());
    print_batches(grid, *ps.world_groups().world, *sampler, cfg.train.steps);
  } else {
    TrainOptions opts;
    if (vm.count("load-weights")) opts.load_weights = vm["load-weights"].as<std::string>();
    if (vm.count("dump-weights")) opts.dump_weights = vm["dump-weights"].as<std::string>();
    if (vm.count("resume")) opts.resume = vm["resume"].as<std::string>();
    opts.print_plans = vm.count("print-plans") > 0;
    const auto records = run_training(cfg, ps, *ds, *sampler, opts);
    if (grid.rank == 0 && !records.empty()) {
      double ms = 0;
      for (const StepRecord& r : records) ms += r.ms;
      std::printf("trained %zu steps in %.1f s: loss %.4f -> %.4f\n", records.size(), ms / 1e3,
                  records.front().loss, records.back().loss);
    }
  }
  return rc;
}

}  // namespace flexsp
