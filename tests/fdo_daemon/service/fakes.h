// Fakes of the service's narrow interfaces: an analyzer, a program index, a
// feedback store, and job runners that stand in for compile/exec workers.
#pragma once

#include "fdo/daemon/compile_messages.h"
#include "fdo/daemon/exec_messages.h"
#include "fdo/daemon/feedback_loop.h"
#include "fdo/daemon/isolation.h"
#include "fdo/daemon/job_runner.h"
#include "fdo/daemon/program_registry.h"
#include "fdo/util/hash.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fdo::daemon::testing {

namespace ps = fdo::profile_store;

// Profile key = BLAKE3 of the bytes; one entry "main" returning i64. Bytes
// starting with "bad" fail like unparsable IR.
class FakeAnalyzer final : public ProgramAnalyzer {
public:
  Expected<ProgramAnalysis> analyze(std::string_view bytes, const TenantScope& scope) override {
    ++calls;
    {
      std::lock_guard lk(mu);
      scopes.push_back(scope.str());
    }
    if (bytes.starts_with("bad")) return make_error(Errc::parse, "expected top-level entity");
    ProgramAnalysis a;
    a.profile_key = blake3_hex(bytes);
    a.entries.push_back(jit::EntryInfo{"main", "i64", {}, true});
    return a;
  }
  std::atomic<int> calls{0};
  std::mutex mu;
  std::vector<std::string> scopes; // the tenant scope of each analysis
};

// The store's program table: add() inserts or updates like register_program
// (a recorded program hash never changes; a different one is a conflict).
class FakeIndex final : public ProgramIndex {
public:
  Status add(const ps::ProgramInfo& info) override {
    std::lock_guard lk(mu);
    ++adds;
    if (fail_adds) return make_error(Errc::io, "disk full");
    auto [it, inserted] = rows.emplace(info.ik, info);
    if (inserted) return ok();
    ps::ProgramInfo& row = it->second;
    if (!info.program_hash.empty() && !row.program_hash.empty() &&
        row.program_hash != info.program_hash)
      return make_error(Errc::conflict, "program registered with other bytes");
    row.name = info.name;
    row.size = info.size;
    if (row.program_hash.empty()) row.program_hash = info.program_hash;
    if (!info.pk.empty()) row.pk = info.pk;
    return ok();
  }
  Expected<std::optional<ps::ProgramInfo>> find(std::string_view ik) override {
    std::lock_guard lk(mu);
    if (auto it = rows.find(std::string(ik)); it != rows.end()) return it->second;
    return std::optional<ps::ProgramInfo>();
  }
  Status touch(std::string_view ik) override {
    std::lock_guard lk(mu);
    ++touches;
    if (!rows.count(std::string(ik))) return make_error(Errc::not_found, "no program");
    return ok();
  }
  Expected<std::int64_t> count_owned(std::int64_t owner) override {
    std::lock_guard lk(mu);
    std::int64_t n = 0;
    for (const auto& [ik, row] : rows)
      n += row.owner == owner ? 1 : 0;
    return n;
  }
  std::mutex mu;
  std::map<std::string, ps::ProgramInfo> rows;
  bool fail_adds = false;
  int adds = 0;
  int touches = 0;
};

// Holds the first call that passes through it until release(); later calls
// pass at once (a store read held open while another stage goes on).
class FirstCallGate {
public:
  void operator()() {
    std::unique_lock lk(mu_);
    if (calls_++ != 0) return;
    held_ = true;
    cv_.notify_all();
    cv_.wait(lk, [&] { return released_; });
  }
  void wait_until_held() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return held_; });
  }
  void release() {
    {
      std::lock_guard lk(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  int calls() {
    std::lock_guard lk(mu_);
    return calls_;
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, released_ = false;
  int calls_ = 0;
};

// Profiles and feedback in memory, with the store's versioned-write and pin
// semantics, and switches to inject failures and to hold a write open.
class FakeFeedbackStore final : public FeedbackStore {
public:
  struct Key {
    std::vector<ps::StoredProfile> versions; // current = back(), unless reset
    bool pinned = false;
  };

  Expected<ps::SharedProfile> current(std::string_view pk) override {
    std::lock_guard lk(mu);
    ++reads;
    auto it = keys.find(std::string(pk));
    if (it == keys.end() || it->second.versions.empty()) return ps::SharedProfile();
    ps::StoredProfile p = it->second.versions.back();
    p.pinned = it->second.pinned && !hide_pin_from_reads;
    return ps::SharedProfile(std::make_shared<const ps::StoredProfile>(std::move(p)));
  }
  Expected<std::optional<ps::StoredProfile>> version(std::string_view pk,
                                                     std::int64_t version) override {
    if (on_version_read) on_version_read(); // e.g. held while another stage goes on
    std::lock_guard lk(mu);
    ++reads;
    auto it = keys.find(std::string(pk));
    if (it != keys.end())
      for (const ps::StoredProfile& p : it->second.versions)
        if (p.version == version && !forget_versions.count(version))
          return std::optional<ps::StoredProfile>(p);
    return std::optional<ps::StoredProfile>();
  }
  Expected<std::optional<ps::FeedbackTotals>> feedback(std::string_view pk,
                                                       std::int64_t version) override {
    if (on_feedback_read) on_feedback_read(); // e.g. a flush racing the read
    std::lock_guard lk(mu);
    auto it = totals.find({std::string(pk), version});
    if (it == totals.end()) return std::optional<ps::FeedbackTotals>();
    return std::optional<ps::FeedbackTotals>(it->second);
  }
  Expected<std::int64_t> write(std::string_view pk, std::int64_t expected, const ProfileDoc& doc,
                               const ps::WriteInfo& info) override {
    if (hold_writes_of == pk) {
      std::unique_lock lk(hold_mu);
      write_held = true;
      hold_cv.notify_all();
      hold_cv.wait(lk, [&] { return !hold_writes_of.has_value(); });
    }
    std::lock_guard lk(mu);
    ++writes;
    if (conflicts_to_inject > 0) {
      --conflicts_to_inject;
      return make_error(Errc::conflict, "profile moved on");
    }
    Key& k = keys[std::string(pk)];
    std::int64_t cur = k.versions.empty() ? 0 : k.versions.back().version;
    if (cur != expected) return make_error(Errc::conflict, "expected version mismatch");
    if (k.pinned && info.source == ps::WriteSource::feedback)
      return make_error(Errc::pinned, "profile is pinned");
    ps::StoredProfile p;
    p.pk = std::string(pk);
    p.version = cur + 1;
    p.doc = doc;
    p.digest = profile_digest(doc);
    p.reason = info.reason;
    p.owner = info.owner;
    p.author = info.owner;
    p.host = info.host;
    p.stage = info.stage;
    p.program = info.program;
    k.versions.push_back(std::move(p));
    return cur + 1;
  }
  Status append_feedback(std::span<const ps::FeedbackRow> rows,
                         std::string_view batch_id) override {
    std::lock_guard lk(mu);
    if (append_failures_to_inject > 0) {
      --append_failures_to_inject;
      return make_error(Errc::timeout, "database is locked");
    }
    // Idempotent by batch id, like ProfileStore::append_feedback.
    if (!batch_id.empty() && !batch_ids.insert(std::string(batch_id)).second) return ok();
    for (const auto& r : rows) {
      appended.push_back(r);
      ps::FeedbackTotals& t = totals[{r.pk, r.version}];
      t.pk = r.pk;
      t.version = r.version;
      t.stages += r.stages;
      t.exec_ns += r.exec_ns;
      for (const auto& [name, value] : r.counters)
        t.counters[name] += value;
      t.host_stages[r.host] += r.stages;
      for (const auto& [name, counts] : r.function_counts) {
        auto& sum = t.function_counts[name];
        sum.resize(counts.size(), 0);
        for (std::size_t i = 0; i < counts.size(); ++i)
          sum[i] += counts[i];
      }
    }
    return ok();
  }

  void release_held_write() {
    std::lock_guard lk(hold_mu);
    hold_writes_of.reset();
    hold_cv.notify_all();
  }
  void wait_until_write_held() {
    std::unique_lock lk(hold_mu);
    hold_cv.wait(lk, [&] { return write_held; });
  }

  std::mutex mu;
  std::map<std::string, Key> keys;
  std::map<std::pair<std::string, std::int64_t>, ps::FeedbackTotals> totals;
  std::vector<ps::FeedbackRow> appended;
  std::set<std::string> batch_ids;
  int reads = 0, writes = 0;
  int conflicts_to_inject = 0;
  bool hide_pin_from_reads = false;
  int append_failures_to_inject = 0;
  std::set<std::int64_t> forget_versions; // version() finds none (pruned by retention)
  std::function<void()> on_feedback_read; // runs at the start of each feedback() call
  std::function<void()> on_version_read;  // runs at the start of each version() call

  std::mutex hold_mu;
  std::condition_variable hold_cv;
  std::optional<std::string> hold_writes_of;
  bool write_held = false;
};

// A host that offers every sandbox layer (the service's choices are then the
// same wherever the tests run; the sandbox itself is tested in
// tests/fdo_daemon/sandbox).
inline SandboxSupport test_host() {
  SandboxSupport s;
  s.landlock_abi = 3;
  s.can_switch_uid = true;
  s.mount_namespace = true;
  s.seccomp = true;
  return s;
}

// An exec job as a stand-in exec worker receives it (exec_messages.h): the
// typed job and, when attached, its object's bytes.
struct FakeExecJob {
  ExecJob job;
  std::string object;
};
inline Expected<FakeExecJob> fake_exec_job(const Message& req) {
  FDO_TRY(Decoded<ExecJob> d, exec_job_of(req));
  const std::size_t object = d.value.object_size.value_or(0);
  if (object > d.rest.size())
    return make_error(Errc::invalid_argument, "fake exec worker: payload shorter than the object");
  return FakeExecJob{std::move(d.value), std::string(d.rest.substr(0, object))};
}
// The replies of a stand-in exec worker.
inline Expected<Message> fake_exec_missing() {
  ExecReply r;
  r.outcome = ExecOutcome::missing_object;
  return exec_reply_message(r);
}
inline Expected<Message> fake_exec_ran(StageObservation obs) {
  ExecReply r;
  r.observation = std::move(obs);
  return exec_reply_message(r);
}

// The mode of a compile job as a stand-in compile worker reads it
// (compile_messages.h), or "" when the message is not a compile job.
inline std::string compile_job_mode(const Message& req) {
  auto job = compile_job_of(req);
  return job ? std::string(to_string(job->job.mode)) : "";
}

// A job runner answering with a function of the request.
class FakeRunner final : public JobRunner {
public:
  using Fn = std::function<Expected<Message>(const Message&)>;
  explicit FakeRunner(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  Expected<Message> run(const Message& request, const JobOptions& options,
                        JobOutput* output) override {
    {
      std::lock_guard lk(mu_);
      ++jobs_;
      last_limits_ = options.limits;
      tenants_.push_back(options.tenant);
      priorities_.push_back(options.priority);
      last_urgency_ = options.urgency;
    }
    if (output != nullptr) *output = JobOutput{};
    return fn_(request);
  }
  void set_max_waiting_per_tenant(std::size_t) override {}
  std::vector<std::string> tenants() const {
    std::lock_guard lk(mu_);
    return tenants_;
  }
  PoolStats stats() const override {
    std::lock_guard lk(mu_);
    PoolStats s;
    s.name = name_;
    s.size = 1;
    s.live = 1;
    s.jobs = jobs_;
    return s;
  }
  JobLimits last_limits() const {
    std::lock_guard lk(mu_);
    return last_limits_;
  }
  std::vector<JobPriority> priorities() const {
    std::lock_guard lk(mu_);
    return priorities_;
  }
  std::shared_ptr<Urgency> last_urgency() const {
    std::lock_guard lk(mu_);
    return last_urgency_;
  }

private:
  std::string name_;
  Fn fn_;
  mutable std::mutex mu_;
  std::uint64_t jobs_ = 0;
  JobLimits last_limits_;
  std::vector<std::string> tenants_;
  std::vector<JobPriority> priorities_;
  std::shared_ptr<Urgency> last_urgency_;
};

// A report's served-output metadata changed by `edit` (a copy: metadata is
// shared and immutable once a stage holds it).
inline void edit_metadata(StageReport& r, const std::function<void(StageMetadata&)>& edit) {
  auto m =
      r.metadata ? std::make_shared<StageMetadata>(*r.metadata) : std::make_shared<StageMetadata>();
  edit(*m);
  r.metadata = std::move(m);
}

} // namespace fdo::daemon::testing
