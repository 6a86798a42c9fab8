// Command-line parsing shared by the verbs: Boost.Program_options errors become one
// flexsp::Error line naming the verb ("pack: unrecognised option '--outt' (see flexsp pack
// --help)"). Call inside agree() so every rank fails together.
#pragma once

#include <boost/program_options.hpp>

#include "app/commands.h"

namespace flexsp {

void parse_verb_options(const char* verb, const Args& args,
                        const boost::program_options::options_description& opts,
                        boost::program_options::variables_map& vm,
                        const boost::program_options::positional_options_description* positional = nullptr);

}  // namespace flexsp
