// In-process leases through the Service over fake workers (service_harness.h):
// program.lease hands out the output as a sealed read-only memfd,
// feedback.submit folds validated numbers into the profile, and everything a
// hostile client could send wrong is refused without changing anything.
#include "fdo/daemon/leases.h"
#include "rpc_call.h"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using nlohmann::json;

namespace {

using Reply = RpcReply;

// One request as `uid` on connection `connection`, with an fd transport.
Reply call(Harness& h, const std::string& method, const json& params, uid_t uid = 1000,
           std::uint64_t connection = 1, bool fd_transport = true) {
  CallContext ctx;
  ctx.uid = uid;
  ctx.connection = connection;
  return call_with(h, method, params, ctx, fd_transport ? FdTransport::on : FdTransport::off);
}

std::string read_all(const Fd& fd) {
  std::string out(4096, '\0');
  ssize_t n = ::pread(fd.get(), out.data(), out.size(), 0);
  REQUIRE(n >= 0);
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::int64_t profile_version(Harness& h, const std::string& pk) {
  auto p = h.call("profile.get", {{"profile_key", pk}});
  return p ? (*p)["version"].get<std::int64_t>() : -1;
}

json batch(std::uint64_t calls, json counts) {
  return {{"calls", calls}, {"exec_ns", calls * 100}, {"counts", std::move(counts)}};
}

struct Leased {
  std::string program, pk;
  std::uint64_t lease = 0;
  std::string storage_key;
};

Leased register_and_lease(Harness& h, std::uint64_t connection = 1) {
  auto reg = h.call("program.register", {{"ir", "in-process program"}});
  REQUIRE(reg);
  Leased l{(*reg)["program"], (*reg)["profile_key"], 0, ""};
  Reply r =
      call(h, "program.lease", {{"program", l.program}, {"entries", {"main"}}}, 1000, connection);
  INFO(r.error.dump());
  REQUIRE(r.error.is_null());
  l.lease = r.result["lease"];
  l.storage_key = r.result["storage_key"];
  return l;
}

} // namespace

TEST_CASE("program.lease: the output as one sealed read-only memfd with its layout",
          "[service][inprocess]") {
  Harness h;
  auto reg = h.call("program.register", {{"ir", "in-process program"}});
  REQUIRE(reg);
  Reply r = call(h, "program.lease", {{"program", (*reg)["program"]}, {"entries", {"main"}}});
  INFO(r.error.dump());
  REQUIRE(r.error.is_null());
  CHECK(r.result["mode"] == "instrumented");
  CHECK(r.result["unchanged"] == false);
  CHECK(r.result["fds"] == 1);
  CHECK(r.result["counters_layout"] == json::array({{{"function", "main"}, {"counters", 2}}}));
  CHECK(r.result["metadata"]["entries"].size() == 1);
  CHECK(r.result["sampling"]["available"] == false);
  CHECK_FALSE(r.result["sampling"]["reason"].get<std::string>().empty());
  REQUIRE(r.fds.size() == 1);
  CHECK(read_all(r.fds[0]) == "object:instrumented");
  CHECK(r.result["object_size"] == std::string("object:instrumented").size());
  // Read-only, and sealed: no descriptor anyone holds can change it.
  CHECK((::fcntl(r.fds[0].get(), F_GETFL) & O_ACCMODE) == O_RDONLY);
  CHECK(::write(r.fds[0].get(), "x", 1) < 0);
  const int seals = ::fcntl(r.fds[0].get(), F_GET_SEALS);
  CHECK((seals & F_SEAL_WRITE) != 0);
  CHECK((seals & F_SEAL_SEAL) != 0);

  // Asked again with the key it already has: unchanged, no lease, no fd.
  Reply same = call(h, "program.lease",
                    {{"program", (*reg)["program"]},
                     {"entries", {"main"}},
                     {"unless_storage_key", r.result["storage_key"]}});
  CHECK(same.result["unchanged"] == true);
  CHECK(same.result["lease"].is_null());
  CHECK(same.fds.empty());

  auto health = h.call("health", json::object());
  REQUIRE(health);
  CHECK((*health)["inprocess"]["leases"] == 1);
}

TEST_CASE("program.lease refusals: no fd transport, unknown entry, another tenant's program",
          "[service][inprocess]") {
  Harness h;
  auto reg = h.call("program.register", {{"ir", "in-process program"}});
  REQUIRE(reg);
  const std::string id = (*reg)["program"];
  Reply no_fds = call(h, "program.lease", {{"program", id}, {"entries", {"main"}}}, 1000, 1, false);
  CHECK(no_fds.code() == "unsupported");
  Reply entry = call(h, "program.lease", {{"program", id}, {"entries", {"nope"}}});
  CHECK(entry.code() == "not_found");
  Reply empty = call(h, "program.lease", {{"program", id}, {"entries", json::array()}});
  CHECK(empty.code() == "invalid_argument");
  Reply other = call(h, "program.lease", {{"program", id}, {"entries", {"main"}}}, 1001);
  CHECK(other.code() == "not_found");
  CHECK(other.fds.empty());
  auto health = h.call("health", json::object());
  CHECK((*health)["inprocess"]["leases"] == 0);
}

TEST_CASE("feedback.submit folds in-process counts into the profile and reports staleness",
          "[service][inprocess]") {
  Harness h; // policy: 2 stages, 100 counts
  Leased l = register_and_lease(h);
  Reply first = call(h, "feedback.submit",
                     {{"lease", l.lease}, {"batches", {batch(10, {{"main", {90, 10}}})}}});
  INFO(first.error.dump());
  REQUIRE(first.error.is_null());
  CHECK(first.result["accepted"] == 1);
  CHECK(first.result["stale"] == false);
  CHECK(first.result["profile_rewritten"].is_null());

  Reply second = call(h, "feedback.submit",
                      {{"lease", l.lease}, {"batches", {batch(10, {{"main", {900, 100}}})}}});
  REQUIRE(second.error.is_null());
  REQUIRE(second.result["profile_rewritten"].is_object());
  CHECK(second.result["stale"] == true);
  CHECK(second.result["profile_version"] == 1);
  auto prof = h.call("profile.get", {{"profile_key", l.pk}});
  REQUIRE(prof);
  CHECK((*prof)["profile"]["functions"]["main"]["counts"] == json{990, 110});

  // The newer output: optimized, under another storage key.
  Reply next =
      call(h, "program.lease",
           {{"program", l.program}, {"entries", {"main"}}, {"unless_storage_key", l.storage_key}});
  REQUIRE(next.error.is_null());
  CHECK(next.result["unchanged"] == false);
  CHECK(next.result["mode"] == "optimized");
  CHECK(next.result["storage_key"] != l.storage_key);
  REQUIRE(next.fds.size() == 1);
  CHECK(read_all(next.fds[0]) == "object:optimized");
  CHECK(next.result["counters_layout"].empty());

  // Released leases are gone; the connection's other lease stays.
  Reply rel = call(h, "program.release", {{"lease", l.lease}});
  CHECK(rel.result["released"] == true);
  CHECK(call(h, "program.release", {{"lease", l.lease}}).code() == "not_found");
  CHECK((*h.call("health", json::object()))["inprocess"]["leases"] == 1);
}

TEST_CASE("feedback.submit folds in-process value profiles as an exec worker's stage",
          "[service][inprocess]") {
  Harness h; // policy: 2 stages, 100 counts
  Leased l = register_and_lease(h);
  // json::array where a list of [text, count] pairs would read as an object.
  const json site =
      json::array({json::array({"00000000000000aa", 80}), json::array({"00000000000000bb", 20})});
  const json values = {{"main",
                        {{"indirect_calls", json::array({site})},
                         {"arg_values", {{{"arg", 0}, {"values", {{4, 95}}}, {"other", 5}}}}}}};
  json b1 = batch(10, {{"main", {90, 10}}});
  b1["values"] = values;
  json b2 = batch(10, {{"main", {900, 100}}});
  b2["values"] = values;
  Reply r = call(h, "feedback.submit", {{"lease", l.lease}, {"batches", {b1, b2}}});
  INFO(r.error.dump());
  REQUIRE(r.error.is_null());
  REQUIRE(r.result["profile_rewritten"].is_object());
  auto prof = h.call("profile.get", {{"profile_key", l.pk}});
  REQUIRE(prof);
  const json& main = (*prof)["profile"]["functions"]["main"];
  INFO(main.dump());
  // Summed over the two batches, as two stages' would be.
  CHECK(main["indirect_calls"] ==
        json::array({json::array(
            {json::array({"00000000000000aa", 160}), json::array({"00000000000000bb", 40})})}));
  CHECK(main["arg_values"] == json{{{"arg", 0}, {"values", {{4, 190}}}, {"other", 10}}});
}

TEST_CASE("feedback.submit refuses what does not fit the caller's own lease, changing nothing",
          "[service][inprocess]") {
  Harness h;
  Leased l = register_and_lease(h, 7);
  const std::int64_t before = profile_version(h, l.pk);
  auto refused = [&](const json& params, uid_t uid, std::uint64_t conn) {
    Reply r = call(h, "feedback.submit", params, uid, conn);
    INFO(params.dump() << " -> " << r.error.dump());
    CHECK(r.result.is_null());
    return r.code();
  };
  const json good = batch(10, {{"main", {900, 100}}});
  SECTION("another tenant, another connection, no such lease: all not_found") {
    CHECK(refused({{"lease", l.lease}, {"batches", {good}}}, 1001, 7) == "not_found");
    CHECK(refused({{"lease", l.lease}, {"batches", {good}}}, 1000, 8) == "not_found");
    CHECK(refused({{"lease", l.lease + 100}, {"batches", {good}}}, 1000, 7) == "not_found");
  }
  SECTION("counts that do not match the layout") {
    CHECK(refused({{"lease", l.lease}, {"batches", {batch(1, {{"main", {1, 2, 3}}})}}}, 1000, 7) ==
          "invalid_argument");
    CHECK(refused({{"lease", l.lease}, {"batches", {batch(1, {{"other", {1, 2}}})}}}, 1000, 7) ==
          "invalid_argument");
    CHECK(refused({{"lease", l.lease}, {"batches", {batch(1, {{"main", {-1, 2}}})}}}, 1000, 7) ==
          "invalid_argument");
    CHECK(refused({{"lease", l.lease}, {"batches", {batch(1, {{"main", {1.5, 2}}})}}}, 1000, 7) ==
          "invalid_argument");
    CHECK(refused({{"lease", l.lease}, {"batches", {batch(1, {{"main", "12"}})}}}, 1000, 7) ==
          "invalid_argument");
  }
  SECTION("sizes and values past the caps") {
    json many = json::array();
    for (int i = 0; i < 65; ++i)
      many.push_back(good);
    CHECK(refused({{"lease", l.lease}, {"batches", many}}, 1000, 7) == "invalid_argument");
    CHECK(refused({{"lease", l.lease}, {"batches", json::array()}}, 1000, 7) == "invalid_argument");
    CHECK(refused({{"lease", l.lease}, {"batches", {batch(0, json::object())}}}, 1000, 7) ==
          "invalid_argument");
    const std::uint64_t huge = std::uint64_t{1} << 60;
    CHECK(refused({{"lease", l.lease}, {"batches", {batch(1, {{"main", {huge, 1}}})}}}, 1000, 7) ==
          "invalid_argument");
    CHECK(refused({{"lease", l.lease}, {"batches", {{{"calls", 1}, {"exec_ns", huge}}}}}, 1000,
                  7) == "invalid_argument");
    CHECK(refused({{"lease", l.lease}, {"batches", {{{"calls", 1}, {"exec_ns", 1}, {"x", 1}}}}},
                  1000, 7) == "invalid_argument");
  }
  SECTION("value profiles that do not match the layout") {
    auto with_values = [&](json v) {
      json b = good;
      b["values"] = std::move(v);
      return json{{"lease", l.lease}, {"batches", {b}}};
    };
    const json site = json::array({json::array({"00000000000000aa", 1})});
    CHECK(refused(with_values({{"other", {{"indirect_calls", site}}}}), 1000, 7) ==
          "invalid_argument"); // not an instrumented function
    CHECK(refused(with_values({{"main", {{"indirect_calls", json::array({site[0], site[0]})}}}}),
                  1000, 7) == "invalid_argument"); // two sites, the layout has one
    CHECK(refused(with_values({{"main", {{"memop_sizes", {{{8, 1}}}}}}}), 1000, 7) ==
          "invalid_argument"); // no memop site
    CHECK(refused(with_values({{"main", {{"arg_values", {{{"arg", 1}, {"values", {{1, 1}}}}}}}}}),
                  1000, 7) == "invalid_argument"); // argument 1 is not profiled
    CHECK(refused(with_values({{"main",
                                {{"indirect_calls",
                                  json::array({json::array({json::array({"zz", 1})})})}}}}),
                  1000, 7) == "invalid_argument"); // not hex
    CHECK(refused(with_values({{"main",
                                {{"indirect_calls",
                                  json::array({json::array({json::array({"00aa", -1})})})}}}}),
                  1000, 7) == "invalid_argument");
    const std::uint64_t huge = std::uint64_t{1} << 60;
    CHECK(refused(with_values({{"main",
                                {{"indirect_calls",
                                  json::array({json::array({json::array({"00aa", huge})})})}}}}),
                  1000, 7) == "invalid_argument");
    json wide = json::array();
    for (int i = 0; i < 256; ++i)
      wide.push_back(json::array({std::to_string(i + 1), 1}));
    CHECK(refused(with_values({{"main", {{"indirect_calls", json::array({wide})}}}}), 1000, 7) ==
          "invalid_argument"); // more values than a table holds
    CHECK(refused(with_values({{"main", {{"counts", {1}}}}}), 1000, 7) == "invalid_argument");
    CHECK(refused(with_values({{"main", 3}}), 1000, 7) == "invalid_argument");
    CHECK(refused(with_values(json::array()), 1000, 7) == "invalid_argument");
  }
  SECTION("one bad batch refuses the whole submit") {
    CHECK(refused({{"lease", l.lease}, {"batches", {good, good, batch(1, {{"main", {1}}})}}}, 1000,
                  7) == "invalid_argument");
  }
  // Nothing was folded: the profile is where it was, and good feedback still works.
  CHECK(profile_version(h, l.pk) == before);
  CHECK((*h.call("health", json::object()))["inprocess"]["batches"] == 0);
  Reply ok = call(h, "feedback.submit", {{"lease", l.lease}, {"batches", {good, good}}}, 1000, 7);
  INFO(ok.error.dump());
  CHECK(ok.result["accepted"] == 2);
  CHECK(ok.result["profile_rewritten"].is_object());
}

TEST_CASE("a closed connection's leases end with it", "[service][inprocess]") {
  Harness h;
  Leased a = register_and_lease(h, 21);
  Leased b = register_and_lease(h, 21);
  Leased c = register_and_lease(h, 22);
  CHECK((*h.call("health", json::object()))["inprocess"]["leases"] == 3);
  h.dispatcher.disconnected(21);
  CHECK((*h.call("health", json::object()))["inprocess"]["leases"] == 1);
  CHECK(call(h, "feedback.submit", {{"lease", a.lease}, {"batches", {batch(1, json::object())}}},
             1000, 21)
            .code() == "not_found");
  Reply still = call(h, "feedback.submit",
                     {{"lease", c.lease}, {"batches", {batch(1, json::object())}}}, 1000, 22);
  CHECK(still.error.is_null());
  h.dispatcher.disconnected(22);
  CHECK((*h.call("health", json::object()))["inprocess"]["leases"] == 0);
  (void)b;
}

TEST_CASE("lease table: ids are per connection and capped", "[service][inprocess]") {
  LeaseTable t;
  LeaseLimits limits{2};
  ProgramLease l;
  l.uid = 5;
  l.connection = 1;
  auto a = t.add(l, limits);
  auto b = t.add(l, limits);
  REQUIRE(a);
  REQUIRE(b);
  CHECK((*a)->id != (*b)->id);
  auto c = t.add(l, limits);
  REQUIRE_FALSE(c);
  CHECK(c.error().code() == Errc::resource_exhausted);
  CHECK(t.count_for(5) == 2);
  REQUIRE(t.release((*a)->id, 5, 1));
  CHECK(t.add(l, limits));
  CHECK_FALSE(t.find((*b)->id, 6, 1));
  CHECK_FALSE(t.find((*b)->id, 5, 2));
  CHECK(t.release_connection(1) == 2);
  CHECK(t.size() == 0);
  CHECK(t.granted() == 3);
}
