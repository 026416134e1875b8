// The store's read connections: opened on first need, lent to one caller at
// a time, kept for reuse (their page caches stay warm).
#include "internal.h"

namespace fdo::profile_store {

Expected<sqlite::Connection> open_reader(const std::string& path,
                                         std::chrono::milliseconds busy_timeout) {
  FDO_TRY(auto db, sqlite::Connection::open(path, sqlite::Access::read_only));
  db.set_busy_timeout(busy_timeout);
  // The file is opened read-only already; query_only makes SQLite refuse a
  // write before it reaches the file layer, should one ever be sent here.
  FDO_TRY_STATUS(db.exec("PRAGMA query_only = ON"));
  return db;
}

ReadPool::ReadPool(std::string path, std::chrono::milliseconds busy_timeout, int capacity)
    : path_(std::move(path)), busy_timeout_(busy_timeout), capacity_(capacity) {}

ReadPool::Lease::~Lease() {
  if (conn_) pool_->give_back(std::move(conn_));
}

Expected<std::unique_ptr<sqlite::Connection>> ReadPool::open_one() const {
  FDO_TRY(auto db, open_reader(path_, busy_timeout_));
  return std::make_unique<sqlite::Connection>(std::move(db));
}

Expected<ReadPool::Lease> ReadPool::acquire() {
  leases_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lock(mu_);
  returned_.wait(lock, [&] { return !idle_.empty() || open_ < capacity_; });
  if (!idle_.empty()) {
    // Most recently returned first: its page cache is the warmest.
    std::unique_ptr<sqlite::Connection> conn = std::move(idle_.back());
    idle_.pop_back();
    return Lease(this, std::move(conn));
  }
  // Reserve the slot, then open without the lock: opening reads the file.
  ++open_;
  lock.unlock();
  auto conn = open_one();
  if (!conn) {
    lock.lock();
    --open_;
    lock.unlock();
    returned_.notify_one();
    return std::move(conn).error();
  }
  return Lease(this, std::move(*conn));
}

void ReadPool::adopt(sqlite::Connection conn) {
  auto owned = std::make_unique<sqlite::Connection>(std::move(conn));
  std::lock_guard lock(mu_);
  ++open_;
  idle_.push_back(std::move(owned));
}

void ReadPool::give_back(std::unique_ptr<sqlite::Connection> conn) {
  // Every read ends its transaction (RAII), but a connection left inside one
  // would pin an old snapshot for every later borrower and keep the WAL from
  // being checkpointed.
  if (conn->in_transaction()) (void)conn->exec("ROLLBACK");
  {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(conn));
  }
  returned_.notify_one();
}

} // namespace fdo::profile_store
