// inprocess_bench: what in-process execution costs, measured side by side in
// one run (rounds rotate the variants, each figure is the median of rounds):
//   - per call, for a small entry compiled plain (-O2, no profile; x * 3 + 1
//     down one of two branches): a native direct call (the same function
//     compiled into this binary, not inlined), the raw thunk of the linked
//     object, Engine::call (generation reference, call count, 1-in-64
//     timing) and Hold::call (a hold taken per round, counts kept in the
//     hold), and Engine::call on a lease fdod samples (the engine notes the
//     calling thread on its timed calls); ratios to native;
//   - native entries (CallerThread, one per thread): the entry's own function
//     pointer called in a loop with a quiescent point every 1,024 calls and
//     the calls counted there ("typed, epoch"); the per-call form, next()
//     before each call, inline ("typed, next()") and out of line with 1-in-64
//     timing, as fdo_inproc_thread_next and fdo::api::NativeEntry make it
//     ("typed, C API per call");
//   - swap latency: a flush that learns of newer code, leases it, links it
//     and swaps it in (the object comes from memory here, not over a socket);
//   - flush cost: a flush of an instrumented generation with new counts, and
//     its share of the run time at a 200 ms flush interval.
// Usage: inprocess_bench [calls-per-round]
#include "engine.h"
#include "fdo/jit/compiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <sys/mman.h>
#include <vector>

using namespace fdo;
using namespace fdo::inprocess;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

constexpr const char* kIr = R"(
define i64 @f(i64 %x) {
entry:
  %c = icmp sgt i64 %x, 1000
  br i1 %c, label %big, label %small
big:
  %a = mul i64 %x, 3
  %a1 = add i64 %a, 1
  ret i64 %a1
small:
  %b = mul i64 %x, 3
  %b1 = add i64 %b, 1
  ret i64 %b1
}
)";

[[gnu::noinline]] std::uint64_t native_f(std::uint64_t x) {
  asm volatile("");
  return static_cast<std::int64_t>(x) > 1000 ? x * 3 + 1 : x * 3 + 1;
}

using NativeF = std::uint64_t (*)(std::uint64_t);
// native_f through a pointer the compiler cannot see through.
volatile NativeF native_pointer = &native_f;

// What fdo_inproc_thread_next costs a C caller: an out-of-line call with the
// C API's checks (libfdo/src/inprocess/c_api_inprocess.cpp).
[[gnu::noinline]] void* c_api_next(CallerThread* t, std::size_t entry) {
  if (!t || entry >= t->entry_count()) return nullptr;
  return t->next(entry);
}

// fdo::api::NativeEntry's call (fdo.hpp): the per-call form, one call in 64
// timed and reported through fdo_inproc_thread_count.
struct NativeEntryLike {
  CallerThread* t;
  std::uint32_t until_timed = 0;
  [[gnu::noinline]] static void count(CallerThread* t, std::uint64_t ns) { t->count(0, 0, 1, ns); }
  std::uint64_t operator()(std::uint64_t x) {
    auto f = reinterpret_cast<NativeF>(c_api_next(t, 0));
    if (until_timed-- != 0) return f(x);
    until_timed = 63;
    auto t0 = Clock::now();
    std::uint64_t r = f(x);
    count(t, static_cast<std::uint64_t>((Clock::now() - t0).count()));
    return r;
  }
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "inprocess_bench: %s\n", what.c_str());
  std::exit(1);
}

template <class T> T must(Expected<T> e, const char* what) {
  if (!e) die(std::string(what) + ": " + e.error().describe());
  return std::move(e).value();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Output {
  std::string key;
  jit::CompileResult result;
  std::int64_t version = 0;
};

// Serves one output at a time from memory, as program.lease would over the
// socket; feedback.submit reports stale once `current` moved on.
class MemoryLink final : public DaemonLink {
public:
  Expected<LinkReply> call(std::string_view method, const json& params) override {
    std::lock_guard lk(mu);
    if (method == "program.lease") {
      if (guarded && params.value("guard", false)) {
        // A guarded trial's stages: `current` and `other` by turns (or the
        // same arm again), each object sent once.
        if (alternate) std::swap(current, other);
        bool have = false;
        for (const json& k : params.value("loaded", json::array()))
          have = have || k == current->key;
        LinkReply r{
            {{"lease", ++leases},
             {"unchanged", have},
             {"storage_key", current->key},
             {"profile_version", current->version},
             {"object_size", current->result.object.size()},
             {"sampling", {{"available", false}, {"reason", "bench"}}},
             {"variant", {{"role", alternate ? "candidate" : "incumbent"}, {"name", current->key}}},
             {"renew", true},
             {"metadata", jit::metadata_to_json(current->result)}},
            {}};
        if (!have) {
          Fd fd(::memfd_create("bench", MFD_CLOEXEC));
          FDO_TRY_STATUS(write_all(fd.get(), current->result.object));
          r.fds.push_back(std::move(fd));
        }
        leased[leases] = current->version;
        return r;
      }
      if (params.value("unless_storage_key", "") == current->key)
        return LinkReply{{{"unchanged", true}}, {}};
      Fd fd(::memfd_create("bench", MFD_CLOEXEC));
      FDO_TRY_STATUS(write_all(fd.get(), current->result.object));
      LinkReply r{{{"lease", ++leases},
                   {"storage_key", current->key},
                   {"profile_version", current->version},
                   {"object_size", current->result.object.size()},
                   {"sampling", {{"available", sampled}, {"reason", "bench"}}},
                   {"metadata", jit::metadata_to_json(current->result)}},
                  {}};
      r.fds.push_back(std::move(fd));
      leased[leases] = current->version;
      return r;
    }
    if (method == "feedback.submit")
      return LinkReply{{{"profile_version", current->version},
                        {"stale", leased[params["lease"].get<std::uint64_t>()] != current->version},
                        {"renew", guarded}},
                       {}};
    if (method == "program.sample")
      return LinkReply{{{"sampling", {{"available", true}, {"reason", "bench"}}}}, {}};
    return LinkReply{{{"released", true}}, {}};
  }
  bool sampled = false; // leases say fdod samples them (program.sample)
  // Guarded leases: every submit asks to renew; `alternate` serves `current`
  // and `other` by turns.
  bool guarded = false, alternate = false;
  std::mutex mu;
  const Output* current = nullptr;
  const Output* other = nullptr;
  std::uint64_t leases = 0;
  std::map<std::uint64_t, std::int64_t> leased;
};

Output compile(CompileMode mode, std::string key, std::int64_t version) {
  jit::CompileRequest req;
  req.mode = mode;
  return {std::move(key), must(jit::compile(kIr, req), "compile"), version};
}

std::unique_ptr<Engine> open(const std::shared_ptr<MemoryLink>& link) {
  return must(
      Engine::open(
          link,
          EngineOptions{"bench", {"f"}, Flushing::manual, std::chrono::milliseconds(200), 64}),
      "open");
}

} // namespace

int main(int argc, char** argv) {
  const std::uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2'000'000;
  const int rounds = 15;
  Output plain_a = compile(CompileMode::plain, "plain-a", 0);
  Output plain_b = compile(CompileMode::plain, "plain-b", 1);
  Output instrumented = compile(CompileMode::instrumented, "instr", 0);

  auto link = std::make_shared<MemoryLink>();
  link->current = &plain_a;
  auto engine = open(link);
  auto sampled_link = std::make_shared<MemoryLink>();
  sampled_link->current = &plain_a;
  sampled_link->sampled = true;
  auto sampled = open(sampled_link);
  auto loader = must(jit::Loader::create(), "loader");
  auto raw = must(loader->load(plain_a.result.object, plain_a.result), "load");
  jit::ThunkFn thunk = must(raw->thunk("f"), "thunk");

  auto caller = must(engine->attach(), "attach");
  // Diagnosis: the linked f's own bytes (a lea and a ret, position-
  // independent) copied into a page mapped next to this binary and into one
  // the kernel places (among the shared libraries, > 4 GB from a PIE
  // binary). Their difference is what distance costs a call; the loader maps
  // code next to the executable (jit/src/near_memory.h), so "typed, epoch"
  // should run as the near copy and as "native, via pointer".
  auto copy_of_f = [&](bool near) -> NativeF {
    for (const jit::FunctionRange& r : raw->function_ranges())
      if (r.name == "f" && r.size <= 64) {
        const auto anchor = reinterpret_cast<std::uintptr_t>(&native_f);
        void* hint = near ? reinterpret_cast<void*>((anchor + (64u << 20)) & ~std::uintptr_t{4095})
                          : nullptr;
        void* page = ::mmap(hint, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) return nullptr;
        std::memcpy(page, reinterpret_cast<const void*>(r.start), r.size);
        if (::mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0) return nullptr;
        return reinterpret_cast<NativeF>(page);
      }
    return nullptr;
  };
  NativeF near_copy = copy_of_f(true), far_copy = copy_of_f(false);
  std::vector<double> native_ns, thunk_ns, engine_ns, hold_ns, sampled_ns, typed_ns, next_ns,
      capi_ns, pointer_ns, near_ns, far_ns;
  std::uint64_t sink = 0;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    for (std::uint64_t x = 0; x < n; ++x)
      sink += native_f(x);
    auto t1 = Clock::now();
    for (std::uint64_t x = 0; x < n; ++x) {
      std::uint64_t a = x, ret = 0;
      thunk(&a, &ret);
      sink += ret;
    }
    auto t2 = Clock::now();
    for (std::uint64_t x = 0; x < n; ++x) {
      std::uint64_t a = x, ret = 0;
      engine->call(0, &a, &ret);
      sink += ret;
    }
    auto t3 = Clock::now();
    {
      Hold hold = engine->hold();
      for (std::uint64_t x = 0; x < n; ++x) {
        std::uint64_t a = x, ret = 0;
        hold.call(0, &a, &ret);
        sink += ret;
      }
    }
    auto t4 = Clock::now();
    for (std::uint64_t x = 0; x < n; ++x) {
      std::uint64_t a = x, ret = 0;
      sampled->call(0, &a, &ret);
      sink += ret;
    }
    auto t5 = Clock::now();
    {
      auto f = reinterpret_cast<NativeF>(caller->entry(0));
      for (std::uint64_t x = 0; x < n;) {
        const std::uint64_t end = std::min(n, x + 1024);
        for (; x < end; ++x)
          sink += f(x);
        caller->count(0, 1024, 0, 0);
        if (caller->quiescent()) f = reinterpret_cast<NativeF>(caller->entry(0));
      }
    }
    auto t6 = Clock::now();
    for (std::uint64_t x = 0; x < n; ++x)
      sink += reinterpret_cast<NativeF>(caller->next(0))(x);
    auto t7 = Clock::now();
    {
      NativeEntryLike call{caller.get()};
      for (std::uint64_t x = 0; x < n; ++x)
        sink += call(x);
    }
    auto t8 = Clock::now();
    {
      NativeF f = native_pointer; // the same call shape as "typed, epoch", to native code
      for (std::uint64_t x = 0; x < n; ++x)
        sink += f(x);
    }
    auto t9 = Clock::now();
    pointer_ns.push_back(std::chrono::duration<double, std::nano>(t9 - t8).count() / n);
    if (near_copy && far_copy) {
      for (std::uint64_t x = 0; x < n; ++x)
        sink += near_copy(x);
      auto t10 = Clock::now();
      for (std::uint64_t x = 0; x < n; ++x)
        sink += far_copy(x);
      near_ns.push_back(std::chrono::duration<double, std::nano>(t10 - t9).count() / n);
      far_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t10).count() / n);
    }
    typed_ns.push_back(std::chrono::duration<double, std::nano>(t6 - t5).count() / n);
    next_ns.push_back(std::chrono::duration<double, std::nano>(t7 - t6).count() / n);
    capi_ns.push_back(std::chrono::duration<double, std::nano>(t8 - t7).count() / n);
    sampled_ns.push_back(std::chrono::duration<double, std::nano>(t5 - t4).count() / n);
    hold_ns.push_back(std::chrono::duration<double, std::nano>(t4 - t3).count() / n);
    native_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
    thunk_ns.push_back(std::chrono::duration<double, std::nano>(t2 - t1).count() / n);
    engine_ns.push_back(std::chrono::duration<double, std::nano>(t3 - t2).count() / n);
  }

  caller.reset(); // before the swaps: a thread's generation stays linked until it passes
  // Swap latency: each round publishes the other plain output and flushes.
  std::vector<double> swap_us;
  for (int r = 0; r < rounds; ++r) {
    std::uint64_t a = 1, ret = 0;
    engine->call(0, &a, &ret); // a call to report, so the flush asks
    {
      std::lock_guard lk(link->mu);
      link->current = r % 2 == 0 ? &plain_b : &plain_a;
    }
    auto t0 = Clock::now();
    FlushResult f = must(engine->flush(), "flush (swap)");
    auto t1 = Clock::now();
    if (!f.swapped) die("flush did not swap");
    swap_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }

  // A guarded trial's stages (docs/runtimes.md, "Guarded leases"): a flush
  // that renews the lease and runs the same arm on, and one that switches to
  // the trial's other arm, linked already.
  auto glink = std::make_shared<MemoryLink>();
  glink->current = &plain_a;
  glink->other = &plain_b;
  glink->guarded = true;
  auto ge = open(glink);
  std::vector<double> renew_us, switch_us;
  for (int r = 0; r < 2 * rounds + 2; ++r) {
    const bool alternate = r % 2 == 0;
    {
      std::lock_guard lk(glink->mu);
      glink->alternate = alternate;
    }
    std::uint64_t a = 1, ret = 0;
    ge->call(0, &a, &ret);
    auto t0 = Clock::now();
    FlushResult f = must(ge->flush(), "flush (guarded)");
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!f.renewed || f.swapped != alternate) die("guarded flush did not renew as scripted");
    if (r >= 2) (alternate ? switch_us : renew_us).push_back(us); // both arms linked from r 2
  }
  if (ge->generation() > 2) die("a trial's arm was linked twice");

  // Flush cost of an instrumented generation with fresh counts.
  auto ilink = std::make_shared<MemoryLink>();
  ilink->current = &instrumented;
  auto ie = open(ilink);
  std::vector<double> flush_us;
  for (int r = 0; r < rounds; ++r) {
    for (std::uint64_t x = 0; x < 10000; ++x) {
      std::uint64_t a = x, ret = 0;
      ie->call(0, &a, &ret);
      sink += ret;
    }
    auto t0 = Clock::now();
    must(ie->flush(), "flush");
    flush_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }

  const double nat = median(native_ns), th = median(thunk_ns), en = median(engine_ns),
               ho = median(hold_ns), sa = median(sampled_ns);
  std::printf("in-process execution, %llu calls per round, %d rounds (medians)\n",
              static_cast<unsigned long long>(n), rounds);
  std::printf("  native direct call      %8.2f ns/call   1.00x\n", nat);
  std::printf("  linked object, thunk    %8.2f ns/call   %.2fx native\n", th, th / nat);
  std::printf("  Engine::call            %8.2f ns/call   %.2fx native\n", en, en / nat);
  std::printf("  Hold::call              %8.2f ns/call   %.2fx native\n", ho, ho / nat);
  std::printf("  Engine::call, sampled   %8.2f ns/call   %.2fx native\n", sa, sa / nat);
  const double ty = median(typed_ns), nx = median(next_ns), ca = median(capi_ns),
               np = median(pointer_ns);
  std::printf("  native, via pointer     %8.2f ns/call   %.2fx native\n", np, np / nat);
  if (!near_ns.empty()) {
    std::printf("  linked f copied near    %8.2f ns/call   %.2fx native  (diagnosis)\n",
                median(near_ns), median(near_ns) / nat);
    std::printf("  linked f copied far     %8.2f ns/call   %.2fx native  (diagnosis)\n",
                median(far_ns), median(far_ns) / nat);
  }
  std::printf("  typed, epoch            %8.2f ns/call   %.2fx native\n", ty, ty / nat);
  std::printf("  typed, next()           %8.2f ns/call   %.2fx native\n", nx, nx / nat);
  std::printf("  typed, C API per call   %8.2f ns/call   %.2fx native\n", ca, ca / nat);
  std::printf("swap (flush that leases, links and swaps new code): %.1f us\n", median(swap_us));
  std::printf("guarded flush, same arm renewed: %.1f us; switched to the trial's other arm "
              "(linked already): %.1f us\n",
              median(renew_us), median(switch_us));
  std::printf("flush of an instrumented generation (counts read, batch built, submitted to an "
              "in-memory link): %.1f us = %.4f%% of a 200 ms flush interval\n",
              median(flush_us), median(flush_us) / 2000.0);
  std::printf("(checksum %llu)\n", static_cast<unsigned long long>(sink));
  return 0;
}
