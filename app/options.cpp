#include "app/options.h"

#include <fmt/format.h>

#include <sstream>

#include "lib/util/error.h"

namespace po = boost::program_options;

namespace flexsp {

void parse_verb_options(const char* verb, const Args& args, const po::options_description& opts,
                        po::variables_map& vm, const po::positional_options_description* positional) {
  try {
    po::command_line_parser parser(args);
    parser.options(opts);
    if (positional != nullptr) parser.positional(*positional);
    po::store(parser.run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    fail(fmt::format("{}: {} (see flexsp {} --help)", verb, e.what(), verb));
  }
}

std::vector<int64_t> parse_int_list(const std::string& s, const char* opt, int64_t lo,
                                    int64_t hi, const char* what) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    long long x = 0;
    try {
      x = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FLEXSP_CHECK(used == item.size() && !item.empty() && x >= lo && x <= hi,
                 "{}: '{}' is not {}", opt, item, what);
    v.push_back(x);
  }
  FLEXSP_CHECK(!s.empty() && s.back() != ',', "{}: '{}' is not a list like 1,2,4", opt, s);
  return v;
}

}  // namespace flexsp
