// Connections of one PostgreSQL store, opened on first need up to a limit
// and reused. A connection that broke (server restarted, network lost) or
// was left inside a transaction is not given back but closed, so the next
// call opens a fresh one: a lost connection costs the call that saw it
// (Errc::unavailable), not every later call.
//
// `prepare` (the schema check and migrations) runs on the first connection
// that works, before any lease is handed out, and again on later ones until it
// has succeeded once: a store opened while its server is down migrates when it
// first answers. mark_in_use() turns connection refusals into outages.
#pragma once

#include "conn.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace fdo::profile_store::pg {

class Pool {
public:
  using Prepare = std::function<Status(Conn&)>;
  Pool(std::string uri, std::string endpoint, Options options, Prepare prepare)
      : uri_(std::move(uri)), endpoint_(std::move(endpoint)), options_(options),
        prepare_(std::move(prepare)) {}
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  class Lease {
  public:
    Lease(Lease&& o) noexcept : pool_(o.pool_), conn_(std::move(o.conn_)) {}
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();
    Conn& conn() const { return *conn_; }

  private:
    friend class Pool;
    Lease(Pool* pool, std::unique_ptr<Conn> conn) : pool_(pool), conn_(std::move(conn)) {}
    Pool* pool_;
    std::unique_ptr<Conn> conn_;
  };

  Expected<Lease> acquire();
  // From now on the store is in use: a connection the server refuses for a
  // configuration reason (credentials, database: conn.h) fails as
  // Errc::unavailable, with the same message. Open reports those errors as
  // what they are; a store in use (opened while the server was down, or a
  // password changed since) must not make its callers treat the writes they
  // spool as refused and drop them, and retrying works once fixed.
  void mark_in_use() { in_use_.store(true, std::memory_order_release); }
  // A new connection outside the pool (the listener's).
  Expected<Conn> connect_one(const char* application_name) const {
    return Conn::connect(uri_, endpoint_, options_, application_name);
  }

private:
  Expected<Lease> lease_one();
  void give_back(std::unique_ptr<Conn> conn);
  // Runs prepare_ once it is needed; the lease's connection is the one used.
  Status ensure_prepared(Lease& lease);

  const std::string uri_;
  const std::string endpoint_;
  const Options options_;
  const Prepare prepare_;
  std::mutex prepare_mu_; // held across prepare_ only, until it succeeded once
  std::atomic<bool> prepared_{false};
  std::atomic<bool> in_use_{false};
  std::mutex mu_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Conn>> idle_;
  int open_ = 0; // idle + lent + being opened
};

} // namespace fdo::profile_store::pg
