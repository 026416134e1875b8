// The remote object tier on Redis (hiredis). Each entry is one Redis string
// holding the disk tier's checksummed encoding (encode_entry), under
// "<key_prefix><storage key>"; the storage key embeds the IK and so the
// compiler identity, and the identity inside the entry is checked again on
// read. Lookups take a pooled connection (no lock held during I/O), each
// connect and command bounded by `timeout`; a failure marks the server down
// and lookups answer "unavailable" at once until a backoff (doubling from
// retry_min to retry_max) has passed, when one lookup probes it again.
// Writes go through a bounded queue to one writer thread, so a compile never
// waits for Redis. docs/fleet.md describes deployment and failure behaviour.
#pragma once

#include "fdo/cache/remote_tier.h"
#include "fdo/util/expected.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace fdo::cache {

// Where the server is: redis://HOST[:PORT] (TCP, port 6379 by default) or
// unix:PATH (a Unix socket).
struct RedisEndpoint {
  enum class Kind { tcp, unix_socket };
  Kind kind = Kind::tcp;
  std::string host; // tcp
  int port = 6379;  // tcp
  std::string path; // unix_socket
  std::string text; // as given
};
// invalid_argument naming what is wrong with `url`.
Expected<RedisEndpoint> parse_redis_endpoint(std::string_view url);

struct RedisTierConfig {
  RedisEndpoint endpoint;
  std::chrono::milliseconds timeout{100};                  // each connect and each command
  std::uint64_t max_entry_bytes = std::uint64_t(64) << 20; // encoded size
  std::chrono::milliseconds retry_min{250};
  std::chrono::milliseconds retry_max{30000};
  std::uint64_t write_queue_bytes = std::uint64_t(256) << 20; // fuller: writes are dropped
  std::string key_prefix = "fdo:obj:";
  unsigned max_idle_connections = 8;
};

class RedisTier final : public RemoteTier {
public:
  // Does not connect: the first lookup or write does (fdod starts whether or
  // not Redis is up). invalid_argument for a bad configuration.
  static Expected<std::unique_ptr<RedisTier>> create(RedisTierConfig config);
  ~RedisTier() override; // attempts queued writes for at most one timeout, then stops
  RedisTier(const RedisTier&) = delete;
  RedisTier& operator=(const RedisTier&) = delete;

  RemoteFetch fetch(const std::string& key, const std::string& expected_identity) override;
  void store(std::shared_ptr<const Entry> entry) override;
  void flush() override;
  RemoteTierStats stats() const override;

  // The Redis key an entry is stored under (tests corrupt entries through it).
  std::string redis_key(const std::string& storage_key) const;

  struct Impl;

private:
  explicit RedisTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace fdo::cache
