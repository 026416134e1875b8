#include "fdo/client/rpc_client.h"

#include "fdo/util/scm_rights.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace fdo::client {

using nlohmann::json;

std::string default_socket_path() {
  if (const char* env = std::getenv("FDO_SOCKET"); env != nullptr && *env != '\0') return env;
  return std::string(kSystemSocketPath);
}

std::optional<Errc> errc_from_name(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(Errc::internal); ++i) {
    auto code = static_cast<Errc>(i);
    if (to_string(code) == name) return code;
  }
  return std::nullopt;
}

namespace {

// What to try, by the reason connect(2) failed.
std::string connect_advice(const std::string& path, int err, const std::string& hint) {
  std::string why;
  switch (err) {
  case ENOENT:
    why = "no such socket";
    break;
  case ECONNREFUSED:
    why = "connection refused (a socket file is there but nothing listens on it)";
    break;
  case EACCES:
  case EPERM:
    why = "permission denied (the socket is mode 0660: run as fdod's user or a member of its "
          "group)";
    break;
  default:
    why = std::strerror(err);
  }
  return "cannot connect to " + path + ": " + why +
         "; is fdod running? try `systemctl status fdod` (or start one with `fdod --socket " +
         path + " --state-dir DIR`)" + (hint.empty() ? std::string() : "; " + hint);
}

// The JSON-RPC code of a standard error -> the closest Errc (for replies
// without error.data.code, e.g. from a foreign server).
Errc errc_from_rpc_code(std::int64_t code) {
  switch (code) {
  case -32602:
    return Errc::invalid_argument;
  case -32601:
    return Errc::unsupported;
  case -32700:
  case -32600:
    return Errc::parse;
  default:
    return Errc::internal;
  }
}

} // namespace

Expected<Reply> decode_reply(std::string_view line, std::int64_t expected_id,
                             std::string_view method, std::string_view client_name) {
  std::string what = "reply to " + std::string(method);
  json reply = json::parse(line, nullptr, false);
  if (reply.is_discarded() || !reply.is_object())
    return make_error(Errc::corrupt, what + " is not a JSON object");
  if (reply.value("jsonrpc", "") != "2.0")
    return make_error(Errc::corrupt, what + " lacks \"jsonrpc\": \"2.0\"");
  bool has_result = reply.contains("result");
  bool has_error = reply.contains("error");
  if (has_result == has_error)
    return make_error(Errc::corrupt, what + " must hold exactly one of \"result\" and \"error\"");
  const json& id = reply.contains("id") ? reply["id"] : json(nullptr);
  if (has_error) {
    const json& e = reply["error"];
    if (!e.is_object()) return make_error(Errc::corrupt, what + ": \"error\" is not an object");
    std::string message = e.contains("message") && e["message"].is_string()
                              ? e["message"].get<std::string>()
                              : std::string("(no message)");
    std::int64_t code = e.contains("code") && e["code"].is_number_integer()
                            ? e["code"].get<std::int64_t>()
                            : -32603;
    Errc errc = errc_from_rpc_code(code);
    json data = e.contains("data") ? e["data"] : json(nullptr);
    if (data.is_object() && data.contains("code") && data["code"].is_string())
      if (auto named = errc_from_name(data["code"].get<std::string>())) errc = *named;
    RpcFailure failure{code, message, std::move(data)};
    if (code == -32601)
      message += " (this fdod does not know '" + std::string(method) + "': is it older than " +
                 std::string(client_name) + "?)";
    // id null: the daemon could not read our request (e.g. over its size
    // limit); still an answer to it, as we send one request at a time.
    if (!id.is_null() && id != json(expected_id))
      return make_error(Errc::corrupt, what + " carries id " + id.dump() + ", expected " +
                                           std::to_string(expected_id));
    return Reply{make_error(errc, message), std::move(failure), {}};
  }
  if (id != json(expected_id))
    return make_error(Errc::corrupt, what + " carries id " + id.dump() + ", expected " +
                                         std::to_string(expected_id));
  return Reply{std::move(reply["result"]), std::nullopt, {}};
}

Expected<RpcClient> RpcClient::connect(const std::string& socket_path, ClientOptions options) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty()) return make_error(Errc::invalid_argument, "--socket: empty path");
  if (socket_path.size() >= sizeof addr.sun_path)
    return make_error(Errc::invalid_argument, "socket path " + socket_path + " is " +
                                                  std::to_string(socket_path.size()) +
                                                  " bytes; Unix socket paths hold at most " +
                                                  std::to_string(sizeof addr.sun_path - 1));
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Error::from_errno("socket", errno);
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0)
    return make_error(Errc::unavailable, connect_advice(socket_path, errno, options.connect_hint));
  return RpcClient(std::move(fd), socket_path, options);
}

namespace {

// Most descriptors one recvmsg takes (the kernel's SCM_MAX_FD).
constexpr std::size_t kMaxFdsPerMessage = 253;

} // namespace

Expected<std::size_t> RpcClient::receive(std::string_view method) {
  char chunk[65536];
  // Take ownership of every descriptor first, so none leaks on any path.
  std::vector<Fd> fds;
  bool truncated = false;
  ssize_t got = receive_with_fds(fd_.get(), chunk, kMaxFdsPerMessage, 0, fds, truncated);
  if (got < 0) {
    if (errno == EINTR || errno == EAGAIN) return std::size_t(0);
    return Error::from_errno("read reply to " + std::string(method), errno);
  }
  if (truncated)
    return make_error(Errc::corrupt, "reply to " + std::string(method) + " carried more than " +
                                         std::to_string(kMaxFdsPerMessage) +
                                         " file descriptors; the rest were dropped");
  if (got == 0)
    return make_error(Errc::io, "fdod closed the connection before answering " +
                                    std::string(method) +
                                    " (did it stop or crash? see "
                                    "`journalctl -u fdod`)");
  // The kernel ends a read after the message that carried descriptors, so
  // they came with the chunk's last byte: they belong to that byte's line
  // (a sender attaches them to the line they go with).
  if (!fds.empty())
    pending_fds_.push_back(
        Arrived{pending_.size() + static_cast<std::size_t>(got) - 1, std::move(fds)});
  pending_.append(chunk, static_cast<std::size_t>(got));
  return static_cast<std::size_t>(got);
}

Expected<RpcClient::Line> RpcClient::read_line(std::string_view method,
                                               std::chrono::steady_clock::time_point deadline) {
  std::size_t scanned = 0;
  while (true) {
    if (auto nl = pending_.find('\n', scanned); nl != std::string::npos) {
      Line line{pending_.substr(0, nl), {}};
      pending_.erase(0, nl + 1);
      // Descriptors that came with this line's bytes are its; later ones
      // move with the bytes they came with.
      std::vector<Arrived> later;
      for (auto& a : pending_fds_) {
        if (a.at <= nl) {
          for (auto& fd : a.fds)
            line.fds.push_back(std::move(fd));
        } else {
          later.push_back(Arrived{a.at - (nl + 1), std::move(a.fds)});
        }
      }
      pending_fds_ = std::move(later);
      return line;
    }
    scanned = pending_.size();
    if (pending_.size() > options_.max_reply_bytes)
      return make_error(Errc::resource_exhausted, "reply to " + std::string(method) + " exceeds " +
                                                      std::to_string(options_.max_reply_bytes) +
                                                      " bytes");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return make_error(Errc::timeout, "no reply from fdod to " + std::string(method) + " within " +
                                           std::to_string(options_.timeout.count()) + " ms (" +
                                           options_.timeout_hint + ")");
    pollfd p{fd_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1 << 30)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::from_errno("poll", errno);
    }
    if (n == 0) continue;
    if (auto got = receive(method); !got) return std::move(got).error();
  }
}

Status RpcClient::send_request(std::string_view method, const std::string& line,
                               std::span<const int> request_fds) {
  std::size_t off = 0;
  if (!request_fds.empty()) {
    // The descriptors ride on the first byte alone, so fdod's read that
    // takes them ends inside this request's line.
    if (request_fds.size() > kMaxFdsPerMessage)
      return make_error(Errc::invalid_argument, std::string(method) + ": " +
                                                    std::to_string(request_fds.size()) +
                                                    " descriptors for one request is too many");
    ssize_t n;
    do
      n = send_with_fds(fd_.get(), std::string_view(line).substr(0, 1), request_fds, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0) return Error::from_errno("send " + std::string(method) + " to fdod", errno);
    off = 1;
  }
  while (off < line.size()) {
    ssize_t n = ::send(fd_.get(), line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error::from_errno("send " + std::string(method) + " to fdod", errno);
    }
    off += static_cast<std::size_t>(n);
  }
  return ok();
}

Expected<Reply> RpcClient::exchange(std::string_view method, const json& params,
                                    std::span<const int> request_fds) {
  if (!fd_)
    return make_error(Errc::io, "the connection to fdod at " + path_ +
                                    " broke on an earlier request; not sending " +
                                    std::string(method));
  // Bytes or descriptors left from before no request is waiting for: a
  // well-behaved daemon sends none, and they must not pass for this reply's.
  pending_fds_.clear();
  std::int64_t id = next_id_++;
  json request = {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}};
  std::string line = request.dump(-1, ' ', false, json::error_handler_t::replace);
  line += '\n';
  auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  if (auto sent = send_request(method, line, request_fds); !sent) {
    // Part of a request may have gone out: the stream is no longer in step.
    fd_.reset();
    return std::move(sent).error();
  }
  auto reply = read_line(method, deadline);
  if (!reply) {
    // A late reply would be taken for the next request's: drop the connection.
    fd_.reset();
    pending_.clear();
    pending_fds_.clear();
    return std::move(reply).error();
  }
  auto decoded = decode_reply(reply->text, id, method, options_.client_name);
  if (!decoded) {
    fd_.reset();
    pending_.clear();
    pending_fds_.clear();
    return std::move(decoded).error();
  }
  decoded->fds = std::move(reply->fds);
  return decoded;
}

Expected<json> RpcClient::call(std::string_view method, const json& params) {
  auto reply = exchange(method, params);
  if (!reply) return std::move(reply).error();
  return std::move(reply->answer);
}

Expected<ReplyWithFds> RpcClient::call_with_fds(std::string_view method, const json& params) {
  auto reply = exchange(method, params);
  if (!reply) return std::move(reply).error();
  if (!reply->answer) return std::move(reply->answer).error();
  return ReplyWithFds{std::move(*reply->answer), std::move(reply->fds)};
}

} // namespace fdo::client
