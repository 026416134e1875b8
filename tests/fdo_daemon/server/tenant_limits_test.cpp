// TenantLimits alone: per-uid quotas of connections and in-flight requests.
#include "fdo/daemon/tenant_limits.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

using namespace fdo::daemon;

TEST_CASE("tenant limits: a uid gets up to its quota - then a named refusal", "[tenant_limits]") {
  TenantLimits limits({/*max_connections=*/2, /*max_inflight=*/3});
  auto a = limits.acquire(1000, TenantResource::connection);
  auto b = limits.acquire(1000, TenantResource::connection);
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  REQUIRE(a->held());
  REQUIRE(a->uid() == 1000);
  REQUIRE(a->resource() == TenantResource::connection);
  REQUIRE(limits.held(1000, TenantResource::connection) == 2);

  auto c = limits.acquire(1000, TenantResource::connection);
  REQUIRE_FALSE(c.has_value());
  REQUIRE(c.error().code() == fdo::Errc::resource_exhausted);
  REQUIRE_THAT(c.error().message(), Catch::Contains("uid 1000"));
  REQUIRE_THAT(c.error().message(), Catch::Contains("max_connections_per_uid = 2"));
  REQUIRE(limits.held(1000, TenantResource::connection) == 2);

  // The two resources are counted apart, and other uids have their own.
  std::vector<TenantLimits::Lease> inflight;
  for (int i = 0; i < 3; ++i) {
    auto l = limits.acquire(1000, TenantResource::inflight_request);
    REQUIRE(l.has_value());
    inflight.push_back(std::move(*l));
  }
  auto over = limits.acquire(1000, TenantResource::inflight_request);
  REQUIRE_FALSE(over.has_value());
  REQUIRE_THAT(over.error().message(), Catch::Contains("max_inflight_per_uid = 3"));
  REQUIRE(limits.acquire(0, TenantResource::connection).has_value());
  REQUIRE(limits.acquire(1001, TenantResource::inflight_request).has_value());
  REQUIRE(limit_key(TenantResource::connection) == "max_connections_per_uid");
  REQUIRE(limit_key(TenantResource::inflight_request) == "max_inflight_per_uid");
}

TEST_CASE("tenant limits: leases give their unit back - moved ones once", "[tenant_limits]") {
  TenantLimits limits({1, 1});
  {
    auto a = limits.acquire(7, TenantResource::connection);
    REQUIRE(a.has_value());
    TenantLimits::Lease moved = std::move(*a);
    REQUIRE_FALSE(a->held());
    REQUIRE(moved.held());
    REQUIRE(limits.held(7, TenantResource::connection) == 1);
    TenantLimits::Lease assigned;
    assigned = std::move(moved);
    REQUIRE(limits.held(7, TenantResource::connection) == 1);
    REQUIRE_FALSE(limits.acquire(7, TenantResource::connection).has_value());
  }
  REQUIRE(limits.held(7, TenantResource::connection) == 0);
  REQUIRE(limits.tenants() == 0);

  auto b = limits.acquire(7, TenantResource::connection);
  REQUIRE(b.has_value());
  b->reset();
  REQUIRE_FALSE(b->held());
  b->reset(); // a second reset gives nothing back twice
  REQUIRE(limits.held(7, TenantResource::connection) == 0);

  // Assigning over a held lease gives the old unit back.
  auto c = limits.acquire(7, TenantResource::connection);
  auto d = limits.acquire(8, TenantResource::connection);
  REQUIRE(c.has_value());
  REQUIRE(d.has_value());
  *c = std::move(*d);
  REQUIRE(limits.held(7, TenantResource::connection) == 0);
  REQUIRE(limits.held(8, TenantResource::connection) == 1);
}

TEST_CASE("tenant limits: a new quota applies to the next acquisition", "[tenant_limits]") {
  TenantLimits limits({2, 2});
  auto a = limits.acquire(5, TenantResource::inflight_request);
  auto b = limits.acquire(5, TenantResource::inflight_request);
  REQUIRE(b.has_value());
  REQUIRE_FALSE(limits.acquire(5, TenantResource::inflight_request).has_value());

  limits.set_quota({2, 3});
  REQUIRE(limits.quota().max_inflight == 3);
  auto c = limits.acquire(5, TenantResource::inflight_request);
  REQUIRE(c.has_value());

  // Lowered below what is held: nothing is taken away, nothing new is given
  // until enough has come back.
  limits.set_quota({2, 1});
  auto refused = limits.acquire(5, TenantResource::inflight_request);
  REQUIRE_FALSE(refused.has_value());
  REQUIRE_THAT(refused.error().message(), Catch::Contains("already has 3"));
  a->reset();
  b->reset();
  REQUIRE_FALSE(limits.acquire(5, TenantResource::inflight_request).has_value());
  c->reset();
  REQUIRE(limits.acquire(5, TenantResource::inflight_request).has_value());

  // 0 = no limit, and what is held is still counted for a later limit.
  limits.set_quota({0, 0});
  std::vector<TenantLimits::Lease> many;
  for (int i = 0; i < 100; ++i)
    many.push_back(std::move(*limits.acquire(5, TenantResource::connection)));
  REQUIRE(limits.held(5, TenantResource::connection) == 100);
  limits.set_quota({100, 0});
  REQUIRE_FALSE(limits.acquire(5, TenantResource::connection).has_value());
}

TEST_CASE("tenant limits: concurrent acquire and release never exceed the quota",
          "[tenant_limits]") {
  constexpr unsigned kQuota = 4;
  TenantLimits limits({kQuota, kQuota});
  std::atomic<unsigned> holding{0};
  std::atomic<unsigned> most{0};
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto l = limits.acquire(42, TenantResource::inflight_request);
        if (!l) continue;
        ++granted;
        unsigned now = ++holding;
        unsigned prev = most.load();
        while (now > prev && !most.compare_exchange_weak(prev, now)) {
        }
        --holding;
      }
    });
  for (auto& th : threads)
    th.join();
  REQUIRE(granted > 0);
  REQUIRE(most <= kQuota);
  REQUIRE(limits.held(42, TenantResource::inflight_request) == 0);
  REQUIRE(limits.tenants() == 0);
}

TEST_CASE("tenant limits: bytes held per uid stay within max_buffered_bytes", "[tenant_limits]") {
  TenantLimits limits({0, 0, 1000});
  using A = TenantLimits::Admission;
  REQUIRE(limits.charge_bytes(7, 600, A::check));
  REQUIRE(limits.charge_bytes(7, 400, A::check)); // exactly the budget
  auto over = limits.charge_bytes(7, 1, A::check);
  REQUIRE_FALSE(over);
  CHECK(over.error().code() == fdo::Errc::resource_exhausted);
  CHECK(over.error().message().find("max_buffered_bytes_per_uid (1000)") != std::string::npos);
  CHECK(limits.bytes_held(7) == 1000); // a refusal charges nothing
  // Another uid has a budget of its own.
  REQUIRE(limits.charge_bytes(8, 1000, A::check));
  // A reply is kept whatever it costs; it counts against later reads.
  REQUIRE(limits.charge_bytes(7, 50, A::always));
  CHECK(limits.bytes_held(7) == 1050);
  limits.release_bytes(7, 500);
  REQUIRE(limits.charge_bytes(7, 400, A::check));
  limits.release_bytes(7, 5000); // never below zero
  limits.release_bytes(8, 1000);
  CHECK(limits.bytes_held(7) == 0);
  CHECK(limits.tenants() == 0); // nothing held: the entries go
}
