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
//   floor       no fdod: a chain of N forked server processes that only pass
//               bytes on (hop 1 a listening Unix socket served by one epoll
//               thread, like fdod's I/O thread; further hops socketpairs,
//               like fdod's exec workers), timed like latency (1 client) or
//               throughput (K clients): what this host's transport costs.
//
// The entry must be i64(i64, i64) returning the wrapped sum of its
// arguments: every reply's value is checked against that, and (unless
// "any") its stage mode and cache outcome against --expect-mode and
// --expect-outcome. Exit: 0 ok; 1 a daemon error or a failed check; 2 bad
// arguments.
#include "fdo/ctl/client.h"
#include "fdo/jit/compiler.h"
#include "fdo/jit/loader.h"
#include "fdo/util/fd.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using fdo::Fd;

namespace {

constexpr const char* kUsage =
    R"(usage:
  fdod_load latency    --socket PATH --program ID [--entry NAME] [--samples N] [--warmup N]
                       [--expect-mode M] [--expect-outcome O] [--verbose 0|1]
  fdod_load throughput --socket PATH --program ID [--entry NAME] --clients N
                       [--duration-ms MS] [--warmup-ms MS] [--expect-mode M] [--expect-outcome O]
  fdod_load native     --ir FILE [--entry NAME] [--samples N] [--blocks N] [--batch N]
  fdod_load floor      --hops N [--clients K] [--samples S] [--warmup N] [--duration-ms MS]
                       [--warmup-ms MS] [--payload BYTES | --payload REQUEST/REPLY]

The entry (default "add") must be i64(i64, i64) returning the sum of its arguments.
--expect-mode (default optimized) and --expect-outcome (default memory_hit) are checked on
every reply ("any" checks nothing). --verbose 1 asks for verbose replies (each counter's reason
text: the reply shape before compact replies). Defaults: --samples 1000, --warmup 20, --duration-ms 3000,
--warmup-ms 500; native: --samples 20000, --blocks 10, --batch 1000000.
floor: forks N (1..16) processes that pass messages on, no fdod; hop 1 listens on a Unix stream
socket in a temp dir and serves all K connections on one thread (epoll), each further hop is
reached through a Unix stream socketpair, the last echoes. --clients 1 (default) without
--duration-ms: S round trips timed one by one (--warmup untimed first), JSON like latency's;
K > 1 or --duration-ms given: closed loop for the duration, JSON like throughput's. --payload: request and reply bytes (default 178/1770: a compact execute request
and reply of bench/service's add as fdod_load sends and fdod answers them; one number sets both).
Prints JSON on stdout. Exit 0 ok (also --help), 1 daemon error or failed check, 2 bad arguments.
)";

enum class Mode { latency, throughput, native, floor };

// Default floor message sizes: a compact `execute` request and its reply for
// bench/service's add program, as measured in a run_service.py run.
constexpr std::size_t kFloorRequestBytes = 178;
constexpr std::size_t kFloorReplyBytes = 1770;

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
  bool duration_given = false; // floor: --duration-ms asks for the closed loop with 1 client too
  long warmup_ms = 500;
  long blocks = 10;
  long batch = 1'000'000;
  std::string expect_mode = "optimized";
  std::string expect_outcome = "memory_hit";
  // Ask for verbose execute replies (every event's reason: the reply shape
  // before replies became compact), to compare both in one run.
  bool verbose = false;
  long hops = 0; // floor: processes in the chain
  std::size_t request_bytes = kFloorRequestBytes;
  std::size_t reply_bytes = kFloorReplyBytes;
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
  if (argc < 2) throw UsageError{"missing mode (latency, throughput, native or floor)"};
  Options o;
  std::string mode = argv[1];
  if (mode == "latency")
    o.mode = Mode::latency;
  else if (mode == "throughput")
    o.mode = Mode::throughput;
  else if (mode == "native")
    o.mode = Mode::native;
  else if (mode == "floor")
    o.mode = Mode::floor;
  else if (mode == "-h" || mode == "--help")
    throw UsageError{};
  else
    throw UsageError{"unknown mode '" + mode + "' (expected latency, throughput, native or floor)"};
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
    else if (flag == "--duration-ms") {
      o.duration_ms = parse_count(flag, value, 1, 3'600'000);
      o.duration_given = true;
    } else if (flag == "--warmup-ms")
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
    else if (flag == "--hops")
      o.hops = parse_count(flag, value, 1, 16);
    else if (flag == "--payload") {
      // 8 bytes at least: the request's tag, echoed in the reply.
      const auto slash = value.find('/');
      const long req = parse_count(flag, value.substr(0, slash), 8, 16 << 20);
      const long reply = slash == std::string::npos
                             ? req
                             : parse_count(flag, value.substr(slash + 1), 8, 16 << 20);
      o.request_bytes = static_cast<std::size_t>(req);
      o.reply_bytes = static_cast<std::size_t>(reply);
    } else
      throw UsageError{"unknown option '" + flag + "'"};
  }
  if (o.entry.empty()) throw UsageError{"--entry: empty name"};
  if (o.mode == Mode::native) {
    if (o.ir_path.empty()) throw UsageError{"native: --ir FILE is required"};
    if (o.samples < 0) o.samples = 20'000;
  } else if (o.mode == Mode::floor) {
    if (o.hops == 0) throw UsageError{"floor: --hops N is required"};
    if (o.clients == 0) o.clients = 1;
    if (o.samples < 0) o.samples = 1000;
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
  std::size_t request_bytes = 0; // the last request's line with its newline
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
    request_bytes = line.size() + 1;
    samples.push_back(ns_between(t0, t1));
  }
  json s = summarize(std::move(samples));
  s["reply_bytes"] = reply_line.size() + 1;
  s["request_bytes"] = request_bytes;
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

// ---------------------------------------------------------------------------
// floor: the transport floor of this host. A chain of `hops` server
// processes: hop 1 listens on a real AF_UNIX stream socket in a temp dir
// (as fdod does) and serves every client connection from one thread with
// epoll (as fdod's I/O thread does); each further hop is reached through an
// AF_UNIX stream socketpair (as fdod reaches an exec worker). A hop forwards
// a request to the next and the reply back; the last hop answers: a reply of
// the reply size whose first 8 bytes echo the request's. No work at all, so
// what is measured is system calls, copies and scheduling.

struct FloorError {
  std::string message;
};

[[noreturn]] void floor_fail(const std::string& what) {
  throw FloorError{what};
}

[[noreturn]] void floor_fail_errno(const std::string& what) {
  floor_fail(what + ": " + std::strerror(errno));
}

// Whole-buffer I/O on a blocking descriptor. read_full: false on a clean EOF
// before the first byte; an EOF in the middle of a message is an error.
bool read_full(int fd, char* buf, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, buf + got, n - got);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
    } else if (r == 0) {
      if (got == 0) return false;
      floor_fail("peer closed the connection in the middle of a message");
    } else if (errno != EINTR) {
      floor_fail_errno("read");
    }
  }
  return true;
}

void write_full(int fd, const char* buf, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    ssize_t w = ::send(fd, buf + done, n - done, MSG_NOSIGNAL);
    if (w > 0)
      done += static_cast<std::size_t>(w);
    else if (w < 0 && errno != EINTR)
      floor_fail_errno("write");
  }
}

struct FloorSizes {
  std::size_t request = 0;
  std::size_t reply = 0;
};

// The last hop's answer: reply-sized, the request's first 8 bytes echoed.
void make_reply(const char* request, std::string& reply) {
  std::memcpy(reply.data(), request, sizeof(std::uint64_t));
}

// A hop after the first: one message at a time, blocking, like an exec
// worker. Returns when its upstream closes.
void serve_serial_hop(int up, int down, FloorSizes sizes) {
  std::string req(sizes.request, 'q');
  std::string reply(sizes.reply, 'r');
  while (read_full(up, req.data(), req.size())) {
    if (down < 0) {
      make_reply(req.data(), reply);
    } else {
      write_full(down, req.data(), req.size());
      if (!read_full(down, reply.data(), reply.size()))
        floor_fail("the next hop closed its socket");
    }
    write_full(up, reply.data(), reply.size());
  }
}

// Hop 1: the listening socket and every client connection on one thread,
// epoll, level-triggered. With a next hop, requests are pipelined to it in
// arrival order (at most `max_inflight` outstanding, so neither side can
// block on a full socket buffer) and replies matched back in that order.
void serve_first_hop(int listener, int down, FloorSizes sizes, std::size_t max_inflight) {
  Fd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep) floor_fail_errno("epoll_create1");
  auto watch = [&](int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd, &ev) != 0) floor_fail_errno("epoll_ctl");
  };
  watch(listener);
  if (down >= 0) watch(down);
  struct Conn {
    Fd fd;
    std::string in; // bytes of the request being received
  };
  std::map<int, Conn> conns;
  std::deque<std::pair<int, std::string>> waiting; // complete requests not yet sent on
  std::deque<int> inflight;                        // connections awaiting a reply, in order
  std::string reply(sizes.reply, 'r');
  std::string down_in;
  auto pump = [&] {
    while (!waiting.empty() && inflight.size() < max_inflight) {
      write_full(down, waiting.front().second.data(), sizes.request);
      inflight.push_back(waiting.front().first);
      waiting.pop_front();
    }
  };
  std::vector<epoll_event> events(64);
  std::vector<char> buf(std::max<std::size_t>(65536, sizes.reply));
  while (true) {
    int n = ::epoll_wait(ep.get(), events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      floor_fail_errno("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<std::size_t>(i)].data.fd;
      if (fd == listener) {
        Fd c(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
        if (!c) floor_fail_errno("accept4");
        watch(c.get());
        const int key = c.get();
        conns[key].fd = std::move(c);
        continue;
      }
      if (fd == down) {
        ssize_t r = ::read(down, buf.data(), buf.size());
        if (r == 0) floor_fail("the next hop closed its socket");
        if (r < 0) {
          if (errno == EINTR) continue;
          floor_fail_errno("read from the next hop");
        }
        down_in.append(buf.data(), static_cast<std::size_t>(r));
        std::size_t off = 0;
        while (down_in.size() - off >= sizes.reply) {
          if (inflight.empty()) floor_fail("a reply from the next hop that nobody asked for");
          auto it = conns.find(inflight.front());
          inflight.pop_front();
          if (it != conns.end()) write_full(it->second.fd.get(), down_in.data() + off, sizes.reply);
          off += sizes.reply;
        }
        down_in.erase(0, off);
        pump();
        continue;
      }
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      Conn& conn = it->second;
      const std::size_t want = sizes.request - conn.in.size();
      ssize_t r = ::read(fd, buf.data(), std::min(want, buf.size()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) { // the client went away (or failed): drop it; a late reply is discarded
        conns.erase(it);
        continue;
      }
      conn.in.append(buf.data(), static_cast<std::size_t>(r));
      if (conn.in.size() < sizes.request) continue;
      if (down < 0) {
        make_reply(conn.in.data(), reply);
        write_full(fd, reply.data(), reply.size());
      } else {
        waiting.emplace_back(fd, std::move(conn.in));
        pump();
      }
      conn.in.clear();
    }
  }
}

// The server processes, killed and reaped when this goes out of scope (every
// exit path of run_floor); each also dies with the thread that forked it
// (PR_SET_PDEATHSIG), so a killed fdod_load leaves none behind.
class HopChain {
public:
  HopChain() = default;
  HopChain(const HopChain&) = delete;
  HopChain& operator=(const HopChain&) = delete;
  ~HopChain() {
    for (pid_t pid : pids_)
      ::kill(pid, SIGKILL);
    for (pid_t pid : pids_)
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
  }

  // Forks one hop; `body` runs in the child, which exits when it returns
  // (status 0) or throws (status 1, message on stderr).
  template <typename Body> void spawn(const std::vector<int>& keep, Body body) {
    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) floor_fail_errno("fork");
    if (pid > 0) {
      pids_.push_back(pid);
      return;
    }
    // Child: die with the parent; close every descriptor but its own.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(1);
    std::vector<int> kept = keep;
    std::sort(kept.begin(), kept.end());
    unsigned next = 3;
    for (int fd : kept) {
      if (static_cast<unsigned>(fd) > next) ::close_range(next, static_cast<unsigned>(fd) - 1, 0);
      next = std::max(next, static_cast<unsigned>(fd) + 1);
    }
    ::close_range(next, ~0U, 0);
    try {
      body();
      ::_exit(0);
    } catch (const FloorError& e) {
      std::fprintf(stderr, "fdod_load floor (hop process %d): %s\n", ::getpid(), e.message.c_str());
    } catch (...) {
      std::fprintf(stderr, "fdod_load floor (hop process %d): unexpected exception\n", ::getpid());
    }
    ::_exit(1);
  }

  const std::vector<pid_t>& pids() const { return pids_; }

  // User+system CPU seconds used so far by the hop processes (/proc, clock ticks).
  double cpu_s() const {
    const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
    double total = 0;
    for (pid_t pid : pids_) {
      std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      auto close_paren = stat.rfind(')');
      if (close_paren == std::string::npos) continue;
      std::istringstream fields(stat.substr(close_paren + 2));
      std::string f;
      double ticks = 0;
      for (int i = 0; i < 13 && fields >> f; ++i)
        if (i == 11 || i == 12) ticks += std::strtod(f.c_str(), nullptr);
      total += ticks / tick;
    }
    return total;
  }

private:
  std::vector<pid_t> pids_;
};

// A temp dir holding the listening socket; both go away once the clients are
// connected (or on any exit path before that).
class SocketDir {
public:
  SocketDir() {
    std::string tmpl = (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
    tmpl += "/fdod_load-floor-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) floor_fail_errno("mkdtemp " + tmpl);
    dir_ = tmpl;
    path_ = dir_ + "/floor.sock";
  }
  SocketDir(const SocketDir&) = delete;
  SocketDir& operator=(const SocketDir&) = delete;
  ~SocketDir() { remove(); }
  void remove() {
    if (dir_.empty()) return;
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
    dir_.clear();
  }
  const std::string& path() const { return path_; }

private:
  std::string dir_, path_;
};

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) floor_fail("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

Fd connect_unix(const std::string& path) {
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) floor_fail_errno("socket");
  sockaddr_un addr = unix_address(path);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    floor_fail_errno("connect " + path);
  return fd;
}

// One client connection's round trip: the request carries `tag` in its first
// 8 bytes, the reply must echo it.
struct FloorClient {
  Fd fd;
  std::string req, reply;
  std::uint64_t wrong = 0;

  FloorClient(Fd f, FloorSizes sizes)
      : fd(std::move(f)), req(sizes.request, 'q'), reply(sizes.reply, 'r') {}

  // False when the reply did not echo the tag (counted in `wrong`).
  bool round_trip(std::uint64_t tag) {
    std::memcpy(req.data(), &tag, sizeof(tag));
    write_full(fd.get(), req.data(), req.size());
    if (!read_full(fd.get(), reply.data(), reply.size()))
      floor_fail("the first hop closed the connection");
    std::uint64_t got = 0;
    std::memcpy(&got, reply.data(), sizeof(got));
    if (got == tag) return true;
    ++wrong;
    return false;
  }
};

int run_floor(const Options& o) {
  const FloorSizes sizes{o.request_bytes, o.reply_bytes};
  const auto hops = static_cast<std::size_t>(o.hops);
  const auto n_clients = static_cast<std::size_t>(o.clients);
  // Replies outstanding between hop 1 and hop 2 stay well inside a Unix
  // socket's default buffer (~200 KiB), so hop 1's blocking writes cannot
  // deadlock against a blocked hop 2.
  const std::size_t max_inflight =
      std::clamp<std::size_t>(65536 / (sizes.request + sizes.reply), 1, 64);
  json out;
  std::uint64_t wrong = 0;
  try {
    SocketDir dir;
    Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!listener) floor_fail_errno("socket");
    sockaddr_un addr = unix_address(dir.path());
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      floor_fail_errno("bind " + dir.path());
    if (::listen(listener.get(), 1024) != 0) floor_fail_errno("listen");
    // links[i] joins hop i+1 (end 0) and hop i+2 (end 1).
    std::vector<std::array<Fd, 2>> links(hops - 1);
    for (auto& link : links) {
      int fds[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        floor_fail_errno("socketpair");
      link[0] = Fd(fds[0]);
      link[1] = Fd(fds[1]);
    }
    HopChain chain;
    for (std::size_t h = 0; h < hops; ++h) {
      const int up = h == 0 ? listener.get() : links[h - 1][1].get();
      const int down = h + 1 < hops ? links[h][0].get() : -1;
      std::vector<int> keep = {up};
      if (down >= 0) keep.push_back(down);
      if (h == 0)
        chain.spawn(keep, [=] { serve_first_hop(up, down, sizes, max_inflight); });
      else
        chain.spawn(keep, [=] { serve_serial_hop(up, down, sizes); });
    }
    links.clear();
    listener.reset();
    std::vector<FloorClient> clients;
    clients.reserve(n_clients);
    for (std::size_t c = 0; c < n_clients; ++c)
      clients.emplace_back(connect_unix(dir.path()), sizes);
    dir.remove(); // connected: nothing is left in the file system from here on

    out = {{"mode", "floor"},
           {"hops", o.hops},
           {"transport",
            "hop 1: a listening AF_UNIX stream socket in a temp dir, all connections on one "
            "thread (epoll); each further hop: an AF_UNIX stream socketpair, one message at a "
            "time; the last hop echoes"},
           {"request_bytes", sizes.request},
           {"reply_bytes", sizes.reply},
           {"clients", o.clients},
           {"server_pids", chain.pids()}};
    if (n_clients == 1 && !o.duration_given) {
      FloorClient& cl = clients.front();
      std::uint64_t tag = 1;
      for (long i = 0; i < o.warmup; ++i)
        cl.round_trip(tag++);
      std::vector<std::int64_t> rtt;
      rtt.reserve(static_cast<std::size_t>(o.samples));
      for (long i = 0; i < o.samples; ++i) {
        auto t0 = Clock::now();
        cl.round_trip(tag++);
        auto t1 = Clock::now();
        rtt.push_back(ns_between(t0, t1));
      }
      wrong = cl.wrong;
      out["samples"] = o.samples;
      out["warmup"] = o.warmup;
      out["checks"] = {{"failed_checks", wrong}};
      out["summary"] = {{"rtt_ns", summarize(rtt)}};
      out["raw"] = {{"rtt_ns", rtt}};
    } else {
      const double cpu0 = process_cpu_s();
      const double server_cpu0 = chain.cpu_s();
      std::vector<ClientRun> runs(n_clients);
      const auto start = Clock::now() + std::chrono::milliseconds(20);
      const auto measure_from = start + std::chrono::milliseconds(o.warmup_ms);
      const auto measure_to = measure_from + std::chrono::milliseconds(o.duration_ms);
      std::vector<std::thread> threads;
      for (std::size_t c = 0; c < n_clients; ++c) {
        threads.emplace_back([&, c] {
          ClientRun& run = runs[c];
          std::this_thread::sleep_until(start);
          std::uint64_t tag = (static_cast<std::uint64_t>(c) << 40) + 1;
          try {
            while (true) {
              auto t0 = Clock::now();
              if (t0 >= measure_to) break;
              clients[c].round_trip(tag++);
              auto t1 = Clock::now();
              ++run.completed;
              if (t0 >= measure_from && t1 <= measure_to)
                run.latencies.push_back(ns_between(t0, t1));
            }
          } catch (const FloorError& e) {
            run.error = "client " + std::to_string(c) + ": " + e.message;
          }
        });
      }
      for (auto& t : threads)
        t.join();
      const double client_cpu_s = process_cpu_s() - cpu0;
      const double server_cpu_s = chain.cpu_s() - server_cpu0;
      std::vector<std::int64_t> all;
      std::vector<std::uint64_t> per_client;
      std::uint64_t completed = 0;
      std::string first_error;
      for (std::size_t c = 0; c < n_clients; ++c) {
        all.insert(all.end(), runs[c].latencies.begin(), runs[c].latencies.end());
        per_client.push_back(runs[c].latencies.size());
        completed += runs[c].completed;
        wrong += clients[c].wrong;
        if (first_error.empty()) first_error = runs[c].error;
      }
      const double done = static_cast<double>(std::max<std::uint64_t>(completed, 1));
      out["duration_ms"] = o.duration_ms;
      out["warmup_ms"] = o.warmup_ms;
      out["requests"] = all.size();
      out["requests_per_s"] =
          static_cast<double>(all.size()) / (static_cast<double>(o.duration_ms) / 1000.0);
      out["completed_total"] = completed;
      out["client_cpu_us_per_request"] = client_cpu_s * 1e6 / done;
      // CPU of the hop processes over the whole run (clock-tick resolution).
      out["server_cpu_us_per_request"] = server_cpu_s * 1e6 / done;
      out["per_client_requests"] = per_client;
      out["latency_ns"] = summarize(all);
      out["checks"] = {{"failed_checks", wrong}};
      out["error"] = first_error;
      out["raw"] = {{"latency_ns", all}};
      if (!first_error.empty()) floor_fail(first_error);
    }
  } catch (const FloorError& e) {
    // The hop processes are gone by now (HopChain's destructor).
    if (!out.is_null()) std::printf("%s\n", out.dump().c_str());
    std::fprintf(stderr, "fdod_load floor: %s\n", e.message.c_str());
    return 1;
  }
  std::printf("%s\n", out.dump().c_str());
  if (wrong != 0) {
    std::fprintf(stderr, "fdod_load floor: %llu replies did not echo their request\n",
                 static_cast<unsigned long long>(wrong));
    return 1;
  }
  return 0;
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
  case Mode::floor:
    return run_floor(opts);
  }
  return 2;
}
