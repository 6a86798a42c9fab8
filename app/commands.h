// The verbs of the flexsp command (docs/commands.md). main() initialises MPI, picks the
// verb and calls it with the arguments after the verb. A verb returns the exit code; it
// throws flexsp::Error for bad input (inside agree() phases where ranks must agree first).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace flexsp {

struct CommandContext {
  MPI_Comm world = MPI_COMM_WORLD;
  int rank = 0;
  int size = 1;
};

using Args = std::vector<std::string>;

int cmd_pack(const CommandContext& ctx, const Args& args);
int cmd_inspect(const CommandContext& ctx, const Args& args);
int cmd_train(const CommandContext& ctx, const Args& args);
int cmd_plan(const CommandContext& ctx, const Args& args);
int cmd_profile(const CommandContext& ctx, const Args& args);
int cmd_simulate(const CommandContext& ctx, const Args& args);
int cmd_eval(const CommandContext& ctx, const Args& args);
int cmd_export(const CommandContext& ctx, const Args& args);
int cmd_import(const CommandContext& ctx, const Args& args);
int cmd_report(const CommandContext& ctx, const Args& args);

}  // namespace flexsp
