// The names of enumerations: the one spelling of each value in config files, command
// lines, start-up lines, reports and checkpoints. An enumeration opts in by specialising
// EnumNames with every value and its name; enum_name, enum_parse and enum_choices then
// serve it, and the config parser (lib/config) parses a key of that type once, at load,
// with the error naming the key and the choices. The owner of an enumeration keeps its
// names beside it, so a value has one name wherever it is written.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace flexsp {

// Specialise with `static constexpr std::array<std::pair<E, const char*>, N> all`.
template <class E>
struct EnumNames;

template <class E>
const char* enum_name(E v) {
  for (const auto& [e, n] : EnumNames<E>::all)
    if (e == v) return n;
  return "?";
}

template <class E>
std::optional<E> enum_parse(std::string_view s) {
  for (const auto& [e, n] : EnumNames<E>::all)
    if (s == n) return e;
  return std::nullopt;
}

// The names, in order: "a, b, c".
template <class E>
std::string enum_choices() {
  std::string s;
  for (const auto& [e, n] : EnumNames<E>::all) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

}  // namespace flexsp
