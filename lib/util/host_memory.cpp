#include "lib/util/host_memory.h"

#include <cstdlib>
#include <fstream>
#include <string>

namespace flexsp {

uint64_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("MemAvailable:", 0) == 0) return std::strtoull(line.c_str() + 13, nullptr, 10) * 1024;
  return 0;
}

}  // namespace flexsp
