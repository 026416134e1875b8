// Prints profile documents produced by the C++ code, one JSON document per
// line, for validate_profile_schema.py to check against
// schemas/profile.schema.json: edge cases, seeded random documents, and the
// bodies the profile store actually stored (read back from a real database).
#include "fdo/profile_store/profile_store.h"
#include "test_util.h"

#include <iostream>
#include <limits>

using namespace fdo;
using namespace fdo::profile_store;

int main() {
  std::vector<ProfileDoc> docs;
  docs.push_back(ProfileDoc{}); // defaults: no functions, empty provenance
  {
    ProfileDoc d;
    d.knobs = Knobs{3, 2, false, false, 100000, CompileMode::optimized, 48};
    FunctionProfile f;
    f.cfg_hash = std::numeric_limits<std::uint64_t>::max();
    f.counts = {0, std::numeric_limits<std::uint64_t>::max()};
    f.unpredictable = {0, std::numeric_limits<std::uint32_t>::max()};
    f.fingerprint = "abc";
    d.functions["max"] = f;
    d.functions["zero"] = FunctionProfile{.cfg_hash = 0};
    FunctionProfile v;
    v.cfg_hash = 5;
    v.counts = {3};
    v.source_name = "/src/lib.c:helper";
    v.indirect_calls = {{{std::numeric_limits<std::uint64_t>::max(), 2}, {0, 1}}, {}};
    v.memop_sizes = {{{8, std::numeric_limits<std::uint64_t>::max()}, {513, 0}}};
    d.functions["fdo:fdo.local.0"] = v;
    // Code layout from sampled i-cache misses (icache_layout.h).
    d.functions["hot"] = FunctionProfile{.cfg_hash = 6, .counts = {9}};
    d.functions["hot"].layout = FunctionLayout::hot;
    d.functions["cold"] = FunctionProfile{.cfg_hash = 7, .counts = {0}};
    d.functions["cold"].layout = FunctionLayout::cold;
    d.provenance = Provenance{"operator", "2026-11-22T00:00:00Z", "h", 9, std::string(64, 'a')};
    docs.push_back(d);
  }
  {
    ProfileDoc d;
    d.knobs = Knobs{0, 0, true, true, -10000, CompileMode::plain};
    docs.push_back(d);
  }
  {
    // An import's records of functions outside the program (fdoctl profile
    // import; jit/src/profdata.cpp), beside the seeded ones.
    ProfileDoc d;
    d.functions["run"] = FunctionProfile{.cfg_hash = 1, .counts = {4, 1}, .source_name = "run"};
    d.outside_functions["main"] =
        FunctionProfile{.cfg_hash = 2, .counts = {0, 3}, .source_name = "main"};
    d.outside_functions["main#0000000000000003"] =
        FunctionProfile{.cfg_hash = 3, .counts = {1}, .source_name = "main"};
    docs.push_back(d);
  }
  {
    // What the feedback loop records from stage sampling (time_share.h,
    // sampling_record), next to other hardware findings.
    ProfileDoc d;
    d.hardware["icache_mpki"] = 3.5;
    d.hardware["sampling"] = {{"event", "cpu-clock"},
                              {"stages", 3},
                              {"samples", 480},
                              {"outside_samples", 7},
                              {"time_share", {{"fdo:fdo.local.1", 0.9}, {"run", 0.1}}},
                              {"misses",
                               {{"branch-misses", {{"fdo:fdo.local.1", 40}}},
                                {"L1-icache-load-misses", nlohmann::json::object()}}}};
    docs.push_back(d);
    // With per-block and per-branch tallies (block_samples.h: blocks_record,
    // branches_record).
    d.hardware["sampling"]["blocks"] = {
        {"cpu-clock", {{"fdo:fdo.local.1", {{"0", 3}, {"2", 470}}}}},
        {"branch-misses", {{"fdo:fdo.local.1", {{"2", 40}}}}}};
    d.hardware["sampling"]["branches"] = {
        {"fdo:fdo.local.1",
         {{"1", {{"misses", {{"branch-misses", 40}}}, {"taken", 5120}, {"not_taken", 4880}}},
          {"0", {{"misses", {{"branch-misses", 2}}}}}}}};
    docs.push_back(d);
  }
  std::mt19937_64 rng(0x5c4e3a);
  for (int i = 0; i < 200; ++i)
    docs.push_back(test::random_doc(rng));

  for (const ProfileDoc& d : docs)
    std::cout << canonical_json(to_json(d)) << "\n";

  // What the store writes (with provenance stamped by the store).
  test::TempDir dir;
  auto store = ProfileStore::open(dir.file("samples.db"));
  if (!store) {
    std::cerr << store.error().describe() << "\n";
    return 1;
  }
  for (size_t i = 0; i < 40; ++i) {
    WriteInfo wi;
    wi.source = i % 2 ? WriteSource::feedback : WriteSource::operator_;
    wi.reason = "sample";
    wi.host = "sample-host";
    wi.stage = static_cast<std::int64_t>(i);
    std::string pk = std::string(60, '0') + std::to_string(1000 + i);
    if (auto v = store->write(pk, 0, docs[i], wi); !v) {
      std::cerr << v.error().describe() << "\n";
      return 1;
    }
    auto cur = store->current(pk);
    if (!cur || !*cur) {
      std::cerr << "stored profile " << pk << " not readable\n";
      return 1;
    }
    std::cout << (*cur)->body << "\n";
  }
  return 0;
}
