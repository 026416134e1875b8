// Unit tests of the key mappings, the program registry, feedback aggregation
// and export/import bundles.
#include "backends.h"
#include "fdo/profile_store/profile_store.h"
#include "test_util.h"

#include <catch2/catch.hpp>
#include <limits>
#include <thread>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::random_doc;
using fdo::profile_store::test::sample_doc;
using fdo::profile_store::test::TempDir;
using nlohmann::json;

namespace {

ProfileStore open_store(const std::string& path, Options options = {}) {
  auto s = ProfileStore::open(path, options);
  if (!s) FAIL(s.error().describe());
  return std::move(*s);
}

WriteInfo info(WriteSource source = WriteSource::feedback) {
  WriteInfo i;
  i.source = source;
  i.reason = "unit";
  i.owner = 7;
  i.host = "origin-host";
  i.stage = 3;
  return i;
}

std::string key(char c) {
  return std::string(64, c);
}

} // namespace

TEST_CASE("profile key mapping: idempotent put - replace reports the old key - remove",
          "[profile_store][keys]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("k.db"));
  const std::string ik = key('1');
  CHECK_FALSE(store.lookup_profile_key(ik)->has_value());

  auto first = store.put_profile_key(ik, key('a'));
  REQUIRE(first);
  CHECK(first->change == MappingChange::inserted);
  CHECK_FALSE(first->previous.has_value());
  auto same = store.put_profile_key(ik, key('a'));
  REQUIRE(same);
  CHECK(same->change == MappingChange::unchanged);
  CHECK(**store.lookup_profile_key(ik) == key('a'));

  auto remap = store.put_profile_key(ik, key('b'));
  REQUIRE(remap);
  CHECK(remap->change == MappingChange::replaced);
  CHECK(remap->previous == key('a'));
  CHECK(**store.lookup_profile_key(ik) == key('b'));

  CHECK(*store.remove_profile_key(ik) == true);
  CHECK(*store.remove_profile_key(ik) == false);
  CHECK_FALSE(store.lookup_profile_key(ik)->has_value());

  auto empty = store.put_profile_key("", key('a'));
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code() == Errc::invalid_argument);
  auto huge = store.lookup_profile_key(std::string(5000, 'x'));
  REQUIRE_FALSE(huge);
  CHECK(huge.error().code() == Errc::invalid_argument);
}

TEST_CASE("virtual key mapping: idempotent put - replace - remove - remove all of an ik",
          "[profile_store][keys]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("k.db"));
  const std::string ik = key('1'), other = key('2');
  CHECK(store.put_virtual_key("ck-a", "vk-1", ik)->change == MappingChange::inserted);
  CHECK(store.put_virtual_key("ck-a", "vk-1", ik)->change == MappingChange::unchanged);
  // Learning the program of a known mapping is not a change of the mapping.
  CHECK(store.put_virtual_key("ck-b", "vk-1", "")->change == MappingChange::inserted);
  CHECK(store.put_virtual_key("ck-b", "vk-1", ik)->change == MappingChange::unchanged);
  auto rep = store.put_virtual_key("ck-a", "vk-2", ik);
  REQUIRE(rep);
  CHECK(rep->change == MappingChange::replaced);
  CHECK(rep->previous == "vk-1");
  REQUIRE(store.put_virtual_key("ck-c", "vk-9", other));
  REQUIRE(store.put_profile_key(ik, key('a')));
  REQUIRE(store.put_profile_key(other, key('b')));
  CHECK(**store.lookup_virtual_key("ck-a") == "vk-2");

  CHECK(*store.remove_virtual_key("ck-c") == true);
  CHECK(*store.remove_virtual_key("ck-c") == false);

  auto removed = store.remove_mappings(ik);
  REQUIRE(removed);
  CHECK(removed->profile_keys == 1);
  CHECK(removed->virtual_keys == 2); // ck-a and ck-b (whose ik was learned later)
  CHECK_FALSE(store.lookup_virtual_key("ck-a")->has_value());
  CHECK_FALSE(store.lookup_virtual_key("ck-b")->has_value());
  CHECK_FALSE(store.lookup_profile_key(ik)->has_value());
  CHECK(**store.lookup_profile_key(other) == key('b'));
  auto none = store.remove_mappings(ik);
  REQUIRE(none);
  CHECK(none->profile_keys == 0);
  CHECK(none->virtual_keys == 0);
}

TEST_CASE("program registry keeps first_seen and owner - bumps last_used",
          "[profile_store][programs]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("r.db"));
  auto a = store.register_program({key('1'), "prog-a.ll", 1234, 1000, 0, 0});
  REQUIRE(a);
  CHECK(a->name == "prog-a.ll");
  CHECK(a->size == 1234);
  CHECK(a->owner == 1000);
  CHECK(a->first_seen > 0);
  CHECK(a->last_used == a->first_seen);
  REQUIRE(store.register_program({key('2'), "prog-b.bc", 99, 2000, 0, 0}));

  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto again = store.register_program({key('1'), "renamed.ll", 1300, 3000, 0, 0});
  REQUIRE(again);
  CHECK(again->first_seen == a->first_seen);
  CHECK(again->owner == 1000);
  CHECK(again->name == "renamed.ll");
  CHECK(again->size == 1300);
  CHECK(again->last_used > a->last_used);

  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(store.touch_program(key('1')));
  auto touched = store.program(key('1'));
  REQUIRE(touched);
  REQUIRE(touched->has_value());
  CHECK((*touched)->last_used > again->last_used);
  CHECK(store.touch_program(key('9')).error().code() == Errc::not_found);
  CHECK_FALSE(store.program(key('9'))->has_value());

  CHECK(store.programs()->size() == 2);
  auto mine = store.programs(2000);
  REQUIRE(mine);
  REQUIRE(mine->size() == 1);
  CHECK((*mine)[0].ik == key('2'));
  CHECK(store.register_program({key('3'), "x", -1, 0, 0, 0}).error().code() ==
        Errc::invalid_argument);

  CHECK(*store.remove_program(key('2')) == true);
  CHECK(*store.remove_program(key('2')) == false);
  CHECK(store.programs()->size() == 1);
}

TEST_CASE("program rows record their program hash once and their profile key",
          "[profile_store][programs]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("h.db"));
  ProgramInfo p{key('1'), "prog.ll", 10, 1000, 0, 0};
  auto unknown = store.register_program(p);
  REQUIRE(unknown);
  CHECK(unknown->program_hash.empty()); // a caller that does not know them
  CHECK(unknown->pk.empty());
  CHECK_FALSE(*store.owns_program_with_profile_key(1000, key('a')));

  p.program_hash = key('h');
  p.pk = key('a');
  auto recorded = store.register_program(p);
  REQUIRE(recorded);
  CHECK(recorded->program_hash == key('h'));
  CHECK(recorded->pk == key('a'));
  CHECK((*store.program(key('1')))->program_hash == key('h'));
  CHECK((*store.programs(1000))[0].pk == key('a'));
  CHECK(*store.owns_program_with_profile_key(1000, key('a')));
  CHECK_FALSE(*store.owns_program_with_profile_key(2000, key('a')));
  CHECK_FALSE(*store.owns_program_with_profile_key(1000, key('b')));

  // A registration that does not know them keeps what is recorded.
  ProgramInfo bare{key('1'), "renamed.ll", 10, 1000, 0, 0};
  auto kept = store.register_program(bare);
  REQUIRE(kept);
  CHECK(kept->name == "renamed.ll");
  CHECK(kept->program_hash == key('h'));
  CHECK(kept->pk == key('a'));

  // Other bytes under the same id: refused, nothing changed.
  ProgramInfo other = p;
  other.name = "other.ll";
  other.program_hash = key('x');
  other.pk = key('b');
  auto refused = store.register_program(other);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::conflict);
  auto row = store.program(key('1'));
  REQUIRE(row);
  CHECK((*row)->name == "renamed.ll");
  CHECK((*row)->program_hash == key('h'));
  CHECK((*row)->pk == key('a'));

  // A new profile key (say, after a canonicalisation change) replaces the old.
  p.pk = key('c');
  REQUIRE(store.register_program(p));
  CHECK(*store.owns_program_with_profile_key(1000, key('c')));
  CHECK_FALSE(*store.owns_program_with_profile_key(1000, key('a')));

  p.program_hash = std::string(2000, 'h');
  CHECK(store.register_program(p).error().code() == Errc::invalid_argument);
  CHECK(store.owns_program_with_profile_key(1000, "").error().code() == Errc::invalid_argument);
}

TEST_CASE("feedback rows aggregate within and across batches", "[profile_store][feedback]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("f.db"));
  const std::string pk = key('a');
  REQUIRE(store.write(pk, 0, sample_doc(1), info()));
  REQUIRE(store.write(pk, 1, sample_doc(2), info()));
  CHECK_FALSE(store.feedback(pk, 1)->has_value());

  std::vector<FeedbackRow> batch1 = {
      {pk, 1, 1, 1000, {{"branch-misses", 10}, {"cycles", 500}}, {{"main", {1, 2, 3}}}},
      {pk, 1, 2, 3000, {{"branch-misses", 5}}, {{"main", {10, 20, 30}}, {"helper", {7}}}},
      {pk, 2, 1, 50, {{"cycles", 9}}, {}},
  };
  auto r1 = store.append_feedback(batch1);
  REQUIRE(r1);
  CHECK(r1->applied == 3);
  CHECK(r1->skipped.empty());

  std::vector<FeedbackRow> batch2 = {
      {pk, 1, 4, 6000, {{"cycles", 1}, {"instructions", 77}}, {{"main", {100, 200, 300}}}},
  };
  REQUIRE(store.append_feedback(batch2));

  auto t = store.feedback(pk, 1);
  REQUIRE(t);
  REQUIRE(t->has_value());
  const FeedbackTotals& f = **t;
  CHECK(f.stages == 7);
  CHECK(f.exec_ns == 10000);
  CHECK(f.counters == std::map<std::string, std::uint64_t>{
                          {"branch-misses", 15}, {"cycles", 501}, {"instructions", 77}});
  CHECK(f.function_counts.at("main") == std::vector<std::uint64_t>{111, 222, 333});
  CHECK(f.function_counts.at("helper") == std::vector<std::uint64_t>{7});
  CHECK(f.updated_at > 0);
  auto t2 = store.feedback(pk, 2);
  REQUIRE(t2);
  CHECK((*t2)->stages == 1);
  CHECK((*t2)->counters.at("cycles") == 9);
}

TEST_CASE("feedback sums saturate instead of wrapping", "[profile_store][feedback]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("f.db"));
  const std::string pk = key('a');
  REQUIRE(store.write(pk, 0, sample_doc(1), info()));
  const std::uint64_t big = std::numeric_limits<std::uint64_t>::max() - 5;
  std::vector<FeedbackRow> rows = {{pk, 1, big, big, {{"c", big}}, {{"f", {big, 1}}}}};
  REQUIRE(store.append_feedback(rows));
  // Values above INT64_MAX survive SQLite's signed integers.
  CHECK((*store.feedback(pk, 1))->counters.at("c") == big);
  REQUIRE(store.append_feedback(rows));
  auto t = store.feedback(pk, 1);
  REQUIRE(t);
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  CHECK((*t)->stages == max);
  CHECK((*t)->exec_ns == max);
  CHECK((*t)->counters.at("c") == max);
  CHECK((*t)->function_counts.at("f") == std::vector<std::uint64_t>{max, 2});
}

TEST_CASE("a bad feedback row fails the whole batch and applies nothing",
          "[profile_store][feedback]") {
  STORE_DIR(dir);
  auto store = open_store(dir.file("f.db"));
  const std::string pk = key('a');
  REQUIRE(store.write(pk, 0, sample_doc(1), info()));
  std::vector<FeedbackRow> first = {{pk, 1, 1, 10, {{"c", 1}}, {{"main", {1, 2}}}}};
  REQUIRE(store.append_feedback(first));

  // Stored "main" has 2 counts; this batch's first row is fine, the second is not.
  std::vector<FeedbackRow> mismatch = {{pk, 1, 1, 10, {{"c", 1}}, {}},
                                       {pk, 1, 1, 10, {}, {{"main", {1, 2, 3}}}}};
  auto bad = store.append_feedback(mismatch);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::invalid_argument);
  CHECK(bad.error().message().find("main") != std::string::npos);

  std::vector<FeedbackRow> inner_mismatch = {{pk, 1, 1, 10, {}, {{"g", {1}}}},
                                             {pk, 1, 1, 10, {}, {{"g", {1, 2}}}}};
  CHECK(store.append_feedback(inner_mismatch).error().code() == Errc::invalid_argument);
  std::vector<FeedbackRow> zero_version = {{pk, 0, 1, 1, {}, {}}};
  CHECK(store.append_feedback(zero_version).error().code() == Errc::invalid_argument);
  std::vector<FeedbackRow> empty_counter = {{pk, 1, 1, 1, {{"", 1}}, {}}};
  CHECK(store.append_feedback(empty_counter).error().code() == Errc::invalid_argument);

  auto t = store.feedback(pk, 1);
  REQUIRE(t);
  CHECK((*t)->stages == 1);
  CHECK((*t)->counters.at("c") == 1);
  CHECK((*t)->function_counts.at("main") == std::vector<std::uint64_t>{1, 2});

  // Unknown keys are skipped and reported, the rest of the batch applies.
  std::vector<FeedbackRow> mixed = {{pk, 1, 2, 0, {}, {}}, {key('z'), 1, 1, 0, {}, {}}};
  auto res = store.append_feedback(mixed);
  REQUIRE(res);
  CHECK(res->applied == 1);
  REQUIRE(res->skipped.size() == 1);
  CHECK(res->skipped[0].first == key('z'));
  CHECK((*store.feedback(pk, 1))->stages == 3);
}

TEST_CASE("export/import round trip moves profiles between stores", "[profile_store][bundle]") {
  STORE_DIR(dir);
  auto src = open_store(dir.file("src.db"));
  std::mt19937_64 rng(20260101);
  std::vector<std::string> pks = {key('1'), key('2'), key('3')};
  std::map<std::string, ProfileDoc> docs;
  for (const auto& pk : pks) {
    for (int v = 0; v < 3; ++v) {
      docs[pk] = random_doc(rng);
      REQUIRE(src.write(pk, v, docs[pk], info()));
    }
  }
  REQUIRE(src.pin(key('2')));
  REQUIRE(src.reset(key('3')));

  auto bundle = src.export_all(ExportHistory::full);
  REQUIRE(bundle);
  CHECK((*bundle)["format"] == "fdo-profile-bundle");
  CHECK((*bundle)["format_version"] == 1);
  REQUIRE((*bundle)["profiles"].size() == 3);
  CHECK((*bundle)["profiles"][0]["history"].size() == 3);
  CHECK((*bundle)["profiles"][2]["current"].is_null());
  // Through text, as it travels between hosts.
  json travelled = json::parse(bundle->dump(2));

  auto dst = open_store(dir.file("dst.db"));
  auto imported = dst.import_bundle(travelled, 4242, ImportConflict::fail);
  REQUIRE(imported);
  REQUIRE(imported->size() == 3);
  CHECK((*imported)[0].action == ImportAction::created);
  CHECK((*imported)[1].action == ImportAction::created);
  CHECK((*imported)[2].action == ImportAction::skipped); // reset: nothing current
  for (const auto& pk : {key('1'), key('2')}) {
    auto cur = dst.current(pk);
    REQUIRE(cur);
    REQUIRE(cur->has_value());
    const StoredProfile& p = **cur;
    CHECK(p.version == 1);
    CHECK(p.digest == profile_digest(docs[pk]));
    CHECK(p.doc.functions == docs[pk].functions);
    CHECK(p.doc.knobs == docs[pk].knobs);
    CHECK(p.doc.hardware == docs[pk].hardware);
    CHECK(p.source == WriteSource::import);
    CHECK(p.owner == 4242);
    CHECK(p.host == "origin-host");
    CHECK(p.reason.find("import of version 3") != std::string::npos);
  }
  CHECK((*dst.current(key('2')))->pinned);
  CHECK_FALSE((*dst.current(key('1')))->pinned);
  CHECK_FALSE(dst.current(key('3'))->has_value());

  // Importing the same bundle again changes nothing.
  auto again = dst.import_bundle(travelled, 4242, ImportConflict::fail);
  REQUIRE(again);
  CHECK((*again)[0].action == ImportAction::unchanged);
  CHECK((*again)[0].version == 1);
  CHECK(dst.history(key('1'))->size() == 1);

  // A diverged local profile: skip keeps it, fail refuses everything,
  // overwrite writes a new version on top.
  REQUIRE(dst.write(key('1'), 1, sample_doc(77), info(WriteSource::operator_)));
  auto skipped = dst.import_bundle(travelled, 4242, ImportConflict::skip);
  REQUIRE(skipped);
  CHECK((*skipped)[0].action == ImportAction::skipped);
  CHECK((*skipped)[0].version == 2);
  CHECK((*dst.current(key('1')))->digest == profile_digest(sample_doc(77)));

  REQUIRE(dst.remove(key('2')));
  auto failed = dst.import_bundle(travelled, 4242, ImportConflict::fail);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().code() == Errc::conflict);
  CHECK_FALSE(dst.current(key('2'))->has_value()); // the whole import rolled back

  auto over = dst.import_bundle(travelled, 4242, ImportConflict::overwrite);
  REQUIRE(over);
  CHECK((*over)[0].action == ImportAction::updated);
  CHECK((*over)[0].version == 3);
  CHECK((*dst.current(key('1')))->digest == profile_digest(docs[key('1')]));
  CHECK((*over)[1].action == ImportAction::created);
  CHECK(dst.history(key('1'))->size() == 3);

  // Export of selected keys; unknown keys are an error.
  std::vector<std::string> sel = {key('2')};
  auto one = src.export_bundle(sel);
  REQUIRE(one);
  CHECK((*one)["profiles"].size() == 1);
  CHECK_FALSE((*one)["profiles"][0].contains("history"));
  std::vector<std::string> unknown = {key('9')};
  CHECK(src.export_bundle(unknown).error().code() == Errc::not_found);
}

TEST_CASE("import validates the bundle before writing anything", "[profile_store][bundle]") {
  STORE_DIR(dir);
  auto src = open_store(dir.file("src.db"));
  REQUIRE(src.write(key('1'), 0, sample_doc(1), info()));
  REQUIRE(src.write(key('2'), 0, sample_doc(2), info()));
  auto bundle = src.export_all();
  REQUIRE(bundle);
  auto dst = open_store(dir.file("dst.db"));

  auto expect = [&](json b, Errc code, const std::string& needle) {
    auto r = dst.import_bundle(b, 1, ImportConflict::fail);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == code);
    CHECK(r.error().message().find(needle) != std::string::npos);
    CHECK(dst.list()->empty());
  };
  json tampered = *bundle;
  tampered["profiles"][1]["current"]["profile"]["functions"]["fn0"]["counts"][0] = 999;
  expect(tampered, Errc::corrupt, "digest");
  json wrong_format = *bundle;
  wrong_format["format"] = "something-else";
  expect(wrong_format, Errc::invalid_argument, "format");
  json future = *bundle;
  future["format_version"] = 99;
  expect(future, Errc::unsupported, "format_version");
  json bad_doc = *bundle;
  bad_doc["profiles"][0]["current"]["profile"]["knobs"]["opt_level"] = 7;
  expect(bad_doc, Errc::invalid_argument, "opt_level");
  json dup = *bundle;
  dup["profiles"][1]["pk"] = key('1');
  expect(dup, Errc::invalid_argument, "twice");
  expect(json::array(), Errc::invalid_argument, "object");
  json no_pk = *bundle;
  no_pk["profiles"][0].erase("pk");
  expect(no_pk, Errc::invalid_argument, "pk");
}
