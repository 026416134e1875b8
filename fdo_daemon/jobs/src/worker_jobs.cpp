#include "fdo/daemon/worker_jobs.h"

#include "fdo/daemon/compile_messages.h"
#include "fdo/daemon/compile_parts.h"
#include "fdo/daemon/exec_messages.h"
#include "fdo/daemon/exit_catch.h"
#include "fdo/daemon/stage_sampling.h"
#include "fdo/daemon/worker_loop.h"
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "fdo/jit/nvptx.h"
#include "fdo/perf/capabilities.h"
#include "fdo/perf/counters.h"
#include "fdo/perf/sampler.h"
#include "fdo/util/log.h"

#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <list>
#include <map>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace fdo::daemon {

using nlohmann::json;

namespace {
jit::Limits limits_from(const json& header) {
  jit::Limits limits;
  if (auto it = header.find("limits"); it != header.end() && it->is_object()) {
    limits.max_program_bytes = it->value("max_program_bytes", limits.max_program_bytes);
    limits.max_functions = it->value("max_functions", limits.max_functions);
    limits.max_instructions = it->value("max_instructions", limits.max_instructions);
  }
  return limits;
}

json entries_json(const std::vector<jit::EntryInfo>& entries) {
  json out = json::array();
  for (const auto& e : entries)
    out.push_back({{"name", e.name}, {"returns", e.return_type}, {"params", e.param_types}});
  return out;
}

// Whether this process can sample itself: a software clock (works without a
// PMU) sampled over a short busy loop.
json probe_sampling() {
  perf::SamplerConfig config;
  config.events = {"cpu-clock"};
  config.frequency_hz = 10000;
  config.branch_stack = perf::BranchStack::off;
  config.data_pages = 8;
  auto sampler = perf::Sampler::open(config);
  if (!sampler)
    return {{"event", "cpu-clock"}, {"available", false}, {"reason", sampler.error().describe()}};
  json event = sampler->events().empty() ? json::object() : perf::to_json(sampler->events()[0]);
  sampler->start();
  timespec t0{}, t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  volatile std::uint64_t spin = 0;
  do {
    for (int i = 0; i < 100000; ++i)
      spin = spin + 1;
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) < 20'000'000);
  sampler->stop();
  perf::SampleSet set = sampler->drain();
  return {{"event", "cpu-clock"},
          {"available", !set.samples.empty()},
          {"samples", set.samples.size()},
          {"detail", event}};
}

// The measurement for the reply. Unless `verbose`, without the per-event
// explanations (the same text every stage: "no PMU ..."), which capabilities
// reports once.
perf::Measurement compact_measurement(perf::Measurement m, bool verbose) {
  if (verbose) return m;
  m.task_clock_reason.clear();
  for (perf::EventReading& e : m.events)
    e.reason.clear();
  return m;
}

// One argument buffer of an exec job, in 8-byte aligned memory (client code
// may load doubles and 64-bit integers from it). Bytes that came in the
// payload are copied into heap storage; a memfd the daemon passed on (the
// client's sealed buffer) is mapped copy-on-write: the program may write to
// its pages, the memfd (sealed against writes) never changes, and no byte is
// copied unless written.
class JobBuffer {
public:
  static JobBuffer copy(std::string_view bytes) {
    JobBuffer b;
    // One spare word past the end, zeroed (as before: a zero-length buffer is
    // still a valid pointer); the rest is overwritten, so not zeroed first.
    const std::size_t words = (bytes.size() + 7) / 8 + 1;
    b.heap_.reset(new std::uint64_t[words]);
    b.heap_[words - 1] = 0;
    if (!bytes.empty()) std::memcpy(b.heap_.get(), bytes.data(), bytes.size());
    b.size_ = bytes.size();
    return b;
  }
  static Expected<JobBuffer> map(int fd, std::size_t size, std::size_t index) {
    const std::string what = "exec job: buffer " + std::to_string(index) + "'s descriptor";
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Error::from_errno("fstat of " + what, errno);
    if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != size)
      return make_error(Errc::invalid_argument, what + " holds " + std::to_string(st.st_size) +
                                                    " bytes, the job says " + std::to_string(size));
    if (size == 0) return copy({});
    // Mapped read-only with MAP_POPULATE (the memfd's pages mapped in one
    // call, not a fault per run of pages the program reads), then made
    // writable: populating a writable private mapping would copy every page.
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) return Error::from_errno("mmap of " + what, errno);
    JobBuffer b;
    b.mapped_ = Mapping::adopt(p, size);
    if (::mprotect(p, size, PROT_READ | PROT_WRITE) != 0)
      return Error::from_errno("mprotect of " + what, errno);
    b.size_ = size;
    return b;
  }
  void* data() const { return mapped_.valid() ? mapped_.data() : heap_.get(); }
  std::size_t size() const { return size_; }

private:
  JobBuffer() = default;
  std::unique_ptr<std::uint64_t[]> heap_;
  Mapping mapped_;
  std::size_t size_ = 0;
};

} // namespace

namespace {

// An NVPTX program (docs/gpu.md): its kernels are its entries, and it
// compiles to PTX for the GPU the daemon names in the job.
Expected<Message> gpu_analysis(std::string_view program, const jit::Limits& limits) {
  FDO_TRY(jit::GpuAnalysis a, jit::analyze_gpu(program, limits));
  json entries = json::array();
  for (const jit::GpuKernel& k : a.kernels)
    entries.push_back({{"name", k.name}, {"returns", "void"}, {"params", k.param_types}});
  Message out;
  out.header = {{"profile_key", a.profile_key},
                {"entries", std::move(entries)},
                {"function_fingerprints", json::object()},
                {"target", "nvptx"}};
  return out;
}

Expected<Message> compile_gpu(const CompileJobView& job) {
  if (!job.job.gpu)
    return make_error(Errc::unsupported,
                      "the program targets NVPTX and fdod runs no GPU on this host (docs/gpu.md)");
  jit::GpuCompileRequest req;
  req.target = *job.job.gpu;
  req.limits = job.job.limits;
  // The launch bounds the profile keeps for this GPU's kernels (the guard's
  // kept trials): compile-affecting, so part of the profile's digest and key.
  if (job.job.profile) {
    const std::string arch = jit::sm_name(req.target.sm);
    for (const GpuKernelBounds& b : job.job.profile->gpu.launch_bounds)
      if (b.arch == arch) req.launch_bounds[b.kernel] = {b.max_threads, b.min_blocks_per_sm};
  }
  FDO_TRY(jit::GpuCompileResult r, jit::compile_gpu(job.program, req));
  json kernels = json::array();
  for (const jit::GpuKernel& k : r.kernels)
    kernels.push_back({{"name", k.name}, {"params", k.param_types}});
  const std::string metadata = json{
      {"target", "nvptx"},
      {"sm", r.sm},
      {"ptx_isa", r.ptx_isa},
      {"kernels", std::move(kernels)},
      {"times_us",
       {{"parse", r.times.parse}, {"optimize", r.times.optimize}, {"codegen", r.times.codegen}}},
      {"diagnostics",
       r.diagnostics}}.dump();
  return compile_reply_message(CompileReply{}, metadata, r.ptx);
}

// What the compile decided that the explain log should say (docs/jit.md,
// "Value specialization"), functions by the names people know them by.
std::string explain_decisions(const jit::CompileResult& r) {
  auto shown = [&](std::string name) {
    auto it = r.source_names.find(name);
    return it == r.source_names.end() ? name : it->second;
  };
  std::string out;
  for (jit::Specialization s : r.specializations) {
    s.function = shown(s.function);
    out += (out.empty() ? "value specialization: " : "; ") + jit::describe(s);
  }
  for (const std::string& skipped : r.specializations_skipped)
    out += (out.empty() ? "value specialization passed over " : "; passed over ") + skipped;
  if (r.cold_functions != 0)
    out += (out.empty() ? "" : "; ") + std::to_string(r.cold_functions) +
           " function(s) that did at most 1/10,000 of the profiled work (those called 0 "
           "times among them) compiled without optimization (knobs.cold_code baseline)";
  if (r.partitions > 1)
    out += (out.empty() ? "" : "; ") + std::string("compiled in ") + std::to_string(r.partitions) +
           " parts at once" +
           (r.split == jit::PartitionSplit::inliner ? " from the inliner on"
                                                    : " (code generation only)");
  return out;
}

} // namespace

Expected<Message> CompileJobs::handle(const Message& request) {
  const std::string op = job_op(request);
  if (op.empty()) return make_error(Errc::invalid_argument, "job header lacks string 'op'");
  if (op == "analyze") {
    jit::Limits limits = limits_from(request.header);
    if (jit::is_nvptx_program(request.payload)) return gpu_analysis(request.payload, limits);
    FDO_TRY(jit::Analysis a, jit::analyze(request.payload, limits));
    Message out;
    out.header = {{"profile_key", a.profile_key},
                  {"entries", entries_json(a.entries)},
                  {"function_fingerprints", a.function_fingerprints}};
    return out;
  }
  if (op == "compile") {
    FDO_TRY(CompileJobView job, compile_job_of(request));
    if (jit::is_nvptx_program(job.program)) return compile_gpu(job);
    jit::CompileRequest req;
    req.mode = job.job.mode;
    req.profile = job.job.profile.get();
    req.limits = job.job.limits;
    req.threads = job.job.threads;
    req.max_parts = job.job.parts;
    // Parts of the program's last build fdod holds (compile_parts.h).
    req.held_parts = std::move(job.held);
    // And its pipeline prefix (docs/jit.md, "The pipeline's prefix").
    req.held_prefix = job.prefix;
    FDO_TRY(jit::CompileResult result, jit::compile(job.program, req));
    CompileReply reply;
    reply.explanation = explain_decisions(result);
    std::string prefix_bitcode;
    if (result.prefix) {
      if (std::string clause = explain_prefix(*result.prefix); !clause.empty())
        reply.explanation += (reply.explanation.empty() ? "" : "; ") + clause;
      reply.prefix = PrefixRef{result.prefix->key, result.prefix->bitcode_hash};
      reply.prefix_origin = result.prefix->origin;
      prefix_bitcode = std::move(result.prefix->bitcode);
    }
    if (!result.part_builds.empty()) {
      if (std::string reuse = explain_parts(result.part_builds, result.source_names);
          !reuse.empty())
        reply.explanation += (reply.explanation.empty() ? "" : "; ") + reuse;
      reply.parts = std::move(result.part_builds);
    }
    if (!job.unreadable.empty())
      reply.explanation +=
          (reply.explanation.empty() ? "" : "; ") +
          ("the held parts were unreadable (" + job.unreadable + "): every part compiled");
    // The metadata travels as the JSON text the daemon stores beside the
    // object (a big program's metadata is megabytes: block map, names,
    // fingerprints), ahead of the object in the payload.
    return compile_reply_message(reply, jit::metadata_to_json(result).dump(), result.object,
                                 prefix_bitcode);
  }
  if (op == "identity") {
    Message out;
    out.header = {{"identity", jit::host_identity().canonical()}};
    return out;
  }
  return make_error(Errc::invalid_argument, "compile worker: unknown op '" + op + "'");
}

// --- exec ---

struct ExecJobs::State {
  std::unique_ptr<jit::Loader> loader;
  // Recently used programs by storage key, most recent first: a stage of a
  // program already linked in this worker skips the link, and the daemon
  // sends it without its object (the object travels once per worker).
  struct Kept {
    std::string key;
    std::unique_ptr<jit::LoadedProgram> program;
    // Writable globals: each execution ends with finish() and the next one
    // starts with restart(), so that every stage starts from the program's
    // initial state whichever worker runs it (jit::LoadedProgram::restart).
    bool restarts = false;
  };
  std::list<Kept> programs;
  // /proc/self/task, opened once (before any sandbox): each job counts the
  // threads it left with one fstat (process_thread_count), and the worker
  // loop takes that count for its own check (threads_after_job).
  Fd task_dir;
  std::optional<std::size_t> threads_after_job;
  std::vector<std::string> group_events;
  std::optional<perf::CounterGroup> group;
  StageSampler sampler;
  // The program to run for one execution: a kept one (restarted first when it
  // has writable globals), or, with a capacity of 0, one linked for this
  // execution alone (`fresh` owns it).
  struct Program {
    jit::LoadedProgram* program = nullptr;
    std::unique_ptr<jit::LoadedProgram> fresh;
    bool restarts = false; // kept, with writable globals: finish() it after the call
  };
  // The linked program kept under `key`, made most recent; nullptr if none.
  Kept* cached(const std::string& key) {
    for (auto it = programs.begin(); it != programs.end(); ++it)
      if (it->key == key) {
        programs.splice(programs.begin(), programs, it);
        return &programs.front();
      }
    return nullptr;
  }
  void trim(std::size_t capacity) {
    while (programs.size() > capacity)
      programs.pop_back();
  }
  // Unloads the program kept under `key` (one that ended with exit(n) is
  // not run again: its state is what exit left).
  void drop(const std::string& key) {
    std::erase_if(programs, [&](const Kept& p) { return p.key == key; });
  }
  // Forgets the program kept under `key` without unloading it: a thread it
  // started may still run its code (the worker is retired after the reply).
  void abandon(const std::string& key) {
    for (Kept& p : programs)
      if (p.key == key) (void)p.program.release();
    drop(key);
  }
  // Call trim(capacity) first: a program found here then stays kept.
  Expected<Program> program(const std::string& key, std::string_view object,
                            std::string_view metadata, std::size_t capacity) {
    if (Kept* kept = cached(key)) {
      if (kept->restarts) {
        if (Status st = kept->program->restart(); !st) {
          drop(key);
          return std::move(st).error().context("restart " + key);
        }
      }
      return Program{kept->program.get(), nullptr, kept->restarts};
    }
    json parsed = json::parse(metadata, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded())
      return make_error(Errc::invalid_argument, "exec job: the object's metadata is not JSON");
    FDO_TRY(jit::CompileResult meta, jit::metadata_from_json(parsed));
    FDO_TRY(std::unique_ptr<jit::LoadedProgram> loaded, loader->load(object, meta));
    if (capacity == 0) {
      jit::LoadedProgram* raw = loaded.get();
      return Program{raw, std::move(loaded), false};
    }
    programs.push_front(Kept{key, std::move(loaded), meta.mutable_globals});
    trim(capacity);
    return Program{programs.front().program.get(), nullptr, programs.front().restarts};
  }

  perf::CounterGroup* counters(const std::vector<std::string>& events) {
    if (events.empty()) return nullptr;
    if (!group || events != group_events) {
      auto g = perf::CounterGroup::open(events);
      if (!g) {
        log::warning("exec worker: counters unavailable: " + g.error().describe());
        group.reset();
        return nullptr;
      }
      group.emplace(std::move(*g));
      group_events = events;
    }
    return &*group;
  }
};

Expected<std::unique_ptr<ExecJobs>> ExecJobs::create() {
  jit::LoaderOptions options;
  options.overrides = exit_overrides(); // exit(n) ends the call, not the worker
  FDO_TRY(std::unique_ptr<jit::Loader> loader, jit::Loader::create(std::move(options)));
  std::unique_ptr<ExecJobs> jobs(new ExecJobs());
  jobs->state_ = std::make_unique<State>();
  jobs->state_->loader = std::move(loader);
  jobs->state_->task_dir.reset(::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  return jobs;
}

ExecJobs::~ExecJobs() {
  if (state_) state_->programs.clear(); // unload before the loader goes
}

std::optional<std::size_t> ExecJobs::threads_after_job() const {
  return state_ ? state_->threads_after_job : std::nullopt;
}

Expected<Message> ExecJobs::handle(const Message& request) {
  state_->threads_after_job.reset();
  const json& h = request.header;
  const std::string op = job_op(request);
  if (op.empty()) return make_error(Errc::invalid_argument, "job header lacks string 'op'");
  if (op == "probe") {
    // Probed inside this (sandboxed) worker: what jobs can measure, not the daemon.
    std::vector<std::string> events = h.value("events", std::vector<std::string>{});
    Message out;
    out.header = perf::to_json(perf::probe(events));
    out.header["sampling_in_sandbox"] = probe_sampling();
    return out;
  }
  if (op != "exec")
    return make_error(Errc::invalid_argument, "exec worker: unknown op '" + op + "'");
  FDO_TRY(Decoded<ExecJob> decoded, exec_job_of(request));
  const ExecJob& job = decoded.value;
  const std::string& key = job.key;
  // No object_size: the daemon expects this worker to hold the key linked.
  const bool object_attached = job.object_size.has_value();
  const std::uint64_t object_size = job.object_size.value_or(0);
  const std::size_t capacity = job.cache_entries;
  std::vector<std::uint64_t> slots = job.slots;
  if (job.sampling) FDO_TRY_STATUS(validate(*job.sampling));
  if (job.buffer_of_param.size() != slots.size())
    return make_error(Errc::invalid_argument,
                      "exec job: slots and buffer_of_param differ in length");

  const std::string_view payload = decoded.rest;
  std::vector<JobBuffer> buffers;
  std::size_t offset = object_size;
  if (offset > payload.size())
    return make_error(Errc::invalid_argument, "exec job: payload shorter than the object");
  for (const ExecBufferSpec& b : job.buffers) {
    if (b.fd) {
      if (*b.fd >= request.fds.size())
        return make_error(Errc::invalid_argument, "exec job: buffer descriptor " +
                                                      std::to_string(*b.fd) + " out of range (" +
                                                      std::to_string(request.fds.size()) +
                                                      " came with the job)");
      FDO_TRY(JobBuffer mapped, JobBuffer::map(request.fds[*b.fd], b.size, buffers.size()));
      buffers.push_back(std::move(mapped));
      continue;
    }
    if (b.size > payload.size() - offset)
      return make_error(Errc::invalid_argument, "exec job: payload shorter than its buffers");
    buffers.push_back(JobBuffer::copy(payload.substr(offset, b.size)));
    offset += b.size;
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    std::int32_t b = job.buffer_of_param[i];
    if (b < 0) continue;
    if (static_cast<std::size_t>(b) >= buffers.size())
      return make_error(Errc::invalid_argument, "exec job: buffer index out of range");
    slots[i] = reinterpret_cast<std::uintptr_t>(buffers[static_cast<std::size_t>(b)].data());
  }

  // A smaller cache_entries (a reload) applies now; 0 drops every program.
  state_->trim(capacity);
  if (!object_attached && state_->cached(key) == nullptr) {
    // Never linked here, evicted, or this worker is new (a restart loses
    // what the old one held): the daemon sends the job again with the object.
    ExecReply missing;
    missing.outcome = ExecOutcome::missing_object;
    return exec_reply_message(missing);
  }
  FDO_TRY(State::Program held,
          state_->program(key, payload.substr(0, object_size), job.metadata, capacity));
  jit::LoadedProgram* program = held.program;
  FDO_TRY(jit::ThunkFn thunk, program->thunk(job.entry));
  bool instrumented = !program->counters_layout().empty();
  if (instrumented) program->reset_counters();

  // Sampling wraps the counted window (its start and stop stay out of the
  // counts); a sampler that cannot open is reported, never fatal.
  perf::Sampler* sampler = nullptr;
  ExecReply reply;
  StageObservation& obs = reply.observation;
  if (job.sampling) {
    auto s = state_->sampler.get(*job.sampling);
    if (s) {
      sampler = *s;
      (void)sampler->drain(); // nothing from an earlier stage leaks into this one
      sampler->start();
    } else {
      obs.samples.emplace().error = s.error().describe();
    }
  }

  std::uint64_t ret = 0;
  std::optional<int> exit_status; // the program called exit(n) (exit_catch.h)
  perf::Measurement m;
  if (perf::CounterGroup* group = state_->counters(job.events)) {
    m = perf::measure(*group, [&] { exit_status = call_catching_exit(thunk, slots.data(), &ret); });
  } else {
    // No counter group at all: still report wall and CPU time.
    timespec w0{}, w1{}, c0{}, c1{}, p0{}, p1{};
    // The process clock outermost: it is a system call, and inside the
    // others it would widen their windows.
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p0);
    ::clock_gettime(CLOCK_MONOTONIC, &w0);
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    exit_status = call_catching_exit(thunk, slots.data(), &ret);
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    ::clock_gettime(CLOCK_MONOTONIC, &w1);
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p1);
    auto ns = [](timespec a, timespec b) {
      return static_cast<std::uint64_t>((b.tv_sec - a.tv_sec) * 1000000000LL +
                                        (b.tv_nsec - a.tv_nsec));
    };
    m.wall_ns = ns(w0, w1);
    m.thread_cpu_ns = ns(c0, c1);
    m.process_cpu_ns = ns(p0, p1);
  }
  if (sampler != nullptr) {
    sampler->stop();
    auto samples = stage_sample_report(sampler->events(), *job.sampling, sampler->drain(),
                                       program->function_ranges());
    if (samples) {
      obs.samples = std::move(*samples);
      // As for the counters: each sampled event's explanation is the same
      // text every stage (capabilities.perf has it once); only a verbose
      // stage carries it.
      if (!job.verbose)
        for (perf::SamplerEvent& e : obs.samples->events)
          e.reason.clear();
    } else {
      obs.samples.emplace().error = samples.error().describe();
    }
  }

  obs.ret = ret;
  if (exit_status) obs.exited = *exit_status;
  obs.exec_ns = m.wall_ns;
  obs.measurement = compact_measurement(std::move(m), job.verbose);
  if (instrumented) {
    for (auto& [name, values] : program->read_counters())
      obs.counts.emplace(name, std::move(values));
    for (auto& [name, v] : program->read_value_profiles())
      if (!v.indirect_calls.empty() || !v.memop_sizes.empty() || !v.arguments.empty())
        obs.values.emplace(name, std::move(v));
  }
  if (job.sampling && job.function_ranges) {
    // What the samples are attributed against: only a sampled stage needs
    // it, and the daemon asks only until it knows the program's functions.
    auto& ranges = obs.function_ranges.emplace();
    for (const auto& r : program->function_ranges())
      ranges.push_back({r.name, r.start, r.size});
  }
  std::string returned;
  if (job.return_buffers) {
    std::size_t total = 0;
    for (const JobBuffer& b : buffers)
      total += b.size();
    returned.reserve(total);
    for (const JobBuffer& b : buffers) {
      returned.append(static_cast<const char*>(b.data()), b.size());
      obs.buffer_sizes.push_back(b.size());
    }
  }
  FDO_TRY(Message out, exec_reply_message(reply, returned));
  // (Only a freshly linked program is unloaded here; a cached one stays,
  // unless it ended with exit(n).)
  const std::size_t threads = process_thread_count(state_->task_dir.get());
  state_->threads_after_job = threads;
  if (threads > 1) {
    // The program left a thread running in its code, perhaps reading its
    // buffers: unmapping either, or running its destructors, would crash the
    // worker before it answers. The loop retires this worker after the reply
    // (worker_loop.h), which ends the thread; until then all stay as they are.
    if (held.fresh) (void)held.fresh.release();
    if (held.restarts) state_->abandon(key);
    (void)new std::vector<JobBuffer>(std::move(buffers));
  } else if (exit_status && !held.fresh) {
    state_->drop(key);
  } else if (held.restarts) {
    // Its destructors run now, in this stage, as an unload's would.
    program->finish();
  }
  return out;
}

} // namespace fdo::daemon
