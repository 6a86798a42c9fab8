// Command-line parsing shared by the verbs: Boost.Program_options errors become one
// flexsp::Error line naming the verb ("pack: unrecognised option '--outt' (see flexsp pack
// --help)"). Call inside agree() so every rank fails together.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "app/commands.h"

namespace flexsp {

void parse_verb_options(const char* verb, const Args& args,
                        const boost::program_options::options_description& opts,
                        boost::program_options::variables_map& vm,
                        const boost::program_options::positional_options_description* positional = nullptr);

// "1,2,4" -> {1, 2, 4}: every item a whole number in [lo, hi], else an Error
// "{opt}: '{item}' is not {what}" (an empty item or a trailing comma included).
std::vector<int64_t> parse_int_list(const std::string& s, const char* opt, int64_t lo,
                                    int64_t hi, const char* what);

}  // namespace flexsp
