#include "lib/grid/grid.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "lib/util/error.h"

namespace flexsp {

Grid grid_create(MPI_Comm world, int ranks_per_node, int tp_size, int pp_size) {
  Grid g;
  int wsize = 1;
  MPI_Comm_rank(world, &g.world_rank);
  MPI_Comm_size(world, &wsize);
  FLEXSP_CHECK(ranks_per_node >= 0, "parallel.ranks_per_node: must be >= 0, got {}", ranks_per_node);
  FLEXSP_CHECK(ranks_per_node == 0 || wsize % ranks_per_node == 0,
               "parallel.ranks_per_node: {} does not divide the {} ranks", ranks_per_node, wsize);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  g.host = host;

  // Real nodes: ranks that share memory. A node is named by its lowest world rank.
  MPI_Comm shm;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, g.world_rank, MPI_INFO_NULL, &shm);
  MPI_Comm_rank(shm, &g.real_local_rank);
  MPI_Comm_size(shm, &g.real_ranks_per_node);
  int leader = g.world_rank;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shm);
  MPI_Comm_free(&shm);

  // Node index = rank of the leader among all leaders; check all nodes are equal size.
  std::vector<int> leaders(wsize), sizes(wsize);
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, world);
  MPI_Allgather(&g.real_ranks_per_node, 1, MPI_INT, sizes.data(), 1, MPI_INT, world);
  std::vector<int> uniq = leaders;
  std::sort(uniq.begin(), uniq.end());
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  const int real_node = int(std::lower_bound(uniq.begin(), uniq.end(), leader) - uniq.begin());
  const auto [mn, mx] = std::minmax_element(sizes.begin(), sizes.end());
  FLEXSP_CHECK(*mn == *mx,
               "nodes hold different numbers of ranks ({} to {}); flexsp needs the same "
               "number of ranks on every node", *mn, *mx);

  // Renumber node by node so that a node is a contiguous block of grid ranks.
  const int key = real_node * g.real_ranks_per_node + g.real_local_rank;
  MPI_Comm_split(world, 0, key, &g.comm);
  MPI_Comm_rank(g.comm, &g.rank);
  MPI_Comm_size(g.comm, &g.size);

  if (ranks_per_node > 0) {
    g.emulated = true;
    g.ranks_per_node = ranks_per_node;
  } else {
    g.ranks_per_node = g.real_ranks_per_node;
  }
  g.nodes = g.size / g.ranks_per_node;
  g.node = g.rank / g.ranks_per_node;
  g.local_rank = g.rank % g.ranks_per_node;
  FLEXSP_CHECK(tp_size >= 1 && g.ranks_per_node % tp_size == 0,
               "parallel.tp_size: {} does not divide the {} ranks per node (a tensor-parallel "
               "group lies inside one node)", tp_size, g.ranks_per_node);
  FLEXSP_CHECK(pp_size >= 1 && g.size % pp_size == 0,
               "parallel.pp_size: {} does not divide the {} ranks", pp_size, g.size);
  const int rps = g.size / pp_size;
  FLEXSP_CHECK(rps % g.ranks_per_node == 0 || g.ranks_per_node % rps == 0,
               "parallel.pp_size: a stage of {} ranks neither fills whole nodes nor divides a "
               "node of {} ranks", rps, g.ranks_per_node);
  FLEXSP_CHECK(rps % tp_size == 0,
               "parallel.tp_size: {} does not divide the {} ranks of a pipeline stage", tp_size, rps);
  g.tp_size = tp_size;
  g.tp_rank = g.rank % tp_size;
  g.pp_size = pp_size;
  g.pp_rank = g.rank / rps;
  g.dp_size = rps / tp_size;
  g.dp_rank = g.rank % rps / tp_size;
  return g;
}

Grid grid_stage(const Grid& g) {
  Grid d = g;
  MPI_Comm_split(g.comm, g.pp_rank, g.rank, &d.comm);
  MPI_Comm_rank(d.comm, &d.rank);
  MPI_Comm_size(d.comm, &d.size);
  d.ranks_per_node = std::min(g.ranks_per_node, d.size);
  d.nodes = d.size / d.ranks_per_node;
  d.node = d.rank / d.ranks_per_node;
  d.local_rank = d.rank % d.ranks_per_node;
  d.pp_size = 1;
  d.pp_rank = 0;
  return d;
}

Grid grid_dp(const Grid& g) {
  Grid d = g;
  MPI_Comm_split(g.comm, g.tp_rank, g.rank, &d.comm);
  MPI_Comm_rank(d.comm, &d.rank);
  MPI_Comm_size(d.comm, &d.size);
  d.ranks_per_node = g.ranks_per_node / g.tp_size;
  d.local_rank = g.local_rank / g.tp_size;
  d.tp_size = 1;
  d.tp_rank = 0;
  d.dp_size = d.size;
  d.dp_rank = d.rank;
  return d;
}

void grid_destroy(Grid& g) {
  if (g.comm != MPI_COMM_NULL) MPI_Comm_free(&g.comm);
  g.comm = MPI_COMM_NULL;
}

bool grid_block_in_node(const Grid& g, int first, int d) {
  return first / g.ranks_per_node == (first + d - 1) / g.ranks_per_node;
}

std::string grid_describe(const Grid& g) {
  // Gather (host, device, world rank) per grid rank to rank 0.
  struct Row {
    char host[64];
    int world_rank, device, real_local;
  } mine{};
  std::snprintf(mine.host, sizeof(mine.host), "%s", g.host.c_str());
  mine.world_rank = g.world_rank;
  mine.device = g.device;
  mine.real_local = g.real_local_rank;
  std::vector<Row> rows(g.size);
  MPI_Gather(&mine, sizeof(Row), MPI_BYTE, rows.data(), sizeof(Row), MPI_BYTE, 0, g.comm);
  if (g.rank != 0) return {};
  std::string s = fmt::format("process grid: {} ranks = {} node(s) x {} ranks per node{}; "
                              "{}{} device(s) x tp {}\n",
                              g.size, g.nodes, g.ranks_per_node,
                              g.emulated ? " (emulated with --ranks-per-node)" : "",
                              g.pp_size > 1 ? fmt::format("{} pipeline stages x ", g.pp_size) : "",
                              g.dp_size, g.tp_size);
  for (int r = 0; r < g.size; ++r)
    s += fmt::format("  rank {:>3}  node {:>2}  local {:>2}  {}device {:>3}  tp {}  host {}  mpi rank {}  {}\n",
                     r, r / g.ranks_per_node, r % g.ranks_per_node,
                     g.pp_size > 1 ? fmt::format("stage {}  ", r / g.ranks_per_stage()) : "",
                     r % g.ranks_per_stage() / g.tp_size, r % g.tp_size, rows[r].host,
                     rows[r].world_rank,
                     rows[r].device >= 0 ? fmt::format("gpu {}", rows[r].device) : "cpu");
  return s;
}

}  // namespace flexsp
