// Where fdod's configuration comes from (load_config), what --print-config
// prints and the installed sample configuration (docs/fdod-config.md,
// "Sources").
#include "fdo/daemon/config.h"
#include "fdo/util/fd.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>
#include <map>
#include <sstream>

using namespace fdo::daemon;

namespace {
struct TempDir : fdo::test_support::TempDir {
  TempDir() : fdo::test_support::TempDir("fdo-config-source-test") {}
};

std::map<std::string, std::string> origins_of(const LoadedConfig& l) {
  return {l.origins.begin(), l.origins.end()};
}
} // namespace

TEST_CASE("config source: an explicitly given missing file is an error naming it", "[config]") {
  TempDir dir;
  std::string missing = dir.file("nope.conf");
  auto l = load_config({missing, dir.file("default.conf"), false});
  REQUIRE_FALSE(l.has_value());
  REQUIRE(l.error().code() == fdo::Errc::not_found);
  REQUIRE_THAT(l.error().message(), Catch::Contains(missing) && Catch::Contains("does not exist") &&
                                        Catch::Contains("--config"));
}

TEST_CASE("config source: a missing default file means the built-in defaults", "[config]") {
  TempDir dir;
  ConfigSource source{"", dir.file("fdod.conf"), false};
  REQUIRE(config_file_for(source).empty());
  auto l = load_config(source, {{"socket", "/tmp/x.sock"}});
  REQUIRE(l.has_value());
  REQUIRE(l->file.empty());
  REQUIRE(l->config.socket == "/tmp/x.sock");
  REQUIRE(l->config.exec_workers == Config::defaults().exec_workers);
  auto o = origins_of(*l);
  REQUIRE(o.size() == Config::keys().size());
  REQUIRE(o["socket"] == "command line");
  REQUIRE(o["exec_workers"] == "default");

  // Once it exists, the default file is read (and is what SIGHUP re-reads).
  REQUIRE(fdo::write_file_atomic(source.default_path, "# c\n\nexec_workers = 5\n",
                                 fdo::Durability::none));
  REQUIRE(config_file_for(source) == source.default_path);
  auto again = load_config(source);
  REQUIRE(again.has_value());
  REQUIRE(again->file == source.default_path);
  REQUIRE(again->config.exec_workers == 5);
  REQUIRE(origins_of(*again)["exec_workers"] == source.default_path + ":3");

  // --no-config reads no file even where the default exists.
  auto none = load_config({"", source.default_path, true});
  REQUIRE(none.has_value());
  REQUIRE(none->file.empty());
  REQUIRE(none->config.exec_workers == Config::defaults().exec_workers);
}

TEST_CASE("config source: a bad default file is an error, not silently defaults", "[config]") {
  TempDir dir;
  std::string path = dir.file("fdod.conf");
  REQUIRE(fdo::write_file_atomic(path, "exec_workers = many\n", fdo::Durability::none));
  auto l = load_config({"", path, false});
  REQUIRE_FALSE(l.has_value());
  REQUIRE_THAT(l.error().message(), Catch::Contains(path + ":1: bad value for 'exec_workers'"));
}

TEST_CASE("config source: print_config says where each value came from and reads back",
          "[config]") {
  TempDir dir;
  std::string path = dir.file("fdod.conf");
  REQUIRE(
      fdo::write_file_atomic(path, "tier_up = sync\nlog_level = debug\n", fdo::Durability::none));
  auto l = load_config({path, "/nonexistent/default.conf", false}, {{"log_level", "error"}});
  REQUIRE(l.has_value());
  std::string text = print_config(*l);
  REQUIRE_THAT(text, Catch::Contains("file: " + path));
  REQUIRE_THAT(text, Catch::Contains("# from " + path + ":1\ntier_up = sync\n"));
  REQUIRE_THAT(text, Catch::Contains("# from command line\nlog_level = error\n"));
  REQUIRE_THAT(text, Catch::Contains("# from default\nexec_workers = 2\n"));
  auto back = Config::parse(text, "printed");
  REQUIRE(back.has_value());
  REQUIRE(back->to_text() == l->config.to_text());
}

TEST_CASE("config source: the sample config lists every key commented out at its default",
          "[config]") {
  std::string sample = sample_config();
  // As installed, it changes nothing.
  auto as_is = Config::parse(sample, "sample");
  REQUIRE(as_is.has_value());
  REQUIRE(as_is->to_text() == Config::defaults().to_text());
  // Uncommenting every key line gives the defaults too, and names every key.
  std::istringstream in(sample);
  std::string line, uncommented;
  std::size_t keys = 0;
  for (const ConfigKeyInfo& k : Config::keys()) {
    REQUIRE_THAT(sample, Catch::Contains("\n#" + k.name + " = " + k.default_value + "\n"));
    REQUIRE_THAT(sample, Catch::Contains(k.reload == ReloadBehavior::runtime
                                             ? "# SIGHUP: applied\n#" + k.name + " = "
                                             : "# SIGHUP: restart only\n#" + k.name + " = "));
  }
  while (std::getline(in, line)) {
    if (line.size() > 1 && line[0] == '#' && line[1] != ' ' && line.find(" = ") != line.npos) {
      uncommented += line.substr(1) + "\n";
      ++keys;
    }
  }
  REQUIRE(keys == Config::keys().size());
  auto all = Config::parse(uncommented, "uncommented");
  REQUIRE(all.has_value());
  REQUIRE(all->to_text() == Config::defaults().to_text());
}
