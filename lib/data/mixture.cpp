// data.path parsing (see mixture.h).
#include "lib/data/mixture.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "lib/data/sampler.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

}  // namespace

std::vector<DataSourceSpec> parse_data_path(const std::string& spec) {
  std::vector<std::string> items;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    if (std::string item = trim(spec.substr(pos, comma - pos)); !item.empty()) items.push_back(item);
    pos = comma + 1;
  }
  FLEXSP_CHECK(!items.empty(), "data.path: no file given ('{}')", spec);
  bool weighted = false;
  for (const std::string& it : items) weighted |= it.find(':') != std::string::npos;
  if (!weighted) return {{items, 1.0, spec}};

  std::vector<DataSourceSpec> out;
  for (const std::string& it : items) {
    const size_t colon = it.rfind(':');
    FLEXSP_CHECK(colon != std::string::npos,
                 "data.path: '{}' has no weight (in a mixture every source needs one: FILE:WEIGHT)", it);
    const std::string name = trim(it.substr(0, colon)), w = trim(it.substr(colon + 1));
    FLEXSP_CHECK(!name.empty(), "data.path: '{}' names no file before its weight", it);
    errno = 0;
    char* end = nullptr;
    const double weight = std::strtod(w.c_str(), &end);
    FLEXSP_CHECK(!w.empty() && end == w.c_str() + w.size() && errno == 0 && std::isfinite(weight) && weight > 0,
                 "data.path: weight '{}' of '{}' is not a positive number", w, name);
    out.push_back({{name}, weight, name});
  }
  return out;
}

std::string describe_mixture(const BatchSampler& sampler, const std::vector<DataSourceSpec>& specs, int64_t steps) {
  if (sampler.num_sources() < 2) return "";
  FLEXSP_ASSERT(static_cast<int>(specs.size()) == sampler.num_sources());
  std::string s = fmt::format("data: a mixture of {} sources (each the next sequence in turn when furthest behind "
                              "its share of the tokens):\n", specs.size());
  for (int i = 0; i < sampler.num_sources(); ++i)
    s += fmt::format("  {}: share {:.3f}, {} tokens per epoch; epoch {:.2f} now, ~{:.2f} after {} steps\n",
                     specs[i].name, sampler.share(i), sampler.epoch_tokens(i),
                     sampler.epochs_done(sampler.cursor(), i), sampler.epochs_after(sampler.cursor(), i, steps),
                     steps);
  return s;
}

}  // namespace flexsp
