#include "fdo/daemon/metrics.h"

#include "fdo/version.h"

#include <prometheus/gauge.h>
#include <prometheus/text_serializer.h>

namespace fdo::daemon {
namespace {

// The registry's metrics followed by the live ones, as one collectable.
class Combined final : public prometheus::Collectable {
public:
  Combined(std::shared_ptr<prometheus::Registry> registry, ServiceMetrics::Live live)
      : registry_(std::move(registry)), live_(std::move(live)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out = registry_->Collect();
    if (live_)
      for (auto& f : live_())
        out.push_back(std::move(f));
    return out;
  }

private:
  std::shared_ptr<prometheus::Registry> registry_;
  ServiceMetrics::Live live_;
};

prometheus::Histogram::BucketBoundaries seconds_buckets(double first, int count) {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = first; count-- > 0; v *= 4)
    b.push_back(v);
  return b;
}

} // namespace

ServiceMetrics::ServiceMetrics(Live live) : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::BuildGauge()
      .Name("fdo_build_info")
      .Help("fdod's version and the LLVM it was built with; always 1.")
      .Register(*registry_)
      .Add({{"version", std::string(kVersion)}, {"llvm_version", std::string(kLlvmBuildVersion)}})
      .Set(1);
  outcomes_ = &prometheus::BuildCounter()
                   .Name("fdo_stage_cache_outcomes_total")
                   .Help("Stages by where their code came from (memory_hit, disk_hit, remote_hit, "
                         "compiled, joined, tier_up_pending).")
                   .Register(*registry_);
  decisions_ = &prometheus::BuildCounter()
                    .Name("fdo_policy_decisions_total")
                    .Help("Feedback policy decisions after a stage: rewrite or keep the profile.")
                    .Register(*registry_);
  stage_seconds_ = &prometheus::BuildHistogram()
                        .Name("fdo_stage_duration_seconds")
                        .Help("Wall time of an execute request's stage: cache lookup, compile "
                              "if any, execution and feedback.")
                        .Register(*registry_)
                        .Add({}, seconds_buckets(0.0005, 11));
  compile_seconds_ = &prometheus::BuildHistogram()
                          .Name("fdo_compile_duration_seconds")
                          .Help("Compile time of stages that compiled.")
                          .Register(*registry_)
                          .Add({}, seconds_buckets(0.005, 9));
  exec_seconds_ = &prometheus::BuildHistogram()
                       .Name("fdo_exec_duration_seconds")
                       .Help("Execution time of a program's entry in an exec worker.")
                       .Register(*registry_)
                       .Add({}, seconds_buckets(0.00001, 12));
  // Every outcome and decision from the start, so rates work from zero.
  for (const char* o :
       {"memory_hit", "disk_hit", "remote_hit", "compiled", "joined", "tier_up_pending"})
    outcomes_->Add({{"outcome", o}});
  for (const char* d : {"rewrite", "keep"})
    decisions_->Add({{"decision", d}});
  all_ = std::make_shared<Combined>(registry_, std::move(live));
}

void ServiceMetrics::stage_finished(std::string_view cache_outcome, double stage_seconds,
                                    double compile_ms, double exec_seconds, bool rewrote) {
  outcomes_->Add({{"outcome", std::string(cache_outcome)}}).Increment();
  decisions_->Add({{"decision", rewrote ? "rewrite" : "keep"}}).Increment();
  stage_seconds_->Observe(stage_seconds);
  if (compile_ms > 0) compile_seconds_->Observe(compile_ms / 1000.0);
  exec_seconds_->Observe(exec_seconds);
}

std::string ServiceMetrics::text() const {
  return prometheus::TextSerializer().Serialize(all_->Collect());
}

prometheus::MetricFamily metric_family(std::string name, std::string help,
                                       prometheus::MetricType type,
                                       std::vector<std::pair<std::string, double>> by_label,
                                       std::string label_name) {
  prometheus::MetricFamily f{std::move(name), std::move(help), type, {}};
  for (auto& [label, value] : by_label) {
    prometheus::ClientMetric m;
    if (!label_name.empty()) m.label.push_back({label_name, label});
    if (type == prometheus::MetricType::Counter)
      m.counter.value = value;
    else
      m.gauge.value = value;
    f.metric.push_back(std::move(m));
  }
  return f;
}

} // namespace fdo::daemon
