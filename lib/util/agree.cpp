#include "lib/util/agree.h"

#include <cstdio>
#include <exception>
#include <vector>

#include "lib/util/error.h"

namespace flexsp {

void print_error(const std::string& msg) {
  std::fprintf(stderr, "flexsp: error: %s\n", msg.c_str());
  std::fflush(stderr);
}

void agree(MPI_Comm comm, const std::function<void()>& fn) {
  std::string msg;
  bool failed = false;
  try {
    fn();
  } catch (const AgreedFailure&) {
    throw;  // a nested agree() already reported and synchronized
  } catch (const std::exception& e) {
    failed = true;
    msg = e.what();
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int mine = failed ? rank : size, first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return;
  // The first failing rank's message travels to rank 0, which prints it.
  if (first != 0) {
    if (rank == first) {
      int n = static_cast<int>(msg.size());
      MPI_Send(&n, 1, MPI_INT, 0, 7001, comm);
      MPI_Send(msg.data(), n, MPI_CHAR, 0, 7002, comm);
    } else if (rank == 0) {
      int n = 0;
      MPI_Recv(&n, 1, MPI_INT, first, 7001, comm, MPI_STATUS_IGNORE);
      std::vector<char> buf(static_cast<size_t>(n));
      MPI_Recv(buf.data(), n, MPI_CHAR, first, 7002, comm, MPI_STATUS_IGNORE);
      msg.assign(buf.begin(), buf.end());
      msg = fmt::format("{} (rank {})", msg, first);
    }
  }
  if (rank == 0) print_error(msg);
  throw AgreedFailure{1};
}

}  // namespace flexsp
