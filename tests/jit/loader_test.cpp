// The ORC loader: thunks for every supported signature, libc/libm
// resolution, link errors, constructors, function ranges, unloading.
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "jit_test_util.h"
#include "loader_test_util.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <link.h>
#include <unistd.h>

using namespace fdo;
using namespace fdo::jit;
using namespace fdo::jit::test;

namespace {

// Memory mappings of this process: a load that is not fully unloaded keeps
// its code and data pages mapped.
std::size_t mapping_count() {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);)
    ++n;
  return n;
}

} // namespace

TEST_CASE("thunks call every supported signature", "[jit][loader][thunks]") {
  auto loader = make_loader();
  const CompileMode mode = GENERATE(CompileMode::plain, CompileMode::instrumented);
  INFO(to_string(mode));
  CompileResult r = compile_or_throw(fixture("thunks.ll"), request(mode));
  auto p = load_or_fail(*loader, r);
  {

    SECTION("i32") {
      CHECK(call(*p, "add_i32", {40, 2}) == 42);
      // -5 + 3 = -2: the low 32 bits carry it; i32 returns are zero-extended.
      std::uint64_t neg = call(*p, "add_i32", {static_cast<std::uint32_t>(-5), 3});
      CHECK(static_cast<std::int32_t>(neg) == -2);
      CHECK(neg >> 32 == 0);
    }
    SECTION("i64") {
      CHECK(call(*p, "mul_i64", {1ULL << 33, 3}) == 3ULL << 33);
      CHECK(static_cast<std::int64_t>(call(*p, "mul_i64", {static_cast<std::uint64_t>(-7), 6})) ==
            -42);
    }
    SECTION("small integers with signext and i1") {
      std::uint64_t r8 = call(*p, "neg_i8", {5});
      CHECK(static_cast<std::int64_t>(r8) == -5); // signext return: all 64 bits
      CHECK(call(*p, "is_even", {10}) == 1);
      CHECK(call(*p, "is_even", {7}) == 0);
    }
    SECTION("float") {
      CHECK(as_float(call(*p, "scale_f32", {slot(1.5f), slot(4.0f)})) == 6.0f);
    }
    SECTION("double, through libm") {
      CHECK(as_double(call(*p, "cos_f64", {slot(0.0)})) == 1.0);
      CHECK(as_double(call(*p, "cos_f64", {slot(M_PI)})) == Approx(-1.0));
    }
    SECTION("pointer to an input buffer") {
      std::vector<std::int64_t> buf = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -55};
      CHECK(call(*p, "sum_buf", {slot(buf.data()), buf.size()}) == 0);
      CHECK(call(*p, "sum_buf", {slot(buf.data()), 10}) == 55);
    }
    SECTION("pointer to an output buffer, void return") {
      std::vector<std::int32_t> out(17, -1);
      CHECK(call(*p, "fill_buf", {slot(out.data()), 16, 100}) == 0);
      for (int i = 0; i < 16; ++i)
        CHECK(out[i] == 100 + i);
      CHECK(out[16] == -1);
    }
    SECTION("void entries change program state") {
      CHECK(call(*p, "set_flag", {12345}) == 0);
      CHECK(call(*p, "get_flag", {}) == 12345);
    }
    SECTION("libc") {
      const char* text = "feedback-directed";
      CHECK(call(*p, "str_len", {slot(text)}) == std::strlen(text));
    }
    SECTION("mixed parameter types take one slot each") {
      double extra = 0.25;
      std::uint64_t r = call(*p, "mixed",
                             {static_cast<std::uint32_t>(-3), slot(10.5), slot(2.5f), slot(&extra),
                              static_cast<std::uint16_t>(-4)});
      CHECK(as_double(r) == -3 + 10.5 + 2.5 - 4 + 0.25);
    }
    SECTION("thunk pointers are callable directly") {
      auto t = p->thunk("add_i32");
      REQUIRE(t.has_value());
      std::uint64_t args[2] = {1, 2}, ret = 0;
      (*t)(args, &ret);
      CHECK(ret == 3);
    }
  }
}

TEST_CASE("calls with a wrong entry or arity fail without calling", "[jit][loader]") {
  auto loader = make_loader();
  CompileResult r = compile_or_throw(fixture("thunks.ll"), request(CompileMode::plain));
  auto p = load_or_fail(*loader, r);
  auto unknown = p->call("nope", std::vector<std::uint64_t>{});
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().code() == Errc::not_found);
  auto arity = p->call("add_i32", std::vector<std::uint64_t>{1});
  REQUIRE_FALSE(arity.has_value());
  CHECK(arity.error().code() == Errc::invalid_argument);
  CHECK(contains(arity.error().message(), "takes 2 arguments"));
  CHECK_FALSE(p->thunk("not_exported").has_value());
}

TEST_CASE("an unresolved symbol is a link error naming it", "[jit][loader][errors]") {
  auto loader = make_loader();
  CompileResult r = compile_or_throw(fixture("unresolved.ll"), request(CompileMode::plain));
  auto p = loader->load(r.object, r);
  REQUIRE_FALSE(p.has_value());
  CHECK(p.error().code() == Errc::link);
  CHECK(contains(p.error().message(), "fdo_test_no_such_function"));

  // The loader stays usable.
  CompileResult good = compile_or_throw(fixture("thunks.ll"), request(CompileMode::plain));
  auto q = load_or_fail(*loader, good);
  CHECK(call(*q, "add_i32", {2, 2}) == 4);
}

TEST_CASE("bad objects and mismatched metadata are refused", "[jit][loader][errors]") {
  auto loader = make_loader();
  auto empty = loader->load("", {}, {});
  REQUIRE_FALSE(empty.has_value());
  CHECK(empty.error().code() == Errc::invalid_argument);
  auto junk = loader->load("definitely not an object file", {}, {});
  REQUIRE_FALSE(junk.has_value());
  CHECK(junk.error().code() == Errc::corrupt);

  CompileResult plain = compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::plain));
  CompileResult instrumented =
      compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::instrumented));
  // The plain object has no counters for the instrumented layout.
  auto mismatch = loader->load(plain.object, plain.entries, instrumented.counters_layout);
  REQUIRE_FALSE(mismatch.has_value());
  CHECK(mismatch.error().code() == Errc::invalid_argument);
  std::vector<EntryInfo> entries = plain.entries;
  entries.push_back({"not_there", "void", {}, false});
  auto missing = loader->load(plain.object, entries, {});
  REQUIRE_FALSE(missing.has_value());
  CHECK(contains(missing.error().message(), "not_there"));
}

TEST_CASE("constructors run on load and destructors on unload", "[jit][loader]") {
  auto loader = make_loader();
  CompileResult r = compile_or_throw(fixture("ctors.ll"), request(CompileMode::plain));
  std::int64_t sink = 0;
  {
    auto p = load_or_fail(*loader, r);
    CHECK(call(*p, "get_state", {}) == 73); // priority 100 ran before 200
    call(*p, "set_sink", {slot(&sink)});
    CHECK(sink == 0);
    REQUIRE(p->unload().has_value());
    CHECK(sink == 74);
    CHECK_FALSE(p->unload().has_value()); // once only
    CHECK_FALSE(p->call("get_state", std::vector<std::uint64_t>{}).has_value());
  }
}

TEST_CASE("restart puts the program back as its load left it, without linking it again",
          "[jit][loader][restart]") {
  // Zero-filled and initialised writable globals, a large zero-filled one,
  // and one a constructor computes.
  constexpr const char* kState = R"(
@n = global i64 0
@m = global i64 7
@big = global [100000 x i64] zeroinitializer
@c = global i64 0
@llvm.global_ctors = appending global [1 x { i32, ptr, ptr }] [
  { i32, ptr, ptr } { i32 65535, ptr @init, ptr null }
]
define internal void @init() {
  %v = load i64, ptr @c
  %w = add i64 %v, 100
  store i64 %w, ptr @c
  ret void
}
define i64 @bump(i64 %a) {
  %n = load i64, ptr @n
  %n1 = add i64 %n, %a
  store i64 %n1, ptr @n
  %m = load i64, ptr @m
  %m1 = add i64 %m, %a
  store i64 %m1, ptr @m
  %p = getelementptr [100000 x i64], ptr @big, i64 0, i64 %a
  %b = load i64, ptr %p
  %b1 = add i64 %b, 1
  store i64 %b1, ptr %p
  %c = load i64, ptr @c
  %s1 = add i64 %n1, %m1
  %s2 = add i64 %s1, %b1
  %s3 = add i64 %s2, %c
  ret i64 %s3
}
)";
  auto loader = make_loader();
  for (CompileMode mode : {CompileMode::plain, CompileMode::instrumented}) {
    CAPTURE(to_string(mode));
    CompileResult r = compile_or_throw(kState, request(mode));
    REQUIRE(r.mutable_globals);
    auto p = load_or_fail(*loader, r);
    REQUIRE_FALSE(p->writable_blocks().empty());
    // n 5, m 12, big[5] 1, c 100 (its constructor ran once).
    CHECK(call(*p, "bump", {5}) == 118);
    CHECK(call(*p, "bump", {5}) == 129); // state carried over: not restarted
    if (mode == CompileMode::instrumented) {
      std::uint64_t counted = 0;
      for (const auto& [fn, counts] : p->read_counters())
        for (std::uint64_t c : counts)
          counted += c;
      CHECK(counted > 0);
    }
    for (int round = 0; round < 3; ++round) {
      REQUIRE(p->restart().has_value());
      // Every global as at load, the constructor run once more on top.
      CHECK(call(*p, "bump", {5}) == 118);
      CHECK(call(*p, "bump", {9}) == 14 + 21 + 1 + 100);
    }
    if (mode == CompileMode::instrumented) {
      REQUIRE(p->restart().has_value());
      // The counters are writable data too: back to zero.
      for (const auto& [fn, counts] : p->read_counters())
        for (std::uint64_t c : counts)
          CHECK(c == 0);
    }
  }
}

TEST_CASE("finish runs destructors as an unload would, restart runs constructors again",
          "[jit][loader][restart]") {
  auto loader = make_loader();
  CompileResult r = compile_or_throw(fixture("ctors.ll"), request(CompileMode::plain));
  auto p = load_or_fail(*loader, r);
  for (int round = 0; round < 3; ++round) {
    std::int64_t sink = 0;
    CHECK(call(*p, "get_state", {}) == 73); // constructors ran, in order, once
    call(*p, "set_sink", {slot(&sink)});
    p->finish();
    CHECK(sink == 74);
    p->finish(); // once only
    CHECK(sink == 74);
    // Finished: no call until it is restarted.
    CHECK_FALSE(p->call("get_state", std::vector<std::uint64_t>{}).has_value());
    CHECK_FALSE(p->thunk("get_state").has_value());
    REQUIRE(p->restart().has_value());
  }
  // Restarted without finish(): the destructors run first. The sink set
  // before does not survive the restart (its global is back to null).
  std::int64_t sink = 0;
  call(*p, "set_sink", {slot(&sink)});
  REQUIRE(p->restart().has_value());
  CHECK(sink == 74);
  sink = 0;
  REQUIRE(p->unload().has_value());
  CHECK(sink == 0);
  CHECK_FALSE(p->restart().has_value()); // unloaded
}

TEST_CASE("C++ destructors registered with __cxa_atexit run again after each restart",
          "[jit][loader][restart]") {
  auto loader = make_loader();
  CompileResult r = compile_or_throw(fixture("cxa_atexit.ll"), request(CompileMode::plain));
  auto p = load_or_fail(*loader, r);
  for (int round = 0; round < 3; ++round) {
    std::int64_t sink = 0;
    call(*p, "set_sink", {slot(&sink)});
    p->finish();
    CHECK(sink == 42);
    REQUIRE(p->restart().has_value());
  }
}

TEST_CASE("C++ destructors registered with __cxa_atexit run on unload", "[jit][loader]") {
  auto loader = make_loader();
  for (CompileMode mode : {CompileMode::plain, CompileMode::instrumented}) {
    CompileResult r = compile_or_throw(fixture("cxa_atexit.ll"), request(mode));
    std::int64_t sink = 0;
    auto p = load_or_fail(*loader, r);
    call(*p, "set_sink", {slot(&sink)});
    CHECK(sink == 0);
    REQUIRE(p->unload().has_value());
    CHECK(sink == 42);
    // Had the registration survived the unload, the process would call into
    // unmapped code at exit.
  }
}

TEST_CASE("function ranges cover every function's code", "[jit][loader]") {
  auto loader = make_loader();
  CompileResult r = compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::plain));
  auto p = load_or_fail(*loader, r);
  const auto& ranges = p->function_ranges();
  std::map<std::string, FunctionRange> by_name;
  for (const FunctionRange& fr : ranges)
    by_name[fr.name] = fr;
  for (const char* fn : {"run", "on_hot", "on_cold", "cold_total", "__fdo_thunk_run"}) {
    INFO(fn);
    REQUIRE(by_name.count(fn) == 1);
    CHECK(by_name[fn].size > 0);
  }
  for (std::size_t i = 1; i < ranges.size(); ++i)
    CHECK(ranges[i - 1].start + ranges[i - 1].size <= ranges[i].start); // sorted, disjoint
  auto thunk = p->thunk("run");
  REQUIRE(thunk.has_value());
  CHECK(reinterpret_cast<std::uintptr_t>(*thunk) == by_name["__fdo_thunk_run"].start);
}

TEST_CASE("the text offset knob starts the code that many bytes past a 64-byte boundary",
          "[jit][loader]") {
  auto loader = make_loader();
  auto starts = [](const LoadedProgram& p) {
    std::map<std::string, std::uint64_t> out;
    for (const FunctionRange& fr : p.function_ranges())
      out[fr.name] = fr.start;
    return out;
  };
  CompileResult plain = compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::plain));
  CHECK(plain.text_offset == 0);
  auto base = load_or_fail(*loader, plain);
  const auto at0 = starts(*base);
  REQUIRE_FALSE(at0.empty());
  const std::uint64_t first0 = base->function_ranges().front().start;
  CHECK(first0 % 4096 == 0); // the code segment starts on a page
  for (int offset : {16, 32, 48}) {
    INFO("text_offset " << offset);
    ProfileDoc doc;
    doc.knobs.text_offset = offset;
    CompileResult r =
        compile_or_throw(fixture("loop_branch.ll"), request(CompileMode::plain, &doc));
    CHECK(r.text_offset == offset);
    CHECK(r.object == plain.object); // the same code: only where it goes differs
    // The offset travels with the object in the compile metadata.
    auto meta = metadata_from_json(metadata_to_json(r));
    REQUIRE(meta);
    CHECK(meta->text_offset == offset);
    auto loaded = loader->load(r.object, *meta);
    if (!loaded) FAIL(loaded.error().describe());
    auto p = std::move(loaded).value();
    const auto at = starts(*p);
    REQUIRE(at.size() == at0.size());
    const std::uint64_t first = p->function_ranges().front().start;
    CHECK(first % 4096 == static_cast<std::uint64_t>(offset));
    // Every function moved by the offset together: the same distances apart.
    for (const auto& [name, start] : at) {
      INFO(name);
      REQUIRE(at0.count(name) == 1);
      CHECK(start - first == at0.at(name) - first0);
      CHECK(start % 64 == (at0.at(name) + offset) % 64);
    }
    // The program keeps counts in globals: a fresh plain load from the same
    // initial state gives the same sequence.
    auto fresh = load_or_fail(*loader, plain);
    for (std::uint64_t n : {0, 1, 7, 1000})
      CHECK(call(*p, "run", {n}) == call(*fresh, "run", {n}));
  }
  CHECK_FALSE(metadata_to_json(plain).contains("text_offset")); // older metadata's form kept
  // Offsets the knob cannot have are refused, by the loader and in metadata.
  for (int bad : {-16, 8, 64, 4096}) {
    INFO("text_offset " << bad);
    auto p = loader->load(plain.object, plain.entries, plain.counters_layout, bad);
    REQUIRE_FALSE(p);
    CHECK(p.error().code() == Errc::invalid_argument);
    CHECK_THAT(p.error().message(), Catch::Contains("text offset"));
  }
  nlohmann::json j = metadata_to_json(plain);
  j["text_offset"] = 24;
  auto corrupt = metadata_from_json(j);
  REQUIRE_FALSE(corrupt);
  CHECK(corrupt.error().code() == Errc::corrupt);
  CHECK_THAT(corrupt.error().message(), Catch::Contains("text_offset"));
}

TEST_CASE("local functions have ranges too, and a relinked program has its own", "[jit][loader]") {
  // @work is internal (a local symbol after canonicalisation); the call to it
  // is relocated against .text, so only keeping its symbol through
  // dead-stripping leaves a range to attribute samples in it to.
  const std::string program = R"(
define internal i64 @work(i64 %n) noinline {
entry:
  %m = mul i64 %n, 3
  %r = add i64 %m, 1
  ret i64 %r
}
define i64 @run(i64 %n) {
  %r = call i64 @work(i64 %n)
  ret i64 %r
}
)";
  auto loader = make_loader();
  CompileResult r = compile_or_throw(program, request(CompileMode::plain));
  auto first = load_or_fail(*loader, r);
  auto second = load_or_fail(*loader, r); // the same object linked again, elsewhere
  auto local = [](const LoadedProgram& p) -> std::optional<FunctionRange> {
    for (const FunctionRange& fr : p.function_ranges())
      if (fr.name != "run" && fr.name.rfind("__fdo_thunk_", 0) != 0) return fr;
    return std::nullopt;
  };
  auto a = local(*first);
  auto b = local(*second);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->name == b->name);
  CHECK(a->size > 0);
  CHECK(a->size == b->size);
  CHECK(a->start != b->start);
  CHECK(call(*first, "run", {4}) == 13);
  CHECK(call(*second, "run", {5}) == 16);
}

TEST_CASE("programs load and unload repeatedly", "[jit][loader]") {
  auto loader = make_loader();
  CompileResult r = compile_or_throw(fixture("thunks.ll"), request(CompileMode::instrumented));
  load_or_fail(*loader, r); // warm up the session's own allocations
  const std::size_t mappings_before = mapping_count();
  for (int i = 0; i < 200; ++i) {
    auto p = load_or_fail(*loader, r);
    REQUIRE(call(*p, "add_i32", {static_cast<std::uint64_t>(i), 1}) ==
            static_cast<std::uint64_t>(i + 1));
    if (i % 2 == 0) REQUIRE(p->unload().has_value()); // else the destructor unloads
  }
  // Each load maps at least a code and a data page; none may remain.
  CHECK(mapping_count() <= mappings_before + 8);
  // Several programs side by side keep their own state.
  auto a = load_or_fail(*loader, r);
  auto b = load_or_fail(*loader, r);
  call(*a, "set_flag", {1});
  call(*b, "set_flag", {2});
  CHECK(call(*a, "get_flag", {}) == 1);
  CHECK(call(*b, "get_flag", {}) == 2);
}

TEST_CASE("code is mapped just below the executable that calls it", "[jit][loader]") {
  // The main program's lowest address, as the loader's memory manager finds it.
  std::uintptr_t exe_low = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) -> int {
        std::uintptr_t lo = UINTPTR_MAX;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_LOAD)
            lo = std::min<std::uintptr_t>(lo, info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        *static_cast<std::uintptr_t*>(out) = lo;
        return 1;
      },
      &exe_low);
  REQUIRE(exe_low > (std::uintptr_t{1} << 31));
  auto loader = make_loader();
  CompileResult r = compile_or_throw(fixture("thunks.ll"), request(CompileMode::instrumented));
  // Many programs at once, then loads and unloads that reuse the room.
  std::vector<std::unique_ptr<LoadedProgram>> live;
  for (int i = 0; i < 40; ++i) {
    live.push_back(load_or_fail(*loader, r));
    if (i % 3 == 0) live.erase(live.begin());
  }
  for (const auto& p : live) {
    CHECK(call(*p, "add_i32", {40, 2}) == 42);
    for (const FunctionRange& f : p->function_ranges()) {
      INFO(f.name << " at " << std::hex << f.start << ", executable at " << exe_low);
      CHECK(f.start < exe_low);
      CHECK(exe_low - f.start < (std::uintptr_t{1} << 30));
    }
  }
}

TEST_CASE("destroying the loader unloads what is still loaded", "[jit][loader]") {
  auto loader = make_loader();
  CompileResult r = compile_or_throw(fixture("ctors.ll"), request(CompileMode::plain));
  std::int64_t sink = 0;
  auto p = load_or_fail(*loader, r);
  call(*p, "set_sink", {slot(&sink)});
  loader.reset();
  CHECK(sink == 74);
  CHECK_FALSE(p->unload().has_value());
}

namespace {
int overridden_getpid() {
  return 424242; // no process has it here
}
} // namespace

TEST_CASE("a symbol override resolves before the process's symbol of that name",
          "[jit][loader][overrides]") {
  constexpr const char* kIr = R"(
declare i32 @getpid()
define i64 @f() {
  %p = call i32 @getpid()
  %r = sext i32 %p to i64
  ret i64 %r
}
)";
  CompileResult r = compile_or_throw(kIr, request(CompileMode::plain));
  {
    auto plain = make_loader();
    auto p = load_or_fail(*plain, r);
    CHECK(call(*p, "f", {}) == static_cast<std::uint64_t>(::getpid())); // the C library's
  }
  LoaderOptions options;
  options.overrides.push_back({"getpid", reinterpret_cast<void*>(&overridden_getpid)});
  auto loader = Loader::create(std::move(options));
  REQUIRE(loader);
  auto p = load_or_fail(**loader, r);
  CHECK(call(*p, "f", {}) == 424242);
  // An override needs a name and an address.
  LoaderOptions bad;
  bad.overrides.push_back({"getpid", nullptr});
  auto refused = Loader::create(std::move(bad));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::invalid_argument);
}
