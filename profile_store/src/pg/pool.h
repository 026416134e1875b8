// Connections of one PostgreSQL store, opened on first need up to a limit
// and reused. A connection that broke (server restarted, network lost) or
// was left inside a transaction is not given back but closed, so the next
// call opens a fresh one: a lost connection costs the call that saw it
// (Errc::unavailable), not every later call.
#pragma once

#include "conn.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

namespace fdo::profile_store::pg {

class Pool {
public:
  Pool(std::string uri, std::string endpoint, Options options)
      : uri_(std::move(uri)), endpoint_(std::move(endpoint)), options_(options) {}
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
  // A new connection outside the pool (the listener's).
  Expected<Conn> connect_one(const char* application_name) const {
    return Conn::connect(uri_, endpoint_, options_, application_name);
  }

private:
  void give_back(std::unique_ptr<Conn> conn);

  const std::string uri_;
  const std::string endpoint_;
  const Options options_;
  std::mutex mu_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<Conn>> idle_;
  int open_ = 0; // idle + lent + being opened
};

} // namespace fdo::profile_store::pg
