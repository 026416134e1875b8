#include "fdo/daemon/worker_jobs.h"

#include "fdo/daemon/exit_catch.h"
#include "fdo/daemon/stage_sampling.h"
#include "fdo/daemon/worker_loop.h"
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "fdo/perf/capabilities.h"
#include "fdo/perf/counters.h"
#include "fdo/perf/sampler.h"
#include "fdo/util/log.h"

#include <cstdlib>
#include <cstring>
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
// reports once, and an event that did not count is only its name, status and
// errno (its counts and times are all zero).
json measurement_json(const perf::Measurement& m, bool verbose) {
  json j = perf::to_json(m);
  if (verbose) return j;
  j.erase("task_clock_reason");
  for (json& e : j["events"]) {
    e.erase("reason");
    if (!e["value"].is_null()) continue;
    for (const char* zero : {"raw", "enabled_ns", "running_ns", "running_ratio", "multiplexed"})
      e.erase(zero);
  }
  return j;
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

Expected<std::string> header_string(const json& header, const char* key) {
  auto it = header.find(key);
  if (it == header.end() || !it->is_string())
    return make_error(Errc::invalid_argument, std::string("job header lacks string '") + key + "'");
  return it->get<std::string>();
}
} // namespace

Expected<std::unique_ptr<CompileJobs>> CompileJobs::create() {
  std::string base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  std::string tmpl = base + "/fdo-compile-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    return Error::from_errno("create compile worker temp dir under " + base, errno);
  std::unique_ptr<CompileJobs> jobs(new CompileJobs());
  jobs->temp_dir_ = tmpl;
  return jobs;
}

CompileJobs::~CompileJobs() {
  std::error_code ec;
  if (!temp_dir_.empty()) std::filesystem::remove_all(temp_dir_, ec);
}

Expected<Message> CompileJobs::handle(const Message& request) {
  FDO_TRY(std::string op, header_string(request.header, "op"));
  jit::Limits limits = limits_from(request.header);
  if (op == "analyze") {
    FDO_TRY(jit::Analysis a, jit::analyze(request.payload, limits));
    Message out;
    out.header = {{"profile_key", a.profile_key},
                  {"entries", entries_json(a.entries)},
                  {"function_fingerprints", a.function_fingerprints}};
    return out;
  }
  if (op == "compile") {
    FDO_TRY(std::string mode_text, header_string(request.header, "mode"));
    FDO_TRY(CompileMode mode, parse_compile_mode(mode_text));
    std::optional<ProfileDoc> doc;
    if (auto it = request.header.find("profile"); it != request.header.end() && !it->is_null()) {
      FDO_TRY(ProfileDoc d, profile_from_json(*it));
      doc = std::move(d);
    }
    jit::CompileRequest req;
    req.mode = mode;
    req.profile = doc ? &*doc : nullptr;
    req.limits = limits;
    req.temp_dir = temp_dir_;
    FDO_TRY(jit::CompileResult result, jit::compile(request.payload, req));
    // The metadata travels as the JSON text the daemon stores beside the
    // object, ahead of it in the payload: no header codec on either side
    // (a big program's metadata is megabytes: block map, names, fingerprints).
    Message out;
    std::string metadata = jit::metadata_to_json(result).dump();
    out.header = {{"metadata_bytes", metadata.size()}};
    out.payload.reserve(metadata.size() + result.object.size());
    out.payload.append(metadata).append(result.object);
    return out;
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
  std::vector<std::string> group_events;
  std::optional<perf::CounterGroup> group;
  StageSampler sampler;
  // How many linked programs stay when a job does not say ("cache_entries").
  static constexpr std::size_t kDefaultPrograms = 16;

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
  Expected<Program> program(const std::string& key, std::string_view object, const json& metadata,
                            std::size_t capacity) {
    if (Kept* kept = cached(key)) {
      if (kept->restarts) {
        if (Status st = kept->program->restart(); !st) {
          drop(key);
          return std::move(st).error().context("restart " + key);
        }
      }
      return Program{kept->program.get(), nullptr, kept->restarts};
    }
    FDO_TRY(jit::CompileResult meta, jit::metadata_from_json(metadata));
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
  return jobs;
}

ExecJobs::~ExecJobs() {
  if (state_) state_->programs.clear(); // unload before the loader goes
}

Expected<Message> ExecJobs::handle(const Message& request) {
  const json& h = request.header;
  FDO_TRY(std::string op, header_string(h, "op"));
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
  FDO_TRY(std::string key, header_string(h, "key"));
  FDO_TRY(std::string entry, header_string(h, "entry"));
  // No object_size: the daemon expects this worker to hold the key linked.
  const bool object_attached = h.contains("object_size");
  std::uint64_t object_size = h.value("object_size", std::uint64_t{0});
  const std::size_t capacity = h.value("cache_entries", State::kDefaultPrograms);
  const bool verbose = h.value("verbose", false);
  std::vector<std::uint64_t> slots = h.value("slots", std::vector<std::uint64_t>{});
  std::vector<int> buffer_of_param = h.value("buffer_of_param", std::vector<int>{});
  std::vector<std::string> events = h.value("events", std::vector<std::string>{});
  bool return_buffers = h.value("return_buffers", false);
  FDO_TRY(std::optional<StageSamplingRequest> sampling, sampling_request_from(h));
  if (buffer_of_param.size() != slots.size())
    return make_error(Errc::invalid_argument,
                      "exec job: slots and buffer_of_param differ in length");

  std::vector<JobBuffer> buffers;
  std::size_t offset = object_size;
  if (offset > request.payload.size())
    return make_error(Errc::invalid_argument, "exec job: payload shorter than the object");
  auto buffer_list = h.find("buffers");
  if (buffer_list != h.end() && !buffer_list->is_array())
    return make_error(Errc::invalid_argument, "exec job: 'buffers' is not an array");
  if (buffer_list != h.end())
    for (const json& b : *buffer_list) {
      if (!b.is_object())
        return make_error(Errc::invalid_argument, "exec job: a buffer is not an object");
      std::size_t size = b.value("size", std::size_t{0});
      if (auto k = b.find("fd"); k != b.end()) {
        // Parsed JSON holds it as unsigned, JSON built in memory may hold it as signed.
        if (!k->is_number_integer() || k->get<std::int64_t>() < 0 ||
            k->get<std::uint64_t>() >= request.fds.size())
          return make_error(Errc::invalid_argument,
                            "exec job: buffer descriptor " + k->dump() + " out of range (" +
                                std::to_string(request.fds.size()) + " came with the job)");
        FDO_TRY(JobBuffer mapped,
                JobBuffer::map(request.fds[k->get<std::size_t>()], size, buffers.size()));
        buffers.push_back(std::move(mapped));
        continue;
      }
      if (size > request.payload.size() - offset)
        return make_error(Errc::invalid_argument, "exec job: payload shorter than its buffers");
      buffers.push_back(JobBuffer::copy(std::string_view(request.payload).substr(offset, size)));
      offset += size;
    }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    int b = buffer_of_param[i];
    if (b < 0) continue;
    if (static_cast<std::size_t>(b) >= buffers.size())
      return make_error(Errc::invalid_argument, "exec job: buffer index out of range");
    slots[i] = reinterpret_cast<std::uintptr_t>(buffers[b].data());
  }

  // A smaller cache_entries (a reload) applies now; 0 drops every program.
  state_->trim(capacity);
  if (!object_attached && state_->cached(key) == nullptr) {
    // Never linked here, evicted, or this worker is new (a restart loses
    // what the old one held): the daemon sends the job again with the object.
    Message missing;
    missing.header = {{"missing_object", key}};
    return missing;
  }
  FDO_TRY(State::Program held,
          state_->program(key, std::string_view(request.payload).substr(0, object_size),
                          h.value("metadata", json::object()), capacity));
  jit::LoadedProgram* program = held.program;
  FDO_TRY(jit::ThunkFn thunk, program->thunk(entry));
  bool instrumented = !program->counters_layout().empty();
  if (instrumented) program->reset_counters();

  // Sampling wraps the counted window (its start and stop stay out of the
  // counts); a sampler that cannot open is reported, never fatal.
  perf::Sampler* sampler = nullptr;
  json sampling_reply = nullptr;
  if (sampling) {
    auto s = state_->sampler.get(*sampling);
    if (s) {
      sampler = *s;
      (void)sampler->drain(); // nothing from an earlier stage leaks into this one
      sampler->start();
    } else {
      sampling_reply = {{"error", s.error().describe()}};
    }
  }

  std::uint64_t ret = 0;
  std::optional<int> exit_status; // the program called exit(n) (exit_catch.h)
  perf::Measurement m;
  if (perf::CounterGroup* group = state_->counters(events)) {
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
    auto samples = stage_samples_json(sampler->events(), *sampling, sampler->drain(),
                                      program->function_ranges());
    sampling_reply = samples ? std::move(*samples) : json{{"error", samples.error().describe()}};
    // As for the counters: each sampled event's explanation is the same text
    // every stage (capabilities.perf has it once); only a verbose stage carries it.
    if (auto events = sampling_reply.find("events");
        !verbose && events != sampling_reply.end() && events->is_array())
      for (json& e : *events)
        if (e.is_object()) e.erase("reason");
  }

  Message out;
  out.header = {{"ret", ret}, {"measurement", measurement_json(m, verbose)}};
  if (exit_status) out.header["exited"] = {{"status", *exit_status}};
  json counts = json::object();
  if (instrumented)
    for (auto& [name, values] : program->read_counters())
      counts[name] = values;
  out.header["counts"] = std::move(counts);
  if (sampling) out.header["samples"] = std::move(sampling_reply);
  if (instrumented) {
    // Value profiles in the profile document's JSON form (hex MD5 targets).
    json values = json::object();
    for (auto& [name, v] : program->read_value_profiles()) {
      ProfileDoc doc;
      FunctionProfile& f = doc.functions[name];
      f.indirect_calls = std::move(v.indirect_calls);
      f.memop_sizes = std::move(v.memop_sizes);
      json fj = to_json(doc)["functions"][name];
      json sites = json::object();
      for (const char* key : {"indirect_calls", "memop_sizes"})
        if (fj.contains(key)) sites[key] = std::move(fj[key]);
      if (!sites.empty()) values[name] = std::move(sites);
    }
    if (!values.empty()) out.header["values"] = std::move(values);
  }
  if (sampling && h.value("function_ranges", true)) {
    // What the samples are attributed against: only a sampled stage needs
    // it, and the daemon asks only until it knows the program's functions.
    json ranges = json::array();
    for (const auto& r : program->function_ranges())
      ranges.push_back({{"name", r.name}, {"start", r.start}, {"size", r.size}});
    out.header["function_ranges"] = std::move(ranges);
  }
  if (return_buffers) {
    json sizes_json = json::array();
    std::size_t total = 0;
    for (const JobBuffer& b : buffers)
      total += b.size();
    out.payload.reserve(total);
    for (const JobBuffer& b : buffers) {
      out.payload.append(static_cast<const char*>(b.data()), b.size());
      sizes_json.push_back(b.size());
    }
    out.header["buffer_sizes"] = std::move(sizes_json);
  }
  // (Only a freshly linked program is unloaded here; a cached one stays,
  // unless it ended with exit(n).)
  if (process_thread_count() > 1) {
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
