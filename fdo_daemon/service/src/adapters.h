// The service's parts over their real back ends: the cache's KeyStore, the
// feedback loop's store and the registry's index over the SQLite profile
// store; the cache's Compiler and the registry's analyzer over the compile
// worker pool. Each is a thin translation; the logic lives in the parts.
#pragma once

#include "fdo/cache/interfaces.h"
#include "fdo/daemon/feedback_loop.h"
#include "fdo/daemon/job_runner.h"
#include "fdo/daemon/program_registry.h"
#include "fdo/daemon/tenant.h"
#include "fdo/jit/nvptx.h"
#include "fdo/profile_store/profile_store.h"
#include "held_parts.h"

#include <functional>
#include <string>

namespace fdo::daemon {

// The cache's view of a stored current profile (no profile: cache::no_profile).
// The document is shared with `current`, not copied.
cache::ProfileRef profile_ref(const std::string& pk, profile_store::SharedProfile current);
// A document derived from the profile (a guard variant, a GPU trial's
// candidate), served under `version`; its digest is its own.
cache::ProfileRef profile_ref(const std::string& pk, std::int64_t version, ProfileDoc doc);

class StoreKeys final : public cache::KeyStore {
public:
  explicit StoreKeys(profile_store::ProfileStore& store) : store_(store) {}
  Expected<std::optional<std::string>> lookup_profile_key(const std::string& ik) override;
  Status put_profile_key(const std::string& ik, const std::string& pk) override;
  Expected<std::optional<std::string>> lookup_virtual_key(const std::string& ck) override;
  Status put_virtual_key(const std::string& ck, const std::string& vk) override;
  Expected<cache::ProfileRef> current_profile(const std::string& pk) override;

private:
  profile_store::ProfileStore& store_;
};

class StoreFeedback final : public FeedbackStore {
public:
  explicit StoreFeedback(profile_store::ProfileStore& store) : store_(store) {}
  Expected<profile_store::SharedProfile> current(std::string_view pk) override;
  Expected<std::optional<profile_store::StoredProfile>> version(std::string_view pk,
                                                                std::int64_t version) override;
  Expected<std::optional<profile_store::FeedbackTotals>> feedback(std::string_view pk,
                                                                  std::int64_t version) override;
  Expected<std::int64_t> write(std::string_view pk, std::int64_t expected_version,
                               const ProfileDoc& doc,
                               const profile_store::WriteInfo& info) override;
  Status append_feedback(std::span<const profile_store::FeedbackRow> rows,
                         std::string_view batch_id) override;

private:
  profile_store::ProfileStore& store_;
};

class StorePrograms final : public ProgramIndex {
public:
  explicit StorePrograms(profile_store::ProfileStore& store) : store_(store) {}
  Status add(const profile_store::ProgramInfo& info) override;
  Expected<std::optional<profile_store::ProgramInfo>> find(std::string_view ik) override;
  Status touch(std::string_view ik) override;
  Expected<std::int64_t> count_owned(std::int64_t owner) override;

private:
  profile_store::ProfileStore& store_;
};

// Limits for one compile-worker job, read when the job starts (they follow
// config reloads).
struct CompileJobLimits {
  JobLimits job;
  std::uint64_t max_program_bytes = 0;
  unsigned threads = 1; // Config::effective_compile_threads
  unsigned parts = 0;   // Config::compile_parts (0: as many as threads)
};

class RemoteCompiler final : public cache::Compiler, public ProgramAnalyzer {
public:
  // `gpu`: the host GPU NVPTX programs are compiled for (docs/gpu.md); its
  // identity is part of `identity`. None: they are analysed but not compiled.
  // `held`: where the parts of partitioned builds are kept for the next
  // compile of the same program and mode (held_parts.h); none, every
  // compile is whole.
  RemoteCompiler(std::string identity, JobRunner& pool, std::function<CompileJobLimits()> limits,
                 std::optional<jit::GpuTarget> gpu = std::nullopt, HeldParts* held = nullptr)
      : identity_(std::move(identity)), pool_(pool), limits_(std::move(limits)), gpu_(gpu),
        held_(held) {}

  std::string identity() const override { return identity_; }
  // The profile key is scoped to the program's tenant (tenant.h). Every job
  // runs in a compile worker bound to the program's tenant.
  Expected<cache::Identification> identify(const cache::Program& program) override;
  Expected<cache::CompiledOutput> compile(const cache::Program& program,
                                          const cache::ProfileRef& profile, CompileMode mode,
                                          cache::CompilePriority priority,
                                          const std::shared_ptr<Urgency>& urgency) override;
  Expected<ProgramAnalysis> analyze(std::string_view program_bytes,
                                    const TenantScope& scope) override;

private:
  std::string identity_;
  JobRunner& pool_;
  std::function<CompileJobLimits()> limits_;
  std::optional<jit::GpuTarget> gpu_;
  HeldParts* held_;
};

} // namespace fdo::daemon
