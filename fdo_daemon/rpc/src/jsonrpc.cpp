#include "fdo/daemon/jsonrpc.h"

#include "fdo/util/log.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>

namespace fdo::daemon {

using nlohmann::json;

namespace rpc {

namespace {
struct CodeEntry {
  Errc errc;
  int code;
};
// The one table behind error_code/errc_from_code; docs/fdod-protocol.md
// repeats it for clients. Codes are part of the wire protocol: never renumber.
constexpr CodeEntry kCodes[] = {
    {Errc::invalid_argument, invalid_params},
    {Errc::not_found, -32001},
    {Errc::already_exists, -32002},
    {Errc::conflict, -32003},
    {Errc::io, -32004},
    {Errc::corrupt, -32005},
    {Errc::parse, -32006},
    {Errc::verify, -32007},
    {Errc::compile, -32008},
    {Errc::link, -32009},
    {Errc::timeout, -32010},
    {Errc::crashed, -32011},
    {Errc::resource_exhausted, -32012},
    {Errc::permission_denied, -32013},
    {Errc::unsupported, -32014},
    {Errc::unavailable, -32015},
    {Errc::pinned, -32016},
    {Errc::internal, internal_error},
};

std::string dump(const json& j) {
  // Handlers may put arbitrary bytes in strings; replace invalid UTF-8 rather
  // than throwing while answering.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}
} // namespace

int error_code(Errc code) {
  for (const CodeEntry& e : kCodes)
    if (e.errc == code) return e.code;
  return internal_error;
}

std::optional<Errc> errc_from_code(int code) {
  for (const CodeEntry& e : kCodes)
    if (e.code == code) return e.errc;
  return std::nullopt;
}

std::optional<Errc> parse_errc(std::string_view name) {
  for (const CodeEntry& e : kCodes)
    if (to_string(e.errc) == name) return e.errc;
  return std::nullopt;
}

std::string cut(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t end = max_bytes;
  // Back to the start of a UTF-8 sequence: never half a character.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
    --end;
  return std::string(text.substr(0, end)) + "... (" + std::to_string(text.size() - end) +
         " more bytes)";
}

std::string result_response(const json& id, const json& result) {
  // Built by hand so a large result is serialised once, not deep-copied into
  // an envelope object first.
  std::string out = R"({"jsonrpc":"2.0","id":)";
  out += dump(id);
  out += R"(,"result":)";
  out += dump(result);
  out += '}';
  return out;
}

std::string result_response_text(const json& id, std::string_view result_text) {
  std::string id_text = dump(id);
  std::string out;
  out.reserve(30 + id_text.size() + result_text.size());
  out += R"({"jsonrpc":"2.0","id":)";
  out += id_text;
  out += R"(,"result":)";
  out += result_text;
  out += '}';
  return out;
}

std::string error_response(const json& id, int code, std::string_view message,
                           std::string_view data_code, const json& extra) {
  json data = json::object();
  if (extra.is_object()) data = extra;
  data["code"] = std::string(data_code);
  json err = {{"code", code},
              {"message", cut(message, error_message_max_bytes)},
              {"data", std::move(data)}};
  json resp = {{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(err)}};
  return dump(resp);
}

std::string error_response(const json& id, const Error& err, const json& extra) {
  return error_response(id, error_code(err.code()), err.message(), to_string(err.code()), extra);
}

std::string oversized_response(std::size_t limit_bytes, std::size_t seen_bytes) {
  std::string msg = "request line exceeds max_request_bytes (" + std::to_string(limit_bytes) +
                    " bytes); the line was discarded";
  return error_response(nullptr, invalid_request, msg, to_string(Errc::resource_exhausted),
                        {{"limit_bytes", limit_bytes}, {"seen_bytes", seen_bytes}});
}

std::string deadline_response(const json& id, std::string_view method,
                              std::chrono::milliseconds timeout) {
  std::string msg = "deadline exceeded: '" + cut(method) + "' did not finish within " +
                    std::to_string(timeout.count()) + " ms (request_timeout_ms)";
  return error_response(id, error_code(Errc::timeout), msg, to_string(Errc::timeout),
                        {{"timeout_ms", timeout.count()}, {"method", cut(method)}});
}

std::string stopping_response(const json& id) {
  return error_response(id, error_code(Errc::unavailable),
                        "the daemon is shutting down; request not started",
                        to_string(Errc::unavailable));
}

} // namespace rpc

namespace {

// Depth of [ and { outside strings, without building anything: the DOM parser
// is iterative but handlers' copies and dumps of a deep document are not.
bool nests_deeper_than(std::string_view s, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// nlohmann messages start with "[json.exception.parse_error.101] "; clients
// need the rest. Also bounded: the "last read" excerpt can echo a huge token.
std::string clean_parse_message(std::string_view what) {
  if (!what.empty() && what.front() == '[') {
    std::size_t close = what.find("] ");
    if (close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  constexpr std::size_t kMax = 300;
  std::string out(what.substr(0, kMax));
  if (what.size() > kMax) out += "...";
  return out;
}

bool valid_id(const json& id) {
  return id.is_string() || id.is_number() || id.is_null();
}

// A number id we could not echo as the same number: an integer beyond 64 bits
// reaches us as the nearest double (2^100 would come back as
// 1.2676506002282294e+30). Integral doubles of 2^63 and beyond are refused;
// fractions, rare in ids, are echoed as the nearest double.
bool id_beyond_64_bits(const json& id) {
  if (!id.is_number_float()) return false;
  const double v = id.get<double>();
  return !std::isfinite(v) || (std::trunc(v) == v && std::fabs(v) >= 9223372036854775808.0);
}

ParsedLine reject(const json& id, int code, std::string message, std::string_view data_code) {
  ParsedLine p;
  p.response = rpc::error_response(id, code, message, data_code);
  return p;
}

} // namespace

const json& Request::response_id() const {
  static const json kNull = nullptr;
  return id ? *id : kNull;
}

std::string_view to_string(MethodClass c) {
  switch (c) {
  case MethodClass::control:
    return "control";
  case MethodClass::immediate:
    return "immediate";
  case MethodClass::work:
    break;
  }
  return "work";
}

void Dispatcher::add(std::string method, Handler handler, MethodClass method_class,
                     RequestFds request_fds) {
  Entry e{std::make_shared<const Handler>(std::move(handler)), nullptr, method_class, request_fds};
  std::unique_lock lk(mu_);
  handlers_[std::move(method)] = std::move(e);
}

void Dispatcher::add_text(std::string method, TextHandler handler, MethodClass method_class,
                          RequestFds request_fds) {
  Entry e{nullptr, std::make_shared<const TextHandler>(std::move(handler)), method_class,
          request_fds};
  std::unique_lock lk(mu_);
  handlers_[std::move(method)] = std::move(e);
}

std::optional<MethodClass> Dispatcher::method_class(std::string_view method) const {
  std::shared_lock lk(mu_);
  auto it = handlers_.find(std::string(method));
  if (it == handlers_.end()) return std::nullopt;
  return it->second.method_class;
}

bool Dispatcher::has(std::string_view method) const {
  return find(method).has_value();
}

std::vector<std::string> Dispatcher::methods() const {
  std::vector<std::string> out;
  {
    std::shared_lock lk(mu_);
    for (const auto& [name, e] : handlers_)
      out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<Dispatcher::Entry> Dispatcher::find(std::string_view method) const {
  std::shared_lock lk(mu_);
  auto it = handlers_.find(std::string(method));
  if (it == handlers_.end()) return std::nullopt;
  return it->second;
}

ParsedLine Dispatcher::parse(std::string_view line) const {
  const json null_id = nullptr;
  if (nests_deeper_than(line, rpc::max_nesting_depth))
    return reject(null_id, rpc::invalid_request,
                  "request nests deeper than " + std::to_string(rpc::max_nesting_depth) +
                      " levels of arrays/objects",
                  to_string(Errc::invalid_argument));
  json doc;
  try {
    doc = json::parse(line);
  } catch (const json::exception& e) {
    return reject(null_id, rpc::parse_error, "parse error: " + clean_parse_message(e.what()),
                  to_string(Errc::parse));
  }
  if (doc.is_array())
    return reject(null_id, rpc::invalid_request,
                  "batch requests are not supported; send one request object per line",
                  to_string(Errc::invalid_argument));
  if (!doc.is_object())
    return reject(null_id, rpc::invalid_request,
                  std::string("invalid request: expected a JSON object, got ") + doc.type_name(),
                  to_string(Errc::invalid_argument));

  Request req;
  auto id_it = doc.find("id");
  if (id_it != doc.end()) {
    if (!valid_id(*id_it))
      return reject(null_id, rpc::invalid_request,
                    std::string("invalid request: \"id\" must be a string, number or null, got ") +
                        id_it->type_name(),
                    to_string(Errc::invalid_argument));
    if (id_beyond_64_bits(*id_it))
      return reject(null_id, rpc::invalid_request,
                    "invalid request: a number \"id\" must fit in 64 bits (an integer id "
                    "beyond that cannot be echoed as the same number; send it as a string)",
                    to_string(Errc::invalid_argument));
    req.id = std::move(*id_it);
  }
  const json& rid = req.response_id();

  auto ver = doc.find("jsonrpc");
  if (ver == doc.end() || !ver->is_string() || ver->get_ref<const std::string&>() != "2.0")
    return reject(rid, rpc::invalid_request, "invalid request: \"jsonrpc\" must be \"2.0\"",
                  to_string(Errc::invalid_argument));

  auto m = doc.find("method");
  if (m == doc.end())
    return reject(rid, rpc::invalid_request, "invalid request: missing \"method\"",
                  to_string(Errc::invalid_argument));
  if (!m->is_string())
    return reject(rid, rpc::invalid_request,
                  std::string("invalid request: \"method\" must be a string, got ") +
                      m->type_name(),
                  to_string(Errc::invalid_argument));
  req.method = m->get<std::string>();

  auto p = doc.find("params");
  if (p != doc.end()) {
    if (!p->is_object() && !p->is_array()) {
      if (req.is_notification()) {
        // Notifications are never answered, not even with errors.
        ParsedLine drop;
        return drop;
      }
      return reject(rid, rpc::invalid_params,
                    std::string("invalid params: \"params\" must be an object or array, got ") +
                        p->type_name(),
                    to_string(Errc::invalid_argument));
    }
    req.params = std::move(*p);
  }
  ParsedLine out;
  out.request = std::move(req);
  return out;
}

std::optional<std::string> Dispatcher::invoke(const Request& req, const CallContext& ctx) const {
  const json& rid = req.response_id();
  std::optional<Entry> entry = find(req.method);
  if (!entry) {
    if (req.is_notification()) return std::nullopt;
    return rpc::error_response(rid, rpc::method_not_found,
                               "method not found: '" + rpc::cut(req.method) + "'",
                               to_string(Errc::not_found), {{"method", rpc::cut(req.method)}});
  }
  if (ctx.request_fds != nullptr && !ctx.request_fds->empty() &&
      entry->request_fds == RequestFds::refused) {
    if (req.is_notification()) return std::nullopt;
    return rpc::error_response(
        rid, rpc::invalid_params,
        "'" + req.method + "' takes no file descriptors, and " +
            std::to_string(ctx.request_fds->size()) +
            " came with the request (closed unread; only execute takes memfd buffers)",
        to_string(Errc::invalid_argument),
        {{"method", req.method}, {"fds", ctx.request_fds->size()}}); // a method of ours
  }
  std::string failure;
  // A failed handler's error, or a notification's outcome, the same for both kinds.
  auto finish = [&](const Error* error) -> std::optional<std::string> {
    if (req.is_notification()) {
      if (ctx.reply_fds) ctx.reply_fds->clear(); // no reply to carry them
      if (error) log::debug("notification '" + req.method + "' failed: " + error->describe());
      return std::nullopt;
    }
    if (ctx.reply_fds) ctx.reply_fds->clear();
    return rpc::error_response(rid, *error);
  };
  try {
    if (entry->text_handler) {
      Expected<ResultText> result = (*entry->text_handler)(req.params, ctx);
      if (result && !req.is_notification()) return rpc::result_response_text(rid, result->json);
      return finish(result ? nullptr : &result.error());
    }
    Expected<json> result = (*entry->handler)(req.params, ctx);
    if (result && !req.is_notification()) return rpc::result_response(rid, *result);
    return finish(result ? nullptr : &result.error());
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  log::error("method '" + req.method + "' threw: " + failure);
  if (ctx.reply_fds) ctx.reply_fds->clear();
  if (req.is_notification()) return std::nullopt;
  return rpc::error_response(rid, rpc::internal_error,
                             "internal error in '" + req.method + "': " + failure,
                             to_string(Errc::internal));
}

std::optional<std::string> Dispatcher::handle_line(std::string_view line,
                                                   const CallContext& ctx) const {
  ParsedLine p = parse(line);
  if (!p.request) {
    if (p.response.empty()) return std::nullopt;
    return std::move(p.response);
  }
  return invoke(*p.request, ctx);
}

void Dispatcher::on_disconnect(std::function<void(std::uint64_t)> hook) {
  auto h = std::make_shared<const std::function<void(std::uint64_t)>>(std::move(hook));
  std::unique_lock lk(mu_);
  disconnect_hooks_.push_back(std::move(h));
}

void Dispatcher::disconnected(std::uint64_t connection) const {
  std::vector<std::shared_ptr<const std::function<void(std::uint64_t)>>> hooks;
  {
    std::shared_lock lk(mu_);
    hooks = disconnect_hooks_;
  }
  for (const auto& h : hooks) {
    try {
      (*h)(connection);
    } catch (const std::exception& e) {
      log::error(std::string("disconnect hook threw: ") + e.what());
    }
  }
}

// --- typed params ---------------------------------------------------------

namespace {

template <class T> struct ParamTraits;
template <> struct ParamTraits<std::string> {
  static constexpr const char* name = "a string";
  static bool fits(const json& v) { return v.is_string(); }
  static std::string get(const json& v) { return v.get<std::string>(); }
};
template <> struct ParamTraits<bool> {
  static constexpr const char* name = "a boolean";
  static bool fits(const json& v) { return v.is_boolean(); }
  static bool get(const json& v) { return v.get<bool>(); }
};
template <> struct ParamTraits<std::int64_t> {
  static constexpr const char* name = "an integer (int64)";
  static bool fits(const json& v) {
    if (v.is_number_unsigned())
      return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX);
    return v.is_number_integer();
  }
  static std::int64_t get(const json& v) { return v.get<std::int64_t>(); }
};
template <> struct ParamTraits<std::uint64_t> {
  static constexpr const char* name = "a non-negative integer";
  static bool fits(const json& v) {
    if (v.is_number_unsigned()) return true;
    return v.is_number_integer() && v.get<std::int64_t>() >= 0;
  }
  static std::uint64_t get(const json& v) { return v.get<std::uint64_t>(); }
};
template <> struct ParamTraits<double> {
  static constexpr const char* name = "a number";
  static bool fits(const json& v) { return v.is_number(); }
  static double get(const json& v) { return v.get<double>(); }
};
template <> struct ParamTraits<json> {
  static constexpr const char* name = "a JSON value";
  static bool fits(const json&) { return true; }
  static json get(const json& v) { return v; }
};

Error params_not_object(const json& params) {
  return make_error(Errc::invalid_argument,
                    std::string("invalid params: expected an object with named members, got ") +
                        params.type_name());
}

template <class T> Expected<T> convert(const json& v, std::string_view key) {
  if (!ParamTraits<T>::fits(v))
    return make_error(
        Errc::invalid_argument,
        "invalid params: '" + std::string(key) + "' must be " + ParamTraits<T>::name + ", got " +
            (v.is_number() ? std::string("number ") + v.dump() : std::string(v.type_name())));
  return ParamTraits<T>::get(v);
}

} // namespace

template <class T> Expected<T> require_param(const json& params, std::string_view key) {
  if (!params.is_object()) return params_not_object(params);
  auto it = params.find(key);
  if (it == params.end())
    return make_error(Errc::invalid_argument,
                      "invalid params: missing required param '" + std::string(key) + "'");
  return convert<T>(*it, key);
}

template <class T>
Expected<T> optional_param(const json& params, std::string_view key, T fallback) {
  if (!params.is_object()) return params_not_object(params);
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  return convert<T>(*it, key);
}

#define FDO_PARAM_INSTANTIATE(T)                                                                   \
  template Expected<T> require_param<T>(const json&, std::string_view);                            \
  template Expected<T> optional_param<T>(const json&, std::string_view, T);
FDO_PARAM_INSTANTIATE(std::string)
FDO_PARAM_INSTANTIATE(bool)
FDO_PARAM_INSTANTIATE(std::int64_t)
FDO_PARAM_INSTANTIATE(std::uint64_t)
FDO_PARAM_INSTANTIATE(double)
FDO_PARAM_INSTANTIATE(json)
#undef FDO_PARAM_INSTANTIATE

} // namespace fdo::daemon
