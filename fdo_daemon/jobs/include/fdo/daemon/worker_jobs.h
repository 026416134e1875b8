// What fdo-worker processes do with a job: the compile role parses,
// fingerprints and compiles client IR with the JIT; the exec role links a
// compiled object, calls an entry through its thunk around a perf counting
// group, and reads the instrumentation counters. Both run only inside worker
// processes (LLVM is not hardened against hostile IR; client code may crash).
//
// Wire protocol (ipc.h messages; header fields or, for typed jobs, the
// TypedBody of an "FDO3" envelope; payload):
//   compile role
//     {"op":"analyze", "limits":{...}}                 payload: program bytes
//       -> {"profile_key", "entries":[...], "function_fingerprints":{...}}
//       (analyze runs once per program registration: its JSON header stays)
//     typed compile, n body bytes    payload: the typed CompileJob
//                                     (compile_messages.h: mode, the profile's
//                                     compile-affecting fields, limits, threads,
//                                     parts, GPU, held parts), the program, then
//                                     the held parts' object set
//       -> typed, n body bytes        payload: the typed CompileReply (explanation,
//                                     how each part was made, metadata length), the
//                                     jit metadata JSON text (jit::metadata_to_json),
//                                     then the object bytes
//   exec role
//     typed exec, n body bytes       payload: the typed ExecJob (exec_messages.h), then
//                                     the object (if attached), then each buffer's bytes,
//                                     except buffers with a descriptor: those are the job's
//                                     fds[fd] (a sealed memfd of exactly `size` bytes),
//                                     mapped copy-on-write
//       -> typed, n body bytes        payload: the typed ExecReply, then the buffers (if
//                                     asked): the StageObservation (stage_observation.h) with
//                                     the return value, the measurement, the counts and value
//                                     profiles (instrumented outputs), the samples and (until
//                                     the daemon knows them) the function ranges (sampled
//                                     stages), and `exited` when the program called exit(n)
//                                     on the entry's thread (exit_catch.h; ret is then
//                                     meaningless); or the outcome missing_object: sent
//                                     without its object, and this worker does not hold the
//                                     key linked; the daemon sends it again with the object.
//     The worker keeps up to cache_entries (default 16; 0: none) linked
//     programs by key, least recently used dropped first; a program with
//     writable globals is restarted before each execution after its first
//     (jit::LoadedProgram::restart: its data back to its initial contents,
//     constructors again) and finished after each (destructors), so every
//     stage starts from its initial state. Each event's reason text (the
//     measurement's and the sampler's) comes only with verbose.
//     {"op":"probe"} -> perf capabilities JSON
#pragma once

#include "fdo/daemon/ipc.h"
#include "fdo/util/expected.h"

#include <memory>
#include <optional>
#include <string>

namespace fdo::daemon {

// Compile jobs need no directory: the indexed profile a compile reads lives
// in a memory file (jit/src/pgo.h), so a compile worker writes no file at all
// and one killed mid-compile leaves nothing behind.
class CompileJobs {
public:
  Expected<Message> handle(const Message& request);
};

class ExecJobs {
public:
  static Expected<std::unique_ptr<ExecJobs>> create();
  ~ExecJobs();
  Expected<Message> handle(const Message& request);
  // The threads the last exec job counted as it ended (after its program
  // ran; nullopt when it ended before that), for the worker loop's check
  // (WorkerLoopOptions::threads_after_job).
  std::optional<std::size_t> threads_after_job() const;

  struct State;

private:
  ExecJobs() = default;
  std::unique_ptr<State> state_;
};

} // namespace fdo::daemon
