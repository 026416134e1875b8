// Native entries per thread (engine.h, CallerThread) and the epochs that
// tell when a swapped-out generation's code may go: every thread announces
// the epoch it saw at its quiescent points; a generation is unloaded when the
// last holder (the engine's current pointer, a flush, a Hold, a call, or a
// thread between quiescent points) lets it go.
#include "engine.h"
#include "fdo/util/log.h"
#include "generation.h"

#include <algorithm>

namespace fdo::inprocess {

void Engine::publish(std::shared_ptr<Generation> next) {
  current_.store(std::move(next), std::memory_order_release);
  const std::uint64_t e = epoch_.fetch_add(1, std::memory_order_acq_rel) + 1;
  std::lock_guard lk(marks_mu_);
  epoch_began_[e] = std::chrono::steady_clock::now();
}

std::pair<std::shared_ptr<Generation>, std::uint64_t> Engine::current_with_epoch() const {
  // publish() stores the generation before it moves the epoch on: a
  // generation read between two equal epoch reads is that epoch's.
  for (;;) {
    const std::uint64_t e = epoch_.load(std::memory_order_acquire);
    std::shared_ptr<Generation> g = current_.load(std::memory_order_acquire);
    if (epoch_.load(std::memory_order_acquire) == e) return {std::move(g), e};
  }
}

Expected<std::unique_ptr<CallerThread>> Engine::attach() const {
  auto [g, e] = current_with_epoch();
  if (!g) return make_error(Errc::invalid_argument, "in-process engine: no code linked");
  std::string missing;
  for (std::size_t i = 0; i < g->natives.size(); ++i)
    if (g->natives[i] == nullptr)
      missing += (missing.empty() ? "'" : ", '") + entry_names_[i] + "'";
  if (!missing.empty())
    return make_error(Errc::invalid_argument,
                      "in-process engine: no native symbol for entry " + missing +
                          " in the linked object (an entry must be an externally visible "
                          "function to be called natively; the thunk ABI still works)");
  auto mark = std::make_shared<ThreadMark>();
  {
    std::lock_guard lk(marks_mu_);
    marks_.push_back(mark);
  }
  note_thread();
  std::unique_ptr<CallerThread> t(new CallerThread(*this, std::move(mark)));
  t->take(std::move(g), e);
  return t;
}

LagReport Engine::lagging() const {
  LagReport r;
  const std::uint64_t current = epoch_.load(std::memory_order_acquire);
  const auto now = std::chrono::steady_clock::now();
  std::uint64_t oldest_seen = current;
  {
    std::lock_guard lk(marks_mu_);
    std::erase_if(marks_, [](const std::shared_ptr<ThreadMark>& m) {
      return m->closed.load(std::memory_order_acquire);
    });
    for (const std::shared_ptr<ThreadMark>& m : marks_) {
      const std::uint64_t seen = m->seen.load(std::memory_order_acquire);
      if (seen >= current) continue;
      ++r.threads;
      oldest_seen = std::min(oldest_seen, seen);
      // Behind since the first swap after the epoch it saw.
      if (auto it = epoch_began_.upper_bound(seen); it != epoch_began_.end())
        r.oldest = std::max(
            r.oldest, std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second));
    }
    // Epochs no open thread is behind are of no more use.
    epoch_began_.erase(epoch_began_.begin(), epoch_began_.upper_bound(oldest_seen));
  }
  // Linked beyond the current generation and the arms kept on purpose.
  const auto loaded = static_cast<std::size_t>(std::max(loader_->loaded.load(), 0));
  const std::size_t kept = 1 + kept_count_.load(std::memory_order_relaxed);
  r.generations_held = loaded > kept ? loaded - kept : 0;
  return r;
}

void Engine::note_lagging(FlushResult& out) {
  out.lagging = lagging();
  const LagReport& r = out.lagging;
  if (r.threads == 0 || r.oldest < options_.lag_warning) return;
  const std::uint64_t e = epoch_.load(std::memory_order_acquire);
  {
    std::lock_guard lk(marks_mu_);
    if (lag_warned_epoch_ == e) return;
    lag_warned_epoch_ = e;
  }
  log::warning("in-process: " + std::to_string(r.threads) +
               " thread(s) with native entries have passed no quiescent point for " +
               std::to_string(r.oldest.count()) + " ms since newer code was swapped in; " +
               std::to_string(r.generations_held) +
               " older generation(s) stay linked until they do");
}

CallerThread::CallerThread(const Engine& engine, std::shared_ptr<ThreadMark> mark)
    : engine_(engine), epoch_(&engine.epoch_), mark_(std::move(mark)),
      calls_(engine.entry_count(), 0), timed_calls_(engine.entry_count(), 0),
      timed_ns_(engine.entry_count(), 0), time_every_(engine.options_.time_every) {}

CallerThread::~CallerThread() {
  hand_over();
  mark_->closed.store(true, std::memory_order_release);
  g_.reset(); // may unload older code this thread was the last to hold
}

void CallerThread::take(std::shared_ptr<Generation> g, std::uint64_t epoch) {
  g_ = std::move(g);
  seen_ = epoch;
  natives_ = g_->natives;
  mark_->seen.store(epoch, std::memory_order_release);
}

bool CallerThread::quiescent() {
  hand_over();
  if (epoch_->load(std::memory_order_acquire) == seen_) return false;
  auto [g, e] = engine_.current_with_epoch();
  const bool changed = g != g_;
  take(std::move(g), e);
  return changed;
}

void CallerThread::hand_over() {
  if (pending_ == 0 || !g_) return;
  for (std::size_t i = 0; i < calls_.size(); ++i) {
    if (calls_[i] == 0 && timed_calls_[i] == 0) continue;
    g_->stats[i].timed_ns.fetch_add(timed_ns_[i], std::memory_order_relaxed);
    g_->stats[i].timed_calls.fetch_add(timed_calls_[i], std::memory_order_relaxed);
    g_->stats[i].calls.fetch_add(calls_[i], std::memory_order_relaxed);
    calls_[i] = timed_calls_[i] = timed_ns_[i] = 0;
  }
  pending_ = 0;
}

void CallerThread::count(std::size_t entry, std::uint64_t calls, std::uint64_t timed_calls,
                         std::uint64_t timed_ns) {
  calls_[entry] += calls;
  timed_calls_[entry] += timed_calls;
  timed_ns_[entry] += timed_ns;
  // A report of timed calls alone (their calls counted by next()) still
  // has to reach the generation.
  pending_ += calls != 0 ? calls : timed_calls;
  if (pending_ >= kHandOverCalls) hand_over();
}

void CallerThread::call(std::size_t entry, std::uint64_t* args, std::uint64_t* ret) {
  if (epoch_->load(std::memory_order_acquire) != seen_) quiescent();
  run_call(g_->thunks[entry], args, ret, time_every_, [this, entry](std::uint64_t ns) {
    timed_ns_[entry] += ns;
    ++timed_calls_[entry];
  });
  ++calls_[entry];
  if (++pending_ >= kHandOverCalls) hand_over();
}

std::uint64_t CallerThread::generation() const {
  return g_->number;
}

std::string CallerThread::mode() const {
  return g_->mode;
}

std::int64_t CallerThread::profile_version() const {
  return g_->profile_version;
}

} // namespace fdo::inprocess
