// The message of the flexsp::Error that fn throws, or "<no error>": lets a test check that
// bad input is reported and what the one line names.
#pragma once

#include <functional>
#include <string>

#include "lib/util/error.h"

namespace flexsp {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace flexsp
