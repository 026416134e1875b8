#include "pool.h"

namespace fdo::profile_store::pg {

Pool::Lease::~Lease() {
  if (pool_ && conn_) pool_->give_back(std::move(conn_));
}

Expected<Pool::Lease> Pool::acquire() {
  FDO_TRY(Lease lease, lease_one());
  if (!prepared_.load(std::memory_order_acquire)) FDO_TRY_STATUS(ensure_prepared(lease));
  return lease;
}

Status Pool::ensure_prepared(Lease& lease) {
  std::lock_guard lock(prepare_mu_);
  if (prepared_.load(std::memory_order_relaxed)) return ok();
  if (prepare_) FDO_TRY_STATUS(prepare_(lease.conn()));
  prepared_.store(true, std::memory_order_release);
  return ok();
}

Expected<Pool::Lease> Pool::lease_one() {
  {
    std::unique_lock lock(mu_);
    returned_.wait(lock, [&] { return !idle_.empty() || open_ < options_.read_connections; });
    if (!idle_.empty()) {
      std::unique_ptr<Conn> c = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(c));
    }
    ++open_; // reserve the slot; connect without the lock
  }
  Expected<Conn> c = Conn::connect(uri_, endpoint_, options_);
  if (!c) {
    {
      std::lock_guard lock(mu_);
      --open_;
      returned_.notify_one();
    }
    const Errc code = c.error().code();
    if (in_use_.load(std::memory_order_acquire) &&
        (code == Errc::permission_denied || code == Errc::not_found))
      return make_error(Errc::unavailable,
                        c.error().message() + "; the store stays unavailable until this is fixed");
    return std::move(c).error();
  }
  return Lease(this, std::make_unique<Conn>(std::move(*c)));
}

void Pool::give_back(std::unique_ptr<Conn> conn) {
  bool keep = conn->reusable();
  std::vector<std::unique_ptr<Conn>> suspect;
  {
    std::lock_guard lock(mu_);
    if (keep) {
      idle_.push_back(std::move(conn));
    } else {
      // A broken connection usually means the server restarted or the
      // network went: the idle ones are as dead, so they go too, and the
      // next calls open fresh ones instead of each failing once.
      --open_;
      open_ -= static_cast<int>(idle_.size());
      suspect.swap(idle_);
    }
    returned_.notify_all();
  }
  // Closed outside the lock.
  conn.reset();
  suspect.clear();
}

} // namespace fdo::profile_store::pg
