// The job protocol over the channel (ipc.h): job limits as JSON and their
// checks, errors as headers and back, and byte counts as messages print them.
#include "fdo/daemon/ipc.h"
#include "header_text.h"

#include <algorithm>
#include <climits>
#include <cstdio>

namespace fdo::daemon {

using detail::dump_header;

nlohmann::json to_json(const JobLimits& l) {
  return {{"wall_ms", static_cast<std::uint64_t>(std::max<std::int64_t>(l.wall.count(), 0))},
          {"address_space_bytes", l.address_space_bytes},
          {"max_output_bytes", l.max_output_bytes},
          {"cpu_seconds", l.cpu_seconds}};
}

Expected<JobLimits> job_limits_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error(Errc::invalid_argument, "job limits must be an object");
  auto field = [&](const char* name) -> Expected<std::uint64_t> {
    auto it = j.find(name);
    // Parsed JSON holds non-negative integers as unsigned; JSON built in
    // memory may hold them as signed.
    bool ok = it != j.end() && (it->is_number_unsigned() ||
                                (it->is_number_integer() && it->get<std::int64_t>() >= 0));
    if (!ok)
      return make_error(Errc::invalid_argument,
                        std::string("job limits: '") + name + "' must be a non-negative integer");
    return it->get<std::uint64_t>();
  };
  JobLimits l;
  FDO_TRY(std::uint64_t wall, field("wall_ms"));
  if (wall > static_cast<std::uint64_t>(INT64_MAX / 1000000))
    return make_error(Errc::invalid_argument, "job limits: 'wall_ms' is out of range");
  l.wall = std::chrono::milliseconds(static_cast<std::int64_t>(wall));
  FDO_TRY(l.address_space_bytes, field("address_space_bytes"));
  FDO_TRY(l.max_output_bytes, field("max_output_bytes"));
  FDO_TRY(l.cpu_seconds, field("cpu_seconds"));
  return l;
}

Status validate(const JobLimits& l) {
  if (l.wall.count() <= 0)
    return make_error(Errc::invalid_argument, "job wall-time limit must be positive");
  if (l.max_output_bytes == 0)
    return make_error(Errc::invalid_argument, "job output limit must be positive");
  return ok();
}

std::uint64_t effective_cpu_seconds(const JobLimits& l) {
  if (l.cpu_seconds != 0) return l.cpu_seconds;
  auto secs = std::chrono::ceil<std::chrono::seconds>(l.wall).count();
  return static_cast<std::uint64_t>(std::max<std::int64_t>(secs, 0)) + 1;
}

std::optional<Errc> parse_errc(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(Errc::internal); ++i) {
    auto code = static_cast<Errc>(i);
    if (to_string(code) == name) return code;
  }
  return std::nullopt;
}

nlohmann::json error_to_json(const Error& e) {
  return {{"code", std::string(to_string(e.code()))}, {"message", e.message()}};
}

Error error_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("code") || !j["code"].is_string() || !j.contains("message") ||
      !j["message"].is_string())
    return make_error(Errc::internal, "malformed error object from worker: " + dump_header(j));
  auto name = j["code"].get<std::string>();
  auto message = j["message"].get<std::string>();
  if (auto code = parse_errc(name)) return Error(*code, std::move(message));
  return make_error(Errc::internal,
                    "worker reported unknown error code '" + name + "': " + message);
}

std::string format_bytes(std::uint64_t bytes) {
  if (bytes >= kMiB) {
    if (bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / double(kMiB));
    return buf;
  }
  if (bytes >= kKiB && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + " KiB";
  return std::to_string(bytes) + " bytes";
}

} // namespace fdo::daemon
