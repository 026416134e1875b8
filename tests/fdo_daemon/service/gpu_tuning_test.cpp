// GPU programs' tuning in the profile (gpu_tuning.h) over a fake store:
// tuned launches kept as versions, launch-bound trials planned in randomized
// blocks, decided by the guard's test on kernel times, and their verdicts (and
// a kept bound, compile-affecting) written into the profile.
#include "fakes.h"
#include "fdo/daemon/gpu_tuning.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

using namespace fdo;
using namespace fdo::daemon;
using namespace fdo::daemon::testing;

namespace {

const std::string kPk = "pk-gpu";
const std::string kArch = "sm_90";

GpuStageShape saxpy_shape(unsigned block = 256) {
  GpuStageShape s;
  s.kernel = "saxpy";
  s.grid = {528, 1, 1};
  s.block = {block, 1, 1};
  s.buffer_sizes = {4096, 4096};
  s.scalars = {1024};
  return s;
}

struct Harness {
  FakeFeedbackStore store;
  GpuTuner tuner{store, "gpuhost"};
  GuardConfig config = [] {
    GuardConfig c;
    c.min_stages = 0; // trials from the first stage (the warm-up has a test of its own)
    return c;
  }();
  GpuWriter who{1000, 0, "ik-gpu"};

  // Trials need a profile (version 1, empty: start_profile); tests of tuned
  // launches start without one.
  explicit Harness(bool with_profile = true) {
    if (with_profile) REQUIRE(tuner.start_profile(kPk, who));
  }

  ps::SharedProfile current() { return *store.current(kPk); }

  // One stage of `shape` whose kernel takes `ms` on the current build and
  // `candidate_ms` on a trial's candidate; the plan it ran under.
  GpuStagePlan stage(const GpuStageShape& shape, double ms, double candidate_ms,
                     GpuTrialProgress* progress = nullptr) {
    ps::SharedProfile cur = current();
    GpuStagePlan p = tuner.plan(kPk, cur ? &cur->doc : nullptr, cur ? cur->version : 0, kArch,
                                shape, true, config);
    const double t = p.build == GpuBuild::candidate ? candidate_ms : ms;
    auto r = tuner.record(kPk, p, t, config, who);
    REQUIRE(r);
    if (progress != nullptr) *progress = *r;
    ++who.stage;
    return p;
  }
};

} // namespace

TEST_CASE("a tuned launch is kept in the profile as bookkeeping", "[gpu_tuning]") {
  Harness h(false);
  GpuLaunchRecord rec;
  rec.arch = kArch;
  rec.kernel = "saxpy";
  rec.items = 1 << 20;
  rec.chosen = {{528, 1, 1}, {256, 1, 1}, 0.12};
  rec.candidates = {{{528, 1, 1}, {256, 1, 1}, 0.12}, {{132, 1, 1}, {1024, 1, 1}, 0.19}};
  auto v = h.tuner.remember_launch(kPk, rec, h.who);
  REQUIRE(v);
  CHECK(*v == 1);
  ps::SharedProfile cur = h.current();
  REQUIRE(cur);
  const GpuLaunchRecord* found = find_launch(cur->doc.gpu, kArch, "saxpy", 1 << 20);
  REQUIRE(found != nullptr);
  CHECK(*found == rec);
  CHECK(find_launch(cur->doc.gpu, "sm_80", "saxpy", 1 << 20) == nullptr);
  CHECK(cur->reason == "GPU launch of saxpy tuned for 1048576 items on sm_90");
  // Bookkeeping: the document's digest is the empty document's.
  CHECK(profile_digest(cur->doc) == profile_digest(ProfileDoc{}));

  // Tuned again (another size, then the same size anew): one record per size.
  rec.items = 4096;
  REQUIRE(h.tuner.remember_launch(kPk, rec, h.who));
  rec.chosen.median_ms = 0.05;
  REQUIRE(h.tuner.remember_launch(kPk, rec, h.who));
  cur = h.current();
  CHECK(cur->version == 3);
  CHECK(cur->doc.gpu.launches.size() == 2);
  CHECK(find_launch(cur->doc.gpu, kArch, "saxpy", 4096)->chosen.median_ms == 0.05);
}

TEST_CASE("a write that loses a race is retried on the newer version", "[gpu_tuning]") {
  Harness h(false);
  h.store.conflicts_to_inject = 2;
  GpuLaunchRecord rec{kArch, "saxpy", 64, {{1, 1, 1}, {64, 1, 1}, 0.01}, {}};
  auto v = h.tuner.remember_launch(kPk, rec, h.who);
  REQUIRE(v);
  CHECK(*v == 1);
  h.store.conflicts_to_inject = 100;
  auto refused = h.tuner.remember_launch(kPk, rec, h.who);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::conflict);
}

TEST_CASE("launch bounds that make the kernel faster are kept and compile-affecting",
          "[gpu_tuning]") {
  Harness h;
  const std::string before = profile_digest(ProfileDoc{});
  GpuTrialProgress progress;
  int candidate_stages = 0, incumbent_stages = 0;
  for (int i = 0; i < 400 && !progress.decided; ++i) {
    GpuStagePlan p = h.stage(saxpy_shape(), 1.0, 0.8, &progress);
    REQUIRE(p.trial);
    CHECK(p.bounds == GpuKernelBounds{kArch, "saxpy", 256, 0});
    if (p.build == GpuBuild::candidate) {
      ++candidate_stages;
      REQUIRE(p.variant);
      REQUIRE(p.variant->doc);
      CHECK(find_bounds(p.variant->doc->gpu, kArch, "saxpy") != nullptr);
      CHECK(p.variant->digest != before);
    } else {
      ++incumbent_stages;
      CHECK_FALSE(p.variant);
    }
  }
  REQUIRE(progress.decided);
  CHECK(progress.result.verdict == Verdict::accepted);
  CHECK(progress.result.pairs >= h.config.trial.min_pairs);
  CHECK(std::abs(candidate_stages - incumbent_stages) <= 2);
  CHECK(progress.written_version == 2);
  ps::SharedProfile cur = h.current();
  const GpuKernelBounds* kept = find_bounds(cur->doc.gpu, kArch, "saxpy");
  REQUIRE(kept != nullptr);
  CHECK(kept->max_threads == 256);
  REQUIRE(cur->doc.gpu.trials.size() == 1);
  CHECK(cur->doc.gpu.trials[0].verdict == TrialVerdict::accepted);
  CHECK(cur->doc.gpu.trials[0].ratio == Approx(0.8));
  CHECK(cur->digest != before);
  CHECK(h.tuner.running() == 0);

  // Next on the ladder: the same bound with a register cap for two blocks
  // per SM, against the kept build; slower here, so rejected.
  GpuTrialProgress capped;
  for (int i = 0; i < 400 && !capped.decided; ++i) {
    GpuStagePlan p = h.stage(saxpy_shape(), 0.8, 1.1, &capped);
    REQUIRE(p.trial);
    CHECK(p.bounds == GpuKernelBounds{kArch, "saxpy", 256, 2});
    if (p.build == GpuBuild::candidate) {
      CHECK(find_bounds(p.variant->doc->gpu, kArch, "saxpy")->min_blocks_per_sm == 2);
      CHECK(p.variant->doc->gpu.launch_bounds.size() == 1); // replaces, not adds
    }
  }
  REQUIRE(capped.decided);
  CHECK(capped.result.verdict == Verdict::rejected);
  cur = h.current();
  CHECK(*find_bounds(cur->doc.gpu, kArch, "saxpy") == GpuKernelBounds{kArch, "saxpy", 256, 0});
  CHECK(cur->doc.gpu.trials.size() == 2);

  // Settled: later stages run the current build (which has the bound), no trial.
  GpuStagePlan after = h.stage(saxpy_shape(), 0.8, 0.8);
  CHECK_FALSE(after.trial);
  CHECK(after.build == GpuBuild::current);
  CHECK(h.tuner.running() == 0);
  // A narrower launch fits the kept bound and tries nothing for its own size.
  GpuStagePlan narrow = h.stage(saxpy_shape(128), 0.8, 0.8);
  CHECK_FALSE(narrow.trial);
  CHECK(narrow.build == GpuBuild::current);

  // A launch with more threads than the kept bound runs a build without it.
  GpuStagePlan wide = h.stage(saxpy_shape(512), 1.0, 1.0);
  CHECK(wide.build == GpuBuild::unbounded);
  REQUIRE(wide.variant);
  CHECK(find_bounds(wide.variant->doc->gpu, kArch, "saxpy") == nullptr);
  CHECK(wide.variant->digest == before);
  CHECK_FALSE(wide.trial);
}

TEST_CASE("launch bounds that make the kernel slower are rejected and never tried again",
          "[gpu_tuning]") {
  Harness h;
  GpuTrialProgress progress;
  for (int i = 0; i < 400 && !progress.decided; ++i)
    h.stage(saxpy_shape(), 1.0, 1.3, &progress);
  REQUIRE(progress.decided);
  CHECK(progress.result.verdict == Verdict::rejected);
  ps::SharedProfile cur = h.current();
  CHECK(cur->doc.gpu.launch_bounds.empty());
  REQUIRE(cur->doc.gpu.trials.size() == 1);
  CHECK(cur->doc.gpu.trials[0].verdict == TrialVerdict::rejected);
  // The profile's compile-affecting part is unchanged: the same outputs serve.
  CHECK(cur->digest == profile_digest(ProfileDoc{}));
  // The register-capped candidate is tried next (against the unbounded build).
  GpuTrialProgress capped;
  for (int i = 0; i < 400 && !capped.decided; ++i) {
    GpuStagePlan p = h.stage(saxpy_shape(), 1.0, 1.3, &capped);
    REQUIRE(p.trial);
    CHECK(p.bounds.min_blocks_per_sm == 2);
  }
  CHECK(capped.result.verdict == Verdict::rejected);
  CHECK(h.current()->doc.gpu.trials.size() == 2);
  GpuStagePlan again = h.stage(saxpy_shape(), 1.0, 1.3);
  CHECK_FALSE(again.trial);
  // Another block size is another candidate.
  GpuStagePlan other = h.stage(saxpy_shape(128), 1.0, 1.0);
  REQUIRE(other.trial);
  CHECK(other.bounds.max_threads == 128);
}

TEST_CASE("a GPU trial under noise decides with the guard's error rates", "[gpu_tuning]") {
  // 30% lognormal noise: a 20%-faster candidate is kept in most trials and a
  // 5%-slower one is (almost) never kept.
  int kept_faster = 0, kept_slower = 0;
  constexpr int kTrials = 60;
  for (int t = 0; t < kTrials; ++t) {
    for (double effect : {0.8, 1.05}) {
      Harness h;
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) * 7919 + (effect < 1 ? 1 : 2));
      std::normal_distribution<double> noise(0.0, 0.3);
      GpuTrialProgress progress;
      for (int i = 0; i < 1000 && !progress.decided; ++i) {
        ps::SharedProfile cur = h.current();
        GpuStagePlan p = h.tuner.plan(kPk, cur ? &cur->doc : nullptr, cur ? cur->version : 0, kArch,
                                      saxpy_shape(), true, h.config);
        const double base = std::exp(noise(rng));
        auto r = h.tuner.record(kPk, p, p.build == GpuBuild::candidate ? base * effect : base,
                                h.config, h.who);
        REQUIRE(r);
        progress = *r;
      }
      REQUIRE(progress.decided);
      if (progress.result.verdict == Verdict::accepted) ++(effect < 1 ? kept_faster : kept_slower);
    }
  }
  CHECK(kept_slower <= 3);
  CHECK(kept_faster >= kTrials / 2);
}

TEST_CASE("GPU trials: other shapes run the current build - an abandoned trial frees the key",
          "[gpu_tuning]") {
  Harness h;
  h.config.trial.max_pairs = 16; // gives up after 64 stages of other shapes
  GpuStagePlan first = h.stage(saxpy_shape(), 1.0, 1.0);
  REQUIRE(first.trial);
  GpuStageShape other = saxpy_shape();
  other.buffer_sizes = {8192, 8192};
  for (int i = 0; i < 64; ++i) {
    GpuStagePlan p = h.stage(other, 1.0, 1.0);
    CHECK_FALSE(p.trial);
    CHECK(p.build == GpuBuild::current);
  }
  CHECK(h.tuner.running() == 1);
  h.stage(other, 1.0, 1.0);
  CHECK(h.tuner.running() == 0);
  // A stage that tuned its launch never joins a trial; with the guard off none starts.
  ps::SharedProfile cur = h.current();
  CHECK_FALSE(h.tuner.plan(kPk, nullptr, 0, kArch, other, false, h.config).trial);
  h.config.mode = GuardMode::off;
  CHECK_FALSE(h.tuner.plan(kPk, nullptr, 0, kArch, other, true, h.config).trial);
  CHECK(h.tuner.running() == 0);
}

TEST_CASE("a pinned profile keeps no GPU verdict and says why", "[gpu_tuning]") {
  Harness h(false);
  GpuLaunchRecord rec{kArch, "saxpy", 64, {{1, 1, 1}, {64, 1, 1}, 0.01}, {}};
  REQUIRE(h.tuner.remember_launch(kPk, rec, h.who));
  h.store.keys[kPk].pinned = true;
  auto refused = h.tuner.remember_launch(kPk, rec, h.who);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::pinned);
}

TEST_CASE("a GPU trial starts after guard.min_stages stages of one shape in a row",
          "[gpu_tuning]") {
  Harness h;
  h.config.min_stages = 3;
  for (int i = 0; i < 3; ++i)
    CHECK_FALSE(h.stage(saxpy_shape(), 1.0, 1.0).trial);
  // Another shape starts the count over.
  CHECK_FALSE(h.stage(saxpy_shape(128), 1.0, 1.0).trial);
  for (int i = 0; i < 2; ++i)
    CHECK_FALSE(h.stage(saxpy_shape(), 1.0, 1.0).trial);
  CHECK(h.tuner.running() == 0);
  CHECK_FALSE(h.stage(saxpy_shape(), 1.0, 1.0).trial); // the third in a row
  GpuStagePlan p = h.stage(saxpy_shape(), 1.0, 1.0);
  CHECK(p.trial);
  CHECK(h.tuner.running() == 1);
}

TEST_CASE("a program without a profile gets an empty one, then its trial", "[gpu_tuning]") {
  Harness h(false);
  GpuStagePlan first = h.stage(saxpy_shape(), 1.0, 1.0);
  CHECK(first.wants_profile);
  CHECK_FALSE(first.trial);
  CHECK(h.tuner.running() == 0);
  auto v = h.tuner.start_profile(kPk, h.who);
  REQUIRE(v);
  CHECK(*v == 1);
  CHECK(h.current()->doc == ProfileDoc{});
  CHECK(h.current()->reason ==
        "GPU program: a profile for its tuned launches and launch-bound trials");
  // Idempotent: a profile that exists is left alone.
  auto again = h.tuner.start_profile(kPk, h.who);
  REQUIRE(again);
  CHECK(*again == 1);
  CHECK(h.store.writes == 1);
  GpuStagePlan second = h.stage(saxpy_shape(), 1.0, 1.0);
  CHECK_FALSE(second.wants_profile);
  CHECK(second.trial);
}
