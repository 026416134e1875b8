// hello: the protocol handshake a client library sends first
// (docs/fdod-protocol.md, "Handshake"). It checks that both ends speak the
// same major protocol version and tells the client what this daemon offers.
// It reads no state, so it is a control method.
#include "fdo/jit/compiler.h"
#include "fdo/util/protocol.h"
#include "methods.h"

namespace fdo::daemon::methods {

namespace {

// What this daemon offers beyond the methods every protocol 1 daemon has;
// clients test for a name before relying on the feature.
const std::vector<std::string>& capability_names() {
  static const std::vector<std::string> names = {
      "execute",         // execution in the daemon's sandboxed exec workers
      "buffers.base64",  // execute buffers as {"base64": ...} both ways
      "profile.history", // a profile's retained versions
      "execute.compact", // execute replies without per-event reasons unless "verbose": true
      "inprocess",       // program.lease (object memfd over SCM_RIGHTS), feedback.submit
      "program.source",  // a program's registered IR, to its owner
      "buffers.memfd",   // execute buffers as sealed memfds sent with the request
  };
  return names;
}

Expected<int> version_part(const json& protocol, const char* part) {
  auto it = protocol.find(part);
  if (it == protocol.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0 ||
      it->get<std::int64_t>() > 1'000'000)
    return make_error(Errc::invalid_argument,
                      std::string("hello: protocol.") + part + " must be a non-negative integer");
  return static_cast<int>(it->get<std::int64_t>());
}

Expected<json> hello(ServiceState&, const json& params, const CallContext&) {
  if (!params.is_object() || !params.contains("client") || !params["client"].is_string())
    return make_error(Errc::invalid_argument,
                      "hello: \"client\" (a string naming the client and its version) is required");
  if (!params.contains("protocol") || !params["protocol"].is_object())
    return make_error(Errc::invalid_argument,
                      "hello: \"protocol\": {\"major\": N, \"minor\": M} is required");
  const json& protocol = params["protocol"];
  FDO_TRY(int major, version_part(protocol, "major"));
  FDO_TRY(int minor, version_part(protocol, "minor"));
  std::string ours = std::to_string(kProtocolMajor) + "." + std::to_string(kProtocolMinor);
  if (major != kProtocolMajor)
    return make_error(Errc::unsupported,
                      "protocol version mismatch: client '" + params["client"].get<std::string>() +
                          "' speaks fdo protocol " + std::to_string(major) + "." +
                          std::to_string(minor) + ", this fdod " + std::string(jit::kFdoVersion) +
                          " speaks protocol " + ours + "; use a client library of major version " +
                          std::to_string(kProtocolMajor));
  return json{{"server_version", std::string(jit::kFdoVersion)},
              {"protocol", {{"major", kProtocolMajor}, {"minor", kProtocolMinor}}},
              {"capabilities", capability_names()}};
}

} // namespace

void add_handshake_methods(Dispatcher& d, ServiceState& s) {
  bind(d, "hello", s, hello, MethodClass::immediate);
}

} // namespace fdo::daemon::methods
