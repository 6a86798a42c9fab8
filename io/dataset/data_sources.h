// The data of a run (data.path, lib/data/mixture.h) on disk: each source's patterns
// expanded to files, and all files opened as one TokenDataset in order, each source a
// range of its documents -- which is what the sampler's sources are (lib/data/sampler.h).
// Opening all sources as one dataset makes them agree on vocab_size, eos_id and the
// tokenizer like the files of one dataset do.
#pragma once

#include <string>
#include <vector>

#include "io/dataset/token_dataset.h"
#include "lib/data/sampler.h"

namespace flexsp {

struct DataSource {
  std::string name;  // as data.path writes it
  double weight = 1;
  std::vector<std::string> files;
};

// Expands every pattern (globs sorted by name, byte order). Throws Error naming data.path
// and the file or pattern when a plain path does not exist or a glob matches nothing.
std::vector<DataSource> expand_data_sources(const std::string& spec);

// All files of all sources, in order.
std::vector<std::string> expand_data_path(const std::string& spec);
std::vector<std::string> data_files(const std::vector<DataSource>& sources);

// The sampler's sources: each source's documents in ds (opened from data_files(sources)).
std::vector<SamplerSource> sampler_sources(const TokenDataset& ds, const std::vector<DataSource>& sources);

}  // namespace flexsp
