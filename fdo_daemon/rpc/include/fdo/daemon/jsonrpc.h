// JSON-RPC 2.0 over NDJSON: request validation, method dispatch and response
// encoding. Does no I/O; the server feeds it lines and writes back what it
// returns. The error-code table is documented in docs/fdod-protocol.md.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/fd.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <unordered_map>
#include <vector>

namespace fdo::daemon {

// Who is calling and until when. uid is the tenant (from SO_PEERCRED).
struct CallContext {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  // Past this point the client has already been sent a timeout error; a
  // handler that can stop early (e.g. before starting a compile) should.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // The server's id of the connection the request came on (0 outside a
  // server): state a handler ties to a connection (in-process leases) is
  // dropped by the Dispatcher's disconnect hooks when it closes.
  std::uint64_t connection = 0;
  // Where a handler puts file descriptors to send with its reply (SCM_RIGHTS
  // on the reply's first byte, docs/fdod-protocol.md). Null when the
  // transport cannot pass fds; a handler that needs to send one must then
  // fail. Dropped (closed) when the handler fails.
  std::vector<Fd>* reply_fds = nullptr;
  // Descriptors that came with the request (SCM_RIGHTS on its line, in
  // arrival order; docs/fdod-protocol.md), owned by the transport, which
  // closes them after the call. Null or empty when none came. Only methods
  // added with RequestFds::accepted ever see any.
  const std::vector<Fd>* request_fds = nullptr;
};

using Handler =
    std::function<Expected<nlohmann::json>(const nlohmann::json& params, const CallContext&)>;

// A result already written as compact JSON text (fdo/util/json_text.h), put
// into the response as it is: methods on the hot path (execute,
// feedback.submit) write their replies without building a tree.
struct ResultText {
  std::string json;
};
using TextHandler =
    std::function<Expected<ResultText>(const nlohmann::json& params, const CallContext&)>;

// Which of the server's thread pools runs a method. Work methods may block for
// seconds (compiles, executions, the store); control methods answer from
// counters and configuration without waiting on anything work holds, so the
// server gives them their own small pool and never counts them against a
// tenant's in-flight limit: health stays answerable while every work thread is
// blocked and a tenant at its limit can still ask how the daemon is.
// Immediate methods are control methods cheap enough to answer on the
// server's I/O thread as soon as their line is parsed, with no hand-off to a
// pool: they must return in microseconds, take no lock that anything holds
// across I/O or a compile, and never wait (health, capabilities).
enum class MethodClass { work, control, immediate };

// Whether a method takes file descriptors with its request (execute's memfd
// buffers). A request carrying descriptors to any other method is refused
// before its handler runs, so no handler holds descriptors it ignores.
enum class RequestFds { refused, accepted };
std::string_view to_string(MethodClass c); // "work", "control", "immediate"

namespace rpc {

// Standard JSON-RPC 2.0 codes.
inline constexpr int parse_error = -32700;
inline constexpr int invalid_request = -32600;
inline constexpr int method_not_found = -32601;
inline constexpr int invalid_params = -32602;
inline constexpr int internal_error = -32603;

// Requests nested deeper than this are rejected before any handler sees them
// (deep documents make recursive JSON code overflow the stack).
inline constexpr std::size_t max_nesting_depth = 128;

// Error replies are bounded whatever the client sent: a piece of the request
// quoted back (a method name) is cut to echo_max_bytes, a whole error message
// to error_message_max_bytes, each on a UTF-8 boundary and marked with how many
// bytes were left out (docs/fdod-protocol.md).
inline constexpr std::size_t echo_max_bytes = 256;
inline constexpr std::size_t error_message_max_bytes = 16384;
// `text` cut to `max_bytes`: "<head>... (N more bytes)".
std::string cut(std::string_view text, std::size_t max_bytes = echo_max_bytes);

// The JSON-RPC error code for an fdo error code: invalid_argument -> -32602,
// internal -> -32603, everything else a fixed code in -32001..-32016.
int error_code(Errc code);
// Inverse of error_code for the application range (and -32602/-32603); used by
// clients. nullopt for codes that are not an Errc mapping.
std::optional<Errc> errc_from_code(int code);
// Inverse of fdo::to_string(Errc), for error.data.code on the client side.
std::optional<Errc> parse_errc(std::string_view name);

// Response lines, without the trailing newline. `id` is echoed verbatim
// (string, number or null; parse() refuses numbers it could not echo as the
// same number). The error message is cut to error_message_max_bytes.
std::string result_response(const nlohmann::json& id, const nlohmann::json& result);
// The same with the result's text as a ResultText holds it (not checked).
std::string result_response_text(const nlohmann::json& id, std::string_view result_text);
// error.data is {"code": <data_code>} merged with `extra` (an object or null).
std::string error_response(const nlohmann::json& id, int code, std::string_view message,
                           std::string_view data_code, const nlohmann::json& extra = nullptr);
// Maps err.code() through error_code(); message is err.message().
std::string error_response(const nlohmann::json& id, const Error& err,
                           const nlohmann::json& extra = nullptr);
// A line over the size limit: its id is unknown, so id is null.
std::string oversized_response(std::size_t limit_bytes, std::size_t seen_bytes);
// The handler did not finish before the request deadline.
std::string deadline_response(const nlohmann::json& id, std::string_view method,
                              std::chrono::milliseconds timeout);
// The daemon is shutting down and will not start this request.
std::string stopping_response(const nlohmann::json& id);

} // namespace rpc

// One validated request, ready to dispatch.
struct Request {
  // nullopt: a notification (no "id" member), which gets no response at all.
  // A present id is a string, a number or null.
  std::optional<nlohmann::json> id;
  std::string method;
  // The "params" member; an empty object when the request had none.
  nlohmann::json params = nlohmann::json::object();

  bool is_notification() const { return !id.has_value(); }
  // The id to put in a response (null for notifications).
  const nlohmann::json& response_id() const;
};

// Either a request to run, or a response line to send without running
// anything (an error). Both empty only for an invalid notification, which
// JSON-RPC says must not be answered.
struct ParsedLine {
  std::optional<Request> request;
  std::string response; // an error response when request is empty
};

// Method table plus the JSON-RPC rules. Methods may be added at any time
// (add() takes a writer lock); dispatch is safe from many threads at once.
class Dispatcher {
public:
  // Registers or replaces `method` (a replacement takes the new class too).
  void add(std::string method, Handler handler, MethodClass method_class = MethodClass::work,
           RequestFds request_fds = RequestFds::refused);
  // The same for a method that writes its result as text.
  void add_text(std::string method, TextHandler handler,
                MethodClass method_class = MethodClass::work,
                RequestFds request_fds = RequestFds::refused);
  bool has(std::string_view method) const;
  // The class `method` was added with; nullopt when there is no such method.
  std::optional<MethodClass> method_class(std::string_view method) const;
  std::vector<std::string> methods() const; // sorted

  // Step 1: validate one line as a JSON-RPC 2.0 request (-32700, -32600,
  // -32602 for params that are not an object/array). Batches (arrays) are
  // rejected with -32600.
  ParsedLine parse(std::string_view line) const;
  // Step 2: run the handler. Returns the response line, or nullopt for a
  // notification. Unknown methods give -32601; handler errors map through
  // rpc::error_code; a handler exception becomes -32603 with its message.
  // Descriptors sent to a method that refuses them (ctx.request_fds) give
  // -32602 without running the handler.
  std::optional<std::string> invoke(const Request& request, const CallContext& ctx) const;
  // parse() then invoke(): the whole request-to-response path, for tests
  // and for callers without deadlines.
  std::optional<std::string> handle_line(std::string_view line, const CallContext& ctx) const;

  // Called with CallContext::connection once a connection has closed and no
  // handler of its is running any more (the server calls disconnected()).
  // Hooks must be cheap and must not throw; they may run on any thread.
  void on_disconnect(std::function<void(std::uint64_t connection)> hook);
  void disconnected(std::uint64_t connection) const;

private:
  struct Entry {
    // One of the two.
    std::shared_ptr<const Handler> handler;
    std::shared_ptr<const TextHandler> text_handler;
    MethodClass method_class = MethodClass::work;
    RequestFds request_fds = RequestFds::refused;
  };
  std::optional<Entry> find(std::string_view method) const;

  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, Entry> handlers_;
  std::vector<std::shared_ptr<const std::function<void(std::uint64_t)>>> disconnect_hooks_;
};

// Typed access to named params for handlers. Errors are Errc::invalid_argument
// (-> -32602) naming the param and the expected and actual JSON types.
// T is one of: std::string, bool, std::int64_t, std::uint64_t, double,
// nlohmann::json (any value).
template <class T> Expected<T> require_param(const nlohmann::json& params, std::string_view key);
// As require_param, but `fallback` when the key is absent (a present null is
// a type error unless T is nlohmann::json).
template <class T>
Expected<T> optional_param(const nlohmann::json& params, std::string_view key, T fallback);

} // namespace fdo::daemon
