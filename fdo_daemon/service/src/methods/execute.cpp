// execute: one stage of a program (design.md section 2, step 4): prepare the
// call, resolve the compiled output through the cache, run it in an exec
// worker, fold the measurements into the profile, reply.
#include "fdo/daemon/abi.h"
#include "fdo/daemon/exec_messages.h"
#include "fdo/daemon/guard.h"
#include "fdo/daemon/isolation.h"
#include "fdo/daemon/memfd_buffers.h"
#include "fdo/daemon/stage_metadata.h"
#include "fdo/jit/compiler.h"
#include "fdo/util/json_text.h"
#include "fdo/util/log_record.h"
#include "methods.h"

namespace fdo::daemon::methods {

Expected<jit::EntryInfo> find_entry(const ProgramRecord& p, const std::string& name) {
  for (const auto& e : p.entries)
    if (e.name == name) return e;
  std::string known;
  for (const auto& e : p.entries)
    known += (known.empty() ? "" : ", ") + e.name;
  return make_error(Errc::not_found, "program " + p.ik.substr(0, 12) + " has no entry '" + name +
                                         "' (entries: " + (known.empty() ? "none" : known) + ")");
}

namespace {

Expected<ScalarType> scalar_of(const std::string& text) {
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
  return make_error(Errc::internal, "unknown ABI kind for '" + text + "'");
}

} // namespace

Expected<Signature> signature_of(const jit::EntryInfo& e) {
  Signature sig;
  sig.name = e.name;
  FDO_TRY(sig.ret, scalar_of(e.return_type));
  for (const auto& p : e.param_types) {
    FDO_TRY(ScalarType t, scalar_of(p));
    sig.params.push_back(t);
  }
  return sig;
}

Expected<BufferEncoding> buffer_encoding_param(const json& params) {
  FDO_TRY(std::string encoding, optional_param<std::string>(params, "buffer_encoding", "array"));
  if (encoding == "array") return BufferEncoding::array;
  if (encoding == "base64") return BufferEncoding::base64;
  return make_error(Errc::invalid_argument, "buffer_encoding must be \"array\" or \"base64\"");
}

namespace {

// Whether an exec job carries the compiled object (and its metadata) or only
// names it by storage key for a worker that holds it linked.
enum class ObjectSend { attached, by_key };

// Whether the job asks the worker for the object's function ranges: until the
// entry's metadata knows its functions (StageMetadata::functions_with_code).
enum class RangesWanted { ask, known };

// The exec job (exec_messages.h): only what the call needs. The object and
// its metadata travel only when attached: a worker keeps linked programs by key.
// A buffer that came as a memfd (buffer_fds[i] >= 0, checked and sealed:
// memfd_buffers.h) is passed on as that descriptor, not copied into the job.
Expected<Message> exec_request(const cache::StageOutput& so, const std::string& entry,
                               const PreparedCall& call, std::span<const int> buffer_fds,
                               bool return_buffers, bool verbose, ObjectSend send,
                               RangesWanted ranges, const Config& c) {
  ExecJob job;
  job.key = so.storage_key;
  job.entry = entry;
  job.slots = call.slots;
  job.buffer_of_param.assign(call.buffer_of_param.begin(), call.buffer_of_param.end());
  job.return_buffers = return_buffers;
  job.verbose = verbose;
  job.events = c.perf_events;
  job.cache_entries = c.exec_object_cache_entries;
  if (c.sampling.frequency_hz != 0) {
    job.sampling =
        StageSamplingRequest{c.sampling.events, c.sampling.frequency_hz, c.sampling.max_samples};
    // The object's function ranges are the same every stage.
    job.function_ranges = ranges == RangesWanted::ask;
  }
  if (send == ObjectSend::attached) {
    job.object_size = so.entry->object.size();
    job.metadata = so.entry->metadata;
  }
  std::vector<int> fds;
  std::string buffer_bytes;
  for (std::size_t i = 0; i < call.buffers.size(); ++i) {
    const Buffer& b = call.buffers[i];
    ExecBufferSpec spec{b.bytes.size(), std::nullopt};
    if (i < buffer_fds.size() && buffer_fds[i] >= 0) {
      spec.fd = static_cast<std::uint32_t>(fds.size());
      fds.push_back(buffer_fds[i]);
    } else {
      buffer_bytes += b.bytes;
    }
    job.buffers.push_back(spec);
  }
  FDO_TRY(Message req, exec_job_message(job));
  if (send == ObjectSend::attached) req.payload += so.entry->object;
  req.payload += buffer_bytes;
  req.fds = std::move(fds);
  return req;
}

// What an exec job answered: the stage, or (the pool's own answer) that the
// program ended its worker with exit(n) from another thread.
struct ExecResult {
  std::optional<StageObservation> observation;
  int exited_worker = 0; // the status, when observation is empty
  std::string returned;  // the returned buffers' bytes
};

// Runs the stage in an exec worker: by key first when workers keep linked
// programs (a program with writable globals too: the worker restarts it,
// worker_jobs.h), then, if the worker that took it does not hold the key,
// once more with the object.
Expected<ExecResult> run_exec(ServiceState& s, const cache::StageOutput& so, RangesWanted ranges,
                              const std::string& entry, const PreparedCall& call,
                              std::span<const int> buffer_fds, bool return_buffers, bool verbose,
                              const JobOptions& options, const Config& c, JobOutput* output) {
  ObjectSend send = c.exec_object_cache_entries == 0 ? ObjectSend::attached : ObjectSend::by_key;
  // The reply's typed body is decoded once, by the pool's check before the
  // worker is trusted with another job: a malformed one is the worker
  // breaking the protocol (killed and replaced, the stage fails).
  std::optional<ExecReply> decoded;
  std::size_t rest = 0; // where the returned buffers start in the payload
  JobOptions checked = options;
  checked.check_reply = [&](const Message& m) -> Status {
    FDO_TRY(Decoded<ExecReply> d, exec_reply_of(m));
    rest = m.payload.size() - d.rest.size();
    decoded = std::move(d.value);
    return ok();
  };
  for (;;) {
    FDO_TRY(Message job,
            exec_request(so, entry, call, buffer_fds, return_buffers, verbose, send, ranges, c));
    decoded.reset();
    FDO_TRY(Message resp, s.exec_pool->run(job, checked, output));
    if (auto exited = resp.header.find("exited"); exited != resp.header.end())
      return ExecResult{std::nullopt, exited->value("status", 0), {}};
    if (!decoded) { // a runner that does not check replies (a test's)
      if (Status st = checked.check_reply(resp); !st)
        return std::move(st).error().context("exec worker sent a malformed reply");
    }
    ExecReply& reply = *decoded;
    if (reply.outcome == ExecOutcome::ran)
      return ExecResult{std::move(reply.observation), 0, resp.payload.substr(rest)};
    if (send == ObjectSend::attached)
      return make_error(Errc::internal,
                        "exec worker asked for the object of " + so.storage_key + " it was sent");
    send = ObjectSend::attached;
    if (output != nullptr) *output = JobOutput{};
  }
}

// Buffers larger than this go back as base64 even when arrays were asked
// for: an array costs ~20 bytes of JSON per element in the reply (and far more
// while it is built), base64 costs 1.34 bytes per byte.
constexpr std::size_t kMaxArrayBufferBytes = 256 * 1024;

Expected<json> returned_buffers(const StageObservation& obs, std::string_view bytes,
                                const PreparedCall& call, BufferEncoding encoding) {
  json out = json::array();
  std::size_t off = 0;
  const std::vector<std::uint64_t>& sizes = obs.buffer_sizes;
  for (std::size_t i = 0; i < sizes.size() && i < call.buffers.size(); ++i) {
    if (sizes[i] > bytes.size() - off)
      return make_error(Errc::internal, "exec worker returned short buffers");
    Buffer b{call.buffers[i].elem, std::string(bytes.substr(off, sizes[i]))};
    off += sizes[i];
    out.push_back(buffer_to_json(b, b.bytes.size() > kMaxArrayBufferBytes ? BufferEncoding::base64
                                                                          : encoding));
  }
  return out;
}

// Program output as JSON text: valid UTF-8 kept, anything else replaced by U+FFFD.
std::string as_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    auto c = static_cast<unsigned char>(bytes[i]);
    std::size_t len = c < 0x80           ? 1
                      : (c >> 5) == 0x6  ? 2
                      : (c >> 4) == 0xe  ? 3
                      : (c >> 3) == 0x1e ? 4
                                         : 0;
    bool valid = len != 0 && i + len <= bytes.size();
    for (std::size_t k = 1; valid && k < len; ++k)
      valid = (static_cast<unsigned char>(bytes[i + k]) & 0xc0) == 0x80;
    if (valid && len > 1) {
      // Overlong forms and surrogates are not UTF-8 either.
      std::uint32_t cp = c & (0x7f >> len);
      for (std::size_t k = 1; k < len; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(bytes[i + k]) & 0x3f);
      const std::uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
      valid = cp >= min[len] && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
    }
    if (valid) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

} // namespace

void write_output(JsonText& t, const JobOutput& o) {
  t.begin_object()
      .field("stdout", as_text(o.out))
      .field("stderr", as_text(o.err))
      .field("truncated", o.truncated)
      .end_object();
}

json output_json(const JobOutput& o) {
  JsonText t;
  write_output(t, o);
  return json::parse(t.text());
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

// What the stage's sampling saw, for the reply: the events as the worker
// opened them, and clock samples per function (PGO names) and outside the
// program's code. null when the stage was not sampled. Unless `verbose`, the
// events without their reason text (capabilities.perf has it once).
void write_samples_summary(JsonText& t, const StageSamples& samples, const StageSampleReport* raw,
                           bool verbose) {
  if (raw == nullptr) {
    t.null();
    return;
  }
  t.begin_object().key("events").begin_array();
  for (const perf::SamplerEvent& e : raw->events) {
    if (verbose) {
      t.value(perf::to_json(e));
      continue;
    }
    t.begin_object()
        .field("name", e.name)
        .field("status", to_string(e.status))
        .field("errno", e.error)
        .field("branch_stack", e.branch_stack)
        .end_object();
  }
  t.end_array()
      .field("recorded", raw->recorded)
      .field("attributed", raw->attributed)
      .field("lost_samples", raw->lost_samples);
  if (samples.clock_event.empty())
    t.null_field("clock_event");
  else
    t.field("clock_event", samples.clock_event);
  t.field("outside_jit", samples.clock_outside).key("functions").begin_object();
  for (const auto& [fn, n] : samples.clock)
    t.field(fn, n);
  t.end_object();
  if (!raw->error.empty()) t.field("error", raw->error);
  t.end_object();
}

// The stage's counters for the reply (stage.counters). Unless `verbose`,
// without the per-event explanations (the same text every stage: "no PMU
// ..."), which capabilities reports once, and an event that did not count is
// only its name, status and errno (its counts and times are all zero).
void write_measurement(JsonText& t, const perf::Measurement& m, bool verbose) {
  if (verbose) {
    t.value(perf::to_json(m));
    return;
  }
  t.begin_object().key("events").begin_array();
  for (const perf::EventReading& e : m.events) {
    t.begin_object()
        .field("name", e.name)
        .field("status", to_string(e.status))
        .field("errno", e.error);
    if (e.value) {
      t.field("value", *e.value)
          .field("raw", e.raw)
          .field("enabled_ns", e.enabled_ns)
          .field("running_ns", e.running_ns)
          .field("running_ratio", e.running_ratio)
          .field("multiplexed", e.multiplexed);
    } else {
      t.null_field("value");
    }
    t.end_object();
  }
  t.end_array();
  if (m.task_clock_ns)
    t.field("task_clock_ns", *m.task_clock_ns);
  else
    t.null_field("task_clock_ns");
  t.field("thread_cpu_ns", m.thread_cpu_ns)
      .field("process_cpu_ns", m.process_cpu_ns)
      .field("wall_ns", m.wall_ns)
      .field("read_method", to_string(m.method))
      .end_object();
}

namespace {

// One stage in fdod's log (journald fields under systemd): finished stages at
// debug, failed ones at info, each naming its program, profile and tenant.
void stage_record(log::Level level, const std::string& what, const cache::StageOutput& so,
                  std::int64_t number, const CallContext& ctx) {
  if (!log::enabled(level)) return; // every stage comes here: build nothing for nothing
  const std::string stage = std::to_string(number), tenant = std::to_string(ctx.uid),
                    version = std::to_string(so.profile_version);
  log::record(level,
              "stage " + stage + " of program " + so.ik.substr(0, 12) + " (uid " + tenant +
                  "): " + what,
              {{"FDO_STAGE", stage},
               {"FDO_PROGRAM", so.ik},
               {"FDO_PROFILE_KEY", so.pk},
               {"FDO_PROFILE_VERSION", version},
               {"FDO_TENANT_UID", tenant},
               {"FDO_MODE", to_string(so.mode)},
               {"FDO_CACHE", cache::to_string(so.outcome)}});
}

} // namespace

Expected<ResultText> execute(ServiceState& s, const json& params, const CallContext& ctx) {
  FDO_TRY(std::string entry_name, require_param<std::string>(params, "entry"));
  FDO_TRY(ProgramRef prog, program_param(s, params, ctx));
  FDO_TRY(jit::EntryInfo entry, find_entry(*prog, entry_name));
  FDO_TRY(Signature sig, signature_of(entry));
  if (prog->target == ProgramTarget::nvptx) {
    FDO_TRY(json reply, execute_gpu(s, params, ctx, *prog, sig));
    JsonText t;
    t.value(reply);
    return ResultText{std::move(t).take()};
  }
  std::shared_ptr<const Config> cfg = s.config.get();
  const Config& c = *cfg;
  json buffers_param = params.contains("buffers") ? params["buffers"] : json(nullptr);
  CallLimits call_limits;
  call_limits.max_buffer_bytes = c.max_output_bytes / 2;
  // memfd buffers (docs/fdod-protocol.md): checked and read before the call
  // is prepared, so a bad descriptor fails the request before any work.
  std::vector<std::string> attached;
  if (ctx.request_fds != nullptr && !ctx.request_fds->empty()) {
    FDO_TRY(attached, read_memfd_buffers(*ctx.request_fds, call_limits.max_buffer_bytes));
  }
  FDO_TRY(PreparedCall call, prepare_call(sig, params.value("args", json::array()), buffers_param,
                                          call_limits, attached));
  // Which buffers came as memfds: those descriptors go on to the exec worker
  // (prepare_call checked every index and that each is used).
  std::vector<int> buffer_fds;
  if (!attached.empty())
    for (const json& b : buffers_param) {
      auto k = b.find("memfd");
      buffer_fds.push_back(k == b.end() ? -1 : (*ctx.request_fds)[k->get<std::size_t>()].get());
    }
  FDO_TRY(bool return_buffers, optional_param<bool>(params, "return_buffers", false));
  FDO_TRY(BufferEncoding encoding, buffer_encoding_param(params));
  FDO_TRY(bool verbose, optional_param<bool>(params, "verbose", false));
  if (std::chrono::steady_clock::now() >= ctx.deadline)
    return make_error(Errc::timeout, "request deadline passed before the stage started");

  const auto stage_started = std::chrono::steady_clock::now();
  // The program's lifecycle says what the stage does; the guard picks the
  // variant where it may (docs/lifecycle.md, docs/guard.md); the orchestrator
  // looks it up or compiles it like any profile.
  auto started_stage = start_stage(s, prog, stage_shape(entry_name, call), c);
  if (!started_stage) {
    s.counters.tenants.prepare_failed(ctx.uid);
    return std::move(started_stage).error();
  }
  StageStart& start = *started_stage;
  const StagePlan& plan = start.plan;
  cache::StageOutput& so = start.so;
  std::int64_t stage_number = prog->stages.fetch_add(1);
  ++s.counters.stages;
  s.counters.tenants.stage(ctx.uid, so.outcome, so.compile_ms);
  // Decoded once per cached output and kept with it (stage_metadata.h).
  FDO_TRY(StageMetadataRef meta, stage_metadata_of(*so.entry));

  const std::shared_ptr<const std::set<std::string>> known_functions =
      meta->functions_with_code.get();
  JobOutput output;
  const auto started = std::chrono::steady_clock::now();
  auto resp =
      run_exec(s, so, known_functions ? RangesWanted::known : RangesWanted::ask, entry_name, call,
               buffer_fds, return_buffers, verbose,
               JobOptions{exec_job_limits(c), sandbox_tenant(prog->program.scope)}, c, &output);
  const auto elapsed_ns =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - started)
                                     .count());
  if (!resp) {
    ++s.counters.stage_failures;
    s.counters.tenants.stage_failed(ctx.uid);
    stage_record(log::Level::info, "failed: " + resp.error().message(), so, stage_number, ctx);
    return std::move(resp).error().context("execute " + entry_name);
  }
  so.entry = {}; // the object ran: let the cache evict it while the feedback is folded
  const std::string_view outcome = cache::to_string(so.outcome);
  // The reply is written as text (schemas/execute.result.schema.json), no
  // tree built: this is every stage's reply. The stage's fields up to its
  // counters, the same whether the program ended its worker or not.
  auto write_stage_head = [&](JsonText& t, bool counted, std::string_view trial) {
    t.field("number", stage_number)
        .field("program", so.ik)
        .field("profile_key", so.pk)
        .field("cache_key", so.ck)
        .field("storage_key", so.storage_key)
        .field("profile_version", so.profile_version)
        .field("mode", to_string(so.mode))
        .key("cache");
    write_cache_outcome(t, so);
    t.field("recompiled", so.compiled).field("compile_ms", so.compile_ms).key("variant");
    write_variant(t, plan, counted, trial);
  };

  // The program ended with exit(n). Called on the thread that ran the entry,
  // the exec worker caught it and measured the stage as any other (its counts
  // read before the program ended: worker_jobs.h); from another thread it
  // ended the worker process, and with it the stage's counters.
  if (!resp->observation) {
    const int status = resp->exited_worker;
    s.orch->record_execution(so.ik, so.explain_sequence, elapsed_ns);
    s.metrics->stage_finished(outcome, seconds_since(stage_started),
                              so.compiled ? so.compile_ms : 0.0, elapsed_ns / 1e9, false);
    JsonText t;
    t.begin_object()
        .field("entry", entry_name)
        .field("returns", entry.return_type)
        .null_field("value")
        .field("exit_status", status)
        .key("output");
    write_output(t, output);
    t.key("stage").begin_object();
    write_stage_head(t, false, {});
    t.field("exec_ns", elapsed_ns)
        .key("counters")
        .begin_object()
        .field("wall_ns", elapsed_ns)
        .field("thread_cpu_ns", 0)
        .field("process_cpu_ns", 0)
        .key("events")
        .begin_array()
        .end_array()
        .end_object()
        .null_field("profile_rewritten")
        .field("policy", "the program exited with status " + std::to_string(status) +
                             " from another thread, ending its worker: no feedback from this stage")
        .key("lifecycle");
    start.life.write_since_start(t);
    t.end_object().end_object();
    return ResultText{std::move(t).take()};
  }

  StageReport report;
  report.pk = so.pk;
  report.program = prog->ik;
  report.owner = prog->owner;
  report.stage = stage_number;
  report.profile_version = so.profile_version;
  report.target_profile_version = so.target_profile_version;
  report.run.planned_digest = so.target_profile_digest;
  report.run.served_digest = so.profile_digest;
  report.run.served_mode = so.mode;
  // A trial's arms; a stage of another shape during a trial runs the
  // incumbent as any served stage (lifecycle.h).
  report.run.trial = plan.kind == GuardPlanKind::trial;
  report.run.compile = compile_state_of(so);
  report.metadata = meta;
  StageObservation& obs = *resp->observation;
  std::optional<std::int32_t> exit_status = obs.exited;
  observe(report, obs, known_functions.get());
  if (!known_functions && report.samples.present && obs.function_ranges)
    meta->functions_with_code.set(report.samples.functions);
  FeedbackOutcome fo = s.feedback->fold(report, c.policy, lifecycle_config(c));
  GuardStage gs =
      s.guard->record(plan, so.profile_digest, {report.feedback.exec_ns, report.feedback.cpu_ns},
                      stage_number, prog->ik, prog->owner, c.guard);
  if (gs.ended && start.life.entry) {
    std::lock_guard lk(start.life.entry->mu);
    start.life.entry->lc.trial_ended(*gs.ended, gs.version, stage_number, gs.note,
                                     std::chrono::system_clock::now());
  }
  // Ahead of need (docs/guard.md): the plain build compiles in the
  // background, behind every stage's tier-up, when the program first has a
  // profile, so the first trial stage finds both arms compiled. After a
  // rewrite, the new profile's own build goes first (docs/cache.md, "Tier-up").
  precompile(s, prog, plan.ahead);
  if (fo.rewritten) after_rewrite(s, prog, c);

  JsonText t;
  t.begin_object().field("entry", entry_name).field("returns", entry.return_type);
  if (exit_status)
    t.null_field("value").field("exit_status", *exit_status);
  else
    t.field("value", decode_return(sig.ret, obs.ret));
  if (return_buffers) {
    FDO_TRY(json buffers, returned_buffers(obs, resp->returned, call, encoding));
    t.field("buffers", buffers);
  }
  t.key("output");
  write_output(t, output);
  const std::uint64_t exec_ns = obs.exec_ns;
  s.orch->record_execution(so.ik, so.explain_sequence, exec_ns);
  s.orch->record_variant(so.ik, so.explain_sequence, std::string(to_string(plan.role)), plan.name);
  t.key("stage").begin_object();
  write_stage_head(t, gs.counted, gs.note);
  t.field("exec_ns", exec_ns).key("counters");
  if (obs.measurement)
    write_measurement(t, *obs.measurement, verbose);
  else
    t.begin_object().end_object();
  t.key("profile_rewritten");
  if (fo.rewritten)
    t.begin_object()
        .field("from", fo.rewritten->from)
        .field("to", fo.rewritten->to)
        .field("reason", fo.rewritten->reason)
        .end_object();
  else
    t.null();
  t.field("policy", fo.policy).key("samples");
  write_samples_summary(t, report.samples, obs.samples ? &*obs.samples : nullptr, verbose);
  // The stage's lifecycle: the phase after it and what it moved. Its own
  // entry when the stage started one; else (the program's first stage) the
  // entry the fold started.
  if (!start.life.entry) start.life.entry = s.lifecycles->find(so.pk);
  t.key("lifecycle");
  start.life.write_since_start(t);
  t.end_object().end_object();
  s.metrics->stage_finished(outcome, seconds_since(stage_started),
                            so.compiled ? so.compile_ms : 0.0, static_cast<double>(exec_ns) / 1e9,
                            fo.rewritten.has_value());
  if (log::enabled(log::Level::debug))
    stage_record(log::Level::debug, "ran in " + std::to_string(exec_ns) + " ns", so, stage_number,
                 ctx);
  return ResultText{std::move(t).take()};
}

} // namespace fdo::daemon::methods
