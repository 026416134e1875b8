// Structured records (journal.h, log_record.h): what journald receives for a
// record; stage, rewrite and audit records through the logger's record sink
// carry program, profile key and tenant; and, where journald runs, a record
// sent with sd_journal_sendv read back with journalctl.
#include "fdo/daemon/audit.h"
#include "fdo/daemon/journal.h"
#include "fdo/util/hash.h"
#include "fdo/util/log_record.h"
#include "service_harness.h"
#include "support/skip.h"

#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

namespace {

struct Captured {
  log::Level level;
  std::string message;
  std::map<std::string, std::string> fields;
};

// The record sink is a plain function pointer (the logger holds no state of
// its users), so the capture lives here, for this test binary only.
std::mutex captured_mu;
std::vector<Captured> captured;

bool capture(log::Level level, std::string_view message, std::span<const log::Field> fields) {
  Captured c{level, std::string(message), {}};
  for (const log::Field& f : fields)
    c.fields[std::string(f.name)] = std::string(f.value);
  std::lock_guard lk(captured_mu);
  captured.push_back(std::move(c));
  return true;
}

// Installs the capture (and a level) for one test, and puts both back.
struct CaptureRecords {
  log::Level before = log::level();
  explicit CaptureRecords(log::Level level) {
    std::lock_guard lk(captured_mu);
    captured.clear();
    log::set_level(level);
    log::set_record_sink(capture);
  }
  ~CaptureRecords() {
    log::set_record_sink(nullptr);
    log::set_level(before);
  }
  std::vector<Captured> with(const std::string& field) {
    std::lock_guard lk(captured_mu);
    std::vector<Captured> out;
    for (const Captured& c : captured)
      if (c.fields.contains(field)) out.push_back(c);
    return out;
  }
};

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0)
    out.append(buf.data(), n);
  ::pclose(p);
  return out;
}

} // namespace

TEST_CASE("journal: a record's entries name message, priority, identifier and its fields",
          "[journal]") {
  std::array<log::Field, 3> fields{
      {{"FDO_PROGRAM", "abc"}, {"FDO_PROFILE_KEY", ""}, {"FDO_TENANT_UID", "1000"}}};
  auto entries = journal_entries(log::Level::notice, "audit: x", fields);
  CHECK(entries == std::vector<std::string>{"MESSAGE=audit: x", "PRIORITY=5",
                                            "SYSLOG_IDENTIFIER=fdod", "FDO_PROGRAM=abc",
                                            "FDO_TENANT_UID=1000"});
  CHECK(log::with_fields("m", fields) == "m [FDO_PROGRAM=abc FDO_TENANT_UID=1000]");
}

TEST_CASE("journal: stage, rewrite and audit records carry program, profile key and tenant",
          "[journal]") {
  CaptureRecords records(log::Level::debug);
  Harness h;
  auto reg = h.call("program.register", {{"ir", "program one"}}, 1234);
  REQUIRE(reg);
  const std::string ik = (*reg)["program"], pk = (*reg)["profile_key"];
  for (int i = 0; i < 2; ++i)
    REQUIRE(h.call("execute", {{"program", ik}, {"entry", "main"}}, 1234));

  auto stages = records.with("FDO_STAGE");
  std::vector<Captured> ran, rewrites;
  for (const Captured& c : stages)
    (c.fields.contains("FDO_MODE") ? ran : rewrites).push_back(c);
  REQUIRE(ran.size() == 2);
  CHECK(ran[0].level == log::Level::debug);
  CHECK(ran[1].fields.at("FDO_STAGE") == "1");
  for (const Captured& c : ran) {
    CHECK(c.fields.at("FDO_PROGRAM") == ik);
    CHECK(c.fields.at("FDO_PROFILE_KEY") == pk);
    CHECK(c.fields.at("FDO_TENANT_UID") == "1234");
    CHECK(c.fields.at("FDO_MODE") == "instrumented");
  }
  REQUIRE(rewrites.size() == 1); // the second stage's feedback rewrote the profile
  CHECK(rewrites[0].level == log::Level::info);
  CHECK(rewrites[0].fields.at("FDO_PROFILE_VERSION") == "1");
  CHECK(rewrites[0].fields.at("FDO_PROGRAM") == ik);
  CHECK(rewrites[0].fields.at("FDO_PROFILE_KEY") == pk);
  CHECK(rewrites[0].fields.at("FDO_TENANT_UID") == "1234");

  // The daemon's audit sink writes its records through the same path.
  auto sink = journal_audit_sink();
  sink->record(AuditRecord{"profile.pin", 1234, pk, "", "ok", "version 1, pinned"});
  auto audits = records.with("FDO_AUDIT");
  REQUIRE(audits.size() == 1);
  CHECK(audits[0].level == log::Level::notice);
  CHECK(audits[0].fields.at("FDO_ACTION") == "profile.pin");
  CHECK(audits[0].fields.at("FDO_PROFILE_KEY") == pk);
  CHECK(audits[0].fields.at("FDO_TENANT_UID") == "1234");
  CHECK(audits[0].message ==
        describe(AuditRecord{"profile.pin", 1234, pk, "", "ok", "version 1, pinned"}));
}

TEST_CASE("journal: a record sent to journald reads back with its fields", "[journal]") {
  if (!std::filesystem::exists("/run/systemd/journal/socket")) {
    FDO_SKIP("skipped: no journald here (/run/systemd/journal/socket is missing)");
  }
  const std::string id =
      blake3_hex(std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  const std::string pk = "pk-" + id; // fields only view their values
  std::array<log::Field, 3> fields{
      {{"FDO_PROGRAM", id}, {"FDO_PROFILE_KEY", pk}, {"FDO_TENANT_UID", "4321"}}};
  REQUIRE(send_to_journal(log::Level::notice, "fdo journal test", fields));
  json found;
  for (int i = 0; i < 50 && found.is_null(); ++i) {
    std::string out = run_command("journalctl -o json --no-pager FDO_PROGRAM=" + id + " 2>&1");
    auto first = json::parse(out.substr(0, out.find('\n')), nullptr, false);
    if (!first.is_discarded() && first.is_object()) found = first;
    if (found.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (found.is_null()) {
    FDO_SKIP("skipped: journald took the record but journalctl cannot read it back here");
  }
  CHECK(found["MESSAGE"] == "fdo journal test");
  CHECK(found["FDO_PROFILE_KEY"] == pk);
  CHECK(found["FDO_TENANT_UID"] == "4321");
  CHECK(found["SYSLOG_IDENTIFIER"] == "fdod");
  CHECK(found["PRIORITY"] == "5");
}
