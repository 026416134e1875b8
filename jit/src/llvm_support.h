// Internal helpers shared by the JIT's translation units: one-time LLVM
// initialisation, the llvm::Error -> fdo::Error conversion at the public API
// boundary, diagnostic capture, host target description, reserved names.
#pragma once

#include "fdo/util/expected.h"

#include <chrono>
#include <cstdint>
#include <llvm/IR/LLVMContext.h>
#include <llvm/Support/CodeGen.h>
#include <llvm/Support/Error.h>
#include <llvm/Target/TargetMachine.h>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit::detail {

// Names the pipeline reserves in every compiled object. Programs may not
// define symbols starting with kReservedPrefix.
inline constexpr std::string_view kReservedPrefix = "__fdo_";
inline constexpr std::string_view kThunkPrefix = "__fdo_thunk_";
inline constexpr std::string_view kCountersPrefix = "__fdo_prf_cnts_";
// The function's __profd_ record (NameRef, FunctionPointer, Values, ...):
// the loader reads value profiles through it.
inline constexpr std::string_view kDataPrefix = "__fdo_prf_data_";
// A function's argument value slot array (arg_profile.h), by layout index.
inline constexpr std::string_view kArgSlotsPrefix = "__fdo_arg_slots_";
inline constexpr std::string_view kInitName = "__fdo_init";
inline constexpr std::string_view kFiniName = "__fdo_fini";
inline constexpr std::string_view kDsoHandleName = "__dso_handle";
// Source file name and module identifier of every canonical module: PGO names
// of local functions embed it ("fdo:fdo.local.3"), so it must not vary.
inline constexpr std::string_view kCanonicalSourceName = "fdo";
// Canonical names of local (internal/private) globals, numbered by position.
inline constexpr std::string_view kLocalPrefix = "fdo.local.";

// Registers the native target and sets the process-global LLVM options the
// pipeline depends on (see docs/jit.md, "Process-global LLVM options"). Idempotent, thread-safe.
void ensure_llvm_initialized();

struct HostTarget {
  std::string triple;
  std::string cpu;
  std::string features;    // sorted "+a,+b,-c"
  std::string data_layout; // of the target machine built from the above
};
// Initialises LLVM on first use.
const HostTarget& host_target();

llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
create_host_target_machine(llvm::CodeGenOpt::Level level);

// Microseconds since `start` (a compile's phase times).
inline std::uint64_t micros_since(std::chrono::steady_clock::time_point start) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::steady_clock::now() - start)
                                        .count());
}

// Converts an LLVM error into the project's error model, prefixing context.
fdo::Error to_fdo_error(llvm::Error err, fdo::Errc code, std::string_view context = {});

// Captures the diagnostics an LLVMContext emits (instead of LLVM's default of
// printing them, and exiting on errors). Remarks and notes are dropped.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(llvm::LLVMContext& ctx);
  ~DiagnosticCollector();
  DiagnosticCollector(const DiagnosticCollector&) = delete;
  DiagnosticCollector& operator=(const DiagnosticCollector&) = delete;

  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::vector<std::string>& errors() const { return errors_; }
  void add_warning(std::string msg) { warnings_.push_back(std::move(msg)); }
  // Collects `other`'s diagnostics too (it must outlive this collector).
  void also_collect(llvm::LLVMContext& other);

private:
  static void handle(const llvm::DiagnosticInfo& info, void* self);
  llvm::LLVMContext& ctx_;
  std::vector<llvm::LLVMContext*> others_;
  std::vector<std::string> warnings_;
  std::vector<std::string> errors_;
};

} // namespace fdo::jit::detail
