// GPU worker jobs (gpu_jobs.h).
#include "fdo/daemon/gpu_jobs.h"

#include <algorithm>
#include <chrono>
#include <list>

namespace fdo::daemon {

using nlohmann::json;

namespace {

json dim_json(const gpu::Dim3& d) {
  return json::array({d.x, d.y, d.z});
}

json config_json(const gpu::LaunchConfig& c) {
  return {{"grid", dim_json(c.grid)}, {"block", dim_json(c.block)}};
}

Expected<gpu::LaunchConfig> config_from(const json& j) {
  if (!j.is_object()) return make_error(Errc::invalid_argument, "a launch config is an object");
  FDO_TRY(gpu::Dim3 g, dims_from_json(j.value("grid", json()), "grid"));
  FDO_TRY(gpu::Dim3 b, dims_from_json(j.value("block", json()), "block"));
  return gpu::LaunchConfig{g, b};
}

template <class T> Expected<T> field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return make_error(Errc::invalid_argument, std::string("lacks '") + key + "'");
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return make_error(Errc::invalid_argument, std::string("'") + key + "' has the wrong type");
  }
}

} // namespace

Expected<gpu::Dim3> dims_from_json(const json& j, const char* what) {
  if (!j.is_array() || j.empty() || j.size() > 3)
    return make_error(Errc::invalid_argument, std::string(what) + " must be 1 to 3 numbers");
  unsigned v[3] = {1, 1, 1};
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_unsigned() || j[i].get<std::uint64_t>() == 0 ||
        j[i].get<std::uint64_t>() > 0x7fffffffu)
      return make_error(Errc::invalid_argument,
                        std::string(what) + " dimensions must be 1..2147483647");
    v[i] = j[i].get<unsigned>();
  }
  return gpu::Dim3{v[0], v[1], v[2]};
}

json to_json(const GpuLaunchJob& job) {
  json args = json::array();
  for (const gpu::KernelArg& a : job.args)
    args.push_back(a.kind == gpu::KernelArg::Kind::buffer
                       ? json{{"buffer", a.buffer}}
                       : json{{"bits", a.bits}, {"size", a.size}});
  json j = {{"op", "gpu_launch"},
            {"driver", job.driver},
            {"key", job.key},
            {"kernel", job.kernel},
            {"grid", dim_json(job.grid)},
            {"block", dim_json(job.block)},
            {"shared_bytes", job.shared_bytes},
            {"args", std::move(args)},
            {"buffer_sizes", job.buffer_sizes},
            {"return_buffers", job.return_buffers},
            {"repeats", job.repeats},
            {"time_limit_ms", job.time_limit_ms},
            {"cache_entries", job.cache_entries}};
  if (job.ptx_size) j["ptx_size"] = *job.ptx_size;
  if (job.cubin_size) j["cubin_size"] = *job.cubin_size;
  if (job.want_cubin) j["want_cubin"] = true;
  if (job.tune_items) j["tune_items"] = *job.tune_items;
  if (job.tune_max_threads) j["tune_max_threads"] = job.tune_max_threads;
  return j;
}

Expected<GpuLaunchJob> gpu_launch_job_from_json(const json& j) {
  GpuLaunchJob job;
  FDO_TRY(job.driver, field<std::string>(j, "driver"));
  FDO_TRY(job.key, field<std::string>(j, "key"));
  FDO_TRY(job.kernel, field<std::string>(j, "kernel"));
  FDO_TRY(job.grid, dims_from_json(j.value("grid", json()), "grid"));
  FDO_TRY(job.block, dims_from_json(j.value("block", json()), "block"));
  FDO_TRY(job.shared_bytes, field<unsigned>(j, "shared_bytes"));
  FDO_TRY(job.buffer_sizes, field<std::vector<std::uint64_t>>(j, "buffer_sizes"));
  FDO_TRY(job.return_buffers, field<bool>(j, "return_buffers"));
  FDO_TRY(job.repeats, field<int>(j, "repeats"));
  FDO_TRY(job.time_limit_ms, field<std::uint64_t>(j, "time_limit_ms"));
  FDO_TRY(job.cache_entries, field<std::uint64_t>(j, "cache_entries"));
  if (j.contains("ptx_size")) {
    FDO_TRY(job.ptx_size, field<std::uint64_t>(j, "ptx_size"));
  }
  if (j.contains("cubin_size")) {
    FDO_TRY(job.cubin_size, field<std::uint64_t>(j, "cubin_size"));
  }
  if (job.ptx_size && job.cubin_size)
    return make_error(Errc::invalid_argument, "a GPU job carries PTX or a cubin, not both");
  if (j.contains("want_cubin")) {
    FDO_TRY(job.want_cubin, field<bool>(j, "want_cubin"));
  }
  if (j.contains("tune_items")) {
    FDO_TRY(job.tune_items, field<std::uint64_t>(j, "tune_items"));
  }
  if (j.contains("tune_max_threads")) {
    FDO_TRY(job.tune_max_threads, field<int>(j, "tune_max_threads"));
    if (job.tune_max_threads < 0 || job.tune_max_threads > 1024)
      return make_error(Errc::invalid_argument, "tune_max_threads must be 0..1024");
  }
  FDO_TRY(json args, field<json>(j, "args"));
  if (!args.is_array()) return make_error(Errc::invalid_argument, "'args' must be an array");
  for (const json& a : args) {
    if (a.contains("buffer")) {
      FDO_TRY(std::uint32_t index, field<std::uint32_t>(a, "buffer"));
      if (index >= job.buffer_sizes.size())
        return make_error(Errc::invalid_argument, "an argument names a buffer the job lacks");
      job.args.push_back(gpu::KernelArg::buf(index));
    } else {
      gpu::KernelArg k;
      FDO_TRY(k.bits, field<std::uint64_t>(a, "bits"));
      FDO_TRY(k.size, field<std::uint32_t>(a, "size"));
      if (k.size == 0 || k.size > 8)
        return make_error(Errc::invalid_argument, "a scalar argument is 1 to 8 bytes");
      job.args.push_back(k);
    }
  }
  if (job.repeats < 1 || job.repeats > 1000)
    return make_error(Errc::invalid_argument, "repeats must be 1..1000");
  return job;
}

json to_json(const GpuLaunchReply& r) {
  json tuned = json::array();
  for (const auto& [config, ms] : r.tuned) {
    json c = config_json(config);
    c["median_ms"] = ms;
    tuned.push_back(std::move(c));
  }
  return {{"outcome", r.outcome == GpuOutcome::ran ? "ran" : "missing_image"},
          {"kernel_ms", r.kernel_ms},
          {"copy_in_ns", r.copy_in_ns},
          {"copy_out_ns", r.copy_out_ns},
          {"registers", r.attributes.registers},
          {"local_bytes", r.attributes.local_bytes},
          {"static_shared_bytes", r.attributes.static_shared_bytes},
          {"max_threads_per_block", r.attributes.max_threads_per_block},
          {"module_loaded", r.module_loaded},
          {"image", r.image == gpu::ImageKind::cubin ? "cubin" : "ptx"},
          {"cubin_size", r.cubin_size},
          {"load_ms", r.load_ms},
          {"jit_log", r.jit_log},
          {"ran", config_json(r.ran)},
          {"tuned", std::move(tuned)},
          {"tune_launches", r.tune_launches},
          {"buffer_sizes", r.buffer_sizes}};
}

Expected<GpuLaunchReply> gpu_launch_reply_from_json(const json& j) {
  GpuLaunchReply r;
  FDO_TRY(std::string outcome, field<std::string>(j, "outcome"));
  if (outcome == "missing_image") {
    r.outcome = GpuOutcome::missing_image;
    return r;
  }
  if (outcome != "ran") return make_error(Errc::corrupt, "GPU reply: unknown outcome");
  FDO_TRY(r.kernel_ms, field<std::vector<double>>(j, "kernel_ms"));
  FDO_TRY(r.copy_in_ns, field<std::uint64_t>(j, "copy_in_ns"));
  FDO_TRY(r.copy_out_ns, field<std::uint64_t>(j, "copy_out_ns"));
  FDO_TRY(r.attributes.registers, field<int>(j, "registers"));
  FDO_TRY(r.attributes.local_bytes, field<int>(j, "local_bytes"));
  FDO_TRY(r.attributes.static_shared_bytes, field<int>(j, "static_shared_bytes"));
  FDO_TRY(r.attributes.max_threads_per_block, field<int>(j, "max_threads_per_block"));
  FDO_TRY(r.module_loaded, field<bool>(j, "module_loaded"));
  FDO_TRY(std::string image, field<std::string>(j, "image"));
  if (image != "ptx" && image != "cubin")
    return make_error(Errc::corrupt, "GPU reply: unknown image kind");
  r.image = image == "cubin" ? gpu::ImageKind::cubin : gpu::ImageKind::ptx;
  FDO_TRY(r.cubin_size, field<std::uint64_t>(j, "cubin_size"));
  FDO_TRY(r.load_ms, field<double>(j, "load_ms"));
  FDO_TRY(r.jit_log, field<std::string>(j, "jit_log"));
  FDO_TRY(json ran, field<json>(j, "ran"));
  FDO_TRY(r.ran, config_from(ran));
  FDO_TRY(json tuned, field<json>(j, "tuned"));
  if (!tuned.is_array()) return make_error(Errc::corrupt, "GPU reply: 'tuned' is not an array");
  for (const json& t : tuned) {
    FDO_TRY(gpu::LaunchConfig c, config_from(t));
    FDO_TRY(double ms, field<double>(t, "median_ms"));
    r.tuned.emplace_back(c, ms);
  }
  FDO_TRY(r.tune_launches, field<int>(j, "tune_launches"));
  FDO_TRY(r.buffer_sizes, field<std::vector<std::uint64_t>>(j, "buffer_sizes"));
  for (double ms : r.kernel_ms)
    if (!(ms >= 0) || ms > 1e9)
      return make_error(Errc::corrupt, "GPU reply: a kernel time is out of range");
  return r;
}

struct GpuJobs::State {
  DriverLoader load;
  std::unique_ptr<gpu::Driver> driver;
  std::string driver_path;
  std::unique_ptr<gpu::Session> session;
  // Loaded modules by storage key, most recent first.
  std::list<std::pair<std::string, std::shared_ptr<gpu::Module>>> modules;

  Status open(const std::string& path) {
    if (session) {
      if (path != driver_path)
        return make_error(Errc::invalid_argument,
                          "this GPU worker runs " + driver_path + ", not " + path);
      return ok();
    }
    FDO_TRY(driver, load(path));
    driver_path = path;
    FDO_TRY(session, gpu::Session::open(*driver, 0));
    return ok();
  }

  std::shared_ptr<gpu::Module> find(const std::string& key) {
    for (auto it = modules.begin(); it != modules.end(); ++it)
      if (it->first == key) {
        modules.splice(modules.begin(), modules, it);
        return it->second;
      }
    return nullptr;
  }
};

GpuJobs::GpuJobs(DriverLoader load) : state_(std::make_unique<State>()) {
  state_->load = std::move(load);
}
GpuJobs::~GpuJobs() {
  if (state_) state_->modules.clear(); // modules before their session
}

bool GpuJobs::broken() const {
  return state_->session && state_->session->broken();
}

Expected<Message> GpuJobs::handle(const Message& request) {
  State& s = *state_;
  auto op = request.header.find("op");
  if (op == request.header.end() || !op->is_string())
    return make_error(Errc::invalid_argument, "GPU job without an op");
  if (*op == "gpu_probe") {
    FDO_TRY(std::string path, field<std::string>(request.header, "driver"));
    FDO_TRY_STATUS(s.open(path));
    FDO_TRY(std::vector<gpu::GpuInfo> gpus, gpu::probe(*s.driver));
    json list = json::array();
    for (const gpu::GpuInfo& g : gpus)
      list.push_back(gpu::to_json(g));
    Message out;
    out.header = {{"gpus", std::move(list)}};
    return out;
  }
  if (*op != "gpu_launch")
    return make_error(Errc::invalid_argument, "GPU worker: unknown op '" + op->dump() + "'");
  FDO_TRY(GpuLaunchJob job, gpu_launch_job_from_json(request.header));
  FDO_TRY_STATUS(s.open(job.driver));
  std::string_view payload = request.payload;
  const std::uint64_t image_size = job.ptx_size.value_or(job.cubin_size.value_or(0));
  std::uint64_t total = image_size;
  for (std::uint64_t b : job.buffer_sizes)
    total += b;
  if (total != payload.size())
    return make_error(Errc::invalid_argument, "GPU job: the payload holds " +
                                                  std::to_string(payload.size()) +
                                                  " bytes, the job says " + std::to_string(total));
  GpuLaunchReply reply;
  std::string cubin; // linked from the PTX for fdod to cache (want_cubin)
  std::shared_ptr<gpu::Module> module = s.find(job.key);
  if (!module) {
    if (!job.ptx_size && !job.cubin_size) {
      reply.outcome = GpuOutcome::missing_image;
      Message out;
      out.header = to_json(reply);
      return out;
    }
    const auto t = std::chrono::steady_clock::now();
    const std::string_view image = payload.substr(0, image_size);
    if (job.cubin_size) {
      FDO_TRY(module, s.session->load(image, gpu::ImageKind::cubin));
      reply.image = gpu::ImageKind::cubin;
    } else if (job.want_cubin) {
      // One JIT compile: the PTX linked to a cubin, which is what is loaded
      // and what goes back to be cached.
      FDO_TRY(cubin, s.session->link_cubin(image, &reply.jit_log));
      FDO_TRY(module, s.session->load(cubin, gpu::ImageKind::cubin));
      reply.cubin_size = cubin.size();
    } else {
      FDO_TRY(module, s.session->load(image, gpu::ImageKind::ptx));
      reply.jit_log = module->log();
    }
    reply.load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    reply.module_loaded = true;
    if (job.cache_entries > 0) {
      s.modules.emplace_front(job.key, module);
      while (s.modules.size() > job.cache_entries)
        s.modules.pop_back();
    }
  }
  std::vector<std::string> buffers;
  std::size_t at = image_size;
  for (std::uint64_t b : job.buffer_sizes) {
    buffers.emplace_back(payload.substr(at, b));
    at += b;
  }
  FDO_TRY(gpu::DeviceBuffers device, s.session->upload(buffers));
  gpu::LaunchSpec spec;
  spec.kernel = job.kernel;
  spec.grid = job.grid;
  spec.block = job.block;
  spec.shared_bytes = job.shared_bytes;
  spec.args = job.args;
  spec.repeats = job.repeats;
  spec.time_limit = std::chrono::milliseconds(job.time_limit_ms);
  if (job.tune_items) {
    int max_threads = s.session->info().max_threads_per_block;
    if (max_threads <= 0) max_threads = 1024;
    if (job.tune_max_threads > 0) max_threads = std::min(max_threads, job.tune_max_threads);
    auto candidates = gpu::grid_stride_candidates(*job.tune_items, s.session->info(), max_threads);
    auto time = [&](const gpu::LaunchConfig& c) -> Expected<double> {
      gpu::LaunchSpec one = spec;
      one.grid = c.grid;
      one.block = c.block;
      one.repeats = 1;
      FDO_TRY(gpu::LaunchResult r, s.session->launch(*module, one, device));
      return r.kernel_ms.front();
    };
    FDO_TRY(gpu::TuneResult t, gpu::tune(candidates, time));
    for (const gpu::CandidateTimes& c : t.candidates)
      reply.tuned.emplace_back(c.config, gpu::median(c.ms));
    reply.tune_launches = t.launches;
    spec.grid = t.best.grid;
    spec.block = t.best.block;
    // The tuning launches ran on these buffers: the measured launch starts
    // from the job's bytes again.
    FDO_TRY(device, s.session->upload(buffers));
  }
  FDO_TRY(gpu::LaunchResult r, s.session->launch(*module, spec, device));
  reply.kernel_ms = std::move(r.kernel_ms);
  reply.attributes = r.attributes;
  reply.ran = {spec.grid, spec.block};
  Message out;
  out.payload = std::move(cubin);
  if (job.return_buffers) {
    FDO_TRY_STATUS(s.session->download(device, buffers));
    for (const std::string& b : buffers) {
      reply.buffer_sizes.push_back(b.size());
      out.payload += b;
    }
  }
  out.header = to_json(reply);
  return out;
}

} // namespace fdo::daemon
