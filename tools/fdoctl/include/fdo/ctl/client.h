// A blocking JSON-RPC 2.0 client for fdod's Unix socket (one JSON object per
// line, docs/fdod-protocol.md). One request at a time per connection: fdoctl
// is a command line, not a runtime, so there is nothing to pipeline.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace fdo::ctl {

// The socket used when --socket is not given: $FDO_SOCKET, else the path
// fdod.socket binds under systemd.
inline constexpr std::string_view kSystemSocketPath = "/run/fdod/fdod.sock";
std::string default_socket_path();

// fdo::to_string(Errc) inverted, for error.data.code in daemon replies.
std::optional<Errc> errc_from_name(std::string_view name);

struct ClientOptions {
  // Longest wait for one reply. Compiles and executions happen inside a
  // request, so this is generous; --timeout overrides it.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Longest reply line accepted (a return_buffers reply can be large).
  std::size_t max_reply_bytes = std::size_t(1) << 30;
};

class RpcClient {
public:
  // Connects to the daemon. Errors: unavailable (no socket, refused, denied;
  // the message says what to try), invalid_argument (path too long).
  static Expected<RpcClient> connect(const std::string& socket_path, ClientOptions options = {});

  RpcClient(RpcClient&&) noexcept = default;
  RpcClient& operator=(RpcClient&&) noexcept = default;

  // Sends one request and waits for its reply. A daemon error comes back as
  // an Error whose code is the daemon's (error.data.code) and whose message is
  // the daemon's message. Transport failures (connection closed, malformed or
  // mismatched reply, timeout) are io/corrupt/timeout errors naming the
  // method; after one the connection is closed and later calls fail fast.
  Expected<nlohmann::json> call(std::string_view method,
                                const nlohmann::json& params = nlohmann::json::object());

  const std::string& socket_path() const { return path_; }

private:
  RpcClient(Fd fd, std::string path, ClientOptions options)
      : fd_(std::move(fd)), path_(std::move(path)), options_(options) {}

  Expected<std::string> read_line(std::string_view method,
                                  std::chrono::steady_clock::time_point deadline);

  Fd fd_;
  std::string path_;
  ClientOptions options_;
  std::string pending_; // bytes read past the last reply line
  std::int64_t next_id_ = 1;
};

// What the daemon answered: its result, or its error (code from
// error.data.code, message from error.message).
struct Reply {
  Expected<nlohmann::json> answer;
};
// One reply line checked against the JSON-RPC rules and the request id. The
// outer error is a protocol violation (Errc::corrupt: not JSON, wrong id, ...).
// Split out of RpcClient so the protocol rules are tested without a socket.
Expected<Reply> decode_reply(std::string_view line, std::int64_t expected_id,
                             std::string_view method);

} // namespace fdo::ctl
