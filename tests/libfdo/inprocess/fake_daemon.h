// A fake fdod for the in-process engine's tests: program.lease hands out
// objects compiled in the test (a memfd, as fdod does), feedback.submit
// records what the engine reports and says when the test has "rewritten the
// profile".
#pragma once

#include "engine.h"
#include "fdo/jit/compiler.h"

#include <catch2/catch.hpp>
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
      if (params.value("unless_storage_key", "") == current.storage_key)
        return LinkReply{{{"unchanged", true}, {"lease", nullptr}}, {}};
      Fd fd(::memfd_create("fake-lease", MFD_CLOEXEC));
      FDO_TRY_STATUS(write_all(fd.get(), current.object));
      LinkReply r{{{"lease", next_lease},
                   {"unchanged", false},
                   {"storage_key", current.storage_key},
                   {"profile_version", current.version},
                   {"object_size", current.object.size()},
                   {"mode", current.metadata.value("mode", "")},
                   {"sampling", {{"available", sampling}, {"reason", "fake sampling"}}},
                   {"metadata", current.metadata}},
                  {}};
      if (!withhold_fd) r.fds.push_back(std::move(fd));
      leases[next_lease] = current.version;
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
      return LinkReply{{{"profile_version", current.version},
                        {"stale", current.version != leases[lease]},
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

  std::mutex mu;
  Output current;
  bool withhold_fd = false;
  bool sampling = false;     // leases say fdod samples them
  std::vector<json> samples; // program.sample params, in order
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
