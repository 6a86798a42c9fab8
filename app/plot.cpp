#include "app/plot.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

extern char** environ;

namespace fs = std::filesystem;

namespace flexsp {

namespace {

std::string find_plot_script() {
  std::vector<fs::path> c;
  if (const char* e = std::getenv("FLEXSP_PLOT_SCRIPT")) c.emplace_back(e);
  // The checkout it was built from (CMake; not __FILE__, which ccache's base_dir makes relative).
  c.push_back(fs::path(FLEXSP_SOURCE_DIR) / "tools" / "plot_report.py");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) c.push_back(exe.parent_path().parent_path() / "tools" / "plot_report.py");
  for (const fs::path& p : c)
    if (fs::is_regular_file(p, ec)) return p.string();
  return "";
}

}  // namespace

std::string plot_scaling_png(const std::string& csv, const std::string& png) {
  const std::string py = "/usr/bin/python3";
  if (::access(py.c_str(), X_OK) != 0) return "no /usr/bin/python3";
  const std::string script = find_plot_script();
  if (script.empty()) return "tools/plot_report.py not found (set FLEXSP_PLOT_SCRIPT)";
  std::vector<std::string> argv_s = {py, script, csv, png};
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, py.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return "cannot run python3";
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return "tools/plot_report.py did not finish";
  const int rc = WEXITSTATUS(status);
  if (rc == 3) return "python3-matplotlib is not installed (apt-get install python3-matplotlib)";
  if (rc != 0) return fmt::format("tools/plot_report.py failed (exit {})", rc);
  return "";
}

}  // namespace flexsp
