// The patent's key mappings (profile key mapping IK -> PK, virtual key
// mapping CK -> VK) and the program registry.
#include "internal.h"

namespace fdo::profile_store {

using detail::check_key;
using detail::now_ms;
using sqlite::Statement;
using sqlite::Transaction;
using sqlite::TxKind;

namespace {

Expected<std::optional<std::string>> lookup_one(sqlite::Connection& db, const std::string& sql,
                                                std::string_view key) {
  FDO_TRY(auto st, db.cached(sql));
  st->bind(1, key);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(st->column_text(0));
}

Expected<bool> delete_one(SqliteBackend::Impl& impl, const std::string& sql, std::string_view key) {
  FDO_TRY(auto lock, impl.lock_writer());
  FDO_TRY(auto st, impl.writer.cached(sql));
  st->bind(1, key);
  FDO_TRY_STATUS(st->run());
  return impl.writer.changes() > 0;
}

} // namespace

// --- profile key mapping IK -> PK ---

Expected<std::optional<std::string>> SqliteBackend::lookup_profile_key(std::string_view ik) const {
  FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY(auto lease, impl_->readers.acquire());
  return lookup_one(lease.db(), "SELECT pk FROM profile_keys WHERE ik = ?1", ik);
}

Expected<MappingResult> SqliteBackend::put_profile_key(std::string_view ik, std::string_view pk) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lock, impl_->lock_writer());
  sqlite::Connection& db = impl_->writer;
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::immediate));
  FDO_TRY(auto existing, lookup_one(db, "SELECT pk FROM profile_keys WHERE ik = ?1", ik));
  // Nothing to write when unchanged; the transaction rolls back harmlessly.
  if (existing && *existing == pk) return detail::profile_key_put(ik, pk, std::move(existing));
  FDO_TRY(auto st, db.cached("INSERT INTO profile_keys (ik, pk, updated_at) VALUES (?1, ?2, ?3) "
                             "ON CONFLICT (ik) DO UPDATE SET pk = excluded.pk, "
                             "updated_at = excluded.updated_at"));
  st->bind(1, ik).bind(2, pk).bind(3, now_ms());
  FDO_TRY_STATUS(st->run());
  FDO_TRY_STATUS(tx.commit());
  return detail::profile_key_put(ik, pk, std::move(existing));
}

Expected<bool> SqliteBackend::remove_profile_key(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  return delete_one(*impl_, "DELETE FROM profile_keys WHERE ik = ?1", ik);
}

// --- virtual key mapping CK -> VK ---

Expected<std::optional<std::string>> SqliteBackend::lookup_virtual_key(std::string_view ck) const {
  FDO_TRY_STATUS(check_key("cache key", ck));
  FDO_TRY(auto lease, impl_->readers.acquire());
  return lookup_one(lease.db(), "SELECT vk FROM virtual_keys WHERE ck = ?1", ck);
}

Expected<MappingResult> SqliteBackend::put_virtual_key(std::string_view ck, std::string_view vk,
                                                       std::string_view ik) {
  FDO_TRY_STATUS(check_key("cache key", ck));
  FDO_TRY_STATUS(check_key("virtual key", vk));
  if (!ik.empty()) FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY(auto lock, impl_->lock_writer());
  sqlite::Connection& db = impl_->writer;
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::immediate));
  std::optional<std::string> existing_vk;
  std::string existing_ik;
  {
    FDO_TRY(auto st, db.cached("SELECT vk, ik FROM virtual_keys WHERE ck = ?1"));
    st->bind(1, ck);
    FDO_TRY(bool row, st->step());
    if (row) {
      existing_vk = st->column_text(0);
      existing_ik = st->column_text(1);
    }
  }
  if (detail::virtual_key_put_is_noop(existing_vk, existing_ik, vk, ik))
    return detail::virtual_key_put(std::move(existing_vk), vk);
  FDO_TRY(auto st, db.cached("INSERT INTO virtual_keys (ck, vk, updated_at, ik) "
                             "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (ck) DO UPDATE SET "
                             "vk = excluded.vk, updated_at = excluded.updated_at, "
                             "ik = COALESCE(excluded.ik, virtual_keys.ik)"));
  st->bind(1, ck).bind(2, vk).bind(3, now_ms());
  if (ik.empty())
    st->bind_null(4);
  else
    st->bind(4, ik);
  FDO_TRY_STATUS(st->run());
  FDO_TRY_STATUS(tx.commit());
  return detail::virtual_key_put(std::move(existing_vk), vk);
}

Expected<bool> SqliteBackend::remove_virtual_key(std::string_view ck) {
  FDO_TRY_STATUS(check_key("cache key", ck));
  return delete_one(*impl_, "DELETE FROM virtual_keys WHERE ck = ?1", ck);
}

Expected<MappingRemoval> SqliteBackend::remove_mappings(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY(auto lock, impl_->lock_writer());
  sqlite::Connection& db = impl_->writer;
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::immediate));
  MappingRemoval out;
  {
    FDO_TRY(auto st, db.cached("DELETE FROM virtual_keys WHERE ik = ?1"));
    st->bind(1, ik);
    FDO_TRY_STATUS(st->run());
    out.virtual_keys = db.changes();
  }
  {
    FDO_TRY(auto st, db.cached("DELETE FROM profile_keys WHERE ik = ?1"));
    st->bind(1, ik);
    FDO_TRY_STATUS(st->run());
    out.profile_keys = db.changes();
  }
  FDO_TRY_STATUS(tx.commit());
  return out;
}

// --- program registry ---

namespace {

constexpr const char* kProgramColumns =
    "SELECT ik, name, size, owner, first_seen, last_used, program_hash, pk FROM programs ";

ProgramInfo read_program_row(const Statement& st) {
  ProgramInfo p;
  p.ik = st.column_text(0);
  p.name = st.column_text(1);
  p.size = st.column_int64(2);
  p.owner = st.column_int64(3);
  p.first_seen = st.column_int64(4);
  p.last_used = st.column_int64(5);
  p.program_hash = st.column_text(6); // NULL reads as empty: not known
  p.pk = st.column_text(7);
  return p;
}

// Empty means "not known", which the table spells NULL.
void bind_optional_text(Statement& st, int index, std::string_view text) {
  if (text.empty())
    st.bind_null(index);
  else
    st.bind(index, text);
}

Expected<std::optional<ProgramInfo>> program_row(sqlite::Connection& db, std::string_view ik) {
  FDO_TRY(auto st, db.cached(std::string(kProgramColumns) + "WHERE ik = ?1"));
  st->bind(1, ik);
  FDO_TRY(bool row, st->step());
  if (!row) return std::optional<ProgramInfo>();
  return std::optional<ProgramInfo>(read_program_row(*st));
}

} // namespace

Expected<ProgramInfo> SqliteBackend::register_program(const ProgramInfo& program) {
  FDO_TRY_STATUS(check_key("initial key", program.ik));
  if (program.size < 0)
    return make_error(Errc::invalid_argument, "program " + program.ik +
                                                  ": size must be >= 0 (got " +
                                                  std::to_string(program.size) + ")");
  if (!program.program_hash.empty())
    FDO_TRY_STATUS(check_key("program hash", program.program_hash));
  if (!program.pk.empty()) FDO_TRY_STATUS(check_key("profile key", program.pk));
  FDO_TRY(auto lock, impl_->lock_writer());
  sqlite::Connection& db = impl_->writer;
  FDO_TRY(auto tx, Transaction::begin(db, TxKind::immediate));
  {
    // MAX(): a wall clock that steps back never makes last_used go backwards.
    // COALESCE(programs.program_hash, ...): a recorded hash is never replaced;
    // the check below refuses a different one.
    FDO_TRY(auto st,
            db.cached("INSERT INTO programs (ik, name, size, owner, first_seen, "
                      "last_used, program_hash, pk) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7) "
                      "ON CONFLICT (ik) DO UPDATE SET name = excluded.name, "
                      "size = excluded.size, "
                      "last_used = MAX(programs.last_used, excluded.last_used), "
                      "program_hash = COALESCE(programs.program_hash, "
                      "excluded.program_hash), "
                      "pk = COALESCE(excluded.pk, programs.pk)"));
    st->bind(1, program.ik).bind(2, program.name).bind(3, program.size).bind(4, program.owner);
    st->bind(5, now_ms());
    bind_optional_text(*st, 6, program.program_hash);
    bind_optional_text(*st, 7, program.pk);
    FDO_TRY_STATUS(st->run());
  }
  FDO_TRY(auto stored, program_row(db, program.ik));
  if (!stored)
    return make_error(Errc::internal, "program " + program.ik + " vanished after registration");
  // The transaction rolls back on return: nothing of this call is kept.
  if (!program.program_hash.empty() && stored->program_hash != program.program_hash)
    return make_error(Errc::conflict,
                      "program " + program.ik + " is registered with other bytes (program hash " +
                          stored->program_hash + ", not " + program.program_hash + ")");
  FDO_TRY_STATUS(tx.commit());
  return std::move(*stored);
}

Status SqliteBackend::touch_program(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY(auto lock, impl_->lock_writer());
  FDO_TRY(auto st,
          impl_->writer.cached("UPDATE programs SET last_used = MAX(last_used, ?2) WHERE ik = ?1"));
  st->bind(1, ik).bind(2, now_ms());
  FDO_TRY_STATUS(st->run());
  if (impl_->writer.changes() == 0)
    return make_error(Errc::not_found, "no program " + std::string(ik));
  return ok();
}

Expected<std::optional<ProgramInfo>> SqliteBackend::program(std::string_view ik) const {
  FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY(auto lease, impl_->readers.acquire());
  return program_row(lease.db(), ik);
}

Expected<std::vector<ProgramInfo>>
SqliteBackend::programs(std::optional<std::int64_t> owner) const {
  FDO_TRY(auto lease, impl_->readers.acquire());
  FDO_TRY(auto st, lease.db().cached(std::string(kProgramColumns) +
                                     "WHERE ?1 IS NULL OR owner = ?1 ORDER BY ik"));
  if (owner)
    st->bind(1, *owner);
  else
    st->bind_null(1);
  std::vector<ProgramInfo> out;
  while (true) {
    FDO_TRY(bool row, st->step());
    if (!row) break;
    out.push_back(read_program_row(*st));
  }
  return out;
}

Expected<std::int64_t> SqliteBackend::count_programs(std::int64_t owner) const {
  FDO_TRY(auto lease, impl_->readers.acquire());
  FDO_TRY(auto st, lease.db().cached("SELECT COUNT(*) FROM programs WHERE owner = ?1"));
  st->bind(1, owner);
  FDO_TRY(bool row, st->step());
  return row ? st->column_int64(0) : 0;
}

Expected<bool> SqliteBackend::remove_program(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  return delete_one(*impl_, "DELETE FROM programs WHERE ik = ?1", ik);
}

namespace detail {

Expected<bool> owns_program_with_pk(sqlite::Connection& db, std::int64_t owner,
                                    std::string_view pk) {
  FDO_TRY(auto st, db.cached("SELECT 1 FROM programs WHERE pk = ?1 AND owner = ?2 LIMIT 1"));
  st->bind(1, pk).bind(2, owner);
  return st->step();
}

} // namespace detail

Expected<bool> SqliteBackend::owns_program_with_profile_key(std::int64_t owner,
                                                            std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->readers.acquire());
  return detail::owns_program_with_pk(lease.db(), owner, pk);
}

} // namespace fdo::profile_store
