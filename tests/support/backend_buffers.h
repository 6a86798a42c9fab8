// Moving test data in and out of backend memory: upload a host vector into a new Buffer,
// download a Buffer (or its first n elements) into a host vector. Any backend.
#pragma once

#include <vector>

#include "lib/backend/backend.h"

namespace flexsp::testing {

template <class T>
Buffer<T> upload(Backend& be, const std::vector<T>& v) {
  Buffer<T> b(be, v.size());
  if (!v.empty()) be.copy_from_host(b.get(), v.data(), v.size() * sizeof(T));
  return b;
}

template <class T>
std::vector<T> download(Backend& be, const Buffer<T>& b, size_t n) {
  std::vector<T> v(n);
  if (n > 0) be.copy_to_host(v.data(), b.get(), n * sizeof(T));
  return v;
}

template <class T>
std::vector<T> download(Backend& be, const Buffer<T>& b) {
  return download(be, b, b.size());
}

}  // namespace flexsp::testing
