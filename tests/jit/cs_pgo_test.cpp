// Context-sensitive PGO (docs/jit.md, "Context-sensitive PGO"): the second
// instrumented round over the optimized, inlined code, and its use.
#include "fdo/jit/compiler.h"
#include "fdo/jit/profdata.h"
#include "jit_test_util.h"
#include "pgo_test_util.h"

#include <catch2/catch.hpp>
#include <llvm/ProfileData/InstrProfReader.h>
#include <llvm/Support/MemoryBuffer.h>
#include <map>
#include <numeric>
#include <regex>
#include <unistd.h>

using namespace fdo;
using namespace fdo::jit;
using namespace fdo::jit::test;

namespace {

// The blocks of one function's IR text, by label ("" for the entry block).
std::map<std::string, std::string> blocks_of(const std::string& body) {
  static const std::regex label(R"(^([\w.]+):)");
  std::map<std::string, std::string> blocks;
  std::string current;
  std::size_t pos = body.find('\n'); // past the define line
  while (pos != std::string::npos && pos < body.size()) {
    std::size_t eol = body.find('\n', pos + 1);
    std::string line = body.substr(pos + 1, eol == std::string::npos ? eol : eol - pos - 1);
    std::smatch m;
    if (std::regex_search(line, m, label))
      current = m[1];
    else
      blocks[current] += line + "\n";
    pos = eol;
  }
  return blocks;
}

// The weights of every conditional branch in `fn` that chooses between a
// block storing to @sink_a and one storing to @sink_b (classify's `x > 100`,
// inlined), as {towards sink_a, towards sink_b}.
std::vector<std::pair<std::uint64_t, std::uint64_t>> classify_weights(const std::string& ir,
                                                                      const std::string& fn) {
  static const std::regex branch(
      R"(br i1 %[\w.]+, label %([\w.]+), label %([\w.]+), !prof !(\d+))");
  const std::string body = function_body(ir, fn);
  const auto blocks = blocks_of(body);
  auto stores_to = [&](const std::string& block, const char* global) {
    auto it = blocks.find(block);
    return it != blocks.end() && contains(it->second, std::string("ptr @") + global);
  };
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (auto it = std::sregex_iterator(body.begin(), body.end(), branch);
       it != std::sregex_iterator(); ++it) {
    const std::string t = (*it)[1], f = (*it)[2], id = (*it)[3];
    const bool a_first = stores_to(t, "sink_a") && stores_to(f, "sink_b");
    const bool b_first = stores_to(t, "sink_b") && stores_to(f, "sink_a");
    if (!a_first && !b_first) continue;
    const std::regex weights("\n!" + id + R"( = !\{!"branch_weights", i32 (\d+), i32 (\d+)\})");
    std::smatch w;
    REQUIRE(std::regex_search(ir, w, weights));
    const std::uint64_t x = std::stoull(w[1]), y = std::stoull(w[2]);
    out.push_back(a_first ? std::pair{x, y} : std::pair{y, x});
  }
  return out;
}

// `llvm-profdata-16 show --showcs --all-functions` of an indexed profile
// (llvm-16, a dependency of llvm-16-dev, installs it).
std::string profdata_show_cs(const std::string& indexed) {
  char path[] = "/tmp/fdo-cs-test-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, indexed.data(), indexed.size()) == static_cast<ssize_t>(indexed.size()));
  close(fd);
  std::string out;
  if (FILE* p = popen(
          ("llvm-profdata-16 show --showcs --all-functions " + std::string(path) + " 2>&1").c_str(),
          "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
      out.append(buf, n);
    pclose(p);
  }
  unlink(path);
  return out;
}

std::uint64_t sum(const std::vector<std::uint64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::uint64_t{0});
}

} // namespace

TEST_CASE("context-sensitive PGO: counts per inlined context - applied after inlining",
          "[jit][pgo][cs]") {
  // No unrolling or vectorisation: one copy of each branch to look at.
  ProfileDoc knobs;
  knobs.knobs.unroll = false;
  knobs.knobs.vectorize = false;

  // Round 1: classify is not pre-inlined, so its one record sums both
  // callers: 1000 calls each way.
  Instrumented first = load_instrumented("cs_context.ll", &knobs);
  REQUIRE(first.program->call("left", std::vector<std::uint64_t>{1000, 1000}).has_value());
  REQUIRE(first.program->call("right", std::vector<std::uint64_t>{1000, 0}).has_value());
  ProfileDoc profile = profile_from(first);
  profile.knobs = knobs.knobs;
  const auto classify =
      std::find_if(profile.functions.begin(), profile.functions.end(),
                   [](const auto& f) { return f.second.source_name == "cs_context.c:classify"; });
  REQUIRE(classify != profile.functions.end());
  CHECK(sum(classify->second.counts) >= 2000);

  // Without CS counts the optimized compile inlines classify into both
  // callers, and both copies inherit its averaged (1:1) weights.
  CompileResult averaged =
      compile_or_throw(fixture("cs_context.ll"), request(CompileMode::optimized, &profile, true));
  CHECK(averaged.counters_layout.empty());
  for (const char* fn : {"left", "right"}) {
    INFO(fn);
    CHECK_FALSE(contains(function_body(averaged.ir, fn), "call"));
    auto w = classify_weights(averaged.ir, fn);
    REQUIRE(w.size() == 1);
    CHECK(w[0].first == w[0].second);
  }

  // Round 2: the optimized pipeline with CS instrumentation after inlining.
  Instrumented cs = load_instrumented("cs_context.ll", &profile, CompileMode::cs_instrumented);
  REQUIRE_FALSE(cs.compiled.counters_layout.empty());
  std::map<std::string, std::string> by_source;
  for (const InstrumentedFunction& f : cs.compiled.counters_layout) {
    INFO(f.pgo_name);
    CHECK(is_cs_hash(f.cfg_hash)); // LLVM's CS flag, bit 60
    by_source[cs.compiled.source_names.at(f.pgo_name)] = f.pgo_name;
  }
  // classify was inlined everywhere and is gone: its counts now live in its
  // callers' records, one copy per context.
  CHECK(by_source.count("cs_context.c:classify") == 0);
  REQUIRE(by_source.count("left") == 1);
  REQUIRE(by_source.count("right") == 1);
  REQUIRE(cs.program->call("left", std::vector<std::uint64_t>{700, 1000}).value_or(0) == 700);
  REQUIRE(cs.program->call("right", std::vector<std::uint64_t>{300, 0}).value_or(1) == 0);
  ProfileDoc cs_counts = profile_from(cs);
  const auto& left = cs_counts.functions.at(by_source["left"]).counts;
  const auto& right = cs_counts.functions.at(by_source["right"]).counts;
  // Each record counted its own context: left's loop ran 700 times, right's 300.
  CHECK(std::count(left.begin(), left.end(), 700) >= 1);
  CHECK(std::count(left.begin(), left.end(), 300) == 0);
  CHECK(std::count(right.begin(), right.end(), 300) >= 1);
  CHECK(std::count(right.begin(), right.end(), 700) == 0);

  profile.cs_functions = cs_counts.functions;

  // The export carries them as CS records (what llvm-profdata show --showcs lists).
  auto exported = indexed_profile(profile);
  REQUIRE(exported.has_value());
  auto reader = llvm::IndexedInstrProfReader::create(
      llvm::MemoryBuffer::getMemBuffer(*exported, "profile.profdata", false));
  REQUIRE(static_cast<bool>(reader));
  CHECK((*reader)->hasCSIRLevelProfile());
  auto left_cs =
      (*reader)->getInstrProfRecord("left", profile.cs_functions.at(by_source["left"]).cfg_hash);
  REQUIRE(static_cast<bool>(left_cs));
  CHECK(left_cs->Counts == left);
  SECTION("llvm-profdata-16 show --showcs lists them by source name") {
    const std::string out = profdata_show_cs(*exported);
    INFO(out);
    CHECK(contains(out, "  left:"));
    CHECK(contains(out, "  right:"));
    CHECK_FALSE(contains(out, "fdo:fdo.local"));
  }

  // CSIRUse: the weights of each inlined copy follow its own context.
  CompileResult used =
      compile_or_throw(fixture("cs_context.ll"), request(CompileMode::optimized, &profile, true));
  CHECK(used.counters_layout.empty());
  CHECK_FALSE(contains(used.diagnostics.empty() ? "" : used.diagnostics.front(), "hash mismatch"));
  auto lw = classify_weights(used.ir, "left");
  auto rw = classify_weights(used.ir, "right");
  REQUIRE(lw.size() == 1);
  REQUIRE(rw.size() == 1);
  CHECK(lw[0].first > 100 * lw[0].second); // left: always x > 100
  CHECK(rw[0].second > 100 * rw[0].first); // right: never
  // The profiled code still computes the same.
  auto p = cs.loader->load(used.object, used);
  if (!p) FAIL(p.error().describe());
  CHECK((*p)->call("left", std::vector<std::uint64_t>{50, 1000}).value_or(0) == 50);
  CHECK((*p)->call("right", std::vector<std::uint64_t>{50, 0}).value_or(1) == 0);
}

TEST_CASE("cs_instrumented needs a profile - one without counts gathers over plain -O2",
          "[jit][pgo][cs]") {
  auto r = compile(fixture("cs_context.ll"), request(CompileMode::cs_instrumented));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code() == Errc::invalid_argument);
  CHECK(contains(r.error().message(), "cs_instrumented mode needs a profile"));

  ProfileDoc empty;
  CompileResult c =
      compile_or_throw(fixture("cs_context.ll"), request(CompileMode::cs_instrumented, &empty));
  REQUIRE_FALSE(c.counters_layout.empty());
  for (const InstrumentedFunction& f : c.counters_layout)
    CHECK(is_cs_hash(f.cfg_hash));
  CHECK(std::find(c.diagnostics.begin(), c.diagnostics.end(),
                  "the profile holds no counts; compiled without profile data") !=
        c.diagnostics.end());
}
