#include "fdo/cache/redis_tier.h"

#include "fdo/cache/disk_tier.h"
#include "fdo/util/enum_names.h"
#include "fdo/util/log.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <hiredis/hiredis.h>
#include <mutex>
#include <pthread.h>
#include <sys/time.h>
#include <thread>
#include <vector>

namespace fdo::cache {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr EnumNames<RemoteFetchStatus, 6> kFetchNames{
    {{{RemoteFetchStatus::hit, "hit"},
      {RemoteFetchStatus::miss, "miss"},
      {RemoteFetchStatus::corrupt, "corrupt"},
      {RemoteFetchStatus::identity_mismatch, "identity_mismatch"},
      {RemoteFetchStatus::too_large, "too_large"},
      {RemoteFetchStatus::unavailable, "unavailable"}}}};

constexpr EnumNames<RemoteState, 3> kStateNames{{{{RemoteState::connecting, "connecting"},
                                                  {RemoteState::up, "up"},
                                                  {RemoteState::down, "down"}}}};

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextFree>;

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

timeval to_timeval(milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// hiredis writes with write(2), so a server that went away would raise
// SIGPIPE and kill the process. The signal is blocked in this thread for the
// command, and one the command raised is consumed before unblocking.
class SigpipeBlocked {
public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~SigpipeBlocked() {
    if (!blocked_) return;
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      timespec zero{};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
  bool blocked_ = false;
};

Reply command(redisContext* c, const char* format, auto... args) {
  SigpipeBlocked guard;
  return Reply(static_cast<redisReply*>(redisCommand(c, format, args...)));
}

// Whether a lookup or write may talk to the server now.
enum class Gate { open, probe, closed };

} // namespace

std::string_view to_string(RemoteFetchStatus s) {
  return kFetchNames.name(s);
}
std::string_view to_string(RemoteState s) {
  return kStateNames.name(s);
}

nlohmann::json to_json(const RemoteTierStats& s) {
  return {{"endpoint", s.endpoint},
          {"state", std::string(to_string(s.state))},
          {"last_error", s.last_error},
          {"hits", s.hits},
          {"misses", s.misses},
          {"corrupt", s.corrupt},
          {"identity_mismatches", s.identity_mismatches},
          {"too_large", s.too_large},
          {"unavailable", s.unavailable},
          {"errors", s.errors},
          {"reconnects", s.reconnects},
          {"stores", s.stores},
          {"store_failures", s.store_failures},
          {"store_queue_bytes", s.store_queue_bytes}};
}

Expected<RedisEndpoint> parse_redis_endpoint(std::string_view url) {
  RedisEndpoint e;
  e.text = std::string(url);
  auto bad = [&](const std::string& why) -> Error {
    return make_error(Errc::invalid_argument, "remote object cache \"" + std::string(url) +
                                                  "\": " + why +
                                                  " (expected redis://HOST[:PORT] or unix:/PATH)");
  };
  if (url.starts_with("unix:")) {
    std::string_view path = url.substr(5);
    if (path.starts_with("//")) path.remove_prefix(2); // unix:///run/redis.sock
    if (path.empty() || path.front() != '/') return bad("the socket path must be absolute");
    e.kind = RedisEndpoint::Kind::unix_socket;
    e.path = std::string(path);
    return e;
  }
  if (url.starts_with("rediss://")) return bad("TLS (rediss://) is not supported");
  if (!url.starts_with("redis://")) return bad("unknown scheme");
  std::string_view rest = url.substr(8);
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('@') != std::string_view::npos)
    return bad("credentials in the URL are not supported");
  if (rest.find('/') != std::string_view::npos)
    return bad("a database number or path is not supported");
  std::string_view host = rest, port;
  if (rest.starts_with('[')) { // [v6]:port
    std::size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    host = rest.substr(1, close - 1);
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("junk after ']'");
      port = after.substr(1);
    }
  } else if (std::size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return bad("write an IPv6 address as [ADDR]");
  }
  if (host.empty()) return bad("no host");
  e.host = std::string(host);
  if (!port.empty() || rest.ends_with(':')) {
    int p = 0;
    for (char ch : port) {
      if (ch < '0' || ch > '9' || p > 65535) return bad("the port must be 1-65535");
      p = p * 10 + (ch - '0');
    }
    if (p < 1 || p > 65535) return bad("the port must be 1-65535");
    e.port = p;
  }
  return e;
}

struct RedisTier::Impl {
  explicit Impl(RedisTierConfig c) : config(std::move(c)), backoff(config.retry_min) {}

  RedisTierConfig config;

  // Connection state; never held across I/O.
  mutable std::mutex state_mu;
  RemoteState state = RemoteState::connecting;
  std::string last_error;
  Clock::time_point retry_at{};
  milliseconds backoff;
  bool probing = false;
  bool connected_once = false;

  // Idle connections; taken out for the duration of one command.
  std::mutex pool_mu;
  std::vector<Context> idle;

  std::atomic<std::uint64_t> hits{0}, misses{0}, corrupt{0}, identity_mismatches{0}, too_large{0},
      unavailable{0}, errors{0}, reconnects{0}, stores{0}, store_failures{0};

  // The write queue and its one writer thread.
  mutable std::mutex queue_mu;
  std::condition_variable queue_cv, drained_cv;
  std::deque<std::shared_ptr<const Entry>> queue;
  std::uint64_t queue_bytes = 0;
  bool writing = false;
  bool stopping = false;
  std::thread writer;

  // ------------------------------------------------------------ state

  Gate admit() {
    std::lock_guard lock(state_mu);
    if (state != RemoteState::down) return Gate::open;
    if (probing || Clock::now() < retry_at) return Gate::closed;
    probing = true;
    return Gate::probe;
  }

  void mark_up() {
    std::lock_guard lock(state_mu);
    if (state == RemoteState::down)
      log::notice("cache: remote tier " + config.endpoint.text + " is back");
    state = RemoteState::up;
    backoff = config.retry_min;
    probing = false;
  }

  void mark_down(Gate gate, const std::string& why) {
    errors++;
    std::lock_guard lock(state_mu);
    last_error = why;
    if (gate == Gate::probe) { // the retry failed: wait longer
      backoff = std::min(backoff * 2, config.retry_max);
      probing = false;
    } else if (state == RemoteState::down) {
      return; // another caller already marked it down
    } else {
      backoff = config.retry_min;
      log::warning("cache: remote tier " + config.endpoint.text + " unavailable (" + why +
                   "); serving from local tiers and retrying with backoff");
    }
    state = RemoteState::down;
    retry_at = Clock::now() + backoff;
  }

  std::string down_reason() const {
    std::lock_guard lock(state_mu);
    auto left = std::chrono::duration_cast<milliseconds>(retry_at - Clock::now()).count();
    return "remote tier down (" + last_error + "); next try in " +
           std::to_string(std::max<long long>(left, 0)) + " ms";
  }

  // ------------------------------------------------------------ connections

  // A connection from the pool or a new one; nullptr with `why` set on failure.
  Context acquire(std::string& why) {
    {
      std::lock_guard lock(pool_mu);
      if (!idle.empty()) {
        Context c = std::move(idle.back());
        idle.pop_back();
        return c;
      }
    }
    timeval tv = to_timeval(config.timeout);
    const RedisEndpoint& e = config.endpoint;
    Context c(e.kind == RedisEndpoint::Kind::unix_socket
                  ? redisConnectUnixWithTimeout(e.path.c_str(), tv)
                  : redisConnectWithTimeout(e.host.c_str(), e.port, tv));
    if (!c) {
      why = "connect: out of memory";
      return nullptr;
    }
    if (c->err) {
      why = "connect to " + e.text + ": " + c->errstr;
      return nullptr;
    }
    if (redisSetTimeout(c.get(), tv) != REDIS_OK) {
      why = "set timeout: " + std::string(c->errstr);
      return nullptr;
    }
    {
      std::lock_guard lock(state_mu);
      if (connected_once) reconnects++;
      connected_once = true;
    }
    return c;
  }

  // After a transport failure the idle connections are most likely dead too
  // (a restarted server): drop them, so the next probe connects afresh.
  void drop_idle() {
    std::vector<Context> dead;
    {
      std::lock_guard lock(pool_mu);
      dead.swap(idle);
    }
  }

  void release(Context c) {
    std::lock_guard lock(pool_mu);
    if (idle.size() < config.max_idle_connections) idle.push_back(std::move(c));
  }

  // Runs one command on a pooled connection. On a transport failure (timeout,
  // reset) the connection is dropped and the tier marked down; a server error
  // reply other than WRONGTYPE marks it down too (LOADING, OOM, READONLY...).
  template <class... Args>
  Reply run(Gate gate, std::string& why, const char* format, Args... args) {
    Context c = acquire(why);
    if (!c) {
      mark_down(gate, why);
      return nullptr;
    }
    Reply r = command(c.get(), format, args...);
    if (!r) {
      why = std::string("command: ") + (c->err ? c->errstr : "no reply");
      if (c->err == REDIS_ERR_IO &&
          why.find("Resource temporarily unavailable") != std::string::npos)
        why = "command: timed out after " + std::to_string(config.timeout.count()) + " ms";
      drop_idle();
      mark_down(gate, why);
      return nullptr;
    }
    release(std::move(c));
    if (r->type == REDIS_REPLY_ERROR &&
        !std::string_view(r->str, r->len).starts_with("WRONGTYPE")) {
      why = "server error: " + std::string(r->str, r->len);
      mark_down(gate, why);
      return nullptr;
    }
    mark_up();
    return r;
  }

  // ------------------------------------------------------------ lookups

  RemoteFetch fetch(const std::string& key, const std::string& identity) {
    RemoteFetch out;
    Gate gate = admit();
    if (gate == Gate::closed) {
      unavailable++;
      out.status = RemoteFetchStatus::unavailable;
      out.problem = down_reason();
      return out;
    }
    std::string rkey = config.key_prefix + key;
    std::string why;
    // GETRANGE reads at most max_entry_bytes + 1 bytes: an oversized value
    // is recognised without transferring it whole.
    Reply r = run(gate, why, "GETRANGE %b 0 %lld", rkey.data(), rkey.size(),
                  static_cast<long long>(config.max_entry_bytes));
    if (!r) {
      unavailable++;
      out.status = RemoteFetchStatus::unavailable;
      out.problem = why;
      return out;
    }
    auto problem = [&](RemoteFetchStatus status, std::atomic<std::uint64_t>& counter,
                       std::string text) {
      counter++;
      out.status = status;
      out.problem = std::move(text);
      log::warning("cache: remote entry " + key.substr(0, 24) + "...: " + out.problem);
      return out;
    };
    if (r->type != REDIS_REPLY_STRING)
      return problem(RemoteFetchStatus::corrupt, corrupt,
                     "not a string value (reply type " + std::to_string(r->type) + ")");
    if (r->len == 0) {
      misses++;
      return out;
    }
    if (r->len > config.max_entry_bytes)
      return problem(RemoteFetchStatus::too_large, too_large,
                     "larger than the remote entry cap of " +
                         std::to_string(config.max_entry_bytes) + " bytes");
    auto entry = decode_entry(std::string_view(r->str, r->len));
    if (!entry) return problem(RemoteFetchStatus::corrupt, corrupt, entry.error().message());
    if (entry->key != key)
      return problem(RemoteFetchStatus::corrupt, corrupt,
                     "stored under another key (" + entry->key.substr(0, 24) + "...)");
    if (entry->info.compiler_identity != identity)
      return problem(RemoteFetchStatus::identity_mismatch, identity_mismatches,
                     "compiled under identity \"" + entry->info.compiler_identity +
                         "\", expected \"" + identity + "\"");
    hits++;
    out.status = RemoteFetchStatus::hit;
    out.entry = std::make_shared<const Entry>(std::move(*entry));
    return out;
  }

  // ------------------------------------------------------------ writes

  void enqueue(std::shared_ptr<const Entry> entry) {
    std::uint64_t size = entry->size_bytes();
    {
      std::lock_guard lock(queue_mu);
      if (!stopping && queue_bytes + size <= config.write_queue_bytes) {
        queue_bytes += size;
        queue.push_back(std::move(entry));
        queue_cv.notify_one();
        return;
      }
    }
    store_failures++;
    log::debug("cache: remote write queue full; an entry was not written to " +
               config.endpoint.text);
  }

  void write_one(const Entry& entry) {
    std::string bytes = encode_entry(entry);
    if (bytes.size() > config.max_entry_bytes) {
      too_large++;
      return;
    }
    Gate gate = admit();
    if (gate == Gate::closed) {
      store_failures++;
      return;
    }
    std::string rkey = config.key_prefix + entry.key;
    std::string why;
    Reply r = run(gate, why, "SET %b %b", rkey.data(), rkey.size(), bytes.data(), bytes.size());
    if (r && r->type == REDIS_REPLY_STATUS) {
      stores++;
    } else {
      store_failures++;
      if (r) log::warning("cache: remote write failed: " + std::string(r->str, r->len));
    }
  }

  void writer_loop() {
    std::unique_lock lock(queue_mu);
    for (;;) {
      queue_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return; // stopping and drained
      std::shared_ptr<const Entry> entry = std::move(queue.front());
      queue.pop_front();
      writing = true;
      bool drop = false;
      if (stopping) { // at shutdown, write only while the server answers
        std::lock_guard s(state_mu);
        drop = state == RemoteState::down;
      }
      lock.unlock();
      if (drop)
        store_failures++;
      else
        write_one(*entry);
      lock.lock();
      writing = false;
      queue_bytes -= entry->size_bytes();
      drained_cv.notify_all();
    }
  }
};

RedisTier::RedisTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->writer = std::thread([d = impl_.get()] { d->writer_loop(); });
}

RedisTier::~RedisTier() {
  {
    std::lock_guard lock(impl_->queue_mu);
    impl_->stopping = true;
  }
  impl_->queue_cv.notify_all();
  impl_->writer.join();
}

Expected<std::unique_ptr<RedisTier>> RedisTier::create(RedisTierConfig config) {
  auto bad = [](const std::string& why) { return make_error(Errc::invalid_argument, why); };
  if (config.timeout.count() <= 0) return bad("remote object cache: the timeout must be positive");
  if (config.max_entry_bytes < kEntryHeaderSize)
    return bad("remote object cache: the entry cap must be at least " +
               std::to_string(kEntryHeaderSize) + " bytes");
  if (config.retry_min.count() <= 0 || config.retry_max < config.retry_min)
    return bad("remote object cache: need 0 < retry_min <= retry_max");
  if (config.endpoint.kind == RedisEndpoint::Kind::tcp && config.endpoint.host.empty())
    return bad("remote object cache: no host");
  if (config.endpoint.kind == RedisEndpoint::Kind::unix_socket && config.endpoint.path.empty())
    return bad("remote object cache: no socket path");
  return std::unique_ptr<RedisTier>(new RedisTier(std::make_unique<Impl>(std::move(config))));
}

RemoteFetch RedisTier::fetch(const std::string& key, const std::string& expected_identity) {
  return impl_->fetch(key, expected_identity);
}

void RedisTier::store(std::shared_ptr<const Entry> entry) {
  impl_->enqueue(std::move(entry));
}

void RedisTier::flush() {
  std::unique_lock lock(impl_->queue_mu);
  impl_->drained_cv.wait(lock, [&] { return impl_->queue.empty() && !impl_->writing; });
}

RemoteTierStats RedisTier::stats() const {
  const Impl& d = *impl_;
  RemoteTierStats s;
  s.endpoint = d.config.endpoint.text;
  {
    std::lock_guard lock(d.state_mu);
    s.state = d.state;
    s.last_error = d.last_error;
  }
  s.hits = d.hits;
  s.misses = d.misses;
  s.corrupt = d.corrupt;
  s.identity_mismatches = d.identity_mismatches;
  s.too_large = d.too_large;
  s.unavailable = d.unavailable;
  s.errors = d.errors;
  s.reconnects = d.reconnects;
  s.stores = d.stores;
  s.store_failures = d.store_failures;
  {
    std::lock_guard lock(d.queue_mu);
    s.store_queue_bytes = d.queue_bytes;
  }
  return s;
}

std::string RedisTier::redis_key(const std::string& storage_key) const {
  return impl_->config.key_prefix + storage_key;
}

} // namespace fdo::cache
