// execute of an NVPTX program (docs/gpu.md): the kernel named by "entry" is
// compiled to PTX for the host's GPU through the cache like any program (the
// key embeds the GPU's identity), launched in a GPU worker on the call's
// buffers, and timed with driver events. A launch configuration can be tuned
// once per program, kernel and problem size and is then reused.
#include "fdo/cache/keys.h"
#include "fdo/daemon/abi.h"
#include "fdo/daemon/gpu_jobs.h"
#include "fdo/daemon/gpu_tuning.h"
#include "fdo/daemon/isolation.h"
#include "fdo/util/log.h"
#include "fdo/util/log_record.h"
#include "methods.h"

#include <algorithm>
#include <cstring>

namespace fdo::daemon::methods {

namespace {

Expected<gpu::Dim3> dims_param(const json& params, const char* key) {
  auto it = params.find(key);
  if (it == params.end())
    return make_error(Errc::invalid_argument,
                      std::string("a GPU kernel needs \"") + key + "\": [x, y, z] or a number");
  return dims_from_json(it->is_array() ? *it : json::array({*it}), key);
}

std::uint32_t scalar_size(ScalarType t) {
  switch (t) {
  case ScalarType::i1:
  case ScalarType::i8:
    return 1;
  case ScalarType::i16:
    return 2;
  case ScalarType::i32:
  case ScalarType::f32:
    return 4;
  default:
    return 8;
  }
}

json dims_json(const gpu::Dim3& d) {
  return json::array({d.x, d.y, d.z});
}

GpuDims profile_dims(const gpu::Dim3& d) {
  return {d.x, d.y, d.z};
}

gpu::Dim3 launch_dims(const GpuDims& d) {
  return {d[0], d[1], d[2]};
}

// The tuning's outcome as the profile keeps it: the chosen launch and every
// candidate's median.
GpuLaunchRecord launch_record(const std::string& arch, const std::string& kernel,
                              std::uint64_t items, const GpuLaunchReply& reply, double chosen_ms) {
  GpuLaunchRecord r;
  r.arch = arch;
  r.kernel = kernel;
  r.items = items;
  r.chosen = {profile_dims(reply.ran.grid), profile_dims(reply.ran.block), chosen_ms};
  for (const auto& [config, ms] : reply.tuned)
    r.candidates.push_back({profile_dims(config.grid), profile_dims(config.block), ms});
  return r;
}

// The job: by key (the worker may hold the module) or with an image.
Expected<Message> gpu_request(const GpuLaunchJob& job, std::string_view image,
                              const PreparedCall& call) {
  Message m;
  m.header = to_json(job);
  if (job.ptx_size || job.cubin_size) m.payload = std::string(image);
  for (const Buffer& b : call.buffers)
    m.payload += b.bytes;
  return m;
}

// The cubin the driver linked from a stage's PTX is kept in the disk tier
// beside it, under a cache key of the program's own (so deleting the program
// drops it) that no profile digest can give: the PTX's storage key and the
// device name it was linked on.
std::string cubin_key(const cache::StageOutput& so, const GpuHost& gpu) {
  return cache::cache_key(so.ik, "cubin " + so.storage_key + " " + gpu.gpus.front().name,
                          CompileMode::plain);
}

// The cached cubin, when the disk tier has an intact one from this compiler
// identity (a corrupt file is removed by the tier and counts as none).
std::shared_ptr<const cache::Entry> cached_cubin(ServiceState& s, const std::string& key,
                                                 const cache::StageOutput& so) {
  cache::DiskTier* disk = s.orch->disk_tier();
  if (disk == nullptr) return nullptr;
  cache::LoadResult r = disk->load(key, so.entry->info.compiler_identity);
  return r.status == cache::LoadStatus::hit ? r.entry : nullptr;
}

void keep_cubin(ServiceState& s, const std::string& key, const cache::StageOutput& so,
                std::string cubin) {
  cache::DiskTier* disk = s.orch->disk_tier();
  if (disk == nullptr) return;
  cache::Entry e;
  e.key = key;
  e.info = so.entry->info;
  e.info.ck = key;
  e.object = std::move(cubin);
  e.metadata = json{{"image", "cubin"}, {"of", so.storage_key}}.dump();
  if (Status st = disk->store(e); !st)
    log::warning("the cubin of " + so.storage_key + " was not kept: " + st.error().message());
}

} // namespace

Expected<json> execute_gpu(ServiceState& s, const json& params, const CallContext& ctx,
                           const ProgramRecord& prog, const Signature& sig) {
  if (!s.gpu.usable() || !s.gpu_pool)
    return make_error(Errc::unsupported,
                      "program " + prog.ik.substr(0, 12) +
                          " targets NVPTX and fdod runs no GPU programs here: " + s.gpu.reason);
  if (ctx.request_fds != nullptr && !ctx.request_fds->empty())
    return make_error(Errc::invalid_argument,
                      "memfd buffers are not taken for GPU kernels: send the bytes inline");
  std::shared_ptr<const Config> cfg = s.config.get();
  const Config& c = *cfg;
  CallLimits limits;
  limits.max_buffer_bytes = c.max_output_bytes / 2;
  json buffers_param = params.contains("buffers") ? params["buffers"] : json(nullptr);
  FDO_TRY(PreparedCall call,
          prepare_call(sig, params.value("args", json::array()), buffers_param, limits));
  FDO_TRY(bool return_buffers, optional_param<bool>(params, "return_buffers", false));
  FDO_TRY(BufferEncoding encoding, buffer_encoding_param(params));
  FDO_TRY(std::int64_t repeats, optional_param<std::int64_t>(params, "repeats", 1));
  if (repeats < 1 || repeats > 1000)
    return make_error(Errc::invalid_argument, "repeats must be 1..1000");
  FDO_TRY(std::uint64_t shared_bytes, optional_param<std::uint64_t>(params, "shared_bytes", 0));
  if (shared_bytes > (std::uint64_t{1} << 30))
    return make_error(Errc::invalid_argument, "shared_bytes is more than any GPU has");

  GpuLaunchJob job;
  job.driver = c.gpu_driver;
  job.kernel = sig.name;
  job.shared_bytes = static_cast<unsigned>(shared_bytes);
  job.repeats = static_cast<int>(repeats);
  job.return_buffers = return_buffers;
  job.time_limit_ms = static_cast<std::uint64_t>(c.gpu_kernel_timeout.count());
  job.cache_entries = c.exec_object_cache_entries;
  for (std::size_t i = 0; i < sig.params.size(); ++i) {
    if (sig.params[i] == ScalarType::ptr)
      job.args.push_back(gpu::KernelArg::buf(static_cast<std::uint32_t>(call.buffer_of_param[i])));
    else
      job.args.push_back(
          {gpu::KernelArg::Kind::scalar, call.slots[i], scalar_size(sig.params[i]), 0});
  }
  for (const Buffer& b : call.buffers)
    job.buffer_sizes.push_back(b.bytes.size());
  // The program's profile (known after its first stage): tuned launches and
  // the launch-bound trial (gpu_tuning.h). Read from the store's in-memory
  // view; a store that cannot be read leaves the stage untuned.
  const std::string arch = jit::sm_name(s.gpu.target->sm);
  std::optional<std::string> pk;
  profile_store::SharedProfile current;
  if (auto known = s.keys->lookup_profile_key(prog.ik); known && *known) {
    pk = **known;
    if (auto got = s.feedback_store->current(*pk))
      current = std::move(*got);
    else
      log::warning("GPU stage of program " + prog.ik.substr(0, 12) +
                   " runs without its profile: " + got.error().message());
  }
  const ProfileDoc* doc = current ? &current->doc : nullptr;
  // The launch: given, or tuned ("tune": {"items": n}) once per program,
  // kernel, size and GPU architecture, kept in the profile, then reused.
  std::string launch_source = "given";
  std::optional<std::uint64_t> tune_items;
  if (auto t = params.find("tune"); t != params.end() && !t->is_null()) {
    if (!t->is_object() || !t->contains("items") || !(*t)["items"].is_number_unsigned() ||
        (*t)["items"].get<std::uint64_t>() == 0)
      return make_error(Errc::invalid_argument,
                        "\"tune\" is {\"items\": n}: the elements a grid-stride kernel covers");
    tune_items = (*t)["items"].get<std::uint64_t>();
    if (const GpuLaunchRecord* known =
            doc ? find_launch(doc->gpu, arch, sig.name, *tune_items) : nullptr) {
      job.grid = launch_dims(known->chosen.grid);
      job.block = launch_dims(known->chosen.block);
      launch_source = "tuned earlier";
    } else {
      job.tune_items = tune_items;
      job.grid = {1};
      job.block = {1};
      launch_source = "tuned now";
      // The current build has the kernel's kept launch bounds: no block larger.
      if (const GpuKernelBounds* b = doc ? find_bounds(doc->gpu, arch, sig.name) : nullptr)
        job.tune_max_threads = b->max_threads;
    }
  } else {
    FDO_TRY(job.grid, dims_param(params, "grid"));
    FDO_TRY(job.block, dims_param(params, "block"));
  }
  if (std::chrono::steady_clock::now() >= ctx.deadline)
    return make_error(Errc::timeout, "request deadline passed before the stage started");

  const auto stage_started = std::chrono::steady_clock::now();
  // Which build: the current profile's, or a launch-bound trial's candidate,
  // or one without a kept bound this launch exceeds.
  GpuStagePlan plan;
  if (pk) {
    GpuStageShape shape{sig.name, job.grid, job.block, job.shared_bytes, job.buffer_sizes, {}};
    for (const gpu::KernelArg& a : job.args)
      if (a.kind == gpu::KernelArg::Kind::scalar) shape.scalars.push_back(a.bits);
    plan = s.gpu_tuner->plan(*pk, doc, current ? current->version : 0, arch, shape,
                             /*comparable=*/!job.tune_items, c.guard);
  }
  // No lifecycle: GPU programs are compiled without counts (docs/gpu.md says
  // why), and the cache serves them like any output.
  auto prepared = plan.variant ? s.orch->prepare(prog.program, cache::TierUp::sync, *plan.variant)
                               : s.orch->prepare(prog.program, cache::TierUp::sync);
  if (!prepared) {
    s.counters.tenants.prepare_failed(ctx.uid);
    return std::move(prepared).error().context("compile " + sig.name + " for the GPU");
  }
  cache::StageOutput& so = *prepared;
  const std::int64_t stage_number = prog.stages.fetch_add(1);
  ++s.counters.stages;
  s.counters.tenants.stage(ctx.uid, so.outcome, so.compile_ms);
  job.key = so.storage_key;

  std::optional<GpuLaunchReply> decoded;
  JobOptions options{gpu_job_limits(c), sandbox_tenant(prog.program.scope)};
  options.check_reply = [&](const Message& m) -> Status {
    FDO_TRY(GpuLaunchReply r, gpu_launch_reply_from_json(m.header));
    std::uint64_t total = r.cubin_size;
    for (std::uint64_t b : r.buffer_sizes)
      total += b;
    if (total != m.payload.size() || (return_buffers && r.outcome == GpuOutcome::ran &&
                                      r.buffer_sizes.size() != call.buffers.size()))
      return make_error(Errc::corrupt, "GPU worker's reply: buffers do not match its payload");
    decoded = std::move(r);
    return ok();
  };
  JobOutput output;
  Message resp;
  const auto started = std::chrono::steady_clock::now();
  // By key first; a worker that does not hold the module gets the cached
  // cubin, or the PTX (and links it to a cubin to keep); a cubin the driver
  // refuses is dropped for the PTX.
  const std::string cubin_at = cubin_key(so, s.gpu);
  std::shared_ptr<const cache::Entry> cubin;
  for (int attempt = 0;; ++attempt) {
    std::string_view image;
    if (attempt == 1) cubin = cached_cubin(s, cubin_at, so);
    if (attempt >= 1 && cubin) {
      job.cubin_size = cubin->object.size();
      image = cubin->object;
    } else if (attempt >= 1) {
      job.cubin_size.reset();
      job.ptx_size = so.entry->object.size();
      job.want_cubin = s.orch->disk_tier() != nullptr;
      image = so.entry->object;
    }
    FDO_TRY(Message req, gpu_request(job, image, call));
    decoded.reset();
    auto r = s.gpu_pool->run(req, options, &output);
    if (!r && job.cubin_size && r.error().code() == Errc::compile) {
      log::warning("the driver refused the cached cubin of " + so.storage_key +
                   ", loading its PTX: " + r.error().message());
      if (cache::DiskTier* disk = s.orch->disk_tier()) disk->evict_prefix(cubin_at);
      cubin.reset();
      continue;
    }
    if (!r) {
      ++s.counters.stage_failures;
      s.counters.tenants.stage_failed(ctx.uid);
      log::record(log::Level::info,
                  "GPU stage " + std::to_string(stage_number) + " of program " +
                      prog.ik.substr(0, 12) + " failed: " + r.error().message(),
                  {{"FDO_PROGRAM", prog.ik}, {"FDO_TENANT_UID", std::to_string(ctx.uid)}});
      return std::move(r).error().context("execute " + sig.name + " on the GPU");
    }
    if (!decoded)
      if (Status st = options.check_reply(*r); !st)
        return std::move(st).error().context("GPU worker sent a malformed reply");
    if (decoded->outcome == GpuOutcome::ran) {
      resp = std::move(*r);
      break;
    }
    if (attempt >= 1)
      return make_error(Errc::internal,
                        "GPU worker asked for the image of " + so.storage_key + " it was sent");
  }
  const double round_trip_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  GpuLaunchReply& reply = *decoded;
  if (reply.cubin_size > 0) keep_cubin(s, cubin_at, so, resp.payload.substr(0, reply.cubin_size));
  std::vector<double> sorted = reply.kernel_ms;
  std::sort(sorted.begin(), sorted.end());
  const double median_ms = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];

  // Feedback into the profile: a tuned launch, a trial's time. The client's
  // result stands whatever the store says; a failed write is reported.
  const GpuWriter writer{static_cast<std::int64_t>(ctx.uid), stage_number, prog.ik};
  json launch_json = {{"grid", dims_json(reply.ran.grid)},
                      {"block", dims_json(reply.ran.block)},
                      {"source", launch_source}};
  if (job.tune_items && !reply.tuned.empty()) {
    auto saved = s.gpu_tuner->remember_launch(
        so.pk, launch_record(arch, sig.name, *tune_items, reply, median_ms), writer);
    if (saved)
      launch_json["profile_version"] = *saved;
    else
      launch_json["not_saved"] = saved.error().message();
  }
  json trial_json = nullptr;
  if (plan.wants_profile)
    if (auto started = s.gpu_tuner->start_profile(so.pk, writer); !started)
      log::warning("GPU program " + prog.ik.substr(0, 12) +
                   " gets no launch-bound trial: its profile could not be written: " +
                   started.error().message());
  if (plan.build != GpuBuild::current || plan.trial) {
    trial_json = {{"build", to_string(plan.build)}, {"bounds", describe(plan.bounds)}};
    if (plan.trial) {
      trial_json["arm"] = to_string(plan.arm);
      auto progress = s.gpu_tuner->record(so.pk, plan, median_ms, c.guard, writer);
      if (!progress) {
        trial_json["not_saved"] = progress.error().message();
      } else {
        trial_json["pairs"] = progress->result.pairs;
        trial_json["verdict"] = to_string(progress->result.verdict);
        trial_json["ratio"] = progress->result.ratio;
        if (progress->written_version) trial_json["profile_version"] = progress->written_version;
      }
    }
  }
  json gpu_stage = {{"device", s.gpu.gpus.front().name},
                    {"arch", jit::sm_name(s.gpu.target->sm)},
                    {"kernel_ms", reply.kernel_ms},
                    {"median_ms", median_ms},
                    {"launch", std::move(launch_json)},
                    {"registers", reply.attributes.registers},
                    {"local_bytes", reply.attributes.local_bytes},
                    {"module_loaded", reply.module_loaded},
                    {"image", reply.image == gpu::ImageKind::cubin ? "cubin" : "ptx"},
                    {"load_ms", reply.load_ms},
                    {"round_trip_ms", round_trip_ms}};
  if (!reply.jit_log.empty()) gpu_stage["jit_log"] = reply.jit_log;
  if (!trial_json.is_null()) gpu_stage["trial"] = std::move(trial_json);
  if (!reply.tuned.empty()) {
    json tuned = json::array();
    for (const auto& [config, ms] : reply.tuned)
      tuned.push_back({{"grid", dims_json(config.grid)},
                       {"block", dims_json(config.block)},
                       {"median_ms", ms}});
    gpu_stage["tuned"] = std::move(tuned);
    gpu_stage["tune_launches"] = reply.tune_launches;
  }
  const auto exec_ns = static_cast<std::uint64_t>(median_ms * 1e6);
  s.orch->record_execution(so.ik, so.explain_sequence, exec_ns);
  json stage = {{"number", stage_number},
                {"program", so.ik},
                {"profile_key", so.pk},
                {"cache_key", so.ck},
                {"storage_key", so.storage_key},
                {"profile_version", so.profile_version},
                {"mode", "plain"},
                {"target", "nvptx"},
                {"cache", cache_outcome_json(so)},
                {"recompiled", so.compiled},
                {"compile_ms", so.compile_ms},
                {"exec_ns", exec_ns},
                {"gpu", std::move(gpu_stage)}};
  json result = {{"entry", sig.name}, {"returns", "void"}, {"value", nullptr}};
  if (return_buffers) {
    json out = json::array();
    std::size_t at = reply.cubin_size;
    for (std::size_t i = 0; i < reply.buffer_sizes.size(); ++i) {
      Buffer b{call.buffers[i].elem, resp.payload.substr(at, reply.buffer_sizes[i])};
      at += reply.buffer_sizes[i];
      out.push_back(buffer_to_json(b, encoding));
    }
    result["buffers"] = std::move(out);
  }
  result["output"] = output_json(output);
  result["stage"] = std::move(stage);
  s.metrics->stage_finished(
      cache::to_string(so.outcome),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_started).count(),
      so.compiled ? so.compile_ms : 0.0, static_cast<double>(exec_ns) / 1e9, false);
  return result;
}

} // namespace fdo::daemon::methods
