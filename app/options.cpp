#include "app/options.h"

#include <fmt/format.h>

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

}  // namespace flexsp
