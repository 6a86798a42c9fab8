#include "lib/comm/groups.h"

#include "lib/util/error.h"

namespace flexsp {

namespace {

std::unique_ptr<Comm> split(MPI_Comm parent, int color, int key,
                            const std::shared_ptr<ProgressEngine>& progress) {
  MPI_Comm c;
  MPI_Comm_split(parent, color, key, &c);
  return make_mpi_comm(c, /*owned=*/true, progress);
}

}  // namespace

Groups groups_create(const Grid& g) {
  Groups gr;
  gr.progress = std::make_shared<ProgressEngine>();
  const auto& pe = gr.progress;
  gr.world = make_mpi_comm(g.comm, /*owned=*/false, pe);
  gr.node = split(g.comm, g.node, g.local_rank, pe);
  gr.cross_node = split(g.comm, g.local_rank, g.node, pe);
  for (int d = 1; d <= g.size; d *= 2) {
    const int first = g.rank / d * d;
    const bool complete = first + d <= g.size;
    // Every rank takes part in every split; ranks of an incomplete block get a
    // communicator too (MPI needs a color), which is dropped.
    auto c = split(g.comm, g.rank / d, g.rank, pe);
    gr.blocks.push_back(complete ? std::move(c) : nullptr);
  }
  return gr;
}

Comm& CommSet::block(int d) const {
  FLEXSP_CHECK(d >= 1 && (d & (d - 1)) == 0, "group size {} is not a power of two", d);
  int k = 0;
  while ((1 << k) < d) ++k;
  FLEXSP_CHECK(k < int(blocks.size()) && blocks[k], "no complete group of {} ranks here", d);
  return *blocks[k];
}

}  // namespace flexsp
