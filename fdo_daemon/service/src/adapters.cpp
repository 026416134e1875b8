#include "adapters.h"

#include "fdo/cache/keys.h"
#include "fdo/daemon/compile_messages.h"
#include "fdo/daemon/isolation.h"
#include "fdo/jit/object_set.h"
#include "fdo/util/hash.h"
#include "fdo/util/log.h"
#include "fdo/util/log_record.h"

#include <cstdio>
#include <utility>

namespace fdo::daemon {

namespace ps = fdo::profile_store;
using nlohmann::json;

// --- StoreKeys -----------------------------------------------------------

Expected<std::optional<std::string>> StoreKeys::lookup_profile_key(const std::string& ik) {
  return store_.lookup_profile_key(ik);
}

Status StoreKeys::put_profile_key(const std::string& ik, const std::string& pk) {
  FDO_TRY_STATUS(store_.put_profile_key(ik, pk));
  return ok();
}

Expected<std::optional<std::string>> StoreKeys::lookup_virtual_key(const std::string& ck) {
  return store_.lookup_virtual_key(ck);
}

Status StoreKeys::put_virtual_key(const std::string& ck, const std::string& vk) {
  FDO_TRY_STATUS(store_.put_virtual_key(ck, vk, ck.substr(0, cache::kInitialKeyLength)));
  return ok();
}

cache::ProfileRef profile_ref(const std::string& pk, ps::SharedProfile cur) {
  if (!cur) return cache::no_profile(pk);
  cache::ProfileRef ref;
  ref.pk = pk;
  ref.version = cur->version;
  ref.digest = cur->digest;
  // The document inside the shared profile (aliasing: it keeps `cur` alive).
  const ProfileDoc* doc = &cur->doc;
  ref.doc = std::shared_ptr<const ProfileDoc>(std::move(cur), doc);
  return ref;
}

cache::ProfileRef profile_ref(const std::string& pk, std::int64_t version, ProfileDoc doc) {
  cache::ProfileRef ref;
  ref.pk = pk;
  ref.version = version;
  ref.digest = profile_digest(doc);
  ref.doc = std::make_shared<const ProfileDoc>(std::move(doc));
  return ref;
}

Expected<cache::ProfileRef> StoreKeys::current_profile(const std::string& pk) {
  FDO_TRY(ps::SharedProfile cur, store_.current_shared(pk));
  return profile_ref(pk, std::move(cur));
}

// --- StoreFeedback -------------------------------------------------------

Expected<ps::SharedProfile> StoreFeedback::current(std::string_view pk) {
  return store_.current_shared(pk);
}

Expected<std::optional<ps::StoredProfile>> StoreFeedback::version(std::string_view pk,
                                                                  std::int64_t version) {
  return store_.get(pk, version);
}

Expected<std::optional<ps::FeedbackTotals>> StoreFeedback::feedback(std::string_view pk,
                                                                    std::int64_t version) {
  return store_.feedback(pk, version);
}

Expected<std::int64_t> StoreFeedback::write(std::string_view pk, std::int64_t expected_version,
                                            const ProfileDoc& doc, const ps::WriteInfo& info) {
  return store_.write(pk, expected_version, doc, info);
}

Status StoreFeedback::append_feedback(std::span<const ps::FeedbackRow> rows,
                                      std::string_view batch_id) {
  FDO_TRY(ps::AppendResult r, store_.append_feedback(rows, batch_id));
  if (r.duplicate)
    log::info("feedback batch " + std::string(batch_id) + " was applied before; not counted again");
  return ok();
}

// --- StorePrograms -------------------------------------------------------

Status StorePrograms::add(const ps::ProgramInfo& info) {
  FDO_TRY_STATUS(store_.register_program(info));
  return ok();
}

Expected<std::optional<ps::ProgramInfo>> StorePrograms::find(std::string_view ik) {
  return store_.program(ik);
}

Status StorePrograms::touch(std::string_view ik) {
  return store_.touch_program(ik);
}

Expected<std::int64_t> StorePrograms::count_owned(std::int64_t owner) {
  return store_.count_programs(owner);
}

// --- RemoteCompiler ------------------------------------------------------

namespace {

std::vector<jit::EntryInfo> entries_from_json(const json& j) {
  std::vector<jit::EntryInfo> out;
  if (!j.is_array()) return out;
  for (const json& e : j) {
    jit::EntryInfo info;
    info.name = e.value("name", "");
    info.return_type = e.value("returns", "void");
    info.param_types = e.value("params", std::vector<std::string>{});
    out.push_back(std::move(info));
  }
  return out;
}

// A compile job's stdout and stderr (LLVM prints some diagnostics there) go
// to fdod's log as a record naming the tenant and program, control bytes
// escaped and cut at 1 KiB, never as raw lines of the daemon's log.
void log_job_output(const JobOutput& out, const std::string& scope, const std::string& program) {
  for (const auto& [stream, text] :
       {std::pair{"stdout", &out.out}, std::pair{"stderr", &out.err}}) {
    if (text->empty()) continue;
    std::string shown;
    for (unsigned char ch : text->substr(0, 1024)) {
      if (ch >= 0x20 && ch != 0x7f) {
        shown.push_back(static_cast<char>(ch));
        continue;
      }
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", ch);
      shown += esc;
    }
    if (text->size() > 1024 || out.truncated) shown += " [cut]";
    const std::string who = scope.empty() ? "shared scope" : scope;
    log::record(log::Level::notice,
                std::string("compile job ") + stream + " (" + who + ", program " +
                    (program.empty() ? "being registered" : program.substr(0, 12)) + "): " + shown,
                {{"FDO_PROGRAM", program}, {"FDO_TENANT", who}, {"FDO_STREAM", stream}});
  }
}

Expected<Message> run_compile_job(JobRunner& pool, const Message& req, const JobOptions& options,
                                  const std::string& scope, const std::string& program) {
  JobOutput output;
  auto resp = pool.run(req, options, &output);
  log_job_output(output, scope, program);
  return resp;
}

} // namespace

Expected<ProgramAnalysis> RemoteCompiler::analyze(std::string_view program_bytes,
                                                  const TenantScope& scope) {
  CompileJobLimits l = limits_();
  Message req;
  req.header = {{"op", "analyze"}, {"limits", {{"max_program_bytes", l.max_program_bytes}}}};
  req.payload = std::string(program_bytes);
  FDO_TRY(Message resp, run_compile_job(pool_, req, JobOptions{l.job, sandbox_tenant(scope.str())},
                                        scope.str(), ""));
  ProgramAnalysis a;
  a.profile_key = resp.header.value("profile_key", "");
  if (a.profile_key.empty())
    return make_error(Errc::internal, "compile worker analysed the program without a profile key");
  a.entries = entries_from_json(resp.header.value("entries", json::array()));
  const std::string target = resp.header.value("target", "host");
  if (target != "host" && target != "nvptx")
    return make_error(Errc::internal, "compile worker named an unknown target '" + target + "'");
  a.target = target == "nvptx" ? ProgramTarget::nvptx : ProgramTarget::host;
  return a;
}

Expected<cache::Identification> RemoteCompiler::identify(const cache::Program& program) {
  FDO_TRY(ProgramAnalysis a, analyze(program.bytes, TenantScope::from_string(program.scope)));
  return cache::Identification{TenantScope::from_string(program.scope).profile_key(a.profile_key)};
}

Expected<cache::CompiledOutput> RemoteCompiler::compile(const cache::Program& program,
                                                        const cache::ProfileRef& profile,
                                                        CompileMode mode,
                                                        cache::CompilePriority priority,
                                                        const std::shared_ptr<Urgency>& urgency) {
  CompileJobLimits l = limits_();
  CompileJob job;
  job.mode = mode;
  job.profile = profile.doc;
  job.limits.max_program_bytes = l.max_program_bytes;
  job.threads = l.threads;
  job.parts = l.parts;
  // Used only when the program targets NVPTX (the worker tells by its triple).
  job.gpu = gpu_;
  // The parts of this program's last build in this mode, for the worker to
  // take where their input is unchanged (compile_parts.h).
  std::shared_ptr<const HeldBuild> held =
      held_ ? held_->find(program.scope, program.ik, mode) : nullptr;
  if (held)
    for (const jit::PartBuild& p : held->parts)
      job.held.push_back(HeldPartRef{p.key, p.slice, p.object_hash});
  // And the pipeline prefix of its last build in parts, in any mode
  // (docs/jit.md, "The pipeline's prefix").
  std::shared_ptr<const HeldPrefixBuild> prefix =
      held_ ? held_->find_prefix(program.scope, program.ik) : nullptr;
  if (prefix) job.prefix = PrefixRef{prefix->key, prefix->bitcode_hash};
  FDO_TRY(Message req,
          compile_job_message(job, program.bytes, held ? std::string_view(held->objects) : "",
                              prefix ? std::string_view(prefix->bitcode) : ""));
  // A build no stage waits for is stopped while stage compiles run
  // (JobPriority): it never takes cores from one, until a stage comes to
  // wait for it (its urgency raised).
  JobOptions options{l.job, sandbox_tenant(program.scope)};
  options.priority = priority == cache::CompilePriority::background ? JobPriority::background
                                                                    : JobPriority::foreground;
  if (options.priority == JobPriority::background) options.urgency = urgency;
  FDO_TRY(Message resp, run_compile_job(pool_, req, options, program.scope, program.ik));
  auto reply = compile_reply_of(resp);
  if (!reply)
    return make_error(Errc::internal,
                      "compile worker's reply does not decode: " + reply.error().message());
  cache::CompiledOutput out;
  out.explanation = std::move(reply->reply.explanation);
  out.metadata = std::string(reply->metadata);
  // A prefix the compile ran replaces the one held; one that does not hash
  // as the worker says is not kept (the next compile runs it again).
  if (held_ && reply->reply.prefix && !reply->prefix_bitcode.empty() &&
      blake3_hex(reply->prefix_bitcode) == reply->reply.prefix->bitcode_hash)
    held_->put_prefix(program.scope, program.ik,
                      std::make_shared<const HeldPrefixBuild>(HeldPrefixBuild{
                          reply->reply.prefix->key, reply->reply.prefix->bitcode_hash,
                          std::string(reply->prefix_bitcode)}));
  // The object is the payload's tail: keep those bytes rather than copy them.
  resp.payload.erase(0, static_cast<std::size_t>(reply->object.data() - resp.payload.data()));
  out.object = std::move(resp.payload);
  // A build in parts replaces what is held for the program and mode; a
  // whole one (codegen split, one thread) leaves it.
  if (held_ && !reply->reply.parts.empty()) {
    auto build = std::make_shared<HeldBuild>();
    build->parts = std::move(reply->reply.parts);
    auto objects = jit::unpack_objects(out.object);
    if (!objects || objects->size() != build->parts.size())
      return make_error(Errc::internal, "compile worker named " +
                                            std::to_string(build->parts.size()) +
                                            " parts for an object set it did not send");
    build->objects = out.object;
    held_->put(program.scope, program.ik, mode, std::move(build));
  }
  return out;
}

} // namespace fdo::daemon
