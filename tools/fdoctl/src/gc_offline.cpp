// fdoctl gc with fdod stopped: the same collection as the daemon's gc method,
// done directly on the state directory (profiles.db, programs/, cache/) for
// every tenant: the store's plan (plan_gc), then the rows, the programs'
// .prog files, and the cache files whose program is no longer registered.
#include "context.h"
#include "fdo/profile_store/gc.h"
#include "fdo/util/time.h"

#include <algorithm>
#include <filesystem>

namespace fdo::ctl {

namespace fs = std::filesystem;
namespace ps = fdo::profile_store;
using nlohmann::json;

namespace {

// The IK that starts every storage key (docs/keys.md): 64 hex digits.
constexpr std::size_t kIkLength = 64;

// <state>/cache/objects/<2 hex>/<key>.obj whose program is not kept.
std::vector<fs::path> orphaned_files(const std::string& state_dir,
                                     const std::set<std::string>& kept) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::path root = fs::path(state_dir) / "cache" / "objects";
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (p.extension() != ".obj" || name.size() < kIkLength + 4 || !it->is_regular_file()) continue;
    if (!kept.contains(name.substr(0, kIkLength))) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status remove_file(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
  if (ec) return make_error(Errc::io, "remove " + p.string() + ": " + ec.message());
  return ok();
}

} // namespace

Expected<json> gc_state_dir(const std::string& state_dir, bool dry_run, std::int64_t max_age_s) {
  FDO_TRY(ps::ProfileStore store, ps::ProfileStore::open(state_dir + "/profiles.db"));
  ps::GcCriteria criteria;
  criteria.max_age = std::chrono::seconds(max_age_s);
  criteria.now_ms = unix_ms_now();
  FDO_TRY(ps::GcPlan plan, ps::plan_gc(store, criteria));
  json programs = json::array(), profiles = json::array(), objects = json::array(),
       errors = json::array();
  auto failed = [&](const Error& e) { errors.push_back(e.message()); };
  for (const ps::ProgramInfo& p : plan.programs) {
    if (!dry_run) {
      auto mappings = store.remove_mappings(p.ik);
      auto removed = mappings ? store.remove_program(p.ik) : Expected<bool>(mappings.error());
      Status file = removed ? remove_file(fs::path(state_dir) / "programs" / (p.ik + ".prog"))
                            : Status(removed.error());
      if (!file) {
        failed(file.error());
        continue;
      }
    }
    programs.push_back(
        {{"program", p.ik}, {"name", p.name}, {"last_used", rfc3339_ms(p.last_used)}});
  }
  for (const ps::ProfileSummary& p : plan.profiles) {
    if (!dry_run)
      if (auto r = store.remove(p.pk); !r) {
        failed(r.error());
        continue;
      }
    profiles.push_back(
        {{"profile_key", p.pk}, {"version", p.version}, {"updated_at", rfc3339_ms(p.updated_at)}});
  }
  for (const fs::path& f : orphaned_files(state_dir, plan.kept_programs)) {
    if (!dry_run)
      if (auto st = remove_file(f); !st) {
        failed(st.error());
        continue;
      }
    objects.push_back(f.stem().string());
  }
  return json{{"dry_run", dry_run},
              {"max_age_s", max_age_s},
              {"cutoff", rfc3339_ms(plan.cutoff_ms)},
              {"scope", "all"},
              {"programs", std::move(programs)},
              {"profiles", std::move(profiles)},
              {"cache_objects", std::move(objects)},
              {"cache_objects_checked", true},
              {"errors", std::move(errors)}};
}

} // namespace fdo::ctl
