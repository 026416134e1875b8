// The optimization profile document: the shared vocabulary between the
// profile store (which keeps it), the JIT (which compiles with it) and the
// daemon (which rewrites it from feedback). JSON form described by
// schemas/profile.schema.json.
//
// Compile-affecting fields: format, knobs, functions[*].{cfg_hash, counts,
// unpredictable, indirect_calls, memop_sizes, layout,
// arg_values}, cs_functions[*] (the same),
// outside_functions[*].{cfg_hash, counts}, gpu.launch_bounds. Everything else
// (provenance, hardware observations, the guard's record, reprofile_of, per-function fingerprints
// and source names) is bookkeeping and never changes the digest, so rewriting bookkeeping never
// causes a recompile.
#pragma once

#include "fdo/util/expected.h"
#include "fdo/util/gpu_profile.h"
#include "fdo/util/guard_record.h"

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo {

// cs_instrumented: the optimized compile (the profile applied) with
// context-sensitive instrumentation after the inliner (LLVM's CSIRInstr), the
// second instrumented round of context-sensitive PGO (docs/jit.md).
enum class CompileMode { plain, instrumented, optimized, cs_instrumented };
std::string_view to_string(CompileMode mode);
Expected<CompileMode> parse_compile_mode(std::string_view s);

// What the optimized compile does with the functions the profile saw called 0
// times (docs/jit.md, "Cold code"): compile them without optimization, as a
// tiered JIT leaves code it has not seen run to its baseline tier (default),
// or optimize them like the rest.
enum class ColdCode { baseline, optimize };
std::string_view to_string(ColdCode c);
Expected<ColdCode> parse_cold_code(std::string_view s);

struct Knobs {
  int opt_level = 2;  // 0..3: the PassBuilder O-level
  int size_level = 0; // 0..2: 1 = Os, 2 = Oz (i-cache pressure)
  bool unroll = true;
  bool vectorize = true;
  std::optional<int> inline_threshold; // unset: the O-level's default
  // Operator override of the compile mode; unset: derived (see choose_mode).
  std::optional<CompileMode> mode;
  // Where the program's code starts in a 64-byte window of memory: the
  // loader puts the text this many bytes past a 64-byte boundary (0, 16, 32
  // or 48; docs/jit.md, "Text offset"). Which offset runs a hot loop fastest
  // depends on how its branches and fetch blocks fall across cache lines, so
  // no fixed choice is right for every program: the guard times the offsets
  // as knob variants (docs/guard.md). 0, the default, is left out of the JSON,
  // so documents without it keep their digest.
  int text_offset = 0;
  // Value specialization (docs/jit.md, "Value specialization"): the optimized
  // compile clones a hot function for an argument value at least this share
  // (percent) of its profiled calls passed, behind a guard that sends every
  // other value to the general body; 0 turns it off, and with it the argument
  // value profiling of instrumented builds. spec_max_clones bounds how many
  // functions are cloned (the hottest first). Left out of the JSON at their
  // defaults, so documents written before them keep their digest.
  int spec_min_share = kDefaultSpecMinShare;
  int spec_max_clones = kDefaultSpecMaxClones;
  // Left out of the JSON at its default (baseline).
  ColdCode cold_code = ColdCode::baseline;

  static constexpr int kDefaultSpecMinShare = 80;
  static constexpr int kDefaultSpecMaxClones = 4;

  bool operator==(const Knobs&) const = default;
};
// The byte granularity and the bound of Knobs::text_offset (a multiple of
// kTextOffsetStep below kTextOffsetWindow).
inline constexpr int kTextOffsetStep = 16;
inline constexpr int kTextOffsetWindow = 64;

// What one value-profiling site saw: {value, count} pairs, most frequent first.
using ValueSite = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

// What argument value profiling saw for one integer argument of a function:
// the most frequent values (zero-extended to 64 bits) with their counts, most
// frequent first, and how many calls passed a value the per-argument table
// had no room to keep (docs/jit.md, "Value specialization").
struct ArgValues {
  std::uint32_t arg = 0; // the argument's position in the function's parameter list
  ValueSite values{};
  std::uint64_t other = 0;
  std::uint64_t total() const {
    std::uint64_t n = other;
    for (const auto& [value, count] : values)
      n += count;
    return n;
  }
  bool operator==(const ArgValues&) const = default;
};

// Where a function's code goes (docs/perf.md, "i-cache layout"): `hot`
// functions are placed together at the start of the object's text, `cold` ones
// are optimized for size and placed after everything else. Compile-affecting.
enum class FunctionLayout { normal, hot, cold };
std::string_view to_string(FunctionLayout layout);

// Every member has a default member initializer, so aggregate initialisation
// may name a prefix of them (and -Wmissing-field-initializers stays quiet).
struct FunctionProfile {
  std::uint64_t cfg_hash = 0;                 // PGO CFG hash of the instrumented function
  std::vector<std::uint64_t> counts{};        // PGO counters, in the instrumentation's order
  std::vector<std::uint32_t> unpredictable{}; // conditional-branch indexes to mark !unpredictable
  std::string fingerprint{};                  // per-function canonical hash (bookkeeping)
  // The function's PGO name in the program as submitted (before local symbols
  // were renamed by position): `helper` for an exported function, `file.c:helper`
  // for a static one, as clang names it. Bookkeeping for people and exports;
  // empty in documents written before it existed (display falls back to the key).
  std::string source_name{};
  // Value profiles, one entry per site in the instrumentation's order
  // (compile-affecting; empty when value profiling saw nothing): indirect
  // call targets named by the MD5 of their PGO name (as LLVM's indirect-call
  // promotion looks them up), and memcpy/memset/memmove sizes in bytes.
  std::vector<ValueSite> indirect_calls{};
  std::vector<ValueSite> memop_sizes{};
  // Placement of the function's code from sampled i-cache misses
  // (compile-affecting; `normal`, omitted from the JSON, in older documents).
  FunctionLayout layout = FunctionLayout::normal;
  // Argument value profiles of the instrumented build, by argument
  // (compile-affecting: value specialization; empty when none were taken).
  std::vector<ArgValues> arg_values{};

  bool operator==(const FunctionProfile&) const = default;
};

// LLVM marks the CFG hash of a context-sensitive record with this bit
// (NamedInstrProfRecord::setCSFlagInHash, bit 60): CS records live beside the
// ordinary ones under the same function name.
inline constexpr std::uint64_t kCsHashFlag = std::uint64_t{1} << 60;
inline bool is_cs_hash(std::uint64_t cfg_hash) {
  return (cfg_hash & kCsHashFlag) != 0;
}

struct Provenance {
  std::string reason;     // "feedback", "import", "operator", ...
  std::string created_at; // RFC 3339 UTC
  std::string host;
  std::int64_t stage = 0; // stage number that triggered the rewrite
  std::string program;    // IK of the program whose feedback produced it

  bool operator==(const Provenance&) const = default;
};

struct ProfileDoc {
  static constexpr int kFormat = 1;
  int format = kFormat;
  Knobs knobs;
  std::map<std::string, FunctionProfile> functions; // by PGO function name
  // Context-sensitive counts (the cs_instrumented round), by PGO name of the
  // function they were counted in after inlining; every cfg_hash carries
  // kCsHashFlag. Compile-affecting; empty in documents written before
  // context-sensitive PGO (they read, and digest, as before).
  std::map<std::string, FunctionProfile> cs_functions;
  // Records of an imported profile (`fdoctl profile import`) that seed no
  // function of the program: functions of the rest of the profiled program
  // (the driver's `main`), or whose CFG hash or counter count did not match.
  // Only cfg_hash, counts and source_name (the record's name in the file) are
  // set. They are written into the indexed profile the optimized compile reads,
  // under names no function has, so that LLVM's profile summary (the hot and
  // cold count thresholds the inliner and the other passes use) is the one of
  // the whole training run, as clang's `-fprofile-use` sees it, not of the
  // seeded functions alone. Compile-affecting; empty (and absent from the JSON
  // and the digest) in every document not made by an import. Feedback replaces
  // the counts with the program's own and leaves these out.
  std::map<std::string, FunctionProfile> outside_functions;
  nlohmann::json hardware = nlohmann::json::object(); // counter findings (bookkeeping)
  Provenance provenance;
  GuardRecord guard; // the live A/B guard's decisions (bookkeeping; guard_record.h)
  // A drift re-profile (docs/lifecycle.md) records the version whose counts
  // it checks: when the re-profile counts the same, that version's profile is
  // served again. 0 (absent from the JSON): not a re-profile. Bookkeeping.
  std::int64_t reprofile_of = 0;
  // NVPTX programs (docs/gpu.md): tuned launches and the guard's launch-bound
  // trials (bookkeeping) and the launch bounds kept (compile-affecting), per
  // GPU architecture. Empty, and absent from the JSON and the digest, in every
  // other document.
  GpuProfile gpu;

  bool operator==(const ProfileDoc&) const = default;
};

nlohmann::json to_json(const ProfileDoc& doc);
// The knobs alone, in the document's form (`knobs` member), and back.
nlohmann::json to_json(const Knobs& knobs);
Expected<Knobs> knobs_from_json(const nlohmann::json& j);
// Validates types and ranges; errors name the offending field.
Expected<ProfileDoc> profile_from_json(const nlohmann::json& j);
Expected<ProfileDoc> parse_profile(std::string_view json_text);

// Sorted keys, no insignificant whitespace.
std::string canonical_json(const nlohmann::json& j);
// BLAKE3 hex of the canonical form of the compile-affecting fields only
// (written from the struct, profile_write.cpp). Throws
// nlohmann::json::type_error for a function name that is not UTF-8, as
// canonical_json does.
std::string profile_digest(const ProfileDoc& doc);

// What a document becomes once written and read back, without its JSON:
// fails where profile_from_json(to_json(doc)) would (a value the format
// forbids, such as opt_level 9 or a context-sensitive hash without its flag;
// errors name the field), and otherwise leaves `doc` equal to what that
// returns (null hardware an empty object, an empty guard record or GPU part
// the default, non-finite hardware figures null, a negative reprofile_of 0).
Status normalize_profile(ProfileDoc& doc);
// canonical_json(to_json(doc)), byte for byte, written straight from the
// struct; invalid_argument for a string that is not UTF-8.
Expected<std::string> profile_text(const ProfileDoc& doc);
// profile_text(doc) and profile_digest(doc) for the cost of writing the text
// once: the digested form is cut from the document's text (the store does
// this on every rewrite, for documents of thousands of functions).
struct ProfileTextAndDigest {
  std::string text;
  std::string digest;
};
Expected<ProfileTextAndDigest> profile_text_and_digest(const ProfileDoc& doc);
// Digest used for "no profile at all" (stage 0 of a new profile key).
std::string_view no_profile_digest();

// The mode a program compiles in given its current profile (nullptr = none):
// an operator override wins; no counts yet -> instrumented; counts -> optimized.
CompileMode choose_mode(const ProfileDoc* doc);

// The name to show people for functions[pgo_name]: its source name when the
// document records one, else the key itself.
std::string display_name(const std::string& pgo_name, const FunctionProfile& f);

} // namespace fdo
