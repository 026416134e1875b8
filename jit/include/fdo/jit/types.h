// Plain data shared by the JIT's compile side (compile workers) and load side
// (exec workers). Everything here crosses a process boundary as JSON
// (see compiler.h: metadata_to_json / metadata_from_json).
#pragma once

#include "fdo/util/expected.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit {

// Hard limits on what a compile worker accepts. Checked before parsing (bytes)
// and right after parsing (functions, instructions), so a hostile program is
// refused before the expensive phases run.
struct Limits {
  std::size_t max_program_bytes = std::size_t{64} << 20;
  std::size_t max_functions = 100'000;
  std::size_t max_instructions = 4'000'000;
};

// Where and why IR text failed to parse. Errc::parse errors carry it inside
// their message as "line L, column C: message" (1-based); parse_diagnostic()
// recovers it. Bitcode errors have no location (line = column = 0).
struct ParseDiagnostic {
  int line = 0;
  int column = 0;
  std::string message;
};
std::optional<ParseDiagnostic> parse_diagnostic(const fdo::Error& error);

// The type of an entry parameter or return value as the thunk ABI sees it:
// "i1".."i64" (any integer width up to 64), "float", "double", "ptr", and
// "void" (returns only).
enum class AbiKind { void_, integer, f32, f64, ptr };
struct AbiType {
  AbiKind kind = AbiKind::void_;
  unsigned bits = 0; // integer width; 32/64 for f32/f64; 64 for ptr; 0 for void
  std::string to_string() const;
  bool operator==(const AbiType&) const = default;
};
Expected<AbiType> parse_abi_type(std::string_view text);

// An exported function callable through its thunk (docs/jit.md, "Thunk ABI").
struct EntryInfo {
  std::string name;
  std::string return_type;              // AbiType text
  std::vector<std::string> param_types; // AbiType text, one per parameter
  // Integer results are sign-extended into the 64-bit return slot when the
  // function's return carries `signext`, zero-extended otherwise.
  bool return_signext = false;
  bool operator==(const EntryInfo&) const = default;
};

// One instrumented function: what its counters mean. counts read back by the
// loader for `pgo_name` become FunctionProfile{cfg_hash, counts} unchanged.
struct InstrumentedFunction {
  std::string pgo_name;
  std::uint64_t cfg_hash = 0;
  std::uint32_t num_counters = 0;
  // Value-profiling sites, in instrumentation order per kind (their values
  // are read back with LoadedProgram::read_value_profiles).
  std::uint32_t indirect_call_sites = 0;
  std::uint32_t memop_sites = 0;
  // The integer arguments whose values the build profiles, by position, in
  // the order of the function's argument slot array (arg_profile.h); empty
  // when none are.
  std::vector<std::uint32_t> arg_sites{};
  bool operator==(const InstrumentedFunction&) const = default;
};

// One clone an optimized compile made for a dominant argument value (docs/jit.md,
// "Value specialization").
struct Specialization {
  std::string function; // PGO name of the function specialized
  // The arguments bound, by position, and their values (zero-extended).
  std::vector<std::pair<std::uint32_t, std::uint64_t>> args;
  std::uint64_t calls = 0;        // profiled calls of the function
  std::uint64_t matched = 0;      // of them, how many passed the first bound argument's value
  std::uint32_t instructions = 0; // size of the body cloned
  bool operator==(const Specialization&) const = default;
};
// "f (arg 2 = 4: 97% of 1200 calls)", for the explain log.
std::string describe(const Specialization& s);
// Symbol suffixes of a specialized function's two bodies: `f.fdo.spec` (the
// clone for the bound values) and `f.fdo.general`; `f` itself is the guard.
inline constexpr std::string_view kSpecializedSuffix = ".fdo.spec";
inline constexpr std::string_view kGeneralSuffix = ".fdo.general";
// The function whose code a clone's symbol holds (`f` for `f.fdo.spec`), so
// samples and people count it as f's; other symbols unchanged.
std::string_view clone_origin(std::string_view symbol);

// Wall time per compile phase, microseconds.
struct PhaseTimes {
  std::uint64_t parse = 0;
  std::uint64_t canonicalize = 0;
  std::uint64_t instrument_or_annotate = 0;
  std::uint64_t optimize = 0;
  std::uint64_t codegen = 0;
  std::uint64_t total() const {
    return parse + canonicalize + instrument_or_annotate + optimize + codegen;
  }
  bool operator==(const PhaseTimes&) const = default;
};

// Where the code of one IR block lies inside a function symbol of the object
// (docs/perf.md, "Attribution to IR branches"). Read back at compile time from
// the object's line table, where every instruction carries a synthetic
// location naming its block; offsets are from the symbol's start, so the map
// holds wherever the loader links the object.
struct BlockRange {
  std::uint32_t offset = 0; // from the start of the function symbol
  std::uint32_t size = 0;
  // The IR function the block belongs to, by PGO name: the symbol's own
  // function, or a function inlined into it.
  std::string function;
  std::uint32_t block = 0; // block index in the canonical function, in function order
  // Index of the block's conditional branch among the function's conditional
  // branches (the index ProfileDoc's `unpredictable` and mark_unpredictable
  // use); -1: the block ends in no conditional branch.
  std::int32_t branch = -1;
  bool operator==(const BlockRange&) const = default;
};

// The block ranges of one function symbol, sorted by offset, not overlapping.
struct FunctionBlocks {
  std::string symbol; // as FunctionRange::name
  std::vector<BlockRange> ranges;
  bool operator==(const FunctionBlocks&) const = default;
};

// The block at `offset` from the symbol's start in `ranges` (one symbol's,
// sorted by offset), if they cover it.
const BlockRange* find_block(std::span<const BlockRange> ranges, std::uint64_t offset);

// A conditional branch's weights as the profile annotated them.
struct BranchWeight {
  std::uint32_t index = 0; // as BlockRange::branch
  std::uint64_t taken = 0; // first successor
  std::uint64_t not_taken = 0;
  bool operator==(const BranchWeight&) const = default;
};

// A loaded function's code, for attributing hardware samples to functions.
struct FunctionRange {
  std::string name; // symbol name in the object (canonical name for local functions)
  std::uint64_t start = 0;
  std::uint64_t size = 0;
  // Its IR blocks, when the compile metadata carried a block map (empty for
  // objects compiled before it existed).
  std::vector<BlockRange> blocks{};
  bool operator==(const FunctionRange&) const = default;
};

} // namespace fdo::jit
