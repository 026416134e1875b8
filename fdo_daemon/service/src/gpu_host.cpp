// The host's GPU (gpu_host.h).
#include "fdo/daemon/gpu_host.h"

#include "fdo/daemon/isolation.h"
#include "fdo/daemon/job_runner.h"
#include "fdo/util/log.h"

namespace fdo::daemon {

nlohmann::json to_json(const GpuHost& h) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const gpu::GpuInfo& g : h.gpus)
    gpus.push_back(gpu::to_json(g));
  nlohmann::json j = {{"available", h.usable()}, {"gpus", std::move(gpus)}};
  if (h.usable()) {
    j["arch"] = jit::sm_name(h.target->sm);
    j["driver_version"] = h.target->driver_version;
    j["identity"] = h.identity;
  } else {
    j["reason"] = h.reason;
  }
  return j;
}

bool gpu_wanted(const Config& c) {
  if (c.gpu == GpuUse::off) return false;
  if (c.gpu == GpuUse::on) return true;
  return !gpu_device_nodes().empty();
}

JobLimits gpu_job_limits(const Config& c) {
  JobLimits l;
  // Room for the driver's JIT of the PTX and a tuning run's launches beside
  // the launch itself, each bounded by gpu_kernel_timeout_ms in the worker.
  l.wall = c.exec_timeout + 4 * c.gpu_kernel_timeout;
  l.address_space_bytes = 0; // the driver reserves the address space it needs
  l.max_output_bytes = c.max_output_bytes;
  return l;
}

GpuHost no_gpu(std::string reason) {
  GpuHost h;
  h.reason = std::move(reason);
  return h;
}

GpuHost probe_gpu_host(const Config& c, JobRunner& pool) {
  Message req;
  req.header = {{"op", "gpu_probe"}, {"driver", c.gpu_driver}};
  auto r = pool.run(req, JobOptions{gpu_job_limits(c), "", AfterJob::retire}, nullptr);
  if (!r) return no_gpu("the GPU probe failed: " + r.error().describe());
  GpuHost h;
  const auto list = r->header.find("gpus");
  if (list == r->header.end() || !list->is_array())
    return no_gpu("the GPU worker's probe reply has no GPU list");
  for (const nlohmann::json& g : *list) {
    gpu::GpuInfo info;
    try {
      info.ordinal = g.at("ordinal").get<int>();
      info.name = g.at("name").get<std::string>();
      info.sm = g.at("sm").get<int>();
      info.driver_version = g.at("driver_version").get<int>();
      info.memory_bytes = g.at("memory_bytes").get<std::uint64_t>();
      info.multiprocessors = g.at("multiprocessors").get<int>();
      info.max_threads_per_block = g.at("max_threads_per_block").get<int>();
      info.max_shared_bytes_per_block = g.at("max_shared_bytes_per_block").get<int>();
    } catch (const nlohmann::json::exception& e) {
      return no_gpu(std::string("the GPU worker's probe reply is malformed: ") + e.what());
    }
    h.gpus.push_back(std::move(info));
  }
  if (h.gpus.empty()) {
    h.reason = "the NVIDIA driver sees no GPU";
    return h;
  }
  const jit::GpuTarget target{h.gpus[0].sm, h.gpus[0].driver_version};
  auto id = jit::gpu_identity(target);
  if (!id) {
    h.reason = id.error().message();
    return h;
  }
  h.target = target;
  h.identity = id->canonical();
  return h;
}

} // namespace fdo::daemon
