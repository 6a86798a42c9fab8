// Errors. flexsp reports bad input with one exception type, flexsp::Error, whose message
// is a single line meant for the user ("data.path: file 'x.h5' not found"). Internal
// invariants use FLEXSP_ASSERT, which names file and line. How an Error ends a run
// across MPI ranks is decided in lib/util/agree.h, not here.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace flexsp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& msg) { throw Error(msg); }

}  // namespace flexsp

// Bad input: FLEXSP_CHECK(cond, "fmt string", args...) throws flexsp::Error.
#define FLEXSP_CHECK(cond, ...)                              \
  do {                                                       \
    if (!(cond)) ::flexsp::fail(::fmt::format(__VA_ARGS__)); \
  } while (0)

// Broken invariant inside flexsp: a bug, not bad input.
#define FLEXSP_ASSERT(cond)                                                            \
  do {                                                                                 \
    if (!(cond))                                                                       \
      ::flexsp::fail(::fmt::format("internal error: '{}' failed at {}:{}", #cond, __FILE__, \
                                   __LINE__));                                         \
  } while (0)
