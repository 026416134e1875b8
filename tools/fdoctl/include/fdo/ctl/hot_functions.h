// The sampled side of a profile for people: the hottest functions by sampled
// time share with their miss samples (`fdoctl profile show`), from the
// document's hardware["sampling"] record (docs/perf.md, "Sampling during
// stages"). Pure formatting, tested alone.
#pragma once

#include "fdo/util/profile.h"

#include <cstddef>
#include <string>

namespace fdo::ctl {

// "" when the document has no sampling record; otherwise a heading line and a
// table of at most `limit` functions, hottest first, named by source name
// (with the PGO name beside it when it differs).
std::string render_hot_functions(const ProfileDoc& doc, std::size_t limit = 10);

// "" when no function has a layout other than normal; otherwise the i-cache
// layout the profile compiles with (docs/perf.md, "i-cache layout"): the
// functions laid out hot and those laid out cold, by source name.
std::string render_code_layout(const ProfileDoc& doc);
// Functions with argument value profiles: each argument's most frequent value
// and its share, what value specialization decides on ("" when none).
std::string render_arg_values(const ProfileDoc& doc);

} // namespace fdo::ctl
