// How the service isolates client code (docs/security.md): decided once at
// start from the configuration and what the host can do, then turned into the
// sandbox spec each worker enters for its tenant (sandbox.h).
#pragma once

#include "fdo/daemon/cgroup.h"
#include "fdo/daemon/config.h"
#include "fdo/daemon/sandbox.h"
#include "fdo/util/expected.h"

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fdo::daemon {

enum class WorkerRole { compile, exec, gpu };
std::string_view to_string(WorkerRole role);

// The sandbox tenant of a program scope: "uid:N" per tenant, "shared" for
// shared profiles, "system" for the daemon's own jobs (empty scope and tenant).
std::string sandbox_tenant(std::string_view scope);

// The host's NVIDIA device nodes (/dev/nvidia*), which a GPU worker may open
// and nothing else may.
std::vector<std::string> gpu_device_nodes();

class Isolation {
public:
  // Chooses the filesystem isolation and whether uids are switched. Errors:
  // unsupported when the configuration asks for what the host cannot do (or,
  // in auto mode, when neither Landlock nor a mount namespace is available).
  static Expected<Isolation> choose(const Config& config, const SandboxSupport& host);

  // What a worker of `role` enters for `tenant` ({"spec": ..., "retire_growth_bytes": ...},
  // the bind request of worker_loop.h). `config` is the running configuration.
  nlohmann::json bind_request(WorkerRole role, const std::string& tenant,
                              const Config& config) const;
  // The uid jobs of `tenant` run as, when uids are switched.
  std::optional<std::uint32_t> uid_for(const std::string& tenant) const;

  FilesystemIsolation filesystem() const { return filesystem_; }
  bool switches_uids() const { return switch_uids_; }
  // One line for the log and `capabilities`.
  std::string describe() const;
  nlohmann::json to_json() const;

  // Paths a sandboxed worker may read (Landlock).
  static const std::vector<std::string>& readable_paths();

  // Takes over fdod's cgroup for its workers as sandbox_cgroup says (cgroup.h):
  // auto uses it when it is delegated to fdod (or is a container's root) and
  // otherwise records why not; required makes that an error. Call once, at
  // start, before the pools exist.
  Status open_cgroups(const Config& config);
  // The tree workers are placed in; null without one.
  std::shared_ptr<CgroupTree> cgroups() const { return cgroups_; }

private:
  FilesystemIsolation filesystem_ = FilesystemIsolation::landlock;
  bool switch_uids_ = false;
  std::uint32_t uid_base_ = 0;
  std::uint32_t uid_count_ = 0;
  int landlock_abi_ = 0;
  std::string state_dir_;
  std::shared_ptr<CgroupTree> cgroups_;
  std::string cgroup_unavailable_; // why there is no tree (auto mode)
};

} // namespace fdo::daemon
