// compile_codec: what carrying a big program's profile to a compile worker
// costs, per compile job, the way the job was sent until 2026-11-30 (the
// profile document as JSON inside the job's CBOR header: to_json + CBOR
// encode in fdod, CBOR decode + profile_from_json in the worker) against the
// typed compile job (compile_messages.h: the profile's compile-affecting
// fields in wire.h's fixed layout). Both decode into the ProfileDoc the
// compile reads; the program's bytes are left out of both (copied alike).
//
// Every round times both in turn (order alternating), `--iters` encode +
// decode pairs each; per-job microseconds are the medians over rounds.
// Run: compile_codec --profile FILE.json [--rounds N] [--iters N]
//      compile_codec --functions N            (a generated profile)
#include "fdo/daemon/compile_messages.h"
#include "fdo/daemon/ipc.h"
#include "fdo/util/profile.h"
#include "fdo/util/profile_wire.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace fdo;
using nlohmann::json;

namespace {

// N functions of 24 counters each, one value site in every fourth.
ProfileDoc generated(int functions) {
  ProfileDoc d;
  for (int i = 0; i < functions; ++i) {
    FunctionProfile f;
    f.cfg_hash = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(i + 1);
    for (int c = 0; c < 24; ++c)
      f.counts.push_back(static_cast<std::uint64_t>((i * 7919 + c * 104729) % 1000003));
    if (i % 4 == 0) f.indirect_calls = {{{0x1234 + static_cast<std::uint64_t>(i), 90}, {7, 10}}};
    f.fingerprint = std::string(64, 'a');
    f.source_name = "file" + std::to_string(i / 30) + ".c:fn" + std::to_string(i);
    d.functions["fdo.local." + std::to_string(i)] = std::move(f);
  }
  return d;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

volatile std::size_t g_sink = 0;

} // namespace

int main(int argc, char** argv) {
  int rounds = 9, iters = 20, functions = 0;
  std::string profile_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rounds") == 0)
      rounds = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--iters") == 0)
      iters = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--functions") == 0)
      functions = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--profile") == 0)
      profile_path = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: compile_codec (--profile FILE | --functions N) [--rounds N] "
                           "[--iters N]\n");
      return 2;
    }
  }
  if (rounds < 1 || iters < 1 || (profile_path.empty() == (functions <= 0))) {
    std::fprintf(stderr, "compile_codec: give --profile FILE or --functions N (> 0)\n");
    return 2;
  }
  auto doc = std::make_shared<ProfileDoc>();
  if (!profile_path.empty()) {
    std::ifstream in(profile_path);
    std::stringstream ss;
    ss << in.rdbuf();
    auto parsed = parse_profile(ss.str());
    if (!in || !parsed) {
      std::fprintf(stderr, "compile_codec: cannot read a profile from %s\n", profile_path.c_str());
      return 1;
    }
    *doc = std::move(*parsed);
  } else {
    *doc = generated(functions);
  }

  // The typed job with the settings fdod sends.
  daemon::CompileJob job;
  job.mode = CompileMode::optimized;
  job.profile = doc;
  job.limits.max_program_bytes = 33554432;
  job.threads = 2;

  struct Way {
    const char* name;
    std::function<std::size_t()> once; // encode + decode; returns the bytes sent
  };
  // Each way as a job travelled: fdod builds the job, the pool wraps its
  // header in the envelope (pool_job.cpp: a copy of the header) and encodes
  // it; the worker decodes the envelope and reads the profile.
  auto envelope_of = [](const json& job_header) {
    return json{{"id", 1}, {"limits", {{"wall_ms", 600000}}}, {"job", job_header}};
  };
  const std::vector<Way> ways = {
      {"profile as JSON in the CBOR header (before)",
       [&] {
         const json header = {{"op", "compile"},
                              {"mode", "optimized"},
                              {"profile", to_json(*doc)},
                              {"limits", {{"max_program_bytes", 33554432}}},
                              {"threads", 2}};
         auto bytes = daemon::encode_header(envelope_of(header));
         auto back = daemon::decode_header(*bytes);
         auto profile = profile_from_json((*back)["job"]["profile"]);
         if (!profile) std::abort();
         g_sink = g_sink + profile->functions.size();
         return bytes->size();
       }},
      {"typed compile job (after)",
       [&] {
         auto m = daemon::compile_job_message(job, "");
         auto bytes = daemon::encode_header(envelope_of(m->header));
         auto back = daemon::decode_header(*bytes);
         daemon::Message received{std::move((*back)["job"]), std::move(m->payload)};
         auto typed = daemon::compile_job_of(received);
         if (!typed) std::abort();
         g_sink = g_sink + typed->job.profile->functions.size();
         return received.payload.size() + bytes->size();
       }},
  };
  // Both must give the compile the same profile.
  {
    auto bytes = daemon::encode_header(json{{"profile", to_json(*doc)}});
    auto back = profile_from_json((*daemon::decode_header(*bytes))["profile"]);
    auto typed = daemon::compile_job_of(*daemon::compile_job_message(job, ""));
    if (!back || !typed || compile_view(*back) != *typed->job.profile) {
      std::fprintf(stderr, "compile_codec: the two ways give different profiles\n");
      return 1;
    }
  }

  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> us(ways.size());
  std::vector<std::size_t> bytes(ways.size());
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < ways.size(); ++k) {
      const std::size_t w = (k + static_cast<std::size_t>(r)) % ways.size();
      const auto start = Clock::now();
      for (int i = 0; i < iters; ++i)
        bytes[w] = ways[w].once();
      us[w].push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                      iters);
    }
  std::printf("profile: %zu functions, %zu context-sensitive\n", doc->functions.size(),
              doc->cs_functions.size());
  std::printf("%-46s %14s %12s\n", "way", "us per job", "bytes");
  for (std::size_t w = 0; w < ways.size(); ++w)
    std::printf("%-46s %14.1f %12zu\n", ways[w].name, median(us[w]), bytes[w]);
  std::printf("after / before: time %.3f, bytes %.3f\n", median(us[1]) / median(us[0]),
              static_cast<double>(bytes[1]) / static_cast<double>(bytes[0]));
  return 0;
}
