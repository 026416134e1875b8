// Smoke tests of the real-server fixtures: each server starts in a temp dir,
// answers a real client (hiredis, libpq), and is gone after stop().
#include "support/postgres_server.h"
#include "support/redis_server.h"
#include "support/skip.h"

#include <catch2/catch.hpp>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <memory>

using fdo::test_support::PostgresServer;
using fdo::test_support::RedisServer;

namespace {

struct RedisFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(void* r) const { freeReplyObject(r); }
};
struct PgFinish {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PgClear {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, PgClear>;

std::string redis_echo(redisContext* c, const std::string& key, const std::string& value) {
  std::unique_ptr<void, ReplyFree> set(
      redisCommand(c, "SET %b %b", key.data(), key.size(), value.data(), value.size()));
  REQUIRE(set);
  std::unique_ptr<void, ReplyFree> get(redisCommand(c, "GET %b", key.data(), key.size()));
  REQUIRE(get);
  auto* r = static_cast<redisReply*>(get.get());
  REQUIRE(r->type == REDIS_REPLY_STRING);
  return std::string(r->str, r->len);
}

PgResult exec(PGconn* c, const char* sql) {
  PgResult r(PQexec(c, sql));
  INFO(sql << ": " << PQerrorMessage(c));
  REQUIRE(r);
  ExecStatusType st = PQresultStatus(r.get());
  REQUIRE((st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK));
  return r;
}

} // namespace

TEST_CASE("redis fixture: serves on a unix socket and loopback TCP - stops and restarts empty",
          "[fixture][redis]") {
  if (!RedisServer::available()) {
    FDO_SKIP(RedisServer::skip_reason());
  }
  std::string socket;
  {
    RedisServer server(RedisServer::Listen::unix_and_tcp);
    socket = server.socket_path();
    REQUIRE(server.port() > 0);
    std::unique_ptr<redisContext, RedisFree> u(redisConnectUnix(server.socket_path().c_str()));
    REQUIRE((u && u->err == 0));
    CHECK(redis_echo(u.get(), "k", std::string("bin\0ary", 7)) == std::string("bin\0ary", 7));
    std::unique_ptr<redisContext, RedisFree> t(redisConnect("127.0.0.1", server.port()));
    REQUIRE((t && t->err == 0));
    std::unique_ptr<void, ReplyFree> get(redisCommand(t.get(), "GET k"));
    REQUIRE(get);
    CHECK(static_cast<redisReply*>(get.get())->len == 7); // one server behind both

    server.stop();
    CHECK_FALSE(server.running());
    std::unique_ptr<redisContext, RedisFree> gone(redisConnectUnix(server.socket_path().c_str()));
    CHECK((gone == nullptr || gone->err != 0));

    server.start(); // no persistence: the data is gone
    std::unique_ptr<redisContext, RedisFree> again(redisConnectUnix(server.socket_path().c_str()));
    REQUIRE((again && again->err == 0));
    std::unique_ptr<void, ReplyFree> empty(redisCommand(again.get(), "GET k"));
    REQUIRE(empty);
    CHECK(static_cast<redisReply*>(empty.get())->type == REDIS_REPLY_NIL);
  }
  CHECK_FALSE(std::filesystem::exists(socket)); // temp dir removed with the server
}

TEST_CASE("postgres fixture: a fresh cluster on a unix socket answers SQL and stops",
          "[fixture][postgres]") {
  if (!PostgresServer::available()) {
    FDO_SKIP(PostgresServer::skip_reason());
  }
  std::string conninfo;
  {
    PostgresServer server;
    conninfo = server.conninfo();
    std::unique_ptr<PGconn, PgFinish> c(PQconnectdb(conninfo.c_str()));
    REQUIRE(c);
    INFO(PQerrorMessage(c.get()) << " (server log: " << server.log_file() << ")");
    REQUIRE(PQstatus(c.get()) == CONNECTION_OK);
    CHECK(PQserverVersion(c.get()) / 10000 == 15);
    exec(c.get(), "CREATE TABLE t (k text PRIMARY KEY, v bigint NOT NULL)");
    exec(c.get(), "INSERT INTO t VALUES ('a', 1), ('b', 2)");
    PgResult r = exec(c.get(), "SELECT sum(v) FROM t");
    CHECK(std::string(PQgetvalue(r.get(), 0, 0)) == "3");
    c.reset();

    server.stop();
    CHECK_FALSE(server.running());
    std::unique_ptr<PGconn, PgFinish> refused(PQconnectdb(conninfo.c_str()));
    CHECK(PQstatus(refused.get()) != CONNECTION_OK);

    server.start(); // same cluster: the data survives a restart
    std::unique_ptr<PGconn, PgFinish> back(PQconnectdb(conninfo.c_str()));
    REQUIRE(PQstatus(back.get()) == CONNECTION_OK);
    PgResult again = exec(back.get(), "SELECT count(*) FROM t");
    CHECK(std::string(PQgetvalue(again.get(), 0, 0)) == "2");
  }
}
