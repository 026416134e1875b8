// One JSON-RPC request through a Harness's dispatcher with a full call
// context (peer uid and pid, connection, fd transport), keeping the
// descriptors the reply carries: the in-process tests' view of a client.
#pragma once

#include "service_harness.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace fdo::daemon::testing {

struct RpcReply {
  nlohmann::json result; // null on error
  nlohmann::json error;  // null on success
  std::vector<Fd> fds;
  std::string code() const { return error.is_null() ? "" : error["data"].value("code", ""); }
};

enum class FdTransport { on, off };

// `ctx` gives uid, pid and connection; reply_fds is set from `transport`.
inline RpcReply call_with(Harness& h, const std::string& method, const nlohmann::json& params,
                          CallContext ctx, FdTransport transport = FdTransport::on) {
  RpcReply r;
  ctx.reply_fds = transport == FdTransport::on ? &r.fds : nullptr;
  nlohmann::json req = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", method}, {"params", params}};
  auto line = h.dispatcher.handle_line(req.dump(), ctx);
  REQUIRE(line);
  nlohmann::json resp = nlohmann::json::parse(*line);
  if (resp.contains("error"))
    r.error = resp["error"];
  else
    r.result = resp["result"];
  return r;
}

} // namespace fdo::daemon::testing
