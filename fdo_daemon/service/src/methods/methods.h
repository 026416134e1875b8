// The JSON-RPC methods (docs/fdod.md, schemas/methods/), one named handler per
// method, grouped by family. Each add_* registers its family's handlers.
#pragma once

#include "../state.h"
#include "fdo/daemon/jsonrpc.h"
#include "fdo/util/json_text.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

namespace fdo::daemon::methods {

using nlohmann::json;

// health, capabilities, metrics, config
void add_status_methods(Dispatcher& d, ServiceState& s);
// program.register, program.compile, execute
void add_program_methods(Dispatcher& d, ServiceState& s);
// profile.list, profile.get, profile.history, profile.pin, profile.unpin,
// profile.reset, profile.export, profile.import
void add_profile_methods(Dispatcher& d, ServiceState& s);
// cache.stats, cache.explain
void add_cache_methods(Dispatcher& d, ServiceState& s);
// program.list, program.delete, profile.delete
void add_lifecycle_methods(Dispatcher& d, ServiceState& s);
// gc, store.restore (maintenance_methods.cpp)
void add_maintenance_methods(Dispatcher& d, ServiceState& s);
// program.lease, feedback.submit, program.release, and the disconnect hook
// that ends a connection's leases (inprocess_methods.cpp)
void add_inprocess_methods(Dispatcher& d, ServiceState& s);
// program.source (program_source_method.cpp)
void add_program_source_method(Dispatcher& d, ServiceState& s);
// hello: the protocol handshake (handshake_methods.cpp)
void add_handshake_methods(Dispatcher& d, ServiceState& s);

// --- shared by the families ---------------------------------------------

// A program named by "program" (an id) or submitted inline ("ir" / "ir_base64",
// registered on the way).
Expected<ProgramRef> program_param(ServiceState& s, const json& params, const CallContext& ctx);
// The IR of a request: "ir" (text) or "ir_base64" (text or bitcode).
Expected<std::string> program_source(const json& params);
// Root and the daemon's own uid: operators, who can read the state dir
// anyway (config, and gc over every tenant's data).
inline bool is_operator(const CallContext& ctx) {
  return ctx.uid == 0 || ctx.uid == ::geteuid();
}
// The entry `name` of a program, or Errc::not_found listing its entries.
Expected<jit::EntryInfo> find_entry(const ProgramRecord& p, const std::string& name);
// The "cache" object of a stage: outcome, reason, detail. Written as text
// for the replies that are (execute); the tree is parsed from that text.
void write_cache_outcome(JsonText& t, const cache::StageOutput& so);
json cache_outcome_json(const cache::StageOutput& so);

// The service's running totals as Prometheus families, read at scrape time
// (status_methods.cpp; ServiceMetrics serves them with its own).
std::vector<prometheus::MetricFamily> live_metrics(ServiceState& s);

// The lifecycle of one stage's program (lifecycle.h), asked at the start
// and told what happened after; no entry before the program's first compile.
struct StageLife {
  std::shared_ptr<LifecycleTable::Entry> entry;
  std::uint64_t transitions_before = 0; // ProgramLifecycle::transitions() at the start
  StageDirective directive;
  // {"phase", "transitions": [what the stage moved]}; null without an entry.
  void write_since_start(JsonText& t) const;
  json json_since_start() const;
};
// What a stage runs, planned and prepared (stage_start.cpp).
struct StageStart {
  StageLife life;
  StagePlan plan;
  cache::StageOutput so;
};
// The lifecycle's directive, the guard's plan where it may plan, the build
// looked up or compiled (the plain build when the planned one does not
// compile).
Expected<StageStart> start_stage(ServiceState& s, const ProgramRef& prog, const std::string& shape,
                                 const Config& c);
// Where the planned build's compile stood when the stage was served
// (lifecycle.h): none when it ran what it asked for.
CompileState compile_state_of(const cache::StageOutput& so);
// Which variant a stage ran and why (stage.variant in
// schemas/execute.result.schema.json; feedback.submit's `variant`).
// `counted` and `trial` (null when empty) say what the guard made of the stage.
void write_variant(JsonText& t, const StagePlan& plan, bool counted = false,
                   std::string_view trial = {});
json variant_json(const StagePlan& plan);
// Compiles `build` (a plan's or the guard's `ahead`) in the background.
void precompile(ServiceState& s, const ProgramRef& prog,
                const std::optional<cache::ProfileRef>& build);
// After a stage whose feedback rewrote the profile (docs/cache.md,
// "Tier-up"): under tier_up = async, the new profile's build, queued as a
// stage's tier-up (Orchestrator::tier_up_current); then the guard's build for
// the new version ahead of need, behind it. Under sync the next stage
// compiles the new build itself (and waits if the guard's build holds the
// only compile worker: see docs/cache.md).
// `guard`: whether to ask the guard for its build (an unguarded lease does not).
enum class GuardAhead : std::uint8_t { ask, skip };
void after_rewrite(ServiceState& s, const ProgramRef& prog, const Config& c,
                   GuardAhead guard = GuardAhead::ask);
// Whether the stage after this one may be planned otherwise (a trial's next
// arm, the lifecycle's next step, the planned build once compiled): a
// guarded lease asks its runtime to lease again after its first submit.
bool renews(const StageStart& start);

// The execute method (execute.cpp): one stage, its reply written as text.
Expected<ResultText> execute(ServiceState& s, const json& params, const CallContext& ctx);
// One stage of an NVPTX program (execute_gpu.cpp, docs/gpu.md): `entry` is a
// kernel, launched on the host's GPU.
Expected<json> execute_gpu(ServiceState& s, const json& params, const CallContext& ctx,
                           const ProgramRecord& prog, const Signature& kernel);
// An entry's ABI types as the call's (execute.cpp).
Expected<Signature> signature_of(const jit::EntryInfo& e);
// "buffer_encoding": how returned buffers are written (execute.cpp).
Expected<BufferEncoding> buffer_encoding_param(const json& params);
// What a job printed, for a reply's "output" (execute.cpp).
void write_output(JsonText& t, const JobOutput& o);
json output_json(const JobOutput& o);

// What a stage's sampling saw, for a reply (execute.cpp): null when `raw`
// (an exec worker's, or in-process samples in the same form) is null.
void write_samples_summary(JsonText& t, const StageSamples& samples, const StageSampleReport* raw,
                           bool verbose);
// A stage's counters for its reply (stage.counters; execute.cpp).
void write_measurement(JsonText& t, const perf::Measurement& m, bool verbose);

// A state-changing handler that leaves an audit record, allowed or refused
// (audit.h): pin, unpin, reset and the deletes name their key or program; an
// import leaves one record per imported profile, or one naming no key when
// it was refused.
template <class Fn> auto audited(const char* action, Fn fn) {
  return [action, fn](ServiceState& s, const json& p, const CallContext& ctx) -> Expected<json> {
    Expected<json> r = fn(s, p, ctx);
    AuditRecord rec;
    rec.action = action;
    rec.tenant = static_cast<std::uint32_t>(ctx.uid);
    if (p.is_object() && p.contains("profile_key") && p["profile_key"].is_string())
      rec.profile_key = p["profile_key"].get<std::string>();
    if (p.is_object() && p.contains("program") && p["program"].is_string())
      rec.program = p["program"].get<std::string>();
    if (!r) {
      rec.outcome = std::string(to_string(r.error().code()));
      rec.detail = r.error().message();
      s.audit->record(rec);
      return r;
    }
    rec.outcome = "ok";
    if (r->contains("imported")) {
      for (const json& i : (*r)["imported"]) {
        rec.profile_key = i.value("profile_key", "");
        rec.detail = "new version " + std::to_string(i.value("version", std::int64_t(0)));
        s.audit->record(rec);
      }
      return r;
    }
    if (r->contains("removed"))
      rec.detail = "removed " + (*r)["removed"].dump();
    else
      rec.detail = "version " + r->value("version", json(nullptr)).dump() +
                   ((*r).value("pinned", false) ? ", pinned" : ", not pinned");
    s.audit->record(rec);
    return r;
  };
}

// A handler that reads or changes the profile store itself, not through
// StoreFallback's last-known answers and spool (profile.*, program.list and
// the deletes, gc, store.restore): while a shared store is unreachable it
// fails with Errc::unavailable, and this says so and what to do instead of
// passing on the connection error alone (docs/fleet.md, "When the profile
// store is down").
template <class Fn> auto store_direct(const char* method, Fn fn) {
  return [method, fn](ServiceState& s, const json& p, const CallContext& ctx) -> Expected<json> {
    Expected<json> r = fn(s, p, ctx);
    if (r || r.error().code() != Errc::unavailable || !s.fallback) return r;
    return make_error(
        Errc::unavailable,
        std::string(method) + " needs the shared profile store, which is unreachable (" +
            r.error().message() + "). Stages are still served and their feedback is spooled, but " +
            method +
            " is not: retry once `fdoctl health` shows the profile store "
            "up");
  };
}

// Binds a handler of the form `Expected<json> fn(ServiceState&, const json&,
// const CallContext&)` (or `Expected<ResultText>`, a result written as text)
// to the dispatcher. MethodClass::control only for methods that never wait on
// a worker, the store or a compile (the server runs them on its small control
// pool).
template <class Fn>
void bind(Dispatcher& d, const char* method, ServiceState& s, Fn fn,
          MethodClass method_class = MethodClass::work,
          RequestFds request_fds = RequestFds::refused) {
  using R = std::invoke_result_t<Fn, ServiceState&, const json&, const CallContext&>;
  if constexpr (std::is_same_v<R, Expected<ResultText>>)
    d.add_text(
        method,
        [&s, fn](const json& params, const CallContext& ctx) -> Expected<ResultText> {
          return fn(s, params, ctx);
        },
        method_class, request_fds);
  else
    d.add(
        method,
        [&s, fn](const json& params, const CallContext& ctx) -> Expected<json> {
          return fn(s, params, ctx);
        },
        method_class, request_fds);
}

} // namespace fdo::daemon::methods
