// The IK -> PK and CK -> VK mappings and the program registry on PostgreSQL.
#include "internal.h"

namespace fdo::profile_store {

using detail::check_key;
using detail::now_ms;
using pg::p;
using pg::p_or_null;

namespace {

Expected<std::optional<std::string>> lookup_one(PgBackend::Impl& impl, const std::string& sql,
                                                std::string_view key) {
  FDO_TRY(auto lease, impl.pool.acquire());
  FDO_TRY(pg::Result r, lease.conn().exec(sql, {p(key)}));
  if (r.rows() == 0) return std::optional<std::string>();
  return std::optional<std::string>(r.text(0, 0));
}

Expected<bool> delete_one(PgBackend::Impl& impl, const std::string& sql, std::string_view key) {
  FDO_TRY_STATUS(impl.writable());
  FDO_TRY(auto lease, impl.pool.acquire());
  FDO_TRY(pg::Result r, lease.conn().exec(sql, {p(key)}));
  return r.affected() > 0;
}

constexpr const char* kProgramColumns =
    "SELECT ik, name, size, owner, first_seen, last_used, program_hash, pk FROM programs ";

ProgramInfo read_program(const pg::Result& r, int row) {
  ProgramInfo pi;
  pi.ik = r.text(row, 0);
  pi.name = r.text(row, 1);
  pi.size = r.i64(row, 2);
  pi.owner = r.i64(row, 3);
  pi.first_seen = r.i64(row, 4);
  pi.last_used = r.i64(row, 5);
  pi.program_hash = r.text(row, 6); // NULL reads as empty: not known
  pi.pk = r.text(row, 7);
  return pi;
}

} // namespace

// --- IK -> PK ---

Expected<std::optional<std::string>> PgBackend::lookup_profile_key(std::string_view ik) const {
  FDO_TRY_STATUS(check_key("initial key", ik));
  return lookup_one(*impl_, "SELECT pk FROM profile_keys WHERE ik = $1", ik);
}

Expected<MappingResult> PgBackend::put_profile_key(std::string_view ik, std::string_view pk) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto lease, impl_->pool.acquire());
  // One statement: the old value (locked by the upsert) and the new one.
  FDO_TRY(pg::Result r,
          lease.conn().exec("WITH old AS (SELECT pk FROM profile_keys WHERE ik = $1 FOR UPDATE), "
                            "up AS (INSERT INTO profile_keys (ik, pk, updated_at) VALUES "
                            "($1, $2, $3) ON CONFLICT (ik) DO UPDATE SET pk = excluded.pk, "
                            "updated_at = excluded.updated_at WHERE profile_keys.pk <> "
                            "excluded.pk RETURNING 1) SELECT (SELECT pk FROM old)",
                            {p(ik), p(pk), p(now_ms())}));
  return detail::profile_key_put(
      ik, pk, r.null(0, 0) ? std::optional<std::string>() : std::optional(r.text(0, 0)));
}

Expected<bool> PgBackend::remove_profile_key(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  return delete_one(*impl_, "DELETE FROM profile_keys WHERE ik = $1", ik);
}

// --- CK -> VK ---

Expected<std::optional<std::string>> PgBackend::lookup_virtual_key(std::string_view ck) const {
  FDO_TRY_STATUS(check_key("cache key", ck));
  return lookup_one(*impl_, "SELECT vk FROM virtual_keys WHERE ck = $1", ck);
}

Expected<MappingResult> PgBackend::put_virtual_key(std::string_view ck, std::string_view vk,
                                                   std::string_view ik) {
  FDO_TRY_STATUS(check_key("cache key", ck));
  FDO_TRY_STATUS(check_key("virtual key", vk));
  if (!ik.empty()) FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto lease, impl_->pool.acquire());
  pg::Conn& c = lease.conn();
  FDO_TRY(pg::Tx tx, pg::Tx::begin(c));
  FDO_TRY(pg::Result old,
          c.exec("SELECT vk, ik FROM virtual_keys WHERE ck = $1 FOR UPDATE", {p(ck)}));
  std::optional<std::string> existing_vk;
  std::string existing_ik;
  if (old.rows() > 0) {
    existing_vk = old.text(0, 0);
    existing_ik = old.text(0, 1);
  }
  if (detail::virtual_key_put_is_noop(existing_vk, existing_ik, vk, ik))
    return detail::virtual_key_put(std::move(existing_vk), vk);
  FDO_TRY_STATUS(c.exec("INSERT INTO virtual_keys (ck, vk, updated_at, ik) VALUES ($1, $2, $3, "
                        "$4) ON CONFLICT (ck) DO UPDATE SET vk = excluded.vk, updated_at = "
                        "excluded.updated_at, ik = COALESCE(excluded.ik, virtual_keys.ik)",
                        {p(ck), p(vk), p(now_ms()), p_or_null(ik)}));
  FDO_TRY_STATUS(tx.commit());
  return detail::virtual_key_put(std::move(existing_vk), vk);
}

Expected<bool> PgBackend::remove_virtual_key(std::string_view ck) {
  FDO_TRY_STATUS(check_key("cache key", ck));
  return delete_one(*impl_, "DELETE FROM virtual_keys WHERE ck = $1", ck);
}

Expected<MappingRemoval> PgBackend::remove_mappings(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(pg::Result r,
          lease.conn().exec("WITH v AS (DELETE FROM virtual_keys WHERE ik = $1 RETURNING 1), "
                            "k AS (DELETE FROM profile_keys WHERE ik = $1 RETURNING 1) "
                            "SELECT (SELECT count(*) FROM v), (SELECT count(*) FROM k)",
                            {p(ik)}));
  MappingRemoval out;
  out.virtual_keys = r.i64(0, 0);
  out.profile_keys = r.i64(0, 1);
  return out;
}

// --- program registry ---

Expected<ProgramInfo> PgBackend::register_program(const ProgramInfo& program) {
  FDO_TRY_STATUS(check_key("initial key", program.ik));
  if (program.size < 0)
    return make_error(Errc::invalid_argument, "program " + program.ik +
                                                  ": size must be >= 0 (got " +
                                                  std::to_string(program.size) + ")");
  if (!program.program_hash.empty())
    FDO_TRY_STATUS(check_key("program hash", program.program_hash));
  if (!program.pk.empty()) FDO_TRY_STATUS(check_key("profile key", program.pk));
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto lease, impl_->pool.acquire());
  pg::Conn& c = lease.conn();
  FDO_TRY(pg::Tx tx, pg::Tx::begin(c));
  // GREATEST: a wall clock that steps back never makes last_used go back.
  // A recorded hash is never replaced; the check below refuses another one.
  FDO_TRY(pg::Result r,
          c.exec("INSERT INTO programs AS g (ik, name, size, owner, first_seen, last_used, "
                 "program_hash, pk) VALUES ($1, $2, $3, $4, $5, $5, $6, $7) ON CONFLICT (ik) DO "
                 "UPDATE SET name = excluded.name, size = excluded.size, last_used = "
                 "GREATEST(g.last_used, excluded.last_used), program_hash = "
                 "COALESCE(g.program_hash, excluded.program_hash), pk = COALESCE(excluded.pk, "
                 "g.pk) RETURNING ik, name, size, owner, first_seen, last_used, program_hash, pk",
                 {p(program.ik), p(program.name), p(program.size), p(program.owner), p(now_ms()),
                  p_or_null(program.program_hash), p_or_null(program.pk)}));
  ProgramInfo stored = read_program(r, 0);
  if (!program.program_hash.empty() && stored.program_hash != program.program_hash)
    return make_error(Errc::conflict,
                      "program " + program.ik + " is registered with other bytes (program hash " +
                          stored.program_hash + ", not " + program.program_hash + ")");
  FDO_TRY_STATUS(tx.commit());
  return stored;
}

Status PgBackend::touch_program(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY_STATUS(impl_->writable());
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(pg::Result r,
          lease.conn().exec("UPDATE programs SET last_used = GREATEST(last_used, $2) WHERE ik = $1",
                            {p(ik), p(now_ms())}));
  if (r.affected() == 0) return make_error(Errc::not_found, "no program " + std::string(ik));
  return ok();
}

Expected<std::optional<ProgramInfo>> PgBackend::program(std::string_view ik) const {
  FDO_TRY_STATUS(check_key("initial key", ik));
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(pg::Result r, lease.conn().exec(std::string(kProgramColumns) + "WHERE ik = $1", {p(ik)}));
  if (r.rows() == 0) return std::optional<ProgramInfo>();
  return std::optional<ProgramInfo>(read_program(r, 0));
}

Expected<std::vector<ProgramInfo>> PgBackend::programs(std::optional<std::int64_t> owner) const {
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(pg::Result r, lease.conn().exec(std::string(kProgramColumns) +
                                              "WHERE $1::bigint IS NULL OR owner = $1 ORDER BY ik",
                                          {p_or_null(owner)}));
  std::vector<ProgramInfo> out;
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(read_program(r, i));
  return out;
}

Expected<std::int64_t> PgBackend::count_programs(std::int64_t owner) const {
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(pg::Result r,
          lease.conn().exec("SELECT count(*) FROM programs WHERE owner = $1", {p(owner)}));
  return r.i64(0, 0);
}

Expected<bool> PgBackend::remove_program(std::string_view ik) {
  FDO_TRY_STATUS(check_key("initial key", ik));
  return delete_one(*impl_, "DELETE FROM programs WHERE ik = $1", ik);
}

Expected<bool> PgBackend::owns_program_with_profile_key(std::int64_t owner,
                                                        std::string_view pk) const {
  FDO_TRY_STATUS(check_key("profile key", pk));
  FDO_TRY(auto lease, impl_->pool.acquire());
  FDO_TRY(pg::Result r,
          lease.conn().exec("SELECT 1 FROM programs WHERE pk = $1 AND owner = $2 LIMIT 1",
                            {p(pk), p(owner)}));
  return r.rows() > 0;
}

} // namespace fdo::profile_store
