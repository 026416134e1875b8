// The configuration key table's interface: one KeyDef per key (its parser,
// printer, reload class and how its value is shown), the table in the order
// the keys are listed, and lookups by name. The table is config_keys.cpp; the
// file format, overrides and reloads over it are config.cpp.
#pragma once

#include "fdo/daemon/config.h"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon::config_detail {

// A key's parser and printer. set() returns an explanation of what a valid
// value looks like when the text is not one.
struct KeyDef {
  const char* name;
  ReloadBehavior reload;
  const char* description;
  std::function<std::optional<std::string>(Config&, std::string_view)> set;
  std::function<std::string(const Config&)> get;
  // How a value is shown in errors, reload logs and the config method; null:
  // as is. Keys whose value may carry a password hide it.
  std::function<std::string(std::string_view)> shown = nullptr;
};

// Every key, in the order the config method and --print-config list them.
const std::vector<KeyDef>& key_defs();

// The key called `name`, or null.
const KeyDef* find_key(std::string_view name);

// A key fdod no longer reads: why it went, or null for any other name. A
// configuration that still sets one parses, with a warning (config.cpp), so
// an upgrade does not stop a daemon over a key that no longer matters.
const char* retired_key(std::string_view name);

// `value` as `d` shows it (a password hidden where the key may carry one).
std::string shown(const KeyDef& d, std::string_view value);

} // namespace fdo::daemon::config_detail
