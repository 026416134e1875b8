// fdod's configuration: defaults, the `key = value` file, command-line
// overrides and SIGHUP reloads. Every key, its default and whether it can
// change without a restart is listed in docs/fdod-config.md (a test checks the
// document against keys()).
#pragma once

#include "fdo/cache/orchestrator.h"
#include "fdo/daemon/guard_config.h"
#include "fdo/daemon/policy_config.h"
#include "fdo/util/expected.h"
#include "fdo/util/log.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fdo::daemon {

using cache::TierUp;

// How client code is kept out of the state dir (docs/security.md).
enum class SandboxFilesystem {
  automatic,       // Landlock where the kernel has it, else a mount namespace, else refuse
  landlock,        // Landlock only (refuse to start without it)
  mount_namespace, // a private mount namespace with the state dir covered
  none,            // no filesystem restriction: unsafe, for kernels that offer neither
};
std::string_view to_string(SandboxFilesystem f);

// Whether workers get cgroup v2 groups of their own (docs/security.md).
enum class SandboxCgroup {
  automatic, // when fdod's cgroup is delegated to it (Delegate=yes) or a container's root
  off,       // never: hard rlimits only
  required,  // refuse to start without one
};
std::string_view to_string(SandboxCgroup c);

// Whether fdod runs NVPTX programs on the host's GPU (docs/gpu.md).
enum class GpuUse {
  automatic, // when the host has NVIDIA device nodes (/dev/nvidia*)
  on,        // always try (the driver's answer says why not); for gpu_driver fakes in tests
  off,       // never: NVPTX programs are refused
};
std::string_view to_string(GpuUse g);

// Whether a changed key takes effect on SIGHUP or only after a restart.
enum class ReloadBehavior { runtime, restart };
std::string_view to_string(ReloadBehavior r); // "runtime", "restart"

struct ConfigKeyInfo {
  std::string name;          // as written in the file, e.g. "policy.min_stages"
  std::string default_value; // as written in the file
  ReloadBehavior reload = ReloadBehavior::runtime;
  std::string description;
};

// (key, value) pairs applied over the file, in order: the command line.
using ConfigOverrides = std::vector<std::pair<std::string, std::string>>;

// Sampling of each stage in the exec worker (sampling.* keys, docs/perf.md).
struct SamplingConfig {
  std::vector<std::string> events = {"cpu-clock", "branch-misses", "L1-icache-load-misses"};
  std::uint64_t frequency_hz = 250; // 0: no sampling
  std::uint64_t max_samples = 4000; // attributed per stage
};

// profile_store's value for the SQLite file in the state dir.
inline constexpr std::string_view kSqliteStore = "sqlite";

// `location` with any password (URI userinfo or a password= parameter)
// replaced by "***".
std::string redact_store_location(std::string_view location);

struct Config {
  std::string socket = "/run/fdod/fdod.sock";
  std::string state_dir = "/var/lib/fdod";
  log::Level log_level = log::Level::info;
  std::uint64_t max_request_bytes = 16u << 20;
  std::chrono::milliseconds request_timeout{120000};
  unsigned handler_threads = 0; // 0 = 2 x hardware threads, at least 4
  std::chrono::milliseconds drain_timeout{30000};
  unsigned compile_workers = 2;
  unsigned compile_threads = 0; // per compile; 0 = the host's hardware threads, at most 8
  // Most parts a large program is compiled in (docs/jit.md, "Incremental
  // recompiles"); 0 = as many as compile_threads. More parts than threads
  // make a rewrite's recompile smaller, at some cost to the code.
  unsigned compile_parts = 0;
  // Compile workers run under SCHED_BATCH at this nice value, below the
  // request threads and the exec workers (docs/workers.md, "CPU priority");
  // 0 = the daemon's own priority.
  unsigned compile_nice = 10;
  GpuUse gpu = GpuUse::automatic;
  std::string gpu_driver = "libcuda.so.1";
  unsigned gpu_workers = 1;
  std::chrono::milliseconds gpu_kernel_timeout{10'000};
  unsigned exec_workers = 2;
  unsigned max_running_compiles_per_uid = 0; // 0 = compile_workers - 1, at least 1
  // A build ahead of need stopped this long in all runs on as a stage's (0: no bound).
  std::chrono::milliseconds compile_background_max_stopped{30000};
  std::chrono::milliseconds compile_timeout{60000};
  std::chrono::milliseconds exec_timeout{10000};
  std::uint64_t compile_memory_mb = 2048;
  std::uint64_t exec_memory_mb = 1024;
  std::uint64_t max_output_bytes = 64u << 20;
  std::uint64_t max_program_bytes = 32u << 20;
  unsigned max_programs_per_uid = 1000; // 0 = no limit
  unsigned gc_max_age_days = 30;
  std::uint64_t memory_cache_bytes = 256u << 20;
  std::uint64_t disk_cache_bytes = 1u << 30;
  // The remote object tier (docs/fleet.md): "" = off, redis://HOST[:PORT], unix:/PATH.
  std::string object_cache_remote;
  std::chrono::milliseconds object_cache_remote_timeout{100};
  std::uint64_t object_cache_remote_max_entry_bytes = 64u << 20;
  TierUp tier_up = TierUp::async;
  bool share_profiles_across_tenants = false;
  unsigned profile_retention = 50;
  std::chrono::milliseconds feedback_flush{1000};
  std::vector<std::string> perf_events = {"instructions",          "cycles",
                                          "branch-instructions",   "branch-misses",
                                          "L1-icache-load-misses", "iTLB-load-misses"};
  // Isolation of client code (docs/security.md).
  SandboxFilesystem sandbox_filesystem = SandboxFilesystem::automatic;
  std::uint32_t sandbox_uid_base = 1879048192; // jobs run as base + 1 + (tenant uid mod count - 1)
  std::uint32_t sandbox_uid_count = 65536;
  SandboxCgroup sandbox_cgroup = SandboxCgroup::automatic;
  std::uint64_t job_max_tasks = 64;           // pids.max of a worker's cgroup
  std::uint64_t job_output_bytes = 64u << 10; // per stream (stdout, stderr) per job
  std::uint64_t worker_retire_growth_mb = 64;
  unsigned max_queued_jobs_per_uid = 32;
  SamplingConfig sampling; // sampling.* keys
  PolicyConfig policy;     // policy.* keys
  GuardConfig guard;       // guard.* keys (docs/guard.md)
  // Connections and tenants (docs/fdod-protocol.md): the server's own pool
  // for control methods, per-uid limits and per-connection deadlines.
  unsigned control_threads = 2;
  unsigned max_connections_per_uid = 64;
  unsigned max_inflight_per_uid = 16;
  std::chrono::milliseconds read_timeout{30000};
  std::chrono::milliseconds idle_timeout{600000};
  std::chrono::milliseconds write_timeout{30000};
  std::uint64_t max_unsent_bytes = 4u << 20;
  std::uint64_t max_buffered_bytes_per_uid = 128u << 20;
  // Prometheus HTTP endpoint: "" = off; "PORT" = 127.0.0.1:PORT; "HOST:PORT".
  std::string metrics_listen;
  // Linked programs an exec worker keeps by storage key (the object travels
  // once per worker); 0 = the object is sent with every execute.
  unsigned exec_object_cache_entries = 16;
  // The profile store (docs/fleet.md): kSqliteStore = profiles.db in the state
  // dir; or a libpq URI postgresql://... shared by hosts.
  std::string profile_store = std::string(kSqliteStore);
  // This host's name in feedback rows and history; "" = gethostname().
  std::string host_name;
  // Cap of the local spool of writes kept while the profile store is down.
  std::uint64_t profile_store_spool_max_bytes = 256u << 20;

  static Config defaults() { return Config{}; }

  // Defaults, then the file at `path`, then `overrides`. Errors name the file,
  // the line number and the key (or "command line" and the key).
  static Expected<Config> load(const std::string& path, const ConfigOverrides& overrides = {});
  // The file format without a file: `origin` is used in error messages.
  static Expected<Config> parse(std::string_view text, std::string_view origin,
                                const ConfigOverrides& overrides = {});

  // Sets one key from its textual value (the file syntax); errors name the key.
  Status set(std::string_view key, std::string_view value);
  // set() for each pair; errors say "command line".
  Status apply_overrides(const ConfigOverrides& overrides);
  // The value of one key in file syntax; empty for an unknown key.
  std::string get(std::string_view key) const;
  // get() as shown to people (errors, logs, the config method): a password in
  // profile_store is replaced by "***".
  std::string get_shown(std::string_view key) const;
  // The whole configuration as a file that parse() reads back unchanged.
  std::string to_text() const;

  // Effective handler thread count (resolves 0 = auto).
  unsigned effective_handler_threads() const;
  unsigned effective_max_running_compiles_per_uid() const;
  unsigned effective_compile_threads() const;

  // All keys in documentation order.
  static const std::vector<ConfigKeyInfo>& keys();
};

// Where fdod's configuration comes from at start (docs/fdod-config.md,
// "Where the configuration comes from"): an explicitly given file must exist
// (a missing one is an error, Errc::not_found, naming it); without one the
// default path is read when it exists and its absence means the built-in
// defaults.
struct ConfigSource {
  std::string explicit_path; // --config FILE, or empty
  std::string default_path;  // read when explicit_path is empty and it exists
  bool no_file = false;      // --no-config: defaults (and overrides) only
};

struct LoadedConfig {
  Config config;
  std::string file; // the file read, or empty when none was
  // Per key, in keys() order: "default", "FILE:LINE" or "command line".
  std::vector<std::pair<std::string, std::string>> origins;
};

// Defaults, then the file `source` picks, then `overrides`; errors as load().
Expected<LoadedConfig> load_config(const ConfigSource& source,
                                   const ConfigOverrides& overrides = {});

// The file load_config() reads for `source` now ("" for none): the path a
// SIGHUP re-reads.
std::string config_file_for(const ConfigSource& source);

// `fdod --print-config`: every key as `key = value` (text that parse() reads
// back unchanged), each preceded by a comment saying where its value came
// from.
std::string print_config(const LoadedConfig& loaded);

// The commented sample configuration installed as /etc/fdod/fdod.conf: every
// key commented out at its default, with its description and reload class.
std::string sample_config();

// `running` with every runtime key's value taken from `next`; restart-only
// keys keep their running values. The key table decides which is which.
Config with_runtime_keys(const Config& running, const Config& next);

struct ConfigReload {
  // The running configuration with every runtime-changeable key taken from
  // the file (and overrides); restart-only keys keep their running values.
  Config config;
  std::vector<std::string> applied; // "key: old -> new"
  std::vector<std::string> ignored; // "key: old -> new" that need a restart
};

// SIGHUP: re-read `path` (+ the same overrides as at start). Logs each applied
// change at info and each ignored one at warning. On error (file gone, bad
// value) nothing changes and the error says why.
Expected<ConfigReload> reload_config(const Config& running, const std::string& path,
                                     const ConfigOverrides& overrides = {});

} // namespace fdo::daemon
