// perf_bench: what self-monitoring costs.
//   1. clock_gettime (the software fallback's clocks)
//   2. one counting-group read: rdpmc vs read(2), hardware and software groups
//   3. a whole measure() around an empty call
//   4. sampling overhead at 1 kHz and 10 kHz on a test kernel vs no sampling
//      (hardware events where a PMU exists; cpu-clock, which needs none, always)
// Figures are medians of interleaved rounds in one run. Whatever the host
// cannot do is printed as "not measurable here: <reason>".
//
// Usage: perf_bench [--rounds N]   (default 31; finishes in a few seconds)
// The sampling overhead is shown in thread CPU time (what the sampled thread
// pays, robust to other load on the host) and in wall time.
#include "fdo/perf/attribution.h"
#include "fdo/perf/capabilities.h"
#include "fdo/perf/counters.h"
#include "fdo/perf/sampler.h"
#include "fdo/util/fd.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

using namespace fdo;
using namespace fdo::perf;

namespace {

std::uint64_t now_ns(clockid_t c = CLOCK_MONOTONIC) {
  timespec ts{};
  clock_gettime(c, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// ns per call of f: median over `rounds` batches of `batch` calls.
double per_call_ns(int rounds, int batch, const std::function<void()>& f) {
  std::vector<double> samples;
  for (int r = 0; r < rounds; ++r) {
    std::uint64_t t0 = now_ns();
    for (int i = 0; i < batch; ++i)
      f();
    samples.push_back(static_cast<double>(now_ns() - t0) / batch);
  }
  return median(samples);
}

// The sampling test kernel: xorshift-driven data-dependent branches over a
// 64 KiB table, about 20 ms.
__attribute__((noinline)) std::uint64_t test_kernel(std::vector<std::uint32_t>& table) {
  std::uint64_t x = 88172645463325252ull, acc = 0;
  for (int rep = 0; rep < 40; ++rep)
    for (std::size_t i = 0; i < table.size(); ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      if (x & 1)
        acc += table[(x >> 8) & (table.size() - 1)];
      else
        table[i] ^= static_cast<std::uint32_t>(x);
    }
  return acc;
}

std::string first_failure(const std::vector<EventReading>& st) {
  for (const auto& s : st)
    if (s.status != EventStatus::available)
      return std::string(to_string(s.status)) + ": " + s.reason;
  return "unknown";
}

void print_na(const char* what, const std::string& why) {
  std::printf("  %-46s not measurable here: %s\n", what, why.c_str());
}

void bench_group_reads(int rounds) {
  std::printf("\n[counting-group read cost, ns per read (median of %d x 2000)]\n", rounds);
  const std::vector<std::string> hw = {"instructions", "cycles", "branch-misses"};

  auto rd = CounterGroup::open(hw, Syscalls::real(), {ReadPreference::rdpmc_if_available});
  auto sc = CounterGroup::open(hw, Syscalls::real(), {ReadPreference::read_syscall_only});
  if (!rd || !sc) {
    std::printf("  group open failed: %s\n", (!rd ? rd.error() : sc.error()).describe().c_str());
    return;
  }
  double rdpmc_ns = 0, syscall_ns = 0;
  if (rd->counting_events() == 0) {
    print_na("hardware group via rdpmc", "no PMU (" + first_failure(rd->statuses()) + ")");
  } else if (rd->read_method() != ReadMethod::rdpmc) {
    print_na("hardware group via rdpmc", "the kernel does not allow rdpmc for these events");
  } else {
    rd->start();
    rdpmc_ns = per_call_ns(rounds, 2000, [&] { (void)rd->read(); });
    rd->stop();
    std::printf("  %-46s %8.1f ns\n", "hardware group (3 events) via rdpmc", rdpmc_ns);
  }
  if (sc->counting_events() == 0) {
    print_na("hardware group via read(2)", "no PMU (" + first_failure(sc->statuses()) + ")");
  } else {
    sc->start();
    syscall_ns = per_call_ns(rounds, 2000, [&] { (void)sc->read(); });
    sc->stop();
    std::printf("  %-46s %8.1f ns\n", "hardware group (3 events) via read(2)", syscall_ns);
  }
  if (rdpmc_ns > 0 && syscall_ns > 0)
    std::printf("  %-46s %8.2fx\n", "read(2) / rdpmc", syscall_ns / rdpmc_ns);

  auto sw = CounterGroup::open({"task-clock", "cpu-clock"});
  if (!sw || sw->counting_events() == 0) {
    print_na("software group via read(2)",
             sw ? first_failure(sw->statuses()) : sw.error().describe());
  } else {
    sw->start();
    double ns = per_call_ns(rounds, 2000, [&] { (void)sw->read(); });
    sw->stop();
    std::printf("  %-46s %8.1f ns\n", "software group (task-clock, cpu-clock) read(2)", ns);
    std::printf("    (each CounterGroup::read() also reads task-clock and two clocks)\n");
  }

  // The exec worker's whole cost per execution: start + stop + read.
  auto def = CounterGroup::open(default_hardware_events());
  if (def) {
    double ns = per_call_ns(rounds, 500, [&] { (void)measure(*def, [] {}); });
    std::printf("  %-46s %8.1f ns   (%zu of 6 hardware events counting, read: %s)\n",
                "measure() of an empty call, default events", ns, def->counting_events(),
                std::string(to_string(def->read_method())).c_str());
  }
}

void bench_clocks(int rounds) {
  std::printf("\n[software clocks, ns per call (median of %d x 20000)]\n", rounds);
  timespec ts{};
  double mono = per_call_ns(rounds, 20000, [&] { clock_gettime(CLOCK_MONOTONIC, &ts); });
  double cpu = per_call_ns(rounds, 20000, [&] { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); });
  std::printf("  %-46s %8.1f ns\n", "clock_gettime(CLOCK_MONOTONIC)", mono);
  std::printf("  %-46s %8.1f ns\n", "clock_gettime(CLOCK_THREAD_CPUTIME_ID)", cpu);
  // The host's bare system-call cost, to read the figures below against.
  double sys = per_call_ns(rounds, 20000, [] { (void)::syscall(SYS_getppid); });
  std::printf("  %-46s %8.1f ns\n", "syscall(SYS_getppid) (bare syscall baseline)", sys);
  // One read(2) of a single software counter, without CounterGroup around it.
  auto tc = resolve_event("task-clock");
  if (tc) {
    perf_event_attr attr{};
    attr.size = sizeof attr;
    attr.type = tc->type;
    attr.config = tc->config;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    SysResult fd = Syscalls::real().perf_event_open(attr, 0, -1, -1, 0);
    if (fd.ok()) {
      std::uint64_t v = 0;
      double rd = per_call_ns(rounds, 20000, [&] {
        (void)Syscalls::real().read(static_cast<int>(fd.value), &v, sizeof v);
      });
      Syscalls::real().close(static_cast<int>(fd.value));
      std::printf("  %-46s %8.1f ns\n", "read(2) of one task-clock fd", rd);
    } else {
      print_na("read(2) of one task-clock fd", errno_name(fd.error));
    }
  }
}

struct SamplingRun {
  std::string label;
  std::optional<Sampler> sampler;
  std::vector<double> wall_ms;
  std::vector<double> cpu_ms;
  std::uint64_t samples = 0;
  std::uint64_t lost = 0;
};

void bench_sampling(const std::string& event, int rounds) {
  std::printf("\n[sampling overhead on the test kernel: %s, median of %d interleaved rounds]\n",
              event.c_str(), rounds);
  std::vector<SamplingRun> runs;
  runs.push_back({"no sampling", std::nullopt, {}, {}, 0, 0});
  for (std::uint64_t hz : {1000ull, 10000ull}) {
    SamplerConfig c;
    c.events = {event};
    c.frequency_hz = hz;
    c.branch_stack = BranchStack::off;
    auto s = Sampler::open(c);
    std::string label = std::to_string(hz / 1000) + " kHz";
    if (!s) {
      print_na(label.c_str(), s.error().describe());
      continue;
    }
    if (s->active_events() == 0) {
      const auto& e = s->events()[0];
      print_na((event + " at " + label).c_str(),
               (e.status == EventStatus::no_pmu ? "no PMU (" : "") + e.reason +
                   (e.status == EventStatus::no_pmu ? ")" : ""));
      continue;
    }
    runs.push_back({label, std::move(*s), {}, {}, 0, 0});
  }
  if (runs.size() == 1) return;
  std::vector<std::uint32_t> table(1 << 14, 1);
  std::uint64_t sink = test_kernel(table); // warm up
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < runs.size(); ++k) {
      // Rotate the order each round so drift (other load, frequency) is shared.
      SamplingRun& run = runs[(k + static_cast<std::size_t>(r)) % runs.size()];
      if (run.sampler) run.sampler->start();
      const std::uint64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
      const std::uint64_t t0 = now_ns();
      sink += test_kernel(table);
      const std::uint64_t t1 = now_ns();
      const std::uint64_t c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
      if (run.sampler) {
        run.sampler->stop();
        SampleSet set = run.sampler->drain();
        run.samples += set.samples.size();
        run.lost += set.stats.lost_samples;
      }
      run.wall_ms.push_back(static_cast<double>(t1 - t0) / 1e6);
      run.cpu_ms.push_back(static_cast<double>(c1 - c0) / 1e6);
    }
  const double base_cpu = median(runs[0].cpu_ms);
  const double base_wall = median(runs[0].wall_ms);
  std::printf("  %-14s %10s %9s %10s %9s\n", "", "thread CPU", "vs none", "wall", "vs none");
  for (const auto& run : runs) {
    const double c = median(run.cpu_ms), w = median(run.wall_ms);
    std::printf("  %-14s %7.2f ms %+8.2f%% %7.2f ms %+8.2f%%", run.label.c_str(), c,
                (c / base_cpu - 1) * 100, w, (w / base_wall - 1) * 100);
    if (run.sampler)
      std::printf("   %5.0f samples/round, %llu lost", double(run.samples) / rounds,
                  static_cast<unsigned long long>(run.lost));
    std::printf("\n");
  }
  if (sink == 42) std::printf("(sink)\n");
}

} // namespace

int main(int argc, char** argv) {
  int rounds = 31;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::max(3, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--rounds N]\n", argv[0]);
      return 2;
    }
  }
  Capabilities caps = probe();
  std::printf("perf_bench — host: %s\n", caps.summary.c_str());
  if (auto load = read_file("/proc/loadavg", 4096)) std::printf("load average: %s", load->c_str());
  bench_clocks(rounds);
  bench_group_reads(rounds);
  bench_sampling("branch-misses", rounds);
  bench_sampling("cpu-clock", rounds);
  return 0;
}
