// The PGO round trip without compiler-rt: instrumented compile, counters read
// back through the loader, the profile fed to the optimized compile.
#include "fdo/jit/annotate.h"
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "fdo/jit/profdata.h"
#include "jit_test_util.h"
#include "pgo_test_util.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <llvm/ProfileData/InstrProfReader.h>
#include <llvm/ProfileData/InstrProfWriter.h>
#include <llvm/Support/MemoryBuffer.h>
#include <map>
#include <regex>

using namespace fdo;
using namespace fdo::jit;
using namespace fdo::jit::test;

namespace {

// The weights of the branch in `ir` whose successors are %hot and %cold, as
// {weight towards %hot, weight towards %cold}.
std::pair<std::uint64_t, std::uint64_t> hot_cold_weights(const std::string& ir) {
  static const std::regex branch(
      R"(br i1 %[\w.]+, label %(hot|cold), label %(hot|cold), !prof !(\d+))");
  std::smatch m;
  std::string body = function_body(ir, "run");
  REQUIRE(std::regex_search(body, m, branch));
  const bool hot_first = m[1] == "hot";
  const std::string id = m[3];
  const std::regex weights("^!" + id + R"( = !\{!"branch_weights", i32 (\d+), i32 (\d+)\})");
  for (const std::string& line : lines_of(ir)) {
    std::smatch w;
    if (std::regex_search(line, w, weights)) {
      std::uint64_t a = std::stoull(w[1]), b = std::stoull(w[2]);
      return hot_first ? std::pair{a, b} : std::pair{b, a};
    }
  }
  FAIL("no branch_weights !" << id);
  return {};
}

bool has_hash_mismatch(const CompileResult& r) {
  for (const std::string& d : r.diagnostics)
    if (contains(d, "hash mismatch")) return true;
  return false;
}

} // namespace

TEST_CASE("instrumented counts of a 900/100 branch reach the optimized IR", "[jit][pgo]") {
  Instrumented i = load_instrumented("loop_branch.ll");
  REQUIRE(i.compiled.counters_layout.size() == 4); // on_hot, on_cold, run, cold_total
  for (const InstrumentedFunction& f : i.compiled.counters_layout) {
    CHECK(f.num_counters >= 1);
    CHECK(f.cfg_hash != 0);
  }
  auto before = i.program->read_counters();
  for (const auto& [name, counts] : before)
    for (std::uint64_t c : counts)
      CHECK(c == 0);

  auto hot = i.program->call("run", std::vector<std::uint64_t>{1000});
  REQUIRE(hot.has_value());
  CHECK(*hot == 900); // the program itself counted

  // Single-block functions have one counter: their entry count.
  auto counts = i.program->read_counters();
  CHECK(counts.at("on_hot") == std::vector<std::uint64_t>{900});
  CHECK(counts.at("on_cold") == std::vector<std::uint64_t>{100});
  CHECK(counts.at("cold_total") == std::vector<std::uint64_t>{0});
  ProfileDoc profile = profile_from(i);

  SECTION("without optimisation the annotated branch carries exactly 900/100") {
    // Gathered and applied at O0 (no pre-inliner, no early cleanup).
    ProfileDoc o0;
    o0.knobs.opt_level = 0;
    Instrumented i0 = load_instrumented("loop_branch.ll", &o0);
    REQUIRE(i0.program->call("run", std::vector<std::uint64_t>{1000}).has_value());
    profile = profile_from(i0);
    profile.knobs.opt_level = 0;
    CompileResult o = compile_or_throw(fixture("loop_branch.ll"),
                                       request(CompileMode::optimized, &profile, true));
    CHECK_FALSE(has_hash_mismatch(o));
    CHECK(o.diagnostics.empty());
    CHECK(hot_cold_weights(o.ir) == std::pair<std::uint64_t, std::uint64_t>{900, 100});
    CHECK(contains(function_body(o.ir, "run"), "!prof"));
  }
  SECTION("after O2 the branch weights keep the ratio and the module has a profile summary") {
    CompileResult o = compile_or_throw(fixture("loop_branch.ll"),
                                       request(CompileMode::optimized, &profile, true));
    CHECK_FALSE(has_hash_mismatch(o));
    CHECK(o.diagnostics.empty());
    auto [to_hot, to_cold] = hot_cold_weights(o.ir);
    REQUIRE(to_cold > 0);
    CHECK(to_hot * 100 == to_cold * 900);
    CHECK(contains(o.ir, R"(!"ProfileSummary")"));
    CHECK(contains(o.ir, R"(!{!"ProfileFormat", !"InstrProf"})"));
    CHECK(contains(o.ir, R"(!{!"function_entry_count", i64 900})")); // on_hot
    CHECK(contains(o.ir, R"(!{!"function_entry_count", i64 1})"));   // run
    CHECK(o.counters_layout.empty());
    // The optimized object runs and computes the same thing.
    auto p = i.loader->load(o.object, o);
    if (!p) FAIL(p.error().describe());
    CHECK((*p)->call("run", std::vector<std::uint64_t>{50}).value_or(0) == 45);
  }
}

TEST_CASE("counters accumulate across calls and reset to zero", "[jit][pgo]") {
  Instrumented i = load_instrumented("loop_branch.ll");
  REQUIRE(i.program->call("run", std::vector<std::uint64_t>{1000}).has_value());
  REQUIRE(i.program->call("run", std::vector<std::uint64_t>{10}).has_value());
  auto counts = i.program->read_counters();
  CHECK(counts.at("on_hot") == std::vector<std::uint64_t>{909});
  CHECK(counts.at("on_cold") == std::vector<std::uint64_t>{101});
  i.program->reset_counters();
  for (const auto& [name, c] : i.program->read_counters())
    for (std::uint64_t v : c)
      CHECK(v == 0);
  REQUIRE(i.program->call("run", std::vector<std::uint64_t>{20}).has_value());
  CHECK(i.program->read_counters().at("on_cold") == std::vector<std::uint64_t>{2});
}

TEST_CASE("local functions are instrumented under canonical PGO names", "[jit][pgo]") {
  ProfileDoc o0; // keep the helper out of line, to see its count
  o0.knobs.opt_level = 0;
  Instrumented i = load_instrumented("fp_base.ll", &o0);
  std::vector<std::string> names;
  for (const InstrumentedFunction& f : i.compiled.counters_layout)
    names.push_back(f.pgo_name);
  CHECK(names == std::vector<std::string>{"fdo:fdo.local.1", "compute"});
  REQUIRE(i.program->call("compute", std::vector<std::uint64_t>{8}).value_or(0) == 60);
  auto counts = i.program->read_counters();
  CHECK(counts.at("fdo:fdo.local.1") == std::vector<std::uint64_t>{8});

  // The same profile applies to the renamed program: same canonical IR.
  ProfileDoc profile = profile_from(i);
  profile.knobs.opt_level = 0; // keep the helper out of line, to see its count
  CompileResult o =
      compile_or_throw(fixture("fp_renamed.ll"), request(CompileMode::optimized, &profile, true));
  CHECK(o.diagnostics.empty());
  CHECK(contains(o.ir, R"(!{!"function_entry_count", i64 8})"));
}

TEST_CASE("instrumentation runs after clang's pre-inliner and early cleanup", "[jit][pgo]") {
  // At O2 the small static helper is inlined into its caller before
  // PGOInstrumentationGen (as clang -O2 -fprofile-generate does): its counts
  // are gathered per call site, inside compute's record.
  Instrumented i = load_instrumented("fp_base.ll");
  std::vector<std::string> names;
  for (const InstrumentedFunction& f : i.compiled.counters_layout)
    names.push_back(f.pgo_name);
  CHECK(names == std::vector<std::string>{"compute"});
  REQUIRE(i.program->call("compute", std::vector<std::uint64_t>{8}).value_or(0) == 60);
  ProfileDoc profile = profile_from(i);
  CompileResult o =
      compile_or_throw(fixture("fp_base.ll"), request(CompileMode::optimized, &profile, true));
  CHECK_FALSE(has_hash_mismatch(o));
  CHECK(contains(o.ir, R"(!{!"function_entry_count", i64 1})"));
}

TEST_CASE("a stale profile is reported - not fatal", "[jit][pgo]") {
  Instrumented i = load_instrumented("loop_branch.ll");
  REQUIRE(i.program->call("run", std::vector<std::uint64_t>{100}).has_value());
  ProfileDoc profile = profile_from(i);
  profile.functions.at("run").cfg_hash ^= 0x5555;
  CompileResult o =
      compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::optimized, &profile, true));
  CHECK(has_hash_mismatch(o));
  CHECK_FALSE(contains(function_body(o.ir, "run"), "branch_weights"));
}

TEST_CASE("a profile without counts compiles without profile data", "[jit][pgo]") {
  ProfileDoc profile;
  profile.functions["run"].unpredictable = {1};
  CompileResult o =
      compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::optimized, &profile, true));
  REQUIRE(o.diagnostics.size() == 1);
  CHECK(contains(o.diagnostics[0], "no counts"));
  CHECK_FALSE(contains(o.ir, "ProfileSummary"));
  CHECK(contains(o.ir, "!unpredictable"));
}

TEST_CASE("instrumented objects need no profiling runtime", "[jit][pgo]") {
  // Every function of thunks.ll (calls into libc and libm included) is
  // instrumented; the object links against this process alone.
  Instrumented i = load_instrumented("thunks.ll");
  CHECK(i.compiled.counters_layout.size() >= 14);
  std::vector<std::int64_t> buf = {5, 6, 7};
  REQUIRE(i.program->call("sum_buf", std::vector<std::uint64_t>{slot(buf.data()), 3}).value_or(0) ==
          18);
  auto counts = i.program->read_counters();
  std::uint64_t total = 0;
  for (std::uint64_t c : counts.at("sum_buf"))
    total += c;
  CHECK(total > 0);
  for (const FunctionRange& r : i.program->function_ranges())
    CHECK(r.name.rfind("__llvm_profile", 0) != 0);
}

TEST_CASE("the export uses source names, fdo's own compile canonical names",
          "[jit][pgo][profdata]") {
  ProfileDoc o0; // keep the static helper out of line
  o0.knobs.opt_level = 0;
  Instrumented i = load_instrumented("fp_base.ll", &o0);
  REQUIRE(i.program->call("compute", std::vector<std::uint64_t>{8}).value_or(0) == 60);
  ProfileDoc profile = profile_from(i);
  CHECK(profile.functions.at("fdo:fdo.local.1").source_name == "base.c:helper");
  CHECK(profile.functions.at("compute").source_name == "compute");
  const std::uint64_t helper_hash = profile.functions.at("fdo:fdo.local.1").cfg_hash;

  auto read = [](const std::string& bytes) {
    auto reader = llvm::IndexedInstrProfReader::create(
        llvm::MemoryBuffer::getMemBuffer(bytes, "profile.profdata", false));
    REQUIRE(static_cast<bool>(reader));
    return std::move(*reader);
  };
  auto has = [](llvm::IndexedInstrProfReader& r, const std::string& name, std::uint64_t hash) {
    auto rec = r.getInstrProfRecord(name, hash);
    if (rec) return true;
    llvm::consumeError(rec.takeError());
    return false;
  };
  auto by_source = indexed_profile(profile);
  REQUIRE(by_source.has_value());
  auto source_reader = read(*by_source);
  CHECK(has(*source_reader, "base.c:helper", helper_hash));
  CHECK_FALSE(has(*source_reader, "fdo:fdo.local.1", helper_hash));
  auto canonical = indexed_profile(profile, RecordNames::canonical);
  REQUIRE(canonical.has_value());
  CHECK(has(*read(*canonical), "fdo:fdo.local.1", helper_hash));

  // A document without source names (written before they existed) exports
  // under the PGO names.
  profile.functions.at("fdo:fdo.local.1").source_name.clear();
  auto old = indexed_profile(profile);
  REQUIRE(old.has_value());
  CHECK(has(*read(*old), "fdo:fdo.local.1", helper_hash));
}

TEST_CASE("a profile exports as an IR-level indexed profile", "[jit][pgo][profdata]") {
  Instrumented i = load_instrumented("loop_branch.ll");
  REQUIRE(i.program->call("run", std::vector<std::uint64_t>{1000}).has_value());
  ProfileDoc profile = profile_from(i);
  auto bytes = indexed_profile(profile);
  REQUIRE(bytes.has_value());

  // Read back with LLVM's own reader, as llvm-profdata and clang would.
  auto reader = llvm::IndexedInstrProfReader::create(
      llvm::MemoryBuffer::getMemBuffer(*bytes, "profile.profdata", false));
  REQUIRE(static_cast<bool>(reader));
  CHECK((*reader)->isIRLevelProfile());
  for (const InstrumentedFunction& f : i.compiled.counters_layout) {
    auto record = (*reader)->getInstrProfRecord(f.pgo_name, f.cfg_hash);
    REQUIRE(static_cast<bool>(record));
    CHECK(record->Counts == profile.functions.at(f.pgo_name).counts);
  }

  auto empty = indexed_profile(ProfileDoc{});
  REQUIRE_FALSE(empty.has_value());
  CHECK(empty.error().code() == Errc::invalid_argument);
}

TEST_CASE("value profiles round trip: indirect-call promotion and memop sizes",
          "[jit][pgo][value]") {
  Instrumented i = load_instrumented("value_sites.ll");
  const InstrumentedFunction* dispatch = nullptr;
  const InstrumentedFunction* copy = nullptr;
  for (const InstrumentedFunction& f : i.compiled.counters_layout) {
    if (f.pgo_name == "dispatch") dispatch = &f;
    if (f.pgo_name == "copy") copy = &f;
  }
  REQUIRE(dispatch != nullptr);
  REQUIRE(copy != nullptr);
  CHECK(dispatch->indirect_call_sites == 1);
  CHECK(copy->memop_sites == 1);
  REQUIRE(i.program->call("dispatch", std::vector<std::uint64_t>{1600}).has_value());
  REQUIRE(i.program->call("copy", std::vector<std::uint64_t>{1600}).has_value());

  auto values = i.program->read_value_profiles();
  // The targets are named by the MD5 of their (canonical) PGO names.
  const std::uint64_t add_one = llvm::IndexedInstrProf::ComputeHash("fdo:fdo.local.0");
  const std::uint64_t times_three = llvm::IndexedInstrProf::ComputeHash("fdo:fdo.local.1");
  CHECK(values.at("dispatch").indirect_calls ==
        std::vector<ValueSite>{{{add_one, 1500}, {times_three, 100}}});
  // 100 bytes is recorded as its range's representative, 65 (64 < n < 128).
  CHECK(values.at("copy").memop_sizes == std::vector<ValueSite>{{{8, 1500}, {65, 100}}});

  ProfileDoc profile = profile_from(i);
  const ProfileDoc counts_only = profile;
  for (auto& [name, v] : values) {
    profile.functions.at(name).indirect_calls = v.indirect_calls;
    profile.functions.at(name).memop_sizes = v.memop_sizes;
  }
  CompileResult o =
      compile_or_throw(fixture("value_sites.ll"), request(CompileMode::optimized, &profile, true));
  CHECK(o.diagnostics.empty());
  // Indirect-call promotion: the hot target is tested first and called
  // directly; the indirect call stays as the fallback.
  const std::string body = function_body(o.ir, "dispatch");
  const std::size_t hot_test = body.find("icmp eq ptr %fp, @fdo.local.0");
  REQUIRE(hot_test != std::string::npos);
  CHECK(hot_test < body.find("icmp eq ptr %fp, @fdo.local.1"));
  CHECK(contains(body, "call i64 @fdo.local.0("));
  CHECK(contains(body, "call i64 %fp("));
  // Memop size specialisation (PGOMemOPSizeOpt): the 8-byte case is split
  // off, and becomes a plain 8-byte store.
  const std::string copy_body = function_body(o.ir, "copy");
  CHECK(contains(copy_body, "MemOP.Case.8"));

  // The export names the records, and the targets in their value data, by
  // source name (static functions carry the source file name, as clang's do).
  auto exported = indexed_profile(profile);
  REQUIRE(exported.has_value());
  auto reader = llvm::IndexedInstrProfReader::create(
      llvm::MemoryBuffer::getMemBuffer(*exported, "profile.profdata", false));
  REQUIRE(static_cast<bool>(reader));
  auto record = (*reader)->getInstrProfRecord("dispatch", dispatch->cfg_hash);
  REQUIRE(static_cast<bool>(record));
  REQUIRE(record->getNumValueSites(llvm::IPVK_IndirectCallTarget) == 1);
  REQUIRE(record->getNumValueDataForSite(llvm::IPVK_IndirectCallTarget, 0) == 2);
  auto targets = record->getValueForSite(llvm::IPVK_IndirectCallTarget, 0);
  CHECK(targets[0].Value == llvm::IndexedInstrProf::ComputeHash("value_sites.c:add_one"));
  CHECK(targets[0].Count == 1500);
  CHECK(targets[1].Value == llvm::IndexedInstrProf::ComputeHash("value_sites.c:times_three"));
  auto local = (*reader)->getInstrProfRecord("value_sites.c:add_one",
                                             profile.functions.at("fdo:fdo.local.0").cfg_hash);
  CHECK(static_cast<bool>(local));
  if (!local) llvm::consumeError(local.takeError());

  // Cleared with the counters.
  i.program->reset_counters();
  for (const auto& [name, v] : i.program->read_value_profiles()) {
    for (const ValueSite& site : v.indirect_calls)
      CHECK(site.empty());
    for (const ValueSite& site : v.memop_sizes)
      CHECK(site.empty());
  }

  // Without value data the same optimized compile keeps the call indirect.
  CompileResult plain = compile_or_throw(fixture("value_sites.ll"),
                                         request(CompileMode::optimized, &counts_only, true));
  CHECK_FALSE(contains(function_body(plain.ir, "dispatch"), "call i64 @fdo.local.0("));
}

TEST_CASE("a clang-made .profdata of the same source seeds the profile", "[jit][pgo][import]") {
  // clang_pgo.profdata: clang-16 -O2 -fprofile-generate clang_pgo.c, one run,
  // llvm-profdata-16 merge. clang_pgo.ll: the same source as fdod receives it
  // (clang-16 -O2 -Xclang -disable-llvm-optzns -S -emit-llvm).
  const std::string profdata = fixture("clang_pgo.profdata");
  auto seeded = seed_profile(profdata, fixture("clang_pgo.ll"));
  if (!seeded) FAIL(seeded.error().describe());
  CHECK(seeded->records == 4); // main, run, twice, negate
  CHECK(seeded->dropped.empty());
  CHECK(seeded->matched == 4);
  const FunctionProfile& run = seeded->profile.functions.at("run");
  CHECK(run.source_name == "run");
  CHECK(run.counts == std::vector<std::uint64_t>{1000, 1, 100});
  const std::uint64_t twice = llvm::IndexedInstrProf::ComputeHash("fdo:fdo.local.0");
  REQUIRE(run.indirect_calls.size() == 1);
  REQUIRE_FALSE(run.indirect_calls[0].empty());
  CHECK(run.indirect_calls[0][0] == std::pair<std::uint64_t, std::uint64_t>{twice, 938});
  CHECK(seeded->profile.functions.at("fdo:fdo.local.0").source_name == "clang_pgo.c:twice");

  // The first compile of the program can be the optimized one.
  CompileResult o = compile_or_throw(fixture("clang_pgo.ll"),
                                     request(CompileMode::optimized, &seeded->profile, true));
  CHECK_FALSE(has_hash_mismatch(o));
  CHECK(contains(o.ir, R"(!{!"ProfileFormat", !"InstrProf"})"));
  // The hot target is promoted: compared against, then called (or inlined).
  CHECK(contains(function_body(o.ir, "run"), ", @fdo.local.0"));

  // A profile of other code seeds nothing, and says so.
  auto other = seed_profile(profdata, fixture("loop_branch.ll"));
  REQUIRE(other.has_value());
  CHECK(other->matched == 0);
  CHECK(other->dropped.size() == 4);
  CHECK(other->profile.functions.empty());

  // Not a profile at all.
  auto junk = seed_profile("not a profile", fixture("clang_pgo.ll"));
  REQUIRE_FALSE(junk.has_value());
  CHECK(junk.error().code() == Errc::invalid_argument);
}

namespace {
// The value of `key` (an i64 field) in the ProfileSummary module flag of `ir`.
std::uint64_t summary_field(const std::string& ir, const std::string& key) {
  const std::regex field("!\\{!\"" + key + "\", i64 (\\d+)\\}");
  std::smatch m;
  if (!std::regex_search(ir, m, field)) FAIL("no " << key << " in the profile summary");
  return std::stoull(m[1]);
}
} // namespace

TEST_CASE("an imported profile's records outside the program still shape the profile summary",
          "[jit][pgo][import]") {
  // clang's -fprofile-use computes the profile summary (the hot and cold count
  // thresholds the inliner uses) over every record of the file, the driver's
  // `main` included; seeding keeps only the program's functions, so without
  // the rest fdo's thresholds differ from clang's on the same profile (the
  // bench's `bst`: a call site with count 64 became cold, and stayed out of
  // line). clang_pgo.profdata plus a record of a function this program does not
  // have, with many small counts.
  const std::string clang_made = fixture("clang_pgo.profdata");
  auto in = llvm::IndexedInstrProfReader::create(
      llvm::MemoryBuffer::getMemBuffer(clang_made, "clang_pgo.profdata", false));
  REQUIRE(static_cast<bool>(in));
  llvm::InstrProfWriter writer;
  REQUIRE_FALSE(static_cast<bool>(writer.mergeProfileKind(llvm::InstrProfKind::IRInstrumentation)));
  for (const llvm::NamedInstrProfRecord& r : **in)
    writer.addRecord(llvm::NamedInstrProfRecord(r), 1,
                     [](llvm::Error e) { FAIL(llvm::toString(std::move(e))); });
  REQUIRE_FALSE(static_cast<bool>((*in)->getError()));
  const std::vector<std::uint64_t> driver_counts{0, 3, 3, 0, 2, 2, 1, 1, 1, 0, 1, 1, 1, 1};
  writer.addRecord(llvm::NamedInstrProfRecord("driver.c:driver_main", 0x1234, driver_counts), 1,
                   [](llvm::Error e) { FAIL(llvm::toString(std::move(e))); });
  const std::string profdata = writer.writeBuffer()->getBuffer().str();
  auto file = llvm::IndexedInstrProfReader::create(
      llvm::MemoryBuffer::getMemBuffer(profdata, "with_driver.profdata", false));
  REQUIRE(static_cast<bool>(file));
  const llvm::ProfileSummary& whole = (*file)->getSummary(/*UseCS=*/false);

  auto seeded = seed_profile(profdata, fixture("clang_pgo.ll"));
  if (!seeded) FAIL(seeded.error().describe());
  CHECK(seeded->records == 5);
  CHECK(seeded->matched == 4);
  CHECK(seeded->dropped.empty());
  REQUIRE(seeded->profile.outside_functions.size() == 1);
  const FunctionProfile& driver = seeded->profile.outside_functions.at("driver.c:driver_main");
  CHECK(driver.cfg_hash == 0x1234);
  CHECK(driver.counts == driver_counts);
  CHECK(driver.source_name == "driver.c:driver_main");
  CHECK(seeded->profile.functions.count("driver.c:driver_main") == 0);

  // The optimized compile's summary is the whole file's, not the four seeded
  // functions' (NumFunctions 4, TotalCount without the driver's 17).
  CompileResult o = compile_or_throw(fixture("clang_pgo.ll"),
                                     request(CompileMode::optimized, &seeded->profile, true));
  CHECK_FALSE(has_hash_mismatch(o));
  CHECK(summary_field(o.ir, "NumFunctions") == whole.getNumFunctions());
  CHECK(summary_field(o.ir, "NumCounts") == whole.getNumCounts());
  CHECK(summary_field(o.ir, "TotalCount") == whole.getTotalCount());
  CHECK(whole.getNumFunctions() == 5);
  // ...and nothing of the program changed name: the same code is annotated.
  CHECK(contains(function_body(o.ir, "run"), ", @fdo.local.0"));

  // The records survive the document's JSON form and enter its digest.
  auto back = profile_from_json(to_json(seeded->profile));
  REQUIRE(back.has_value());
  CHECK(*back == seeded->profile);
  ProfileDoc without = seeded->profile;
  without.outside_functions.clear();
  CHECK(profile_digest(without) != profile_digest(seeded->profile));
  CHECK_FALSE(to_json(without).contains("outside_functions"));

  // The export writes them back under their own names.
  auto exported = indexed_profile(seeded->profile);
  REQUIRE(exported.has_value());
  auto reader = llvm::IndexedInstrProfReader::create(
      llvm::MemoryBuffer::getMemBuffer(*exported, "export.profdata", false));
  REQUIRE(static_cast<bool>(reader));
  auto record = (*reader)->getInstrProfRecord("driver.c:driver_main", 0x1234);
  REQUIRE(static_cast<bool>(record));
  CHECK(record->Counts == driver_counts);
  CHECK((*reader)->getSummary(false).getTotalCount() == whole.getTotalCount());

  // Records outside the program alone are no profile.
  ProfileDoc outside_only;
  outside_only.outside_functions = seeded->profile.outside_functions;
  CHECK_FALSE(indexed_profile(outside_only).has_value());
}

TEST_CASE("annotate: each block's count comes from the profile's counters",
          "[jit][pgo][annotate]") {
  Instrumented i = load_instrumented("loop_branch.ll");
  REQUIRE(i.program->call("run", std::vector<std::uint64_t>{1000}).has_value());
  REQUIRE(i.program->call("run", std::vector<std::uint64_t>{10}).has_value());
  ProfileDoc profile = profile_from(i);

  auto annotated = annotate(fixture("loop_branch.ll"), profile);
  REQUIRE(annotated.has_value());
  std::map<std::string, const AnnotatedFunction*> by_name;
  for (const AnnotatedFunction& f : annotated->functions)
    by_name[f.symbol] = &f;
  REQUIRE(by_name.count("run"));
  const AnnotatedFunction& run = *by_name["run"];
  CHECK(run.entry_count == std::optional<std::uint64_t>(2));
  CHECK_FALSE(run.approximate);
  std::map<std::string, std::uint64_t> counts;
  for (const AnnotatedBlock& b : run.blocks) {
    INFO(b.label);
    REQUIRE(b.count.has_value());
    counts[b.label] = *b.count;
  }
  // 1010 iterations over two calls: 909 to %hot, 101 to %cold, each once
  // through %latch; the loop header once per iteration, the exit once a call.
  CHECK(counts.at("entry") == 2);
  CHECK(counts.at("loop") == 1010);
  CHECK(counts.at("hot") == 909);
  CHECK(counts.at("cold") == 101);
  CHECK(counts.at("latch") == 1010);
  CHECK(counts.at("exit") == 2);
  CHECK(by_name.at("on_hot")->entry_count == std::optional<std::uint64_t>(909));
  CHECK(by_name.at("cold_total")->entry_count == std::optional<std::uint64_t>(0));
  // Block text is the block's instructions; the signature its define line.
  CHECK_THAT(run.signature, Catch::StartsWith("define i64 @run("));
  auto hot = std::find_if(run.blocks.begin(), run.blocks.end(),
                          [](const AnnotatedBlock& b) { return b.label == "hot"; });
  REQUIRE(hot != run.blocks.end());
  REQUIRE(hot->lines.size() == 2);
  CHECK_THAT(hot->lines[0], Catch::StartsWith("call void @on_hot()"));
  CHECK_THAT(hot->lines[1], Catch::StartsWith("br label %latch"));

  SECTION("a profile without counts is refused, naming why") {
    auto empty = annotate(fixture("loop_branch.ll"), ProfileDoc{});
    REQUIRE_FALSE(empty.has_value());
    CHECK(empty.error().code() == Errc::invalid_argument);
    CHECK_THAT(empty.error().message(), Catch::Contains("no counts"));
  }
  SECTION("malformed IR is a parse error") {
    auto bad = annotate(fixture("malformed.ll"), profile);
    REQUIRE_FALSE(bad.has_value());
    CHECK(bad.error().code() == Errc::parse);
  }
}

TEST_CASE("annotate: local functions show their source names", "[jit][pgo][annotate]") {
  ProfileDoc o0; // keep the helper out of line, to see its count
  o0.knobs.opt_level = 0;
  Instrumented i = load_instrumented("fp_base.ll", &o0);
  REQUIRE(i.program->call("compute", std::vector<std::uint64_t>{8}).value_or(0) == 60);
  ProfileDoc profile = profile_from(i);
  profile.knobs.opt_level = 0;
  auto annotated = annotate(fixture("fp_base.ll"), profile);
  REQUIRE(annotated.has_value());
  bool helper_seen = false;
  for (const AnnotatedFunction& f : annotated->functions) {
    CHECK(f.symbol.find("fdo.local") == std::string::npos);
    for (const AnnotatedBlock& b : f.blocks)
      for (const std::string& line : b.lines)
        CHECK(line.find("@fdo.local") == std::string::npos);
    if (f.pgo_name == "fdo:fdo.local.1") {
      helper_seen = true;
      CHECK(f.entry_count == std::optional<std::uint64_t>(8));
      CHECK(f.source_name != f.pgo_name);
    }
  }
  CHECK(helper_seen);
}

namespace {
const AnnotatedBlock& block_labelled(const AnnotatedFunction& f, const std::string& label) {
  auto it = std::find_if(f.blocks.begin(), f.blocks.end(),
                         [&](const AnnotatedBlock& b) { return b.label == label; });
  REQUIRE(it != f.blocks.end());
  return *it;
}
} // namespace

TEST_CASE("annotate: sampled tallies land on the canonical blocks they were counted for",
          "[jit][pgo][annotate]") {
  Instrumented i = load_instrumented("loop_branch.ll");
  REQUIRE(i.program->call("run", std::vector<std::uint64_t>{1000}).has_value());
  ProfileDoc profile = profile_from(i);
  // run's canonical blocks, in function order (the block map's numbering):
  // entry 0, loop 1, hot 2, cold 3, latch 4, exit 5. Block 9 is past its end.
  profile.hardware = nlohmann::json::parse(R"({"sampling": {
      "event": "cpu-clock", "stages": 3, "samples": 200, "outside_samples": 9,
      "time_share": {"run": 0.515, "on_hot": 0.3}, "misses": {"branch-misses": {"run": 7}},
      "blocks": {"cpu-clock": {"run": {"1": 40, "2": 50, "4": 10, "9": 3}, "on_hot": {"0": 60}},
                 "branch-misses": {"run": {"1": 7}}}}})");

  auto annotated = annotate(fixture("loop_branch.ll"), profile);
  REQUIRE(annotated.has_value());
  REQUIRE(annotated->sampling.has_value());
  CHECK(annotated->sampling->clock_event == "cpu-clock");
  CHECK(annotated->sampling->clock_samples == 200);
  std::map<std::string, const AnnotatedFunction*> by_name;
  for (const AnnotatedFunction& f : annotated->functions)
    by_name[f.symbol] = &f;
  const AnnotatedFunction& run = *by_name.at("run");
  REQUIRE(run.pgo_name == "run");

  const AnnotatedBlock& loop = block_labelled(run, "loop");
  CHECK(loop.canonical_blocks == std::vector<std::uint32_t>{1});
  CHECK(loop.samples == EventSamples{{"cpu-clock", 40}, {"branch-misses", 7}});
  CHECK(loop.sample_share == std::optional<double>(0.2));
  CHECK(block_labelled(run, "hot").samples == EventSamples{{"cpu-clock", 50}});
  CHECK(block_labelled(run, "hot").sample_share == std::optional<double>(0.25));
  CHECK(block_labelled(run, "latch").samples == EventSamples{{"cpu-clock", 10}});
  CHECK(block_labelled(run, "cold").canonical_blocks == std::vector<std::uint32_t>{3});
  CHECK(block_labelled(run, "cold").samples.empty());
  CHECK(block_labelled(run, "cold").sample_share == std::optional<double>(0.0));
  CHECK(block_labelled(run, "exit").canonical_blocks == std::vector<std::uint32_t>{5});
  CHECK(run.unplaced_samples == EventSamples{{"cpu-clock", 3}});
  const AnnotatedFunction& on_hot = *by_name.at("on_hot");
  CHECK(block_labelled(on_hot, "entry").samples == EventSamples{{"cpu-clock", 60}});
  CHECK(block_labelled(on_hot, "entry").sample_share == std::optional<double>(0.3));
  // The block locations that carry the numbering are not part of the text.
  CHECK(run.signature.find("!dbg") == std::string::npos);
  for (const AnnotatedBlock& b : run.blocks)
    for (const std::string& line : b.lines)
      CHECK(line.find("!dbg") == std::string::npos);

  SECTION("entries that do not fit the schema are named and left out, the rest shown") {
    profile.hardware["sampling"]["blocks"] = nlohmann::json::parse(
        R"({"cpu-clock": {"run": {"x": 5, "2": -1, "01": 4, "1": 40}, "cold_total": 3}})");
    auto partly = annotate(fixture("loop_branch.ll"), profile);
    REQUIRE(partly.has_value());
    const AnnotatedFunction* r = nullptr;
    for (const AnnotatedFunction& f : partly->functions)
      if (f.symbol == "run") r = &f;
    REQUIRE(r != nullptr);
    CHECK(block_labelled(*r, "loop").samples == EventSamples{{"cpu-clock", 40}});
    CHECK(block_labelled(*r, "hot").samples.empty());
    CHECK(r->unplaced_samples.empty());
    std::string all;
    for (const std::string& d : partly->diagnostics)
      all += d + "\n";
    CHECK_THAT(all, Catch::Contains("[cpu-clock][run][x]: not a block index"));
    CHECK_THAT(all, Catch::Contains("[cpu-clock][run][01]: not a block index"));
    CHECK_THAT(all, Catch::Contains("[cpu-clock][run][2]: not a sample count"));
    CHECK_THAT(all, Catch::Contains("[cpu-clock][cold_total] is not an object"));
  }
  SECTION("a profile without per-block samples shows none") {
    profile.hardware = nlohmann::json::object();
    auto plain = annotate(fixture("loop_branch.ll"), profile);
    REQUIRE(plain.has_value());
    CHECK_FALSE(plain->sampling.has_value());
    for (const AnnotatedFunction& f : plain->functions)
      for (const AnnotatedBlock& b : f.blocks) {
        CHECK(b.samples.empty());
        CHECK_FALSE(b.sample_share.has_value());
      }
  }
}

TEST_CASE("annotate: samples follow the canonical numbering where cleanup folded a block",
          "[jit][pgo][annotate]") {
  Instrumented i = load_instrumented("folded_block.ll");
  REQUIRE(i.program->call("walk", std::vector<std::uint64_t>{100}).has_value());
  ProfileDoc profile = profile_from(i);
  // Canonical blocks: entry 0, check 1, loop 2, exit 3 (folded_block.ll).
  profile.hardware = nlohmann::json::parse(R"({"sampling": {
      "event": "cpu-clock", "stages": 1, "samples": 100, "outside_samples": 0,
      "time_share": {"walk": 0.8}, "misses": {},
      "blocks": {"cpu-clock": {"walk": {"0": 2, "1": 5, "2": 70, "3": 1}}}}})");
  auto annotated = annotate(fixture("folded_block.ll"), profile);
  REQUIRE(annotated.has_value());
  REQUIRE(annotated->functions.size() == 1);
  const AnnotatedFunction& walk = annotated->functions[0];
  std::vector<std::string> labels;
  for (const AnnotatedBlock& b : walk.blocks)
    labels.push_back(b.label);
  // Cleanup merged %check into %entry, and PGO use split the critical edges
  // (entry -> exit, loop -> loop): positions no longer match the canonical
  // indexes, and the samples still go where they were counted.
  REQUIRE(labels == std::vector<std::string>{"entry", "entry.exit_crit_edge", "loop",
                                             "loop.loop_crit_edge", "exit"});
  for (const AnnotatedBlock& b : walk.blocks) {
    INFO(b.label);
    if (b.label.ends_with("_crit_edge")) CHECK(b.samples.empty());
    // A share only where the block holds canonical blocks of its own.
    CHECK(b.sample_share.has_value() == !b.canonical_blocks.empty());
  }
  CHECK(block_labelled(walk, "entry").canonical_blocks == std::vector<std::uint32_t>{1});
  CHECK(block_labelled(walk, "entry").samples == EventSamples{{"cpu-clock", 5}});
  const AnnotatedBlock& loop = block_labelled(walk, "loop");
  CHECK(loop.canonical_blocks == std::vector<std::uint32_t>{2});
  CHECK(loop.samples == EventSamples{{"cpu-clock", 70}});
  CHECK(loop.sample_share == std::optional<double>(0.7));
  CHECK(loop.count == std::optional<std::uint64_t>(100));
  CHECK(block_labelled(walk, "exit").canonical_blocks == std::vector<std::uint32_t>{3});
  CHECK(block_labelled(walk, "exit").samples == EventSamples{{"cpu-clock", 1}});
  // %entry's own code (its `br`) is gone: its samples have no block to show them.
  CHECK(walk.unplaced_samples == EventSamples{{"cpu-clock", 2}});
}

TEST_CASE("annotate: samples of a function inlined everywhere are named, not lost",
          "[jit][pgo][annotate]") {
  Instrumented i = load_instrumented("inlined_callee.ll");
  REQUIRE(i.program->call("drive", std::vector<std::uint64_t>{50}).has_value());
  ProfileDoc profile = profile_from(i);
  std::string bump;
  for (const auto& [pgo, source] : i.compiled.source_names)
    if (source.ends_with("bump")) bump = pgo;
  REQUIRE_FALSE(bump.empty());
  profile.hardware = nlohmann::json::parse(R"({"sampling": {
      "event": "cpu-clock", "stages": 1, "samples": 100, "outside_samples": 0,
      "time_share": {}, "misses": {}, "blocks": {"cpu-clock": {"drive": {"1": 50}}}}})");
  profile.hardware["sampling"]["blocks"]["cpu-clock"][bump] = {{"0", 30}};
  auto annotated = annotate(fixture("inlined_callee.ll"), profile);
  REQUIRE(annotated.has_value());
  std::vector<std::string> shown;
  for (const AnnotatedFunction& f : annotated->functions)
    shown.push_back(f.symbol);
  REQUIRE(shown == std::vector<std::string>{"drive"});
  const AnnotatedBlock& loop = block_labelled(annotated->functions[0], "loop");
  CHECK(loop.samples == EventSamples{{"cpu-clock", 50}});
  CHECK(loop.sample_share == std::optional<double>(0.5));
  std::string all;
  for (const std::string& d : annotated->diagnostics)
    all += d + "\n";
  CHECK_THAT(all, Catch::Contains("30 cpu-clock samples of " + i.compiled.source_names.at(bump) +
                                  ", which is no function of its own"));
}
