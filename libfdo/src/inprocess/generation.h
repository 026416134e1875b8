// What the engine's translation units share about a linked generation.
// Internal to libfdo.
#pragma once

#include "engine.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fdo::inprocess {

// The ORC loader, shared by every generation: loads and unloads are
// serialised (a Loader is used from one thread at a time), and a generation
// dropped by its last caller on any thread unloads under the same lock.
struct LoaderBox {
  std::mutex mu;
  std::unique_ptr<jit::Loader> loader;
  std::atomic<int> loaded{0}; // generations alive
};

struct EntryStats {
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> timed_calls{0};
  std::atomic<std::uint64_t> timed_ns{0};
};

// One linked lease. Calls hold a shared_ptr to it; the last one to let go
// unloads the code.
class Generation {
public:
  Generation(std::shared_ptr<LoaderBox> loader, std::size_t entries)
      : loader_(std::move(loader)), stats(entries), sent_calls(entries, 0),
        sent_timed_calls(entries, 0), sent_timed_ns(entries, 0) {
    ++loader_->loaded;
  }
  ~Generation() {
    {
      std::lock_guard lk(loader_->mu);
      program.reset();
    }
    --loader_->loaded;
  }

  std::uint64_t number = 0;
  // The lease its code runs under now (0: none, a kept arm's); changed by
  // flushes only, read by Engine::lease() from any thread.
  std::atomic<std::uint64_t> lease{0};
  std::string storage_key;
  std::int64_t profile_version = 0;
  std::string mode;
  bool sampled = false; // fdod samples this lease's threads (program.sample)
  std::unique_ptr<jit::LoadedProgram> program;
  std::vector<jit::ThunkFn> thunks; // by the engine's entry index
  // The entries' own functions (null: no native symbol), by entry index.
  std::vector<void*> natives;

private:
  std::shared_ptr<LoaderBox> loader_;

public:
  std::vector<EntryStats> stats;
  // What earlier flushes already submitted (flush_mu_).
  std::vector<std::uint64_t> sent_calls, sent_timed_calls, sent_timed_ns;
  std::map<std::string, std::vector<std::uint64_t>> sent_counts;
  std::map<std::string, jit::FunctionValueProfile> sent_values;
};

// Per-thread countdown choosing which calls are timed (engine.cpp): true
// for one call in time_every on this thread.
// Hidden, so that the compiler may inline them into engine.cpp's calls (the
// library is PIC: a default-visibility function could be interposed).
[[gnu::visibility("hidden")]] bool time_this_call(std::uint32_t time_every);
[[gnu::visibility("hidden")]] std::uint64_t now_ns();

// Calls `thunk`, timing one call in `time_every` on this thread; hands the
// time to `timed` when it timed.
template <class Counter>
void run_call(jit::ThunkFn thunk, std::uint64_t* args, std::uint64_t* ret, std::uint32_t time_every,
              Counter&& timed) {
  if (time_this_call(time_every)) {
    std::uint64_t t0 = now_ns();
    thunk(args, ret);
    timed(now_ns() - t0);
  } else {
    thunk(args, ret);
  }
}

} // namespace fdo::inprocess
