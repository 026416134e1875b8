// Feedback per host and idempotent batch ids; the store's kind and location.
#include "backends.h"
#include "fdo/profile_store/location.h"
#include "fdo/profile_store/profile_store.h"
#include "test_util.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::sample_doc;
using fdo::profile_store::test::TempDir;

namespace {

const std::string kPk = std::string(64, 'a');

ProfileStore open_with_profile(const std::string& location) {
  auto s = ProfileStore::open(location);
  if (!s) FAIL(s.error().describe());
  REQUIRE(*s->write(kPk, 0, sample_doc(1), {}) == 1);
  return std::move(*s);
}

FeedbackRow row(std::string host, std::uint64_t stages, std::uint64_t count) {
  FeedbackRow r;
  r.pk = kPk;
  r.version = 1;
  r.stages = stages;
  r.exec_ns = 10 * stages;
  r.counters = {{"cycles", 100 * stages}};
  r.function_counts = {{"main", {count, 1}}};
  r.host = std::move(host);
  return r;
}

} // namespace

TEST_CASE("feedback is kept per host and totals sum over the hosts", "[profile_store][feedback]") {
  STORE_DIR(dir);
  ProfileStore store = open_with_profile(dir.file("p.db"));
  std::vector<FeedbackRow> a = {row("host-a", 2, 5), row("host-b", 3, 7)};
  auto applied = store.append_feedback(a);
  REQUIRE(applied);
  CHECK(applied->applied == 2);
  CHECK_FALSE(applied->duplicate);
  std::vector<FeedbackRow> b = {row("host-a", 1, 1), row("", 4, 2)};
  REQUIRE(store.append_feedback(b));

  auto t = store.feedback(kPk, 1);
  REQUIRE(t);
  REQUIRE(t->has_value());
  CHECK((*t)->stages == 10);
  CHECK((*t)->exec_ns == 100);
  CHECK((*t)->counters.at("cycles") == 1000);
  CHECK((*t)->function_counts.at("main") == std::vector<std::uint64_t>{15, 4});
  CHECK((*t)->host_stages ==
        std::map<std::string, std::uint64_t>{{"", 4}, {"host-a", 3}, {"host-b", 3}});

  // One function has one count length across hosts.
  FeedbackRow bad = row("host-c", 1, 1);
  bad.function_counts["main"] = {1, 2, 3};
  std::vector<FeedbackRow> c = {bad};
  auto refused = store.append_feedback(c);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::invalid_argument);
  CHECK((*store.feedback(kPk, 1))->stages == 10);

  // remove reports (pk, version) aggregates, whatever the number of hosts.
  auto removed = store.remove(kPk);
  REQUIRE(removed);
  CHECK(removed->feedback_rows == 1);
}

TEST_CASE("a flush adds to the functions it names, per host, and leaves the others",
          "[profile_store][feedback]") {
  STORE_DIR(dir);
  ProfileStore store = open_with_profile(dir.file("p.db"));
  auto flush = [&](const std::string& host, int first, int last, std::uint64_t count) {
    FeedbackRow r;
    r.pk = kPk;
    r.version = 1;
    r.stages = 1;
    r.host = host;
    for (int f = first; f < last; ++f)
      r.function_counts[std::string("f").append(std::to_string(f))] = {
          count, static_cast<std::uint64_t>(f)};
    std::vector<FeedbackRow> rows = {r};
    auto applied = store.append_feedback(rows);
    if (!applied) FAIL(applied.error().describe());
  };
  flush("host-a", 0, 300, 1);    // f0..f299 on a
  flush("host-b", 100, 200, 10); // f100..f199 on b
  flush("host-a", 250, 400, 2);  // f250..f299 again on a, f300..f399 new
  auto t = store.feedback(kPk, 1);
  REQUIRE(t);
  REQUIRE(t->has_value());
  const auto& fc = (*t)->function_counts;
  CHECK(fc.size() == 400);
  CHECK(fc.at("f0") == std::vector<std::uint64_t>{1, 0});
  CHECK(fc.at("f150") == std::vector<std::uint64_t>{11, 300}); // a once + b once
  CHECK(fc.at("f260") == std::vector<std::uint64_t>{3, 520});  // a twice
  CHECK(fc.at("f399") == std::vector<std::uint64_t>{2, 399});  // a's second flush only
  // A length that differs from another host's row of the function is refused
  // whole, though this host has no row of it yet.
  FeedbackRow bad;
  bad.pk = kPk;
  bad.version = 1;
  bad.host = "host-c";
  bad.function_counts = {{"f5", {1, 2}}, {"f150", {1, 2, 3}}};
  std::vector<FeedbackRow> rows = {bad};
  auto refused = store.append_feedback(rows);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::invalid_argument);
  CHECK((*store.feedback(kPk, 1))->function_counts.at("f5") == std::vector<std::uint64_t>{1, 5});
}

TEST_CASE("a feedback batch id is applied once", "[profile_store][feedback]") {
  STORE_DIR(dir);
  ProfileStore store = open_with_profile(dir.file("p.db"));
  std::vector<FeedbackRow> rows = {row("host-a", 2, 5)};
  auto first = store.append_feedback(rows, "host-a/1");
  REQUIRE(first);
  CHECK(first->applied == 1);
  CHECK_FALSE(first->duplicate);
  auto again = store.append_feedback(rows, "host-a/1");
  REQUIRE(again);
  CHECK(again->duplicate);
  CHECK(again->applied == 0);
  CHECK((*store.feedback(kPk, 1))->stages == 2);

  // Another id applies; no id at all applies every time.
  REQUIRE_FALSE(store.append_feedback(rows, "host-a/2")->duplicate);
  REQUIRE(store.append_feedback(rows));
  REQUIRE(store.append_feedback(rows));
  CHECK((*store.feedback(kPk, 1))->stages == 8);

  // A batch that fails records no id: fixed and sent again, it applies.
  std::vector<FeedbackRow> bad = {row("host-a", 1, 1)};
  bad[0].version = 0;
  REQUIRE_FALSE(store.append_feedback(bad, "host-a/3"));
  FeedbackRow wrong_length = row("host-a", 1, 1);
  wrong_length.function_counts["main"] = {1};
  std::vector<FeedbackRow> bad_length = {wrong_length};
  REQUIRE_FALSE(store.append_feedback(bad_length, "host-a/3"));
  auto retried = store.append_feedback(rows, "host-a/3");
  REQUIRE(retried);
  CHECK_FALSE(retried->duplicate);
  CHECK((*store.feedback(kPk, 1))->stages == 10);

  // The id survives reopening (it is stored with the rows).
  std::string path = store.path();
  store = ProfileStore(std::move(*ProfileStore::open(path)));
  CHECK(store.append_feedback(rows, "host-a/3")->duplicate);

  auto too_long = store.append_feedback(rows, std::string(2000, 'x'));
  REQUIRE_FALSE(too_long);
  CHECK(too_long.error().code() == Errc::invalid_argument);
}

TEST_CASE("kind and location name the back end - a URI's password is never shown",
          "[profile_store]") {
  TempDir dir;
  auto store = ProfileStore::open(dir.file("p.db"));
  REQUIRE(store);
  CHECK(store->kind() == StoreKind::sqlite);
  CHECK(store->location() == dir.file("p.db"));
  CHECK(to_string(StoreKind::postgresql) == "postgresql");
  CHECK_FALSE(ProfileStore::is_postgres_location(dir.file("p.db")));
  CHECK(ProfileStore::is_postgres_location("postgres://h/db"));

  CHECK(redact_location("postgresql://fdo:s3cret@db.example:5432/fdo?sslmode=require") ==
        "postgresql://fdo:***@db.example:5432/fdo?sslmode=require");
  CHECK(redact_location("postgresql://fdo@db/fdo?password=s3cret&connect_timeout=2") ==
        "postgresql://fdo@db/fdo?password=***&connect_timeout=2");
  CHECK(redact_location("postgres:///fdo?host=/run/postgresql") ==
        "postgres:///fdo?host=/run/postgresql");
  CHECK(redact_location("/var/lib/fdo/profiles.db") == "/var/lib/fdo/profiles.db");

  // Nothing listens on port 1: refused, and the message keeps the password out.
  Options o;
  o.connect_timeout = std::chrono::seconds(1);
  auto refused = ProfileStore::open("postgresql://fdo:s3cret@127.0.0.1:1/fdo", o);
  REQUIRE_FALSE(refused);
  CHECK(
      (refused.error().code() == Errc::unavailable || refused.error().code() == Errc::unsupported));
  CHECK(refused.error().message().find("s3cret") == std::string::npos);
  CHECK(refused.error().message().find("127.0.0.1") != std::string::npos);
}
