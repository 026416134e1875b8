#include "fdo/util/gpu_profile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace fdo {

using nlohmann::json;

namespace {

Error gpu_error(const std::string& path, const std::string& what) {
  return make_error(Errc::invalid_argument, "profile field '" + path + "': " + what);
}

json dims_json(const GpuDims& d) {
  return json::array({d[0], d[1], d[2]});
}

json timing_json(const GpuLaunchTiming& t) {
  return {{"grid", dims_json(t.grid)}, {"block", dims_json(t.block)}, {"median_ms", t.median_ms}};
}

json bounds_json(const GpuKernelBounds& b) {
  json j = {{"arch", b.arch}, {"kernel", b.kernel}, {"max_threads", b.max_threads}};
  if (b.min_blocks_per_sm != 0) j["min_blocks_per_sm"] = b.min_blocks_per_sm;
  return j;
}

Status need_object(const json& j, const std::string& path) {
  if (!j.is_object()) return gpu_error(path, "must be an object");
  return ok();
}

Expected<std::string> read_name(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
    return gpu_error(path + "." + key, "must be a non-empty string");
  return it->get<std::string>();
}

Expected<std::int64_t> read_int(const json& j, const char* key, const std::string& path,
                                std::int64_t lo, std::int64_t hi,
                                std::optional<std::int64_t> dflt) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (dflt) return *dflt;
    return gpu_error(path + "." + key, "is required");
  }
  if (!it->is_number_integer()) return gpu_error(path + "." + key, "must be an integer");
  const auto v = it->get<std::int64_t>();
  if (v < lo || v > hi)
    return gpu_error(path + "." + key,
                     "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

Expected<double> read_ms(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>()) ||
      it->get<double>() < 0)
    return gpu_error(path + "." + key, "must be a non-negative number");
  return it->get<double>();
}

Expected<GpuDims> read_dims(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 3)
    return gpu_error(path + "." + key, "must be [x, y, z]");
  GpuDims d{};
  for (std::size_t i = 0; i < 3; ++i) {
    const json& v = (*it)[i];
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() == 0 ||
        v.get<std::uint64_t>() > std::numeric_limits<std::int32_t>::max())
      return gpu_error(path + "." + key, "dimensions must be in [1, 2^31-1]");
    d[i] = v.get<std::uint32_t>();
  }
  return d;
}

Expected<GpuLaunchTiming> read_timing(const json& j, const std::string& path) {
  FDO_TRY_STATUS(need_object(j, path));
  GpuLaunchTiming t;
  FDO_TRY(t.grid, read_dims(j, "grid", path));
  FDO_TRY(t.block, read_dims(j, "block", path));
  FDO_TRY(t.median_ms, read_ms(j, "median_ms", path));
  return t;
}

Expected<GpuKernelBounds> read_bounds(const json& j, const std::string& path) {
  FDO_TRY_STATUS(need_object(j, path));
  GpuKernelBounds b;
  FDO_TRY(b.arch, read_name(j, "arch", path));
  FDO_TRY(b.kernel, read_name(j, "kernel", path));
  FDO_TRY(std::int64_t threads, read_int(j, "max_threads", path, 1, 1024, std::nullopt));
  FDO_TRY(std::int64_t blocks, read_int(j, "min_blocks_per_sm", path, 0, 64, 0));
  b.max_threads = static_cast<int>(threads);
  b.min_blocks_per_sm = static_cast<int>(blocks);
  return b;
}

template <class T, class Read>
Status read_list(const json& gpu, const char* key, std::vector<T>& out, Read read) {
  auto it = gpu.find(key);
  if (it == gpu.end()) return ok();
  const std::string path = std::string("gpu.") + key;
  if (!it->is_array()) return gpu_error(path, "must be an array");
  for (std::size_t i = 0; i < it->size(); ++i) {
    FDO_TRY(T v, read((*it)[i], path + "[" + std::to_string(i) + "]"));
    out.push_back(std::move(v));
  }
  return ok();
}

json bounds_list_json(std::vector<GpuKernelBounds> bounds) {
  std::sort(bounds.begin(), bounds.end(), [](const auto& a, const auto& b) {
    return std::tie(a.arch, a.kernel) < std::tie(b.arch, b.kernel);
  });
  json out = json::array();
  for (const GpuKernelBounds& b : bounds)
    out.push_back(bounds_json(b));
  return out;
}

} // namespace

json to_json(const GpuProfile& gpu) {
  json out = json::object();
  if (!gpu.launches.empty()) {
    json launches = json::array();
    for (const GpuLaunchRecord& r : gpu.launches) {
      json candidates = json::array();
      for (const GpuLaunchTiming& t : r.candidates)
        candidates.push_back(timing_json(t));
      launches.push_back({{"arch", r.arch},
                          {"kernel", r.kernel},
                          {"items", r.items},
                          {"chosen", timing_json(r.chosen)},
                          {"candidates", std::move(candidates)}});
    }
    out["launches"] = std::move(launches);
  }
  if (!gpu.launch_bounds.empty()) out["launch_bounds"] = bounds_list_json(gpu.launch_bounds);
  if (!gpu.trials.empty()) {
    json trials = json::array();
    for (const GpuBoundsTrial& t : gpu.trials)
      trials.push_back({{"bounds", bounds_json(t.bounds)},
                        {"verdict", to_string(t.verdict)},
                        {"ratio", t.ratio},
                        {"pairs", t.pairs}});
    out["trials"] = std::move(trials);
  }
  return out;
}

Expected<GpuProfile> gpu_profile_from_json(const json& j) {
  GpuProfile gpu;
  if (j.is_null()) return gpu;
  FDO_TRY_STATUS(need_object(j, "gpu"));
  FDO_TRY_STATUS(read_list(
      j, "launches", gpu.launches,
      [](const json& r, const std::string& path) -> Expected<GpuLaunchRecord> {
        FDO_TRY_STATUS(need_object(r, path));
        GpuLaunchRecord rec;
        FDO_TRY(rec.arch, read_name(r, "arch", path));
        FDO_TRY(rec.kernel, read_name(r, "kernel", path));
        FDO_TRY(
            std::int64_t items,
            read_int(r, "items", path, 1, std::numeric_limits<std::int64_t>::max(), std::nullopt));
        rec.items = static_cast<std::uint64_t>(items);
        auto chosen = r.find("chosen");
        if (chosen == r.end()) return gpu_error(path + ".chosen", "is required");
        FDO_TRY(rec.chosen, read_timing(*chosen, path + ".chosen"));
        if (auto c = r.find("candidates"); c != r.end()) {
          if (!c->is_array()) return gpu_error(path + ".candidates", "must be an array");
          for (std::size_t i = 0; i < c->size(); ++i) {
            FDO_TRY(GpuLaunchTiming t,
                    read_timing((*c)[i], path + ".candidates[" + std::to_string(i) + "]"));
            rec.candidates.push_back(t);
          }
        }
        return rec;
      }));
  FDO_TRY_STATUS(read_list(j, "launch_bounds", gpu.launch_bounds, read_bounds));
  for (std::size_t i = 0; i < gpu.launch_bounds.size(); ++i)
    for (std::size_t k = 0; k < i; ++k)
      if (gpu.launch_bounds[i].arch == gpu.launch_bounds[k].arch &&
          gpu.launch_bounds[i].kernel == gpu.launch_bounds[k].kernel)
        return gpu_error("gpu.launch_bounds[" + std::to_string(i) + "]",
                         "names kernel " + gpu.launch_bounds[i].kernel + " on " +
                             gpu.launch_bounds[i].arch + " a second time");
  FDO_TRY_STATUS(read_list(j, "trials", gpu.trials,
                           [](const json& t, const std::string& path) -> Expected<GpuBoundsTrial> {
                             FDO_TRY_STATUS(need_object(t, path));
                             GpuBoundsTrial trial;
                             auto b = t.find("bounds");
                             if (b == t.end()) return gpu_error(path + ".bounds", "is required");
                             FDO_TRY(trial.bounds, read_bounds(*b, path + ".bounds"));
                             auto v = t.find("verdict");
                             auto verdict = v != t.end() && v->is_string()
                                                ? parse_trial_verdict(v->get<std::string>())
                                                : std::nullopt;
                             if (!verdict)
                               return gpu_error(path + ".verdict",
                                                "must be one of " + trial_verdict_alternatives());
                             trial.verdict = *verdict;
                             FDO_TRY(trial.ratio, read_ms(t, "ratio", path));
                             FDO_TRY(std::int64_t pairs, read_int(t, "pairs", path, 0, 1 << 20, 0));
                             trial.pairs = static_cast<int>(pairs);
                             return trial;
                           }));
  return gpu;
}

json gpu_digest_part(const GpuProfile& gpu) {
  if (gpu.launch_bounds.empty()) return nullptr;
  return bounds_list_json(gpu.launch_bounds);
}

const GpuLaunchRecord* find_launch(const GpuProfile& gpu, const std::string& arch,
                                   const std::string& kernel, std::uint64_t items) {
  for (const GpuLaunchRecord& r : gpu.launches)
    if (r.arch == arch && r.kernel == kernel && r.items == items) return &r;
  return nullptr;
}

const GpuKernelBounds* find_bounds(const GpuProfile& gpu, const std::string& arch,
                                   const std::string& kernel) {
  for (const GpuKernelBounds& b : gpu.launch_bounds)
    if (b.arch == arch && b.kernel == kernel) return &b;
  return nullptr;
}

const GpuBoundsTrial* find_trial(const GpuProfile& gpu, const GpuKernelBounds& bounds) {
  for (const GpuBoundsTrial& t : gpu.trials)
    if (t.bounds == bounds) return &t;
  return nullptr;
}

void set_launch(GpuProfile& gpu, GpuLaunchRecord record) {
  for (GpuLaunchRecord& r : gpu.launches)
    if (r.arch == record.arch && r.kernel == record.kernel && r.items == record.items) {
      r = std::move(record);
      return;
    }
  gpu.launches.push_back(std::move(record));
}

void set_bounds(GpuProfile& gpu, GpuKernelBounds bounds) {
  for (GpuKernelBounds& b : gpu.launch_bounds)
    if (b.arch == bounds.arch && b.kernel == bounds.kernel) {
      b = std::move(bounds);
      return;
    }
  gpu.launch_bounds.push_back(std::move(bounds));
}

} // namespace fdo
