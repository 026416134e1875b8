// A blocking JSON-RPC 2.0 client for fdod's Unix socket (one JSON object per
// line, docs/fdod-protocol.md): the transport under fdoctl and libfdo.
//
// One request at a time per connection; RpcClient is not synchronised (the C
// API serialises calls on a shared connection with its own mutex). Replies may
// carry file descriptors (SCM_RIGHTS, e.g. a compiled object as a memfd): they
// are read with recvmsg and handed to the caller with the reply they came with.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::client {

// The socket used when none is given: $FDO_SOCKET, else the path
// fdod.socket binds under systemd.
inline constexpr std::string_view kSystemSocketPath = "/run/fdod/fdod.sock";
std::string default_socket_path();

// fdo::to_string(Errc) inverted, for error.data.code in daemon replies.
std::optional<Errc> errc_from_name(std::string_view name);

struct ClientOptions {
  // Longest wait for one reply. Compiles and executions happen inside a
  // request, so this is generous.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Longest reply line accepted (a return_buffers reply can be large).
  std::size_t max_reply_bytes = std::size_t(1) << 30;
  // Named in messages about a daemon that does not know a method
  // ("is it older than <client_name>?").
  std::string client_name = "libfdo";
  // Advice added to a failed connect's message (after "is fdod running? try
  // `systemctl status fdod`") and to a timeout's: a command line names its
  // flags, a library the calls that change the setting.
  std::string connect_hint = "pass the socket path or set FDO_SOCKET";
  std::string timeout_hint = "raise the connection's timeout for long compiles or executions";
};

// A daemon's JSON-RPC error exactly as it came: error.code, error.message and
// error.data (null when absent). The same answer is also an fdo::Error whose
// Errc is data.code's (or the closest to the JSON-RPC code) for callers that
// only care about the class of failure.
struct RpcFailure {
  std::int64_t code = 0;
  std::string message;
  nlohmann::json data;
};

// What the daemon answered to one request: its result, or its error as an
// fdo::Error (answer) plus the raw JSON-RPC error (failure, set exactly when
// answer holds an error). fds: descriptors that arrived with the reply's bytes,
// in arrival order; they are the caller's.
struct Reply {
  Expected<nlohmann::json> answer;
  std::optional<RpcFailure> failure;
  std::vector<Fd> fds;
};

struct ReplyWithFds {
  nlohmann::json result;
  std::vector<Fd> fds;
};

class RpcClient {
public:
  // Connects to the daemon. Errors: unavailable (no socket, refused, denied;
  // the message says what to try), invalid_argument (empty or too long path).
  static Expected<RpcClient> connect(const std::string& socket_path, ClientOptions options = {});

  RpcClient(RpcClient&&) noexcept = default;
  RpcClient& operator=(RpcClient&&) noexcept = default;

  // Sends one request and waits for its reply. A daemon error comes back as
  // an Error whose code is the daemon's (error.data.code) and whose message is
  // the daemon's message. Transport failures (connection closed, malformed or
  // mismatched reply, timeout) are io/corrupt/timeout errors naming the
  // method; after one the connection is closed and later calls fail fast.
  // Descriptors that came with the reply are closed.
  Expected<nlohmann::json> call(std::string_view method,
                                const nlohmann::json& params = nlohmann::json::object());

  // call(), keeping the descriptors that came with the reply.
  Expected<ReplyWithFds> call_with_fds(std::string_view method,
                                       const nlohmann::json& params = nlohmann::json::object());

  // The whole answer: the outer error is a transport or protocol failure
  // (the connection is then closed); a daemon error is a Reply whose answer
  // holds the error and whose failure holds the JSON-RPC code, message and data.
  // request_fds go with the request's first byte (SCM_RIGHTS; execute's
  // memfd buffers, docs/fdod-protocol.md); the caller keeps its copies.
  Expected<Reply> exchange(std::string_view method,
                           const nlohmann::json& params = nlohmann::json::object(),
                           std::span<const int> request_fds = {});

  const std::string& socket_path() const { return path_; }
  bool connected() const { return fd_.valid(); }
  // The longest wait for each later reply.
  void set_timeout(std::chrono::milliseconds timeout) { options_.timeout = timeout; }

  // Wraps a connected stream socket (e.g. one end of a socketpair in tests).
  static RpcClient adopt(Fd fd, std::string name, ClientOptions options = {}) {
    return RpcClient(std::move(fd), std::move(name), std::move(options));
  }

private:
  RpcClient(Fd fd, std::string path, ClientOptions options)
      : fd_(std::move(fd)), path_(std::move(path)), options_(std::move(options)) {}

  struct Line {
    std::string text;
    std::vector<Fd> fds;
  };
  // Descriptors received with the byte at offset `at` of pending_.
  struct Arrived {
    std::size_t at;
    std::vector<Fd> fds;
  };
  Expected<Line> read_line(std::string_view method, std::chrono::steady_clock::time_point deadline);
  Status send_request(std::string_view method, const std::string& line,
                      std::span<const int> request_fds);
  Expected<std::size_t> receive(std::string_view method);

  Fd fd_;
  std::string path_;
  ClientOptions options_;
  std::string pending_; // bytes read past the last reply line
  std::vector<Arrived> pending_fds_;
  std::int64_t next_id_ = 1;
};

// One reply line checked against the JSON-RPC rules and the request id. The
// outer error is a protocol violation (Errc::corrupt: not JSON, wrong id, ...).
// Split out of RpcClient so the protocol rules are tested without a socket.
// client_name is named when the daemon does not know the method.
Expected<Reply> decode_reply(std::string_view line, std::int64_t expected_id,
                             std::string_view method, std::string_view client_name = "libfdo");

} // namespace fdo::client
