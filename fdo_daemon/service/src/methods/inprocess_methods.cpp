// In-process execution (docs/runtimes.md): program.lease hands a runtime the
// program's current compiled output as a sealed memfd with the metadata its
// loader needs; feedback.submit folds what the runtime measured into the same
// feedback loop as exec-worker stages; program.release ends a lease. Leases
// belong to their connection (leases.h) and end with it.
//
// program.sample tells fdod which of the runtime's threads run the leased
// code and where the code lies; fdod samples those threads (lease_sampling.h)
// and folds the samples with the lease's next feedback.submit.
//
// Trust: the object is the tenant's own compiled output, which fdod would
// otherwise run for it in an exec worker; nothing of fdod's or of another
// tenant's is exposed. Everything feedback.submit carries is a number checked
// against the lease's layout before anything is folded. fdod samples only
// threads of the connection's own peer process (SO_PEERCRED).
#include "fdo/daemon/lease_sampling.h"
#include "fdo/daemon/leases.h"
#include "fdo/jit/compiler.h"
#include "fdo/util/value_json.h"
#include "methods.h"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace fdo::daemon::methods {

namespace {

constexpr std::size_t kMaxLeaseEntries = 256;
constexpr std::size_t kMaxBatchesPerSubmit = 64;
// Per batch: a count or time past these is not a measurement (2^56 calls of a
// nanosecond each is over two years), and capping them keeps the running
// sums far from overflow.
constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 56;
constexpr std::uint64_t kMaxExecNs = std::uint64_t{1} << 56;

// The object as a memfd no one can change: sealed against writes, growth and
// shrinking, and handed out through a read-only descriptor of the same file.
Expected<Fd> sealed_object(const std::string& bytes) {
  Fd fd(::memfd_create("fdo-lease-object", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return Error::from_errno("memfd_create", errno);
  FDO_TRY_STATUS(write_all(fd.get(), bytes));
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return Error::from_errno("fcntl(F_ADD_SEALS)", errno);
  // A read-only open of the same file; where /proc is not there the sealed
  // descriptor itself goes (its contents cannot change either way).
  const std::string self = "/proc/self/fd/" + std::to_string(fd.get());
  Fd ro(::open(self.c_str(), O_RDONLY | O_CLOEXEC));
  return ro ? std::move(ro) : std::move(fd);
}

Expected<std::vector<std::string>> entries_param(const json& params, const ProgramRecord& prog) {
  FDO_TRY(json list, require_param<json>(params, "entries"));
  if (!list.is_array() || list.empty() || list.size() > kMaxLeaseEntries)
    return make_error(Errc::invalid_argument, "entries must be an array of 1 to " +
                                                  std::to_string(kMaxLeaseEntries) +
                                                  " entry names");
  std::vector<std::string> out;
  for (const json& e : list) {
    if (!e.is_string())
      return make_error(Errc::invalid_argument, "entries must hold strings, got " + e.dump());
    FDO_TRY(jit::EntryInfo info, find_entry(prog, e.get<std::string>()));
    out.push_back(info.name);
  }
  return out;
}

Expected<std::uint64_t> lease_param(const json& params) {
  return require_param<std::uint64_t>(params, "lease");
}

// The storage keys whose objects the runtime has linked already (`loaded`,
// and the older `unless_storage_key`): for those no object is sent.
constexpr std::size_t kMaxLoaded = 8;
Expected<std::vector<std::string>> loaded_param(const json& params) {
  std::vector<std::string> out;
  FDO_TRY(std::string unless, optional_param<std::string>(params, "unless_storage_key", ""));
  if (!unless.empty()) out.push_back(std::move(unless));
  auto it = params.find("loaded");
  if (it == params.end() || it->is_null()) return out;
  if (!it->is_array() || it->size() > kMaxLoaded)
    return make_error(Errc::invalid_argument, "loaded must be an array of at most " +
                                                  std::to_string(kMaxLoaded) + " storage keys");
  for (const json& k : *it) {
    if (!k.is_string())
      return make_error(Errc::invalid_argument, "loaded must hold strings, got " + k.dump());
    out.push_back(k.get<std::string>());
  }
  return out;
}

// The comparable shape of an in-process stage (guard.h, stage_shape): the
// entries the runtime calls; a trial compares stages of one shape.
std::string inprocess_shape(const std::vector<std::string>& entries) {
  std::string shape = "inprocess";
  for (const std::string& e : entries)
    shape += " " + e;
  return shape;
}

Expected<json> program_lease(ServiceState& s, const json& params, const CallContext& ctx) {
  if (ctx.reply_fds == nullptr)
    return make_error(Errc::unsupported, "program.lease sends the object as a file descriptor "
                                         "(SCM_RIGHTS); this transport cannot carry one");
  for (auto it = params.begin(); it != params.end(); ++it)
    if (it.key() != "program" && it.key() != "entries" && it.key() != "unless_storage_key" &&
        it.key() != "loaded" && it.key() != "guard")
      return make_error(Errc::invalid_argument, "unknown parameter '" + it.key() + "'");
  FDO_TRY(std::string ik, require_param<std::string>(params, "program"));
  FDO_TRY(std::vector<std::string> loaded, loaded_param(params));
  FDO_TRY(bool guarded, optional_param<bool>(params, "guard", false));
  FDO_TRY(ProgramRef prog, s.programs->find(ik, ctx.uid, s.sharing()));
  FDO_TRY(std::vector<std::string> entries, entries_param(params, *prog));
  std::shared_ptr<const Config> cfg = s.config.get();
  if (std::chrono::steady_clock::now() >= ctx.deadline)
    return make_error(Errc::timeout, "request deadline passed before the lease started");
  const SamplingVerdict sampling =
      may_sample(s.sampling_host->access(), cfg->sampling, ctx.uid, ctx.pid);

  // Unguarded: exactly what an unguarded stage would serve now (same keys,
  // same tier-up). Guarded: one stage of the program's lifecycle, the variant
  // the guard plans for it (an arm of a trial, the incumbent), as execute
  // plans its stages (stage_start.cpp).
  std::optional<StageStart> start;
  if (guarded) {
    FDO_TRY(StageStart st, start_stage(s, prog, inprocess_shape(entries), *cfg));
    start = std::move(st);
  } else {
    FDO_TRY(cache::StageOutput so, s.orch->prepare(shared_program(prog), cfg->tier_up));
    start.emplace();
    start->so = std::move(so);
  }
  const cache::StageOutput& so = start->so;
  json out = {{"program", so.ik},
              {"profile_key", so.pk},
              {"profile_version", so.profile_version},
              {"target_profile_version", so.target_profile_version},
              {"storage_key", so.storage_key},
              {"cache_key", so.ck},
              {"mode", std::string(to_string(so.mode))},
              {"cache", cache_outcome_json(so)},
              {"sampling", {{"available", sampling.allowed}, {"reason", sampling.reason}}}};
  const bool have = std::find(loaded.begin(), loaded.end(), so.storage_key) != loaded.end();
  if (have && !guarded) {
    out["unchanged"] = true;
    out["lease"] = nullptr;
    return out;
  }
  FDO_TRY(StageMetadataRef meta, stage_metadata_of(*so.entry));

  ProgramLease lease;
  lease.uid = ctx.uid;
  lease.connection = ctx.connection;
  lease.program = prog;
  lease.pk = so.pk;
  lease.profile_version = so.profile_version;
  lease.target_profile_version = so.target_profile_version;
  lease.planned_digest = so.target_profile_digest;
  lease.served_digest = so.profile_digest;
  lease.served_mode = so.mode;
  lease.compile = compile_state_of(so);
  lease.storage_key = so.storage_key;
  lease.mode = std::string(to_string(so.mode));
  lease.entries = entries;
  lease.metadata = meta;
  lease.sampling_reason = sampling.reason;
  if (sampling.allowed)
    lease.sampling = std::make_shared<LeaseSampling>(s.sampling_host, ctx.pid, ctx.uid,
                                                     cfg->sampling, meta->compile);
  if (guarded) {
    const bool renew = renews(*start);
    out["variant"] = variant_json(start->plan);
    out["renew"] = renew;
    out["lifecycle"] = start->life.json_since_start();
    lease.guarded = std::make_shared<GuardedLease>(start->plan, start->life.entry, renew);
    // Ahead of need (docs/guard.md): the trial's other arm compiles in the
    // background, as for an execute stage.
    precompile(s, prog, start->plan.ahead);
  }

  std::optional<Fd> object;
  if (!have) {
    FDO_TRY(Fd fd, sealed_object(so.entry->object));
    object = std::move(fd);
  }
  FDO_TRY(LeaseRef ref, s.leases->add(std::move(lease), LeaseLimits{}));
  out["lease"] = ref->id;
  out["unchanged"] = have;
  out["entries"] = entries;
  out["object_size"] = so.entry->object.size();
  if (object) {
    ctx.reply_fds->push_back(std::move(*object));
    json layout = json::array();
    for (const auto& f : meta->compile.counters_layout)
      layout.push_back({{"function", f.pgo_name}, {"counters", f.num_counters}});
    out["fds"] = 1;
    out["counters_layout"] = std::move(layout);
    out["metadata"] = meta->json;
  } else {
    out["fds"] = 0;
  }
  return out;
}

// Per value site of a batch: more values than this is not what a table of
// the runtime's value profiling holds.
constexpr std::size_t kMaxValuesPerSite = 255;

Status check_sites(const std::vector<ValueSite>& sites, std::uint32_t layout_sites,
                   const std::string& where) {
  if (sites.size() > layout_sites)
    return make_error(Errc::invalid_argument, where + " has " + std::to_string(sites.size()) +
                                                  " sites; the lease's function has " +
                                                  std::to_string(layout_sites));
  for (const ValueSite& site : sites) {
    if (site.size() > kMaxValuesPerSite)
      return make_error(Errc::invalid_argument, where + ": a site lists more than " +
                                                    std::to_string(kMaxValuesPerSite) + " values");
    for (const auto& [value, count] : site)
      if (count > kMaxCount)
        return make_error(Errc::invalid_argument,
                          where + ": a count past the cap of " + std::to_string(kMaxCount));
  }
  return ok();
}

// A batch's value profiles (`values`: PGO name -> indirect_calls,
// memop_sizes, arg_values in a profile document's form, value_json.h),
// checked against the lease's layout: an instrumented function's, no more
// sites than it has, only the arguments it profiles.
Status batch_values(const json& values, const ProgramLease& lease, const std::string& at,
                    StageObservation& obs) {
  if (values.is_null()) return ok();
  if (!values.is_object())
    return make_error(Errc::invalid_argument, at + ".values must be an object");
  for (auto it = values.begin(); it != values.end(); ++it) {
    const std::string where = at + ".values['" + it.key() + "']";
    const jit::InstrumentedFunction* layout = nullptr;
    for (const jit::InstrumentedFunction& f : lease.metadata->compile.counters_layout)
      if (f.pgo_name == it.key()) layout = &f;
    if (layout == nullptr)
      return make_error(Errc::invalid_argument,
                        where + " is not an instrumented function of lease " +
                            std::to_string(lease.id) + " (see its counters_layout)");
    if (!it->is_object()) return make_error(Errc::invalid_argument, where + " must be an object");
    for (auto m = it->begin(); m != it->end(); ++m)
      if (m.key() != "indirect_calls" && m.key() != "memop_sizes" && m.key() != "arg_values")
        return make_error(Errc::invalid_argument,
                          where + " has an unknown member '" + m.key() + "'");
    jit::FunctionValueProfile v;
    FDO_TRY_STATUS(get_value_sites(*it, "indirect_calls", where, ValueText::hex, v.indirect_calls));
    FDO_TRY_STATUS(get_value_sites(*it, "memop_sizes", where, ValueText::number, v.memop_sizes));
    FDO_TRY_STATUS(get_arg_values(*it, where, v.arguments));
    FDO_TRY_STATUS(
        check_sites(v.indirect_calls, layout->indirect_call_sites, where + ".indirect_calls"));
    FDO_TRY_STATUS(check_sites(v.memop_sizes, layout->memop_sites, where + ".memop_sizes"));
    for (const ArgValues& a : v.arguments) {
      if (std::find(layout->arg_sites.begin(), layout->arg_sites.end(), a.arg) ==
          layout->arg_sites.end())
        return make_error(Errc::invalid_argument, where + ".arg_values: argument " +
                                                      std::to_string(a.arg) +
                                                      " is not one the lease's build profiles");
      FDO_TRY_STATUS(check_sites({a.values}, 1, where + ".arg_values"));
      if (a.other > kMaxCount)
        return make_error(Errc::invalid_argument, where + ".arg_values: a count past the cap of " +
                                                      std::to_string(kMaxCount));
    }
    obs.values.emplace(it.key(), std::move(v));
  }
  return ok();
}

// One batch of feedback.submit as the stage it observed, checked against the
// lease: every count belongs to an instrumented function of the leased output
// and has exactly its number of counters.
Expected<StageObservation> batch_observation(const json& b, const ProgramLease& lease,
                                             std::size_t index) {
  const std::string at = "batches[" + std::to_string(index) + "]";
  if (!b.is_object()) return make_error(Errc::invalid_argument, at + " must be an object");
  for (auto it = b.begin(); it != b.end(); ++it)
    if (it.key() != "calls" && it.key() != "exec_ns" && it.key() != "counts" &&
        it.key() != "values")
      return make_error(Errc::invalid_argument, at + " has an unknown member '" + it.key() + "'");
  FDO_TRY(std::uint64_t calls, require_param<std::uint64_t>(b, "calls"));
  FDO_TRY(std::uint64_t exec_ns, require_param<std::uint64_t>(b, "exec_ns"));
  if (calls == 0 || calls > kMaxCount)
    return make_error(Errc::invalid_argument,
                      at + ".calls must be 1.." + std::to_string(kMaxCount));
  if (exec_ns > kMaxExecNs)
    return make_error(Errc::invalid_argument,
                      at + ".exec_ns must be at most " + std::to_string(kMaxExecNs));
  StageObservation obs;
  obs.exec_ns = exec_ns;
  FDO_TRY(json counts, optional_param<json>(b, "counts", json::object()));
  if (!counts.is_object())
    return make_error(Errc::invalid_argument, at + ".counts must be an object");
  for (auto it = counts.begin(); it != counts.end(); ++it) {
    auto size = lease.metadata->counter_sizes.find(it.key());
    if (size == lease.metadata->counter_sizes.end())
      return make_error(Errc::invalid_argument,
                        at + ".counts names '" + it.key() +
                            "', which is not an instrumented function of lease " +
                            std::to_string(lease.id) + " (see its counters_layout)");
    if (!it->is_array() || it->size() != size->second)
      return make_error(Errc::invalid_argument, at + ".counts['" + it.key() +
                                                    "'] must be an array of " +
                                                    std::to_string(size->second) + " counts");
    std::vector<std::uint64_t>& fc = obs.counts[it.key()];
    fc.reserve(size->second);
    for (const json& v : *it) {
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
        return make_error(Errc::invalid_argument, at + ".counts['" + it.key() + "'] holds " +
                                                      v.dump() + ", not a non-negative integer");
      auto n = v.get<std::uint64_t>();
      if (n > kMaxCount)
        return make_error(Errc::invalid_argument, at + ".counts['" + it.key() + "'] holds " +
                                                      v.dump() + ", past the cap of " +
                                                      std::to_string(kMaxCount));
      fc.push_back(n);
    }
  }
  FDO_TRY_STATUS(batch_values(b.value("values", json(nullptr)), lease, at, obs));
  return obs;
}

// A guarded lease's stage told to the guard, once (its first submit): the
// mean time per call of the submit's batches, in picoseconds (a trial compares
// ratios; nanoseconds per call would round a small entry's away), on both
// clocks (the runtime measures its calls one way). Returns the lease's
// `variant` with what the guard made of the stage.
json guarded_stage(ServiceState& s, const ProgramLease& lease, std::uint64_t calls,
                   std::uint64_t exec_ns, std::int64_t stage, const Config& cfg) {
  GuardedLease& g = *lease.guarded;
  json variant = variant_json(g.plan);
  if (g.recorded.exchange(true)) {
    variant["trial"] = g.plan.kind == GuardPlanKind::trial
                           ? json("counted at the lease's first submit; lease again for the next")
                           : json(nullptr);
    return variant;
  }
  // calls >= 1 (each batch's); a per-call time past 2^64 ps is 213 days.
  const long double ps =
      static_cast<long double>(exec_ns) * 1000.0L / static_cast<long double>(calls);
  const std::uint64_t per_call =
      ps >= 1.8e19L ? std::uint64_t{1} << 63 : static_cast<std::uint64_t>(ps);
  GuardStage gs = s.guard->record(g.plan, lease.served_digest, {per_call, per_call}, stage,
                                  lease.program->ik, lease.program->owner, cfg.guard);
  if (gs.ended && g.life) {
    std::lock_guard lk(g.life->mu);
    g.life->lc.trial_ended(*gs.ended, gs.version, stage, gs.note, std::chrono::system_clock::now());
  }
  variant["counted"] = gs.counted;
  if (!gs.note.empty()) variant["trial"] = gs.note;
  return variant;
}

Expected<ResultText> feedback_submit(ServiceState& s, const json& params, const CallContext& ctx) {
  FDO_TRY(std::uint64_t id, lease_param(params));
  FDO_TRY(LeaseRef lease, s.leases->find(id, ctx.uid, ctx.connection));
  FDO_TRY(json batches, require_param<json>(params, "batches"));
  if (!batches.is_array() || batches.empty() || batches.size() > kMaxBatchesPerSubmit)
    return make_error(Errc::invalid_argument, "batches must be an array of 1 to " +
                                                  std::to_string(kMaxBatchesPerSubmit) +
                                                  " batches");
  // All checked before any is folded: a rejected submit changes nothing.
  std::vector<StageObservation> checked;
  checked.reserve(batches.size());
  for (std::size_t i = 0; i < batches.size(); ++i) {
    FDO_TRY(StageObservation obs, batch_observation(batches[i], *lease, i));
    checked.push_back(std::move(obs));
  }
  std::shared_ptr<const Config> cfg = s.config.get();
  // What fdod sampled on the runtime's threads since the last submit goes
  // with this submit's last batch, as an exec worker's samples go with its
  // stage.
  std::optional<StageObservation> sampled =
      lease->sampling ? lease->sampling->drain() : std::nullopt;
  json rewritten = nullptr;
  std::string policy;
  std::uint64_t calls = 0, exec_ns = 0;
  std::int64_t last_stage = 0;
  StageSamples samples;
  for (std::size_t i = 0; i < checked.size(); ++i) {
    calls += batches[i]["calls"].get<std::uint64_t>();
    exec_ns += checked[i].exec_ns;
    StageReport report;
    report.pk = lease->pk;
    report.program = lease->program->ik;
    report.owner = lease->program->owner;
    report.stage = lease->program->stages.fetch_add(1);
    last_stage = report.stage;
    report.profile_version = lease->profile_version;
    report.target_profile_version = lease->target_profile_version;
    report.run.planned_digest = lease->planned_digest;
    report.run.served_digest = lease->served_digest;
    report.run.served_mode = lease->served_mode;
    report.run.compile = lease->compile;
    report.run.trial = lease->guarded && lease->guarded->plan.kind == GuardPlanKind::trial;
    report.metadata = lease->metadata;
    StageObservation& obs = checked[i];
    if (i + 1 == checked.size() && sampled) {
      obs.samples = std::move(sampled->samples);
      obs.function_ranges = std::move(sampled->function_ranges);
    }
    observe(report, obs);
    if (obs.samples) samples = report.samples;
    FeedbackOutcome fo = s.feedback->fold(report, cfg->policy, lifecycle_config(*cfg));
    policy = fo.policy;
    if (fo.rewritten)
      rewritten = {
          {"from", fo.rewritten->from}, {"to", fo.rewritten->to}, {"reason", fo.rewritten->reason}};
  }
  s.counters.inprocess_batches += checked.size();
  json variant = nullptr;
  if (lease->guarded) variant = guarded_stage(s, *lease, calls, exec_ns, last_stage, *cfg);
  if (!rewritten.is_null())
    after_rewrite(s, lease->program, *cfg, lease->guarded ? GuardAhead::ask : GuardAhead::skip);
  FDO_TRY(auto current, s.feedback_store->current(lease->pk));
  const std::int64_t version = current ? current->version : 0;
  // Written as text, as execute's reply is: a runtime submits often.
  JsonText t;
  t.begin_object()
      .field("lease", lease->id)
      .field("variant", variant)
      .field("renew", lease->guarded ? lease->guarded->renew : false)
      .field("accepted", checked.size())
      .field("calls", calls)
      .field("profile_version", version)
      .field("leased_profile_version", lease->profile_version)
      .field("stale", version != lease->profile_version)
      .field("profile_rewritten", rewritten)
      .field("policy", policy)
      .key("samples");
  write_samples_summary(t, samples, sampled ? &*checked.back().samples : nullptr, false);
  t.end_object();
  return ResultText{std::move(t).take()};
}

// The runtime's threads that run the leased code and where its loader put
// that code: fdod starts sampling them (lease_sampling.h). `pid` must be the
// connection's own peer process.
Expected<json> program_sample(ServiceState& s, const json& params, const CallContext& ctx) {
  FDO_TRY(std::uint64_t id, lease_param(params));
  FDO_TRY(LeaseRef lease, s.leases->find(id, ctx.uid, ctx.connection));
  FDO_TRY(std::int64_t pid, require_param<std::int64_t>(params, "pid"));
  for (auto it = params.begin(); it != params.end(); ++it)
    if (it.key() != "lease" && it.key() != "pid" && it.key() != "threads" && it.key() != "ranges")
      return make_error(Errc::invalid_argument, "unknown parameter '" + it.key() + "'");
  if (ctx.pid <= 0 || pid != ctx.pid)
    return make_error(Errc::permission_denied,
                      "pid " + std::to_string(pid) +
                          " is not the process at the other end of this connection" +
                          (ctx.pid > 0 ? " (pid " + std::to_string(ctx.pid) + ")" : "") +
                          "; fdod samples only the threads of the process that connected");
  if (!lease->sampling)
    return json{{"lease", lease->id},
                {"sampling", {{"available", false}, {"reason", lease->sampling_reason}}}};
  if (auto r = params.find("ranges"); r != params.end()) {
    FDO_TRY_STATUS(lease->sampling->set_ranges(*r));
  }
  if (auto t = params.find("threads"); t != params.end()) {
    FDO_TRY_STATUS(lease->sampling->add_threads(*t));
  }
  return json{{"lease", lease->id}, {"sampling", lease->sampling->state()}};
}

Expected<json> program_release(ServiceState& s, const json& params, const CallContext& ctx) {
  FDO_TRY(std::uint64_t id, lease_param(params));
  FDO_TRY(LeaseRef lease, s.leases->release(id, ctx.uid, ctx.connection));
  return json{{"lease", lease->id}, {"released", true}};
}

} // namespace

void add_inprocess_methods(Dispatcher& d, ServiceState& s) {
  bind(d, "program.lease", s, program_lease);
  bind(d, "feedback.submit", s, feedback_submit);
  bind(d, "program.release", s, program_release, MethodClass::control);
  bind(d, "program.sample", s, program_sample);
  d.on_disconnect([&s](std::uint64_t connection) {
    if (std::size_t n = s.leases->release_connection(connection))
      log::debug("connection " + std::to_string(connection) + " closed: " + std::to_string(n) +
                 " in-process lease(s) released");
  });
}

} // namespace fdo::daemon::methods
