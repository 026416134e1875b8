// The stage processes of WO2023234952A1 (FIG. 3-6, design.md section 2):
// the Orchestrator's public face (create, prepare, precompile, explain, stats)
// and the names of its enums. Orchestrator::Impl (orchestrator_impl.h) holds
// its state; its steps live beside this file:
//   stage_steps     prepare (IK, then the profile key mapping), first stage
//                   (FIG. 5 steps 506-508 and FIG. 6), later stage (FIG. 5
//                   steps 510-518 and FIG. 4) and compile-and-store
//   stage_results   a stage's output, its counts and its explain record
//   tier_up         precompiles and background compiles
// and the parts they use, each behind its own lock:
//   tier_lookup     memory, disk, then the remote tier (if any), single-flight
//                   loads and fetches, storing outputs
//   explain_log     per-IK explain records and what each program last served
//   identity_history  the compiler identity each program was last compiled under
//   tier_up_queue   background compiles: dedupe by CK, retry-after, wait_idle, stop
//   counters        the Stats counters
#include "fdo/cache/orchestrator.h"

#include "fdo/cache/keys.h"
#include "fdo/util/enum_names.h"
#include "orchestrator_impl.h"

#include <filesystem>
#include <optional>

namespace fdo::cache {

namespace fs = std::filesystem;

namespace {

constexpr EnumNames<TierUp, 2> kTierUpNames{{{{TierUp::async, "async"}, {TierUp::sync, "sync"}}}};

} // namespace

std::string_view to_string(TierUp t) {
  return kTierUpNames.name(t);
}

std::string_view to_string(TierUpState s) {
  static constexpr EnumNames<TierUpState, 3> kNames{{{{TierUpState::none, "none"},
                                                      {TierUpState::scheduled, "scheduled"},
                                                      {TierUpState::held_off, "held_off"}}}};
  return kNames.name(s);
}

std::string_view to_string(Precompiled p) {
  static constexpr EnumNames<Precompiled, 4> kNames{
      {{{Precompiled::stored, "stored"},
        {Precompiled::queued, "queued"},
        {Precompiled::already_queued, "already_queued"},
        {Precompiled::held_off, "held_off"}}}};
  return kNames.name(p);
}

Expected<TierUp> parse_tier_up(std::string_view s) {
  if (std::optional<TierUp> t = kTierUpNames.parse(s)) return *t;
  return make_error(Errc::invalid_argument, "unknown tier-up policy \"" + std::string(s) +
                                                "\" (expected " + kTierUpNames.alternatives() +
                                                ")");
}

Orchestrator::Orchestrator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Orchestrator::~Orchestrator() {
  impl_->tier_ups.stop();
}

Expected<std::unique_ptr<Orchestrator>> Orchestrator::create(Config config, KeyStore& keys,
                                                             Compiler& compiler) {
  if (config.tier_up_threads == 0)
    return make_error(Errc::invalid_argument, "cache config: tier_up_threads must be at least 1");
  if (config.explain_records_per_program == 0)
    return make_error(Errc::invalid_argument,
                      "cache config: explain_records_per_program must be at least 1");
  if (config.max_tracked_programs == 0)
    return make_error(Errc::invalid_argument,
                      "cache config: max_tracked_programs must be at least 1");
  auto memory = MemoryTier::create(config.memory_budget_bytes);
  if (!memory) return std::move(memory).error().context("cache config");
  std::unique_ptr<DiskTier> disk;
  std::string programs_dir; // identity history, one small file per program hash
  if (!config.state_dir.empty()) {
    std::string root = (fs::path(config.state_dir) / "cache").string();
    if (config.disk_budget_bytes > 0) {
      DiskTierConfig dc;
      dc.root = root;
      dc.budget_bytes = config.disk_budget_bytes;
      dc.durability = config.disk_durability;
      FDO_TRY(disk, DiskTier::open(std::move(dc)));
    }
    programs_dir = root + "/programs";
  }
  auto impl = std::make_unique<Impl>(std::move(config), keys, compiler, std::move(*memory),
                                     std::move(disk), std::move(programs_dir));
  return std::unique_ptr<Orchestrator>(new Orchestrator(std::move(impl)));
}

Expected<StageOutput> Orchestrator::prepare(const Program& program) {
  return impl_->prepare(program, impl_->config.tier_up);
}

Expected<StageOutput> Orchestrator::prepare(const Program& program, TierUp policy) {
  return impl_->prepare(program, policy);
}

Expected<StageOutput> Orchestrator::prepare(const Program& program, TierUp policy,
                                            const ProfileRef& variant) {
  return impl_->prepare(program, policy, &variant);
}

Expected<Precompiled> Orchestrator::precompile(const Program& program, const ProfileRef& variant) {
  return impl_->precompile(program, &variant, detail::JobPriority::background);
}

Expected<Precompiled> Orchestrator::tier_up_current(const Program& program) {
  return impl_->precompile(program, nullptr, detail::JobPriority::stage);
}

Expected<StageOutput> Orchestrator::prepare(const SharedProgram& program, TierUp policy) {
  return impl_->prepare(*program, policy, nullptr, &program);
}

Expected<StageOutput> Orchestrator::prepare(const SharedProgram& program, TierUp policy,
                                            const ProfileRef& variant) {
  return impl_->prepare(*program, policy, &variant, &program);
}

Expected<Precompiled> Orchestrator::precompile(const SharedProgram& program,
                                               const ProfileRef& variant) {
  return impl_->precompile(*program, &variant, detail::JobPriority::background, &program);
}

Expected<Precompiled> Orchestrator::tier_up_current(const SharedProgram& program) {
  return impl_->precompile(*program, nullptr, detail::JobPriority::stage, &program);
}

std::string Orchestrator::initial_key_for(const Program& program) const {
  return initial_key(program.scope, program.bytes, impl_->compiler.identity());
}

std::string Orchestrator::stamp_initial_key(Program& program) const {
  std::string identity = impl_->compiler.identity();
  program.ik = initial_key(program.scope, program.bytes, identity);
  program.ik_identity = std::move(identity);
  return program.ik;
}

std::vector<ExplainRecord> Orchestrator::explain(const std::string& ik) const {
  return impl_->explain.records(ik);
}

void Orchestrator::record_execution(const std::string& ik, std::uint64_t explain_sequence,
                                    std::uint64_t exec_ns) {
  impl_->explain.set_exec_ns(ik, explain_sequence, exec_ns);
}

void Orchestrator::record_variant(const std::string& ik, std::uint64_t explain_sequence,
                                  std::string role, std::string name) {
  impl_->explain.set_variant(ik, explain_sequence, std::move(role), std::move(name));
}

Stats Orchestrator::stats() const {
  const Impl& d = *impl_;
  Stats s;
  d.n.copy_to(s);
  s.single_flight_waits = d.compile_flights.waits() + d.tiers.load_waits();
  MemoryTierStats m = d.tiers.memory().stats();
  s.memory_evictions = m.evictions;
  s.dropped_after_evict = d.tiers.dropped_after_evict();
  s.memory_entries = m.entries;
  s.memory_bytes = m.bytes;
  s.memory_budget_bytes = m.budget_bytes;
  s.memory_held_entries = m.held_entries;
  s.memory_held_bytes = m.held_bytes;
  if (const DiskTier* disk = d.tiers.disk()) {
    DiskTierStats k = disk->stats();
    s.disk_evictions = k.evictions;
    s.disk_entries = k.entries;
    s.disk_bytes = k.bytes;
    s.disk_budget_bytes = k.budget_bytes;
    s.corrupt_entries = k.corrupt;
    s.disk_store_failures = k.store_failures;
    s.stray_files_removed = k.stray_files_removed;
  }
  s.tier_ups_queued = d.tier_ups.pending();
  if (const RemoteTier* remote = d.tiers.remote()) s.remote = remote->stats();
  return s;
}

void Orchestrator::wait_idle() {
  impl_->tier_ups.wait_idle();
}

std::size_t Orchestrator::evict(std::string_view prefix) {
  impl_->n.queued_dropped_by_evict += impl_->tier_ups.drop_prefix(prefix);
  return impl_->tiers.evict_prefix(prefix);
}

const Config& Orchestrator::config() const {
  return impl_->config;
}
MemoryTier& Orchestrator::memory_tier() {
  return impl_->tiers.memory();
}
DiskTier* Orchestrator::disk_tier() {
  return impl_->tiers.disk();
}

} // namespace fdo::cache
