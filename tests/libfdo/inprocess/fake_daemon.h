// A fake fdod for the in-process engine's tests: program.lease hands out
// objects compiled in the test (a memfd, as fdod does), feedback.submit
// records what the engine reports and says when the test has "rewritten the
// profile".
#pragma once

#include "engine.h"
#include "fdo/jit/compiler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <deque>
#include <map>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>

namespace fdo::inprocess::testing {

using nlohmann::json;

// Returns x + 1 down either branch, so every generation answers the same.
constexpr const char* kIr = R"(
define i64 @inc(i64 %x) {
entry:
  %c = icmp sgt i64 %x, 10
  br i1 %c, label %big, label %small
big:
  %a = add i64 %x, 1
  ret i64 %a
small:
  %b = add i64 1, %x
  ret i64 %b
}
)";

struct Output {
  std::string storage_key;
  std::string object;
  json metadata;
  std::int64_t version = 0;
};

inline Output compiled_ir(const char* ir, CompileMode mode, std::string key, std::int64_t version) {
  jit::CompileRequest req;
  req.mode = mode;
  auto r = jit::compile(ir, req);
  REQUIRE(r);
  return {std::move(key), r->object, jit::metadata_to_json(*r), version};
}

inline Output compiled(CompileMode mode, std::string key, std::int64_t version) {
  return compiled_ir(kIr, mode, std::move(key), version);
}

class FakeDaemon : public DaemonLink {
public:
  Expected<LinkReply> call(std::string_view method, const json& params) override {
    std::lock_guard lk(mu);
    if (method == "program.lease") {
      lease_params.push_back(params);
      const bool guarded = params.value("guard", false);
      // A guarded lease serves the next scripted plan's output, if any.
      const Output* serve = &current;
      json variant = nullptr;
      bool renew = false;
      if (guarded && !plans.empty()) {
        const Plan& p = plans.front();
        serve = &p.output;
        variant = p.variant;
        renew = p.renew;
      }
      std::vector<std::string> have;
      if (params.contains("unless_storage_key")) have.push_back(params["unless_storage_key"]);
      for (const json& k : params.value("loaded", json::array()))
        have.push_back(k);
      const bool unchanged =
          claim_unchanged || std::find(have.begin(), have.end(), serve->storage_key) != have.end();
      if (unchanged && !guarded) return LinkReply{{{"unchanged", true}, {"lease", nullptr}}, {}};
      LinkReply r{{{"lease", next_lease},
                   {"unchanged", unchanged},
                   {"storage_key", serve->storage_key},
                   {"profile_version", serve->version},
                   {"object_size", serve->object.size()},
                   {"mode", serve->metadata.value("mode", "")},
                   {"sampling", {{"available", sampling}, {"reason", "fake sampling"}}},
                   {"metadata", serve->metadata}},
                  {}};
      if (guarded) {
        r.result["variant"] = variant;
        r.result["renew"] = renew;
      }
      if (!unchanged && !withhold_fd) {
        Fd fd(::memfd_create("fake-lease", MFD_CLOEXEC));
        FDO_TRY_STATUS(write_all(fd.get(), serve->object));
        r.fds.push_back(std::move(fd));
      }
      leases[next_lease] = serve->version;
      if (guarded && !plans.empty()) plans.pop_front(); // `serve` pointed into it
      lease_renews[next_lease] = renew;
      ++next_lease;
      return r;
    }
    if (method == "feedback.submit") {
      const std::uint64_t lease = params["lease"];
      if (!leases.contains(lease)) return make_error(Errc::not_found, "no lease");
      for (const json& b : params["batches"]) {
        calls += b["calls"].get<std::uint64_t>();
        batches.push_back(b);
        for (auto& [fn, counts] : b["counts"].items())
          for (const json& c : counts)
            counted += c.get<std::uint64_t>();
      }
      ++submits;
      submitted_leases.push_back(lease);
      return LinkReply{{{"profile_version", current.version},
                        {"stale", current.version != leases[lease]},
                        {"renew", lease_renews[lease]},
                        {"samples", {{"attributed", submits}}}},
                       {}};
    }
    if (method == "program.sample") {
      if (!leases.contains(params["lease"].get<std::uint64_t>()))
        return make_error(Errc::not_found, "no lease");
      samples.push_back(params);
      return LinkReply{{{"lease", params["lease"]},
                        {"sampling",
                         {{"available", true},
                          {"reason", "sampling"},
                          {"threads", params.value("threads", json::array()).size()}}}},
                       {}};
    }
    if (method == "program.release") {
      const std::uint64_t lease = params["lease"];
      if (leases.erase(lease) == 0) return make_error(Errc::not_found, "no lease");
      released.push_back(lease);
      return LinkReply{{{"released", true}}, {}};
    }
    return make_error(Errc::not_found, "method not found");
  }

  // What a guarded lease serves, in order (then `current`, unguarded-style):
  // the output, the variant fdod would name and whether it asks to renew.
  struct Plan {
    Output output;
    json variant;
    bool renew = true;
  };

  std::mutex mu;
  Output current;
  std::deque<Plan> plans;
  std::vector<json> lease_params;              // every program.lease's params, in order
  std::map<std::uint64_t, bool> lease_renews;  // lease -> renew
  std::vector<std::uint64_t> submitted_leases; // the lease of each submit, in order
  bool withhold_fd = false;
  bool claim_unchanged = false; // guarded leases: say the runtime has the object, send none
  bool sampling = false;        // leases say fdod samples them
  std::vector<json> samples;    // program.sample params, in order
  std::uint64_t next_lease = 1;
  std::map<std::uint64_t, std::int64_t> leases; // lease -> version leased
  std::vector<std::uint64_t> released;
  std::uint64_t calls = 0, counted = 0, submits = 0;
  std::vector<json> batches; // every batch submitted, in order
};

inline EngineOptions options(Flushing flushing) {
  return EngineOptions{"program-id", {"inc"}, flushing, std::chrono::milliseconds(5), 4};
}

inline std::uint64_t inc(const Engine& e, std::uint64_t x) {
  std::uint64_t ret = 0;
  e.call(0, &x, &ret);
  return ret;
}

} // namespace fdo::inprocess::testing
