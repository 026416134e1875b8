#include "fdo/daemon/service.h"

#include "fdo/cache/keys.h"
#include "fdo/cache/orchestrator.h"
#include "fdo/daemon/abi.h"
#include "fdo/daemon/policy.h"
#include "fdo/daemon/worker_pool.h"
#include "fdo/jit/compiler.h"
#include "fdo/jit/profdata.h"
#include "fdo/perf/capabilities.h"
#include "fdo/profile_store/json_view.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/util/base64.h"
#include "fdo/util/fd.h"
#include "fdo/util/hash.h"
#include "fdo/util/log.h"
#include "fdo/util/time.h"

#include <atomic>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <unistd.h>

namespace fdo::daemon {

using nlohmann::json;
namespace ps = fdo::profile_store;
namespace fs = std::filesystem;

namespace {

// --- tenant scoping -------------------------------------------------------
// Scoped program bytes are "FDO-SCOPE\0<scope>\n<bytes>". The orchestrator
// keys them as opaque bytes, so IK differs per tenant; the compiler adapter
// strips the envelope and scopes the profile key the same way.
constexpr std::string_view kScopeMagic{"FDO-SCOPE\0", 10};

std::string scope_for(std::int64_t uid, bool shared) {
  return shared ? std::string() : "uid:" + std::to_string(uid);
}

std::string wrap(const std::string& scope, std::string_view bytes) {
  if (scope.empty()) return std::string(bytes);
  std::string out(kScopeMagic);
  out += scope;
  out += '\n';
  out += bytes;
  return out;
}

struct Unwrapped {
  std::string scope;
  std::string_view bytes;
};

Unwrapped unwrap(std::string_view bytes) {
  if (bytes.substr(0, kScopeMagic.size()) != kScopeMagic) return {"", bytes};
  std::size_t nl = bytes.find('\n', kScopeMagic.size());
  if (nl == std::string_view::npos) return {"", bytes};
  return {std::string(bytes.substr(kScopeMagic.size(), nl - kScopeMagic.size())),
          bytes.substr(nl + 1)};
}

std::string scoped_profile_key(const std::string& scope, const std::string& pk) {
  if (scope.empty()) return pk;
  Hasher h;
  h.update_field("fdo.pk.scope.v1").update_field(scope).update_field(pk);
  return h.hex();
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

JobLimits compile_limits(const Config& c) {
  JobLimits l;
  l.wall = c.compile_timeout;
  l.address_space_bytes = c.compile_memory_mb * kMiB;
  l.max_output_bytes = c.max_output_bytes;
  return l;
}

JobLimits exec_limits(const Config& c) {
  JobLimits l;
  l.wall = c.exec_timeout;
  l.address_space_bytes = c.exec_memory_mb * kMiB;
  l.max_output_bytes = c.max_output_bytes;
  return l;
}

// --- KeyStore over the SQLite profile store --------------------------------
class StoreKeys final : public cache::KeyStore {
public:
  explicit StoreKeys(ps::ProfileStore& store) : store_(store) {}

  Expected<std::optional<std::string>> lookup_profile_key(const std::string& ik) override {
    return store_.lookup_profile_key(ik);
  }
  Status put_profile_key(const std::string& ik, const std::string& pk) override {
    FDO_TRY_STATUS(store_.put_profile_key(ik, pk));
    return ok();
  }
  Expected<std::optional<std::string>> lookup_virtual_key(const std::string& ck) override {
    return store_.lookup_virtual_key(ck);
  }
  Status put_virtual_key(const std::string& ck, const std::string& vk) override {
    std::string ik = ck.substr(0, cache::kInitialKeyLength);
    FDO_TRY_STATUS(store_.put_virtual_key(ck, vk, ik));
    return ok();
  }
  Expected<cache::ProfileRef> current_profile(const std::string& pk) override {
    FDO_TRY(std::optional<ps::StoredProfile> cur, store_.current(pk));
    if (!cur) return cache::no_profile(pk);
    cache::ProfileRef ref;
    ref.pk = pk;
    ref.version = cur->version;
    ref.digest = cur->digest;
    ref.doc = std::make_shared<const ProfileDoc>(std::move(cur->doc));
    return ref;
  }

private:
  ps::ProfileStore& store_;
};

// --- Compiler over the compile worker pool --------------------------------
class RemoteCompiler final : public cache::Compiler {
public:
  RemoteCompiler(std::string identity, std::function<WorkerPool&()> pool,
                 std::function<JobLimits()> limits, std::function<std::uint64_t()> max_bytes)
      : identity_(std::move(identity)), pool_(std::move(pool)), limits_(std::move(limits)),
        max_bytes_(std::move(max_bytes)) {}

  std::string identity() const override { return identity_; }

  Expected<json> analyze(std::string_view bytes) {
    Message req;
    req.header = {{"op", "analyze"}, {"limits", {{"max_program_bytes", max_bytes_()}}}};
    req.payload = std::string(bytes);
    FDO_TRY(Message resp, pool_().run(req, limits_()));
    return std::move(resp.header);
  }

  Expected<cache::Identification> identify(const cache::Program& program) override {
    Unwrapped u = unwrap(program.bytes);
    FDO_TRY(json a, analyze(u.bytes));
    return cache::Identification{scoped_profile_key(u.scope, a.value("profile_key", ""))};
  }

  Expected<cache::CompiledOutput> compile(const cache::Program& program,
                                          const cache::ProfileRef& profile,
                                          CompileMode mode) override {
    Unwrapped u = unwrap(program.bytes);
    Message req;
    req.header = {{"op", "compile"},
                  {"mode", std::string(to_string(mode))},
                  {"profile", profile.doc ? to_json(*profile.doc) : json(nullptr)},
                  {"limits", {{"max_program_bytes", max_bytes_()}}}};
    req.payload = std::string(u.bytes);
    FDO_TRY(Message resp, pool_().run(req, limits_()));
    return cache::CompiledOutput{std::move(resp.payload), resp.header.dump()};
  }

private:
  std::string identity_;
  std::function<WorkerPool&()> pool_;
  std::function<JobLimits()> limits_;
  std::function<std::uint64_t()> max_bytes_;
};

struct ProgramRecord {
  std::string ik;
  std::string name;
  std::string bytes; // scoped bytes, as keyed
  std::string pk;    // scoped profile key
  std::int64_t owner = 0;
  std::vector<jit::EntryInfo> entries;
  std::atomic<std::int64_t> stages{0};
};

struct PkState {
  std::int64_t version = -1; // the profile version `acc` belongs to
  FeedbackAccumulator acc;
  std::deque<std::chrono::system_clock::time_point> rewrites;
  std::string last_reason;
};

Expected<jit::EntryInfo> find_entry(const ProgramRecord& p, const std::string& name) {
  for (const auto& e : p.entries)
    if (e.name == name) return e;
  std::string known;
  for (const auto& e : p.entries)
    known += (known.empty() ? "" : ", ") + e.name;
  return make_error(Errc::not_found, "program " + p.ik.substr(0, 12) + " has no entry '" + name +
                                         "' (entries: " + (known.empty() ? "none" : known) + ")");
}

Expected<Signature> signature_of(const jit::EntryInfo& e) {
  auto scalar = [](const std::string& text) -> Expected<ScalarType> {
    FDO_TRY(jit::AbiType t, jit::parse_abi_type(text));
    switch (t.kind) {
    case jit::AbiKind::void_:
      return ScalarType::void_;
    case jit::AbiKind::f32:
      return ScalarType::f32;
    case jit::AbiKind::f64:
      return ScalarType::f64;
    case jit::AbiKind::ptr:
      return ScalarType::ptr;
    case jit::AbiKind::integer:
      if (t.bits == 1) return ScalarType::i1;
      if (t.bits <= 8) return ScalarType::i8;
      if (t.bits <= 16) return ScalarType::i16;
      if (t.bits <= 32) return ScalarType::i32;
      return ScalarType::i64;
    }
    return ScalarType::void_;
  };
  Signature sig;
  sig.name = e.name;
  FDO_TRY(sig.ret, scalar(e.return_type));
  for (const auto& p : e.param_types) {
    FDO_TRY(ScalarType t, scalar(p));
    sig.params.push_back(t);
  }
  return sig;
}

json entries_json(const std::vector<jit::EntryInfo>& entries) {
  json out = json::array();
  for (const auto& e : entries)
    out.push_back({{"name", e.name}, {"returns", e.return_type}, {"params", e.param_types}});
  return out;
}

std::vector<jit::EntryInfo> entries_from_json(const json& j) {
  std::vector<jit::EntryInfo> out;
  for (const json& e : j) {
    jit::EntryInfo info;
    info.name = e.value("name", "");
    info.return_type = e.value("returns", "void");
    info.param_types = e.value("params", std::vector<std::string>{});
    out.push_back(std::move(info));
  }
  return out;
}


std::string cache_reason_text(cache::Reason r) {
  return std::string(cache::to_string(r));
}

} // namespace

struct Service::Impl {
  mutable std::mutex config_mu;
  Config config;
  std::string worker_path;
  std::string host = hostname();
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  jit::CompilerIdentity identity = jit::host_identity();
  json perf_caps;

  std::unique_ptr<ps::ProfileStore> store;
  std::unique_ptr<WorkerPool> compile_pool;
  std::unique_ptr<WorkerPool> exec_pool;
  std::unique_ptr<StoreKeys> keys;
  std::unique_ptr<RemoteCompiler> compiler;
  std::unique_ptr<cache::Orchestrator> orch; // declared last: destroyed first

  std::mutex programs_mu;
  std::map<std::string, std::shared_ptr<ProgramRecord>> programs;

  std::mutex feedback_mu;
  std::map<std::string, PkState> pk_state;
  std::vector<ps::FeedbackRow> pending;
  std::atomic<std::uint64_t> stages_total{0}, stage_failures{0}, rewrites_total{0};

  Config cfg() const {
    std::lock_guard lk(config_mu);
    return config;
  }
  bool shared() const { return cfg().share_profiles_across_tenants; }
  std::string programs_dir() const { return cfg().state_dir + "/programs"; }

  // --- programs --------------------------------------------------------
  Expected<std::shared_ptr<ProgramRecord>> register_program(std::string_view raw, std::string name,
                                                            std::int64_t uid) {
    Config c = cfg();
    if (raw.empty()) return make_error(Errc::invalid_argument, "program is empty (0 bytes of IR)");
    if (raw.size() > c.max_program_bytes)
      return make_error(Errc::resource_exhausted,
                        "program is " + std::to_string(raw.size()) + " bytes, over the limit of " +
                            std::to_string(c.max_program_bytes) + " (max_program_bytes)");
    std::string scope = scope_for(uid, c.share_profiles_across_tenants);
    std::string bytes = wrap(scope, raw);
    std::string ik = orch->initial_key_for(bytes);
    {
      std::lock_guard lk(programs_mu);
      auto it = programs.find(ik);
      if (it != programs.end()) {
        (void)store->touch_program(ik);
        return it->second;
      }
    }
    FDO_TRY(json analysis, compiler->analyze(raw));
    auto rec = std::make_shared<ProgramRecord>();
    rec->ik = ik;
    rec->name = name.empty() ? "program-" + ik.substr(0, 12) : std::move(name);
    rec->bytes = std::move(bytes);
    rec->pk = scoped_profile_key(scope, analysis.value("profile_key", ""));
    rec->owner = uid;
    rec->entries = entries_from_json(analysis.value("entries", json::array()));
    std::error_code ec;
    fs::create_directories(programs_dir(), ec);
    FDO_TRY_STATUS(write_file_atomic(programs_dir() + "/" + ik + ".prog", rec->bytes));
    FDO_TRY_STATUS(store->register_program(
        ps::ProgramInfo{ik, rec->name, static_cast<std::int64_t>(raw.size()), uid, 0, 0}));
    std::lock_guard lk(programs_mu);
    auto [it, inserted] = programs.emplace(ik, rec);
    return it->second;
  }

  // A registered program the caller may use (another tenant's is "not found").
  Expected<std::shared_ptr<ProgramRecord>> program_for(const std::string& ik, std::int64_t uid) {
    std::shared_ptr<ProgramRecord> rec;
    {
      std::lock_guard lk(programs_mu);
      if (auto it = programs.find(ik); it != programs.end()) rec = it->second;
    }
    if (!rec) {
      FDO_TRY(std::optional<ps::ProgramInfo> info, store->program(ik));
      if (!info) return make_error(Errc::not_found, "no program " + ik + " (register it first)");
      auto file = read_file(programs_dir() + "/" + ik + ".prog");
      if (!file)
        return make_error(Errc::not_found, "program " + ik +
                                               " is registered but its IR is missing from the "
                                               "state dir: " +
                                               file.error().message());
      std::string bytes = std::move(*file);
      Unwrapped u = unwrap(bytes);
      FDO_TRY(json analysis, compiler->analyze(u.bytes));
      rec = std::make_shared<ProgramRecord>();
      rec->ik = ik;
      rec->name = info->name;
      rec->bytes = std::move(bytes);
      rec->pk = scoped_profile_key(u.scope, analysis.value("profile_key", ""));
      rec->owner = info->owner;
      rec->entries = entries_from_json(analysis.value("entries", json::array()));
      std::lock_guard lk(programs_mu);
      rec = programs.emplace(ik, rec).first->second;
    }
    if (rec->owner != uid && !shared())
      return make_error(Errc::not_found, "no program " + ik + " for uid " + std::to_string(uid));
    return rec;
  }

  // --- profiles ---------------------------------------------------------
  // The profile's owner must be the caller (unless profiles are shared).
  Status check_profile_owner(const std::string& pk, std::int64_t uid) {
    if (!is_hex_key(pk))
      return make_error(Errc::invalid_argument, "profile_key must be 64 lower-case hex digits");
    auto hist = store->history(pk);
    if (!hist) {
      if (hist.error().code() == Errc::not_found)
        return make_error(Errc::not_found, "no profile " + pk);
      return std::move(hist).error();
    }
    if (!shared() && !hist->empty() && hist->front().owner != uid)
      return make_error(Errc::not_found, "no profile " + pk + " for uid " + std::to_string(uid));
    return ok();
  }

  // --- feedback -----------------------------------------------------------
  struct FeedbackOutcome {
    json rewritten = nullptr;
    std::string policy;
  };

  FeedbackOutcome fold_feedback(const ProgramRecord& prog, const cache::StageOutput& so,
                                const jit::CompileResult& meta, const json& exec_header,
                                std::int64_t stage_number) {
    FeedbackOutcome out;
    StageFeedback fb;
    const json& m = exec_header["measurement"];
    fb.exec_ns = m.value("wall_ns", std::uint64_t{0});
    for (const json& e : m.value("events", json::array()))
      if (e.contains("value") && e["value"].is_number_unsigned())
        fb.counters[e.value("name", "")] = e["value"].get<std::uint64_t>();
    std::map<std::string, std::uint64_t> hashes;
    for (const auto& f : meta.counters_layout)
      hashes[f.pgo_name] = f.cfg_hash;
    const json counts = exec_header.value("counts", json::object());
    for (const auto& [name, values] : counts.items()) {
      auto h = hashes.find(name);
      if (h == hashes.end()) continue;
      fb.counts[name] = FunctionCounts{h->second, values.get<std::vector<std::uint64_t>>()};
    }
    Config c = cfg();
    std::lock_guard lk(feedback_mu);
    ps::FeedbackRow row;
    row.pk = so.pk;
    row.version = so.profile_version;
    row.stages = 1;
    row.exec_ns = fb.exec_ns;
    row.counters = fb.counters;
    for (const auto& [name, fc] : fb.counts)
      row.function_counts[name] = fc.counts;
    // Version 0 (no profile) has no history row to hang feedback on; its
    // counts live in memory until they become version 1.
    if (so.profile_version > 0) pending.push_back(std::move(row));

    if (so.profile_version != so.target_profile_version) {
      out.policy = "tier-up pending: stage ran profile version " +
                   std::to_string(so.profile_version) + ", current is " +
                   std::to_string(so.target_profile_version);
      return out;
    }
    PkState& st = pk_state[so.pk];
    if (st.version != so.profile_version) {
      st.acc = FeedbackAccumulator();
      st.version = so.profile_version;
      if (so.profile_version > 0) {
        if (auto totals = store->feedback(so.pk, so.profile_version); totals && *totals) {
          FeedbackAccumulator loaded;
          for (const auto& [name, counts] : (*totals)->function_counts)
            if (auto h = hashes.find(name); h != hashes.end())
              loaded.mutable_counts()[name] = FunctionCounts{h->second, counts};
          loaded.mutable_counters() = (*totals)->counters;
          loaded.set_totals(static_cast<std::int64_t>((*totals)->stages), (*totals)->exec_ns);
          st.acc.merge(loaded);
        }
      }
    }
    st.acc.add(fb);
    auto current = store->current(so.pk);
    if (!current) {
      out.policy = "profile read failed: " + current.error().describe();
      return out;
    }
    PolicyInput in;
    in.current = *current ? &(*current)->doc : nullptr;
    in.current_version = *current ? (*current)->version : 0;
    in.pinned = *current && (*current)->pinned;
    in.feedback = &st.acc;
    in.now = std::chrono::system_clock::now();
    in.recent_rewrites = &st.rewrites;
    if (in.current_version != so.profile_version) {
      out.policy = "profile changed under this stage (now version " +
                   std::to_string(in.current_version) + ")";
      return out;
    }
    PolicyDecision d = decide(c.policy, in);
    out.policy = d.reason;
    st.last_reason = d.reason;
    if (d.action != PolicyAction::rewrite) return out;
    for (auto& [name, f] : d.profile.functions)
      if (auto fp = meta.function_fingerprints.find(name); fp != meta.function_fingerprints.end())
        f.fingerprint = fp->second;
    ps::WriteInfo info;
    info.source = ps::WriteSource::feedback;
    info.reason = d.reason;
    info.owner = prog.owner;
    info.host = host;
    info.stage = stage_number;
    info.program = prog.ik;
    auto written = store->write(so.pk, in.current_version, d.profile, info);
    if (!written) {
      // conflict: another writer got there first; pinned: an operator pinned
      // it meanwhile. Either way this stage's view is stale: keep the data.
      out.policy = "rewrite skipped: " + written.error().describe();
      return out;
    }
    ++rewrites_total;
    st.rewrites.push_back(in.now);
    while (st.rewrites.size() > 256)
      st.rewrites.pop_front();
    st.version = *written;
    st.acc = FeedbackAccumulator();
    out.rewritten = {{"from", in.current_version}, {"to", *written}, {"reason", d.reason}};
    log::info("profile " + so.pk.substr(0, 12) + " rewritten v" +
              std::to_string(in.current_version) + " -> v" + std::to_string(*written) + ": " +
              d.reason);
    return out;
  }

  Status flush() {
    std::vector<ps::FeedbackRow> rows;
    {
      std::lock_guard lk(feedback_mu);
      rows.swap(pending);
    }
    if (rows.empty()) return ok();
    auto r = store->append_feedback(rows);
    if (!r) {
      // Nothing is lost: the rows go back in front of newer ones for the next flush.
      std::lock_guard lk(feedback_mu);
      rows.insert(rows.end(), std::make_move_iterator(pending.begin()),
                  std::make_move_iterator(pending.end()));
      pending.swap(rows);
      return std::move(r).error().context("flush feedback");
    }
    return ok();
  }

  // --- methods ------------------------------------------------------------
  Expected<json> execute(const json& params, const CallContext& ctx) {
    FDO_TRY(std::string entry_name, require_param<std::string>(params, "entry"));
    std::shared_ptr<ProgramRecord> prog;
    if (params.contains("program")) {
      FDO_TRY(std::string ik, require_param<std::string>(params, "program"));
      FDO_TRY(prog, program_for(ik, ctx.uid));
    } else {
      FDO_TRY(std::string raw, program_source(params));
      FDO_TRY(std::string name, optional_param<std::string>(params, "name", ""));
      FDO_TRY(prog, register_program(raw, name, ctx.uid));
    }
    FDO_TRY(jit::EntryInfo entry, find_entry(*prog, entry_name));
    FDO_TRY(Signature sig, signature_of(entry));
    Config c = cfg();
    json buffers_param = params.contains("buffers") ? params["buffers"] : json(nullptr);
    CallLimits call_limits;
    call_limits.max_buffer_bytes = c.max_output_bytes / 2;
    FDO_TRY(PreparedCall call,
            prepare_call(sig, params.value("args", json::array()), buffers_param, call_limits));
    FDO_TRY(bool return_buffers, optional_param<bool>(params, "return_buffers", false));
    FDO_TRY(std::string encoding, optional_param<std::string>(params, "buffer_encoding", "array"));
    if (encoding != "array" && encoding != "base64")
      return make_error(Errc::invalid_argument, "buffer_encoding must be \"array\" or \"base64\"");
    if (std::chrono::steady_clock::now() >= ctx.deadline)
      return make_error(Errc::timeout, "request deadline passed before the stage started");

    cache::TierUp tier = c.tier_up == TierUp::sync ? cache::TierUp::sync : cache::TierUp::async;
    FDO_TRY(cache::StageOutput so, orch->prepare(prog->bytes, tier));
    std::int64_t stage_number = prog->stages.fetch_add(1);
    ++stages_total;
    FDO_TRY(json meta_json, [&]() -> Expected<json> {
      json j = json::parse(so.entry->metadata, nullptr, false);
      if (j.is_discarded())
        return make_error(Errc::corrupt,
                          "cached entry " + so.storage_key + " has corrupt metadata");
      return j;
    }());
    FDO_TRY(jit::CompileResult meta, jit::metadata_from_json(meta_json));

    Message req;
    req.header = {{"op", "exec"},
                  {"key", so.storage_key},
                  {"metadata", meta_json},
                  {"entry", entry_name},
                  {"slots", call.slots},
                  {"buffer_of_param", call.buffer_of_param},
                  {"return_buffers", return_buffers},
                  {"events", c.perf_events},
                  {"object_size", so.entry->object.size()}};
    req.payload = so.entry->object;
    json buffer_list = json::array();
    for (const Buffer& b : call.buffers) {
      buffer_list.push_back({{"elem", std::string(to_string(b.elem))}, {"size", b.bytes.size()}});
      req.payload += b.bytes;
    }
    req.header["buffers"] = std::move(buffer_list);
    auto resp = exec_pool->run(req, exec_limits(c));
    if (!resp) {
      ++stage_failures;
      return std::move(resp).error().context("execute " + entry_name);
    }
    // Release the cache entry before the feedback work: the object ran.
    FeedbackOutcome fo = fold_feedback(*prog, so, meta, resp->header, stage_number);

    json result = {{"entry", entry_name},
                   {"returns", entry.return_type},
                   {"value", decode_return(sig.ret, resp->header.value("ret", std::uint64_t{0}))}};
    if (return_buffers) {
      json out = json::array();
      std::size_t off = 0;
      std::vector<std::size_t> sizes =
          resp->header.value("buffer_sizes", std::vector<std::size_t>{});
      for (std::size_t i = 0; i < sizes.size() && i < call.buffers.size(); ++i) {
        if (off + sizes[i] > resp->payload.size())
          return make_error(Errc::internal, "exec worker returned short buffers");
        Buffer b{call.buffers[i].elem, resp->payload.substr(off, sizes[i])};
        off += sizes[i];
        out.push_back(buffer_to_json(b, encoding == "base64" ? BufferEncoding::base64
                                                             : BufferEncoding::array));
      }
      result["buffers"] = std::move(out);
    }
    const json& measurement = resp->header["measurement"];
    result["stage"] = {{"number", stage_number},
                       {"program", so.ik},
                       {"profile_key", so.pk},
                       {"cache_key", so.ck},
                       {"storage_key", so.storage_key},
                       {"profile_version", so.profile_version},
                       {"mode", std::string(to_string(so.mode))},
                       {"cache",
                        {{"outcome", std::string(cache::to_string(so.outcome))},
                         {"reason", cache_reason_text(so.explanation.reason)},
                         {"detail", so.explanation.text}}},
                       {"recompiled", so.compiled},
                       {"compile_ms", so.compile_ms},
                       {"exec_ns", measurement.value("wall_ns", std::uint64_t{0})},
                       {"counters", measurement},
                       {"profile_rewritten", fo.rewritten},
                       {"policy", fo.policy}};
    return result;
  }

  Expected<std::string> program_source(const json& params) {
    if (params.contains("ir") && params.contains("ir_base64"))
      return make_error(Errc::invalid_argument, "give either \"ir\" or \"ir_base64\", not both");
    if (params.contains("ir")) return require_param<std::string>(params, "ir");
    if (params.contains("ir_base64")) {
      FDO_TRY(std::string text, require_param<std::string>(params, "ir_base64"));
      return base64_decode(text);
    }
    return make_error(Errc::invalid_argument,
                      "missing program: give \"program\" (an id from program.register), \"ir\" "
                      "(IR text) or \"ir_base64\" (IR text or bitcode)");
  }

  json cache_stats_json() {
    json j = cache::to_json(orch->stats());
    j["workers"] = {{"compile", to_json(compile_pool->stats())},
                    {"exec", to_json(exec_pool->stats())}};
    return j;
  }

  std::string metrics_text() {
    cache::Stats s = orch->stats();
    PoolStats cp = compile_pool->stats(), ep = exec_pool->stats();
    std::ostringstream o;
    auto metric = [&](const char* name, const char* type, const char* help, auto value,
                      const std::string& labels = "") {
      o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << labels << ' ' << value << '\n';
    };
    metric("fdo_stages_total", "counter", "Stages executed.", stages_total.load());
    metric("fdo_stage_failures_total", "counter", "Stages whose execution failed.",
           stage_failures.load());
    metric("fdo_profile_rewrites_total", "counter", "Profile versions written by feedback.",
           rewrites_total.load());
    metric("fdo_cache_memory_hits_total", "counter", "Memory-tier hits.", s.memory_hits);
    metric("fdo_cache_disk_hits_total", "counter", "Disk-tier hits.", s.disk_hits);
    metric("fdo_cache_compiles_total", "counter", "Compiler runs.", s.compiles);
    metric("fdo_cache_recompiles_total", "counter", "Recompiles of known programs.", s.recompiles);
    metric("fdo_cache_corrupt_entries_total", "counter", "Corrupt disk entries removed.",
           s.corrupt_entries);
    metric("fdo_cache_memory_bytes", "gauge", "Bytes in the memory tier.", s.memory_bytes);
    metric("fdo_cache_disk_bytes", "gauge", "Bytes in the disk tier.", s.disk_bytes);
    o << "# HELP fdo_worker_restarts_total Worker processes replaced.\n"
      << "# TYPE fdo_worker_restarts_total counter\n"
      << "fdo_worker_restarts_total{pool=\"compile\"} " << cp.restarts << '\n'
      << "fdo_worker_restarts_total{pool=\"exec\"} " << ep.restarts << '\n';
    o << "# HELP fdo_worker_failures_total Jobs that failed in a worker.\n"
      << "# TYPE fdo_worker_failures_total counter\n"
      << "fdo_worker_failures_total{pool=\"compile\"} " << cp.failures.total() << '\n'
      << "fdo_worker_failures_total{pool=\"exec\"} " << ep.failures.total() << '\n';
    return o.str();
  }
};

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Service::~Service() {
  if (!impl_) return;
  if (impl_->orch) impl_->orch->wait_idle();
  if (auto st = impl_->flush(); !st) log::error(st.error().describe());
}

Expected<std::unique_ptr<Service>> Service::create(ServiceOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->config = options.config;
  impl->worker_path = options.worker_path;
  const Config& c = impl->config;
  std::error_code ec;
  fs::create_directories(c.state_dir, ec);
  if (ec) return make_error(Errc::io, "create state dir " + c.state_dir + ": " + ec.message());
  ps::Options so;
  so.retention = static_cast<int>(c.profile_retention);
  FDO_TRY(ps::ProfileStore store, ps::ProfileStore::open(c.state_dir + "/profiles.db", so));
  impl->store = std::make_unique<ps::ProfileStore>(std::move(store));

  PoolOptions cp;
  cp.worker_path = options.worker_path;
  cp.worker_args = {"--role", "compile"};
  cp.size = static_cast<int>(c.compile_workers);
  cp.name = "compile";
  cp.defaults = compile_limits(c);
  FDO_TRY(impl->compile_pool, WorkerPool::create(cp));
  PoolOptions ep = cp;
  ep.worker_args = {"--role", "exec"};
  ep.size = static_cast<int>(c.exec_workers);
  ep.name = "exec";
  ep.defaults = exec_limits(c);
  FDO_TRY(impl->exec_pool, WorkerPool::create(ep));

  Impl* self = impl.get();
  impl->keys = std::make_unique<StoreKeys>(*impl->store);
  impl->compiler = std::make_unique<RemoteCompiler>(
      impl->identity.canonical(), [self]() -> WorkerPool& { return *self->compile_pool; },
      [self] { return compile_limits(self->cfg()); },
      [self] { return self->cfg().max_program_bytes; });
  cache::Config cc;
  cc.state_dir = c.state_dir;
  cc.memory_budget_bytes = c.memory_cache_bytes;
  cc.disk_budget_bytes = c.disk_cache_bytes;
  cc.tier_up = c.tier_up == TierUp::sync ? cache::TierUp::sync : cache::TierUp::async;
  FDO_TRY(impl->orch, cache::Orchestrator::create(cc, *impl->keys, *impl->compiler));
  impl->perf_caps = perf::to_json(perf::probe());
  log::info("service ready: state dir " + c.state_dir + ", compiler " + impl->identity.triple +
            " " + impl->identity.cpu + ", " + std::to_string(c.compile_workers) + " compile + " +
            std::to_string(c.exec_workers) + " exec workers");
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

Status Service::flush_feedback() {
  return impl_->flush();
}

void Service::reconfigure(const Config& config) {
  std::lock_guard lk(impl_->config_mu);
  Config next = config;
  // Restart-only keys keep their running values (reload_config already does
  // this; repeated here so a caller cannot move the state dir under us).
  next.state_dir = impl_->config.state_dir;
  next.socket = impl_->config.socket;
  next.compile_workers = impl_->config.compile_workers;
  next.exec_workers = impl_->config.exec_workers;
  next.share_profiles_across_tenants = impl_->config.share_profiles_across_tenants;
  impl_->config = std::move(next);
  log::set_level(impl_->config.log_level);
}

void Service::register_methods(Dispatcher& d) {
  Impl* s = impl_.get();
  d.add("health", [s](const json&, const CallContext&) -> Expected<json> {
    double up =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - s->started).count();
    return json{
        {"status", "ok"},
        {"version", std::string(jit::kFdoVersion)},
        {"pid", static_cast<std::int64_t>(::getpid())},
        {"uptime_s", up},
        {"workers",
         {{"compile", s->compile_pool->stats().live}, {"exec", s->exec_pool->stats().live}}}};
  });
  d.add("capabilities", [s](const json&, const CallContext&) -> Expected<json> {
    Config c = s->cfg();
    return json{{"fdo_version", std::string(jit::kFdoVersion)},
                {"llvm_version", s->identity.llvm_version},
                {"target",
                 {{"triple", s->identity.triple},
                  {"cpu", s->identity.cpu},
                  {"features", s->identity.features}}},
                {"compiler_identity", s->identity.canonical()},
                {"compile_modes", {"plain", "instrumented", "optimized"}},
                {"tier_up", std::string(to_string(c.tier_up))},
                {"share_profiles_across_tenants", c.share_profiles_across_tenants},
                {"perf", s->perf_caps}};
  });
  d.add("program.register", [s](const json& p, const CallContext& ctx) -> Expected<json> {
    FDO_TRY(std::string raw, s->program_source(p));
    FDO_TRY(std::string name, optional_param<std::string>(p, "name", ""));
    FDO_TRY(std::shared_ptr<ProgramRecord> rec, s->register_program(raw, name, ctx.uid));
    return json{{"program", rec->ik},
                {"profile_key", rec->pk},
                {"name", rec->name},
                {"size", static_cast<std::int64_t>(unwrap(rec->bytes).bytes.size())},
                {"entries", entries_json(rec->entries)}};
  });
  d.add("program.compile", [s](const json& p, const CallContext& ctx) -> Expected<json> {
    FDO_TRY(std::string ik, require_param<std::string>(p, "program"));
    FDO_TRY(std::shared_ptr<ProgramRecord> rec, s->program_for(ik, ctx.uid));
    FDO_TRY(cache::StageOutput so, s->orch->prepare(rec->bytes, cache::TierUp::sync));
    return json{{"program", so.ik},
                {"profile_key", so.pk},
                {"cache_key", so.ck},
                {"storage_key", so.storage_key},
                {"mode", std::string(to_string(so.mode))},
                {"profile_version", so.profile_version},
                {"cache",
                 {{"outcome", std::string(cache::to_string(so.outcome))},
                  {"reason", cache_reason_text(so.explanation.reason)},
                  {"detail", so.explanation.text}}},
                {"compile_ms", so.compile_ms}};
  });
  d.add("execute", [s](const json& p, const CallContext& ctx) { return s->execute(p, ctx); });
  d.add("profile.list", [s](const json&, const CallContext& ctx) -> Expected<json> {
    std::optional<std::int64_t> owner;
    if (!s->shared()) owner = ctx.uid;
    FDO_TRY(std::vector<ps::ProfileSummary> list, s->store->list(owner));
    json out = json::array();
    for (const auto& p : list)
      out.push_back(ps::summary_to_json(p));
    return json{{"profiles", std::move(out)}};
  });
  d.add("profile.get", [s](const json& p, const CallContext& ctx) -> Expected<json> {
    FDO_TRY(std::string pk, require_param<std::string>(p, "profile_key"));
    FDO_TRY(std::int64_t version, optional_param<std::int64_t>(p, "version", 0));
    FDO_TRY_STATUS(s->check_profile_owner(pk, ctx.uid));
    FDO_TRY(std::optional<ps::StoredProfile> sp,
            version > 0 ? s->store->get(pk, version) : s->store->current(pk));
    if (!sp)
      return make_error(Errc::not_found,
                        version > 0 ? "profile " + pk + " has no version " + std::to_string(version)
                                    : "profile " + pk + " has no current version (reset)");
    return json{{"profile_key", pk},          {"version", sp->version},
                {"digest", sp->digest},       {"pinned", sp->pinned},
                {"reason", sp->reason},       {"created_at", rfc3339_ms(sp->created_at)},
                {"profile", to_json(sp->doc)}};
  });
  d.add("profile.history", [s](const json& p, const CallContext& ctx) -> Expected<json> {
    FDO_TRY(std::string pk, require_param<std::string>(p, "profile_key"));
    FDO_TRY_STATUS(s->check_profile_owner(pk, ctx.uid));
    FDO_TRY(std::vector<ps::StoredProfile> hist, s->store->history(pk));
    FDO_TRY(std::optional<ps::StoredProfile> cur, s->store->current(pk));
    json versions = json::array();
    for (const auto& v : hist)
      versions.push_back(ps::version_to_json(v));
    return json{{"profile_key", pk},
                {"pinned", !hist.empty() && hist.back().pinned},
                {"current_version", cur ? cur->version : 0},
                {"versions", std::move(versions)}};
  });
  auto pin_like = [s](const char* what) {
    return [s, what](const json& p, const CallContext& ctx) -> Expected<json> {
      FDO_TRY(std::string pk, require_param<std::string>(p, "profile_key"));
      FDO_TRY_STATUS(s->check_profile_owner(pk, ctx.uid));
      std::string op = what;
      if (op == "pin") {
        FDO_TRY_STATUS(s->store->pin(pk));
      } else if (op == "unpin") {
        FDO_TRY_STATUS(s->store->unpin(pk));
      } else {
        FDO_TRY_STATUS(s->store->reset(pk));
        std::lock_guard lk(s->feedback_mu);
        s->pk_state.erase(pk);
      }
      FDO_TRY(std::vector<ps::StoredProfile> hist, s->store->history(pk));
      FDO_TRY(std::optional<ps::StoredProfile> cur, s->store->current(pk));
      return json{{"profile_key", pk},
                  {"pinned", !hist.empty() && hist.back().pinned},
                  {"version", cur ? cur->version : 0}};
    };
  };
  d.add("profile.pin", pin_like("pin"));
  d.add("profile.unpin", pin_like("unpin"));
  d.add("profile.reset", pin_like("reset"));
  d.add("profile.export", [s](const json& p, const CallContext& ctx) -> Expected<json> {
    FDO_TRY(std::string format, optional_param<std::string>(p, "format", "json"));
    std::vector<std::string> pks;
    if (p.contains("profile_keys")) {
      if (!p["profile_keys"].is_array())
        return make_error(Errc::invalid_argument, "profile_keys must be an array of keys");
      for (const json& k : p["profile_keys"]) {
        if (!k.is_string())
          return make_error(Errc::invalid_argument, "profile_keys must hold strings");
        FDO_TRY_STATUS(s->check_profile_owner(k.get<std::string>(), ctx.uid));
        pks.push_back(k.get<std::string>());
      }
    } else {
      std::optional<std::int64_t> owner;
      if (!s->shared()) owner = ctx.uid;
      FDO_TRY(std::vector<ps::ProfileSummary> list, s->store->list(owner));
      for (const auto& sum : list)
        pks.push_back(sum.pk);
    }
    if (format == "json") {
      FDO_TRY(json bundle, s->store->export_bundle(pks));
      return json{{"format", "json"}, {"bundle", std::move(bundle)}};
    }
    if (format != "profdata")
      return make_error(Errc::invalid_argument, "format must be \"json\" or \"profdata\"");
    if (pks.size() != 1)
      return make_error(Errc::invalid_argument,
                        "profdata export takes exactly one profile key in profile_keys");
    FDO_TRY(std::optional<ps::StoredProfile> cur, s->store->current(pks[0]));
    if (!cur) return make_error(Errc::not_found, "profile " + pks[0] + " has no current version");
    FDO_TRY(std::string bytes, jit::indexed_profile(cur->doc));
    return json{
        {"format", "profdata"}, {"profile_key", pks[0]}, {"profdata_base64", base64_encode(bytes)}};
  });
  d.add("profile.import", [s](const json& p, const CallContext& ctx) -> Expected<json> {
    FDO_TRY(json bundle, require_param<json>(p, "bundle"));
    if (!bundle.is_object() || !bundle.contains("profiles") || !bundle["profiles"].is_array())
      return make_error(Errc::invalid_argument, "bundle must be an object made by profile.export");
    for (const json& entry : bundle["profiles"]) {
      std::string pk = entry.value("profile_key", entry.value("pk", ""));
      if (pk.empty()) continue;
      auto hist = s->store->history(pk);
      if (hist && !hist->empty() && !s->shared() && hist->front().owner != ctx.uid)
        return make_error(Errc::permission_denied,
                          "profile " + pk + " belongs to another tenant; not imported");
    }
    FDO_TRY(std::vector<ps::ImportedProfile> imported,
            s->store->import_bundle(bundle, ctx.uid, ps::ImportConflict::overwrite));
    json out = json::array();
    for (const auto& i : imported)
      out.push_back({{"profile_key", i.pk}, {"version", i.version}});
    return json{{"imported", std::move(out)}};
  });
  d.add("cache.stats",
        [s](const json&, const CallContext&) -> Expected<json> { return s->cache_stats_json(); });
  d.add("cache.explain", [s](const json& p, const CallContext& ctx) -> Expected<json> {
    FDO_TRY(std::string ik, require_param<std::string>(p, "program"));
    FDO_TRY(std::shared_ptr<ProgramRecord> rec, s->program_for(ik, ctx.uid));
    json records = json::array();
    for (const auto& r : s->orch->explain(ik))
      records.push_back({{"stage", r.sequence},
                         {"time", rfc3339_ms(r.unix_ms)},
                         {"outcome", std::string(cache::to_string(r.outcome))},
                         {"reason", cache_reason_text(r.reason)},
                         {"detail", r.text},
                         {"cache_key", r.ck},
                         {"storage_key", r.storage_key},
                         {"profile_version", r.to_version},
                         {"from_version", r.from_version},
                         {"mode", std::string(to_string(r.mode))},
                         {"compile_ms", r.compile_ms},
                         {"error", r.error}});
    return json{{"program", ik}, {"profile_key", rec->pk}, {"records", std::move(records)}};
  });
  d.add("metrics", [s](const json&, const CallContext&) -> Expected<json> {
    return json{{"text", s->metrics_text()}};
  });
}

} // namespace fdo::daemon
