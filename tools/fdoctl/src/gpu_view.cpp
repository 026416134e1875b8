#include "fdo/ctl/gpu_view.h"

#include "fdo/ctl/table.h"

#include <cstdio>

namespace fdo::ctl {

namespace {

std::string dims(const GpuDims& d) {
  std::string s = std::to_string(d[0]);
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on
  // "x" + std::to_string(...).
  if (d[1] != 1 || d[2] != 1) s.append("x").append(std::to_string(d[1]));
  if (d[2] != 1) s.append("x").append(std::to_string(d[2]));
  return s;
}

std::string ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string bounds_text(const GpuKernelBounds& b) {
  std::string s = std::to_string(b.max_threads) + " threads";
  if (b.min_blocks_per_sm > 0) s += ", " + std::to_string(b.min_blocks_per_sm) + " blocks/SM";
  return s;
}

} // namespace

std::string render_gpu_profile(const GpuProfile& gpu) {
  if (gpu.empty()) return "";
  std::string out = "\nGPU: " + std::to_string(gpu.launch_bounds.size()) + " kept launch bounds, " +
                    std::to_string(gpu.launches.size()) + " tuned launches, " +
                    std::to_string(gpu.trials.size()) + " trials\n";
  if (!gpu.launch_bounds.empty()) {
    Table t({{"arch"}, {"kernel"}, {"launch bounds"}});
    for (const GpuKernelBounds& b : gpu.launch_bounds)
      t.add_row({b.arch, b.kernel, bounds_text(b)});
    out += t.render();
  }
  if (!gpu.launches.empty()) {
    Table t({{"arch"},
             {"kernel"},
             {"items", Align::right},
             {"grid", Align::right},
             {"block", Align::right},
             {"median ms", Align::right},
             {"candidates", Align::right}});
    for (const GpuLaunchRecord& r : gpu.launches)
      t.add_row({r.arch, r.kernel, std::to_string(r.items), dims(r.chosen.grid),
                 dims(r.chosen.block), ms(r.chosen.median_ms),
                 std::to_string(r.candidates.size())});
    out += t.render();
  }
  if (!gpu.trials.empty()) {
    Table t({{"arch"},
             {"kernel"},
             {"launch bounds"},
             {"verdict"},
             {"ratio", Align::right},
             {"pairs", Align::right}});
    for (const GpuBoundsTrial& tr : gpu.trials)
      t.add_row({tr.bounds.arch, tr.bounds.kernel, bounds_text(tr.bounds),
                 std::string(to_string(tr.verdict)), ms(tr.ratio), std::to_string(tr.pairs)});
    out += t.render();
  }
  return out;
}

} // namespace fdo::ctl
