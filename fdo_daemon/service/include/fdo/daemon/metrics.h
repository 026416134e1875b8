// fdod's metrics, one set for both ways out: the `metrics` JSON-RPC method
// and the Prometheus HTTP endpoint (`metrics_listen`) serialise the same
// registry (prometheus-cpp). Event metrics (histograms of stage, compile and
// exec latency; stages per cache outcome; policy decisions) are recorded as
// stages finish; the service's running totals (cache, tier-up, workers) are
// read at scrape time from their owners through `live`, so no figure has two
// sources. Names and labels: docs/fdod.md, "Metrics".
#pragma once

#include <functional>
#include <memory>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

class ServiceMetrics {
public:
  using Live = std::function<std::vector<prometheus::MetricFamily>()>;
  explicit ServiceMetrics(Live live);

  // A stage that ran: its cache outcome, latencies (compile_ms 0 = nothing
  // compiled for it) and whether the policy rewrote the profile.
  void stage_finished(std::string_view cache_outcome, double stage_seconds, double compile_ms,
                      double exec_seconds, bool rewrote);

  // Everything, in the Prometheus text exposition format.
  std::string text() const;
  // For the HTTP exposer (which holds weak references).
  std::shared_ptr<prometheus::Collectable> collectable() const { return all_; }

private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> all_; // registry_ + live figures
  prometheus::Family<prometheus::Counter>* outcomes_;
  prometheus::Family<prometheus::Counter>* decisions_;
  prometheus::Histogram* stage_seconds_;
  prometheus::Histogram* compile_seconds_;
  prometheus::Histogram* exec_seconds_;
};

// A family of one sample per label set, for `live` sources.
prometheus::MetricFamily metric_family(std::string name, std::string help,
                                       prometheus::MetricType type,
                                       std::vector<std::pair<std::string, double>> by_label = {},
                                       std::string label_name = "");

} // namespace fdo::daemon
