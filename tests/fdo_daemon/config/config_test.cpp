#include "fdo/daemon/config.h"
#include "fdo/util/fd.h"
#include "support/temp_dir.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace fdo::daemon;
using std::chrono::milliseconds;

namespace {

std::string error_of(const fdo::Expected<Config>& c) {
  REQUIRE_FALSE(c.has_value());
  return c.error().message();
}

struct TempDir : fdo::test_support::TempDir {
  TempDir() : fdo::test_support::TempDir("fdo-config-test") {}
};

} // namespace

TEST_CASE("config: defaults match the documented values", "[config]") {
  Config c = Config::defaults();
  REQUIRE(c.socket == "/run/fdod/fdod.sock");
  REQUIRE(c.state_dir == "/var/lib/fdod");
  REQUIRE(c.log_level == fdo::log::Level::info);
  REQUIRE(c.max_request_bytes == 16777216);
  REQUIRE(c.request_timeout == milliseconds(120000));
  REQUIRE(c.handler_threads == 0);
  REQUIRE(c.effective_handler_threads() >= 4);
  REQUIRE(c.drain_timeout == milliseconds(30000));
  REQUIRE(c.compile_workers == 2);
  REQUIRE(c.compile_nice == 10);
  REQUIRE(c.exec_workers == 2);
  REQUIRE(c.compile_timeout == milliseconds(60000));
  REQUIRE(c.exec_timeout == milliseconds(10000));
  REQUIRE(c.compile_memory_mb == 2048);
  REQUIRE(c.exec_memory_mb == 1024);
  REQUIRE(c.max_output_bytes == 67108864);
  REQUIRE(c.max_program_bytes == 33554432);
  REQUIRE(c.memory_cache_bytes == 268435456);
  REQUIRE(c.disk_cache_bytes == 1073741824);
  REQUIRE(c.tier_up == TierUp::async);
  REQUIRE_FALSE(c.share_profiles_across_tenants);
  REQUIRE(c.profile_retention == 50);
  REQUIRE(c.feedback_flush == milliseconds(1000));
  REQUIRE(c.get("perf_events") ==
          "instructions,cycles,branch-instructions,branch-misses,L1-icache-load-misses,"
          "iTLB-load-misses");
  REQUIRE(c.policy.min_stages == 3);
  REQUIRE(c.policy.min_counts == 1000);
  REQUIRE(c.policy.drift_threshold == 0.10);
  REQUIRE(c.policy.max_recompiles_per_hour == 12);
  REQUIRE(c.policy.branch_miss_unpredictable_rate == 0.20);
  REQUIRE(c.get("policy.drift_threshold") == "0.1");
}

TEST_CASE("config: a file with comments - blank lines and every kind of value", "[config]") {
  const char* text = R"(# fdod configuration
socket = /tmp/x/fdod.sock

   # indented comment
state_dir=/srv/fdod
log_level = debug
max_request_bytes = 2048
request_timeout_ms = 500
handler_threads = 6
tier_up = sync
share_profiles_across_tenants = yes
perf_events = cycles , instructions,branch-misses
policy.drift_threshold = 0.25
policy.min_stages = 5
policy.min_counts = 18446744073709551615
)";
  auto c = Config::parse(text, "test.conf");
  REQUIRE(c.has_value());
  REQUIRE(c->socket == "/tmp/x/fdod.sock");
  REQUIRE(c->state_dir == "/srv/fdod");
  REQUIRE(c->log_level == fdo::log::Level::debug);
  REQUIRE(c->max_request_bytes == 2048);
  REQUIRE(c->request_timeout == milliseconds(500));
  REQUIRE(c->handler_threads == 6);
  REQUIRE(c->effective_handler_threads() == 6);
  REQUIRE(c->tier_up == TierUp::sync);
  REQUIRE(c->share_profiles_across_tenants);
  REQUIRE(c->perf_events == std::vector<std::string>{"cycles", "instructions", "branch-misses"});
  REQUIRE(c->policy.drift_threshold == 0.25);
  REQUIRE(c->policy.min_stages == 5);
  REQUIRE(c->policy.min_counts == 18446744073709551615ull);
  // Untouched keys keep their defaults.
  REQUIRE(c->exec_workers == 2);
  // An empty perf_events list is allowed (count nothing).
  auto none = Config::parse("perf_events =\n", "t");
  REQUIRE(none.has_value());
  REQUIRE(none->perf_events.empty());
}

TEST_CASE("config: sampling keys and the drift policy keys", "[config]") {
  Config d = Config::defaults();
  CHECK(d.get("sampling.events") == "cpu-clock,branch-misses,L1-icache-load-misses");
  CHECK(d.get("sampling.frequency_hz") == "250");
  CHECK(d.get("policy.time_share_drift_threshold") == "0.3");
  auto c = Config::parse("sampling.events = task-clock , branch-misses\n"
                         "sampling.frequency_hz = 0\n"
                         "sampling.max_samples = 250\n"
                         "policy.time_share_drift_threshold = 0.5\n"
                         "policy.time_share_window_stages = 6\n"
                         "policy.time_share_min_samples = 400\n",
                         "t");
  REQUIRE(c.has_value());
  CHECK(c->sampling.events == std::vector<std::string>{"task-clock", "branch-misses"});
  CHECK(c->sampling.frequency_hz == 0); // sampling off
  CHECK(c->sampling.max_samples == 250);
  CHECK(c->policy.time_share_drift_threshold == 0.5);
  CHECK(c->policy.time_share_window_stages == 6);
  CHECK(c->policy.time_share_min_samples == 400);
  // Printed and read back unchanged, like every key.
  auto again = Config::parse(c->to_text(), "t");
  REQUIRE(again.has_value());
  CHECK(again->sampling.events == c->sampling.events);
  CHECK(again->policy.time_share_min_samples == 400);
}

TEST_CASE("config: errors name the file - the line and the key", "[config]") {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"socket = /a\nbogus_key = 1\n", "f.conf:2: unknown key 'bogus_key'"},
      {"\n\nmax_request_bytes = lots\n", "f.conf:3: bad value for 'max_request_bytes': 'lots'"},
      {"max_request_bytes = 10\n", "f.conf:1: bad value for 'max_request_bytes': '10' (expected "
                                   "an integer from 1024 to 1073741824)"},
      {"request_timeout_ms = -5\n", "f.conf:1: bad value for 'request_timeout_ms'"},
      {"request_timeout_ms = 0\n", "f.conf:1: bad value for 'request_timeout_ms'"},
      {"compile_workers = 99999999999999999999999\n", "f.conf:1: bad value for 'compile_workers'"},
      {"compile_nice = 20\n", "f.conf:1: bad value for 'compile_nice'"},
      {"policy.drift_threshold = 1.5\n", "f.conf:1: bad value for 'policy.drift_threshold'"},
      {"policy.drift_threshold = nan\n", "f.conf:1: bad value for 'policy.drift_threshold'"},
      {"tier_up = later\n", "f.conf:1: bad value for 'tier_up': 'later' (expected async or sync)"},
      {"log_level = loud\n", "f.conf:1: bad value for 'log_level'"},
      {"log_level = info # inline comments are not comments\n",
       "f.conf:1: bad value for 'log_level'"},
      {"share_profiles_across_tenants = maybe\n", "bad value for 'share_profiles_across_tenants'"},
      {"perf_events = cycles,,instructions\n", "f.conf:1: bad value for 'perf_events'"},
      {"perf_events = cycles,cycles\n", "'cycles' repeats"},
      {"sampling.events =\n", "at least one event name"},
      {"sampling.events = cpu-clock,cpu-clock\n", "'cpu-clock' repeats"},
      {"sampling.frequency_hz = 1000000\n", "bad value for 'sampling.frequency_hz'"},
      {"sampling.max_samples = 0\n", "bad value for 'sampling.max_samples'"},
      {"policy.time_share_drift_threshold = 2\n",
       "bad value for 'policy.time_share_drift_threshold'"},
      {"policy.time_share_window_stages = 0\n", "bad value for 'policy.time_share_window_stages'"},
      {"socket =\n", "f.conf:1: bad value for 'socket'"},
      {"just some words\n", "f.conf:1: expected 'key = value'"},
      {"= 5\n", "f.conf:1: missing key"},
      {"exec_workers = 3\n#\nexec_workers = 4\n",
       "f.conf:3: key 'exec_workers' already set on line 1"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto r = Config::parse(c.text, "f.conf");
    REQUIRE_FALSE(r.has_value());
    REQUIRE(r.error().code() == fdo::Errc::invalid_argument);
    REQUIRE_THAT(r.error().message(), Catch::Contains(c.needle));
  }
  std::string long_socket = "socket = /" + std::string(200, 's') + "\n";
  REQUIRE_THAT(error_of(Config::parse(long_socket, "f.conf")),
               Catch::Contains("at most 107 bytes"));
}

TEST_CASE("config: load reads a file - a missing file is a clear error", "[config]") {
  TempDir dir;
  std::string path = dir.file("fdod.conf");
  auto missing = Config::load(path);
  REQUIRE_FALSE(missing.has_value());
  REQUIRE(missing.error().code() == fdo::Errc::not_found);
  REQUIRE_THAT(missing.error().message(), Catch::Contains(path));

  REQUIRE(fdo::write_file_atomic(path, "exec_workers = 7\n", fdo::Durability::none));
  auto c = Config::load(path);
  REQUIRE(c.has_value());
  REQUIRE(c->exec_workers == 7);

  REQUIRE(fdo::write_file_atomic(path, "exec_workers = seven\n", fdo::Durability::none));
  REQUIRE_THAT(error_of(Config::load(path)),
               Catch::Contains(path + ":1: bad value for 'exec_workers'"));
}

TEST_CASE("config: command-line overrides win over the file", "[config]") {
  ConfigOverrides ov = {{"socket", "/tmp/cli.sock"}, {"log_level", "warning"}};
  auto c = Config::parse("socket = /tmp/file.sock\nlog_level = debug\nexec_workers = 3\n", "f", ov);
  REQUIRE(c.has_value());
  REQUIRE(c->socket == "/tmp/cli.sock");
  REQUIRE(c->log_level == fdo::log::Level::warning);
  REQUIRE(c->exec_workers == 3);

  auto bad = Config::parse("", "f", {{"log_level", "loud"}});
  REQUIRE_THAT(error_of(bad), Catch::Contains("command line: bad value for 'log_level'"));
  auto unknown = Config::parse("", "f", {{"sockets", "/x"}});
  REQUIRE_THAT(error_of(unknown), Catch::Contains("command line: unknown key 'sockets'"));

  Config d = Config::defaults();
  REQUIRE(d.apply_overrides({{"state_dir", "/tmp/state"}}));
  REQUIRE(d.state_dir == "/tmp/state");
  REQUIRE(d.set("policy.max_recompiles_per_hour", " 0 "));
  REQUIRE(d.policy.max_recompiles_per_hour == 0);
}

TEST_CASE("config: to_text round-trips through parse", "[config]") {
  Config c = Config::defaults();
  REQUIRE(c.set("tier_up", "sync"));
  REQUIRE(c.set("policy.drift_threshold", "0.3333333333333333"));
  REQUIRE(c.set("perf_events", "cycles"));
  REQUIRE(c.set("share_profiles_across_tenants", "on"));
  auto back = Config::parse(c.to_text(), "roundtrip");
  REQUIRE(back.has_value());
  REQUIRE(back->to_text() == c.to_text());
  REQUIRE(back->policy.drift_threshold == c.policy.drift_threshold);
  for (const ConfigKeyInfo& k : Config::keys())
    REQUIRE(Config::defaults().get(k.name) == k.default_value);
}

TEST_CASE("config: SIGHUP reload applies runtime keys and keeps restart-only ones", "[config]") {
  TempDir dir;
  std::string path = dir.file("fdod.conf");
  REQUIRE(fdo::write_file_atomic(path, "socket = /tmp/a.sock\nrequest_timeout_ms = 1000\n",
                                 fdo::Durability::none));
  auto running = Config::load(path);
  REQUIRE(running.has_value());

  REQUIRE(fdo::write_file_atomic(path,
                                 "socket = /tmp/b.sock\nrequest_timeout_ms = 2000\n"
                                 "state_dir = /tmp/other\npolicy.min_stages = 9\n",
                                 fdo::Durability::none));
  auto r = reload_config(*running, path);
  REQUIRE(r.has_value());
  REQUIRE(r->config.request_timeout == milliseconds(2000));
  REQUIRE(r->config.policy.min_stages == 9);
  REQUIRE(r->config.socket == "/tmp/a.sock");
  REQUIRE(r->config.state_dir == "/var/lib/fdod");
  REQUIRE(r->applied == std::vector<std::string>{"request_timeout_ms: 1000 -> 2000",
                                                 "policy.min_stages: 3 -> 9"});
  REQUIRE(r->ignored == std::vector<std::string>{"socket: /tmp/a.sock -> /tmp/b.sock",
                                                 "state_dir: /var/lib/fdod -> /tmp/other"});

  // Overrides from the command line still win after a reload.
  auto r2 = reload_config(*running, path, {{"request_timeout_ms", "1000"}});
  REQUIRE(r2.has_value());
  REQUIRE(r2->config.request_timeout == milliseconds(1000));

  // A broken file changes nothing and says why.
  REQUIRE(fdo::write_file_atomic(path, "request_timeout_ms = soon\n", fdo::Durability::none));
  auto bad = reload_config(*running, path);
  REQUIRE_FALSE(bad.has_value());
  REQUIRE_THAT(bad.error().message(), Catch::Contains(path + ":1"));
}

TEST_CASE("config: docs/fdod-config.md documents every key with its default", "[config]") {
  std::ifstream in(std::string(FDO_SOURCE_DIR) + "/docs/fdod-config.md");
  REQUIRE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  for (const ConfigKeyInfo& k : Config::keys()) {
    INFO(k.name);
    std::string prefix = "| `" + k.name + "` |";
    auto it = std::find_if(lines.begin(), lines.end(),
                           [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
    REQUIRE(it != lines.end());
    REQUIRE_THAT(*it, Catch::Contains("| `" + k.default_value + "` |"));
    REQUIRE_THAT(*it,
                 Catch::Contains(k.reload == ReloadBehavior::runtime ? "| yes |" : "| restart |"));
  }
}

TEST_CASE("config: connection and tenant keys - defaults - reload classes", "[config]") {
  Config c = Config::defaults();
  REQUIRE(c.control_threads == 2);
  REQUIRE(c.max_connections_per_uid == 64);
  REQUIRE(c.max_inflight_per_uid == 16);
  REQUIRE(c.read_timeout == milliseconds(30000));
  REQUIRE(c.idle_timeout == milliseconds(600000));
  REQUIRE(c.write_timeout == milliseconds(30000));
  REQUIRE(c.max_unsent_bytes == 4194304);

  auto parsed = Config::parse("control_threads = 3\nmax_connections_per_uid = 5\n"
                              "max_inflight_per_uid = 0\nread_timeout_ms = 250\n"
                              "idle_timeout_ms = 1000\nwrite_timeout_ms = 750\n"
                              "max_unsent_bytes = 0\n",
                              "test");
  REQUIRE(parsed.has_value());
  REQUIRE(parsed->control_threads == 3);
  REQUIRE(parsed->max_connections_per_uid == 5);
  REQUIRE(parsed->max_inflight_per_uid == 0);
  REQUIRE(parsed->read_timeout == milliseconds(250));
  REQUIRE(parsed->idle_timeout == milliseconds(1000));
  REQUIRE(parsed->write_timeout == milliseconds(750));
  REQUIRE(parsed->max_unsent_bytes == 0);

  REQUIRE_FALSE(Config::parse("control_threads = 0\n", "test").has_value());
  REQUIRE_FALSE(Config::parse("read_timeout_ms = 0\n", "test").has_value());
  REQUIRE_FALSE(Config::parse("write_timeout_ms = soon\n", "test").has_value());

  // The limits and deadlines change on SIGHUP; the control pool's size does not.
  Config next = *parsed;
  Config merged = with_runtime_keys(Config::defaults(), next);
  REQUIRE(merged.control_threads == 2);
  REQUIRE(merged.max_connections_per_uid == 5);
  REQUIRE(merged.max_inflight_per_uid == 0);
  REQUIRE(merged.read_timeout == milliseconds(250));
  REQUIRE(merged.idle_timeout == milliseconds(1000));
  REQUIRE(merged.write_timeout == milliseconds(750));
  REQUIRE(merged.max_unsent_bytes == 0);
}

TEST_CASE("config: compile_background_max_stopped_ms - default - range - restart", "[config]") {
  CHECK(Config::defaults().compile_background_max_stopped == std::chrono::milliseconds(30000));
  auto off = Config::parse("compile_background_max_stopped_ms = 0\n", "t");
  REQUIRE(off);
  CHECK(off->compile_background_max_stopped == std::chrono::milliseconds(0));
  auto set = Config::parse("compile_background_max_stopped_ms = 2500\n", "t");
  REQUIRE(set);
  CHECK(set->compile_background_max_stopped == std::chrono::milliseconds(2500));
  CHECK_THAT(error_of(Config::parse("compile_background_max_stopped_ms = -1\n", "f.conf")),
             Catch::Contains("compile_background_max_stopped_ms"));
  auto key = std::find_if(Config::keys().begin(), Config::keys().end(), [](const ConfigKeyInfo& k) {
    return k.name == "compile_background_max_stopped_ms";
  });
  REQUIRE(key != Config::keys().end());
  CHECK(key->reload == ReloadBehavior::restart);
}

TEST_CASE("config: guard.checkpoint_pairs - default - range - reload", "[config][guard]") {
  CHECK(Config::defaults().guard.checkpoint_pairs == 4);
  auto off = Config::parse("guard.checkpoint_pairs = 0\n", "t");
  REQUIRE(off);
  CHECK(off->guard.checkpoint_pairs == 0);
  CHECK_THAT(error_of(Config::parse("guard.checkpoint_pairs = -1\n", "f.conf")),
             Catch::Contains("guard.checkpoint_pairs"));
  CHECK_THAT(error_of(Config::parse("guard.checkpoint_pairs = 10001\n", "f.conf")),
             Catch::Contains("guard.checkpoint_pairs"));
  auto key = std::find_if(Config::keys().begin(), Config::keys().end(), [](const ConfigKeyInfo& k) {
    return k.name == "guard.checkpoint_pairs";
  });
  REQUIRE(key != Config::keys().end());
  CHECK(key->reload == ReloadBehavior::runtime);
}

TEST_CASE("config: policy.cs_pgo_stages - default - bounds - runtime reload", "[config][cs]") {
  Config d = Config::defaults();
  CHECK(d.policy.cs_pgo_stages == 2);
  CHECK(d.get("policy.cs_pgo_stages") == "2");
  auto c = Config::parse("policy.cs_pgo_stages = 2\n", "t");
  REQUIRE(c.has_value());
  CHECK(c->policy.cs_pgo_stages == 2);
  for (const char* bad : {"policy.cs_pgo_stages = -1\n", "policy.cs_pgo_stages = two\n",
                          "policy.cs_pgo_stages = 1000001\n"}) {
    INFO(bad);
    auto r = Config::parse(bad, "t");
    REQUIRE_FALSE(r.has_value());
    CHECK_THAT(r.error().message(), Catch::Contains("policy.cs_pgo_stages"));
  }
  TempDir dir;
  std::string path = dir.file("fdod.conf");
  REQUIRE(fdo::write_file_atomic(path, "policy.cs_pgo_stages = 0\n", fdo::Durability::none));
  auto running = Config::load(path);
  REQUIRE(running.has_value());
  REQUIRE(fdo::write_file_atomic(path, "policy.cs_pgo_stages = 3\n", fdo::Durability::none));
  auto r = reload_config(*running, path);
  REQUIRE(r.has_value());
  CHECK(r->config.policy.cs_pgo_stages == 3);
  CHECK(r->applied == std::vector<std::string>{"policy.cs_pgo_stages: 0 -> 3"});
}

TEST_CASE("config: profile_store, host_name and the spool cap", "[config][fleet]") {
  Config d = Config::defaults();
  REQUIRE(d.profile_store == "sqlite");
  REQUIRE(d.host_name.empty());
  REQUIRE(d.profile_store_spool_max_bytes == 256u << 20);

  auto parsed = Config::parse("profile_store = postgresql://fdo:s3cret@db.example:5432/fdo\n"
                              "host_name = host-a\nprofile_store_spool_max_bytes = 2097152\n",
                              "test");
  REQUIRE(parsed.has_value());
  REQUIRE(parsed->profile_store == "postgresql://fdo:s3cret@db.example:5432/fdo");
  REQUIRE(parsed->host_name == "host-a");
  REQUIRE(parsed->profile_store_spool_max_bytes == 2097152);
  // Shown to people without the password.
  REQUIRE(parsed->get_shown("profile_store") == "postgresql://fdo:***@db.example:5432/fdo");
  REQUIRE(parsed->get_shown("host_name") == "host-a");
  REQUIRE(Config::parse("profile_store = postgres://db/fdo?sslmode=disable&password=pw\n", "t")
              ->get_shown("profile_store") == "postgres://db/fdo?sslmode=disable&password=***");
  REQUIRE(Config::parse("profile_store = sqlite\n", "t")->profile_store == "sqlite");
  // Restart-only: a reload keeps the running store and name.
  Config merged = with_runtime_keys(Config::defaults(), *parsed);
  REQUIRE(merged.profile_store == "sqlite");
  REQUIRE(merged.host_name.empty());

  for (const char* bad : {"profile_store = mysql://db/fdo\n", "profile_store = /var/lib/x.db\n",
                          "profile_store = postgresql://db/fdo x\n", "host_name = two words\n",
                          "profile_store_spool_max_bytes = 10\n"}) {
    auto e = Config::parse(bad, "test");
    INFO(bad);
    REQUIRE_FALSE(e.has_value());
    REQUIRE(e.error().code() == fdo::Errc::invalid_argument);
  }
  // A refused URI's password is not repeated in the error.
  auto e = Config::parse("profile_store = postgresql://u:hunter2@db/f o\n", "test");
  REQUIRE_FALSE(e.has_value());
  REQUIRE(e.error().message().find("hunter2") == std::string::npos);
  REQUIRE(e.error().message().find("profile_store") != std::string::npos);
}

TEST_CASE("config: guard.clock - default cpu - cpu or wall - reload", "[config][guard]") {
  CHECK(Config::defaults().guard.clock == GuardClock::cpu);
  CHECK(Config::defaults().get("guard.clock") == "cpu");
  auto wall = Config::parse("guard.clock = wall\n", "t");
  REQUIRE(wall);
  CHECK(wall->guard.clock == GuardClock::wall);
  CHECK(wall->get("guard.clock") == "wall");
  for (const char* bad : {"guard.clock = monotonic\n", "guard.clock = 1\n", "guard.clock = CPU\n"})
    CHECK_THAT(error_of(Config::parse(bad, "f.conf")),
               Catch::Contains("guard.clock") && Catch::Contains("cpu or wall"));
  auto key = std::find_if(Config::keys().begin(), Config::keys().end(),
                          [](const ConfigKeyInfo& k) { return k.name == "guard.clock"; });
  REQUIRE(key != Config::keys().end());
  CHECK(key->reload == ReloadBehavior::runtime);
}

TEST_CASE("config: guard.keep_alpha and guard.reject_alpha - defaults - range - reload",
          "[config][guard]") {
  const TrialConfig defaults = Config::defaults().guard.trial;
  CHECK(defaults.keep_alpha == 0.05);
  CHECK(defaults.reject_alpha == 0.05);
  CHECK(defaults.min_pairs == 10);
  CHECK(defaults.max_pairs == 64);
  CHECK(Config::defaults().get("guard.keep_alpha") == "0.05");
  auto set = Config::parse("guard.keep_alpha = 0.01\nguard.reject_alpha = 0.1\n", "t");
  REQUIRE(set);
  CHECK(set->guard.trial.keep_alpha == 0.01);
  CHECK(set->guard.trial.reject_alpha == 0.1);
  for (const char* bad :
       {"guard.keep_alpha = 0\n", "guard.keep_alpha = 0.6\n", "guard.reject_alpha = x\n"})
    CHECK_THAT(error_of(Config::parse(bad, "f.conf")), Catch::Contains("_alpha"));
  for (const char* name : {"guard.keep_alpha", "guard.reject_alpha"}) {
    auto key = std::find_if(Config::keys().begin(), Config::keys().end(),
                            [&](const ConfigKeyInfo& k) { return k.name == name; });
    REQUIRE(key != Config::keys().end());
    CHECK(key->reload == ReloadBehavior::runtime);
  }
}

TEST_CASE("config: the guard's retired test keys parse, are ignored and warned about",
          "[config][guard]") {
  // guard.accept_z, reject_z, rank_p and early_margin set the tests the
  // sequential test replaced: a configuration that still sets them starts.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  fdo::log::set_output_fd(fds[1]);
  auto c = Config::parse("guard.accept_z = 3.1\nguard.reject_z = 2.5\nguard.rank_p = 0.004\n"
                         "guard.early_margin = 0.2\n",
                         "old.conf");
  fdo::log::set_output_fd(STDERR_FILENO);
  ::close(fds[1]);
  std::string logged;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    logged.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  REQUIRE(c);
  CHECK(c->guard.trial.keep_alpha == Config::defaults().guard.trial.keep_alpha);
  CHECK_THAT(logged, Catch::Contains("old.conf:1: 'guard.accept_z' is retired and ignored") &&
                         Catch::Contains("old.conf:4: 'guard.early_margin' is retired"));
  // They are not keys any more: not listed, not printed.
  for (const char* name :
       {"guard.accept_z", "guard.reject_z", "guard.rank_p", "guard.early_margin"}) {
    CHECK(std::none_of(Config::keys().begin(), Config::keys().end(),
                       [&](const ConfigKeyInfo& k) { return k.name == name; }));
    CHECK(Config::defaults().get(name).empty());
  }
  // A key that never existed is still an error.
  CHECK_THAT(error_of(Config::parse("guard.accept = 1\n", "f.conf")),
             Catch::Contains("unknown key 'guard.accept'"));
}
