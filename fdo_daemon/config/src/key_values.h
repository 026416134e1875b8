// What a key's value may be: the parsers of integers, numbers, booleans, event
// names, listen addresses and store locations (key_values.cpp), and the kinds
// of key the table builds most keys from (an integer, milliseconds or a number
// within limits, an event list, one of an enum's names) over one Config field.
#pragma once

#include "config_keys.h"
#include "fdo/util/enum_names.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace fdo::daemon::config_detail {

using std::chrono::milliseconds;

std::string_view trim(std::string_view s);
std::optional<std::uint64_t> parse_u64(std::string_view s);
std::optional<double> parse_double(std::string_view s);
std::string format_double(double v);
std::optional<bool> parse_bool(std::string_view v);
bool valid_event_name(std::string_view s);

// metrics_listen: "", "PORT", "A.B.C.D:PORT" or "[v6]:PORT"; the reason if not.
std::optional<std::string> check_listen_address(std::string_view s);

// profile_store: "sqlite" (or empty) or a libpq URI; the reason if not.
std::optional<std::string> check_profile_store(std::string_view s);

template <class T, class Ref>
KeyDef uint_key(const char* name, ReloadBehavior reload, const char* description, Ref ref,
                std::uint64_t min, std::uint64_t max) {
  KeyDef d{name, reload, description, nullptr, nullptr};
  d.set = [ref, min, max](Config& c, std::string_view v) -> std::optional<std::string> {
    auto n = parse_u64(v);
    if (!n || *n < min || *n > max)
      return "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    ref(c) = static_cast<T>(*n);
    return std::nullopt;
  };
  d.get = [ref](const Config& c) {
    return std::to_string(static_cast<std::uint64_t>(ref(const_cast<Config&>(c))));
  };
  return d;
}

template <class Ref>
KeyDef ms_key(const char* name, ReloadBehavior reload, const char* description, Ref ref,
              std::uint64_t min, std::uint64_t max) {
  KeyDef d{name, reload, description, nullptr, nullptr};
  d.set = [ref, min, max](Config& c, std::string_view v) -> std::optional<std::string> {
    auto n = parse_u64(v);
    if (!n || *n < min || *n > max)
      return "a whole number of milliseconds from " + std::to_string(min) + " to " +
             std::to_string(max);
    ref(c) = milliseconds(static_cast<milliseconds::rep>(*n));
    return std::nullopt;
  };
  d.get = [ref](const Config& c) { return std::to_string(ref(const_cast<Config&>(c)).count()); };
  return d;
}

template <class Ref>
KeyDef double_key(const char* name, ReloadBehavior reload, const char* description, Ref ref,
                  double min, double max) {
  KeyDef d{name, reload, description, nullptr, nullptr};
  d.set = [ref, min, max](Config& c, std::string_view v) -> std::optional<std::string> {
    auto n = parse_double(v);
    if (!n || *n < min || *n > max)
      return "a number from " + format_double(min) + " to " + format_double(max);
    ref(c) = *n;
    return std::nullopt;
  };
  d.get = [ref](const Config& c) { return format_double(ref(const_cast<Config&>(c))); };
  return d;
}

enum class EmptyList { allowed, refused };

template <class Ref>
KeyDef event_list_key(const char* name, ReloadBehavior reload, const char* description, Ref ref,
                      EmptyList empty) {
  KeyDef d{name, reload, description, nullptr, nullptr};
  d.set = [ref, empty](Config& c, std::string_view s) -> std::optional<std::string> {
    std::vector<std::string> events;
    if (trim(s).empty() && empty == EmptyList::refused)
      return "a comma-separated list of at least one event name";
    while (!s.empty()) {
      std::size_t comma = s.find(',');
      std::string_view item = trim(s.substr(0, comma));
      if (!valid_event_name(item))
        return "a comma-separated list of event names (letters, digits, _ - : . = /)";
      if (std::find(events.begin(), events.end(), item) != events.end())
        return "a list without duplicates ('" + std::string(item) + "' repeats)";
      events.emplace_back(item);
      if (comma == std::string_view::npos) break;
      s.remove_prefix(comma + 1);
      if (trim(s).empty()) return "a comma-separated list of event names (trailing comma)";
    }
    ref(c) = std::move(events);
    return std::nullopt;
  };
  d.get = [ref](const Config& c) {
    std::string out;
    for (const auto& e : ref(const_cast<Config&>(c))) {
      if (!out.empty()) out += ',';
      out += e;
    }
    return out;
  };
  return d;
}

// A key whose value is one of `names` (the error lists them).
template <class E, std::size_t N, class Ref>
KeyDef enum_key(const char* name, ReloadBehavior reload, const char* description,
                const EnumNames<E, N>& names, Ref ref) {
  KeyDef d{name, reload, description, nullptr, nullptr};
  d.set = [&names, ref](Config& c, std::string_view s) -> std::optional<std::string> {
    auto e = names.parse(s);
    if (!e) return names.alternatives();
    ref(c) = *e;
    return std::nullopt;
  };
  d.get = [&names, ref](const Config& c) {
    return std::string(names.name(ref(const_cast<Config&>(c))));
  };
  return d;
}

} // namespace fdo::daemon::config_detail
