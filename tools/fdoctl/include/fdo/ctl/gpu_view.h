// The GPU part of a profile (ProfileDoc::gpu: tuned launches, launch bounds
// kept by the guard's trials, the trials; docs/gpu.md) for people. `fdoctl
// profile show` prints it. Pure formatting, tested alone.
#pragma once

#include "fdo/util/gpu_profile.h"

#include <string>

namespace fdo::ctl {

// "" when the document has no GPU part; otherwise a heading and a table each
// for the launch bounds, the tuned launches and the trials that exist.
std::string render_gpu_profile(const GpuProfile& gpu);

} // namespace fdo::ctl
