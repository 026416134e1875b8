// The compile side of the JIT, used by compile workers: parse and verify a
// program (LLVM IR text or bitcode), canonicalise it, derive its profile key,
// and compile it in one of four modes to an ELF relocatable object for the
// host CPU. See docs/jit.md for the pipeline, the fingerprint definition and
// the thunk ABI.
//
// LLVM is not hardened against hostile IR: call these only in a worker
// process. Every call is self-contained (its own LLVMContext and
// TargetMachine), so concurrent calls from several threads are safe.
#pragma once

#include "fdo/jit/types.h"
#include "fdo/util/expected.h"
#include "fdo/util/profile.h"

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::jit {

// Bumped whenever the canonicalisation, the pass pipeline or the object
// layout changes, so outputs cached under an older identity miss.
// 2: PGO counters promoted out of loops. 3: PGO inside the O-level pipeline
// (pre-inliner and early cleanup first, as clang), value profiling on.
// 4: synthetic block locations and their DWARF line table in the object.
// 5: context-sensitive PGO (cs_instrumented mode, CSIRUse in optimized mode).
// 6: rotates folded into a multiply made explicit before codegen.
// 7: optimized mode compiles functions profiled at 0 calls without
//    optimization (knobs.cold_code baseline, the default).
// 8: a large module may be code-generated in parts, its output an object set.
// 9: parts planned on the submitted module, imports transitive, the profile
//    summary rounded in parts (incremental recompiles).
// 10: cold_code baseline takes the functions that did at most 1/10,000 of the
//    profiled work, not only those profiled at 0 calls.
inline constexpr int kPipelineVersion = 10;

// Partitioned codegen (CompileRequest::threads): the least optimized
// instructions per part, and the most parts one compile makes.
inline constexpr std::size_t kMinPartInstructions = 10'000;
inline constexpr unsigned kMaxPartitions = 64;
inline constexpr std::string_view kFdoVersion = "0.1.0";

struct CompilerIdentity {
  std::string llvm_version;
  std::string fdo_version;
  int pipeline_version = kPipelineVersion;
  std::string triple;
  std::string cpu;
  std::string features; // sorted, comma-separated "+avx2,+bmi,-avx512f,..."
  // GPU targets only (nvptx.h): the driver's version, which JIT-compiles the
  // PTX. Empty for the host CPU, and then not part of canonical().
  std::string driver;

  // Stable serialisation hashed into the initial key.
  std::string canonical() const;
  bool operator==(const CompilerIdentity&) const = default;
};

// The identity of this process's compiler for the CPU it runs on.
CompilerIdentity host_identity();

struct Analysis {
  std::string profile_key; // 64 lower hex: BLAKE3 over the canonical IR
  // Per defined function, keyed by PGO function name (the key of
  // ProfileDoc::functions): a name-independent structural hash.
  std::map<std::string, std::string> function_fingerprints;
  std::vector<EntryInfo> entries;
  // Per defined function: PGO name -> the PGO name it has in the submitted
  // program (`helper`, or `file.c:helper` for a static function: clang's name
  // for it). What people and .profdata exports see.
  std::map<std::string, std::string> source_names;
};

// Parse, verify, canonicalise and fingerprint without compiling.
Expected<Analysis> analyze(std::string_view program_bytes, const Limits& limits = {});

// Whether the compile gives the program's blocks synthetic debug locations
// and returns the block map that attributes samples to IR blocks and branches
// (docs/perf.md). `off` exists to measure what they cost (bench/jit).
enum class BlockLocations { on, off };

// Incremental recompiles (docs/jit.md, "Incremental recompiles"): a part of
// an earlier partitioned compile of the program, offered for reuse. A part
// of this compile whose input has the same `key` takes `object` instead of
// being compiled, if the object's BLAKE3 is `object_hash` (a damaged copy is
// compiled afresh, never linked). `slice` only explains a recompile.
struct HeldPart {
  std::string key;
  std::string slice;
  std::string object_hash;
  std::string_view object; // must outlive compile()
};

// The pipeline's prefix (docs/jit.md, "The pipeline's prefix"): the module
// as the O-level pipeline leaves it just before the profile's first pass,
// kept from an earlier compile of the program that was split at the inliner.
// A compile whose prefix has the same `key` starts from `bitcode` instead of
// running the prefix again, if the bitcode's BLAKE3 is `bitcode_hash` (a
// damaged copy is ignored, the prefix run afresh).
struct HeldPrefix {
  std::string key;
  std::string bitcode_hash;
  std::string_view bitcode; // must outlive compile()
};

// How a compile came by its prefix.
enum class PrefixOrigin {
  reused,        // the held prefix had its key
  not_held,      // none was held
  input_changed, // the held one had another key: the program, what fdo applied
                 // to it before the pipeline, or the pipeline's settings differ
  held_damaged,  // the held one had its key, but not its bitcode's hash
};
std::string_view to_string(PrefixOrigin o);

// The prefix of a compile split at the inliner: what a later compile is
// offered back as a HeldPrefix. `bitcode` is empty when the held prefix was
// taken (the caller holds it already).
struct PrefixBuild {
  std::string key;
  std::string bitcode_hash;
  std::string bitcode;
  PrefixOrigin origin = PrefixOrigin::not_held;
};

struct CompileRequest {
  fdo::CompileMode mode = fdo::CompileMode::plain;
  // Knobs and unpredictable branches apply in every mode when given; counts
  // only in optimized and cs_instrumented mode, which require a profile
  // (optimized mode also applies the profile's context-sensitive counts).
  const fdo::ProfileDoc* profile = nullptr;
  Limits limits;
  // Return the final optimised IR text in CompileResult::ir.
  bool keep_ir = false;
  BlockLocations block_locations = BlockLocations::on;
  // Threads this compile may use (docs/jit.md, "Partitioned compiles"): with
  // more than one, a module of at least twice `min_part_instructions`
  // instructions is compiled in parts, one per `min_part_instructions`, at
  // most `max_parts` (0: as many as threads), `threads` at a time; a
  // smaller one, or threads = 1, in one piece.
  unsigned threads = 1;
  std::size_t min_part_instructions = kMinPartInstructions;
  unsigned max_parts = 0;
  // Parts of an earlier compile of this program (usually its last one in
  // this mode), in their order there; only a compile split at the inliner
  // takes any.
  std::vector<HeldPart> held_parts;
  // The prefix of an earlier compile of this program (any mode: the prefix
  // reads no counts); only a compile split at the inliner takes it.
  std::optional<HeldPrefix> held_prefix;
};

// Where a partitioned compile split the module: before the inliner (each
// part runs the rest of the pipeline and codegen), or for codegen only.
enum class PartitionSplit { none, inliner, codegen };
std::string_view to_string(PartitionSplit s);

// Why a part of a compile split at the inliner has the object it has.
enum class PartOrigin {
  reused,          // a held part had its key
  not_held,        // no held part at its position
  profile_changed, // the held part at its position had another profile slice
  input_changed,   // ... the same slice: its code or the compile's settings differ
  held_damaged,    // a held part had its key, but not its object hash
};
std::string_view to_string(PartOrigin o);

// One part of a compile split at the inliner: what a later compile offers
// back as a HeldPart (with the part's object from the object set).
struct PartBuild {
  std::string key;            // BLAKE3 hex over its bitcode and the compile's settings
  std::string slice;          // BLAKE3 hex over its profile annotations
  std::string object_hash;    // BLAKE3 hex over its object
  std::size_t functions = 0;  // defined here (imported copies not counted)
  std::string first_function; // its first, by canonical name
  PartOrigin origin = PartOrigin::not_held;
};

struct CompileResult {
  std::string profile_key;
  fdo::CompileMode mode = fdo::CompileMode::plain;
  std::string object; // ELF relocatable object bytes
  // Non-empty only in instrumented and cs_instrumented mode, in counter-symbol
  // order (cs_instrumented: every cfg_hash carries kCsHashFlag).
  std::vector<InstrumentedFunction> counters_layout;
  std::vector<EntryInfo> entries;
  std::map<std::string, std::string> function_fingerprints; // as in Analysis
  // Canonical name -> name as submitted, for local (internal/private)
  // symbols, which canonicalisation renames by position.
  std::map<std::string, std::string> local_names;
  std::map<std::string, std::string> source_names; // as in Analysis
  PhaseTimes times;
  std::size_t code_size = 0; // bytes of executable sections in the object
  // The program defines writable global variables, so one execution can leave
  // state behind for the next: executors load it afresh for every execution
  // (every stage starts from the program's initial state, whichever worker
  // runs it). PGO counters are not counted here.
  bool mutable_globals = true;
  // LLVM warnings met while compiling (e.g. stale-profile notices).
  std::vector<std::string> diagnostics;
  std::string ir; // final IR text when CompileRequest::keep_ir
  // Per function symbol, where each canonical IR block's code lies (from the
  // object's line table; docs/perf.md, "Attribution to IR branches").
  std::vector<FunctionBlocks> block_map;
  // Optimized mode: per function (PGO name), the weights the profile gave
  // its conditional branches, by the index `unpredictable` uses.
  std::map<std::string, std::vector<BranchWeight>> branch_weights;
  // Bytes past a 64-byte boundary at which the loader starts the program's
  // text (the profile's Knobs::text_offset; 0 without a profile).
  int text_offset = 0;
  // Optimized and cs_instrumented mode: the functions cloned for a dominant
  // argument value, and the candidates passed over for the budget, one line
  // each (docs/jit.md, "Value specialization").
  std::vector<Specialization> specializations;
  std::vector<std::string> specializations_skipped;
  // Optimized mode: functions that did next to none of the profiled work
  // (those called 0 times among them), compiled without optimization
  // (docs/jit.md, "Cold code").
  std::size_t cold_functions = 0;
  // Parts the module was compiled in (`object` is then an object set,
  // fdo/jit/object_set.h); 1 for a single object. `split` says where the
  // O-level pipeline was cut (docs/jit.md, "Partitioned compiles").
  unsigned partitions = 1;
  PartitionSplit split = PartitionSplit::none;
  // Split at the inliner: one per part, in the object set's order. Not part
  // of the metadata (the compile worker's reply carries the keys).
  std::vector<PartBuild> part_builds;
  // Split at the inliner with a PGO pipeline: its prefix. Not part of the
  // metadata either.
  std::optional<PrefixBuild> prefix;
};

Expected<CompileResult> compile(std::string_view program_bytes, const CompileRequest& request);

// Everything in a CompileResult except the object bytes, as JSON (for the
// worker protocol and for storing beside the object in the cache), and back.
nlohmann::json metadata_to_json(const CompileResult& result);
// The result's `object` is left empty.
Expected<CompileResult> metadata_from_json(const nlohmann::json& j);

} // namespace fdo::jit
