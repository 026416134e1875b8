#include "fdo/daemon/program_registry.h"

#include "fdo/cache/keys.h"
#include "fdo/daemon/state_dir.h"
#include "fdo/util/fd.h"
#include "fdo/util/log.h"

#include <cerrno>
#include <unistd.h>

namespace fdo::daemon {

namespace ps = fdo::profile_store;

namespace {

// A scoped .prog file starts with the scope tag the keys use (docs/keys.md).
// Submitted programs may not start with it in any scope, so no file is ambiguous.
constexpr std::string_view kScopeMagic = cache::kScopeTag;

// Tenants' code: readable by fdod's user alone, whatever the umask.
constexpr mode_t kProgramFileMode = 0600;

Error unknown_program(const std::string& ik) {
  return make_error(Errc::not_found, "no program " + ik + " (register it first)");
}

Error not_the_registered_program(const std::string& path, const std::string& ik,
                                 std::string_view why) {
  return make_error(Errc::corrupt, "program file " + path + " does not hold program " + ik + " (" +
                                       std::string(why) +
                                       "); refusing to run it. Restore the file, or register "
                                       "the program again");
}

} // namespace

ProgramRegistry::ProgramRegistry(std::string programs_dir, ProgramAnalyzer& analyzer,
                                 ProgramIndex& index, InitialKeyFn initial_key)
    : dir_(std::move(programs_dir)), analyzer_(analyzer), index_(index),
      initial_key_(std::move(initial_key)) {}

std::string ProgramRegistry::encode_file(const cache::Program& program) {
  if (program.scope.empty()) return program.bytes;
  std::string out(kScopeMagic);
  out += program.scope;
  out += '\n';
  out += program.bytes;
  return out;
}

Expected<cache::Program> ProgramRegistry::decode_file(std::string contents) {
  cache::Program p;
  if (!std::string_view(contents).starts_with(kScopeMagic)) {
    p.bytes = std::move(contents);
    return p;
  }
  std::size_t nl = contents.find('\n', kScopeMagic.size());
  if (nl == std::string::npos)
    return make_error(Errc::corrupt, "program file has a scope header without its end");
  p.scope = contents.substr(kScopeMagic.size(), nl - kScopeMagic.size());
  p.bytes = contents.substr(nl + 1);
  return p;
}

std::string ProgramRegistry::path_of(const std::string& ik) const {
  return dir_ + "/" + ik + ".prog";
}

Expected<ProgramRef> ProgramRegistry::add(std::string_view bytes, std::string name,
                                          std::int64_t uid, const TenantScope& scope,
                                          std::uint64_t max_bytes, unsigned max_programs) {
  if (bytes.empty()) return make_error(Errc::invalid_argument, "program is empty (0 bytes of IR)");
  if (bytes.size() > max_bytes)
    return make_error(Errc::resource_exhausted,
                      "program is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                          std::to_string(max_bytes) + " (max_program_bytes)");
  if (bytes.starts_with(kScopeMagic))
    return make_error(Errc::invalid_argument,
                      "program starts with the reserved prefix \"FDO-SCOPE\\0\"; it is neither "
                      "IR text nor bitcode");
  FDO_TRY_STATUS(cache::check_scope(scope.str(), bytes));
  auto rec = std::make_shared<ProgramRecord>();
  rec->program.scope = scope.str();
  rec->program.bytes = std::string(bytes);
  rec->ik = initial_key_(rec->program);
  rec->program.ik = rec->ik;
  {
    std::lock_guard lk(mu_);
    if (auto it = programs_.find(rec->ik); it != programs_.end()) {
      ProgramRef known = it->second;
      // Only bookkeeping: a failed touch must not fail the registration.
      (void)index_.touch(known->ik);
      return known;
    }
  }
  FDO_TRY(Slot slot, reserve(rec->ik, uid, max_programs));
  FDO_TRY(ProgramAnalysis analysis, analyzer_.analyze(bytes, scope));
  rec->name = name.empty() ? "program-" + rec->ik.substr(0, 12) : std::move(name);
  rec->pk = scope.profile_key(analysis.profile_key);
  rec->owner = uid;
  rec->entries = std::move(analysis.entries);
  rec->target = analysis.target;
  FDO_TRY_STATUS(create_private_dirs(dir_));
  FDO_TRY_STATUS(write_file_atomic(path_of(rec->ik), encode_file(rec->program), Durability::fsync,
                                   kProgramFileMode));
  ps::ProgramInfo row{rec->ik, rec->name, static_cast<std::int64_t>(bytes.size()), uid, 0, 0};
  row.program_hash = cache::program_hash(rec->program.scope, rec->program.bytes);
  row.pk = rec->pk;
  FDO_TRY_STATUS(index_.add(row));
  std::lock_guard lk(mu_);
  // A concurrent registration of the same bytes may have won: both wrote the
  // same file and row; every caller gets the first record.
  return programs_.emplace(rec->ik, std::move(rec)).first->second;
}

ProgramRegistry::Slot::~Slot() {
  if (registry_ == nullptr) return;
  std::lock_guard lk(registry_->quota_mu_);
  if (auto it = registry_->pending_.find(uid_);
      it != registry_->pending_.end() && --it->second == 0)
    registry_->pending_.erase(it);
}

Expected<ProgramRegistry::Slot> ProgramRegistry::reserve(const std::string& ik, std::int64_t uid,
                                                         unsigned max_programs) {
  if (max_programs == 0) return Slot();
  std::lock_guard lk(quota_mu_);
  // Registering a program that has a row already (the same bytes again, after
  // a restart) adds nothing.
  FDO_TRY(std::optional<ps::ProgramInfo> known, index_.find(ik));
  if (known) return Slot();
  FDO_TRY(std::int64_t registered, index_.count_owned(uid));
  auto in_flight = pending_.find(uid);
  std::int64_t held = registered + (in_flight == pending_.end() ? 0 : in_flight->second);
  if (held >= static_cast<std::int64_t>(max_programs))
    return make_error(Errc::resource_exhausted,
                      "uid " + std::to_string(uid) + " has " + std::to_string(held) +
                          " programs registered, the limit (max_programs_per_uid = " +
                          std::to_string(max_programs) +
                          "); delete some (fdoctl program delete, fdoctl gc) before registering "
                          "another");
  ++pending_[uid];
  return Slot(this, uid);
}

Expected<ProgramRef> ProgramRegistry::load(const std::string& ik, std::int64_t uid,
                                           ProfileSharing sharing) {
  FDO_TRY(std::optional<ps::ProgramInfo> info, index_.find(ik));
  // Another tenant's program is reported exactly as an unknown one.
  if (!info || !may_access(info->owner, uid, sharing)) return unknown_program(ik);
  const std::string path = path_of(ik);
  auto file = read_file(path);
  if (!file)
    return make_error(Errc::not_found, "program " + ik +
                                           " is registered but its IR is missing from the state "
                                           "dir: " +
                                           file.error().message());
  auto decoded = decode_file(std::move(*file));
  if (!decoded) return not_the_registered_program(path, ik, decoded.error().message());
  cache::Program program = std::move(*decoded);
  // The file is only trusted as far as the row vouches for it: anyone who
  // could write it must not get their bytes run under this program id.
  std::string hash = cache::program_hash(program.scope, program.bytes);
  if (!info->program_hash.empty()) {
    if (hash != info->program_hash)
      return not_the_registered_program(path, ik,
                                        "its bytes are not the ones registered under that id");
  } else if (initial_key_(program) != ik) {
    // A row from before program hashes were recorded. Its id is itself a hash
    // of the scoped bytes (and the compiler identity), so a file that still
    // gives the id holds the registered bytes; anything else cannot be told
    // from a replaced file.
    return not_the_registered_program(
        path, ik,
        "registered before program hashes were recorded, and its bytes do not give that id "
        "under this compiler");
  }
  FDO_TRY(ProgramAnalysis analysis,
          analyzer_.analyze(program.bytes, TenantScope::from_string(program.scope)));
  auto rec = std::make_shared<ProgramRecord>();
  rec->ik = ik;
  rec->name = info->name;
  rec->program = std::move(program);
  // The IK a stage looks up under today's compiler identity (the id may be
  // from another), kept so that stages do not hash the bytes again.
  if (rec->program.ik_identity.empty()) rec->program.ik = initial_key_(rec->program);
  rec->pk = rec->scope().profile_key(analysis.profile_key);
  rec->owner = info->owner;
  rec->entries = std::move(analysis.entries);
  rec->target = analysis.target;
  if (info->program_hash.empty() || info->pk != rec->pk) {
    ps::ProgramInfo row = *info;
    row.size = static_cast<std::int64_t>(rec->program.bytes.size());
    row.program_hash = hash;
    row.pk = rec->pk;
    // The bytes were verified above; failing to record that only means the
    // next load verifies them again, and an import of a profile for this
    // program's key waits until a registration records it.
    if (auto st = index_.add(row); !st)
      log::warning("program " + ik +
                   ": cannot record its program hash and profile key: " + st.error().describe());
  }
  std::lock_guard lk(mu_);
  return programs_.emplace(ik, std::move(rec)).first->second;
}

Expected<ProgramRef> ProgramRegistry::find(const std::string& ik, std::int64_t uid,
                                           ProfileSharing sharing) {
  ProgramRef rec;
  {
    std::lock_guard lk(mu_);
    if (auto it = programs_.find(ik); it != programs_.end()) rec = it->second;
  }
  if (!rec) return load(ik, uid, sharing);
  if (!may_access(rec->owner, uid, sharing)) return unknown_program(ik);
  return rec;
}

Status ProgramRegistry::forget(const std::string& ik) {
  {
    std::lock_guard lk(mu_);
    programs_.erase(ik);
  }
  if (::unlink(path_of(ik).c_str()) != 0 && errno != ENOENT)
    return Error::from_errno("remove " + path_of(ik), errno);
  return ok();
}

void ProgramRegistry::forget_loaded() {
  std::lock_guard lk(mu_);
  programs_.clear();
}

std::size_t ProgramRegistry::loaded() const {
  std::lock_guard lk(mu_);
  return programs_.size();
}

} // namespace fdo::daemon
