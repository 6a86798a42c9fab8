// The process grid (docs/parallel.md): ranks -> nodes (ranks sharing memory) -> local
// rank -> GPU.
//
// Node-aware planning assumes that the ranks of a node form one contiguous, aligned
// block. MPI launchers do not promise that (round-robin placement), so the grid builds
// its own world communicator, renumbered node by node: grid rank = node * ranks_per_node
// + local rank. Every flexsp communicator derives from it. `--ranks-per-node N` replaces
// the detected nodes by blocks of N consecutive ranks, so node-aware code is testable on
// one machine; the GPU stays bound to the real local rank.
//
// Named dimensions, innermost first: tp (parallel.tp_size consecutive ranks of one node
// share one model replica: a `device` of the planner), then the data/sequence-parallel
// devices, then the pipeline stages (parallel.pp_size, outermost): grid rank = pp_rank *
// ranks_per_stage + dp_rank * tp_size + tp_rank. A stage is a contiguous block of ranks
// that either fills whole nodes or divides a node. grid_stage() is the grid of one stage
// (what plans, tp, Ulysses and ZeRO see); grid_dp() is the grid of one tp index: one rank
// per device, where plans, Ulysses groups and ZeRO's shard groups live; its communicators
// are created once.
#pragma once

#include <mpi.h>

#include <string>

namespace flexsp {

struct Grid {
  MPI_Comm comm = MPI_COMM_NULL;  // renumbered world; owned (grid_destroy frees it)
  int rank = 0, size = 1;         // in comm
  int world_rank = 0;             // in the communicator the grid was built from
  int node = 0, nodes = 1;
  int local_rank = 0, ranks_per_node = 1;
  bool emulated = false;          // nodes come from --ranks-per-node
  int real_local_rank = 0;        // among ranks sharing memory, whatever the emulation
  int real_ranks_per_node = 1;
  int device = -1;                // GPU index; -1: no GPU (CPU backend)
  int gpus_visible = 0;
  std::string host;
  int tp_size = 1, tp_rank = 0;   // rank % tp_size
  int dp_size = 1, dp_rank = 0;   // devices (tp groups) of a stage, and mine
  int pp_size = 1, pp_rank = 0;   // pipeline stages, and mine: rank / ranks_per_stage
  int ranks_per_stage() const { return size / pp_size; }
};

// Collective over world. ranks_per_node = 0 detects nodes with MPI_Comm_split_type; N > 0
// emulates nodes of N ranks (N must divide the world size). Throws Error when detected
// nodes hold different numbers of ranks, N does not divide the world or tp_size does not
// divide the ranks per node, or pp_size does not divide the ranks or cuts nodes unevenly
// (naming the key).
Grid grid_create(MPI_Comm world, int ranks_per_node, int tp_size = 1, int pp_size = 1);
// The ranks of g's pipeline stage as a grid of their own (collective over g.comm): pp 1,
// tp and devices as g's, nodes cut to the stage (a stage inside a node: one node).
Grid grid_stage(const Grid& g);
// The ranks with g's tp index, numbered by device (collective over g.comm): its rank is
// g.dp_rank, its nodes those of g with ranks_per_node / tp ranks each; tp_size 1.
Grid grid_dp(const Grid& g);
void grid_destroy(Grid& g);

// True when the aligned block of d ranks starting at `first` lies inside one node.
bool grid_block_in_node(const Grid& g, int first, int d);

// Multi-line human-readable description (rank 0 prints it); collective (gathers hosts).
std::string grid_describe(const Grid& g);

}  // namespace flexsp
