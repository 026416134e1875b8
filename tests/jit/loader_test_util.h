// Shared helpers of the jit tests that link and call programs: a loader, a
// compiled program loaded, an entry called, each failing the test with the
// error's description.
#pragma once

#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <vector>

namespace fdo::jit::test {

inline std::unique_ptr<Loader> make_loader() {
  auto loader = Loader::create();
  REQUIRE(loader.has_value());
  return std::move(loader).value();
}

inline std::unique_ptr<LoadedProgram> load_or_fail(Loader& loader, const CompileResult& r) {
  auto p = loader.load(r.object, r);
  if (!p) FAIL(p.error().describe());
  return std::move(p).value();
}

inline std::uint64_t call(const LoadedProgram& p, const char* entry,
                          std::vector<std::uint64_t> args) {
  auto r = p.call(entry, args);
  if (!r) FAIL(r.error().describe());
  return *r;
}

} // namespace fdo::jit::test
