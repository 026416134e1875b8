// Internal to fdo_ctl: what every command gets (options, streams, the way to
// reach the daemon or the store) and the command entry points.
#pragma once

#include "fdo/ctl/backend.h"
#include "fdo/ctl/cli.h"
#include "fdo/util/expected.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace fdo::ctl {

struct Globals {
  std::string socket;
  std::string state_dir;
  std::string store; // --store: a path or postgresql:// URI; empty: <state_dir>/profiles.db
  bool offline = false;
  bool json = false;
  double timeout_s = 300;
};

// Whether a command may fall back to the read-only store.
enum class Need { daemon, read };

class Context {
public:
  Context(Io& io, Globals globals) : io_(io), g_(std::move(globals)) {}

  Io& io() { return io_; }
  const Globals& globals() const { return g_; }
  bool json_output() const { return g_.json; }

  // The daemon, or for Need::read with --state-dir the store when the daemon
  // cannot be reached (or always with --offline). A failure to connect sets
  // connect_failed() so the exit code says "cannot connect".
  Expected<std::unique_ptr<Backend>> backend(Need need);
  bool connect_failed() const { return connect_failed_; }

  // Exactly one JSON document on stdout.
  void emit(const nlohmann::json& doc);
  void note(const std::string& line); // stderr, "fdoctl: note: ..."

private:
  Io& io_;
  Globals g_;
  bool connect_failed_ = false;
};

// A method call whose error names the method.
Expected<nlohmann::json> call(Backend& backend, std::string_view method,
                              const nlohmann::json& params = nlohmann::json::object());

// KEY as typed -> a full profile key: 64 hex as is, else a unique hex prefix
// of a key from profile.list.
Expected<std::string> resolve_profile_key(Backend& backend, const std::string& text);

// --- commands (each returns ok or the error to report) ---
struct RunOptions {
  std::string file;
  std::string entry;
  std::vector<std::string> args;
  std::vector<std::string> buffers;
  int stages = 6;
  std::string name;
  bool show_buffers = false;
  // Keep executing past `stages` until a stage runs optimized code, for at
  // most wait_timeout_s seconds.
  bool wait_optimized = false;
  double wait_timeout_s = 60;
};
Status cmd_run(Context& ctx, const RunOptions& o);

Status cmd_profiles(Context& ctx);
enum class RawCounts { omit, print };
Status cmd_profile_show(Context& ctx, const std::string& key, std::optional<std::int64_t> version,
                        RawCounts counts);
Status cmd_profile_history(Context& ctx, const std::string& key);
enum class DiffDetail { largest_moves, everything };
Status cmd_profile_diff(Context& ctx, const std::string& key, std::int64_t v1, std::int64_t v2,
                        double threshold_points, DiffDetail detail);
enum class PinOp { pin, unpin, reset };
Status cmd_profile_pin(Context& ctx, PinOp op, const std::string& key);
enum class ExportScope { listed_keys, all_profiles };
Status cmd_profile_export(Context& ctx, const std::vector<std::string>& keys, ExportScope scope,
                          const std::string& format, const std::string& output);
Status cmd_profile_import(Context& ctx, const std::string& file);
// FILE is an LLVM indexed profile of PROGRAM's source (import_profdata.cpp).
Status cmd_profile_import_profdata(Context& ctx, const std::string& profdata_file,
                                   const std::string& program_file);
Status cmd_programs(Context& ctx);
Status cmd_program_delete(Context& ctx, const std::string& program);
Status cmd_profile_delete(Context& ctx, const std::string& key);
Status cmd_backup(Context& ctx, const std::string& file);
Status cmd_restore(Context& ctx, const std::string& file);
struct GcOptions {
  bool dry_run = false;
  std::string max_age; // "" = the daemon's gc_max_age_days; else N[d|h|m|s]
};
Status cmd_gc(Context& ctx, const GcOptions& o); // gc_command.cpp
// "30" (days), "12h", "90m", "45s" -> seconds; invalid_argument otherwise.
Expected<std::int64_t> parse_age_seconds(const std::string& text);
// gc on a stopped daemon's state dir, every tenant's data (gc_offline.cpp);
// the result has the shape of the daemon's gc method.
Expected<nlohmann::json> gc_state_dir(const std::string& state_dir, bool dry_run,
                                      std::int64_t max_age_s);
Status cmd_cache_stats(Context& ctx);
Status cmd_explain(Context& ctx, const std::string& program, std::uint64_t limit);
Status cmd_status(Context& ctx);
struct DoctorOptions {
  bool self_test = false; // --self-test: self_test.h
  std::string fdod;       // --fdod
  int max_stages = 40;    // --stages
};
Status cmd_doctor(Context& ctx, const DoctorOptions& options);
Status cmd_metrics(Context& ctx);
Status cmd_config(Context& ctx);
struct AnnotateRequest;
Status cmd_profile_annotate(Context& ctx, const AnnotateRequest& request); // annotate.cpp

} // namespace fdo::ctl
