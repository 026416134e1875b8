// Maintenance of stored data (docs/fdod.md, "Methods").
//
// gc: removes what nobody uses any more: programs unused
// for longer than the maximum age (gc_max_age_days, or the request's
// max_age_s), profiles unchanged for that long that no remaining program
// uses (never a pinned one), and cached objects whose program is no longer
// registered. A tenant collects only its own programs and profiles; root and
// fdod's own uid (operators, who can read the state dir anyway) collect
// everyone's and the orphaned cache objects. dry_run lists without deleting.
// Every deletion leaves an audit record (action "gc").
//
// store.restore (root and fdod's own uid): puts a backup (fdoctl backup) in
// place of the live profile store, with every store write waiting meanwhile
// (ProfileStore::restore_from), after flushing the batched feedback rows; then
// drops what the daemon cached from the old store (program records, the
// feedback loop's running totals). Compiled objects are keyed by content (IK
// and profile digest), so the cache stays valid. Audited.
#include "fdo/cache/keys.h"
#include "fdo/profile_store/gc.h"
#include "fdo/util/time.h"
#include "methods.h"

#include <algorithm>

namespace fdo::daemon::methods {

namespace ps = fdo::profile_store;

namespace {

enum class Reach { own, everyone };

Reach reach_of(const CallContext& ctx) {
  return is_operator(ctx) ? Reach::everyone : Reach::own;
}

// Cached objects (disk tier) whose program (the IK every storage key starts
// with) is not among those that stay.
std::vector<std::string> orphaned_objects(ServiceState& s, const std::set<std::string>& kept) {
  std::vector<std::string> out;
  cache::DiskTier* disk = s.orch->disk_tier();
  if (disk == nullptr) return out;
  for (std::string& key : disk->keys_for_ik("")) {
    auto ik = cache::ik_of_key(key);
    if (ik && !kept.contains(*ik)) out.push_back(std::move(key));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// gc's audit records, and the errors it reports.
struct Collector {
  ServiceState& s;
  std::uint32_t tenant;
  json errors = json::array();

  void audit(std::string program, std::string pk, const Status& st, std::string detail) {
    AuditRecord rec;
    rec.action = "gc";
    rec.tenant = tenant;
    rec.program = std::move(program);
    rec.profile_key = std::move(pk);
    rec.outcome = st ? "ok" : std::string(to_string(st.error().code()));
    rec.detail = st ? std::move(detail) : detail + ": " + st.error().message();
    if (!st) errors.push_back(rec.detail);
    s.audit->record(rec);
  }
};

Expected<json> gc(ServiceState& s, const json& p, const CallContext& ctx) {
  auto cfg = s.config.get();
  FDO_TRY(bool dry_run, optional_param<bool>(p, "dry_run", false));
  const std::int64_t default_age_s = std::int64_t(cfg->gc_max_age_days) * 86400;
  FDO_TRY(std::int64_t max_age_s, optional_param<std::int64_t>(p, "max_age_s", default_age_s));
  if (max_age_s < 0 || max_age_s > std::int64_t(36500) * 86400)
    return make_error(Errc::invalid_argument, "max_age_s must be between 0 and 3153600000");
  Reach reach = reach_of(ctx);
  ps::GcCriteria criteria;
  criteria.max_age = std::chrono::seconds(max_age_s);
  criteria.now_ms = unix_ms_now();
  if (reach == Reach::own) criteria.owner = static_cast<std::int64_t>(ctx.uid);
  FDO_TRY(ps::GcPlan plan, ps::plan_gc(s.profiles->store(), criteria));

  Collector collect{s, static_cast<std::uint32_t>(ctx.uid), json::array()};
  json programs = json::array();
  for (const ps::ProgramInfo& prog : plan.programs) {
    if (!dry_run) {
      // Re-checked just before deleting: a program used since the plan was made stays.
      auto removed = s.profiles->collect_program(prog.ik, plan.cutoff_ms);
      collect.audit(prog.ik, prog.pk, removed ? ok() : Status(removed.error()),
                    "program unused since " + rfc3339_ms(prog.last_used));
      if (!removed || !*removed) continue;
    }
    programs.push_back(
        {{"program", prog.ik}, {"name", prog.name}, {"last_used", rfc3339_ms(prog.last_used)}});
  }
  json profiles = json::array();
  for (const ps::ProfileSummary& prof : plan.profiles) {
    if (!dry_run) {
      // Likewise a profile pinned or written since.
      auto removed = s.profiles->collect_profile(prof.pk, plan.cutoff_ms);
      collect.audit("", prof.pk, removed ? ok() : Status(removed.error()),
                    "profile unchanged since " + rfc3339_ms(prof.updated_at));
      if (!removed || !*removed) continue;
    }
    profiles.push_back({{"profile_key", prof.pk},
                        {"version", prof.version},
                        {"updated_at", rfc3339_ms(prof.updated_at)}});
  }
  json objects = json::array();
  if (reach == Reach::everyone) {
    for (std::string& key : orphaned_objects(s, plan.kept_programs)) {
      if (!dry_run) {
        std::size_t gone = s.profiles->evict_object(key);
        collect.audit(key.substr(0, cache::kInitialKeyLength), "", ok(),
                      "orphaned cache object " + key + (gone == 0 ? " (already gone)" : ""));
      }
      objects.push_back(std::move(key));
    }
  }
  return json{{"dry_run", dry_run},
              {"max_age_s", max_age_s},
              {"cutoff", rfc3339_ms(plan.cutoff_ms)},
              {"scope", reach == Reach::everyone ? "all" : "own"},
              {"programs", std::move(programs)},
              {"profiles", std::move(profiles)},
              {"cache_objects", std::move(objects)},
              {"cache_objects_checked", reach == Reach::everyone},
              {"errors", std::move(collect.errors)}};
}

Expected<json> restore(ServiceState& s, const json& p, const CallContext& ctx) {
  if (!is_operator(ctx))
    return make_error(Errc::permission_denied,
                      "store.restore is for root and the daemon's own user only");
  FDO_TRY(std::string file, require_param<std::string>(p, "file"));
  if (!file.starts_with("/"))
    return make_error(Errc::invalid_argument, "file must be an absolute path fdod can read");
  FDO_TRY(ps::BackupSummary r, s.profiles->restore(file));
  return json{{"file", file}, {"pages", r.pages}, {"bytes", r.bytes}};
}

Expected<json> store_restore(ServiceState& s, const json& p, const CallContext& ctx) {
  Expected<json> r = restore(s, p, ctx);
  AuditRecord rec;
  rec.action = "store.restore";
  rec.tenant = static_cast<std::uint32_t>(ctx.uid);
  rec.outcome = r ? "ok" : std::string(to_string(r.error().code()));
  rec.detail = r ? "restored from " + (*r)["file"].get<std::string>() + " (" +
                       std::to_string((*r)["bytes"].get<std::int64_t>()) + " bytes)"
                 : r.error().message();
  s.audit->record(rec);
  return r;
}

} // namespace

void add_maintenance_methods(Dispatcher& d, ServiceState& s) {
  bind(d, "gc", s, store_direct("gc", gc));
  bind(d, "store.restore", s, store_direct("store.restore", store_restore));
}

} // namespace fdo::daemon::methods
