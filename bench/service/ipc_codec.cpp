// ipc_codec: encode + decode time and size of the daemon<->worker message
// headers, JSON text (the "FDO1" wire format) against CBOR (ipc.h's
// encode_header / decode_header, "FDO2", pre-scan included) and, for the
// choice between the two binary formats nlohmann offers, plain CBOR and
// MessagePack without the pre-scan, and the typed exec job and reply that
// replaced them for stages (exec_messages.h: a fixed-layout body with a small
// CBOR envelope around it; the row times both).
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
#include "fdo/daemon/exec_messages.h"
#include "fdo/daemon/ipc.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

using nlohmann::json;

namespace {

const char* const kJobHeader =
    R"FDO({"id":1187,"job":{"buffer_of_param":[-1,-1],"buffers":[],"cache_entries":16,"entry":"add","events":["instructions","cycles","branch-instructions","branch-misses","L1-icache-load-misses","iTLB-load-misses"],"key":"902c2b46bdaa645ee03f302584ca36080832516f199d1e11a56caae5dfb73073-049d1f15e1caeb7e10fa79b308a5a776","op":"exec","return_buffers":false,"sampling":{"events":["cpu-clock","branch-misses","L1-icache-load-misses"],"frequency_hz":250,"max_samples":4000},"slots":[18446744073703518219,123456624],"verbose":false},"limits":{"address_space_bytes":1073741824,"cpu_seconds":0,"max_output_bytes":67108864,"wall_ms":10000}})FDO";

const char* const kReplyHeader =
    R"FDO({"id":1187,"ok":true,"result":{"counts":{},"function_ranges":[{"name":"add","size":5,"start":140382836121600},{"name":"__fdo_thunk_add","size":24,"start":140382836121616}],"measurement":{"events":[{"errno":2,"name":"instructions","status":"no_pmu","value":null},{"errno":2,"name":"cycles","status":"no_pmu","value":null},{"errno":2,"name":"branch-instructions","status":"no_pmu","value":null},{"errno":2,"name":"branch-misses","status":"no_pmu","value":null},{"errno":2,"name":"L1-icache-load-misses","status":"no_pmu","value":null},{"errno":2,"name":"iTLB-load-misses","status":"no_pmu","value":null}],"read_method":"none","task_clock_ns":13637,"thread_cpu_ns":74323,"wall_ns":222934},"ret":117423227,"samples":{"attributed":0,"blocks":{},"branches":{},"events":[{"branch_stack":false,"errno":0,"name":"cpu-clock","reason":"branch stack not available (EOPNOTSUPP): sampling IPs only","status":"available"},{"branch_stack":false,"errno":2,"name":"branch-misses","reason":"'branch-misses (sampling)': perf_event_open failed with ENOENT (No such file or directory): no PMU: the kernel exposes no CPU PMU (a VM without a virtual PMU, or perf support missing); hardware counters are unavailable","status":"no_pmu"},{"branch_stack":false,"errno":2,"name":"L1-icache-load-misses","reason":"'L1-icache-load-misses (sampling)': perf_event_open failed with ENOENT (No such file or directory): no PMU: the kernel exposes no CPU PMU (a VM without a virtual PMU, or perf support missing); hardware counters are unavailable","status":"no_pmu"}],"frequency_hz":250,"functions":{},"lost_records":0,"lost_samples":0,"outside_jit":{},"recorded":0,"throttles":0}}})FDO";

// One format: encode(header index) gives the bytes; decode(header index,
// bytes) reads them back into what the receiver uses (a tree, or the typed
// message) and returns a size to keep the work from being optimised away.
struct Codec {
  const char* name;
  std::function<std::string(int)> encode;
  std::function<std::size_t(int, const std::string&)> decode;
};

// The captured headers as typed messages: what the same stage sends now.
fdo::daemon::ExecJob typed_job(const json& h) {
  const json& j = h["job"];
  fdo::daemon::ExecJob t;
  t.key = j["key"];
  t.entry = j["entry"];
  t.slots = j["slots"].get<std::vector<std::uint64_t>>();
  t.buffer_of_param = j["buffer_of_param"].get<std::vector<std::int32_t>>();
  t.cache_entries = j["cache_entries"];
  t.events = j["events"].get<std::vector<std::string>>();
  const json& s = j["sampling"];
  t.sampling = fdo::daemon::StageSamplingRequest{s["events"].get<std::vector<std::string>>(),
                                                 s["frequency_hz"], s["max_samples"]};
  return t;
}

fdo::daemon::ExecReply typed_reply(const json& h) {
  const json& r = h["result"];
  fdo::daemon::ExecReply t;
  fdo::daemon::StageObservation& o = t.observation;
  o.ret = r["ret"];
  const json& m = r["measurement"];
  fdo::perf::Measurement& tm = o.measurement.emplace();
  for (const json& e : m["events"]) {
    fdo::perf::EventReading ev;
    ev.name = e["name"];
    ev.status = fdo::perf::EventStatus::no_pmu;
    ev.error = e["errno"];
    tm.events.push_back(ev);
  }
  tm.task_clock_ns = m["task_clock_ns"].get<std::uint64_t>();
  tm.thread_cpu_ns = m["thread_cpu_ns"];
  tm.wall_ns = m["wall_ns"];
  o.exec_ns = tm.wall_ns;
  fdo::daemon::StageSampleReport& s = o.samples.emplace();
  for (const json& e : r["samples"]["events"]) {
    fdo::perf::SamplerEvent ev;
    ev.name = e["name"];
    ev.status = e["status"] == "available" ? fdo::perf::EventStatus::available
                                           : fdo::perf::EventStatus::no_pmu;
    ev.error = e["errno"];
    s.events.push_back(ev); // reasons left out, as a non-verbose stage sends them
  }
  s.frequency_hz = r["samples"]["frequency_hz"];
  auto& ranges = o.function_ranges.emplace();
  for (const json& f : r["function_ranges"])
    ranges.push_back({f["name"], f["start"], f["size"]});
  return t;
}

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
    if (std::strcmp(argv[i], "--rounds") == 0)
      rounds = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--iters") == 0)
      iters = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: ipc_codec [--rounds N] [--iters N]\n");
      return 2;
    }
  }
  if (rounds < 1 || iters < 1) return 2;

  const json headers[2] = {json::parse(kJobHeader), json::parse(kReplyHeader)};
  const char* header_names[2] = {"exec job (fdod -> worker)", "exec reply (worker -> fdod)"};

  auto json_codec = [&](const char* name, std::function<std::string(const json&)> enc,
                        std::function<json(const std::string&)> dec) {
    return Codec{name, [&headers, enc](int hi) { return enc(headers[hi]); },
                 [dec](int, const std::string& b) { return dec(b).size(); }};
  };
  const fdo::daemon::ExecJob job = typed_job(headers[0]);
  const fdo::daemon::ExecReply reply = typed_reply(headers[1]);
  // The envelopes around the typed bodies, as the pool and the worker loop send them.
  const json job_envelope = {
      {"id", 1187}, {"job", {{"op", "exec"}, {"body_bytes", 0}}}, {"limits", headers[0]["limits"]}};
  const json reply_envelope = {{"id", 1187}, {"ok", true}, {"result", {{"body_bytes", 0}}}};
  const std::size_t job_body = fdo::daemon::encode_exec_job(job)->size();
  const std::size_t reply_body = fdo::daemon::encode_exec_reply(reply)->size();

  std::vector<Codec> codecs = {
      json_codec(
          "json text (FDO1)",
          [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); },
          [](const std::string& s) { return json::parse(s, nullptr, false); }),
      json_codec(
          "cbor + pre-scan (FDO2)",
          [](const json& j) {
            auto e = fdo::daemon::encode_header(j);
            if (!e) std::abort();
            return std::move(*e);
          },
          [](const std::string& s) {
            auto d = fdo::daemon::decode_header(s);
            if (!d) std::abort();
            return std::move(*d);
          }),
      json_codec(
          "cbor (nlohmann only)",
          [](const json& j) {
            std::string out;
            json::to_cbor(j, out);
            return out;
          },
          [](const std::string& s) { return json::from_cbor(s.begin(), s.end(), true, false); }),
      json_codec(
          "msgpack (nlohmann only)",
          [](const json& j) {
            std::string out;
            json::to_msgpack(j, out);
            return out;
          },
          [](const std::string& s) { return json::from_msgpack(s.begin(), s.end(), true, false); }),
      // Envelope (CBOR, pre-scanned) and body: the bytes of both, one after the other.
      {"typed body + envelope",
       [&](int hi) {
         json envelope = hi == 0 ? job_envelope : reply_envelope;
         auto body =
             hi == 0 ? fdo::daemon::encode_exec_job(job) : fdo::daemon::encode_exec_reply(reply);
         if (!body) std::abort();
         (hi == 0 ? envelope["job"] : envelope["result"])["body_bytes"] = body->size();
         auto e = fdo::daemon::encode_header(envelope);
         if (!e) std::abort();
         return *e + *body;
       },
       [&](int hi, const std::string& bytes) -> std::size_t {
         // The envelope's length is known to the receiver from the frame prefix.
         const std::size_t body = hi == 0 ? job_body : reply_body;
         const std::string_view all(bytes);
         auto envelope = fdo::daemon::decode_header(all.substr(0, all.size() - body));
         if (!envelope) std::abort();
         if (hi == 0) {
           auto j = fdo::daemon::decode_exec_job(all.substr(all.size() - body));
           if (!j) std::abort();
           return j->slots.size() + envelope->size();
         }
         auto r = fdo::daemon::decode_exec_reply(all.substr(all.size() - body));
         if (!r) std::abort();
         return r->observation.measurement->events.size() + envelope->size();
       }},
  };

  // Every JSON codec must give back exactly what it was given; the typed
  // one must decode what it encoded.
  for (std::size_t ci = 0; ci + 1 < codecs.size(); ++ci) {
    const Codec& c = codecs[ci];
    for (int hi = 0; hi < 2; ++hi)
      if (c.decode(hi, c.encode(hi)) != headers[hi].size()) {
        std::fprintf(stderr, "%s does not round-trip\n", c.name);
        return 1;
      }
  }
  if (fdo::daemon::decode_exec_job(*fdo::daemon::encode_exec_job(job)).value() != job) {
    std::fprintf(stderr, "the typed job does not round-trip\n");
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
        std::string bytes = c.encode(hi);
        auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i)
          g_sink = g_sink + c.encode(hi).size();
        auto t1 = Clock::now();
        for (int i = 0; i < iters; ++i)
          g_sink = g_sink + c.decode(hi, bytes);
        auto t2 = Clock::now();
        enc[ci][hi].push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / iters);
        dec[ci][hi].push_back(std::chrono::duration<double, std::nano>(t2 - t1).count() / iters);
      }
    }
  }

  std::printf("ipc_codec: %d rounds x %d iterations, medians over rounds, ns per message\n", rounds,
              iters);
  for (int hi = 0; hi < 2; ++hi) {
    std::printf("\n%s\n", header_names[hi]);
    std::printf("  %-24s %7s %9s %9s %9s %8s\n", "format", "bytes", "encode", "decode", "enc+dec",
                "vs text");
    const double text_total = median(enc[0][hi]) + median(dec[0][hi]);
    for (std::size_t ci = 0; ci < codecs.size(); ++ci) {
      const double e = median(enc[ci][hi]);
      const double d = median(dec[ci][hi]);
      std::printf("  %-24s %7zu %9.0f %9.0f %9.0f %8.2f\n", codecs[ci].name,
                  codecs[ci].encode(hi).size(), e, d, e + d, (e + d) / text_total);
    }
  }
  return 0;
}
