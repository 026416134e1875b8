// The "FDO3" envelope of typed jobs and replies (ipc.h): its codec, the frame
// it travels in, and what a hostile peer's envelope gets.
#include "fdo/daemon/ipc.h"
#include "fdo/util/wire.h"

#include <catch2/catch.hpp>
#include <climits>
#include <cstring>
#include <sys/socket.h>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;
using namespace std::chrono_literals;

namespace {

TypedEnvelope job_envelope(std::uint64_t id, nlohmann::json bind = nullptr) {
  TypedEnvelope e;
  e.kind = TypedEnvelope::Kind::job;
  e.id = id;
  e.limits.wall = std::chrono::milliseconds(1234);
  e.limits.address_space_bytes = 5 * kGiB;
  e.limits.max_output_bytes = 7 * kMiB;
  e.limits.cpu_seconds = 9;
  e.extra = std::move(bind);
  return e;
}

TypedEnvelope reply_envelope(std::uint64_t id, std::string retire = {},
                             nlohmann::json bound = nullptr) {
  TypedEnvelope e;
  e.kind = TypedEnvelope::Kind::reply;
  e.id = id;
  e.retire = std::move(retire);
  e.extra = std::move(bound);
  return e;
}

void check_same(const TypedEnvelope& got, const TypedEnvelope& want) {
  CHECK(got.kind == want.kind);
  CHECK(got.id == want.id);
  if (want.kind == TypedEnvelope::Kind::job) {
    CHECK(got.limits.wall == want.limits.wall);
    CHECK(got.limits.address_space_bytes == want.limits.address_space_bytes);
    CHECK(got.limits.max_output_bytes == want.limits.max_output_bytes);
    CHECK(got.limits.cpu_seconds == want.limits.cpu_seconds);
  }
  CHECK(got.retire == want.retire);
  CHECK(got.extra == want.extra);
}

void write_raw(int fd, std::string_view bytes) {
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
}

} // namespace

TEST_CASE("typed envelope: jobs and replies survive the round trip, field by field",
          "[ipc][typed]") {
  const nlohmann::json bind = {{"spec", {{"tenant", "uid:1000"}}}, {"retire_growth_bytes", 7}};
  const nlohmann::json bound = {{"tenant", "uid:1000"}, {"landlock", true}};
  const TypedBody bodies[] = {{TypedOp::exec, 0}, {TypedOp::compile, UINT64_MAX}};
  for (const TypedBody& body : bodies)
    for (const TypedEnvelope& e :
         {job_envelope(0), job_envelope(UINT64_MAX, bind), reply_envelope(42),
          reply_envelope(43, "the job left 1 thread(s) running", bound)}) {
      CAPTURE(e.id, static_cast<int>(body.op));
      auto bytes = encode_typed_envelope(e, body);
      REQUIRE(bytes);
      auto back = decode_typed_envelope(*bytes);
      REQUIRE(back);
      check_same(back->first, e);
      CHECK(back->second == body);
    }
  // Only objects go in the CBOR part; an op past the last is refused.
  CHECK(encode_typed_envelope(job_envelope(1, nlohmann::json::array()), {TypedOp::exec, 1})
            .error()
            .code() == Errc::invalid_argument);
  CHECK(encode_typed_envelope(job_envelope(1), {static_cast<TypedOp>(7), 1}).error().code() ==
        Errc::invalid_argument);
}

TEST_CASE("typed envelope: a typed message travels as FDO3 with its body, payload and fds",
          "[ipc][typed]") {
  auto sp = make_socket_pair();
  REQUIRE(sp);
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  Fd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  Message m;
  m.payload = std::string("body\0rest", 9);
  m.body = TypedBody{TypedOp::exec, 4};
  m.envelope = job_envelope(77);
  m.fds = {read_end.get()};
  REQUIRE(send_message(sp->first.get(), m, Deadline::after(5s)));
  std::vector<Fd> fds;
  auto got = recv_message(sp->second.get(), FrameLimits{}, Deadline::after(5s), -1, &fds);
  REQUIRE(got);
  CHECK(got->header.empty());
  REQUIRE(got->body);
  CHECK(*got->body == *m.body);
  REQUIRE(got->envelope);
  check_same(*got->envelope, *m.envelope);
  CHECK(got->payload == m.payload);
  CHECK(got->fds.size() == 1);
  CHECK(job_op(*got) == "exec");

  // The same bytes as a whole frame: its prefix names "FDO3".
  auto frame = encode_message(m);
  REQUIRE(frame);
  CHECK(frame->substr(0, 4) == "FDO3");
  auto decoded = decode_message(*frame, FrameLimits{});
  REQUIRE(decoded);
  CHECK(*decoded->body == *m.body);
  CHECK(decoded->payload == m.payload);

  // Without an envelope it is an ordinary message: a CBOR header ("FDO2").
  Message plain;
  plain.header = {{"op", "probe"}};
  auto plain_frame = encode_message(plain);
  REQUIRE(plain_frame);
  CHECK(plain_frame->substr(0, 4) == "FDO2");
  CHECK(job_op(plain) == "probe");
}

TEST_CASE("typed envelope: a broken or hostile envelope is corrupt, never misread",
          "[ipc][typed]") {
  auto good =
      encode_typed_envelope(reply_envelope(5, "why", {{"tenant", "t"}}), {TypedOp::none, 3});
  REQUIRE(good);
  // Cut anywhere: corrupt.
  for (std::size_t n = 0; n < good->size(); ++n) {
    CAPTURE(n);
    auto r = decode_typed_envelope(std::string_view(*good).substr(0, n));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
  }
  // A byte after the end.
  auto longer = decode_typed_envelope(*good + "x");
  REQUIRE_FALSE(longer);
  CHECK(longer.error().code() == Errc::corrupt);

  auto refused = [](std::string bytes, std::string_view says) {
    CAPTURE(says);
    auto r = decode_typed_envelope(bytes);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
    CHECK_THAT(r.error().message(), Catch::Contains(std::string(says)));
  };
  // Kind 0 and 3; op 3.
  std::string bytes = *good;
  bytes[0] = 0;
  refused(bytes, "kind 0");
  bytes[0] = 3;
  refused(bytes, "its kind");
  bytes = *good;
  bytes[9] = 3;
  refused(bytes, "its op");
  // A wall limit no clock holds.
  wire::WireWriter w;
  w.u8(1);
  w.u64(1);
  w.u8(1);
  w.u64(0);
  w.u64(UINT64_MAX);
  for (int i = 0; i < 3; ++i)
    w.u64(0);
  w.str("");
  auto wall = std::move(w).take();
  REQUIRE(wall);
  refused(*wall, "wall limit");
  // A CBOR part that the pre-scan refuses: not a map, or nested past the limit.
  for (const std::string& cbor :
       {std::string("\x82\x01\x02", 3), std::string(kMaxHeaderDepth + 1, '\x81') + '\x01'}) {
    wire::WireWriter x;
    x.u8(2);
    x.u64(1);
    x.u8(0);
    x.u64(0);
    x.str("");
    x.str(cbor);
    auto b = std::move(x).take();
    REQUIRE(b);
    refused(*b, "CBOR part");
  }

  // Over a socket, the receiver gets the same error and nothing else.
  auto sp = make_socket_pair();
  REQUIRE(sp);
  std::string frame;
  auto prefix = encode_frame_prefix(static_cast<std::uint32_t>(wall->size()), 0, FrameKind::typed);
  frame.append(reinterpret_cast<const char*>(prefix.data()), prefix.size());
  frame += *wall;
  write_raw(sp->first.get(), frame);
  auto r = recv_message(sp->second.get(), FrameLimits{}, Deadline::after(5s));
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::corrupt);
  CHECK_THAT(r.error().message(), Catch::Contains("typed envelope"));
}
