// Property tests of the profile digest over seeded random documents:
// any key order and whitespace -> same digest; any compile-affecting change ->
// new digest; bookkeeping changes -> same digest. Also checks that the store
// keeps the digest and canonical body consistent with fdo::profile_digest, on
// both back ends (backends.h).
#include "backends.h"
#include "fdo/profile_store/profile_store.h"
#include "test_util.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <set>

using namespace fdo;
using namespace fdo::profile_store;
using fdo::profile_store::test::random_doc;
using fdo::profile_store::test::random_name;
using nlohmann::json;

namespace {

constexpr std::uint64_t kSeed = 0xd16e57;
constexpr int kIterations = 400;

std::string random_space(std::mt19937_64& rng) {
  static const char* const kSpaces[] = {"", "", " ", "\n", "\t", "  \n "};
  return kSpaces[rng() % std::size(kSpaces)];
}

// JSON text with object members in a random order and random insignificant
// whitespace: what another tool (or a person) might write.
std::string dump_shuffled(const json& j, std::mt19937_64& rng) {
  if (j.is_object()) {
    std::vector<std::pair<std::string, const json*>> items;
    for (auto it = j.begin(); it != j.end(); ++it)
      items.emplace_back(it.key(), &it.value());
    std::shuffle(items.begin(), items.end(), rng);
    std::string out = "{" + random_space(rng);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += "," + random_space(rng);
      out += json(items[i].first).dump() + random_space(rng) + ":" + random_space(rng) +
             dump_shuffled(*items[i].second, rng);
    }
    return out + random_space(rng) + "}";
  }
  if (j.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) {
      if (i > 0) out += "," + random_space(rng);
      out += dump_shuffled(j[i], rng);
    }
    return out + "]";
  }
  return j.dump();
}

using Mutation = std::function<bool(ProfileDoc&, std::mt19937_64&)>;

// Each mutation changes exactly one compile-affecting aspect; it returns
// false when it does not apply to this document (e.g. no functions).
std::vector<std::pair<const char*, Mutation>> compile_mutations() {
  auto pick = [](ProfileDoc& d, std::mt19937_64& rng) -> FunctionProfile* {
    if (d.functions.empty()) return nullptr;
    auto it = d.functions.begin();
    std::advance(it, static_cast<long>(rng() % d.functions.size()));
    return &it->second;
  };
  return {
      {"opt_level",
       [](ProfileDoc& d, auto&) {
         d.knobs.opt_level = (d.knobs.opt_level + 1) % 4;
         return true;
       }},
      {"size_level",
       [](ProfileDoc& d, auto&) {
         d.knobs.size_level = (d.knobs.size_level + 1) % 3;
         return true;
       }},
      {"unroll",
       [](ProfileDoc& d, auto&) {
         d.knobs.unroll = !d.knobs.unroll;
         return true;
       }},
      {"vectorize",
       [](ProfileDoc& d, auto&) {
         d.knobs.vectorize = !d.knobs.vectorize;
         return true;
       }},
      {"inline_threshold",
       [](ProfileDoc& d, auto&) {
         d.knobs.inline_threshold =
             d.knobs.inline_threshold ? std::optional<int>(*d.knobs.inline_threshold + 1) : 225;
         return true;
       }},
      {"text_offset",
       [](ProfileDoc& d, auto&) {
         d.knobs.text_offset = (d.knobs.text_offset + kTextOffsetStep) % kTextOffsetWindow;
         return true;
       }},
      {"inline_threshold unset",
       [](ProfileDoc& d, auto&) {
         if (!d.knobs.inline_threshold) return false;
         d.knobs.inline_threshold.reset();
         return true;
       }},
      {"mode",
       [](ProfileDoc& d, auto&) {
         d.knobs.mode = d.knobs.mode ? std::optional<CompileMode>(static_cast<CompileMode>(
                                           (static_cast<int>(*d.knobs.mode) + 1) % 3))
                                     : CompileMode::optimized;
         return true;
       }},
      {"mode unset",
       [](ProfileDoc& d, auto&) {
         if (!d.knobs.mode) return false;
         d.knobs.mode.reset();
         return true;
       }},
      {"add function",
       [](ProfileDoc& d, auto& rng) {
         std::string name = random_name(rng) + "_new";
         if (d.functions.count(name)) return false;
         d.functions[name] = FunctionProfile{.cfg_hash = rng(), .counts = {1}};
         return true;
       }},
      {"remove function",
       [](ProfileDoc& d, auto& rng) {
         if (d.functions.empty()) return false;
         auto it = d.functions.begin();
         std::advance(it, static_cast<long>(rng() % d.functions.size()));
         d.functions.erase(it);
         return true;
       }},
      {"rename function",
       [](ProfileDoc& d, auto& rng) {
         if (d.functions.empty()) return false;
         auto it = d.functions.begin();
         std::advance(it, static_cast<long>(rng() % d.functions.size()));
         std::string renamed = it->first + "'";
         if (d.functions.count(renamed)) return false;
         FunctionProfile f = it->second;
         d.functions.erase(it);
         d.functions[renamed] = f;
         return true;
       }},
      {"cfg_hash bit",
       [pick](ProfileDoc& d, auto& rng) {
         FunctionProfile* f = pick(d, rng);
         if (!f) return false;
         f->cfg_hash ^= std::uint64_t(1) << (rng() % 64);
         return true;
       }},
      {"count value",
       [pick](ProfileDoc& d, auto& rng) {
         FunctionProfile* f = pick(d, rng);
         if (!f || f->counts.empty()) return false;
         f->counts[rng() % f->counts.size()] += 1 + rng() % 5;
         return true;
       }},
      {"count appended",
       [pick](ProfileDoc& d, auto& rng) {
         FunctionProfile* f = pick(d, rng);
         if (!f) return false;
         f->counts.push_back(0);
         return true;
       }},
      {"count removed",
       [pick](ProfileDoc& d, auto& rng) {
         FunctionProfile* f = pick(d, rng);
         if (!f || f->counts.empty()) return false;
         f->counts.pop_back();
         return true;
       }},
      {"counts reordered",
       [pick](ProfileDoc& d, auto& rng) {
         FunctionProfile* f = pick(d, rng);
         if (!f || f->counts.size() < 2 || f->counts.front() == f->counts.back()) return false;
         std::swap(f->counts.front(), f->counts.back());
         return true;
       }},
      {"unpredictable added",
       [pick](ProfileDoc& d, auto& rng) {
         FunctionProfile* f = pick(d, rng);
         if (!f) return false;
         f->unpredictable.push_back(static_cast<std::uint32_t>(rng()));
         return true;
       }},
      {"unpredictable changed",
       [pick](ProfileDoc& d, auto& rng) {
         FunctionProfile* f = pick(d, rng);
         if (!f || f->unpredictable.empty()) return false;
         f->unpredictable[0] ^= 1u;
         return true;
       }},
  };
}

std::vector<std::pair<const char*, Mutation>> bookkeeping_mutations() {
  return {
      {"reason",
       [](ProfileDoc& d, auto&) {
         d.provenance.reason += "x";
         return true;
       }},
      {"created_at",
       [](ProfileDoc& d, auto&) {
         d.provenance.created_at = "2031-05-06T07:08:09Z";
         return true;
       }},
      {"host",
       [](ProfileDoc& d, auto&) {
         d.provenance.host += "-other";
         return true;
       }},
      {"stage",
       [](ProfileDoc& d, auto&) {
         d.provenance.stage += 1;
         return true;
       }},
      {"program",
       [](ProfileDoc& d, auto&) {
         d.provenance.program = std::string(64, 'f');
         return true;
       }},
      {"hardware",
       [](ProfileDoc& d, auto& rng) {
         d.hardware["icache_misses"] = rng() % 1000;
         return true;
       }},
      {"hardware cleared",
       [](ProfileDoc& d, auto&) {
         d.hardware = json::object();
         return true;
       }},
      {"fingerprint",
       [](ProfileDoc& d, auto& rng) {
         if (d.functions.empty()) return false;
         auto it = d.functions.begin();
         std::advance(it, static_cast<long>(rng() % d.functions.size()));
         it->second.fingerprint += "z";
         return true;
       }},
  };
}

} // namespace

TEST_CASE("digest property: any key order and whitespace gives the same digest",
          "[profile_store][digest]") {
  std::mt19937_64 rng(kSeed);
  INFO("seed " << kSeed);
  for (int i = 0; i < kIterations; ++i) {
    ProfileDoc d = random_doc(rng);
    std::string digest = profile_digest(d);
    std::string text = dump_shuffled(to_json(d), rng);
    INFO("iteration " << i << ": " << text);
    auto parsed = parse_profile(text);
    REQUIRE(parsed);
    REQUIRE(*parsed == d);
    REQUIRE(profile_digest(*parsed) == digest);
    // Canonical form is independent of the input's order too.
    REQUIRE(canonical_json(json::parse(text)) == canonical_json(to_json(d)));
  }
}

TEST_CASE("digest property: every compile-affecting change gives a new digest",
          "[profile_store][digest]") {
  std::mt19937_64 rng(kSeed + 1);
  INFO("seed " << kSeed + 1);
  auto mutations = compile_mutations();
  std::map<std::string, int> applied;
  for (int i = 0; i < kIterations; ++i) {
    ProfileDoc d = random_doc(rng);
    std::string base = profile_digest(d);
    for (auto& [name, mutate] : mutations) {
      ProfileDoc m = d;
      if (!mutate(m, rng)) continue;
      INFO("iteration " << i << ", mutation " << name);
      REQUIRE_FALSE(m == d);
      REQUIRE(profile_digest(m) != base);
      applied[name]++;
    }
  }
  // Every mutation was exercised many times.
  for (auto& [name, mutate] : mutations) {
    INFO(name);
    CHECK(applied[name] > kIterations / 10);
  }
}

TEST_CASE("digest property: bookkeeping changes keep the digest", "[profile_store][digest]") {
  std::mt19937_64 rng(kSeed + 2);
  INFO("seed " << kSeed + 2);
  auto mutations = bookkeeping_mutations();
  for (int i = 0; i < kIterations; ++i) {
    ProfileDoc d = random_doc(rng);
    std::string base = profile_digest(d);
    ProfileDoc all = d;
    for (auto& [name, mutate] : mutations) {
      ProfileDoc m = d;
      if (!mutate(m, rng)) continue;
      mutate(all, rng);
      INFO("iteration " << i << ", mutation " << name);
      REQUIRE(profile_digest(m) == base);
    }
    REQUIRE(profile_digest(all) == base);
  }
}

TEST_CASE("the store keeps digest and canonical body consistent for random documents",
          "[profile_store][digest]") {
  STORE_DIR(dir);
  auto store = ProfileStore::open(dir.file("d.db"));
  REQUIRE(store);
  std::mt19937_64 rng(kSeed + 3);
  std::set<std::string> digests;
  for (int i = 0; i < 60; ++i) {
    ProfileDoc d = random_doc(rng);
    std::string pk = std::string(63, 'k') + static_cast<char>('a' + i % 26);
    auto cur = store->current(pk);
    REQUIRE(cur);
    std::int64_t v = *cur ? (*cur)->version : 0;
    // Every other write asks for the digest it stored.
    std::string written_digest;
    WriteInfo info;
    if (i % 2 == 0) info.digest_out = &written_digest;
    REQUIRE(store->write(pk, v, d, info));
    auto back = store->current(pk);
    REQUIRE(back);
    const StoredProfile& p = **back;
    CHECK(p.digest == profile_digest(d));
    CHECK(written_digest == (i % 2 == 0 ? p.digest : std::string()));
    CHECK(p.body == canonical_json(to_json(p.doc)));
    CHECK(p.doc.functions == d.functions);
    CHECK(p.doc.knobs == d.knobs);
    // The canonical body has no insignificant whitespace and sorted keys:
    // re-canonicalising the parsed body reproduces it byte for byte.
    CHECK(canonical_json(json::parse(p.body)) == p.body);
    digests.insert(p.digest);
  }
  CHECK(digests.size() > 50);
}
