// PNG plots of scaling tables (flexsp report, flexsp simulate): tools/plot_report.py draws
// a CSV with columns ranks, sp_mode, zero, model, tokens_per_s -- log-log tokens/s against
// GPUs, one line per sp_mode value with its ideal line, and a panel of scaling efficiency
// and flexsp's speedup over static SP (docs/reports.md) -- with Debian's
// python3-matplotlib, run as /usr/bin/python3. The script is found next to this source
// file's tree (the build is always from a checkout), next to the executable's, or through
// $FLEXSP_PLOT_SCRIPT.
#pragma once

#include <string>

namespace flexsp {

// Draws csv into png. Returns "" when written, else why the plot was skipped (no python3,
// no matplotlib, no script, the script failed): the caller says so and goes on.
std::string plot_scaling_png(const std::string& csv, const std::string& png);

}  // namespace flexsp
