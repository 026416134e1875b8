// Where fdoctl's requests go: the daemon over its socket, or — when the daemon
// is down and a state dir is given — the SQLite profile store opened
// read-only. Both answer the read methods with the same JSON (the shapes of
// schemas/methods/*.json), so every command renders one way whatever the
// source.
#pragma once

#include "fdo/ctl/client.h"
#include "fdo/util/expected.h"
#include "fdo/util/time.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace fdo::ctl {

enum class BackendKind { daemon, store };

class Backend {
public:
  virtual ~Backend() = default;
  virtual Expected<nlohmann::json> call(std::string_view method, const nlohmann::json& params) = 0;
  virtual BackendKind kind() const = 0;
  // "fdod at /run/fdod/fdod.sock" or "profile store /var/lib/fdod/profiles.db (read-only)"
  virtual std::string describe() const = 0;
};

class DaemonBackend final : public Backend {
public:
  explicit DaemonBackend(RpcClient client) : client_(std::move(client)) {}
  Expected<nlohmann::json> call(std::string_view method, const nlohmann::json& params) override;
  BackendKind kind() const override { return BackendKind::daemon; }
  std::string describe() const override;

private:
  RpcClient client_;
};

// Serves profile.list, profile.get, profile.history and profile.export
// (format json) from <state_dir>/profiles.db opened read-only (SQLite WAL: safe
// beside a running daemon, never writes). Other methods fail with
// Errc::unsupported saying they need the daemon. Unlike the daemon, which
// shows each uid its own profiles, the store lists every profile the file
// holds (whoever can read the file can read them all).
class StoreBackend final : public Backend {
public:
  // The store under `state_dir` (profiles.db), or at `location` when given
  // (a path or a postgresql:// URI, --store); opened read-only.
  static Expected<std::unique_ptr<StoreBackend>> open(const std::string& state_dir,
                                                      const std::string& location = {});
  ~StoreBackend() override;

  Expected<nlohmann::json> call(std::string_view method, const nlohmann::json& params) override;
  BackendKind kind() const override { return BackendKind::store; }
  std::string describe() const override;

  struct Impl;

private:
  explicit StoreBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// RFC 3339 UTC with milliseconds, as fdod writes times ("2024-05-01T12:00:00.123Z").
using fdo::rfc3339_ms;

} // namespace fdo::ctl
