// Argument value profiles and value specialization (jit/src/arg_profile.h):
// the instrumented build records the values functions are called with; the
// optimized build clones a hot function for a dominant value behind a guard.
#include "loader_test_util.h"
#include "pgo_test_util.h"

#include <algorithm>
#include <random>

using namespace fdo;
using namespace fdo::jit;
using namespace fdo::jit::test;

namespace {

// The canonical PGO name of arg_values.c's static mix().
std::string mix_name(const CompileResult& r) {
  for (const auto& [canonical, source] : r.source_names)
    if (source == "arg_values.c:mix") return canonical;
  FAIL("no source name arg_values.c:mix");
  return {};
}

const InstrumentedFunction& layout_of(const CompileResult& r, const std::string& name) {
  for (const InstrumentedFunction& f : r.counters_layout)
    if (f.pgo_name == name) return f;
  FAIL("no counters for " + name);
  throw;
}

// drive(1600) run once in the instrumented build, its counters and argument
// value profiles read back as the daemon folds them.
struct Profiled {
  Instrumented i;
  ProfileDoc doc;
  std::string mix;
};

Profiled profiled_run() {
  Profiled p{load_instrumented("arg_values.ll"), {}, {}};
  p.mix = mix_name(p.i.compiled);
  auto r = p.i.program->call("drive", std::vector<std::uint64_t>{1600});
  REQUIRE(r.has_value());
  p.doc = profile_from(p.i);
  for (auto& [name, v] : p.i.program->read_value_profiles())
    p.doc.functions.at(name).arg_values = v.arguments;
  return p;
}

} // namespace

TEST_CASE("instrumented builds record the values integer arguments are called with",
          "[jit][pgo][spec]") {
  Profiled p = profiled_run();
  const InstrumentedFunction& mix = layout_of(p.i.compiled, p.mix);
  CHECK(mix.arg_sites == std::vector<std::uint32_t>{0, 1, 2});
  CHECK(layout_of(p.i.compiled, "drive").arg_sites == std::vector<std::uint32_t>{0});

  const std::vector<ArgValues>& args = p.doc.functions.at(p.mix).arg_values;
  REQUIRE(args.size() == 3);
  // x: every call a new value; the table keeps 8, the rest count as other.
  CHECK(args[0].arg == 0);
  CHECK(args[0].values.size() == 8);
  CHECK(args[0].total() == 1600);
  CHECK(args[0].other == 1592);
  CHECK(args[1] == ArgValues{1, {{4, 1500}, {5, 100}}, 0});
  CHECK(args[2] == ArgValues{2, {{3, 1600}}, 0});
  // drive itself was called once, with 1600.
  CHECK(p.doc.functions.at("drive").arg_values == std::vector<ArgValues>{{0, {{1600, 1}}, 0}});

  // Metadata carries the argument slots through the cache and the worker.
  auto back = metadata_from_json(metadata_to_json(p.i.compiled));
  REQUIRE(back.has_value());
  CHECK(back->counters_layout == p.i.compiled.counters_layout);

  // Cleared with the counters.
  p.i.program->reset_counters();
  for (const auto& [name, v] : p.i.program->read_value_profiles())
    CHECK(v.arguments.empty());

  // Off with the knob: no recording, no slots.
  ProfileDoc off;
  off.knobs.spec_min_share = 0;
  Instrumented plain = load_instrumented("arg_values.ll", &off);
  for (const InstrumentedFunction& f : plain.compiled.counters_layout)
    CHECK(f.arg_sites.empty());
}

TEST_CASE("a hot function is cloned for its dominant values behind a guard", "[jit][pgo][spec]") {
  Profiled p = profiled_run();
  CompileResult o =
      compile_or_throw(fixture("arg_values.ll"), request(CompileMode::optimized, &p.doc, true));
  REQUIRE(o.specializations.size() == 1);
  const Specialization& s = o.specializations[0];
  CHECK(s.function == p.mix);
  // width = 4 (94% of the calls) and mode = 3 (all of them).
  CHECK(s.args == std::vector<std::pair<std::uint32_t, std::uint64_t>>{{1, 4}, {2, 3}});
  CHECK(s.calls == 1600);
  CHECK(s.matched == 1500);
  CHECK(contains(describe(s), "arg 1 = 4"));
  CHECK(contains(o.ir, ".fdo.spec("));
  CHECK(contains(o.ir, ".fdo.general("));
  // The guard, inlined where mix was called: width 4 and mode 3 take the
  // clone, anything else the general body.
  // The guard: mix itself tests width 4 and mode 3 and calls the clone, or
  // the general body for anything else.
  const std::string symbol = p.mix.substr(p.mix.find(':') + 1); // fdo:fdo.local.N
  const std::string guard = function_body(o.ir, symbol);
  CHECK(contains(guard, "icmp eq i32 %1, 4"));
  CHECK(contains(guard, "icmp eq i8 %2, 3"));
  CHECK(contains(guard, symbol + ".fdo.spec("));
  CHECK(contains(guard, symbol + ".fdo.general("));
  // Inlined into drive (hot), where mode is the constant 3: only the width
  // is left to test, and width 5 goes straight to the general body.
  const std::string driver = function_body(o.ir, "drive");
  CHECK(contains(driver, symbol + ".fdo.spec("));
  CHECK(contains(driver, symbol + ".fdo.general("));
  CHECK_FALSE(contains(driver, "icmp eq i8"));
  // The clone's loop runs a constant 4 times: unrolled, no loop left.
  const std::string spec = function_body(o.ir, symbol + ".fdo.spec");
  CHECK_FALSE(contains(spec, "br i1"));
  // Kept in the metadata, for the explain log.
  auto back = metadata_from_json(metadata_to_json(o));
  REQUIRE(back.has_value());
  CHECK(back->specializations == o.specializations);

  // Whatever is passed, the values are those of the unspecialized build.
  ProfileDoc unspecialized = p.doc;
  unspecialized.knobs.spec_min_share = 0;
  CompileResult g = compile_or_throw(fixture("arg_values.ll"),
                                     request(CompileMode::optimized, &unspecialized, true));
  CHECK(g.specializations.empty());
  CHECK_FALSE(contains(g.ir, ".fdo.spec"));
  auto loader = Loader::create();
  REQUIRE(loader.has_value());
  auto fast = load_or_fail(**loader, o);
  auto general = load_or_fail(**loader, g);
  CHECK(call(*fast, "drive", {1600}) == call(*general, "drive", {1600}));
  std::mt19937_64 rng(7);
  for (int n = 0; n < 2000; ++n) {
    // Half the calls on the specialized values, the rest anywhere.
    const std::uint64_t x = rng();
    const std::uint64_t width = n % 2 ? 4 : rng() % 70;
    const std::uint64_t mode = n % 4 == 1 ? 3 : rng() % 300;
    INFO("x=" << x << " width=" << width << " mode=" << mode);
    REQUIRE(call(*fast, "call_mix", {x, width, mode}) ==
            call(*general, "call_mix", {x, width, mode}));
  }
}

TEST_CASE("the share and the clone budget bound specialization", "[jit][pgo][spec]") {
  Profiled p = profiled_run();
  SECTION("a share above width's 94% binds mode alone") {
    p.doc.knobs.spec_min_share = 95;
    CompileResult o =
        compile_or_throw(fixture("arg_values.ll"), request(CompileMode::optimized, &p.doc, false));
    REQUIRE(o.specializations.size() == 1);
    CHECK(o.specializations[0].args ==
          std::vector<std::pair<std::uint32_t, std::uint64_t>>{{2, 3}});
  }
  SECTION("no clone budget, no clone; the candidate is reported") {
    p.doc.knobs.spec_max_clones = 0;
    CompileResult o =
        compile_or_throw(fixture("arg_values.ll"), request(CompileMode::optimized, &p.doc, false));
    CHECK(o.specializations.empty());
  }
  SECTION("one clone for two candidates: the hotter is cloned, the other reported") {
    // call_mix made as hot as mix, with one dominant value of its own.
    const std::vector<std::uint64_t>& mc = p.doc.functions.at(p.mix).counts;
    const std::uint64_t mix_heat = *std::max_element(mc.begin(), mc.end());
    FunctionProfile& cm = p.doc.functions.at("call_mix");
    for (std::uint64_t& c : cm.counts)
      c = mix_heat - 1;
    cm.arg_values = {{2, {{3, 1000}}, 0}};
    p.doc.knobs.spec_max_clones = 1;
    CompileResult o =
        compile_or_throw(fixture("arg_values.ll"), request(CompileMode::optimized, &p.doc, false));
    REQUIRE(o.specializations.size() == 1);
    CHECK(o.specializations[0].function == p.mix);
    REQUIRE(o.specializations_skipped.size() == 1);
    CHECK(contains(o.specializations_skipped[0], "call_mix: over the clone budget"));
  }
}

TEST_CASE("argument records that do not fit the function are ignored", "[jit][pgo][spec]") {
  Profiled p = profiled_run();
  SECTION("counts for another CFG (an older pipeline's): the function is not annotated") {
    p.doc.functions.at(p.mix).cfg_hash ^= 0x5a5a;
  }
  SECTION("an argument past the parameter list, and a value wider than the argument") {
    p.doc.functions.at(p.mix).arg_values = {{7, {{4, 1500}}, 0}, {2, {{0x1ff, 1600}}, 0}};
  }
  SECTION("too few calls to tell") {
    p.doc.functions.at(p.mix).arg_values = {{1, {{4, 3}}, 0}};
  }
  CompileResult o =
      compile_or_throw(fixture("arg_values.ll"), request(CompileMode::optimized, &p.doc, true));
  CHECK(o.specializations.empty());
  CHECK_FALSE(contains(o.ir, ".fdo.spec"));
}

TEST_CASE("the context-sensitive round counts the clones under their own names",
          "[jit][pgo][spec][cs]") {
  Profiled p = profiled_run();
  Instrumented cs = load_instrumented("arg_values.ll", &p.doc, CompileMode::cs_instrumented);
  REQUIRE(cs.compiled.specializations.size() == 1);
  bool spec = false, general = false;
  for (const InstrumentedFunction& f : cs.compiled.counters_layout) {
    CHECK(is_cs_hash(f.cfg_hash));
    CHECK(f.arg_sites.empty()); // argument values come from the first round only
    spec = spec || f.pgo_name.find(".fdo.spec") != std::string::npos;
    general = general || f.pgo_name.find(".fdo.general") != std::string::npos;
  }
  CHECK(spec);
  CHECK(general);
  REQUIRE(cs.program->call("drive", std::vector<std::uint64_t>{1600}).has_value());
  // The next optimized compile takes the CS counts of the clones it makes again.
  ProfileDoc with_cs = p.doc;
  for (auto& [name, counts] : cs.program->read_counters())
    with_cs.cs_functions[name] =
        FunctionProfile{.cfg_hash = layout_of(cs.compiled, name).cfg_hash, .counts = counts};
  CompileResult o =
      compile_or_throw(fixture("arg_values.ll"), request(CompileMode::optimized, &with_cs, false));
  CHECK(o.specializations == cs.compiled.specializations);
  for (const std::string& d : o.diagnostics)
    CHECK_FALSE(contains(d, "hash mismatch"));
}
