#include "fdo/daemon/store_spool.h"

#include "fdo/profile_store/sqlite.h"
#include "fdo/util/fd.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace fdo::daemon {

namespace sq = fdo::profile_store::sqlite;
using nlohmann::json;

namespace {

// PRAGMA application_id of a spool: "FDOS".
constexpr std::int64_t kSpoolApplicationId = 0x46444f53;
// How long an append waits for the file's write lock.
constexpr std::chrono::seconds kBusyTimeout{10};

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS spool (
  seq   INTEGER PRIMARY KEY AUTOINCREMENT,
  kind  TEXT NOT NULL,
  key   TEXT NOT NULL,
  body  TEXT NOT NULL,
  bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS dead_versions (
  pk      TEXT NOT NULL,
  version INTEGER NOT NULL,
  PRIMARY KEY (pk, version)
);
)sql";

// Which entries the cap drops first: the lower, the sooner.
int drop_rank(SpoolKind kind) {
  switch (kind) {
  case SpoolKind::profile_write:
    return 0;
  case SpoolKind::profile_key:
  case SpoolKind::virtual_key:
  case SpoolKind::program:
    return 1;
  case SpoolKind::feedback:
    return 2;
  }
  return 2;
}

} // namespace

std::string_view to_string(SpoolKind kind) {
  return kSpoolKindNames.name(kind);
}

struct StoreSpool::Impl {
  std::string path;
  std::uint64_t max_bytes = 0;
  mutable std::mutex mu;
  sq::Connection db;
  mutable std::mutex counts_mu; // never held across I/O: counts() answers at once
  SpoolCounts counts;

  void count(SpoolKind kind, std::uint64_t bytes, int sign) {
    std::lock_guard lk(counts_mu);
    std::uint64_t& n = kind == SpoolKind::feedback        ? counts.feedback_batches
                       : kind == SpoolKind::profile_write ? counts.profile_writes
                                                          : counts.other;
    if (sign > 0) {
      ++n;
      counts.bytes += bytes;
    } else {
      --n;
      counts.bytes -= bytes;
    }
  }

  Expected<SpoolEntry> read_row(sq::Statement& st) const {
    SpoolEntry e;
    e.seq = st.column_int64(0);
    auto kind = kSpoolKindNames.parse(st.column_text(1));
    if (!kind)
      return make_error(Errc::corrupt, "spool " + path + ": entry " + std::to_string(e.seq) +
                                           " has an unknown kind '" + st.column_text(1) + "'");
    e.kind = *kind;
    e.key = st.column_text(2);
    e.body = json::parse(st.column_text(3), nullptr, false);
    if (e.body.is_discarded())
      return make_error(Errc::corrupt,
                        "spool " + path + ": entry " + std::to_string(e.seq) + " is not JSON");
    e.bytes = static_cast<std::uint64_t>(st.column_int64(4));
    return e;
  }

  Status load_counts() {
    FDO_TRY(sq::Statement st, db.prepare("SELECT kind, bytes FROM spool"));
    while (true) {
      FDO_TRY(bool row, st.step());
      if (!row) break;
      auto kind = kSpoolKindNames.parse(st.column_text(0));
      count(kind.value_or(SpoolKind::feedback), static_cast<std::uint64_t>(st.column_int64(1)), 1);
    }
    return ok();
  }

  // The oldest entry the cap drops first, if any.
  Expected<std::optional<SpoolEntry>> drop_candidate() {
    FDO_TRY(sq::Statement st, db.prepare("SELECT seq, kind, key, body, bytes FROM spool "
                                         "ORDER BY CASE kind WHEN 'profile_write' THEN 0 "
                                         "WHEN 'feedback' THEN 2 ELSE 1 END, seq LIMIT 1"));
    FDO_TRY(bool row, st.step());
    if (!row) return std::optional<SpoolEntry>();
    FDO_TRY(SpoolEntry e, read_row(st));
    return std::optional<SpoolEntry>(std::move(e));
  }

  Status remove(std::int64_t seq) {
    FDO_TRY(sq::CachedStatement st, db.cached("DELETE FROM spool WHERE seq = ?"));
    st->bind(1, seq);
    return st->run();
  }
};

Expected<StoreSpool> StoreSpool::open(const std::string& path, std::uint64_t max_bytes) {
  // Created 0600 whatever the umask: it holds profiles and feedback.
  {
    Fd created(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
    if (!created.valid())
      return make_error(Errc::io, "cannot create the store spool " + path + ": " +
                                      std::string(std::strerror(errno)));
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->max_bytes = max_bytes;
  FDO_TRY(impl->db, sq::Connection::open(path, sq::Access::read_write));
  // Only fdod writes the spool; another connection holding its write lock
  // (an operator's sqlite3 shell) delays an append rather than failing it.
  impl->db.set_busy_timeout(kBusyTimeout);
  FDO_TRY(std::int64_t app, impl->db.query_int("PRAGMA application_id"));
  FDO_TRY(std::int64_t tables,
          impl->db.query_int("SELECT count(*) FROM sqlite_master WHERE type = 'table'"));
  if (app != kSpoolApplicationId && !(app == 0 && tables == 0))
    return make_error(Errc::corrupt,
                      "the store spool " + path + " belongs to another application; move it away");
  FDO_TRY_STATUS(impl->db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"));
  FDO_TRY_STATUS(impl->db.exec(kSchema));
  FDO_TRY_STATUS(
      impl->db.exec("PRAGMA application_id = " + std::to_string(kSpoolApplicationId) + ";"));
  FDO_TRY_STATUS(impl->load_counts());
  return StoreSpool(std::move(impl));
}

StoreSpool::StoreSpool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreSpool::StoreSpool(StoreSpool&&) noexcept = default;
StoreSpool& StoreSpool::operator=(StoreSpool&&) noexcept = default;
StoreSpool::~StoreSpool() = default;

const std::string& StoreSpool::path() const {
  return impl_->path;
}

Expected<std::vector<SpoolEntry>> StoreSpool::push(SpoolKind kind, std::string_view key,
                                                   const json& body) {
  const std::string text = body.dump();
  const std::uint64_t bytes = text.size() + key.size();
  Impl& s = *impl_;
  std::lock_guard lk(s.mu);
  if (bytes > s.max_bytes)
    return make_error(Errc::resource_exhausted,
                      "a " + std::string(to_string(kind)) + " entry of " + std::to_string(bytes) +
                          " bytes is larger than the whole spool (profile_store_spool_max_bytes)");
  std::vector<SpoolEntry> dropped;
  FDO_TRY(sq::Transaction tx, sq::Transaction::begin(s.db, sq::TxKind::immediate));
  SpoolCounts after;
  {
    std::lock_guard counts_lk(s.counts_mu);
    after = s.counts;
  }
  while (after.bytes + bytes > s.max_bytes) {
    FDO_TRY(std::optional<SpoolEntry> victim, s.drop_candidate());
    if (!victim) break;
    // Feedback goes only for feedback, never to make room for a lesser entry.
    if (drop_rank(victim->kind) > drop_rank(kind) && victim->kind == SpoolKind::feedback)
      return make_error(Errc::resource_exhausted,
                        "the store spool is full of feedback (profile_store_spool_max_bytes)");
    FDO_TRY_STATUS(s.remove(victim->seq));
    after.bytes -= victim->bytes;
    dropped.push_back(std::move(*victim));
  }
  FDO_TRY(sq::CachedStatement st,
          s.db.cached("INSERT INTO spool (kind, key, body, bytes) VALUES (?, ?, ?, ?)"));
  st->bind(1, to_string(kind)).bind(2, key).bind(3, text).bind(4, static_cast<std::int64_t>(bytes));
  FDO_TRY_STATUS(st->run());
  FDO_TRY_STATUS(tx.commit());
  for (const SpoolEntry& e : dropped)
    s.count(e.kind, e.bytes, -1);
  s.count(kind, bytes, 1);
  return dropped;
}

Expected<std::optional<SpoolEntry>> StoreSpool::front() {
  Impl& s = *impl_;
  std::lock_guard lk(s.mu);
  FDO_TRY(sq::CachedStatement st,
          s.db.cached("SELECT seq, kind, key, body, bytes FROM spool ORDER BY seq LIMIT 1"));
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<SpoolEntry>();
  FDO_TRY(SpoolEntry e, s.read_row(*st));
  return std::optional<SpoolEntry>(std::move(e));
}

Expected<std::vector<SpoolEntry>> StoreSpool::all(SpoolKind kind) {
  Impl& s = *impl_;
  std::lock_guard lk(s.mu);
  FDO_TRY(
      sq::Statement st,
      s.db.prepare("SELECT seq, kind, key, body, bytes FROM spool WHERE kind = ? ORDER BY seq"));
  st.bind(1, to_string(kind));
  std::vector<SpoolEntry> out;
  while (true) {
    FDO_TRY(bool row, st.step());
    if (!row) break;
    FDO_TRY(SpoolEntry e, s.read_row(st));
    out.push_back(std::move(e));
  }
  return out;
}

Status StoreSpool::pop(std::int64_t seq) {
  Impl& s = *impl_;
  std::lock_guard lk(s.mu);
  FDO_TRY(sq::CachedStatement st, s.db.cached("SELECT kind, bytes FROM spool WHERE seq = ?"));
  st->bind(1, seq);
  FDO_TRY(bool row, st->step());
  if (!row) return ok();
  auto kind = kSpoolKindNames.parse(st->column_text(0)).value_or(SpoolKind::feedback);
  auto bytes = static_cast<std::uint64_t>(st->column_int64(1));
  FDO_TRY_STATUS(s.remove(seq));
  s.count(kind, bytes, -1);
  return ok();
}

Status StoreSpool::mark_dead(std::string_view pk, std::int64_t version) {
  Impl& s = *impl_;
  std::lock_guard lk(s.mu);
  FDO_TRY(sq::CachedStatement st,
          s.db.cached("INSERT OR IGNORE INTO dead_versions (pk, version) VALUES (?, ?)"));
  st->bind(1, pk).bind(2, version);
  return st->run();
}

Expected<bool> StoreSpool::is_dead(std::string_view pk, std::int64_t version) {
  Impl& s = *impl_;
  std::lock_guard lk(s.mu);
  FDO_TRY(sq::CachedStatement st,
          s.db.cached("SELECT 1 FROM dead_versions WHERE pk = ? AND version = ?"));
  st->bind(1, pk).bind(2, version);
  return st->step();
}

Status StoreSpool::clear_dead() {
  Impl& s = *impl_;
  std::lock_guard lk(s.mu);
  return s.db.exec("DELETE FROM dead_versions");
}

SpoolCounts StoreSpool::counts() const {
  std::lock_guard lk(impl_->counts_mu);
  return impl_->counts;
}

} // namespace fdo::daemon
