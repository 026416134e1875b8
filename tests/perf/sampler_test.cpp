// The sampler on the fake seam (every failure path, ring drain end to end) and
// on the real kernel with the software cpu-clock event, which needs no PMU.
#include "fdo/perf/attribution.h"
#include "fdo/perf/sampler.h"
#include "perf_fixtures.h"
#include "support/skip.h"
#include "support/spin_section.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <ctime>
#include <iostream>
#include <thread>
#include <unistd.h>

using namespace fdo;
using namespace fdo::perf;
using namespace fdo::perf::testing;

using fdo::testing::spin_in_section;
using fdo::testing::thread_cpu_ns;

TEST_CASE("sampler config is validated", "[perf][sampler]") {
  FakeSyscalls fake;
  SamplerConfig c;
  c.events = {};
  CHECK_FALSE(Sampler::open(c, fake));
  c.events = {"branch-misses", "branch-misses"};
  auto dup = Sampler::open(c, fake);
  REQUIRE_FALSE(dup);
  CHECK(dup.error().message().find("listed twice") != std::string::npos);
  c.events = {"branch-misses"};
  c.frequency_hz = 1000;
  c.period = 10000;
  CHECK_FALSE(Sampler::open(c, fake));
  c.period.reset();
  c.frequency_hz = 0;
  CHECK_FALSE(Sampler::open(c, fake));
  c.frequency_hz = 1000;
  c.data_pages = 3;
  auto pages = Sampler::open(c, fake);
  REQUIRE_FALSE(pages);
  CHECK(pages.error().message().find("power of two") != std::string::npos);
  CHECK(fake.opened.empty());
}

TEST_CASE("no PMU: sampler events report no_pmu and drain nothing", "[perf][sampler]") {
  FakeSyscalls fake;
  fake.fail_pmu_events(ENOENT);
  auto s = Sampler::open(SamplerConfig{}, fake);
  REQUIRE(s);
  CHECK(s->active_events() == 0);
  REQUIRE(s->events().size() == 2);
  for (const auto& e : s->events()) {
    CHECK(e.status == EventStatus::no_pmu);
    CHECK(e.reason.find("ENOENT") != std::string::npos);
  }
  s->start();
  s->stop();
  SampleSet set = s->drain();
  CHECK(set.samples.empty());
  CHECK(set.events == SamplerConfig{}.events);
}

TEST_CASE("branch stack: fall back without it - or refuse when required", "[perf][sampler]") {
  FakeSyscalls fake;
  fake.fail_branch_stack(EOPNOTSUPP);
  SamplerConfig c;
  c.events = {"branch-misses"};
  c.branch_stack = BranchStack::if_supported;
  {
    auto s = Sampler::open(c, fake);
    REQUIRE(s);
    REQUIRE(s->active_events() == 1);
    CHECK(s->events()[0].status == EventStatus::available);
    CHECK_FALSE(s->events()[0].branch_stack);
    CHECK(s->events()[0].reason.find("branch stack not available (EOPNOTSUPP)") !=
          std::string::npos);
    auto j = to_json(s->events()[0]);
    CHECK(j["status"] == "available");
    CHECK(j["branch_stack"] == false);
    const auto& attr = fake.opened.back().attr;
    CHECK((attr.sample_type & PERF_SAMPLE_BRANCH_STACK) == 0);
    CHECK((attr.sample_type & PERF_SAMPLE_IP) != 0);
    CHECK(attr.freq == 1);
    CHECK(attr.sample_freq == 1000);
    CHECK(attr.exclude_kernel == 1);
  }
  c.branch_stack = BranchStack::required;
  auto s = Sampler::open(c, fake);
  REQUIRE(s);
  CHECK(s->active_events() == 0);
  CHECK(s->events()[0].status == EventStatus::not_supported);

  FakeSyscalls ok;
  c.branch_stack = BranchStack::if_supported;
  auto with = Sampler::open(c, ok);
  REQUIRE(with);
  CHECK(with->events()[0].branch_stack);
  CHECK((ok.opened[0].attr.sample_type & PERF_SAMPLE_BRANCH_STACK) != 0);
  CHECK(ok.opened[0].attr.branch_sample_type == PERF_SAMPLE_BRANCH_ANY);
}

TEST_CASE("frequency above the kernel limit is clamped and noted", "[perf][sampler]") {
  FakeSyscalls fake;
  fake.max_sample_rate = 25000;
  SamplerConfig c;
  c.events = {"cycles"};
  c.frequency_hz = 100000;
  c.branch_stack = BranchStack::off;
  auto s = Sampler::open(c, fake);
  REQUIRE(s);
  CHECK(fake.opened[0].attr.sample_freq == 25000);
  CHECK(s->events()[0].reason.find("clamped") != std::string::npos);

  FakeSyscalls fake2;
  c.frequency_hz.reset();
  c.period = 20011;
  auto p = Sampler::open(c, fake2);
  REQUIRE(p);
  CHECK(fake2.opened[0].attr.freq == 0);
  CHECK(fake2.opened[0].attr.sample_period == 20011);
}

TEST_CASE("ring mmap failure is reported with a hint", "[perf][sampler]") {
  FakeSyscalls fake;
  fake.mmap_errno = EPERM;
  SamplerConfig c;
  c.events = {"cycles"};
  auto s = Sampler::open(c, fake);
  REQUIRE(s);
  CHECK(s->active_events() == 0);
  CHECK(s->events()[0].status == EventStatus::other);
  CHECK(s->events()[0].reason.find("perf_event_mlock_kb") != std::string::npos);
  CHECK(fake.open_fds() == 0);
}

TEST_CASE("samples written into the rings are drained per event and attributed",
          "[perf][sampler]") {
  FakeSyscalls fake;
  fake.fail_branch_stack(EOPNOTSUPP);
  fake.fail_event(PERF_TYPE_HW_CACHE, 0x10001, ENOENT); // L1-icache: no such event
  SamplerConfig c;
  c.events = {"branch-misses", "L1-icache-load-misses", "cycles"};
  c.data_pages = 1;
  {
    auto s = Sampler::open(c, fake);
    REQUIRE(s);
    REQUIRE(s->active_events() == 2);
    s->start();
    CHECK(fake.count_ioctls(PERF_EVENT_IOC_ENABLE) == 2);
    // Nothing reads a sampler's count: starting it costs no reset.
    CHECK(fake.count_ioctls(PERF_EVENT_IOC_RESET) == 0);
    // The live fds: branch-misses and cycles (the failed attempts never got one).
    const int fd_bm = fake.opened[0].fd;
    const int fd_cy = fake.opened[1].fd;
    RingWriter wbm(fake.mapping_for(fd_bm), page_size());
    RingWriter wcy(fake.mapping_for(fd_cy), page_size());
    wbm.append(sample_record(0x1010, 100));
    wbm.append(lost_record(0, 4));
    wcy.append(sample_record(0x2010, 1000));
    wcy.append(sample_record(0x9000, 1000));

    SampleSet first = s->drain();
    CHECK(first.samples.size() == 3);
    CHECK(first.stats.lost_samples == 4);
    // Drained rings are not read twice; later records are.
    wbm.set_position(wbm.meta()->data_head);
    wbm.append(sample_record(0x2020, 100));
    SampleSet second = s->drain();
    REQUIRE(second.samples.size() == 1);
    CHECK(second.samples[0].event == 0);
    REQUIRE(first.append(second));
    s->stop();

    auto a = attribute(first, {{"entry", 0x1000, 0x100}, {"loop", 0x2000, 0x100}});
    REQUIRE(a);
    CHECK(a->find("entry")->events[0].samples == 1);
    CHECK(a->find("loop")->events[0].samples == 1);
    CHECK(a->find("loop")->events[2].samples == 1);
    CHECK(a->find("loop")->events[1].samples == 0); // L1-icache never opened
    CHECK(a->outside_jit.events[2].samples == 1);
    CHECK(a->lost_samples == 4);
    auto j = to_json(first);
    CHECK(j["samples_per_event"][0] == 2);
    CHECK(j["samples_per_event"][2] == 2);
  }
  CHECK(fake.open_fds() == 0);
  CHECK(fake.mappings.empty());
}

TEST_CASE("real cpu-clock sampling attributes a spin loop to its address range",
          "[perf][sampler][real]") {
  SamplerConfig c;
  c.events = {"cpu-clock"};
  c.frequency_hz = 1000;
  c.branch_stack = BranchStack::if_supported;
  auto s = Sampler::open(c);
  REQUIRE(s);
  if (s->active_events() == 0) {
    FDO_SKIP("skipped: cpu-clock sampling unavailable here: " + s->events()[0].reason);
  }
  // Software events have no branch stack: the sampler fell back and said so.
  CHECK_FALSE(s->events()[0].branch_stack);
  CHECK(s->events()[0].reason.find("branch stack") != std::string::npos);

  std::uint64_t sink = 1;
  const std::uint64_t until = thread_cpu_ns() + 300'000'000; // 300 ms of CPU
  s->start();
  while (thread_cpu_ns() < until)
    sink = spin_in_section(2'000'000, sink);
  s->stop();
  SampleSet set = s->drain();
  CHECK(sink != 0);

  const std::uint64_t start = fdo::testing::spin_start();
  const std::uint64_t stop = start + fdo::testing::spin_size();
  REQUIRE(stop > start);
  auto a = attribute(set, {{"spin_in_section", start, stop - start}});
  REQUIRE(a);
  std::cout << "cpu-clock sampling: " << to_json(*a).dump() << "\n";
  CHECK(set.stats.malformed == 0);
  CHECK(a->samples >= 50); // ~300 expected at 1 kHz
  CHECK(a->find("spin_in_section")->events[0].share > 0.8);
}

TEST_CASE("a sampler watches the thread it is given, not the caller", "[perf][sampler]") {
  FakeSyscalls fake;
  SamplerConfig c;
  c.events = {"cpu-clock", "branch-misses"};
  c.thread = 4242;
  auto s = Sampler::open(c, fake);
  REQUIRE(s);
  REQUIRE(fake.opened.size() >= 2);
  for (const FakeEvent& e : fake.opened)
    CHECK(e.pid == 4242);
}

TEST_CASE("real cpu-clock sampling of another thread lands in its code", "[perf][sampler][real]") {
  std::atomic<pid_t> tid{0};
  std::atomic<bool> go{false}, done{false};
  std::atomic<std::uint64_t> sink{1};
  std::thread spinner([&] {
    tid = static_cast<pid_t>(::gettid());
    while (!go)
      std::this_thread::yield();
    std::uint64_t x = 1;
    const std::uint64_t until = thread_cpu_ns() + 300'000'000; // 300 ms of CPU
    while (thread_cpu_ns() < until)
      x = spin_in_section(2'000'000, x);
    sink = x;
    done = true;
  });
  while (tid == 0)
    std::this_thread::yield();
  SamplerConfig c;
  c.events = {"cpu-clock"};
  c.frequency_hz = 1000;
  c.thread = tid;
  auto s = Sampler::open(c);
  REQUIRE(s);
  if (s->active_events() == 0) {
    go = true;
    spinner.join();
    FDO_SKIP("skipped: cpu-clock sampling of another thread unavailable here: " +
             s->events()[0].reason);
  }
  s->start();
  go = true;
  spinner.join();
  s->stop();
  SampleSet set = s->drain();
  CHECK(sink != 0);
  const std::uint64_t start = fdo::testing::spin_start();
  const std::uint64_t stop = start + fdo::testing::spin_size();
  auto a = attribute(set, {{"spin_in_section", start, stop - start}});
  REQUIRE(a);
  CHECK(a->samples >= 50); // ~300 expected at 1 kHz
  CHECK(a->find("spin_in_section")->events[0].share > 0.8);
  for (const Sample& sample : set.samples)
    CHECK(sample.tid == static_cast<std::uint32_t>(tid.load()));
}
