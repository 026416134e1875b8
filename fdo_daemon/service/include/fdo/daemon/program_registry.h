// The program registry: programs registered by tenants, by program id (their
// initial key). Each program's bytes are kept in <programs_dir>/<IK>.prog
// (mode 0600, in a 0700 directory) and its row in the store, so ids stay
// valid across restarts; the in-memory map is a cache of both. The row
// records the program hash of the scoped bytes and the scoped profile key, and
// a file loaded after a restart must match the hash (or, for a row from
// before hashes were recorded, give its id), or it is refused as corrupt and
// never run. No file or store I/O happens under the registry's lock.
#pragma once

#include "fdo/cache/interfaces.h"
#include "fdo/daemon/tenant.h"
#include "fdo/jit/types.h"
#include "fdo/profile_store/profile_store.h"
#include "fdo/util/expected.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fdo::daemon {

// What the compile worker reports about a program without compiling it.
// What a program's code runs on: the host CPU, or the host's GPU (a module
// that targets NVPTX, whose entries are its kernels; docs/gpu.md).
enum class ProgramTarget { host, nvptx };

struct ProgramAnalysis {
  std::string profile_key; // from the canonical IR, before tenant scoping
  std::vector<jit::EntryInfo> entries;
  ProgramTarget target = ProgramTarget::host;
};

class ProgramAnalyzer {
public:
  virtual ~ProgramAnalyzer() = default;
  // Parsing client IR is as dangerous as running it: the analysis runs in a
  // worker bound to the program's tenant (`scope`).
  virtual Expected<ProgramAnalysis> analyze(std::string_view program_bytes,
                                            const TenantScope& scope) = 0;
};

// The registry's persistent rows (the store's program table).
class ProgramIndex {
public:
  virtual ~ProgramIndex() = default;
  // Inserts or updates (ProfileStore::register_program): a recorded program
  // hash never changes.
  virtual Status add(const profile_store::ProgramInfo& info) = 0;
  virtual Expected<std::optional<profile_store::ProgramInfo>> find(std::string_view ik) = 0;
  virtual Status touch(std::string_view ik) = 0;
  // How many programs are registered to `owner` (max_programs_per_uid).
  virtual Expected<std::int64_t> count_owned(std::int64_t owner) = 0;
};

struct ProgramRecord {
  std::string ik; // the program id
  std::string name;
  cache::Program program; // scope + the bytes as submitted: what is keyed and compiled
  std::string pk;         // the tenant-scoped profile key
  std::int64_t owner = 0;
  std::vector<jit::EntryInfo> entries;
  ProgramTarget target = ProgramTarget::host;
  mutable std::atomic<std::int64_t> stages{0}; // stages run since this daemon loaded it

  TenantScope scope() const { return TenantScope::from_string(program.scope); }
};

using ProgramRef = std::shared_ptr<const ProgramRecord>;
// The record's program, sharing the record: a compile the orchestrator
// queues for later keeps the record alive instead of copying the bytes.
inline cache::SharedProgram shared_program(const ProgramRef& rec) {
  return cache::SharedProgram(rec, &rec->program);
}
// The initial key of a program under the compiler's current identity; may stamp
// it into the program (Orchestrator::stamp_initial_key).
using InitialKeyFn = std::function<std::string(cache::Program&)>;

class ProgramRegistry {
public:
  ProgramRegistry(std::string programs_dir, ProgramAnalyzer& analyzer, ProgramIndex& index,
                  InitialKeyFn initial_key);

  // Registers `bytes` for `uid` under `scope` (idempotent: the same bytes in the
  // same scope return the same record). Errors: invalid_argument (empty, or the
  // reserved scope prefix), resource_exhausted (over max_bytes, or a new
  // program when `uid` already has max_programs registered; 0 = no limit), the
  // analyzer's parse/verify errors, io when the .prog file or the row cannot be
  // written. Registrations in flight count against the limit, so concurrent
  // ones never overshoot it (near the limit one may be refused early).
  Expected<ProgramRef> add(std::string_view bytes, std::string name, std::int64_t uid,
                           const TenantScope& scope, std::uint64_t max_bytes,
                           unsigned max_programs = 0);

  // A registered program that `uid` may use: loaded from the state dir after a
  // restart. Another tenant's program is not_found, as is an unknown id. A
  // .prog file that does not hold the registered bytes is corrupt (naming the
  // file); registering the program again writes it anew.
  Expected<ProgramRef> find(const std::string& ik, std::int64_t uid, ProfileSharing sharing);

  // Drops a program (program.delete): its in-memory record and its .prog
  // file. The caller removes its store row and mappings; stages already
  // holding its record finish.
  Status forget(const std::string& ik);
  // Drops every in-memory record (the store was restored from a backup): each
  // program is loaded again from its row, or is unknown if the row is gone.
  void forget_loaded();
  std::size_t loaded() const;
  const std::string& programs_dir() const { return dir_; }

  // The .prog file format: the bytes as submitted, preceded for a scoped
  // program by "FDO-SCOPE\0<scope>\n" (docs/keys.md). Exposed for tests.
  static std::string encode_file(const cache::Program& program);
  static Expected<cache::Program> decode_file(std::string contents);

private:
  Expected<ProgramRef> load(const std::string& ik, std::int64_t uid, ProfileSharing sharing);
  std::string path_of(const std::string& ik) const;

  std::string dir_;
  ProgramAnalyzer& analyzer_;
  ProgramIndex& index_;
  InitialKeyFn initial_key_;

  mutable std::mutex mu_; // guards programs_ only
  std::map<std::string, ProgramRef> programs_;

  // A registration of a new program counted against its uid's limit until
  // its row is written (then the store's count includes it).
  class Slot {
  public:
    Slot() = default;
    Slot(ProgramRegistry* registry, std::int64_t uid) : registry_(registry), uid_(uid) {}
    Slot(Slot&& o) noexcept : registry_(std::exchange(o.registry_, nullptr)), uid_(o.uid_) {}
    Slot& operator=(Slot&&) = delete;
    ~Slot();

  private:
    ProgramRegistry* registry_ = nullptr;
    std::int64_t uid_ = 0;
  };
  Expected<Slot> reserve(const std::string& ik, std::int64_t uid, unsigned max_programs);

  // Guards pending_ and orders the count-and-reserve of new registrations
  // (one SQLite count each; never taken on the path of a known program).
  std::mutex quota_mu_;
  std::map<std::int64_t, unsigned> pending_;
};

} // namespace fdo::daemon
