// The i-cache layout loop end to end, on a recorded sample stream fed through
// the perf syscall seam (this kind of host has no PMU): L1 i-cache miss
// samples land on one function -> the policy lays exactly it out hot (and the
// never-run function cold) instead of turning the module to -Os -> the next
// optimized object has it in .text.hot, and the loader places it first.
#include "fdo/daemon/icache_layout.h"
#include "fdo/daemon/policy.h"
#include "fdo/daemon/time_share.h"
#include "recorded_stage.h"

#include <catch2/catch.hpp>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <regex>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;
using namespace fdo::perf::testing;
using nlohmann::json;

namespace {
// `hot` runs 16 inner iterations on every outer one; `warm` runs on one
// outer iteration in 16 and a block of `run` on one in 128 (so the profile's
// own summary calls `warm` neither hot nor cold); `cold_path` never runs
// (only for a negative n). In module order `hot` comes last, so placing it
// first is the layout's doing.
constexpr const char* kProgram = R"(
declare i64 @labs(i64)

define i64 @cold_path(i64 %x) noinline {
entry:
  %a = mul i64 %x, 7
  %b = call i64 @labs(i64 %a)
  %c = xor i64 %b, 12345
  %d = udiv i64 %c, 3
  %e = call i64 @labs(i64 %d)
  ret i64 %e
}

define i64 @warm(i64 %x) noinline {
entry:
  %a = mul i64 %x, 3
  %b = add i64 %a, 1
  ret i64 %b
}

define i64 @run(i64 %n) {
entry:
  %neg = icmp slt i64 %n, 0
  br i1 %neg, label %rare, label %loop
rare:
  %r = call i64 @cold_path(i64 %n)
  ret i64 %r
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %next ]
  %acc = phi i64 [ 0, %entry ], [ %acc.next, %next ]
  %h = call i64 @hot(i64 %i)
  %m = and i64 %i, 15
  %z = icmp eq i64 %m, 0
  br i1 %z, label %call_warm, label %next
call_warm:
  %w = call i64 @warm(i64 %i)
  %m2 = and i64 %i, 127
  %z2 = icmp eq i64 %m2, 0
  br i1 %z2, label %rarely, label %next
rarely:
  %w2 = shl i64 %w, 1
  br label %next
next:
  %wv = phi i64 [ %w, %call_warm ], [ %w2, %rarely ], [ 0, %loop ]
  %s = add i64 %h, %wv
  %acc.next = add i64 %acc, %s
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %out, label %loop
out:
  ret i64 %acc.next
}

define i64 @hot(i64 %x) noinline {
entry:
  br label %body
body:
  %j = phi i64 [ 0, %entry ], [ %j.next, %body ]
  %v = phi i64 [ %x, %entry ], [ %v.next, %body ]
  %t = mul i64 %v, 2654435761
  %v.next = xor i64 %t, %j
  %j.next = add i64 %j, 1
  %end = icmp eq i64 %j.next, 16
  br i1 %end, label %done, label %body
done:
  ret i64 %v.next
}
)";

// The section of `symbol` in `object`.
std::string section_of(const std::string& object, const std::string& symbol) {
  auto file = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(llvm::StringRef(object), "object"));
  REQUIRE(bool(file));
  for (const auto& sym : (*file)->symbols()) {
    auto name = sym.getName();
    if (!name || *name != symbol) continue;
    auto section = llvm::cantFail(sym.getSection());
    return llvm::cantFail(section->getName()).str();
  }
  FAIL("no symbol " << symbol);
  return "";
}

// The attributes of `function`'s definition in printed IR, as one string.
std::string attributes_of(const std::string& ir, const std::string& function) {
  std::smatch m;
  const std::regex def("define [^\\n]*@" + function + "\\([^\\n]*#([0-9]+)");
  if (!std::regex_search(ir, m, def)) return "";
  const std::regex group("attributes #" + m[1].str() + " = \\{([^\\n]*)\\}");
  std::smatch g;
  return std::regex_search(ir, g, group) ? g[1].str() : "";
}

const jit::FunctionRange& range_named(const std::vector<jit::FunctionRange>& ranges,
                                      const std::string& name) {
  auto it = std::find_if(ranges.begin(), ranges.end(),
                         [&](const jit::FunctionRange& f) { return f.name == name; });
  REQUIRE(it != ranges.end());
  return *it;
}
} // namespace

TEST_CASE("i-cache miss samples on one function lay it out hot, first in the text, not -Os",
          "[jobs][sampling][layout]") {
  const ProfileDoc profile = profile_from_a_run(kProgram, [](jit::LoadedProgram& p) {
    REQUIRE(p.call("run", std::vector<std::uint64_t>{4096}));
  });
  REQUIRE(profile.functions.count("cold_path") == 1);
  jit::CompileRequest req;
  req.mode = CompileMode::optimized;
  req.profile = &profile;
  req.keep_ir = true;
  auto optimized = jit::compile(kProgram, req);
  REQUIRE(optimized);

  auto loader = jit::Loader::create();
  REQUIRE(loader);
  auto program = (*loader)->load(optimized->object, *optimized);
  REQUIRE(program);
  const auto& ranges = (*program)->function_ranges();
  const jit::FunctionRange& hot = range_named(ranges, "hot");
  const jit::FunctionRange& warm = range_named(ranges, "warm");

  // A recorded stream: 45 i-cache miss samples in `hot`, 5 in `warm`.
  const StageObservation reply = recorded_stage(
      {"cpu-clock", "L1-icache-load-misses"}, ranges, [&](std::vector<RingWriter>& rings) {
        for (int i = 0; i < 45; ++i)
          rings[1].append(sample_record(hot.start + (i % hot.size), 100));
        for (int i = 0; i < 5; ++i)
          rings[1].append(sample_record(warm.start, 100));
        for (int i = 0; i < 30; ++i)
          rings[0].append(sample_record(hot.start, 1000000));
      });

  // The service's side: miss samples per function, summed for the version.
  std::map<std::string, std::string> pgo_names;
  for (const auto& [name, source] : optimized->source_names)
    pgo_names[name] = source;
  const StageSamples stage = stage_samples_from(reply, pgo_names);
  REQUIRE(stage.present);
  std::map<std::string, std::uint64_t> icache;
  add_icache_samples(icache, stage.misses);
  CHECK(icache.at("hot") == 45);
  CHECK(icache.at("warm") == 5);

  PolicyConfig cfg;
  cfg.min_stages = 1;
  ProfileDoc current = profile;
  FeedbackAccumulator fb;
  // An optimized stage on a PMU host: a high counted i-cache miss rate, which
  // used to turn the whole module to -Os.
  fb.add(StageFeedback{
      {}, 1000, {{"L1-icache-load-misses", 500}, {"instructions", 10000}}, std::nullopt});
  PolicyInput in;
  in.current = &current;
  in.current_version = 1;
  in.feedback = &fb;
  in.icache_samples = &icache;
  in.now = std::chrono::system_clock::now();
  PolicyDecision d = decide(cfg, in);
  INFO(d.reason);
  REQUIRE(d.action == PolicyAction::rewrite);
  CHECK(d.profile.knobs.size_level == 0);
  CHECK(d.profile.functions.at("hot").layout == FunctionLayout::hot);
  CHECK(d.profile.functions.at("warm").layout == FunctionLayout::normal);
  CHECK(d.profile.functions.at("run").layout == FunctionLayout::normal);
  CHECK(d.profile.functions.at("cold_path").layout == FunctionLayout::cold);
  CHECK_THAT(d.reason, Catch::Contains("laid out hot hot (45 samples, 90%)"));
  CHECK_THAT(d.reason, Catch::Contains("cold, for size: cold_path"));
  CHECK(profile_digest(d.profile) != profile_digest(current));

  // The layout in place: the same samples change nothing more (no churn).
  ProfileDoc laid_out = d.profile;
  in.current = &laid_out;
  in.current_version = 2;
  CHECK(decide(cfg, in).action == PolicyAction::keep);

  // The next compile: `hot` in .text.hot, `cold_path` in .text.unlikely and
  // optimized for size, `run`'s never-run block split out to .text.split;
  // `warm` stays where the profile's own counts put it, and not for size.
  req.profile = &d.profile;
  auto placed = jit::compile(kProgram, req);
  REQUIRE(placed);
  // (Unique section names: ".text.hot.", ".text.unlikely.", ".text.split.run")
  CHECK_THAT(section_of(placed->object, "hot"), Catch::StartsWith(".text.hot"));
  CHECK(section_of(placed->object, "warm") == section_of(optimized->object, "warm"));
  CHECK_THAT(section_of(placed->object, "cold_path"), Catch::StartsWith(".text.unlikely"));
  CHECK_THAT(section_of(placed->object, "run.cold"), Catch::StartsWith(".text.split"));
  INFO(placed->ir);
  const std::string cold_attrs = attributes_of(placed->ir, "cold_path");
  CHECK_THAT(cold_attrs, Catch::Contains("minsize"));
  CHECK_THAT(cold_attrs, Catch::Contains("optsize"));
  CHECK_THAT(attributes_of(placed->ir, "warm"), !Catch::Contains("minsize"));
  CHECK_THAT(attributes_of(placed->ir, "run"), !Catch::Contains("minsize"));
  CHECK_THAT(attributes_of(placed->ir, "hot"), Catch::Contains("hot"));

  // Linked, `hot` comes before every other function of the program, and the
  // cold text (`cold_path`, `run.cold`) after all the rest.
  auto loaded = (*loader)->load(placed->object, *placed);
  REQUIRE(loaded);
  const auto& placed_ranges = (*loaded)->function_ranges();
  const jit::FunctionRange& hot_now = range_named(placed_ranges, "hot");
  auto is_cold_text = [&](const std::string& name) {
    const std::string section = section_of(placed->object, name);
    return section.starts_with(".text.unlikely") || section.starts_with(".text.split");
  };
  std::uint64_t first_cold = UINT64_MAX, last_other = 0;
  for (const jit::FunctionRange& f : placed_ranges) {
    INFO(f.name << " at " << f.start << ", hot at " << hot_now.start);
    if (f.name != "hot") CHECK(hot_now.start < f.start);
    if (is_cold_text(f.name))
      first_cold = std::min(first_cold, f.start);
    else
      last_other = std::max(last_other, f.start);
  }
  CHECK(last_other < first_cold);
  // And it still runs, with the same result as before.
  auto before = (*program)->call("run", std::vector<std::uint64_t>{1000});
  auto after = (*loaded)->call("run", std::vector<std::uint64_t>{1000});
  REQUIRE(before);
  REQUIRE(after);
  CHECK(*before == *after);
}
