// fdoctl gc [--dry-run] [--max-age AGE]: removes, through fdod's gc method,
// programs unused and unpinned profiles unchanged for longer than AGE (the
// daemon's gc_max_age_days by default) that no remaining program uses, and
// (as root or fdod's user) cached objects whose program is gone
// (docs/fdoctl.md, "gc"). With fdod stopped, the same on --state-dir's files
// (gc_offline.cpp).
#include "context.h"
#include "fdo/ctl/client.h"
#include "fdo/ctl/table.h"

#include <charconv>

namespace fdo::ctl {

using nlohmann::json;

Expected<std::int64_t> parse_age_seconds(const std::string& text) {
  std::int64_t n = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, n);
  std::string_view unit(p, static_cast<std::size_t>(end - p));
  std::int64_t scale = unit.empty() || unit == "d" ? 86400
                       : unit == "h"               ? 3600
                       : unit == "m"               ? 60
                       : unit == "s"               ? 1
                                                   : 0;
  constexpr std::int64_t kMaxSeconds = std::int64_t(36500) * 86400;
  if (ec != std::errc() || p == text.data() || n < 0 || scale == 0 || n > kMaxSeconds / scale)
    return make_error(Errc::invalid_argument,
                      "--max-age takes a whole number of days, or of hours, minutes or seconds "
                      "with h, m or s after it (30, 12h, 90s; at most 100 years), got '" +
                          text + "'");
  return n * scale;
}

namespace {

// Through fdod when it answers; otherwise, with --state-dir, on its files.
Expected<json> collect(Context& ctx, const GcOptions& o, const json& params) {
  ClientOptions quick;
  quick.timeout = std::chrono::seconds(5);
  const bool running = RpcClient::connect(ctx.globals().socket, quick).has_value();
  if (running || ctx.globals().state_dir.empty()) {
    if (ctx.globals().offline && running)
      return make_error(Errc::invalid_argument, "fdod answers on " + ctx.globals().socket +
                                                    "; gc runs through it, not --offline");
    FDO_TRY(auto backend, ctx.backend(Need::daemon));
    return call(*backend, "gc", params);
  }
  if (o.max_age.empty())
    return make_error(Errc::invalid_argument,
                      "fdod is not running: gc on --state-dir needs --max-age (fdod's "
                      "gc_max_age_days is not known here)");
  ctx.note("fdod does not answer on " + ctx.globals().socket + "; collecting in " +
           ctx.globals().state_dir + " directly (no audit records: there is no daemon)");
  return gc_state_dir(ctx.globals().state_dir, o.dry_run, params["max_age_s"].get<std::int64_t>());
}

} // namespace

Status cmd_gc(Context& ctx, const GcOptions& o) {
  json params = {{"dry_run", o.dry_run}};
  if (!o.max_age.empty()) {
    FDO_TRY(std::int64_t seconds, parse_age_seconds(o.max_age));
    params["max_age_s"] = seconds;
  }
  FDO_TRY(json r, collect(ctx, o, params));
  if (ctx.json_output()) {
    ctx.emit(r);
    return ok();
  }
  const std::string verb = o.dry_run ? "would remove" : "removed";
  Table t({{"what"}, {"id"}, {"name"}, {"last used / changed"}});
  for (const json& p : r["programs"])
    t.add_row({"program", short_key(p.value("program", "")), p.value("name", ""),
               p.value("last_used", "")});
  for (const json& p : r["profiles"]) {
    // Appended, not "v" + ...: GCC 12 warns (-Wrestrict) on that spelling.
    std::string version("v");
    version += std::to_string(p.value("version", std::int64_t(0)));
    t.add_row(
        {"profile", short_key(p.value("profile_key", "")), version, p.value("updated_at", "")});
  }
  for (const json& k : r["cache_objects"])
    t.add_row({"cache object", k.get<std::string>(), "", ""});
  auto& out = ctx.io().out;
  if (t.rows() > 0) out << t.render();
  out << verb << " " << r["programs"].size() << " program(s), " << r["profiles"].size()
      << " profile(s), " << r["cache_objects"].size() << " cache object(s) not used since "
      << r.value("cutoff", "") << "\n";
  if (!r.value("cache_objects_checked", false))
    out << "cache objects: only root or fdod's user collects them; your own programs and "
           "profiles were checked\n";
  for (const json& e : r["errors"])
    ctx.note("could not remove: " + e.get_ref<const std::string&>());
  if (!r["errors"].empty())
    return make_error(Errc::io, std::to_string(r["errors"].size()) +
                                    " item(s) could not be removed (see above)");
  return ok();
}

} // namespace fdo::ctl
