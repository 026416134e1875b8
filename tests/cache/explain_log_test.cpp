// The explain log alone: bounded records per program, bounded programs, and
// what each program last served.
#include "explain_log.h"
#include "fakes.h"

#include <catch2/catch.hpp>

using namespace fdo;
using namespace fdo::cache;
using namespace fdo::cache::detail;
using fdo::cache::testing::numbered;

namespace {

ExplainRecord record_for(const std::string& ik, Outcome outcome, std::string text = "") {
  ExplainRecord r;
  r.ik = ik;
  r.outcome = outcome;
  r.text = std::move(text);
  return r;
}

Served served(const std::string& key, std::int64_t version) {
  return Served{key, key + "-ck", numbered("digest", version), version, CompileMode::optimized};
}

} // namespace

TEST_CASE("explain log: records per program are bounded - newest kept", "[cache][explain_log]") {
  ExplainLog log(3, 100);
  for (int i = 0; i < 5; ++i)
    log.record(record_for("a", Outcome::memory_hit, numbered("a", i)), std::nullopt);
  for (int i = 0; i < 2; ++i)
    log.record(record_for("b", Outcome::compiled, numbered("b", i)), std::nullopt);
  auto a = log.records("a");
  REQUIRE(a.size() == 3);
  CHECK(a[0].text == "a2");
  CHECK(a[2].text == "a4");
  for (std::size_t i = 1; i < a.size(); ++i)
    CHECK(a[i].sequence > a[i - 1].sequence);
  CHECK(a[2].unix_ms > 0);
  auto b = log.records("b");
  REQUIRE(b.size() == 2); // one program's bound does not trim another's
  CHECK(b[0].text == "b0");
  CHECK(b[1].sequence > a[2].sequence); // one sequence across programs
  CHECK(log.records("c").empty());
}

TEST_CASE("explain log: what a program last served", "[cache][explain_log]") {
  ExplainLog log(4, 100);
  CHECK_FALSE(log.last_served("a"));
  log.record(record_for("a", Outcome::compiled), served("a-v", 0));
  REQUIRE(log.last_served("a"));
  CHECK(log.last_served("a")->storage_key == "a-v");
  // Records that serve nothing (failures, background compiles) keep it.
  log.record(record_for("a", Outcome::failed), std::nullopt);
  CHECK(log.last_served("a")->storage_key == "a-v");
  log.record(record_for("a", Outcome::compiled), served("a-ck2", 2));
  auto now = log.last_served("a");
  REQUIRE(now);
  CHECK(now->storage_key == "a-ck2");
  CHECK(now->version == 2);
  CHECK(now->digest == "digest2");
  CHECK(now->mode == CompileMode::optimized);
  CHECK_FALSE(log.last_served("b"));
}

TEST_CASE("explain log: beyond max_programs the least recently used program is forgotten",
          "[cache][explain_log]") {
  ExplainLog log(4, 2);
  log.record(record_for("a", Outcome::compiled), served("a-v", 0));
  log.record(record_for("b", Outcome::compiled), served("b-v", 0));
  CHECK(log.records("a").size() == 1); // a is now more recent than b
  log.record(record_for("c", Outcome::compiled), served("c-v", 0));
  CHECK(log.records("b").empty());
  CHECK_FALSE(log.last_served("b"));
  CHECK(log.records("a").size() == 1);
  CHECK(log.last_served("c"));
}

TEST_CASE("explain log: a stage's execution time lands on its own record", "[cache][explain_log]") {
  ExplainLog log(2, 100);
  std::uint64_t first = log.record(record_for("a", Outcome::compiled), std::nullopt);
  std::uint64_t second = log.record(record_for("a", Outcome::memory_hit), std::nullopt);
  std::uint64_t other = log.record(record_for("b", Outcome::compiled), std::nullopt);
  CHECK(second > first);
  log.set_exec_ns("a", first, 1500);
  log.set_exec_ns("b", second, 99); // a sequence of another program changes nothing
  auto a = log.records("a");
  REQUIRE(a.size() == 2);
  CHECK(a[0].sequence == first);
  CHECK(a[0].exec_ns == std::optional<std::uint64_t>(1500));
  CHECK_FALSE(a[1].exec_ns);
  CHECK_FALSE(log.records("b")[0].exec_ns);
  CHECK(to_json(a[0])["exec_ns"] == 1500);
  CHECK_FALSE(to_json(a[1]).contains("exec_ns"));
  // A record trimmed by the bound is gone: nothing to update, nothing breaks.
  log.record(record_for("a", Outcome::memory_hit), std::nullopt);
  log.set_exec_ns("a", first, 7);
  for (const auto& r : log.records("a"))
    CHECK(r.sequence != first);
  log.set_exec_ns("b", other, 42);
  CHECK(log.records("b")[0].exec_ns == std::optional<std::uint64_t>(42));
}
