// LLVM's IR-level PGO, wired for a JIT without compiler-rt. Instrumentation
// and use run inside the PassBuilder pipeline (PGOOptions, as clang's
// -fprofile-generate / -fprofile-use do: pre-inliner and early cleanup first);
// this file supplies what the pipeline needs around them: the counter layout
// read off the instrumentation intrinsics, counters and records exposed to
// the loader by name, the indexed profile written from a ProfileDoc (counts
// and value profiles), and the profile's per-branch !unpredictable marks.
#pragma once

#include "fdo/jit/profdata.h"
#include "fdo/jit/types.h"
#include "fdo/util/fd.h"
#include "fdo/util/profile.h"

#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fdo::jit::detail {

// Each instrumented function's PGO name, CFG hash, counter count and value
// sites per kind, in module order, read off the llvm.instrprof.* intrinsics
// (call between PGOInstrumentationGen and the InstrProfiling lowering).
std::vector<InstrumentedFunction> read_layout(const llvm::Module& m);

// After lowering: fails when the module calls into the profiling runtime for
// anything but the value-profiling hooks the exec worker provides.
llvm::Error check_runtime_calls(const llvm::Module& m);

// After optimisation: gives the counter array and the __profd_ record of
// layout[i] the exported names kCountersPrefix + i and kDataPrefix + i (they
// are private after lowering), so the loader can find them. Fails if a
// counter array has disappeared.
llvm::Error expose_counters(llvm::Module& m, const std::vector<InstrumentedFunction>& layout);

// Prefix of the canonical record names of ProfileDoc::outside_functions in
// the indexed profile (no module function's PGO name starts with it).
inline constexpr const char* kOutsideRecordPrefix = "fdo.outside:";

// The profile's counts and value profiles as an IR-level indexed profile
// (.profdata), or nullptr when it holds no counts. Records are named per
// `names` (indirect-call targets too). outside_functions are added too (they
// only shape the profile summary), but alone make no profile.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
write_indexed_profile(const fdo::ProfileDoc& profile, RecordNames names);

// An indexed profile for PGOInstrumentationUse, which in LLVM 16 reads only
// a named file: the bytes live in a memory file (memfd) named to LLVM as
// /proc/self/fd/N. Nothing is written to any directory, so nothing is left
// behind by a compile that is killed, and a sandboxed compile worker needs no
// writable directory. The memory file closes when this is destroyed.
class ProfileFile {
public:
  // nullopt when the profile holds no counts.
  static llvm::Expected<std::optional<ProfileFile>> write(const fdo::ProfileDoc& profile);
  ProfileFile(ProfileFile&& o) noexcept = default;
  ProfileFile& operator=(ProfileFile&&) = delete;
  ~ProfileFile() = default;
  const std::string& path() const { return path_; }

private:
  ProfileFile(fdo::Fd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  fdo::Fd fd_;
  std::string path_;
};

// Puts !unpredictable on the conditional branches the profile lists, by
// index among the function's conditional `br` instructions in block order
// (docs/jit.md, "Branch index convention"). Indexes out of range are
// reported in `warnings` and skipped.
void mark_unpredictable(llvm::Module& m, const fdo::ProfileDoc& profile,
                        std::vector<std::string>& warnings);

// The conditional branches of `f`, in the branch index convention's order.
std::vector<llvm::BranchInst*> conditional_branches(llvm::Function& f);

} // namespace fdo::jit::detail
