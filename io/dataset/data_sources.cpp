// data.path on disk (see data_sources.h).
#include "io/dataset/data_sources.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "lib/data/mixture.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

std::vector<std::string> expand_pattern(const std::string& item) {
  if (item.find_first_of("*?[") == std::string::npos) {
    std::error_code ec;
    FLEXSP_CHECK(std::filesystem::exists(item, ec), "data.path: file '{}' not found", item);
    return {item};
  }
  glob_t g{};
  const int rc = ::glob(item.c_str(), 0, nullptr, &g);
  std::vector<std::string> hits;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) hits.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  FLEXSP_CHECK(rc != GLOB_NOMATCH, "data.path: pattern '{}' matches no file", item);
  FLEXSP_CHECK(rc == 0, "data.path: cannot expand pattern '{}'", item);
  std::sort(hits.begin(), hits.end());  // byte order, whatever the locale
  return hits;
}

}  // namespace

std::vector<DataSource> expand_data_sources(const std::string& spec) {
  std::vector<DataSource> out;
  for (const DataSourceSpec& s : parse_data_path(spec)) {
    DataSource d{s.name, s.weight, {}};
    for (const std::string& p : s.patterns) {
      std::vector<std::string> files = expand_pattern(p);
      d.files.insert(d.files.end(), files.begin(), files.end());
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<std::string> data_files(const std::vector<DataSource>& sources) {
  std::vector<std::string> files;
  for (const DataSource& s : sources) files.insert(files.end(), s.files.begin(), s.files.end());
  return files;
}

std::vector<std::string> expand_data_path(const std::string& spec) { return data_files(expand_data_sources(spec)); }

std::vector<SamplerSource> sampler_sources(const TokenDataset& ds, const std::vector<DataSource>& sources) {
  std::vector<SamplerSource> out;
  size_t file = 0;
  for (const DataSource& s : sources) {
    const int64_t first = ds.first_doc_of_file(file);
    file += s.files.size();
    out.push_back({first, ds.first_doc_of_file(file) - first, s.weight});
  }
  return out;
}

}  // namespace flexsp
