// The load side of the JIT, used by exec workers: link compiled objects into
// this process with ORC (JITLink), call entries through their thunks, read
// and reset PGO counters, report where each function's code lies.
//
// Undefined symbols resolve against this process (so programs may call libc
// and libm); anything else unresolved fails the load with Errc::link naming
// the symbol. A Loader and its programs are used from one thread at a time.
#pragma once

#include "fdo/jit/types.h"
#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit {

struct CompileResult;
class LoadedProgram;
namespace detail {
class ValueProfiles;
}

// One block of a linked program's writable memory (data, bss, counters).
struct WritableBlock {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  bool zero_fill = false; // starts as zeros (bss): no initial contents kept
};

// One function's value profiles, site by site in instrumentation order, as
// FunctionProfile::indirect_calls / memop_sizes expect them.
struct FunctionValueProfile {
  std::vector<fdo::ValueSite> indirect_calls; // MD5 of the target's PGO name, count
  std::vector<fdo::ValueSite> memop_sizes;    // size in bytes (range representative), count
  std::vector<fdo::ArgValues> arguments;      // argument value profiles (arg_profile.h)
  bool operator==(const FunctionValueProfile&) const = default;
};

// A definition every program linked by a Loader resolves to instead of the
// process's own symbol of that name (e.g. the exec worker's exit(), which
// returns from the entry call instead of ending the worker: worker_jobs.h).
struct SymbolOverride {
  std::string name;
  void* address = nullptr;
};

struct LoaderOptions {
  std::vector<SymbolOverride> overrides;
};

class Loader {
public:
  static Expected<std::unique_ptr<Loader>> create(LoaderOptions options = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Links `object` (from compile()) and runs its constructors. `entries` and
  // `layout` come from the same CompileResult (or its JSON metadata). The
  // program's text starts `text_offset` bytes past a 64-byte boundary (a
  // multiple of 16 below 64; CompileResult::text_offset, docs/jit.md "Text
  // offset"). The returned program must not outlive this Loader.
  Expected<std::unique_ptr<LoadedProgram>> load(std::string_view object,
                                                std::span<const EntryInfo> entries,
                                                std::span<const InstrumentedFunction> layout,
                                                int text_offset = 0);
  // Same, taking entries, layout and text offset from compile metadata (its
  // object field is ignored).
  Expected<std::unique_ptr<LoadedProgram>> load(std::string_view object,
                                                const CompileResult& metadata);

  struct Impl;

private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The uniform entry signature (docs/jit.md, "Thunk ABI"): one 8-byte slot per
// parameter in `args`, the result in `*ret` (may be null for void entries).
using ThunkFn = void (*)(std::uint64_t* args, std::uint64_t* ret);

class LoadedProgram {
public:
  ~LoadedProgram(); // unloads (runs destructors, frees code and data)
  LoadedProgram(const LoadedProgram&) = delete;
  LoadedProgram& operator=(const LoadedProgram&) = delete;

  const std::vector<EntryInfo>& entries() const { return entries_; }
  Expected<ThunkFn> thunk(std::string_view entry) const;
  // Calls `entry` with one slot per parameter; returns the result slot (0 for
  // void). Fails (without calling) on an unknown entry or wrong arity.
  Expected<std::uint64_t> call(std::string_view entry, std::span<const std::uint64_t> args) const;

  // PGO counters by PGO function name, each in the order an indexed profile
  // expects: store as FunctionProfile{cfg_hash from the layout, counts}.
  std::map<std::string, std::vector<std::uint64_t>> read_counters() const;
  // Also forgets the value profiles.
  void reset_counters();
  const std::vector<InstrumentedFunction>& counters_layout() const { return layout_; }

  // Value profiles of the functions that have value sites (indirect calls,
  // memcpy/memset/memmove), by PGO name. Indirect-call targets outside the
  // program are left out.
  std::map<std::string, FunctionValueProfile> read_value_profiles() const;

  // Every function of the object, sorted by start address.
  const std::vector<FunctionRange>& function_ranges() const { return ranges_; }

  // Ends an execution as unloading would, keeping the program linked: runs
  // its destructors (C++ static destructors, then llvm.global_dtors). No
  // call may be made until restart(). Does nothing the second time.
  void finish();
  // Puts the program back in the state its load left it in, without linking
  // it again: destructors (unless finish() ran them), every writable block
  // back to its contents at link time (so globals and counters start over,
  // value profiles are forgotten), constructors. For a program with writable
  // globals, the next execution then sees what a fresh load would give it,
  // at the cost of a copy of its writable data (docs/jit.md, "Restarting a
  // program"). Memory the program allocated and kept is not returned.
  Status restart();
  // The program's writable blocks, by address.
  const std::vector<WritableBlock>& writable_blocks() const { return writable_; }

  // Runs destructors (unless finish() ran them) and frees the program now;
  // later calls fail. The destructor does this when it was not done explicitly.
  Status unload();

private:
  friend class Loader;
  LoadedProgram() = default;

  Loader::Impl* loader_ = nullptr;
  void* dylib_ = nullptr; // llvm::orc::JITDylib*
  std::vector<EntryInfo> entries_;
  std::vector<ThunkFn> thunks_; // parallel to entries_
  std::vector<InstrumentedFunction> layout_;
  std::vector<std::uint64_t*> counters_; // parallel to layout_
  std::unique_ptr<detail::ValueProfiles> values_;
  std::vector<FunctionRange> ranges_;
  std::vector<WritableBlock> writable_; // sorted by address
  std::string initial_data_;   // contents at link time of the non-zero-fill blocks, in order
  bool finished_ = false;      // destructors ran (finish())
  void (*init_)() = nullptr;   // __fdo_init, when the program has constructors
  void (*fini_)() = nullptr;   // __fdo_fini, when the program has destructors
  void* dso_handle_ = nullptr; // its __dso_handle, when C++ code uses __cxa_atexit
};

} // namespace fdo::jit
