#include "fdo/ctl/backend.h"

#include "fdo/cache/keys.h"
#include "fdo/profile_store/json_view.h"
#include "fdo/profile_store/location.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/util/base64.h"
#include "fdo/util/fd.h"
#include "fdo/util/ir_format.h"

#include <ctime>
#include <filesystem>
#include <optional>
#include <vector>

namespace fdo::ctl {

using nlohmann::json;
namespace ps = fdo::profile_store;

Expected<json> DaemonBackend::call(std::string_view method, const json& params) {
  return client_.call(method, params);
}

std::string DaemonBackend::describe() const {
  return "fdod at " + client_.socket_path();
}

namespace {

Expected<std::string> string_param(const json& params, const char* key) {
  if (!params.is_object() || !params.contains(key) || !params[key].is_string())
    return make_error(Errc::invalid_argument, std::string("missing string param '") + key + "'");
  return params[key].get<std::string>();
}

} // namespace

struct StoreBackend::Impl {
  std::string path;
  ps::ProfileStore store;
  std::string state_dir;

  // history() is not_found for an unknown key; say which key.
  Expected<std::vector<ps::StoredProfile>> history(const std::string& pk) {
    auto hist = store.history(pk);
    if (!hist && hist.error().code() == Errc::not_found)
      return make_error(Errc::not_found, "no profile " + pk + " in " + path);
    return hist;
  }

  Expected<json> list() {
    FDO_TRY(std::vector<ps::ProfileSummary> all, store.list());
    json out = json::array();
    for (const auto& s : all)
      out.push_back(ps::summary_to_json(s));
    return json{{"profiles", std::move(out)}};
  }

  Expected<json> get(const json& params) {
    FDO_TRY(std::string pk, string_param(params, "profile_key"));
    std::int64_t version = 0;
    if (params.contains("version")) {
      if (!params["version"].is_number_integer() || params["version"].get<std::int64_t>() < 1)
        return make_error(Errc::invalid_argument, "version must be an integer >= 1");
      version = params["version"].get<std::int64_t>();
    }
    FDO_TRY_STATUS(history(pk));
    FDO_TRY(std::optional<ps::StoredProfile> sp,
            version > 0 ? store.get(pk, version) : store.current(pk));
    if (!sp)
      return make_error(Errc::not_found,
                        version > 0 ? "profile " + pk + " has no version " + std::to_string(version)
                                    : "profile " + pk + " has no current version (reset)");
    return json{{"profile_key", pk},          {"version", sp->version},
                {"digest", sp->digest},       {"pinned", sp->pinned},
                {"reason", sp->reason},       {"created_at", rfc3339_ms(sp->created_at)},
                {"profile", to_json(sp->doc)}};
  }

  Expected<json> history_json(const json& params) {
    FDO_TRY(std::string pk, string_param(params, "profile_key"));
    FDO_TRY(std::vector<ps::StoredProfile> hist, history(pk));
    FDO_TRY(std::optional<ps::StoredProfile> cur, store.current(pk));
    json versions = json::array();
    for (const auto& v : hist)
      versions.push_back(ps::version_to_json(v));
    return json{{"profile_key", pk},
                {"pinned", !hist.empty() && hist.back().pinned},
                {"current_version", cur ? cur->version : 0},
                {"versions", std::move(versions)}};
  }

  Expected<json> export_json(const json& params) {
    std::string format = params.is_object() ? params.value("format", "json") : "json";
    if (format != "json")
      return make_error(Errc::unsupported,
                        "--format " + format +
                            " needs the daemon (it writes LLVM's indexed profile format); reading "
                            "the store directly exports --format json only");
    std::vector<std::string> pks;
    if (params.is_object() && params.contains("profile_keys")) {
      for (const json& k : params["profile_keys"]) {
        if (!k.is_string())
          return make_error(Errc::invalid_argument, "profile_keys must hold strings");
        pks.push_back(k.get<std::string>());
        FDO_TRY_STATUS(history(pks.back()));
      }
    } else {
      FDO_TRY(std::vector<ps::ProfileSummary> all, store.list());
      for (const auto& s : all)
        pks.push_back(s.pk);
    }
    FDO_TRY(json bundle, store.export_bundle(pks));
    return json{{"format", "json"}, {"bundle", std::move(bundle)}};
  }

  // Every tenant's programs: the store is the operator's.
  Expected<json> programs() {
    FDO_TRY(std::vector<ps::ProgramInfo> all, store.programs());
    json out = json::array();
    for (const auto& p : all)
      out.push_back(ps::program_to_json(p));
    return json{{"programs", std::move(out)}};
  }

  // programs/<IK>.prog, trusted only as far as its row's program hash
  // vouches for it (as fdod does when it loads the file).
  Expected<json> program_source(const json& params) {
    FDO_TRY(std::string ik, string_param(params, "program"));
    FDO_TRY(std::optional<ps::ProgramInfo> info, store.program(ik));
    if (!info) return make_error(Errc::not_found, "no program " + ik + " in " + path);
    if (state_dir.empty())
      return make_error(Errc::invalid_argument,
                        "program sources live in fdod's state directory: give --state-dir too");
    const std::string file =
        (std::filesystem::path(state_dir) / "programs" / (ik + ".prog")).string();
    auto contents = read_file(file);
    if (!contents)
      return make_error(Errc::not_found,
                        "program " + ik +
                            " is registered but its IR is missing: " + contents.error().message());
    std::string scope;
    std::string bytes = std::move(*contents);
    if (std::string_view(bytes).starts_with(cache::kScopeTag)) {
      std::size_t nl = bytes.find('\n', cache::kScopeTag.size());
      if (nl == std::string::npos)
        return make_error(Errc::corrupt, file + ": a scope header without its end");
      scope = bytes.substr(cache::kScopeTag.size(), nl - cache::kScopeTag.size());
      bytes.erase(0, nl + 1);
    }
    if (info->program_hash.empty() || cache::program_hash(scope, bytes) != info->program_hash)
      return make_error(Errc::corrupt, file + " does not hold the bytes registered as program " +
                                           ik + " (or their hash was never recorded)");
    return json{{"program", ik},
                {"profile_key", info->pk},
                {"name", info->name},
                {"owner", info->owner},
                {"size", static_cast<std::int64_t>(bytes.size())},
                {"format", is_llvm_bitcode(bytes) ? "bitcode" : "text"},
                {"ir_base64", base64_encode(bytes)}};
  }
};

StoreBackend::StoreBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreBackend::~StoreBackend() = default;

Expected<std::unique_ptr<StoreBackend>> StoreBackend::open(const std::string& state_dir,
                                                           const std::string& location) {
  std::string path = location;
  if (path.empty()) {
    path = (std::filesystem::path(state_dir) / "profiles.db").string();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return make_error(Errc::not_found, "no profile store at " + path + " (is " + state_dir +
                                             " fdod's --state-dir? the default is /var/lib/fdod)");
  }
  ps::Options options;
  options.mode = ps::OpenMode::read_only;
  auto store = ps::ProfileStore::open(path, options);
  if (!store)
    return std::move(store).error().context("open " + ps::redact_location(path) + " read-only");
  path = store->location(); // never the password
  auto impl = std::unique_ptr<Impl>(new Impl{path, std::move(*store), state_dir});
  return std::unique_ptr<StoreBackend>(new StoreBackend(std::move(impl)));
}

std::string StoreBackend::describe() const {
  return "profile store " + impl_->path + " (read-only)";
}

Expected<json> StoreBackend::call(std::string_view method, const json& params) {
  if (method == "profile.list") return impl_->list();
  if (method == "profile.get") return impl_->get(params);
  if (method == "profile.history") return impl_->history_json(params);
  if (method == "profile.export") return impl_->export_json(params);
  if (method == "program.list") return impl_->programs();
  if (method == "program.source") return impl_->program_source(params);
  return make_error(Errc::unsupported,
                    std::string(method) +
                        " needs a running fdod: without the daemon fdoctl can only read profiles "
                        "from the store (profiles, programs, profile show/history/diff/annotate, "
                        "profile export --format json)");
}

} // namespace fdo::ctl
