// Helpers of the sampling-loop tests (branch_feedback_test.cpp,
// icache_layout_test.cpp): a profile from one instrumented run of a program,
// and a stage's sampled observation from a recorded stream that the
// sampler reads out of its rings through the perf syscall seam, exactly as in
// the exec worker (this kind of host has no PMU).
#pragma once

#include "../../perf/perf_fixtures.h"
#include "fdo/daemon/stage_sampling.h"
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

namespace fdo::daemon::testing {

// Compiles `program` instrumented, runs it once through `run` and returns the
// profile its counters make.
inline ProfileDoc profile_from_a_run(const std::string& program,
                                     const std::function<void(jit::LoadedProgram&)>& run) {
  jit::CompileRequest req;
  req.mode = CompileMode::instrumented;
  auto instrumented = jit::compile(program, req);
  REQUIRE(instrumented);
  auto loader = jit::Loader::create();
  REQUIRE(loader);
  auto loaded = (*loader)->load(instrumented->object, *instrumented);
  REQUIRE(loaded);
  run(**loaded);
  ProfileDoc doc;
  auto counters = (*loaded)->read_counters();
  for (const auto& f : (*loaded)->counters_layout())
    doc.functions[f.pgo_name] =
        FunctionProfile{.cfg_hash = f.cfg_hash, .counts = counters[f.pgo_name]};
  return doc;
}

// Whether the recorded host has a branch stack (LBR): where it has, the
// kernel takes PERF_SAMPLE_BRANCH_STACK on hardware events and refuses it on
// software ones (cpu-clock), and the hardware events' records carry one.
enum class BranchStackHost { none, hardware_events };

// What a stage sampled for `events` over the program at `ranges` observed:
// `write` appends the recorded samples, one ring per event in order.
inline StageObservation recorded_stage(
    const std::vector<std::string>& events, const std::vector<jit::FunctionRange>& ranges,
    const std::function<void(std::vector<perf::testing::RingWriter>&)>& write,
    BranchStackHost host = BranchStackHost::none, std::vector<bool>* branch_stacks = nullptr) {
  perf::testing::FakeSyscalls fake;
  if (host == BranchStackHost::none) {
    fake.fail_branch_stack(EOPNOTSUPP);
  } else {
    fake.open_rules.push_back([](const perf_event_attr& a, int) {
      return a.type == PERF_TYPE_SOFTWARE && (a.sample_type & PERF_SAMPLE_BRANCH_STACK) ? EOPNOTSUPP
                                                                                        : 0;
    });
  }
  StageSampler stage_sampler(fake);
  StageSamplingRequest request{events, 1000, 4000};
  auto sampler = stage_sampler.get(request);
  REQUIRE(sampler);
  REQUIRE((*sampler)->active_events() == events.size());
  (void)(*sampler)->drain();
  (*sampler)->start();
  std::vector<perf::testing::RingWriter> rings;
  for (std::size_t i = 0; i < events.size(); ++i)
    rings.emplace_back(fake.mapping_for(fake.opened[i].fd), perf::page_size());
  write(rings);
  (*sampler)->stop();
  if (branch_stacks != nullptr)
    for (const auto& e : (*sampler)->events())
      branch_stacks->push_back(e.branch_stack);
  auto samples = stage_sample_report((*sampler)->events(), request, (*sampler)->drain(), ranges);
  REQUIRE(samples);
  StageObservation obs;
  obs.samples = std::move(*samples);
  return obs;
}

} // namespace fdo::daemon::testing
