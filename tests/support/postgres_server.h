// A real PostgreSQL 15 server for one test: a fresh cluster (initdb, trust
// authentication, fsync off) in its own temp dir, listening only on a Unix
// socket in that dir (no TCP), stopped and removed with the object.
// PostgreSQL refuses to run as root, and CI runs tests as root: then the
// cluster is owned by and run as the `postgres` system user (created by the
// postgresql package, which tools/setup.sh installs) through runuser(1).
// Tests check available() first and skip with skip_reason() otherwise.
// require_password_for() turns password authentication on for one role.
#pragma once

#include "temp_dir.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <pwd.h>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace fdo::test_support {

class PostgresServer {
public:
  static constexpr const char* kBinDir = "/usr/lib/postgresql/15/bin";

  // Empty when a server can be started here, else why not.
  static std::string unavailable_reason() {
    if (::access((std::string(kBinDir) + "/pg_ctl").c_str(), X_OK) != 0)
      return std::string(kBinDir) + "/pg_ctl is not installed (tools/setup.sh installs postgresql)";
    if (::geteuid() == 0 && ::getpwnam("postgres") == nullptr)
      return "running as root and there is no postgres user to run the server as";
    if (::geteuid() == 0 && ::access("/usr/sbin/runuser", X_OK) != 0)
      return "running as root and /usr/sbin/runuser is missing";
    return {};
  }
  static bool available() { return unavailable_reason().empty(); }
  static std::string skip_reason() { return "skipped: " + unavailable_reason(); }

  PostgresServer() : dir_("fdo-pg") {
    if (!available()) throw std::runtime_error(unavailable_reason());
    data_ = dir_.file("data");
    socket_dir_ = dir_.str();
    if (::geteuid() == 0) {
      const passwd* pw = ::getpwnam("postgres");
      if (::chown(dir_.str().c_str(), pw->pw_uid, pw->pw_gid) != 0)
        throw std::runtime_error("chown " + dir_.str() + " to postgres failed");
      as_user_ = "/usr/sbin/runuser -u postgres -- ";
    }
    run(bin("initdb") + " -D " + data_ +
            " -A trust -U postgres -E UTF8 --no-sync --no-instructions > " +
            dir_.file("initdb.log") + " 2>&1",
        "initdb");
    start();
  }
  ~PostgresServer() { stop(); }
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // Starts the server (again) and waits until it accepts connections.
  void start() {
    if (running_) return;
    run(bin("pg_ctl") + " -D " + data_ + " -l " + dir_.file("server.log") + " -w -t 30 -o \"-k " +
            socket_dir_ +
            " -c listen_addresses= -c fsync=off -c full_page_writes=off\" start > /dev/null",
        "pg_ctl start");
    running_ = true;
  }
  // Fast shutdown: open sessions are disconnected.
  void stop() {
    if (!running_) return;
    running_ = false;
    std::string cmd = as_user_ + bin("pg_ctl") + " -D " + data_ + " -m fast -w stop > /dev/null";
    (void)std::system(cmd.c_str());
  }
  bool running() const { return running_; }

  // From the next connection the server has read its configuration for:
  // `role` must log in with its password (scram-sha-256), ahead of the
  // cluster's trust rule (for tests of refused credentials). The reload is
  // asynchronous: a test waits until a wrong password is refused.
  void require_password_for(const std::string& role) {
    const std::string hba = data_ + "/pg_hba.conf";
    std::string rules;
    {
      std::ifstream in(hba);
      rules.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    std::ofstream out(hba, std::ios::trunc);
    out << "local all " << role << " scram-sha-256\n" << rules;
    out.close();
    if (!out) throw std::runtime_error("cannot write " + hba);
    run(bin("pg_ctl") + " -D " + data_ + " reload > /dev/null", "pg_ctl reload");
  }

  // A libpq connection string (keyword/value form).
  std::string conninfo(const std::string& dbname = "postgres") const {
    return "host=" + socket_dir_ + " user=postgres dbname=" + dbname;
  }
  const std::string& socket_dir() const { return socket_dir_; }
  std::string log_file() const { return dir_.file("server.log"); }

private:
  std::string bin(const char* tool) const { return std::string(kBinDir) + "/" + tool; }
  void run(const std::string& cmd, const char* what) const {
    std::string full = as_user_ + cmd;
    if (std::system(full.c_str()) != 0)
      throw std::runtime_error(std::string(what) + " failed: " + full + " (logs in " + dir_.str() +
                               ")");
  }

  TempDir dir_;
  std::string data_, socket_dir_;
  std::string as_user_; // "runuser -u postgres -- " when root
  bool running_ = false;
};

} // namespace fdo::test_support
