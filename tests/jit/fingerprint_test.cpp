// The profile key: invariant under renaming, debug info, module/source names
// and formatting; sensitive to constants, predicates and exported names.
#include "fdo/jit/compiler.h"
#include "fdo/util/hash.h"
#include "jit_test_util.h"

#include <catch2/catch.hpp>
#include <llvm/AsmParser/Parser.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

using namespace fdo;
using namespace fdo::jit;
using fdo::jit::test::fixture;

namespace {

Analysis analysis_of(const std::string& name) {
  auto a = analyze(fixture(name));
  INFO(name);
  REQUIRE(a.has_value());
  return std::move(a).value();
}

std::string to_bitcode(const std::string& text) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  auto m = llvm::parseAssemblyString(text, diag, ctx);
  REQUIRE(m);
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::WriteBitcodeToFile(*m, os);
  os.flush();
  return out;
}

} // namespace

TEST_CASE("profile key is a 64-hex BLAKE3 key", "[jit][fingerprint]") {
  Analysis a = analysis_of("fp_base.ll");
  CHECK(is_hex_key(a.profile_key));
  for (const auto& [name, fp] : a.function_fingerprints)
    CHECK(is_hex_key(fp));
}

TEST_CASE("profile key ignores names - debug info - module name and formatting",
          "[jit][fingerprint]") {
  const std::string base = analysis_of("fp_base.ll").profile_key;
  CHECK(analysis_of("fp_renamed.ll").profile_key == base);
  CHECK(analysis_of("fp_debug.ll").profile_key == base);
  CHECK(analysis_of("fp_formatted.ll").profile_key == base);
}

TEST_CASE("profile key changes with a constant - a predicate or an exported name",
          "[jit][fingerprint]") {
  const std::string base = analysis_of("fp_base.ll").profile_key;
  const std::string constant = analysis_of("fp_const.ll").profile_key;
  const std::string predicate = analysis_of("fp_pred.ll").profile_key;
  const std::string exported = analysis_of("fp_export.ll").profile_key;
  CHECK(constant != base);
  CHECK(predicate != base);
  CHECK(exported != base);
  CHECK(constant != predicate);
  CHECK(predicate != exported);
  CHECK(constant != exported);
}

TEST_CASE("profile key changes with a function attribute", "[jit][fingerprint]") {
  std::string text = fixture("fp_base.ll");
  const std::size_t at = text.find(" nounwind {");
  REQUIRE(at != std::string::npos);
  auto without = analyze(text.replace(at, 11, " {"));
  REQUIRE(without.has_value());
  CHECK(without->profile_key != analysis_of("fp_base.ll").profile_key);
}

TEST_CASE("per-function fingerprints are keyed by PGO name and change only where the code does",
          "[jit][fingerprint]") {
  Analysis base = analysis_of("fp_base.ll");
  // @helper is internal: canonically renamed by position (after @table), and
  // its PGO name carries the canonical source name, not "base.c".
  REQUIRE(base.function_fingerprints.size() == 2);
  REQUIRE(base.function_fingerprints.count("compute") == 1);
  REQUIRE(base.function_fingerprints.count("fdo:fdo.local.1") == 1);

  CHECK(analysis_of("fp_renamed.ll").function_fingerprints == base.function_fingerprints);
  CHECK(analysis_of("fp_debug.ll").function_fingerprints == base.function_fingerprints);

  Analysis constant = analysis_of("fp_const.ll"); // changed @helper only
  CHECK(constant.function_fingerprints.at("fdo:fdo.local.1") !=
        base.function_fingerprints.at("fdo:fdo.local.1"));
  CHECK(constant.function_fingerprints.at("compute") == base.function_fingerprints.at("compute"));

  Analysis predicate = analysis_of("fp_pred.ll"); // changed @compute only
  CHECK(predicate.function_fingerprints.at("fdo:fdo.local.1") ==
        base.function_fingerprints.at("fdo:fdo.local.1"));
  CHECK(predicate.function_fingerprints.at("compute") != base.function_fingerprints.at("compute"));
}

TEST_CASE("bitcode and text of one program share a profile key", "[jit][fingerprint]") {
  const std::string text = fixture("fp_base.ll");
  auto from_text = analyze(text);
  auto from_bitcode = analyze(to_bitcode(text));
  REQUIRE(from_text.has_value());
  REQUIRE(from_bitcode.has_value());
  CHECK(from_bitcode->profile_key == from_text->profile_key);
  CHECK(from_bitcode->function_fingerprints == from_text->function_fingerprints);
}

TEST_CASE("profile key is stable across processes and runs", "[jit][fingerprint]") {
  // A golden value: nothing address-, time- or host-dependent may enter the
  // key. When the fingerprint definition changes on purpose, bump
  // kFingerprintTag (fingerprint.cpp) and update this value.
  CHECK(analysis_of("fp_base.ll").profile_key ==
        "79da0f0aafa923d06c28991c1a22fd4e3e991a0b9e40a7e389f8fcd0aa479f7a");
}

TEST_CASE("analyze and compile agree on the profile key", "[jit][fingerprint]") {
  const std::string program = fixture("fp_base.ll");
  Analysis a = analysis_of("fp_base.ll");
  for (CompileMode mode : {CompileMode::plain, CompileMode::instrumented}) {
    CompileResult r = test::compile_or_throw(program, test::request(mode));
    CHECK(r.profile_key == a.profile_key);
    CHECK(r.function_fingerprints == a.function_fingerprints);
    CHECK(r.entries == a.entries);
  }
}
