// document_bench: what a big program's profile document costs to write, the
// CPU half of a rewrite stage's store write, side by side in one run:
//   json    the document's nlohmann tree (to_json), read back to check it
//           (profile_from_json), its canonical text and the digest of its
//           compile-affecting part (the store's write until 2026-12)
//   struct  normalize_profile, profile_text and profile_digest, written
//           straight from the struct (profile_write.cpp; the store's write
//           until 2026-12-02)
//   one pass  normalize_profile and profile_text_and_digest: the digested
//           text cut from the document's (the store's write now)
// and the copy of the document a write makes. Documents like run_big.py's:
// N functions with 12-24 counters, fingerprints and source names; with
// --cs as many context-sensitive records again.
// Figures are medians over interleaved rounds (each round times every
// variant once, so drift on a shared host hits all of them alike).
//
// Usage: profile_store_document_bench [--functions N] [--rounds N] [--cs]
#include "common/stats.h"
#include "fdo/util/profile.h"
#include "util/profile_reference.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace fdo;
using fdo::bench::median;

namespace {

using Clock = std::chrono::steady_clock;

double millis(const std::function<void()>& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::map<std::string, FunctionProfile> functions(std::mt19937_64& rng, int n, bool cs) {
  std::map<std::string, FunctionProfile> out;
  for (int i = 0; i < n; ++i) {
    FunctionProfile f;
    f.cfg_hash = rng() | (cs ? kCsHashFlag : 0);
    for (std::uint64_t c = 12 + rng() % 13; c > 0; --c)
      f.counts.push_back(rng() % 3 == 0 ? 0 : rng() % 100000);
    f.fingerprint = std::to_string(rng()) + std::to_string(rng());
    f.source_name = "generated.c:fn_" + std::to_string(i);
    out["fdo:fdo.local." + std::to_string(i)] = std::move(f);
  }
  return out;
}

// The struct route's result, kept so the work cannot be optimised away.
std::size_t sink = 0;

} // namespace

int main(int argc, char** argv) {
  int n = 1000, rounds = 15;
  bool cs = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--functions") && i + 1 < argc)
      n = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--cs"))
      cs = true;
    else {
      std::fprintf(stderr, "usage: %s [--functions N] [--rounds N] [--cs]\n", argv[0]);
      return 2;
    }
  }
  std::mt19937_64 rng(35);
  ProfileDoc doc;
  doc.functions = functions(rng, n, false);
  if (cs) doc.cs_functions = functions(rng, n, true);
  doc.provenance = {"feedback", "2026-12-02T00:00:00.000Z", "host", 5, "ik"};
  doc.hardware = {{"sampling", {{"stages", 4}}}};

  std::vector<double> json_ms, struct_ms, one_pass_ms, copy_ms;
  std::size_t bytes = 0;
  for (int r = 0; r < rounds; ++r) {
    json_ms.push_back(millis([&] {
      nlohmann::json j = to_json(doc);
      auto valid = profile_from_json(j);
      if (!valid) std::abort();
      std::string text = canonical_json(j);
      std::string digest = test::reference_digest(*valid);
      bytes = text.size();
      sink += text.size() + digest.size();
    }));
    struct_ms.push_back(millis([&] {
      ProfileDoc d = doc;
      if (!normalize_profile(d)) std::abort();
      auto text = profile_text(d);
      if (!text) std::abort();
      std::string digest = profile_digest(d);
      sink += text->size() + digest.size();
    }));
    one_pass_ms.push_back(millis([&] {
      ProfileDoc d = doc;
      if (!normalize_profile(d)) std::abort();
      auto both = profile_text_and_digest(d);
      if (!both) std::abort();
      sink += both->text.size() + both->digest.size();
    }));
    copy_ms.push_back(millis([&] {
      ProfileDoc d = doc;
      sink += d.functions.size();
    }));
  }
  const double j = median(json_ms), s = median(struct_ms), o = median(one_pass_ms),
               c = median(copy_ms);
  std::printf("document: %d functions%s, %zu bytes of text; %d rounds, medians\n", n,
              cs ? " + as many context-sensitive" : "", bytes, rounds);
  std::printf("  json route (tree, read back, text, digest)   %8.2f ms\n", j);
  std::printf("  struct route (copy, check, text, digest)     %8.2f ms   %.2fx the json route\n", s,
              s / j);
  std::printf("  one pass (copy, check, text with its digest)  %8.2f ms   %.2fx the struct route\n",
              o, o / s);
  std::printf("    of which the copy of the document          %8.2f ms\n", c);
  return sink == 0 ? 1 : 0;
}
