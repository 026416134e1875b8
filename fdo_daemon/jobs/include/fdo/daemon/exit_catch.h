// A program that ends with exit(n) inside an exec job (docs/lifecycle.md):
// the exec worker links its programs with these in place of the C library's
// exit, _exit and _Exit, so a call on the thread running the entry returns
// from the entry call with the status instead of ending the worker. The
// worker then reads the stage's counters and measurements as after any call
// and answers with the exit status; the program counts like any other.
//
// Like exit(), nothing of the program runs after the call: its stack is left
// (longjmp, no unwinding), its C++ static destructors run when the worker
// unloads it (which it does at once: a program that exited is not reused).
// A call from any other thread, or outside an entry call, is the C
// library's: the worker process ends, and the pool reports the exit status
// without the stage's counters (worker_pool.h, ExitOutcome::result).
#pragma once

#include "fdo/jit/loader.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace fdo::daemon {

// The overrides for jit::LoaderOptions.
std::vector<jit::SymbolOverride> exit_overrides();

// Calls `thunk(slots, ret)`; the status when the program called one of the
// overrides on this thread during the call, nullopt when it returned.
std::optional<int> call_catching_exit(jit::ThunkFn thunk, std::uint64_t* slots, std::uint64_t* ret);

} // namespace fdo::daemon
