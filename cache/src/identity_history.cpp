#include "identity_history.h"

#include "fdo/util/fd.h"
#include "fdo/util/hash.h"
#include "fdo/util/log.h"
#include "short_key.h"

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

namespace fdo::cache::detail {

namespace {

// A history file holds one short JSON object; anything larger is not ours.
constexpr std::size_t kMaxFileBytes = 1 << 20;

// The files name tenants' programs (by hash) and the compiler they ran
// under: private to the daemon's user whatever the umask.
constexpr mode_t kHistoryFileMode = 0600;

} // namespace

IdentityHistory::IdentityHistory(std::string dir, std::size_t capacity)
    : dir_(std::move(dir)), identities_(capacity) {}

std::string IdentityHistory::file_for(const std::string& program_hash) const {
  return dir_ + "/" + program_hash.substr(0, 2) + "/" + program_hash;
}

std::optional<std::string> IdentityHistory::last_identity(const std::string& program_hash) {
  {
    std::lock_guard lock(mu_);
    if (std::string* id = identities_.find(program_hash)) return *id;
  }
  // The hash names a file: anything but a key's form could leave the directory.
  if (dir_.empty() || !is_hex_key(program_hash)) return std::nullopt;
  auto text = read_file(file_for(program_hash), kMaxFileBytes);
  if (!text) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("identity") || !j["identity"].is_string())
    return std::nullopt; // advisory data: a damaged file only loses an explanation
  return j["identity"].get<std::string>();
}

void IdentityHistory::remember(const std::string& program_hash, const std::string& identity,
                               const std::string& ik) {
  {
    std::lock_guard lock(mu_);
    std::string& id = identities_.get_or_create(program_hash);
    if (id == identity) return;
    id = identity;
  }
  if (dir_.empty() || !is_hex_key(program_hash)) return;
  std::string path = file_for(program_hash);
  nlohmann::json j = {{"identity", identity}, {"ik", ik}};
  Status st = create_private_dirs(std::filesystem::path(path).parent_path().string());
  if (st) st = write_file_atomic(path, j.dump(), Durability::none, kHistoryFileMode);
  if (!st)
    log::warning("cache: cannot record compiler identity for program " + short_key(program_hash) +
                 ": " + st.error().describe());
}

} // namespace fdo::cache::detail
