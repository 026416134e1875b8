// One table per enum gives both directions (to_string and parse), so the
// spelling of a value is written once. Tables are constexpr arrays of
// {value, name} pairs; a value missing from its table prints as "unknown".
//
//   inline constexpr fdo::EnumNames<Colour, 2> kColourNames{{{{Colour::red, "red"},
//                                                           {Colour::blue, "blue"}}}};
//   std::string_view to_string(Colour c) { return kColourNames.name(c); }
//   std::optional<Colour> c = kColourNames.parse("red");
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace fdo {

template <class E, std::size_t N> struct EnumNames {
  std::array<std::pair<E, std::string_view>, N> entries;

  constexpr std::string_view name(E value) const {
    for (const auto& [v, n] : entries)
      if (v == value) return n;
    return "unknown";
  }
  constexpr std::optional<E> parse(std::string_view text) const {
    for (const auto& [v, n] : entries)
      if (n == text) return v;
    return std::nullopt;
  }
  // "a, b or c": for error messages that list the accepted spellings.
  std::string alternatives() const {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) out += i + 1 == N ? " or " : ", ";
      out += entries[i].second;
    }
    return out;
  }
};

} // namespace fdo
