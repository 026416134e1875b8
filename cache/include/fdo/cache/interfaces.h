// The two seams through which the cache talks to the rest of fdo. The daemon
// implements KeyStore over the SQLite profile_store and Compiler over JIT
// worker processes; tests use MemoryKeyStore and fakes. The cache itself never
// parses IR or opens the profile database (dependency graph: util <- cache <- fdo_daemon).
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/profile.h"
#include "fdo/util/urgency.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace fdo::cache {

// The current profile for one profile key, as the compiler will see it.
struct ProfileRef {
  std::string pk;
  std::int64_t version = 0;              // 0 = no profile yet
  std::string digest;                    // profile_digest(*doc), or no_profile_digest() when none
  std::shared_ptr<const ProfileDoc> doc; // null when none
};

// A ProfileRef meaning "PK has no profile yet".
ProfileRef no_profile(std::string pk);

// Persistent key maps (patent FIG. 2: profile key mapping 250 and virtual key
// mapping 260) plus the profile lookup. Implementations must be thread-safe:
// the orchestrator calls them from stage threads and tier-up threads at once.
class KeyStore {
public:
  virtual ~KeyStore() = default;
  // IK -> PK, learned at a program's first compile.
  virtual Expected<std::optional<std::string>> lookup_profile_key(const std::string& ik) = 0;
  virtual Status put_profile_key(const std::string& ik, const std::string& pk) = 0;
  // CK -> VK: a first-stage output stored under VK stays findable by its CK.
  virtual Expected<std::optional<std::string>> lookup_virtual_key(const std::string& ck) = 0;
  virtual Status put_virtual_key(const std::string& ck, const std::string& vk) = 0;
  // The current profile for PK; version 0 / null doc when there is none.
  virtual Expected<ProfileRef> current_profile(const std::string& pk) = 0;
};

// One program as a stage submits it and as the compiler receives it.
struct Program {
  // The orchestrator computes it and fills it in for the compiler. A caller
  // may set it to initial_key_for(program) to spare a copy of the bytes when
  // the stage compiles; any other value is ignored.
  std::string ik;
  // The tenant the program belongs to: "" = unscoped (shared across tenants),
  // otherwise e.g. "uid:1000". Part of IK, so tenants never share outputs.
  std::string scope;
  std::string bytes; // LLVM IR text or bitcode, exactly as submitted
  // The compiler identity `ik` was computed under, set only by
  // Orchestrator::stamp_initial_key: while it is the compiler's current
  // identity a stage takes `ik` as it is instead of hashing the bytes again.
  std::string ik_identity;
};

// A program the caller keeps in shared memory (the daemon's program record,
// through an aliasing pointer): a compile queued for later keeps a reference
// to it instead of a copy of the bytes, which are megabytes for a big program.
using SharedProgram = std::shared_ptr<const Program>;

struct Identification {
  std::string pk; // hash of the canonical IR
};

struct CompiledOutput {
  std::string object;   // relocatable object bytes
  std::string metadata; // opaque JSON text from the JIT, stored with the object
  // What the compile decided that the stage's explain record should say
  // (e.g. the functions it specialized); empty when nothing. Not stored.
  std::string explanation;
};

// Whether a stage waits for a compile (or will want its output next: a
// tier-up of the program's current profile), or nobody does yet (a build
// ahead of need, e.g. the guard's plain build before its trial). A compiler
// may let background compiles yield to stage ones (fdod stops its background
// compile workers while stage compiles run: docs/workers.md). A background
// compile comes with an Urgency, raised when a stage comes to wait for it.
enum class CompilePriority { stage, background };

// The compiler. identify() is cheap (parse + canonical fingerprint); compile()
// is the expensive part. Both must be thread-safe. Both receive the program's
// IK, its scope and its bytes exactly as submitted: a compiler that keeps
// tenants' profiles apart scopes the PK it returns by program.scope.
class Compiler {
public:
  virtual ~Compiler() = default;
  // LLVM version, fdo version, pass-pipeline version, target triple, CPU and
  // features. Hashed into every IK, so it may change between calls (e.g. an
  // upgraded compile worker) and the cache keeps outputs apart.
  virtual std::string identity() const = 0;
  virtual Expected<Identification> identify(const Program& program) = 0;
  // `urgency`: a background compile's (null for a stage one); raised when a
  // stage comes to wait for the output, from then on the compile is a stage's.
  virtual Expected<CompiledOutput> compile(const Program& program, const ProfileRef& profile,
                                           CompileMode mode, CompilePriority priority,
                                           const std::shared_ptr<Urgency>& urgency) = 0;
};

} // namespace fdo::cache
