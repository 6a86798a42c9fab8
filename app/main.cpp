// flexsp: one SPMD executable, launched by mpirun or srun. MPI comes up first, before
// anything else; then the verb runs on every rank. Bad input found while ranks agree
// (lib/util/agree.h) ends the run with one line on rank 0 and exit code 1; any other
// error on one rank aborts all ranks, so nothing hangs.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "app/commands.h"
#include "lib/train/trainer.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace {

using flexsp::Args;
using flexsp::CommandContext;

struct Verb {
  int (*run)(const CommandContext&, const Args&);
  const char* summary;
};

const std::map<std::string, Verb>& verbs() {
  static const std::map<std::string, Verb> v = {
      {"train", {flexsp::cmd_train, "train a model (--dry-run: show the grid and the first batches)"}},
      {"pack", {flexsp::cmd_pack, "text files, directories or JSON lines -> HDF5 token dataset"}},
      {"inspect", {flexsp::cmd_inspect, "summarize a dataset (and validate it), weights, a checkpoint or a report"}},
      {"plan", {flexsp::cmd_plan, "the planner alone: per-step plans and predicted times vs baselines"}},
      {"profile", {flexsp::cmd_profile, "measure this machine and fit a cost-model file"}},
      {"simulate", {flexsp::cmd_simulate, "project step time, tokens/s and MFU over node counts with the cost model"}},
      {"eval", {flexsp::cmd_eval, "mean next-token loss of a checkpoint over a dataset"}},
      {"export", {flexsp::cmd_export, "checkpoint -> HuggingFace config.json + model.safetensors"}},
      {"import", {flexsp::cmd_import, "HuggingFace LlamaForCausalLM folder -> flexsp weights (--load-weights, eval)"}},
      {"report", {flexsp::cmd_report, "aggregate timing reports of several runs: scaling table and plot"}},
  };
  return v;
}

void print_usage() {
  std::printf("flexsp %s: long-context LLaMA training with flexible sequence parallelism\n\n",
              FLEXSP_VERSION);
  std::printf("usage: mpirun -np N flexsp VERB [options]   (or srun --mpi=pmix, or one process)\n\n");
  std::printf("verbs:\n");
  for (const auto& [name, verb] : verbs()) std::printf("  %-10s %s\n", name.c_str(), verb.summary);
  std::printf("\n`flexsp VERB --help` lists the options of a verb.\n");
}

int dispatch(const CommandContext& ctx, int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    if (ctx.rank == 0) print_usage();
    return argc < 2 ? 1 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    if (ctx.rank == 0) std::printf("flexsp %s\n", FLEXSP_VERSION);
    return 0;
  }
  const std::string name = argv[1];
  const Verb* verb = nullptr;
  flexsp::agree(ctx.world, [&] {
    auto it = verbs().find(name);
    FLEXSP_CHECK(it != verbs().end(), "unknown verb '{}' (see flexsp --help)", name);
    verb = &it->second;
  });
  return verb->run(ctx, Args(argv + 2, argv + argc));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "train") flexsp::catch_stop_signals();
  // MPI_THREAD_MULTIPLE: the communicators' progress engine (lib/comm/progress.h) tests
  // started collectives from its own thread while the main thread makes MPI calls.
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CommandContext ctx;
  MPI_Comm_rank(ctx.world, &ctx.rank);
  MPI_Comm_size(ctx.world, &ctx.size);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (ctx.rank == 0)
      flexsp::print_error(fmt::format(
          "this MPI provides thread level {} but flexsp needs MPI_THREAD_MULTIPLE ({}): use an "
          "MPI built with thread support (Debian's Open MPI is)",
          provided, MPI_THREAD_MULTIPLE));
    MPI_Finalize();
    return 1;
  }

  int rc = 0;
  try {
    rc = dispatch(ctx, argc, argv);
  } catch (const flexsp::AgreedFailure& f) {
    rc = f.exit_code;
  } catch (const std::exception& e) {
    if (ctx.size == 1) {
      flexsp::print_error(e.what());
      rc = 1;
    } else {
      flexsp::print_error(fmt::format("{} (rank {}; aborting all ranks)", e.what(), ctx.rank));
      MPI_Abort(ctx.world, 1);
    }
  }
  MPI_Finalize();
  return rc;
}
