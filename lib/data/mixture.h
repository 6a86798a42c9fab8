// data.path, parsed: the sources of a run's data and their weights. The key stays one
// string (a file, a comma-separated list, glob patterns -- one dataset -- or a weighted
// mixture "web.h5:0.6, code/*.h5:0.3, books.h5:0.1"); this is its meaning, with no file
// system access (io/dataset expands the patterns). In a mixture every item is a source,
// a pattern with ":WEIGHT" (a positive number; weights need not sum to 1); without any
// weight the whole list is one source of weight 1. A pattern cannot hold a ':' or ','.
#pragma once

#include <string>
#include <vector>

namespace flexsp {

struct DataSourceSpec {
  std::vector<std::string> patterns;  // files or glob patterns, in order
  double weight = 1;
  std::string name;                   // as data.path writes it, without the weight
};

// Throws Error naming data.path and the item: a weight that is not a positive number, an
// item without one in a mixture, an empty list.
std::vector<DataSourceSpec> parse_data_path(const std::string& spec);

class BatchSampler;

// Lines describing a mixture's sources for the run's start-up (empty for one source): each
// source's name, share, tokens per epoch, the epochs done at the sampler's cursor and the
// estimate after `steps` more steps.
std::string describe_mixture(const BatchSampler& sampler, const std::vector<DataSourceSpec>& specs, int64_t steps);

}  // namespace flexsp
