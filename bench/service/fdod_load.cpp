// fdod_load: the client side of the service-overhead bench (bench/service/).
// Driven by run_service.py, usable alone. A C++ client so that what the
// client adds to a round trip is microseconds, not an interpreter's
// milliseconds. Prints one JSON document on stdout.
//
//   latency     one connection, one `execute` at a time; client-side time
//               around each request plus the stage figures fdod reports;
//               then `health` the same way (the JSON-RPC transport floor).
//   throughput  N connections (one thread each), closed loop for a fixed
//               time; requests/s and per-request latency.
//   native      the same IR compiled in this process by fdo_jit and called
//               through its thunk, and a direct C++ call, timed per call the
//               same way (plus the cost of the timer itself and a batched
//               mean, which per-call timing of nanosecond calls cannot show).
//
// The entry must be i64(i64, i64) returning the wrapped sum of its
// arguments: every reply's value is checked against that, and (unless
// "any") its stage mode and cache outcome against --expect-mode and
// --expect-outcome. Exit: 0 ok; 1 a daemon error or a failed check; 2 bad
// arguments.
#include "fdo/ctl/client.h"
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <vector>

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kUsage =
    R"(usage:
  fdod_load latency    --socket PATH --program ID [--entry NAME] [--samples N] [--warmup N]
                       [--expect-mode M] [--expect-outcome O] [--verbose 0|1]
  fdod_load throughput --socket PATH --program ID [--entry NAME] --clients N
                       [--duration-ms MS] [--warmup-ms MS] [--expect-mode M] [--expect-outcome O]
  fdod_load native     --ir FILE [--entry NAME] [--samples N] [--blocks N] [--batch N]

The entry (default "add") must be i64(i64, i64) returning the sum of its arguments.
--expect-mode (default optimized) and --expect-outcome (default memory_hit) are checked on
every reply ("any" checks nothing). --verbose 1 asks for verbose replies (each counter's reason
text: the reply shape before compact replies). Defaults: --samples 1000, --warmup 20, --duration-ms 3000,
--warmup-ms 500; native: --samples 20000, --blocks 10, --batch 1000000.
Prints JSON on stdout. Exit 0 ok (also --help), 1 daemon error or failed check, 2 bad arguments.
)";

enum class Mode { latency, throughput, native };

struct Options {
  Mode mode = Mode::latency;
  std::string socket;
  std::string program;
  std::string entry = "add";
  std::string ir_path;
  long samples = -1; // -1: the mode's default
  long warmup = 20;
  long clients = 0;
  long duration_ms = 3000;
  long warmup_ms = 500;
  long blocks = 10;
  long batch = 1'000'000;
  std::string expect_mode = "optimized";
  std::string expect_outcome = "memory_hit";
  // Ask for verbose execute replies (every event's reason: the reply shape
  // before replies became compact), to compare both in one run.
  bool verbose = false;
};

struct UsageError {
  std::string message; // empty: --help was asked for
};

long parse_count(const std::string& flag, const std::string& text, long min, long max) {
  long v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min || v > max)
    throw UsageError{flag + ": '" + text + "' is not a whole number from " + std::to_string(min) +
                     " to " + std::to_string(max)};
  return v;
}

Options parse_args(int argc, char** argv) {
  if (argc < 2) throw UsageError{"missing mode (latency, throughput or native)"};
  Options o;
  std::string mode = argv[1];
  if (mode == "latency")
    o.mode = Mode::latency;
  else if (mode == "throughput")
    o.mode = Mode::throughput;
  else if (mode == "native")
    o.mode = Mode::native;
  else if (mode == "-h" || mode == "--help")
    throw UsageError{};
  else
    throw UsageError{"unknown mode '" + mode + "' (expected latency, throughput or native)"};
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") throw UsageError{};
    if (i + 1 >= argc) throw UsageError{flag + ": missing value"};
    std::string value = argv[++i];
    if (flag == "--socket")
      o.socket = value;
    else if (flag == "--program")
      o.program = value;
    else if (flag == "--entry")
      o.entry = value;
    else if (flag == "--ir")
      o.ir_path = value;
    else if (flag == "--samples")
      o.samples = parse_count(flag, value, 1, 100'000'000);
    else if (flag == "--warmup")
      o.warmup = parse_count(flag, value, 0, 100'000'000);
    else if (flag == "--clients")
      o.clients = parse_count(flag, value, 1, 1024);
    else if (flag == "--duration-ms")
      o.duration_ms = parse_count(flag, value, 1, 3'600'000);
    else if (flag == "--warmup-ms")
      o.warmup_ms = parse_count(flag, value, 0, 3'600'000);
    else if (flag == "--blocks")
      o.blocks = parse_count(flag, value, 1, 100'000);
    else if (flag == "--batch")
      o.batch = parse_count(flag, value, 1, 1'000'000'000);
    else if (flag == "--expect-mode")
      o.expect_mode = value;
    else if (flag == "--expect-outcome")
      o.expect_outcome = value;
    else if (flag == "--verbose")
      o.verbose = parse_count(flag, value, 0, 1) == 1;
    else
      throw UsageError{"unknown option '" + flag + "'"};
  }
  if (o.entry.empty()) throw UsageError{"--entry: empty name"};
  if (o.mode == Mode::native) {
    if (o.ir_path.empty()) throw UsageError{"native: --ir FILE is required"};
    if (o.samples < 0) o.samples = 20'000;
  } else {
    if (o.socket.empty()) throw UsageError{mode + ": --socket PATH is required"};
    if (o.program.empty()) throw UsageError{mode + ": --program ID is required"};
    if (o.mode == Mode::throughput && o.clients == 0)
      throw UsageError{"throughput: --clients N is required"};
    if (o.samples < 0) o.samples = 1000;
  }
  return o;
}

std::int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

// Arguments of call i: spread over a wide range (negative too) so a wrong
// ABI or a stale value cannot pass the check by accident; no overflow.
std::pair<std::int64_t, std::int64_t> args_for(std::uint64_t i) {
  auto a = static_cast<std::int64_t>((i * 2654435761u) % 4'000'000'007u) - 2'000'000'000;
  auto b = 123'456'789 - static_cast<std::int64_t>(i) * 3;
  return {a, b};
}

// Nearest-rank percentile of sorted samples.
double percentile_sorted(const std::vector<std::int64_t>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size()) - 1e-9));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]);
}

json summarize(std::vector<std::int64_t> v) {
  json s = {{"n", v.size()}};
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (std::int64_t x : v)
    sum += static_cast<double>(x);
  s["mean"] = sum / static_cast<double>(v.size());
  s["min"] = v.front();
  s["p50"] = percentile_sorted(v, 0.50);
  s["p90"] = percentile_sorted(v, 0.90);
  s["p99"] = percentile_sorted(v, 0.99);
  s["max"] = v.back();
  return s;
}

// What one execute reply said, checked against what the caller expects.
struct ReplyCheck {
  explicit ReplyCheck(const Options& o) : opts(o) {}

  const Options& opts;
  std::uint64_t wrong = 0; // replies that failed a check
  std::string first_problem;
  std::map<std::string, std::uint64_t> outcomes, modes, versions;

  void problem(const std::string& what) {
    ++wrong;
    if (first_problem.empty()) first_problem = what;
  }

  // Returns the stage object (empty when the reply was malformed).
  json check(const json& result, std::int64_t expected, std::uint64_t call) {
    const std::string at = "call " + std::to_string(call) + ": ";
    if (!result.is_object() || !result.contains("value") || !result["value"].is_number_integer()) {
      problem(at + "reply has no integer value: " + result.dump().substr(0, 300));
      return json::object();
    }
    if (result["value"].get<std::int64_t>() != expected)
      problem(at + "value " + result["value"].dump() + ", expected " + std::to_string(expected));
    if (!result.contains("stage") || !result["stage"].is_object()) {
      problem(at + "reply has no stage object");
      return json::object();
    }
    const json& stage = result["stage"];
    std::string mode = stage.value("mode", "?");
    std::string outcome = "?";
    if (stage.contains("cache") && stage["cache"].is_object())
      outcome = stage["cache"].value("outcome", "?");
    ++modes[mode];
    ++outcomes[outcome];
    ++versions[std::to_string(stage.value("profile_version", -1))];
    if (opts.expect_mode != "any" && mode != opts.expect_mode)
      problem(at + "stage mode " + mode + ", expected " + opts.expect_mode);
    if (opts.expect_outcome != "any" && outcome != opts.expect_outcome)
      problem(at + "cache outcome " + outcome + ", expected " + opts.expect_outcome + " (" +
              (stage.contains("cache") ? stage["cache"].value("detail", "") : "") + ")");
    return stage;
  }

  json to_json() const {
    return {{"failed_checks", wrong},
            {"first_problem", first_problem},
            {"outcomes", outcomes},
            {"modes", modes},
            {"profile_versions", versions}};
  }
};

json execute_params(const Options& o, std::uint64_t i, std::int64_t& expected) {
  auto [a, b] = args_for(i);
  expected = a + b;
  json params = {{"program", o.program}, {"entry", o.entry}, {"args", {a, b}}};
  if (o.verbose) params["verbose"] = true;
  return params;
}

fdo::Expected<fdo::ctl::RpcClient> connect(const Options& o) {
  fdo::ctl::ClientOptions co;
  co.timeout = std::chrono::seconds(60);
  return fdo::ctl::RpcClient::connect(o.socket, co);
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fdod_load: %s\n", what.c_str());
  std::exit(1);
}

// The client's own share of a round trip: encoding a request and decoding
// a reply of the size fdod sends, without any I/O.
json client_codec_cost(const Options& o, const json& sample_result) {
  json reply = {{"jsonrpc", "2.0"}, {"id", 1}, {"result", sample_result}};
  std::string reply_line = reply.dump();
  std::vector<std::int64_t> samples;
  std::int64_t expected = 0;
  std::size_t sink = 0;
  for (int i = 0; i < 2000; ++i) {
    auto t0 = Clock::now();
    json req = {{"jsonrpc", "2.0"},
                {"id", i},
                {"method", "execute"},
                {"params", execute_params(o, static_cast<std::uint64_t>(i), expected)}};
    std::string line = req.dump();
    json back = json::parse(reply_line);
    auto t1 = Clock::now();
    sink += line.size() + back.size();
    samples.push_back(ns_between(t0, t1));
  }
  json s = summarize(std::move(samples));
  s["reply_bytes"] = reply_line.size() + 1;
  s["sink"] = sink; // keeps the work observable
  return s;
}

int run_latency(const Options& o) {
  auto client = connect(o);
  if (!client) fail(client.error().describe());
  ReplyCheck warm_check{o};
  ReplyCheck check{o};
  std::uint64_t call = 0;
  json last_result;
  for (long i = 0; i < o.warmup; ++i, ++call) {
    std::int64_t expected = 0;
    json params = execute_params(o, call, expected);
    auto r = client->call("execute", params);
    if (!r) fail("warm-up execute: " + r.error().describe());
    warm_check.check(*r, expected, call);
  }
  std::vector<std::int64_t> rtt, exec_ns, wall_ns, thread_cpu_ns;
  rtt.reserve(static_cast<std::size_t>(o.samples));
  for (long i = 0; i < o.samples; ++i, ++call) {
    std::int64_t expected = 0;
    json params = execute_params(o, call, expected);
    auto t0 = Clock::now();
    auto r = client->call("execute", params);
    auto t1 = Clock::now();
    if (!r) fail("execute (timed call " + std::to_string(i) + "): " + r.error().describe());
    rtt.push_back(ns_between(t0, t1));
    json stage = check.check(*r, expected, call);
    exec_ns.push_back(stage.value("exec_ns", std::int64_t{-1}));
    const json counters = stage.value("counters", json::object());
    wall_ns.push_back(counters.value("wall_ns", std::int64_t{-1}));
    thread_cpu_ns.push_back(counters.value("thread_cpu_ns", std::int64_t{-1}));
    last_result = std::move(*r);
  }
  // The transport floor: `health` does no work beyond JSON-RPC over the
  // same connection, so execute minus health is the execute path itself.
  std::vector<std::int64_t> health_rtt;
  const long health_samples = std::max(50L, o.samples / 4);
  for (long i = 0; i < health_samples; ++i) {
    auto t0 = Clock::now();
    auto r = client->call("health");
    auto t1 = Clock::now();
    if (!r) fail("health (timed call " + std::to_string(i) + "): " + r.error().describe());
    if (r->value("status", "") != "ok") fail("health answered " + r->dump());
    health_rtt.push_back(ns_between(t0, t1));
  }
  std::vector<std::int64_t> overhead(rtt.size());
  for (std::size_t i = 0; i < rtt.size(); ++i)
    overhead[i] = rtt[i] - exec_ns[i];
  json out = {{"mode", "latency"},
              {"entry", o.entry},
              {"samples", o.samples},
              {"warmup", o.warmup},
              {"warmup_checks", warm_check.to_json()},
              {"checks", check.to_json()},
              {"summary",
               {{"rtt_ns", summarize(rtt)},
                {"exec_ns", summarize(exec_ns)},
                {"wall_ns", summarize(wall_ns)},
                {"thread_cpu_ns", summarize(thread_cpu_ns)},
                {"rtt_minus_exec_ns", summarize(overhead)},
                {"health_rtt_ns", summarize(health_rtt)}}},
              {"client_codec_ns", client_codec_cost(o, last_result)},
              {"last_stage", last_result.value("stage", json::object())},
              {"raw",
               {{"rtt_ns", rtt},
                {"exec_ns", exec_ns},
                {"wall_ns", wall_ns},
                {"thread_cpu_ns", thread_cpu_ns},
                {"health_rtt_ns", health_rtt}}}};
  std::printf("%s\n", out.dump().c_str());
  return (warm_check.wrong + check.wrong) == 0 ? 0 : 1;
}

double process_cpu_s() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

struct ClientRun {
  std::vector<std::int64_t> latencies; // requests inside the measured window
  std::uint64_t completed = 0;         // all requests, warm-up and tail included
  std::string error;                   // a daemon or transport error stopped this client
};

int run_throughput(const Options& o) {
  const auto n = static_cast<std::size_t>(o.clients);
  std::vector<fdo::ctl::RpcClient> clients;
  clients.reserve(n);
  for (std::size_t c = 0; c < n; ++c) {
    auto client = connect(o);
    if (!client) fail("client " + std::to_string(c) + ": " + client.error().describe());
    clients.push_back(std::move(*client));
  }
  const double cpu0 = process_cpu_s();
  std::vector<ClientRun> runs(n);
  std::vector<ReplyCheck> checks(n, ReplyCheck{o});
  // Every thread starts at the same instant, warms up, then is measured for
  // the same window; a request counts when it started and finished inside it.
  const auto start = Clock::now() + std::chrono::milliseconds(20);
  const auto measure_from = start + std::chrono::milliseconds(o.warmup_ms);
  const auto measure_to = measure_from + std::chrono::milliseconds(o.duration_ms);
  std::vector<std::thread> threads;
  for (std::size_t c = 0; c < n; ++c) {
    threads.emplace_back([&, c] {
      ClientRun& run = runs[c];
      std::this_thread::sleep_until(start);
      // Disjoint argument sequences per client.
      std::uint64_t call = static_cast<std::uint64_t>(c) << 40;
      while (true) {
        auto t0 = Clock::now();
        if (t0 >= measure_to) break;
        std::int64_t expected = 0;
        json params = execute_params(o, call, expected);
        auto r = clients[c].call("execute", params);
        auto t1 = Clock::now();
        if (!r) {
          run.error = "client " + std::to_string(c) + ": " + r.error().describe();
          break;
        }
        checks[c].check(*r, expected, call);
        ++run.completed;
        ++call;
        if (t0 >= measure_from && t1 <= measure_to) run.latencies.push_back(ns_between(t0, t1));
      }
    });
  }
  for (auto& t : threads)
    t.join();
  const double client_cpu_s = process_cpu_s() - cpu0;

  std::vector<std::int64_t> all;
  std::vector<std::uint64_t> per_client;
  std::uint64_t failed_checks = 0, completed = 0;
  std::string first_problem, first_error;
  std::map<std::string, std::uint64_t> outcomes, modes;
  for (std::size_t c = 0; c < n; ++c) {
    all.insert(all.end(), runs[c].latencies.begin(), runs[c].latencies.end());
    per_client.push_back(runs[c].latencies.size());
    completed += runs[c].completed;
    failed_checks += checks[c].wrong;
    if (first_problem.empty()) first_problem = checks[c].first_problem;
    if (first_error.empty()) first_error = runs[c].error;
    for (auto& [k, v] : checks[c].outcomes)
      outcomes[k] += v;
    for (auto& [k, v] : checks[c].modes)
      modes[k] += v;
  }
  const double seconds = static_cast<double>(o.duration_ms) / 1000.0;
  json out = {{"mode", "throughput"},
              {"clients", o.clients},
              {"duration_ms", o.duration_ms},
              {"warmup_ms", o.warmup_ms},
              {"requests", all.size()},
              {"requests_per_s", static_cast<double>(all.size()) / seconds},
              {"completed_total", completed},
              // This process's CPU (all threads, warm-up and tail included)
              // per completed request: what the client side costs.
              {"client_cpu_us_per_request",
               client_cpu_s * 1e6 / static_cast<double>(std::max<std::uint64_t>(completed, 1))},
              {"per_client_requests", per_client},
              {"latency_ns", summarize(all)},
              {"checks",
               {{"failed_checks", failed_checks},
                {"first_problem", first_problem},
                {"outcomes", outcomes},
                {"modes", modes}}},
              {"error", first_error},
              {"raw", {{"latency_ns", all}}}};
  std::printf("%s\n", out.dump().c_str());
  if (!first_error.empty()) std::fprintf(stderr, "fdod_load: %s\n", first_error.c_str());
  return failed_checks == 0 && first_error.empty() ? 0 : 1;
}

// The floor: a plain C++ call the compiler may not inline, clone or fold.
#if defined(__clang__)
[[gnu::noinline]] std::int64_t native_add(std::int64_t a, std::int64_t b) {
#else
[[gnu::noinline, gnu::noipa]] std::int64_t native_add(std::int64_t a, std::int64_t b) {
#endif
  asm volatile("");
  return a + b;
}

int run_native(const Options& o) {
  std::ifstream in(o.ir_path, std::ios::binary);
  if (!in) fail("cannot read " + o.ir_path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string ir = ss.str();

  fdo::jit::CompileRequest req;
  req.mode = fdo::CompileMode::plain;
  auto compiled = fdo::jit::compile(ir, req);
  if (!compiled) fail("compile " + o.ir_path + ": " + compiled.error().describe());
  auto loader = fdo::jit::Loader::create();
  if (!loader) fail("JIT loader: " + loader.error().describe());
  auto program = (*loader)->load(compiled->object, *compiled);
  if (!program) fail("load " + o.ir_path + ": " + program.error().describe());
  const auto& entries = (*program)->entries();
  auto entry = std::find_if(entries.begin(), entries.end(),
                            [&](const fdo::jit::EntryInfo& e) { return e.name == o.entry; });
  if (entry == entries.end()) fail("no entry '" + o.entry + "' in " + o.ir_path);
  if (entry->return_type != "i64" || entry->param_types != std::vector<std::string>{"i64", "i64"})
    fail("entry '" + o.entry + "' is not i64(i64, i64)");
  auto thunk_or = (*program)->thunk(o.entry);
  if (!thunk_or) fail(thunk_or.error().describe());
  fdo::jit::ThunkFn thunk = *thunk_or;

  std::uint64_t wrong = 0;
  std::string first_problem;
  auto check = [&](std::uint64_t call, std::int64_t got, std::int64_t expected, const char* how) {
    if (got == expected) return;
    if (wrong++ == 0)
      first_problem = std::string(how) + " call " + std::to_string(call) + ": " +
                      std::to_string(got) + ", expected " + std::to_string(expected);
  };

  // Blocks rotate timer / thunk / direct so a drift of the machine spreads
  // over all three.
  std::vector<std::int64_t> timer, via_thunk, via_direct;
  const long per_block = std::max(1L, o.samples / o.blocks);
  std::uint64_t call = 0;
  for (long blk = 0; blk < o.blocks; ++blk) {
    for (long i = 0; i < per_block; ++i) {
      auto t0 = Clock::now();
      auto t1 = Clock::now();
      timer.push_back(ns_between(t0, t1));
    }
    for (long i = 0; i < per_block; ++i, ++call) {
      auto [a, b] = args_for(call);
      std::uint64_t slots[2] = {static_cast<std::uint64_t>(a), static_cast<std::uint64_t>(b)};
      std::uint64_t ret = 0;
      auto t0 = Clock::now();
      thunk(slots, &ret);
      auto t1 = Clock::now();
      via_thunk.push_back(ns_between(t0, t1));
      check(call, static_cast<std::int64_t>(ret), a + b, "thunk");
    }
    for (long i = 0; i < per_block; ++i, ++call) {
      auto [a, b] = args_for(call);
      auto t0 = Clock::now();
      std::int64_t got = native_add(a, b);
      auto t1 = Clock::now();
      via_direct.push_back(ns_between(t0, t1));
      check(call, got, a + b, "direct");
    }
  }

  // Batched: one clock pair around many calls, the per-call cost without the
  // timer's own. Arguments are precomputed outside the timed loop.
  std::vector<std::uint64_t> arg_a(1024), arg_b(1024);
  for (std::size_t i = 0; i < arg_a.size(); ++i) {
    auto [a, b] = args_for(i);
    arg_a[i] = static_cast<std::uint64_t>(a);
    arg_b[i] = static_cast<std::uint64_t>(b);
  }
  auto batch_thunk = [&] {
    std::uint64_t acc = 0;
    auto t0 = Clock::now();
    for (long i = 0; i < o.batch; ++i) {
      std::uint64_t slots[2] = {arg_a[i & 1023], arg_b[i & 1023]};
      std::uint64_t ret = 0;
      thunk(slots, &ret);
      acc += ret;
    }
    auto t1 = Clock::now();
    return std::pair{static_cast<double>(ns_between(t0, t1)) / static_cast<double>(o.batch), acc};
  };
  auto batch_direct = [&] {
    std::uint64_t acc = 0;
    auto t0 = Clock::now();
    for (long i = 0; i < o.batch; ++i)
      acc += static_cast<std::uint64_t>(native_add(static_cast<std::int64_t>(arg_a[i & 1023]),
                                                   static_cast<std::int64_t>(arg_b[i & 1023])));
    auto t1 = Clock::now();
    return std::pair{static_cast<double>(ns_between(t0, t1)) / static_cast<double>(o.batch), acc};
  };
  std::vector<double> batch_thunk_ns, batch_direct_ns;
  std::uint64_t expected_acc = 0;
  for (long i = 0; i < o.batch; ++i)
    expected_acc += arg_a[i & 1023] + arg_b[i & 1023];
  for (int rep = 0; rep < 5; ++rep) {
    auto [t, acc_t] = batch_thunk();
    auto [d, acc_d] = batch_direct();
    if (acc_t != expected_acc) check(0, 0, 1, "batched thunk sum");
    if (acc_d != expected_acc) check(0, 0, 1, "batched direct sum");
    batch_thunk_ns.push_back(t);
    batch_direct_ns.push_back(d);
  }
  std::sort(batch_thunk_ns.begin(), batch_thunk_ns.end());
  std::sort(batch_direct_ns.begin(), batch_direct_ns.end());

  json out = {{"mode", "native"},
              {"entry", o.entry},
              {"compile_mode", "plain"},
              {"code_size", compiled->code_size},
              {"samples_per_variant", timer.size()},
              {"blocks", o.blocks},
              {"checks", {{"failed_checks", wrong}, {"first_problem", first_problem}}},
              {"summary",
               {{"timer_ns", summarize(timer)},
                {"thunk_ns", summarize(via_thunk)},
                {"direct_ns", summarize(via_direct)}}},
              {"batched_mean_ns",
               {{"calls_per_batch", o.batch},
                {"thunk", batch_thunk_ns[batch_thunk_ns.size() / 2]},
                {"direct", batch_direct_ns[batch_direct_ns.size() / 2]}}},
              {"raw", {{"timer_ns", timer}, {"thunk_ns", via_thunk}, {"direct_ns", via_direct}}}};
  std::printf("%s\n", out.dump().c_str());
  return wrong == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  Options opts;
  try {
    opts = parse_args(argc, argv);
  } catch (const UsageError& e) {
    if (e.message.empty()) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "fdod_load: %s\n", e.message.c_str());
    std::fputs(kUsage, stderr);
    return 2;
  }
  switch (opts.mode) {
  case Mode::latency:
    return run_latency(opts);
  case Mode::throughput:
    return run_throughput(opts);
  case Mode::native:
    return run_native(opts);
  }
  return 2;
}
