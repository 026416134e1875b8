// The configuration key table: every key fdod reads, with its reload class,
// description, limits and, where no kind in key_values.h fits, its own parser
// and printer; lookups by name; the names of the configuration's enums.
#include "config_keys.h"

#include "fdo/cache/redis_tier.h"
#include "fdo/util/enum_names.h"
#include "key_values.h"

#include <limits>
#include <sys/un.h>

namespace fdo::daemon {

namespace {

constexpr EnumNames<SandboxFilesystem, 4> kSandboxFilesystemNames{
    {{{SandboxFilesystem::automatic, "auto"},
      {SandboxFilesystem::landlock, "landlock"},
      {SandboxFilesystem::mount_namespace, "mount_namespace"},
      {SandboxFilesystem::none, "none"}}}};

constexpr EnumNames<SandboxCgroup, 3> kSandboxCgroupNames{
    {{{SandboxCgroup::automatic, "auto"},
      {SandboxCgroup::off, "off"},
      {SandboxCgroup::required, "required"}}}};

constexpr EnumNames<GpuUse, 3> kGpuUseNames{
    {{{GpuUse::automatic, "auto"}, {GpuUse::on, "on"}, {GpuUse::off, "off"}}}};

constexpr EnumNames<GuardMode, 2> kGuardModeNames{
    {{{GuardMode::on, "on"}, {GuardMode::off, "off"}}}};

constexpr EnumNames<GuardClock, 2> kGuardClockNames{
    {{{GuardClock::cpu, "cpu"}, {GuardClock::wall, "wall"}}}};

constexpr std::uint64_t kDay = 86'400'000;
constexpr std::uint64_t kHour = 3'600'000;
constexpr std::uint64_t kGiB = 1ull << 30;
constexpr auto R = ReloadBehavior::runtime;
constexpr auto X = ReloadBehavior::restart;

} // namespace

namespace config_detail {

const std::vector<KeyDef>& key_defs() {
  static const std::vector<KeyDef> defs = [] {
    std::vector<KeyDef> v;
    {
      KeyDef d{"socket", X,
               "Unix socket path to create when not socket-activated (at most 107 bytes).", nullptr,
               nullptr};
      d.set = [](Config& c, std::string_view s) -> std::optional<std::string> {
        constexpr std::size_t kMax = sizeof(sockaddr_un{}.sun_path) - 1;
        if (s.empty() || s.size() > kMax)
          return "a non-empty path of at most " + std::to_string(kMax) + " bytes";
        c.socket = std::string(s);
        return std::nullopt;
      };
      d.get = [](const Config& c) { return c.socket; };
      v.push_back(std::move(d));
    }
    {
      KeyDef d{"state_dir", X, "Directory for the profile database and the disk cache.", nullptr,
               nullptr};
      d.set = [](Config& c, std::string_view s) -> std::optional<std::string> {
        if (s.empty()) return "a non-empty directory path";
        c.state_dir = std::string(s);
        return std::nullopt;
      };
      d.get = [](const Config& c) { return c.state_dir; };
      v.push_back(std::move(d));
    }
    {
      KeyDef d{"log_level", R, "Least severe level logged: debug, info, notice, warning, error.",
               nullptr, nullptr};
      d.set = [](Config& c, std::string_view s) -> std::optional<std::string> {
        log::Level l;
        if (!log::parse_level(s, l)) return "one of debug, info, notice, warning, error";
        c.log_level = l;
        return std::nullopt;
      };
      d.get = [](const Config& c) -> std::string {
        switch (c.log_level) {
        case log::Level::debug:
          return "debug";
        case log::Level::info:
          return "info";
        case log::Level::notice:
          return "notice";
        case log::Level::warning:
          return "warning";
        case log::Level::error:
          return "error";
        }
        return "info";
      };
      v.push_back(std::move(d));
    }
    v.push_back(uint_key<std::uint64_t>(
        "max_request_bytes", R,
        "Longest request line accepted; a longer one gets a JSON-RPC error (id null) and the "
        "connection carries on.",
        [](Config& c) -> std::uint64_t& { return c.max_request_bytes; }, 1024, kGiB));
    v.push_back(ms_key(
        "request_timeout_ms", R,
        "Per-request deadline; past it the client gets a timeout error and the "
        "connection stays usable.",
        [](Config& c) -> milliseconds& { return c.request_timeout; }, 1, kDay));
    v.push_back(uint_key<unsigned>(
        "handler_threads", X,
        "Threads running request handlers (0 = twice the hardware threads, at least 4).",
        [](Config& c) -> unsigned& { return c.handler_threads; }, 0, 1024));
    v.push_back(ms_key(
        "drain_timeout_ms", R,
        "On SIGTERM, how long in-flight requests may take to finish before "
        "connections are closed.",
        [](Config& c) -> milliseconds& { return c.drain_timeout; }, 0, kHour));
    v.push_back(uint_key<unsigned>(
        "compile_workers", X, "Compile worker processes.",
        [](Config& c) -> unsigned& { return c.compile_workers; }, 1, 256));
    v.push_back(uint_key<unsigned>(
        "compile_threads", R,
        "Threads one compile may use: a large program is optimized and code-generated in up "
        "to that many parts at once (docs/jit.md, \"Partitioned compiles\"; 0 = the host's "
        "hardware threads, at most 8; 1 = never split).",
        [](Config& c) -> unsigned& { return c.compile_threads; }, 0, 64));
    v.push_back(uint_key<unsigned>(
        "compile_parts", R,
        "Most parts a large program is compiled in (0 = as many as compile_threads); more parts "
        "than threads make a recompile after a rewrite touch less of the program, and cost "
        "its code a few per cent (docs/jit.md, \"Incremental recompiles\"). No effect with "
        "compile_threads = 1.",
        [](Config& c) -> unsigned& { return c.compile_parts; }, 0, 64));
    v.push_back(uint_key<unsigned>(
        "compile_nice", X,
        "Nice value of the compile workers, which run under SCHED_BATCH: sharing a CPU with fdod "
        "or an exec worker, a compile gets about a tenth of it (0 = fdod's own priority).",
        [](Config& c) -> unsigned& { return c.compile_nice; }, 0, 19));
    v.push_back(uint_key<unsigned>(
        "exec_workers", X, "Exec worker processes.",
        [](Config& c) -> unsigned& { return c.exec_workers; }, 1, 256));
    v.push_back(enum_key("gpu", X,
                         "Run NVPTX programs on the host's GPU (docs/gpu.md): auto (when "
                         "an NVIDIA device node /dev/nvidia* exists), on, or off.",
                         kGpuUseNames, [](Config& c) -> GpuUse& { return c.gpu; }));
    {
      KeyDef d{"gpu_driver", X,
               "The NVIDIA driver library GPU workers load with dlopen (a name the dynamic "
               "loader finds, or a path).",
               nullptr, nullptr};
      d.set = [](Config& c, std::string_view s) -> std::optional<std::string> {
        if (s.empty()) return std::string("must name a library");
        c.gpu_driver = std::string(s);
        return std::nullopt;
      };
      d.get = [](const Config& c) { return c.gpu_driver; };
      v.push_back(std::move(d));
    }
    v.push_back(uint_key<unsigned>(
        "gpu_workers", X, "GPU worker processes (each holds a context on GPU 0).",
        [](Config& c) -> unsigned& { return c.gpu_workers; }, 1, 64));
    v.push_back(ms_key(
        "gpu_kernel_timeout_ms", R,
        "A kernel launch not finished by then is abandoned: the stage fails and its GPU worker "
        "is replaced.",
        [](Config& c) -> milliseconds& { return c.gpu_kernel_timeout; }, 1, kHour));
    v.push_back(uint_key<unsigned>(
        "max_running_compiles_per_uid", X,
        "Compile jobs one uid may have running at once; its further ones wait while other uids' "
        "compiles take the free workers (0 = compile_workers - 1, at least 1).",
        [](Config& c) -> unsigned& { return c.max_running_compiles_per_uid; }, 0, 256));
    v.push_back(ms_key(
        "compile_background_max_stopped_ms", X,
        "A build ahead of need stopped for this long in all (while stage compiles ran) runs on "
        "as a stage's compile: continued, never stopped or preempted again (0 = no bound).",
        [](Config& c) -> milliseconds& { return c.compile_background_max_stopped; }, 0, kDay));
    v.push_back(ms_key(
        "compile_timeout_ms", R, "Wall-time limit of one compile job.",
        [](Config& c) -> milliseconds& { return c.compile_timeout; }, 1, kDay));
    v.push_back(ms_key(
        "exec_timeout_ms", R, "Wall-time limit of one execution.",
        [](Config& c) -> milliseconds& { return c.exec_timeout; }, 1, kDay));
    v.push_back(uint_key<std::uint64_t>(
        "compile_memory_mb", R, "Address-space limit of a compile worker, MiB.",
        [](Config& c) -> std::uint64_t& { return c.compile_memory_mb; }, 16, 1u << 20));
    v.push_back(uint_key<std::uint64_t>(
        "exec_memory_mb", R, "Address-space limit of an exec worker, MiB.",
        [](Config& c) -> std::uint64_t& { return c.exec_memory_mb; }, 16, 1u << 20));
    v.push_back(uint_key<std::uint64_t>(
        "max_output_bytes", R, "Most bytes of buffers and results one execution may send back.",
        [](Config& c) -> std::uint64_t& { return c.max_output_bytes; }, 1, 64 * kGiB));
    v.push_back(uint_key<std::uint64_t>(
        "max_program_bytes", R, "Largest program (IR text or bitcode) accepted.",
        [](Config& c) -> std::uint64_t& { return c.max_program_bytes; }, 1, 4 * kGiB));
    v.push_back(uint_key<unsigned>(
        "max_programs_per_uid", R,
        "Programs one uid may have registered at once; registering another is refused "
        "until some are deleted (fdoctl program delete, fdoctl gc). 0 = no limit.",
        [](Config& c) -> unsigned& { return c.max_programs_per_uid; }, 0, 100'000'000));
    v.push_back(uint_key<unsigned>(
        "gc_max_age_days", R,
        "fdoctl gc removes programs unused, and unpinned profiles unchanged, for longer than "
        "this many days.",
        [](Config& c) -> unsigned& { return c.gc_max_age_days; }, 1, 36500));
    v.push_back(uint_key<std::uint64_t>(
        "memory_cache_bytes", X, "Byte budget of the in-memory compiled-object cache (0 = off).",
        [](Config& c) -> std::uint64_t& { return c.memory_cache_bytes; }, 0, 1024 * kGiB));
    v.push_back(uint_key<std::uint64_t>(
        "disk_cache_bytes", X, "Byte budget of the on-disk compiled-object cache (0 = off).",
        [](Config& c) -> std::uint64_t& { return c.disk_cache_bytes; }, 0, 16384 * kGiB));
    {
      KeyDef d{"object_cache_remote", X,
               "Remote compiled-object tier shared by hosts (docs/fleet.md): empty = off; "
               "redis://HOST[:PORT] or unix:/PATH.",
               nullptr, nullptr};
      d.set = [](Config& c, std::string_view s) -> std::optional<std::string> {
        if (!s.empty())
          if (auto e = cache::parse_redis_endpoint(s); !e) return e.error().message();
        c.object_cache_remote = std::string(s);
        return std::nullopt;
      };
      d.get = [](const Config& c) { return c.object_cache_remote; };
      v.push_back(std::move(d));
    }
    v.push_back(ms_key(
        "object_cache_remote_timeout_ms", X,
        "Bound on each connect and command to the remote tier; a slower answer is a miss and "
        "the tier backs off.",
        [](Config& c) -> milliseconds& { return c.object_cache_remote_timeout; }, 1, 60000));
    v.push_back(uint_key<std::uint64_t>(
        "object_cache_remote_max_entry_bytes", X,
        "Largest entry written to or read from the remote tier (encoded bytes).",
        [](Config& c) -> std::uint64_t& { return c.object_cache_remote_max_entry_bytes; }, 4096,
        4 * kGiB));
    {
      KeyDef d{"tier_up", R,
               "async: keep serving the previous output while a recompile runs in the "
               "background; sync: the stage that misses waits for the recompile.",
               nullptr, nullptr};
      d.set = [](Config& c, std::string_view s) -> std::optional<std::string> {
        auto t = cache::parse_tier_up(s);
        if (!t) return "async or sync";
        c.tier_up = *t;
        return std::nullopt;
      };
      d.get = [](const Config& c) { return std::string(cache::to_string(c.tier_up)); };
      v.push_back(std::move(d));
    }
    {
      KeyDef d{"share_profiles_across_tenants", R,
               "true: programs with the same canonical IR share one profile whoever submits "
               "them; false: each uid has its own.",
               nullptr, nullptr};
      d.set = [](Config& c, std::string_view s) -> std::optional<std::string> {
        auto b = parse_bool(s);
        if (!b) return "true or false (also yes/no, on/off, 1/0)";
        c.share_profiles_across_tenants = *b;
        return std::nullopt;
      };
      d.get = [](const Config& c) {
        return std::string(c.share_profiles_across_tenants ? "true" : "false");
      };
      v.push_back(std::move(d));
    }
    v.push_back(uint_key<unsigned>(
        "profile_retention", R, "Profile versions kept in history per profile key.",
        [](Config& c) -> unsigned& { return c.profile_retention; }, 1, 1'000'000));
    v.push_back(ms_key(
        "feedback_flush_ms", X, "How often batched stage feedback is written to SQLite.",
        [](Config& c) -> milliseconds& { return c.feedback_flush; }, 1, kHour));
    v.push_back(event_list_key(
        "perf_events", R,
        "Hardware events counted around each execution (comma list, "
        "libpfm4/perf names; empty = none).",
        [](Config& c) -> std::vector<std::string>& { return c.perf_events; }, EmptyList::allowed));
    v.push_back(event_list_key(
        "sampling.events", R,
        "Events sampled during each execution and attributed to the program's functions (comma "
        "list; a software clock such as cpu-clock works without a PMU, events the host cannot "
        "sample are reported and skipped).",
        [](Config& c) -> std::vector<std::string>& { return c.sampling.events; },
        EmptyList::refused));
    v.push_back(uint_key<std::uint64_t>(
        "sampling.frequency_hz", R,
        "Samples per second of each sampled event during a stage (0 = no sampling).",
        [](Config& c) -> std::uint64_t& { return c.sampling.frequency_hz; }, 0, 100000));
    v.push_back(uint_key<std::uint64_t>(
        "sampling.max_samples", R,
        "Per-stage budget: samples attributed per execution; more are thinned evenly (and "
        "counted).",
        [](Config& c) -> std::uint64_t& { return c.sampling.max_samples; }, 1, 10'000'000));
    v.push_back(
        enum_key("sandbox_filesystem", X,
                 "How client code is kept out of the state dir: auto (Landlock, else a mount "
                 "namespace), landlock, mount_namespace, or none (unsafe).",
                 kSandboxFilesystemNames,
                 [](Config& c) -> SandboxFilesystem& { return c.sandbox_filesystem; }));
    v.push_back(uint_key<std::uint32_t>(
        "sandbox_uid_base", X,
        "Where fdod may switch uids (root or CAP_SETUID), jobs run as sandbox_uid_base + 1 + "
        "(tenant uid mod (sandbox_uid_count - 1)); shared-profile jobs as sandbox_uid_base.",
        [](Config& c) -> std::uint32_t& { return c.sandbox_uid_base; }, 1, 4000000000u));
    v.push_back(uint_key<std::uint32_t>(
        "sandbox_uid_count", X, "Size of the sandbox uid range (see sandbox_uid_base).",
        [](Config& c) -> std::uint32_t& { return c.sandbox_uid_count; }, 2, 100000000u));
    v.push_back(enum_key(
        "sandbox_cgroup", X,
        "cgroup per worker (memory and task limits, killed as one; cgroup v2, or the v1 "
        "memory and pids hierarchies of legacy and hybrid hosts): auto (when fdod's cgroup "
        "is delegated to it, e.g. Delegate=yes, or is a container's root), off, or required.",
        kSandboxCgroupNames, [](Config& c) -> SandboxCgroup& { return c.sandbox_cgroup; }));
    v.push_back(uint_key<std::uint64_t>(
        "job_max_tasks", X,
        "pids.max of a worker's cgroup (v2 or v1): threads a job may have at once (with "
        "sandbox_cgroup).",
        [](Config& c) -> std::uint64_t& { return c.job_max_tasks; }, 1, 1u << 22));
    v.push_back(uint_key<std::uint64_t>(
        "job_output_bytes", X,
        "What a job may print, per stream (stdout, stderr); the rest is dropped and the reply "
        "says the output was truncated.",
        [](Config& c) -> std::uint64_t& { return c.job_output_bytes; }, 0, 64u << 20));
    v.push_back(uint_key<std::uint64_t>(
        "worker_retire_growth_mb", R,
        "A worker whose mapped memory grew by more than this since it took its first job is "
        "replaced after the job (leaks never accumulate across stages).",
        [](Config& c) -> std::uint64_t& { return c.worker_retire_growth_mb; }, 1, 1u << 20));
    v.push_back(uint_key<unsigned>(
        "max_queued_jobs_per_uid", R,
        "Jobs one uid may have waiting for a worker, per pool; more are refused.",
        [](Config& c) -> unsigned& { return c.max_queued_jobs_per_uid; }, 1, 1'000'000));
    v.push_back(uint_key<int>(
        "policy.min_stages", R,
        "Stages observed under the current profile version before a rewrite.",
        [](Config& c) -> int& { return c.policy.min_stages; }, 1, 1'000'000));
    v.push_back(uint_key<std::uint64_t>(
        "policy.min_counts", R, "Instrumentation counts needed before counts are trusted.",
        [](Config& c) -> std::uint64_t& { return c.policy.min_counts; }, 0,
        std::numeric_limits<std::uint64_t>::max()));
    v.push_back(double_key(
        "policy.drift_threshold", R,
        "Rewrite only when the branch distribution moved at least this much "
        "(weighted total-variation distance, 0..1).",
        [](Config& c) -> double& { return c.policy.drift_threshold; }, 0.0, 1.0));
    v.push_back(uint_key<int>(
        "policy.max_recompiles_per_hour", R,
        "Rewrites allowed per profile key in any sliding hour (0 = never).",
        [](Config& c) -> int& { return c.policy.max_recompiles_per_hour; }, 0, 1'000'000));
    v.push_back(double_key(
        "policy.branch_miss_unpredictable_rate", R,
        "Branch-miss rate at or above which near-50/50 hot branches are marked !unpredictable "
        "(PMU hosts).",
        [](Config& c) -> double& { return c.policy.branch_miss_unpredictable_rate; }, 0.0, 1.0));
    v.push_back(double_key(
        "policy.icache_mpki_size_threshold", R,
        "Counted L1 i-cache misses per 1000 instructions below which sampled i-cache misses "
        "change no code layout (PMU hosts).",
        [](Config& c) -> double& { return c.policy.icache_mpki_size_threshold; }, 0.0, 1000.0));
    v.push_back(double_key(
        "policy.time_share_drift_threshold", R,
        "Re-profile (instrumented stages again) when the sampled time share per function of "
        "optimized stages moved at least this far from the share recorded with the profile "
        "(total-variation distance, 0..1; 1 = never).",
        [](Config& c) -> double& { return c.policy.time_share_drift_threshold; }, 0.0, 1.0));
    v.push_back(uint_key<int>(
        "policy.time_share_window_stages", R,
        "Sampled stages (the most recent) whose time shares are compared with the profile's.",
        [](Config& c) -> int& { return c.policy.time_share_window_stages; }, 1, 10'000));
    v.push_back(uint_key<std::uint64_t>(
        "policy.time_share_min_samples", R,
        "Clock samples in program code the window needs before time-share drift is judged.",
        [](Config& c) -> std::uint64_t& { return c.policy.time_share_min_samples; }, 1,
        100'000'000));
    v.push_back(uint_key<std::uint64_t>(
        "policy.branch_miss_min_samples", R,
        "Sampled branch misses a near-50/50 conditional branch needs before it is marked "
        "!unpredictable in the next compile (PMU hosts).",
        [](Config& c) -> std::uint64_t& { return c.policy.branch_miss_min_samples; }, 1,
        100'000'000));
    v.push_back(uint_key<std::uint64_t>(
        "policy.icache_layout_min_samples", R,
        "Sampled L1 i-cache misses under a profile version needed before code layout is judged "
        "(PMU hosts).",
        [](Config& c) -> std::uint64_t& { return c.policy.icache_layout_min_samples; }, 1,
        100'000'000));
    v.push_back(double_key(
        "policy.icache_hot_share", R,
        "Share of the sampled L1 i-cache misses a function must hold to be laid out hot "
        "(together, first in the text); the program's never-run functions are then laid out cold.",
        [](Config& c) -> double& { return c.policy.icache_hot_share; }, 0.01, 1.0));
    v.push_back(uint_key<int>(
        "policy.cs_pgo_stages", R,
        "Context-sensitive PGO: stages of the optimized build with context-sensitive "
        "instrumentation after each profile made from instrumentation counts; their counts "
        "join the profile (0 = no such round); the guard tries the profile without them.",
        [](Config& c) -> int& { return c.policy.cs_pgo_stages; }, 0, 1'000'000));
    v.push_back(enum_key(
        "guard", R,
        "on: A/B-test each new profile (and knob variants) against the incumbent build on live "
        "stages and serve the faster (docs/guard.md); off: serve the profile as is.",
        kGuardModeNames, [](Config& c) -> GuardMode& { return c.guard.mode; }));
    v.push_back(uint_key<int>(
        "guard.min_stages", R,
        "Stages a program runs under a profile before the guard trials it against the plain "
        "build (fewer: the profile is served as is).",
        [](Config& c) -> int& { return c.guard.min_stages; }, 0, 1'000'000));
    v.push_back(uint_key<int>(
        "guard.tune_min_stages", R,
        "Stages under one profile before knob variants are tried (fewer: never tuned).",
        [](Config& c) -> int& { return c.guard.tune_min_stages; }, 0, 100'000'000));
    v.push_back(uint_key<int>(
        "guard.tune_max_variants", R, "Knob variants tried per profile version (0 = no tuning).",
        [](Config& c) -> int& { return c.guard.tune_max_variants; }, 0, 16));
    v.push_back(uint_key<int>(
        "guard.min_pairs", R,
        "Stage pairs (incumbent + candidate) before a trial can decide (two pairs make a "
        "block; the test looks after each block).",
        [](Config& c) -> int& { return c.guard.trial.min_pairs; }, 2, 10'000));
    v.push_back(uint_key<int>(
        "guard.max_pairs", R,
        "Stage pairs after which a trial ends with no difference: the incumbent stays (a keep "
        "needs six blocks of two pairs at the default guard.keep_alpha).",
        [](Config& c) -> int& { return c.guard.trial.max_pairs; }, 2, 10'000));
    v.push_back(double_key(
        "guard.min_effect", R,
        "Smallest time ratio change (0.01 = 1%) a trial acts on: a candidate is kept only when "
        "shown faster than this, rejected only when shown slower than this.",
        [](Config& c) -> double& { return c.guard.trial.min_effect; }, 0.0, 0.5));
    v.push_back(double_key(
        "guard.keep_alpha", R,
        "Bound on the probability that a trial keeps a candidate that is not faster by more "
        "than guard.min_effect, over all its looks, whatever the stage noise (docs/guard.md).",
        [](Config& c) -> double& { return c.guard.trial.keep_alpha; }, 0.0001, 0.5));
    v.push_back(double_key(
        "guard.reject_alpha", R,
        "Bound on the probability that a trial rejects a candidate that is not slower by more "
        "than guard.min_effect (a rejection ends the trial early; the incumbent stays).",
        [](Config& c) -> double& { return c.guard.trial.reject_alpha; }, 0.0001, 0.5));
    v.push_back(uint_key<int>(
        "guard.checkpoint_pairs", R,
        "A running trial's samples are saved in the profile after every this many pairs, so a "
        "restart continues it (0 = never: a restart starts the trial over).",
        [](Config& c) -> int& { return c.guard.checkpoint_pairs; }, 0, 10'000));
    v.push_back(enum_key(
        "guard.clock", R,
        "What a trial compares: cpu (the worker process's CPU time during the call, every thread "
        "of it; what other processes take is left out) or wall (its wall time). A change starts "
        "running trials over.",
        kGuardClockNames, [](Config& c) -> GuardClock& { return c.guard.clock; }));
    v.push_back(uint_key<unsigned>(
        "control_threads", X,
        "Threads running control methods (health, capabilities, metrics, config) apart from the "
        "handler threads, so they answer while every handler thread is busy.",
        [](Config& c) -> unsigned& { return c.control_threads; }, 1, 64));
    v.push_back(uint_key<unsigned>(
        "max_connections_per_uid", R,
        "Connections one uid may hold open; one more is sent a resource_exhausted error line and "
        "closed (0 = no limit).",
        [](Config& c) -> unsigned& { return c.max_connections_per_uid; }, 0, 1'000'000));
    v.push_back(uint_key<unsigned>(
        "max_inflight_per_uid", R,
        "Work requests one uid may have queued or running across its connections (counted until "
        "the handler returns); one more gets a resource_exhausted error. Control methods do not "
        "count (0 = no limit).",
        [](Config& c) -> unsigned& { return c.max_inflight_per_uid; }, 0, 1'000'000));
    v.push_back(ms_key(
        "read_timeout_ms", R,
        "A request line that has begun must be complete after this much waiting for its bytes, "
        "else the connection is closed.",
        [](Config& c) -> milliseconds& { return c.read_timeout; }, 1, kDay));
    v.push_back(ms_key(
        "idle_timeout_ms", R,
        "A connection with no request running and no line begun is closed after this long "
        "without a byte from the client.",
        [](Config& c) -> milliseconds& { return c.idle_timeout; }, 1, kDay));
    v.push_back(ms_key(
        "write_timeout_ms", R,
        "A reply the client has not taken in full within this long closes the connection.",
        [](Config& c) -> milliseconds& { return c.write_timeout; }, 1, kDay));
    v.push_back(uint_key<std::uint64_t>(
        "max_unsent_bytes", R,
        "Reply bytes a connection may have waiting to be sent before its further requests are "
        "no longer read (0 = one reply at a time).",
        [](Config& c) -> std::uint64_t& { return c.max_unsent_bytes; }, 0, kGiB));
    v.push_back(uint_key<std::uint64_t>(
        "max_buffered_bytes_per_uid", R,
        "Bytes one uid's connections may hold at once (request lines being read, replies not yet "
        "sent); a read past it gets a resource_exhausted line and its connection is closed "
        "(0 = no limit). Keep it at least max_request_bytes.",
        [](Config& c) -> std::uint64_t& { return c.max_buffered_bytes_per_uid; }, 0, 64 * kGiB));
    {
      KeyDef d{"metrics_listen", X,
               "Prometheus HTTP endpoint (GET /metrics): empty = off; PORT = 127.0.0.1:PORT "
               "(loopback); HOST:PORT with an IPv4 address or [IPv6] address.",
               nullptr, nullptr};
      d.set = [](Config& c, std::string_view s) -> std::optional<std::string> {
        if (auto err = check_listen_address(s)) return err;
        c.metrics_listen = std::string(s);
        return std::nullopt;
      };
      d.get = [](const Config& c) { return c.metrics_listen; };
      v.push_back(std::move(d));
    }
    v.push_back(uint_key<unsigned>(
        "exec_object_cache_entries", R,
        "Linked programs each exec worker keeps by storage key, least recently used dropped "
        "first; an execute of one it holds is sent without the object (0 = the object with "
        "every execute).",
        [](Config& c) -> unsigned& { return c.exec_object_cache_entries; }, 0, 4096));
    {
      KeyDef d{"profile_store", X,
               "Where profiles live (docs/fleet.md): sqlite = profiles.db in the state dir; "
               "postgresql://... (libpq URI) = a store shared by hosts.",
               nullptr, nullptr};
      d.set = [](Config& c, std::string_view s) -> std::optional<std::string> {
        if (auto err = check_profile_store(s)) return err;
        c.profile_store = s.empty() ? std::string(kSqliteStore) : std::string(s);
        return std::nullopt;
      };
      d.get = [](const Config& c) { return c.profile_store; };
      d.shown = [](std::string_view s) { return redact_store_location(s); };
      v.push_back(std::move(d));
    }
    {
      KeyDef d{"host_name", X,
               "This host's name in feedback rows and profile history (empty = gethostname()).",
               nullptr, nullptr};
      d.set = [](Config& c, std::string_view s) -> std::optional<std::string> {
        const char* what = "empty or 1-255 printable characters without spaces";
        if (s.size() > 255) return what;
        for (unsigned char ch : s)
          if (ch <= 0x20 || ch >= 0x7f) return what;
        c.host_name = std::string(s);
        return std::nullopt;
      };
      d.get = [](const Config& c) { return c.host_name; };
      v.push_back(std::move(d));
    }
    v.push_back(uint_key<std::uint64_t>(
        "profile_store_spool_max_bytes", X,
        "Most bytes of feedback and profile writes spooled in the state dir while the profile "
        "store is unavailable; past it the oldest profile writes are dropped first (counted).",
        [](Config& c) -> std::uint64_t& { return c.profile_store_spool_max_bytes; }, 1u << 20,
        1024 * kGiB));
    return v;
  }();
  return defs;
}

const KeyDef* find_key(std::string_view name) {
  for (const KeyDef& d : key_defs())
    if (name == d.name) return &d;
  return nullptr;
}

const char* retired_key(std::string_view name) {
  // The guard's tests before its sequential test (docs/guard.md, "The test").
  constexpr const char* kGuardTests =
      "the guard's sequential test replaced the signed-rank and rank tests and the early stop; "
      "its error bounds are guard.keep_alpha and guard.reject_alpha (docs/guard.md)";
  for (const char* retired :
       {"guard.accept_z", "guard.reject_z", "guard.rank_p", "guard.early_margin"})
    if (name == retired) return kGuardTests;
  return nullptr;
}

std::string shown(const KeyDef& d, std::string_view value) {
  return d.shown ? d.shown(value) : std::string(value);
}

} // namespace config_detail

std::string_view to_string(SandboxFilesystem f) {
  return kSandboxFilesystemNames.name(f);
}

std::string_view to_string(GuardClock c) {
  return kGuardClockNames.name(c);
}

std::string_view to_string(SandboxCgroup c) {
  return kSandboxCgroupNames.name(c);
}

std::string_view to_string(GpuUse g) {
  return kGpuUseNames.name(g);
}

std::string_view to_string(ReloadBehavior r) {
  return r == ReloadBehavior::runtime ? "runtime" : "restart";
}

} // namespace fdo::daemon
