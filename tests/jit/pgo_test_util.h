// Shared helpers of the PGO tests: an instrumented program loaded in a
// Loader, and its counters read back as a profile document.
#pragma once

#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "jit_test_util.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>

namespace fdo::jit::test {

struct Instrumented {
  CompileResult compiled;
  std::unique_ptr<Loader> loader;
  std::unique_ptr<LoadedProgram> program;
};

// The knobs of `knobs_from` (when given) pick the O-level: instrumentation
// runs after that level's pre-inliner and early cleanup, so a profile applies
// to compiles at the level it was gathered at.
// `mode` cs_instrumented takes its profile from `knobs_from`.
inline Instrumented load_instrumented(const std::string& fixture_name,
                                      const ProfileDoc* knobs_from = nullptr,
                                      CompileMode mode = CompileMode::instrumented) {
  Instrumented i;
  i.compiled = compile_or_throw(fixture(fixture_name), request(mode, knobs_from));
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
inline ProfileDoc profile_from(const CompileResult& compiled, const LoadedProgram& program) {
  ProfileDoc doc;
  auto counts = program.read_counters();
  for (const InstrumentedFunction& f : compiled.counters_layout)
    doc.functions[f.pgo_name] =
        FunctionProfile{.cfg_hash = f.cfg_hash,
                        .counts = counts.at(f.pgo_name),
                        .source_name = compiled.source_names.at(f.pgo_name)};
  return doc;
}
inline ProfileDoc profile_from(const Instrumented& i) {
  return profile_from(i.compiled, *i.program);
}

} // namespace fdo::jit::test
