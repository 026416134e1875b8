// Ownership: owner() without reading versions, and the acting-tenant check
// of every mutating call (another tenant's profile reads exactly like a key
// that does not exist, and nothing about it leaks into error messages).
#include "backends.h"
#include "fdo/profile_store/profile_store.h"
#include "test_util.h"

#include <algorithm>
#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::sample_doc;
using fdo::profile_store::test::TempDir;
using nlohmann::json;

namespace {

ProfileStore open_store(const std::string& path) {
  auto s = ProfileStore::open(path);
  if (!s) FAIL(s.error().describe());
  return std::move(*s);
}

constexpr std::int64_t kAlice = 1000;
constexpr std::int64_t kBob = 2000;

WriteInfo as(std::int64_t uid, WriteSource source = WriteSource::feedback) {
  WriteInfo i;
  i.source = source;
  i.reason = "tenant test";
  i.owner = uid;
  i.acting_owner = uid;
  return i;
}

// An operator's write: no tenant check.
WriteInfo operator_write() {
  WriteInfo i;
  i.source = WriteSource::operator_;
  i.reason = "op";
  return i;
}

const std::string kAlicePk(64, 'a');
const std::string kBobPk(64, 'b');
const std::string kUnknownPk(64, 'u');

// The error of an unknown key, with the key replaced: what another tenant's
// profile must read as.
template <class T> void same_as_unknown(const Expected<T>& r, const std::string& pk) {
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::not_found);
  CHECK(r.error().message() == "no profile " + pk);
}

} // namespace

TEST_CASE("owner reports the owner uid without reading versions - nullopt when unknown",
          "[profile_store][tenant]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  auto none = store.owner(kAlicePk);
  REQUIRE(none);
  CHECK_FALSE(none->has_value());
  REQUIRE(store.write(kAlicePk, 0, sample_doc(1), as(kAlice)));
  // A later write by someone else (an operator) does not change the owner.
  REQUIRE(store.write(kAlicePk, 1, sample_doc(2), operator_write()));
  CHECK(*store.owner(kAlicePk) == std::optional<std::int64_t>(kAlice));
  REQUIRE(store.reset(kAlicePk));
  CHECK(*store.owner(kAlicePk) == std::optional<std::int64_t>(kAlice));
  REQUIRE(store.remove(kAlicePk));
  CHECK_FALSE(store.owner(kAlicePk)->has_value());
  CHECK(store.owner("").error().code() == Errc::invalid_argument);
}

TEST_CASE("write with an acting tenant: another tenant's profile is not found",
          "[profile_store][tenant]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  REQUIRE(*store.write(kAlicePk, 0, sample_doc(1), as(kAlice)) == 1);
  REQUIRE(store.pin(kAlicePk));

  // Right version, stale version, "create", pinned: all read as "no such key".
  same_as_unknown(store.write(kAlicePk, 1, sample_doc(2), as(kBob)), kAlicePk);
  same_as_unknown(store.write(kAlicePk, 7, sample_doc(2), as(kBob)), kAlicePk);
  same_as_unknown(store.write(kAlicePk, 0, sample_doc(2), as(kBob)), kAlicePk);
  same_as_unknown(store.write(kAlicePk, 1, sample_doc(2), as(kBob, WriteSource::operator_)),
                  kAlicePk);
  same_as_unknown(store.write(kUnknownPk, 3, sample_doc(2), as(kBob)), kUnknownPk);
  auto cur = store.current(kAlicePk);
  REQUIRE(cur);
  CHECK((*cur)->version == 1);
  CHECK(store.history(kAlicePk)->size() == 1);

  // The owner writes as before: pinned and stale versions are reported to it.
  auto pinned = store.write(kAlicePk, 1, sample_doc(2), as(kAlice));
  REQUIRE_FALSE(pinned);
  CHECK(pinned.error().code() == Errc::pinned);
  REQUIRE(store.unpin(kAlicePk, kAlice));
  auto stale = store.write(kAlicePk, 0, sample_doc(2), as(kAlice));
  REQUIRE_FALSE(stale);
  CHECK(stale.error().code() == Errc::conflict);
  CHECK(*store.write(kAlicePk, 1, sample_doc(2), as(kAlice)) == 2);
  // Without a tenant (operator) nothing is checked.
  CHECK(*store.write(kAlicePk, 2, sample_doc(3), operator_write()) == 3);
  // A new key is created for the tenant that writes it.
  CHECK(*store.write(kBobPk, 0, sample_doc(1), as(kBob)) == 1);
  CHECK(**store.owner(kBobPk) == kBob);
}

TEST_CASE("write_batch checks the tenant of every request - all or nothing",
          "[profile_store][tenant]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  REQUIRE(store.write(kAlicePk, 0, sample_doc(1), as(kAlice)));
  REQUIRE(store.write(kBobPk, 0, sample_doc(1), as(kBob)));
  std::vector<WriteRequest> reqs = {{kBobPk, 1, sample_doc(2), as(kBob)},
                                    {kAlicePk, 1, sample_doc(2), as(kBob)}};
  auto r = store.write_batch(reqs);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::not_found);
  CHECK(r.error().message().find("no profile " + kAlicePk) != std::string::npos);
  CHECK((*store.current(kBobPk))->version == 1); // the first request rolled back too
  CHECK((*store.current(kAlicePk))->version == 1);
  reqs[1].info = as(kAlice);
  auto ok = store.write_batch(reqs);
  REQUIRE(ok);
  CHECK(*ok == std::vector<std::int64_t>{2, 2});
}

TEST_CASE("pin - unpin - reset with an acting tenant", "[profile_store][tenant]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  REQUIRE(store.write(kAlicePk, 0, sample_doc(1), as(kAlice)));

  same_as_unknown(store.pin(kAlicePk, kBob), kAlicePk);
  same_as_unknown(store.pin(kUnknownPk, kBob), kUnknownPk);
  CHECK_FALSE((*store.current(kAlicePk))->pinned);
  REQUIRE(store.pin(kAlicePk, kAlice));
  same_as_unknown(store.unpin(kAlicePk, kBob), kAlicePk);
  CHECK((*store.current(kAlicePk))->pinned);
  REQUIRE(store.unpin(kAlicePk, kAlice));
  CHECK_FALSE((*store.current(kAlicePk))->pinned);

  same_as_unknown(store.reset(kAlicePk, kBob), kAlicePk);
  CHECK((*store.current(kAlicePk))->version == 1);
  REQUIRE(store.reset(kAlicePk, kAlice));
  CHECK_FALSE(store.current(kAlicePk)->has_value());
  // Owned after a reset all the same.
  same_as_unknown(store.pin(kAlicePk, kBob), kAlicePk);
  same_as_unknown(store.write(kAlicePk, 0, sample_doc(2), as(kBob)), kAlicePk);
  CHECK(*store.write(kAlicePk, 0, sample_doc(2), as(kAlice)) == 2);
}

TEST_CASE("remove with an acting tenant", "[profile_store][tenant]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("p.db"));
  const std::string ik_alice(64, '1'), ik_bob(64, '2');
  REQUIRE(store.register_program({ik_alice, "a", 1, kAlice, 0, 0}));
  REQUIRE(store.register_program({ik_bob, "b", 1, kBob, 0, 0}));
  REQUIRE(store.write(kAlicePk, 0, sample_doc(1), as(kAlice)));
  REQUIRE(store.put_profile_key(ik_alice, kAlicePk));
  REQUIRE(store.put_virtual_key("ck", "vk", ik_alice));

  same_as_unknown(store.remove(kAlicePk, kBob), kAlicePk);
  same_as_unknown(store.remove(kUnknownPk, kBob), kUnknownPk);
  CHECK(store.history(kAlicePk)->size() == 1);
  CHECK(**store.lookup_profile_key(ik_alice) == kAlicePk);
  CHECK(**store.lookup_virtual_key("ck") == "vk");

  auto removed = store.remove(kAlicePk, kAlice);
  REQUIRE(removed);
  CHECK(removed->versions == 1);
  CHECK(removed->profile_keys == 1);
  CHECK(removed->virtual_keys == 1);

  // Mappings to a key with no profile row: a tenant drops only those of its
  // own programs.
  REQUIRE(store.put_profile_key(ik_alice, kBobPk));
  REQUIRE(store.put_profile_key(ik_bob, kBobPk));
  REQUIRE(store.put_virtual_key("ck-a", "vk-a", ik_alice));
  REQUIRE(store.put_virtual_key("ck-b", "vk-b", ik_bob));
  same_as_unknown(store.remove(kBobPk, 3000), kBobPk);
  auto mine = store.remove(kBobPk, kBob);
  REQUIRE(mine);
  CHECK(mine->profile_keys == 1);
  CHECK(mine->virtual_keys == 1);
  CHECK_FALSE(store.lookup_profile_key(ik_bob)->has_value());
  CHECK_FALSE(store.lookup_virtual_key("ck-b")->has_value());
  CHECK(**store.lookup_profile_key(ik_alice) == kBobPk);
  CHECK(**store.lookup_virtual_key("ck-a") == "vk-a");
}

TEST_CASE("import with an acting tenant fails whole when any key is another tenant's",
          "[profile_store][tenant][bundle]") {
  STORE_DIR(dir);
  auto src = open_store(dir.file("src.db"));
  REQUIRE(src.write(kAlicePk, 0, sample_doc(10), as(kAlice)));
  REQUIRE(src.write(kBobPk, 0, sample_doc(20), as(kBob)));
  REQUIRE(src.write(kUnknownPk, 0, sample_doc(30), as(kBob)));
  auto bundle = src.export_all();
  REQUIRE(bundle);

  auto dst = open_store(dir.file("dst.db"));
  REQUIRE(dst.write(kAlicePk, 0, sample_doc(1), as(kAlice)));
  REQUIRE(dst.pin(kAlicePk));
  REQUIRE(dst.write(kBobPk, 0, sample_doc(2), as(kBob)));

  for (ImportConflict policy :
       {ImportConflict::skip, ImportConflict::overwrite, ImportConflict::fail}) {
    auto r = dst.import_bundle(*bundle, kBob, policy, kBob);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::not_found);
    CHECK(r.error().message().find("no profile " + kAlicePk) != std::string::npos);
    // Nothing about Alice's profile (version, digest, pin) in the message.
    CHECK(r.error().message().find(profile_digest(sample_doc(1))) == std::string::npos);
    CHECK(r.error().message().find("pinned") == std::string::npos);
  }
  CHECK_FALSE(dst.current(kUnknownPk)->has_value()); // nothing applied
  CHECK((*dst.current(kBobPk))->version == 1);
  CHECK((*dst.current(kAlicePk))->version == 1);

  // Only Bob's profiles: imported, new keys owned by Bob.
  json bobs = *bundle;
  bobs["profiles"] = json::array();
  for (const json& e : (*bundle)["profiles"])
    if (e["pk"] != kAlicePk) bobs["profiles"].push_back(e);
  auto r = dst.import_bundle(bobs, kBob, ImportConflict::overwrite, kBob);
  REQUIRE(r);
  REQUIRE(r->size() == 2);
  CHECK((*dst.current(kBobPk))->digest == profile_digest(sample_doc(20)));
  CHECK(**dst.owner(kUnknownPk) == kBob);
  // Without a tenant (an operator's import) nothing is checked.
  auto op = dst.import_bundle(*bundle, 0, ImportConflict::overwrite);
  REQUIRE(op);
  CHECK((*dst.current(kAlicePk))->digest == profile_digest(sample_doc(10)));
  CHECK(**dst.owner(kAlicePk) == kAlice);
}

TEST_CASE("import per tenant creates only the profile keys of the tenant's own programs",
          "[profile_store][tenant][bundle]") {
  STORE_DIR(dir);
  auto src = open_store(dir.file("src.db"));
  REQUIRE(src.write(kAlicePk, 0, sample_doc(10), as(kAlice)));
  REQUIRE(src.write(kBobPk, 0, sample_doc(20), as(kBob)));
  REQUIRE(src.write(kUnknownPk, 0, sample_doc(30), as(kBob)));
  auto bundle = src.export_all();
  REQUIRE(bundle);
  auto only = [&](std::vector<std::string> pks) {
    json b = *bundle;
    b["profiles"] = json::array();
    for (const json& e : (*bundle)["profiles"])
      if (std::find(pks.begin(), pks.end(), e["pk"]) != pks.end()) b["profiles"].push_back(e);
    REQUIRE(b["profiles"].size() == pks.size());
    return b;
  };
  const auto own = ImportNewKeys::own_programs;

  auto dst = open_store(dir.file("dst.db"));
  // Alice's program will use kAlicePk; Bob's uses kBobPk. No profile exists yet.
  ProgramInfo alices{std::string(64, '1'), "a.ll", 1, kAlice, 0, 0};
  alices.pk = kAlicePk;
  ProgramInfo bobs{std::string(64, '2'), "b.ll", 1, kBob, 0, 0};
  bobs.pk = kBobPk;
  REQUIRE(dst.register_program(alices));
  REQUIRE(dst.register_program(bobs));

  // Bob cannot pre-create Alice's key, nor a key no program of his uses: the
  // error is an unknown key's, and nothing is written.
  for (ImportConflict policy :
       {ImportConflict::skip, ImportConflict::overwrite, ImportConflict::fail}) {
    auto squat = dst.import_bundle(only({kAlicePk}), kBob, policy, kBob, own);
    REQUIRE_FALSE(squat);
    CHECK(squat.error().code() == Errc::not_found);
    CHECK(squat.error().message() == "import (nothing imported): no profile " + kAlicePk);
    auto stray = dst.import_bundle(only({kBobPk, kUnknownPk}), kBob, policy, kBob, own);
    REQUIRE_FALSE(stray);
    CHECK(stray.error().code() == Errc::not_found);
    CHECK(stray.error().message() == "import (nothing imported): no profile " + kUnknownPk);
  }
  CHECK(dst.list()->empty());
  CHECK_FALSE(dst.owner(kAlicePk)->has_value());

  // Each owner creates its own key.
  auto alice = dst.import_bundle(only({kAlicePk}), kAlice, ImportConflict::fail, kAlice, own);
  REQUIRE(alice);
  REQUIRE(alice->size() == 1);
  CHECK((*alice)[0].action == ImportAction::created);
  CHECK(**dst.owner(kAlicePk) == kAlice);
  auto bob = dst.import_bundle(only({kBobPk}), kBob, ImportConflict::fail, kBob, own);
  REQUIRE(bob);
  CHECK(**dst.owner(kBobPk) == kBob);

  // Once Alice's key exists, Bob's refusal reads exactly as before it did.
  auto after = dst.import_bundle(only({kAlicePk}), kBob, ImportConflict::overwrite, kBob, own);
  REQUIRE_FALSE(after);
  CHECK(after.error().code() == Errc::not_found);
  CHECK(after.error().message() == "import (nothing imported): no profile " + kAlicePk);

  // An existing key of Bob's that no program of his uses (written by feedback,
  // say) is governed by ownership alone.
  REQUIRE(dst.write(kUnknownPk, 0, sample_doc(1), as(kBob)));
  auto existing = dst.import_bundle(only({kUnknownPk}), kBob, ImportConflict::overwrite, kBob, own);
  REQUIRE(existing);
  CHECK((*existing)[0].action == ImportAction::updated);

  // Without a tenant nothing is checked, and own_programs needs one.
  auto op = dst.import_bundle(*bundle, 0, ImportConflict::overwrite);
  REQUIRE(op);
  auto no_tenant = dst.import_bundle(*bundle, 0, ImportConflict::overwrite, std::nullopt, own);
  REQUIRE_FALSE(no_tenant);
  CHECK(no_tenant.error().code() == Errc::invalid_argument);
}

TEST_CASE("an import whose digest does not match never prints the right digest",
          "[profile_store][tenant][bundle]") {
  STORE_DIR(dir);
  auto src = open_store(dir.file("src.db"));
  REQUIRE(src.write(kAlicePk, 0, sample_doc(1), as(kAlice)));
  auto bundle = src.export_all();
  REQUIRE(bundle);
  json tampered = *bundle;
  json& profile = tampered["profiles"][0]["current"]["profile"];
  profile["functions"]["fn0"]["counts"][0] = 999;
  auto doc = profile_from_json(profile);
  REQUIRE(doc);
  const std::string right = profile_digest(*doc);

  auto dst = open_store(dir.file("dst.db"));
  auto r = dst.import_bundle(tampered, kAlice, ImportConflict::fail, kAlice);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::corrupt);
  CHECK(r.error().message().find("digest") != std::string::npos);
  CHECK(r.error().message().find(right) == std::string::npos);
  CHECK(dst.list()->empty());
}
