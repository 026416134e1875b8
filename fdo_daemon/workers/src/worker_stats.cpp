// What a pool reports about itself, as names and JSON (health, cache.stats
// and metrics read these).
#include "fdo/daemon/worker_stats.h"

#include "fdo/util/enum_names.h"

namespace fdo::daemon {

namespace {
constexpr EnumNames<WorkerState, 4> kWorkerStateNames{{{{WorkerState::starting, "starting"},
                                                        {WorkerState::idle, "idle"},
                                                        {WorkerState::busy, "busy"},
                                                        {WorkerState::dead, "dead"}}}};
} // namespace

std::string_view to_string(WorkerState s) {
  return kWorkerStateNames.name(s);
}

std::uint64_t FailureCounts::total() const {
  return handler_error + timeout + cpu_limit + crashed + memory + exited + output_too_large +
         protocol + queue_full + queue_timeout + unavailable;
}

nlohmann::json to_json(const PoolStats& s) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& w : s.workers) {
    nlohmann::json j = {{"slot", w.slot},
                        {"pid", static_cast<long>(w.pid)},
                        {"state", std::string(to_string(w.state))},
                        {"jobs", w.jobs},
                        {"bound", w.bound},
                        {"tenant", w.tenant},
                        {"consecutive_spawn_failures", w.consecutive_spawn_failures}};
    if (!w.last_spawn_error.empty()) j["last_spawn_error"] = w.last_spawn_error;
    workers.push_back(std::move(j));
  }
  const auto& f = s.failures;
  return {{"name", s.name},
          {"size", s.size},
          {"live", s.live},
          {"waiting", s.waiting},
          {"jobs", s.jobs},
          {"succeeded", s.succeeded},
          {"failures",
           {{"total", f.total()},
            {"handler_error", f.handler_error},
            {"timeout", f.timeout},
            {"cpu_limit", f.cpu_limit},
            {"crashed", f.crashed},
            {"memory", f.memory},
            {"exited", f.exited},
            {"output_too_large", f.output_too_large},
            {"protocol", f.protocol},
            {"queue_full", f.queue_full},
            {"queue_timeout", f.queue_timeout},
            {"unavailable", f.unavailable}}},
          {"restarts", s.restarts},
          {"spawn_failures", s.spawn_failures},
          {"idle_deaths", s.idle_deaths},
          {"retired", s.retired},
          {"recycled", s.recycled},
          {"program_exits", s.program_exits},
          {"background_stops", s.background_stops},
          {"preemptions", s.preemptions},
          {"promotions", s.promotions},
          {"workers", std::move(workers)}};
}

} // namespace fdo::daemon
