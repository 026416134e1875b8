#include "fdo/daemon/exit_catch.h"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace fdo::daemon {

namespace {

// The entry call this thread is in, if any (call_catching_exit).
thread_local std::jmp_buf* t_jump = nullptr;
thread_local int t_status = 0;

[[noreturn]] void leave_call(int status) {
  t_status = status;
  std::jmp_buf* jump = t_jump;
  t_jump = nullptr;
  std::longjmp(*jump, 1);
}

[[noreturn]] void program_exit(int status) {
  if (t_jump == nullptr) std::exit(status);
  // What exit() writes before the process ends is in the captured output.
  std::fflush(nullptr);
  leave_call(status);
}

[[noreturn]] void program_underscore_exit(int status) {
  if (t_jump == nullptr) ::_exit(status);
  leave_call(status);
}

// setjmp's frame must be the one that calls the thunk and stays live while
// it runs; no object with a destructor lives in it.
__attribute__((noinline)) int call_frame(jit::ThunkFn thunk, std::uint64_t* slots,
                                         std::uint64_t* ret) {
  std::jmp_buf jump;
  if (setjmp(jump) != 0) return 1;
  t_jump = &jump;
  thunk(slots, ret);
  t_jump = nullptr;
  return 0;
}

} // namespace

std::vector<jit::SymbolOverride> exit_overrides() {
  return {{"exit", reinterpret_cast<void*>(&program_exit)},
          {"_exit", reinterpret_cast<void*>(&program_underscore_exit)},
          {"_Exit", reinterpret_cast<void*>(&program_underscore_exit)}};
}

std::optional<int> call_catching_exit(jit::ThunkFn thunk, std::uint64_t* slots,
                                      std::uint64_t* ret) {
  std::jmp_buf* const outer = t_jump; // never nested in practice; restored all the same
  const int exited = call_frame(thunk, slots, ret);
  t_jump = outer;
  if (exited != 0) return t_status;
  return std::nullopt;
}

} // namespace fdo::daemon
