// Shared helpers for the profile store tests: temporary directories, file
// snapshots, sample and random profile documents.
#pragma once

#include "fdo/util/profile.h"
#include "support/temp_dir.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace fdo::profile_store::test {

struct TempDir : fdo::test_support::TempDir {
  TempDir() : fdo::test_support::TempDir("fdo-ps") {}
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A small realistic document whose first count encodes `n`, so a test can
// tell versions apart by content.
inline ProfileDoc sample_doc(std::uint64_t n, int functions = 2) {
  ProfileDoc d;
  d.knobs.opt_level = 3;
  for (int f = 0; f < functions; ++f) {
    FunctionProfile fp;
    fp.cfg_hash = 0x1000u + static_cast<std::uint64_t>(f);
    fp.counts = {n, static_cast<std::uint64_t>(f) * 7, 100};
    if (f == 0) fp.unpredictable = {1};
    fp.fingerprint = "fp" + std::to_string(f);
    d.functions["fn" + std::to_string(f)] = std::move(fp);
  }
  d.hardware = {{"branch_miss_rate", 0.125}};
  return d;
}

inline std::string random_name(std::mt19937_64& rng) {
  static const char* const kParts[] = {"main",    "_Z3fooi", "helper", "loop.body", "f",
                                       "ünïcode", "a b",     "x\"q",   "λ",         "kernel_7"};
  std::string s = kParts[rng() % std::size(kParts)];
  if (rng() % 2) {
    s += '_';
    s += std::to_string(rng() % 1000);
  }
  return s;
}

inline std::string random_text(std::mt19937_64& rng) {
  static const char* const kTexts[] = {"",          "feedback", "host-a",   "2026-01-02T03:04:05Z",
                                       "tab\there", "ümlaut",   "newline\n"};
  return kTexts[rng() % std::size(kTexts)];
}

// A random valid document (every field within the ranges profile_from_json accepts).
inline ProfileDoc random_doc(std::mt19937_64& rng) {
  ProfileDoc d;
  d.knobs.opt_level = static_cast<int>(rng() % 4);
  d.knobs.size_level = static_cast<int>(rng() % 3);
  d.knobs.unroll = rng() % 2;
  d.knobs.vectorize = rng() % 2;
  if (rng() % 2) d.knobs.inline_threshold = static_cast<int>(rng() % 110001) - 10000;
  if (rng() % 3 == 0) d.knobs.mode = static_cast<CompileMode>(rng() % 3);
  if (rng() % 4 == 0) d.knobs.text_offset = kTextOffsetStep * static_cast<int>(1 + rng() % 3);
  int nfun = static_cast<int>(rng() % 6);
  for (int i = 0; i < nfun; ++i) {
    FunctionProfile f;
    f.cfg_hash = rng();
    int nc = static_cast<int>(rng() % 6);
    for (int c = 0; c < nc; ++c)
      f.counts.push_back(rng() % 4 == 0 ? rng() : rng() % 1000);
    int nu = static_cast<int>(rng() % 3);
    for (int u = 0; u < nu; ++u)
      f.unpredictable.push_back(static_cast<std::uint32_t>(rng()));
    if (rng() % 2) f.fingerprint = "fp" + std::to_string(rng() % 100000);
    d.functions[random_name(rng)] = std::move(f);
  }
  if (rng() % 2)
    d.hardware = {{"branch_miss_rate", static_cast<double>(rng() % 1000) / 1000.0},
                  {"samples", rng() % 100000},
                  {"hot", {random_name(rng), random_name(rng)}}};
  d.provenance.reason = random_text(rng);
  d.provenance.created_at = rng() % 2 ? "2026-01-02T03:04:05.678Z" : "";
  d.provenance.host = random_text(rng);
  d.provenance.stage = static_cast<std::int64_t>(rng() % 1000);
  d.provenance.program = rng() % 2 ? std::string(64, 'a') : "";
  return d;
}

} // namespace fdo::profile_store::test
