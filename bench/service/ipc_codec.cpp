// ipc_codec: encode + decode time and size of the daemon<->worker message
// headers, JSON text (the "FDO1" wire format) against CBOR (ipc.h's
// encode_header / decode_header, "FDO2", pre-scan included) and, for the
// choice between the two binary formats nlohmann offers, plain CBOR and
// MessagePack without the pre-scan.
//
// The two headers are the ones a warm `execute` of the service bench's `add`
// sends: captured from the socket (strace of sendmsg) during
// `run_service.py --quick` against fdod/fdo-worker built from 1719868, the
// last exec job fdod sent and the worker's reply to it (no PMU on that host,
// hence the no_pmu events).
//
// Every round times each format in turn (order rotating), `--iters` encode +
// decode pairs per header; per-message ns are the medians over rounds.
// Run: ipc_codec [--rounds N] [--iters N]
#include "fdo/daemon/ipc.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using nlohmann::json;

namespace {

const char* const kJobHeader = R"FDO({"id":1187,"job":{"buffer_of_param":[-1,-1],"buffers":[],"cache_entries":16,"entry":"add","events":["instructions","cycles","branch-instructions","branch-misses","L1-icache-load-misses","iTLB-load-misses"],"key":"902c2b46bdaa645ee03f302584ca36080832516f199d1e11a56caae5dfb73073-049d1f15e1caeb7e10fa79b308a5a776","op":"exec","return_buffers":false,"sampling":{"events":["cpu-clock","branch-misses","L1-icache-load-misses"],"frequency_hz":250,"max_samples":4000},"slots":[18446744073703518219,123456624],"verbose":false},"limits":{"address_space_bytes":1073741824,"cpu_seconds":0,"max_output_bytes":67108864,"wall_ms":10000}})FDO";

const char* const kReplyHeader = R"FDO({"id":1187,"ok":true,"result":{"counts":{},"function_ranges":[{"name":"add","size":5,"start":140382836121600},{"name":"__fdo_thunk_add","size":24,"start":140382836121616}],"measurement":{"events":[{"errno":2,"name":"instructions","status":"no_pmu","value":null},{"errno":2,"name":"cycles","status":"no_pmu","value":null},{"errno":2,"name":"branch-instructions","status":"no_pmu","value":null},{"errno":2,"name":"branch-misses","status":"no_pmu","value":null},{"errno":2,"name":"L1-icache-load-misses","status":"no_pmu","value":null},{"errno":2,"name":"iTLB-load-misses","status":"no_pmu","value":null}],"read_method":"none","task_clock_ns":13637,"thread_cpu_ns":74323,"wall_ns":222934},"ret":117423227,"samples":{"attributed":0,"blocks":{},"branches":{},"events":[{"branch_stack":false,"errno":0,"name":"cpu-clock","reason":"branch stack not available (EOPNOTSUPP): sampling IPs only","status":"available"},{"branch_stack":false,"errno":2,"name":"branch-misses","reason":"'branch-misses (sampling)': perf_event_open failed with ENOENT (No such file or directory): no PMU: the kernel exposes no CPU PMU (a VM without a virtual PMU, or perf support missing); hardware counters are unavailable","status":"no_pmu"},{"branch_stack":false,"errno":2,"name":"L1-icache-load-misses","reason":"'L1-icache-load-misses (sampling)': perf_event_open failed with ENOENT (No such file or directory): no PMU: the kernel exposes no CPU PMU (a VM without a virtual PMU, or perf support missing); hardware counters are unavailable","status":"no_pmu"}],"frequency_hz":250,"functions":{},"lost_records":0,"lost_samples":0,"outside_jit":{},"recorded":0,"throttles":0}}})FDO";

struct Codec {
  const char* name;
  std::function<std::string(const json&)> encode;
  std::function<json(const std::string&)> decode;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

volatile std::size_t g_sink = 0; // keeps the work from being optimised away

} // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  int iters = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: ipc_codec [--rounds N] [--iters N]\n");
      return 2;
    }
  }
  if (rounds < 1 || iters < 1) return 2;

  const json headers[2] = {json::parse(kJobHeader), json::parse(kReplyHeader)};
  const char* header_names[2] = {"exec job (fdod -> worker)", "exec reply (worker -> fdod)"};

  std::vector<Codec> codecs = {
      {"json text (FDO1)",
       [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); },
       [](const std::string& s) { return json::parse(s, nullptr, false); }},
      {"cbor + pre-scan (FDO2)",
       [](const json& j) {
         auto e = fdo::daemon::encode_header(j);
         if (!e) std::abort();
         return std::move(*e);
       },
       [](const std::string& s) {
         auto d = fdo::daemon::decode_header(s);
         if (!d) std::abort();
         return std::move(*d);
       }},
      {"cbor (nlohmann only)",
       [](const json& j) {
         std::string out;
         json::to_cbor(j, out);
         return out;
       },
       [](const std::string& s) { return json::from_cbor(s.begin(), s.end(), true, false); }},
      {"msgpack (nlohmann only)",
       [](const json& j) {
         std::string out;
         json::to_msgpack(j, out);
         return out;
       },
       [](const std::string& s) { return json::from_msgpack(s.begin(), s.end(), true, false); }},
  };

  // Every codec must give back exactly what it was given.
  for (const auto& c : codecs)
    for (const auto& h : headers)
      if (c.decode(c.encode(h)) != h) {
        std::fprintf(stderr, "%s does not round-trip\n", c.name);
        return 1;
      }

  using Clock = std::chrono::steady_clock;
  // [codec][header] -> per-round ns per message
  std::vector<std::vector<std::vector<double>>> enc(codecs.size()), dec(codecs.size());
  for (auto* v : {&enc, &dec})
    for (auto& per : *v)
      per.resize(2);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < codecs.size(); ++k) {
      const std::size_t ci = (k + static_cast<std::size_t>(r)) % codecs.size();
      const Codec& c = codecs[ci];
      for (int hi = 0; hi < 2; ++hi) {
        const json& h = headers[hi];
        std::string bytes = c.encode(h);
        auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i)
          g_sink = g_sink + c.encode(h).size();
        auto t1 = Clock::now();
        for (int i = 0; i < iters; ++i)
          g_sink = g_sink + c.decode(bytes).size();
        auto t2 = Clock::now();
        enc[ci][hi].push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / iters);
        dec[ci][hi].push_back(std::chrono::duration<double, std::nano>(t2 - t1).count() / iters);
      }
    }
  }

  std::printf("ipc_codec: %d rounds x %d iterations, medians over rounds, ns per message\n",
              rounds, iters);
  for (int hi = 0; hi < 2; ++hi) {
    std::printf("\n%s\n", header_names[hi]);
    std::printf("  %-24s %7s %9s %9s %9s %8s\n", "format", "bytes", "encode", "decode",
                "enc+dec", "vs text");
    const double text_total = median(enc[0][hi]) + median(dec[0][hi]);
    for (std::size_t ci = 0; ci < codecs.size(); ++ci) {
      const double e = median(enc[ci][hi]);
      const double d = median(dec[ci][hi]);
      std::printf("  %-24s %7zu %9.0f %9.0f %9.0f %8.2f\n", codecs[ci].name,
                  codecs[ci].encode(headers[hi]).size(), e, d, e + d, (e + d) / text_total);
    }
  }
  return 0;
}
