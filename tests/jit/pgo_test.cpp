// The PGO round trip without compiler-rt: instrumented compile, counters read
// back through the loader, the profile fed to the optimized compile.
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "fdo/jit/profdata.h"
#include "jit_test_util.h"

#include <catch2/catch.hpp>
#include <llvm/ProfileData/InstrProfReader.h>
#include <llvm/Support/MemoryBuffer.h>
#include <regex>

using namespace fdo;
using namespace fdo::jit;
using namespace fdo::jit::test;

namespace {

struct Instrumented {
  CompileResult compiled;
  std::unique_ptr<Loader> loader;
  std::unique_ptr<LoadedProgram> program;
};

Instrumented load_instrumented(const std::string& fixture_name) {
  Instrumented i;
  i.compiled = compile_or_throw(fixture(fixture_name), request(CompileMode::instrumented));
  auto loader = Loader::create();
  REQUIRE(loader.has_value());
  i.loader = std::move(loader).value();
  auto p = i.loader->load(i.compiled.object, i.compiled);
  if (!p) FAIL(p.error().describe());
  i.program = std::move(p).value();
  return i;
}

// What the daemon does with counter read-back: counts keyed by PGO name,
// CFG hash from the compile's layout.
ProfileDoc profile_from(const Instrumented& i) {
  ProfileDoc doc;
  auto counts = i.program->read_counters();
  for (const InstrumentedFunction& f : i.compiled.counters_layout)
    doc.functions[f.pgo_name] = FunctionProfile{f.cfg_hash, counts.at(f.pgo_name), {}, {}};
  return doc;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    out.push_back(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
  return out;
}

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
  Instrumented i = load_instrumented("fp_base.ll");
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
