// Parsing and verification errors, entries, modes, knobs, determinism,
// compiler identity and the metadata JSON.
#include "fdo/jit/compiler.h"
#include "fdo/util/hash.h"
#include "jit_test_util.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <thread>

using namespace fdo;
using namespace fdo::jit;
using fdo::jit::test::compile_or_throw;
using fdo::jit::test::contains;
using fdo::jit::test::fixture;
using fdo::jit::test::function_body;
using fdo::jit::test::request;

TEST_CASE("malformed IR is a parse error with line and column", "[jit][errors]") {
  auto r = analyze(fixture("malformed.ll"));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::parse);
  auto diag = parse_diagnostic(r.error());
  REQUIRE(diag.has_value());
  CHECK(diag->line == 4);
  CHECK(diag->column == 24);
  CHECK(contains(diag->message, "expected"));
  CHECK(contains(r.error().message(), "line 4, column 24: "));

  auto c = compile(fixture("malformed.ll"), request(CompileMode::plain));
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().code() == Errc::parse);
}

TEST_CASE("IR that fails the verifier is a verify error", "[jit][errors]") {
  auto v = analyze(fixture("verify_fail.ll"));
  REQUIRE_FALSE(v.has_value());
  CHECK(v.error().code() == Errc::verify);
  CHECK(contains(v.error().message(), "does not dominate all uses"));
  auto c = compile(fixture("verify_fail.ll"), request(CompileMode::instrumented));
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().code() == Errc::verify);
}

TEST_CASE("a 0-byte program is refused clearly", "[jit][errors]") {
  auto r = analyze("");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::invalid_argument);
  CHECK(contains(r.error().message(), "empty program"));
  auto c = compile("", request(CompileMode::plain));
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().code() == Errc::invalid_argument);
}

TEST_CASE("broken bitcode is a parse error without a location", "[jit][errors]") {
  std::string junk = "BC\xC0\xDE";
  junk += std::string(64, '\x5a');
  auto r = analyze(junk);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::parse);
  CHECK(contains(r.error().message(), "bitcode"));
  auto diag = parse_diagnostic(r.error());
  REQUIRE(diag.has_value());
  CHECK(diag->line == 0);
}

TEST_CASE("size limits are enforced", "[jit][errors]") {
  const std::string program = fixture("thunks.ll");
  Limits bytes;
  bytes.max_program_bytes = 100;
  auto r = analyze(program, bytes);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::resource_exhausted);
  CHECK(contains(r.error().message(), "bytes"));

  Limits instructions;
  instructions.max_instructions = 10;
  auto i = analyze(program, instructions);
  REQUIRE_FALSE(i.has_value());
  CHECK(i.error().code() == Errc::resource_exhausted);
  CHECK(contains(i.error().message(), "instructions"));

  Limits functions;
  functions.max_functions = 3;
  CompileRequest req = request(CompileMode::plain);
  req.limits = functions;
  auto f = compile(program, req);
  REQUIRE_FALSE(f.has_value());
  CHECK(f.error().code() == Errc::resource_exhausted);
}

TEST_CASE("programs may not define reserved __fdo_ symbols", "[jit][errors]") {
  auto r = analyze("define void @__fdo_thunk_x(ptr %a, ptr %b) {\n  ret void\n}\n");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::invalid_argument);
  CHECK(contains(r.error().message(), "__fdo_thunk_x"));
}

TEST_CASE("optimized mode needs a profile", "[jit][errors]") {
  auto r = compile(fixture("loop_branch.ll"), request(CompileMode::optimized));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::invalid_argument);
}

TEST_CASE("entries are the exported functions with thunk-able signatures", "[jit][compile]") {
  auto a = analyze(fixture("thunks.ll"));
  REQUIRE(a.has_value());
  std::map<std::string, EntryInfo> by_name;
  for (const EntryInfo& e : a->entries)
    by_name[e.name] = e;
  CHECK(by_name.count("not_exported") == 0); // internal
  CHECK(by_name.count("vector_ret") == 0);   // vector type
  CHECK(by_name.count("wide") == 0);         // i128
  CHECK(by_name.count("varargs") == 0);
  CHECK(by_name.count("cos") == 0); // declaration
  REQUIRE(by_name.count("mixed") == 1);
  CHECK(by_name["mixed"].return_type == "double");
  CHECK(by_name["mixed"].param_types ==
        std::vector<std::string>{"i32", "double", "float", "ptr", "i16"});
  CHECK(by_name["set_flag"].return_type == "void");
  CHECK(by_name["neg_i8"].return_type == "i8");
  CHECK(by_name["neg_i8"].return_signext);
  CHECK_FALSE(by_name["add_i32"].return_signext);
  CHECK(by_name["is_even"].return_type == "i1");
  CHECK(by_name["scale_f32"].param_types == std::vector<std::string>{"float", "float"});
  CHECK(by_name["sum_buf"].param_types == std::vector<std::string>{"ptr", "i64"});
}

TEST_CASE("ABI type names round-trip", "[jit][compile]") {
  for (const char* t : {"i1", "i8", "i16", "i32", "i64", "i17", "float", "double", "ptr", "void"}) {
    auto parsed = parse_abi_type(t);
    REQUIRE(parsed.has_value());
    CHECK(parsed->to_string() == t);
  }
  CHECK_FALSE(parse_abi_type("i0").has_value());
  CHECK_FALSE(parse_abi_type("i65").has_value());
  CHECK_FALSE(parse_abi_type("half").has_value());
}

TEST_CASE("every mode produces an object with timings and code size", "[jit][compile]") {
  const std::string program = fixture("loop_branch.ll");
  ProfileDoc knobs_only;
  for (CompileMode mode : {CompileMode::plain, CompileMode::instrumented, CompileMode::optimized}) {
    CompileResult r = compile_or_throw(program, request(mode, &knobs_only));
    INFO(to_string(mode));
    CHECK(r.mode == mode);
    CHECK(r.object.size() > 64);
    CHECK(r.object.compare(0, 4,
                           "\x7f"
                           "ELF") == 0);
    CHECK(r.code_size > 0);
    CHECK(r.times.parse > 0);
    CHECK(r.times.codegen > 0);
    CHECK(r.ir.empty()); // keep_ir not asked for
    CHECK(r.counters_layout.empty() == (mode != CompileMode::instrumented));
  }
}

TEST_CASE("object bytes are deterministic", "[jit][compile][determinism]") {
  const std::string program = fixture("loop_branch.ll");
  ProfileDoc profile;
  profile.knobs.opt_level = 3;
  profile.functions["run"] = FunctionProfile{
      .cfg_hash = 0x7735b6a125e8ab7ULL, .counts = {0, 900, 100, 1}, .unpredictable = {0}};
  for (CompileMode mode : {CompileMode::plain, CompileMode::instrumented, CompileMode::optimized}) {
    INFO(to_string(mode));
    CompileResult first = compile_or_throw(program, request(mode, &profile));
    // Other compiles in between change heap layout and LLVM's global state.
    compile_or_throw(fixture("thunks.ll"), request(CompileMode::instrumented));
    CompileResult second = compile_or_throw(program, request(mode, &profile));
    CHECK(first.object == second.object);
    CHECK(metadata_to_json(first).dump().size() > 0);
    CHECK(first.counters_layout == second.counters_layout);
  }
}

TEST_CASE("programs with the same canonical IR compile to the same object",
          "[jit][compile][determinism]") {
  CompileResult base = compile_or_throw(fixture("fp_base.ll"), request(CompileMode::plain));
  CompileResult renamed = compile_or_throw(fixture("fp_renamed.ll"), request(CompileMode::plain));
  CompileResult debug = compile_or_throw(fixture("fp_debug.ll"), request(CompileMode::plain));
  CHECK(renamed.object == base.object);
  CHECK(debug.object == base.object);
  // The submitted names of local symbols are kept for people.
  CHECK(base.local_names.at("fdo.local.1") == "helper");
  CHECK(renamed.local_names.at("fdo.local.1") == "triple_it");
  // PGO name -> the PGO name clang gives the function in the submitted source.
  CHECK(base.source_names == std::map<std::string, std::string>{
                                 {"compute", "compute"}, {"fdo:fdo.local.1", "base.c:helper"}});
  CHECK(renamed.source_names.at("fdo:fdo.local.1").ends_with(":triple_it"));
}

TEST_CASE("knobs take effect", "[jit][compile][knobs]") {
  SECTION("opt_level 0 keeps the call that O2 inlines") {
    ProfileDoc o0, o2;
    o0.knobs.opt_level = 0;
    o2.knobs.opt_level = 2;
    const std::string program = fixture("fp_base.ll");
    CompileResult r0 = compile_or_throw(program, request(CompileMode::plain, &o0, true));
    CompileResult r2 = compile_or_throw(program, request(CompileMode::plain, &o2, true));
    CHECK(contains(function_body(r0.ir, "compute"), "call i32 @fdo.local.1"));
    CHECK_FALSE(contains(function_body(r2.ir, "compute"), "call i32 @fdo.local.1"));
  }
  SECTION("vectorize off keeps the loop scalar") {
    ProfileDoc on, off;
    off.knobs.vectorize = false;
    const std::string program = fixture("thunks.ll");
    CompileResult v = compile_or_throw(program, request(CompileMode::plain, &on, true));
    CompileResult s = compile_or_throw(program, request(CompileMode::plain, &off, true));
    CHECK(contains(function_body(v.ir, "sum_buf"), "x i64>"));
    CHECK_FALSE(contains(function_body(s.ir, "sum_buf"), "x i64>"));
  }
  SECTION("unpredictable marks the listed branch") {
    ProfileDoc profile;
    // Conditional branches of @run in block order: 0 = entry (n == 0),
    // 1 = loop (the hot/cold branch), 2 = latch.
    profile.functions["run"].unpredictable = {1};
    CompileResult r =
        compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::plain, &profile, true));
    std::string body = function_body(r.ir, "run");
    std::size_t br = body.find("label %hot");
    REQUIRE(br != std::string::npos);
    std::string line =
        body.substr(body.rfind('\n', br), body.find('\n', br) - body.rfind('\n', br));
    CHECK(contains(line, "!unpredictable"));
    CHECK(body.find("!unpredictable") == body.rfind("!unpredictable")); // only that one
    CHECK(r.diagnostics.empty());
  }
  SECTION("an out-of-range branch index is a warning, not an error") {
    ProfileDoc profile;
    profile.functions["run"].unpredictable = {7};
    CompileResult r =
        compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::plain, &profile, true));
    REQUIRE(r.diagnostics.size() == 1);
    CHECK(contains(r.diagnostics[0], "out of range"));
    CHECK_FALSE(contains(r.ir, "!unpredictable"));
  }
}

TEST_CASE("compiler identity describes this host", "[jit][identity]") {
  CompilerIdentity id = host_identity();
  CHECK(id.llvm_version.rfind("16.", 0) == 0);
  CHECK(id.fdo_version == "0.1.0");
  CHECK(id.pipeline_version == kPipelineVersion);
  CHECK_FALSE(id.triple.empty());
  CHECK_FALSE(id.cpu.empty());
  CHECK(id.canonical() == host_identity().canonical());
  CHECK(contains(id.canonical(), "pipeline=" + std::to_string(kPipelineVersion)));
  CHECK(contains(id.canonical(), id.cpu));
  CompilerIdentity other = id;
  other.features += ",+imaginary";
  CHECK(other.canonical() != id.canonical());
}

TEST_CASE("compile metadata round-trips through JSON", "[jit][metadata]") {
  CompileRequest req = request(CompileMode::instrumented, nullptr, true);
  CompileResult r = compile_or_throw(fixture("fp_base.ll"), req);
  nlohmann::json j = metadata_to_json(r);
  CHECK_FALSE(j.contains("object"));
  auto back = metadata_from_json(nlohmann::json::parse(j.dump()));
  REQUIRE(back.has_value());
  CHECK(back->object.empty());
  CHECK(back->profile_key == r.profile_key);
  CHECK(back->mode == r.mode);
  CHECK(back->entries == r.entries);
  CHECK(back->counters_layout == r.counters_layout);
  CHECK(back->function_fingerprints == r.function_fingerprints);
  CHECK(back->local_names == r.local_names);
  CHECK(back->source_names == r.source_names);
  CHECK(back->times == r.times);
  CHECK(back->code_size == r.code_size);
  CHECK(back->mutable_globals == r.mutable_globals);
  CHECK(back->diagnostics == r.diagnostics);
  CHECK(back->ir == r.ir);
  CHECK_FALSE(r.block_map.empty());
  CHECK(back->block_map == r.block_map);
  CHECK(back->branch_weights == r.branch_weights);
}

TEST_CASE("without block locations: the same code, no block map, no debug line table",
          "[jit][blocks]") {
  const std::string program = fixture("loop_branch.ll");
  CompileRequest off = request(CompileMode::plain);
  off.block_locations = BlockLocations::off;
  CompileResult with = compile_or_throw(program, request(CompileMode::plain));
  CompileResult without = compile_or_throw(program, off);
  CHECK_FALSE(with.block_map.empty());
  CHECK(without.block_map.empty());
  CHECK(without.profile_key == with.profile_key);
  CHECK(without.object.find(".debug_line") == std::string::npos);
  CHECK(with.object.find(".debug_line") != std::string::npos);
  CHECK(without.object.size() < with.object.size());
}

TEST_CASE("the block map and branch weights travel in the metadata", "[jit][metadata][blocks]") {
  // (An optimized compile's weights: branch_feedback_tests.)
  const std::string program = fixture("loop_branch.ll");
  CompileResult plain = compile_or_throw(program, request(CompileMode::plain));
  CHECK(plain.branch_weights.empty()); // no profile, no weights
  // Every symbol's ranges are sorted, inside the symbol and name a block.
  for (const FunctionBlocks& fb : plain.block_map) {
    std::uint64_t end = 0;
    for (const BlockRange& r : fb.ranges) {
      CHECK(r.offset >= end);
      CHECK(r.size > 0);
      CHECK_FALSE(r.function.empty());
      end = r.offset + r.size;
    }
    CHECK(find_block(fb.ranges, end) == nullptr);
    if (!fb.ranges.empty())
      CHECK(find_block(fb.ranges, fb.ranges.front().offset) == &fb.ranges.front());
  }

  nlohmann::json good = metadata_to_json(plain);
  // Metadata from before the fields existed loads, with neither.
  nlohmann::json old = good;
  old.erase("block_map");
  old.erase("branch_weights");
  auto back = metadata_from_json(old);
  REQUIRE(back.has_value());
  CHECK(back->block_map.empty());
  CHECK(back->branch_weights.empty());

  auto broken = [&](auto mutate) {
    nlohmann::json j = good;
    mutate(j);
    return metadata_from_json(j);
  };
  auto a = broken([](nlohmann::json& j) { j["block_map"] = "everywhere"; });
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error().code() == Errc::corrupt);
  CHECK(contains(a.error().message(), "block_map"));
  auto b = broken([](nlohmann::json& j) {
    j["block_map"][0]["ranges"] = {{0, 4, "f", 0, -1}, {2, 4, "f", 1, -1}}; // overlapping
  });
  REQUIRE_FALSE(b.has_value());
  CHECK(contains(b.error().message(), "block_map[0].ranges"));
  auto c = broken([](nlohmann::json& j) { j["branch_weights"] = {{"f", {{0, -3, 1}}}}; });
  REQUIRE_FALSE(c.has_value());
  CHECK(contains(c.error().message(), "branch_weights.f"));
}

TEST_CASE("writable globals are reported - constants and PGO counters are not", "[jit][metadata]") {
  const std::string stateful = "@n = global i64 0\n"
                               "define i64 @bump() {\n"
                               "  %v = load i64, ptr @n\n"
                               "  %w = add i64 %v, 1\n"
                               "  store i64 %w, ptr @n\n"
                               "  ret i64 %w\n"
                               "}\n";
  const std::string stateless = "@k = constant i64 41\n"
                                "@ext = external global i64\n"
                                "define i64 @get() {\n"
                                "  %v = load i64, ptr @k\n"
                                "  %w = add i64 %v, 1\n"
                                "  ret i64 %w\n"
                                "}\n";
  for (CompileMode mode : {CompileMode::plain, CompileMode::instrumented}) {
    CHECK(compile_or_throw(stateful, request(mode)).mutable_globals);
    CompileResult r = compile_or_throw(stateless, request(mode));
    CHECK_FALSE(r.mutable_globals);
    auto back = metadata_from_json(metadata_to_json(r));
    REQUIRE(back.has_value());
    CHECK_FALSE(back->mutable_globals);
  }
  // Metadata from before the field existed: assume state (always safe).
  nlohmann::json old = metadata_to_json(compile_or_throw(stateless, request(CompileMode::plain)));
  old.erase("mutable_globals");
  auto back = metadata_from_json(old);
  REQUIRE(back.has_value());
  CHECK(back->mutable_globals);
  old["mutable_globals"] = "yes";
  auto bad = metadata_from_json(old);
  REQUIRE_FALSE(bad.has_value());
  CHECK(contains(bad.error().message(), "mutable_globals"));
}

TEST_CASE("corrupt compile metadata is refused naming the field", "[jit][metadata]") {
  CompileResult r = compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::instrumented));
  nlohmann::json good = metadata_to_json(r);

  auto broken = [&](auto mutate) {
    nlohmann::json j = good;
    mutate(j);
    return metadata_from_json(j);
  };
  auto a = broken([](nlohmann::json& j) { j["counters_layout"][0]["cfg_hash"] = "xyz"; });
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error().code() == Errc::corrupt);
  CHECK(contains(a.error().message(), "counters_layout[0].cfg_hash"));
  auto b = broken([](nlohmann::json& j) { j["entries"][0]["params"] = {"i32x"}; });
  REQUIRE_FALSE(b.has_value());
  CHECK(contains(b.error().message(), "entries[0].params"));
  auto c = broken([](nlohmann::json& j) { j.erase("profile_key"); });
  REQUIRE_FALSE(c.has_value());
  CHECK(contains(c.error().message(), "profile_key"));
  auto d = broken([](nlohmann::json& j) { j["mode"] = "fast"; });
  REQUIRE_FALSE(d.has_value());
  CHECK(contains(d.error().message(), "mode"));
  CHECK_FALSE(metadata_from_json(nlohmann::json::array()).has_value());
}

TEST_CASE("errors found during codegen are compile errors", "[jit][errors]") {
  // Valid IR whose inline assembly the assembler rejects.
  const std::string program = "define i64 @f(i64 %x) {\n"
                              "  call void asm sideeffect \"bogusinsn %rax\", \"\"()\n"
                              "  ret i64 %x\n"
                              "}\n";
  auto r = compile(program, request(CompileMode::plain));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::compile);
  CHECK(contains(r.error().message(), "bogusinsn"));
}

TEST_CASE("thread-local variables are refused as unsupported", "[jit][errors]") {
  const std::string program = "@t = thread_local global i64 5\n"
                              "define i64 @f() {\n"
                              "  %v = load i64, ptr @t\n"
                              "  ret i64 %v\n"
                              "}\n";
  auto r = compile(program, request(CompileMode::plain));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::unsupported);
  CHECK(contains(r.error().message(), "'t'"));
}

TEST_CASE("a compile with a profile writes no file: the indexed profile is a memory file",
          "[jit][compile][files]") {
  // Where LLVM's temp files would go, and a scratch directory: both stay empty.
  fdo::test_support::TempDir tmp("fdo-jit-nofile");
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.path().c_str(), 1);
  ProfileDoc profile;
  profile.functions["run"] = FunctionProfile{.cfg_hash = 1, .counts = {1, 2, 3, 4}};
  auto optimized = compile(fixture("loop_branch.ll"), request(CompileMode::optimized, &profile));
  auto cs = compile(fixture("loop_branch.ll"), request(CompileMode::cs_instrumented, &profile));
  if (old)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  REQUIRE(optimized.has_value());
  REQUIRE(cs.has_value());
  CHECK(std::filesystem::is_empty(tmp.path()));
}

TEST_CASE("concurrent compiles are independent and deterministic", "[jit][compile][determinism]") {
  const std::string program = fixture("thunks.ll");
  CompileResult reference = compile_or_throw(program, request(CompileMode::instrumented));
  std::vector<std::string> objects(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < objects.size(); ++t)
    threads.emplace_back([&, t] {
      auto r = compile(program, request(CompileMode::instrumented));
      if (r) objects[t] = r->object;
    });
  for (std::thread& t : threads)
    t.join();
  for (const std::string& object : objects)
    CHECK(object == reference.object);
}
