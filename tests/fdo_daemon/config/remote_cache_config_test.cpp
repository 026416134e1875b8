// The remote object tier's keys (object_cache_remote*): accepted spellings,
// and a bad value refused naming the key and what is wrong.
#include "fdo/daemon/config.h"

#include <catch2/catch.hpp>

using namespace fdo::daemon;
using std::chrono::milliseconds;

TEST_CASE("config: object_cache_remote keys - defaults - spellings - bad values", "[config]") {
  Config d = Config::defaults();
  CHECK(d.object_cache_remote.empty());
  CHECK(d.object_cache_remote_timeout == milliseconds(100));
  CHECK(d.object_cache_remote_max_entry_bytes == 64u << 20);

  auto c = Config::parse("object_cache_remote = redis://10.1.2.3:6380\n"
                         "object_cache_remote_timeout_ms = 25\n"
                         "object_cache_remote_max_entry_bytes = 1048576\n",
                         "test");
  REQUIRE(c);
  CHECK(c->object_cache_remote == "redis://10.1.2.3:6380");
  CHECK(c->object_cache_remote_timeout == milliseconds(25));
  CHECK(c->object_cache_remote_max_entry_bytes == 1048576);
  CHECK(c->get("object_cache_remote") == "redis://10.1.2.3:6380");
  REQUIRE(Config::parse("object_cache_remote = unix:/run/redis/redis.sock\n", "test"));
  REQUIRE(Config::parse("object_cache_remote =\n", "test"));

  for (const char* text :
       {"object_cache_remote = memcached://h\n", "object_cache_remote = unix:redis.sock\n",
        "object_cache_remote = redis://h:99999\n", "object_cache_remote_timeout_ms = 0\n",
        "object_cache_remote_max_entry_bytes = 10\n"}) {
    INFO(text);
    auto bad = Config::parse(text, "test");
    REQUIRE_FALSE(bad);
    std::string key(text, std::string_view(text).find(' '));
    CHECK_THAT(bad.error().message(), Catch::Contains(key));
  }
  auto why = Config::parse("object_cache_remote = rediss://h\n", "test");
  REQUIRE_FALSE(why);
  CHECK_THAT(why.error().message(), Catch::Contains("TLS"));
}
