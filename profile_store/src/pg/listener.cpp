#include "listener.h"

#include "fdo/util/log.h"

#include <chrono>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace fdo::profile_store::pg {

// --- cache ---

std::optional<std::uint64_t> ProfileCache::begin_read() const {
  std::lock_guard lock(mu_);
  if (!live_) return std::nullopt;
  return epoch_;
}

std::optional<std::optional<StoredProfile>> ProfileCache::current(const std::string& pk) const {
  std::lock_guard lock(mu_);
  if (!live_) return std::nullopt;
  auto it = entries_.find(pk);
  if (it == entries_.end()) return std::nullopt;
  return it->second.current;
}

std::optional<std::optional<ProfileSummary>> ProfileCache::summary(const std::string& pk) const {
  std::lock_guard lock(mu_);
  if (!live_) return std::nullopt;
  auto it = entries_.find(pk);
  if (it == entries_.end()) return std::nullopt;
  return it->second.summary;
}

ProfileCache::Entry* ProfileCache::slot(const std::string& pk, std::uint64_t epoch) {
  if (!live_ || epoch != epoch_) return nullptr; // changed (or went down) since the read began
  if (entries_.size() >= kMaxEntries && !entries_.contains(pk)) entries_.clear();
  return &entries_[pk];
}

void ProfileCache::store_current(const std::string& pk, std::uint64_t epoch,
                                 const std::optional<StoredProfile>& value) {
  std::lock_guard lock(mu_);
  if (Entry* e = slot(pk, epoch)) e->current = value;
}

void ProfileCache::store_summary(const std::string& pk, std::uint64_t epoch,
                                 const std::optional<ProfileSummary>& value) {
  std::lock_guard lock(mu_);
  if (Entry* e = slot(pk, epoch)) e->summary = value;
}

void ProfileCache::invalidate(const std::string& pk) {
  std::lock_guard lock(mu_);
  ++epoch_;
  entries_.erase(pk);
}

void ProfileCache::set_live(bool live) {
  std::lock_guard lock(mu_);
  ++epoch_;
  entries_.clear();
  live_ = live;
}

bool ProfileCache::live() const {
  std::lock_guard lock(mu_);
  return live_;
}

// --- listener ---

Listener::Listener(Connect connect, ProfileCache& cache)
    : connect_(std::move(connect)), cache_(cache), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  thread_ = std::thread([this] { run(); });
}

Listener::~Listener() {
  stop_.store(true);
  std::uint64_t one = 1;
  if (wake_.get() >= 0) (void)!::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  cache_.set_live(false);
}

void Listener::run() {
  using namespace std::chrono;
  milliseconds backoff{100};
  while (!stop_.load()) {
    Expected<Conn> conn = connect_();
    if (conn) {
      if (auto listening = conn->exec_script(std::string("LISTEN ") + kChannel); listening) {
        // Anything sent while nobody listened is lost: start from nothing.
        cache_.set_live(true);
        backoff = milliseconds{100};
        serve(*conn);
        cache_.set_live(false);
        if (stop_.load()) break;
        log::warning("profile store " + conn->endpoint() +
                     ": change listener lost its connection; reads bypass the cache until it "
                     "reconnects");
      }
    }
    // Wait for the backoff (or stop).
    pollfd p{wake_.get(), POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(backoff.count()));
    backoff = std::min(backoff * 2, milliseconds{2000});
  }
}

void Listener::serve(Conn& conn) {
  PGconn* c = conn.handle();
  while (!stop_.load()) {
    pollfd fds[2] = {{PQsocket(c), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    // The timeout bounds how long a silently dead peer goes unnoticed.
    int n = ::poll(fds, 2, 1000);
    if (n < 0 && errno != EINTR) return;
    if (fds[1].revents) return;
    if (n == 0) {
      // Idle: an empty query proves the connection (and the server) alive.
      if (PQstatus(c) != CONNECTION_OK || !conn.exec_script("SELECT 1")) return;
    } else if (fds[0].revents) {
      if (!PQconsumeInput(c)) return;
    }
    while (PGnotify* note = PQnotifies(c)) {
      cache_.invalidate(note->extra);
      PQfreemem(note);
    }
    if (PQstatus(c) != CONNECTION_OK) return;
  }
}

} // namespace fdo::profile_store::pg
