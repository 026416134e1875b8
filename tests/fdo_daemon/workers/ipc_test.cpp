#include "fdo/daemon/ipc.h"
#include "fdo/util/scm_rights.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace fdo;
using namespace fdo::daemon;
using namespace std::chrono_literals;

namespace {

SocketPair pair_or_die() {
  auto sp = make_socket_pair();
  REQUIRE(sp);
  return std::move(*sp);
}

std::string binary_payload(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>((i * 131 + 7) & 0xff);
  return s;
}

void write_raw(int fd, std::string_view bytes) {
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
}

std::string prefix_bytes(std::uint32_t magic, std::uint32_t header_len, std::uint64_t payload_len) {
  auto p = encode_frame_prefix(header_len, payload_len);
  std::string s(reinterpret_cast<const char*>(p.data()), p.size());
  for (int i = 0; i < 4; ++i)
    s[static_cast<std::size_t>(i)] = static_cast<char>(magic >> (8 * i));
  return s;
}

} // namespace

TEST_CASE("ipc: frame prefix is little-endian magic - u32 header_len - u64 payload_len", "[ipc]") {
  auto p = encode_frame_prefix(0x01020304u, 0x0a0b0c0d0e0f1011ull);
  CHECK(p[0] == 'F');
  CHECK(p[1] == 'D');
  CHECK(p[2] == 'O');
  CHECK(p[3] == '2');
  CHECK(p[4] == 0x04);
  CHECK(p[7] == 0x01);
  CHECK(p[8] == 0x11);
  CHECK(p[15] == 0x0a);
  auto d = decode_frame_prefix(p, FrameLimits{UINT32_MAX, UINT64_MAX, UINT64_MAX});
  REQUIRE(d);
  CHECK(d->header_len == 0x01020304u);
  CHECK(d->payload_len == 0x0a0b0c0d0e0f1011ull);
}

TEST_CASE("ipc: encode/decode round trip keeps header and binary payload", "[ipc]") {
  Message m;
  m.header = {{"op", "echo"}, {"n", 42}, {"nested", {{"a", {1, 2, 3}}}}};
  m.payload = binary_payload(70000);
  auto frame = encode_message(m);
  REQUIRE(frame);
  auto header = encode_header(m.header);
  REQUIRE(header);
  CHECK(frame->size() == kFramePrefixBytes + header->size() + m.payload.size());
  CHECK(frame->substr(kFramePrefixBytes, header->size()) == *header);
  auto back = decode_message(*frame, FrameLimits{});
  REQUIRE(back);
  CHECK(back->header == m.header);
  CHECK(back->payload == m.payload);

  // Truncated and over-long frames are corrupt, not silently accepted.
  auto cut = decode_message(std::string_view(*frame).substr(0, frame->size() - 1), FrameLimits{});
  REQUIRE_FALSE(cut);
  CHECK(cut.error().code() == Errc::corrupt);
  CHECK_THAT(cut.error().message(), Catch::Contains("truncated"));
  auto longer = decode_message(*frame + "x", FrameLimits{});
  REQUIRE_FALSE(longer);
  CHECK(longer.error().code() == Errc::corrupt);
}

TEST_CASE("ipc: invalid UTF-8 in a header is replaced - not thrown", "[ipc]") {
  Message m;
  m.header = {{"message", std::string("bad \xff\xfe bytes")}};
  auto frame = encode_message(m);
  REQUIRE(frame);
  auto back = decode_message(*frame, FrameLimits{});
  REQUIRE(back);
  CHECK(back->header["message"].get<std::string>() == "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");
}

TEST_CASE("ipc: send/recv round trip over a socketpair with partial reads and writes", "[ipc]") {
  auto sp = pair_or_die();
  Message m;
  m.header = {{"op", "big"}};
  m.payload = binary_payload(8 << 20); // far beyond the socket buffer: many short writes
  std::thread writer([&] {
    CHECK(send_message(sp.first.get(), m, Deadline::after(20s)));
    Message second{{{"op", "second"}}, ""};
    CHECK(send_message(sp.first.get(), second, Deadline::after(20s)));
  });
  auto got = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(20s));
  auto got2 = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(20s));
  writer.join();
  REQUIRE(got);
  CHECK(got->header == m.header);
  CHECK(got->payload == m.payload);
  REQUIRE(got2);
  CHECK(got2->header["op"] == "second");
  CHECK(got2->payload.empty());
}

TEST_CASE("ipc: a message that arrives in pieces is read whole - with and without a deadline",
          "[ipc]") {
  // The receiver reads the header and payload together and, with no deadline
  // and no peer-exit fd, waits in the read itself: every split of the frame,
  // on a blocking and a non-blocking socket, still gives the whole message.
  const bool nonblocking = GENERATE(false, true);
  const bool never = GENERATE(false, true);
  CAPTURE(nonblocking, never);
  auto sp = pair_or_die();
  if (nonblocking) {
    int flags = ::fcntl(sp.second.get(), F_GETFL);
    REQUIRE(::fcntl(sp.second.get(), F_SETFL, flags | O_NONBLOCK) == 0);
  }
  Message m{{{"op", "pieces"}, {"n", 42}}, binary_payload(300)};
  auto frame = encode_message(m);
  REQUIRE(frame);
  const std::string bytes = *frame;
  const std::size_t header_end = bytes.size() - m.payload.size();
  // Cuts: inside the prefix, at its end, inside the header, at the header's
  // end, inside the payload.
  const std::size_t cuts[] = {5,          kFramePrefixBytes, kFramePrefixBytes + 3,
                              header_end, header_end + 100,  bytes.size()};
  std::thread writer([&] {
    std::size_t from = 0;
    for (std::size_t cut : cuts) {
      std::this_thread::sleep_for(10ms);
      write_raw(sp.first.get(), std::string_view(bytes).substr(from, cut - from));
      from = cut;
    }
  });
  auto got = recv_message(sp.second.get(), FrameLimits{},
                          never ? Deadline::never() : Deadline::after(10s));
  writer.join();
  REQUIRE(got);
  CHECK(got->header == m.header);
  CHECK(got->payload == m.payload);
}

TEST_CASE("ipc: a small message is taken whole by the first read - bytes after it are out of turn",
          "[ipc]") {
  // The first read takes what follows the prefix too (up to 16 KiB): a
  // channel carries one message at a time, so bytes beyond the message are
  // the peer's next one, sent out of turn.
  auto sp = pair_or_die();
  Message m{{{"op", "first"}}, binary_payload(200)};
  Message next{{{"op", "second"}}, "xyz"};
  auto a = encode_message(m);
  auto b = encode_message(next);
  REQUIRE(a);
  REQUIRE(b);
  SECTION("an error where the caller does not allow them") {
    write_raw(sp.first.get(), *a + *b);
    auto r = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
    CHECK_THAT(r.error().message(),
               Catch::Contains(std::to_string(b->size()) + " bytes after its message"));
  }
  SECTION("counted and dropped where it does") {
    write_raw(sp.first.get(), *a + *b);
    std::size_t trailing = 99;
    auto r =
        recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s), -1, nullptr, &trailing);
    REQUIRE(r);
    CHECK(r->header == m.header);
    CHECK(r->payload == m.payload);
    CHECK(trailing == b->size());
  }
  SECTION("none: the count is 0, and a message longer than the first read comes whole") {
    Message big{{{"op", "big"}}, binary_payload(100000)};
    auto c = encode_message(big);
    REQUIRE(c);
    write_raw(sp.first.get(), *a);
    std::size_t trailing = 99;
    auto r =
        recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s), -1, nullptr, &trailing);
    REQUIRE(r);
    CHECK(r->payload == m.payload);
    CHECK(trailing == 0);
    std::thread writer([&] { write_raw(sp.first.get(), *c); });
    auto r2 =
        recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s), -1, nullptr, &trailing);
    writer.join();
    REQUIRE(r2);
    CHECK(r2->payload == big.payload);
    CHECK(trailing == 0);
  }
}

TEST_CASE("ipc: a job envelope written directly decodes as the tree encoded would", "[ipc]") {
  // Every integer width, a bind request or none, a job header of its own.
  const std::uint64_t ids[] = {
      0, 23, 24, 255, 256, 65535, 65536, 0xffffffffull, 0x100000000ull, UINT64_MAX};
  const nlohmann::json job = {{"op", "exec"}, {"body_bytes", 355}, {"nested", {{"a", {1, 2}}}}};
  auto job_bytes = encode_header(job);
  REQUIRE(job_bytes);
  for (std::uint64_t id : ids) {
    for (bool with_bind : {false, true}) {
      JobLimits l;
      l.wall = std::chrono::milliseconds(static_cast<std::int64_t>(id % 100000 + 1));
      l.address_space_bytes = id;
      l.max_output_bytes = id | 1;
      l.cpu_seconds = id >> 3;
      const nlohmann::json bind =
          with_bind ? nlohmann::json{{"spec", {{"tenant", "uid:1000"}}}, {"retire_growth_bytes", 7}}
                    : nlohmann::json(nullptr);
      CAPTURE(id, with_bind);
      auto env = encode_job_envelope(id, l, *job_bytes, bind);
      REQUIRE(env);
      auto decoded = decode_header(*env);
      REQUIRE(decoded);
      nlohmann::json want = {{"id", id}, {"limits", to_json(l)}, {"job", job}};
      if (with_bind) want["bind"] = bind;
      CHECK(*decoded == want);
      auto limits = job_limits_from_json((*decoded)["limits"]);
      REQUIRE(limits);
      CHECK(limits->wall == l.wall);
      CHECK(limits->address_space_bytes == l.address_space_bytes);
      CHECK(limits->max_output_bytes == l.max_output_bytes);
      CHECK(limits->cpu_seconds == l.cpu_seconds);
    }
  }
  // Not an encoded map, or a job header one level too deep once enveloped: refused.
  CHECK(encode_job_envelope(1, JobLimits{}, "").error().code() == Errc::invalid_argument);
  CHECK(encode_job_envelope(1, JobLimits{}, "\x01").error().code() == Errc::invalid_argument);
  nlohmann::json deep = 1;
  for (std::size_t i = 0; i + 1 < kMaxHeaderDepth; ++i)
    deep = nlohmann::json::array({deep});
  auto deep_bytes = encode_header({{"d", deep}});
  REQUIRE(deep_bytes);
  auto refused = encode_job_envelope(1, JobLimits{}, *deep_bytes);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::invalid_argument);
}

TEST_CASE("ipc: huge lengths are rejected before allocating", "[ipc]") {
  FrameLimits limits{1 * kMiB, 16 * kMiB, 16 * kMiB};
  SECTION("header length") {
    auto sp = pair_or_die();
    write_raw(sp.first.get(), prefix_bytes(kFrameMagic, UINT32_MAX, 0));
    auto r = recv_message(sp.second.get(), limits, Deadline::after(5s));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::resource_exhausted);
    CHECK_THAT(r.error().message(), Catch::Contains("header of 4294967295 bytes exceeds"));
  }
  SECTION("payload length") {
    auto sp = pair_or_die();
    write_raw(sp.first.get(), prefix_bytes(kFrameMagic, 2, std::uint64_t{1} << 62));
    auto r = recv_message(sp.second.get(), limits, Deadline::after(5s));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::resource_exhausted);
    CHECK_THAT(r.error().message(), Catch::Contains("payload of 4611686018427387904 bytes"));
  }
  SECTION("total length, without overflow") {
    FrameLimits wide{UINT32_MAX, UINT64_MAX, 100};
    auto p = encode_frame_prefix(UINT32_MAX, UINT64_MAX);
    auto r = decode_frame_prefix(p, wide);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::resource_exhausted);
    CHECK_THAT(r.error().message(), Catch::Contains("more than 2^64"));
    auto q = decode_frame_prefix(encode_frame_prefix(60, 41), wide);
    REQUIRE_FALSE(q);
    CHECK_THAT(q.error().message(),
               Catch::Contains("message of 101 bytes exceeds the limit of 100"));
    CHECK(decode_frame_prefix(encode_frame_prefix(60, 40), wide));
  }
}

TEST_CASE("ipc: garbage magic and bad header encodings are corrupt", "[ipc]") {
  SECTION("magic") {
    auto sp = pair_or_die();
    write_raw(sp.first.get(), "GET / HTTP/1.1\r\n\r\n");
    auto r = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
    CHECK_THAT(r.error().message(), Catch::Contains("bad message magic"));
  }
  SECTION("empty header") {
    auto r = decode_frame_prefix(encode_frame_prefix(0, 0), FrameLimits{});
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
  }
  SECTION("the old JSON-text format's magic is named") {
    auto sp = pair_or_die();
    write_raw(sp.first.get(), prefix_bytes(kLegacyFrameMagic, 2, 0) + "{}");
    auto r = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
    CHECK_THAT(r.error().message(), Catch::Contains("bad message magic"));
    CHECK_THAT(r.error().message(), Catch::Contains("\"FDO1\""));
    CHECK_THAT(r.error().message(), Catch::Contains("\"FDO2\""));
    CHECK_THAT(r.error().message(), Catch::Contains("old JSON-header wire format"));
  }
  SECTION("a JSON text header under the new magic") {
    auto sp = pair_or_die();
    write_raw(sp.first.get(), prefix_bytes(kFrameMagic, 5, 0) + "{oops");
    auto r = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
    CHECK_THAT(r.error().message(), Catch::Contains("not valid CBOR"));
  }
}

TEST_CASE("ipc: end of stream is unavailable at a boundary - corrupt inside a message", "[ipc]") {
  SECTION("clean close") {
    auto sp = pair_or_die();
    sp.first.reset();
    auto r = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::unavailable);
    CHECK(r.error().message() == "peer closed the connection");
  }
  SECTION("inside the prefix") {
    auto sp = pair_or_die();
    write_raw(sp.first.get(), prefix_bytes(kFrameMagic, 2, 10).substr(0, 7));
    sp.first.reset();
    auto r = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
    CHECK_THAT(r.error().message(), Catch::Contains("after 7 of 16 prefix bytes"));
  }
  SECTION("inside the payload") {
    auto sp = pair_or_die();
    write_raw(sp.first.get(), prefix_bytes(kFrameMagic, 1, 10) + "\xa0" + "abc");
    sp.first.reset();
    auto r = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s));
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::corrupt);
    CHECK_THAT(r.error().message(), Catch::Contains("after 3 of 10 payload bytes"));
  }
}

TEST_CASE("ipc: the deadline bounds waiting - also mid-message", "[ipc]") {
  auto sp = pair_or_die();
  auto r = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(50ms));
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::timeout);
  write_raw(sp.first.get(), prefix_bytes(kFrameMagic, 1, 10) + "\xa0");
  auto r2 = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(50ms));
  REQUIRE_FALSE(r2);
  CHECK(r2.error().code() == Errc::timeout);
  CHECK_THAT(r2.error().message(), Catch::Contains("0 of 10 payload bytes"));
  CHECK(Deadline::never().poll_timeout_ms() == -1);
  CHECK(Deadline::after(-5ms).poll_timeout_ms() == 0);
}

TEST_CASE("ipc: a deadline following a pause clock moves later while paused", "[ipc]") {
  auto pauses = std::make_shared<PauseClock>();
  const Deadline d = Deadline::after(100ms).following(pauses);
  const Deadline plain = Deadline::after(100ms);
  pauses->pause();
  pauses->pause(); // no effect while paused
  std::this_thread::sleep_for(150ms);
  CHECK(plain.expired());
  CHECK_FALSE(d.expired());
  CHECK(d.poll_timeout_ms() > 0);
  pauses->resume();
  pauses->resume(); // no effect unless paused
  const auto paused = pauses->paused();
  CHECK(paused >= 150ms);
  std::this_thread::sleep_for(20ms);
  CHECK(pauses->paused() == paused); // not counting once resumed
  CHECK_FALSE(d.expired());
  std::this_thread::sleep_for(120ms);
  CHECK(d.expired());
  CHECK(d.poll_timeout_ms() == 0);
  // A socket read waits out the pause too: nothing arrives, so it times out
  // only once the paused time has been added.
  auto sp = pair_or_die();
  auto clock = std::make_shared<PauseClock>();
  clock->pause();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    clock->resume();
  });
  auto r = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(50ms).following(clock));
  later.join();
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::timeout);
  CHECK(std::chrono::steady_clock::now() - t0 >= 250ms);
  CHECK(Deadline::never().following(clock).poll_timeout_ms() == -1);
}

TEST_CASE("ipc: a sender blocked by a peer that does not read gives up at the deadline", "[ipc]") {
  auto sp = pair_or_die();
  Message m{{{"op", "x"}}, std::string(32 << 20, 'a')};
  auto st = send_message(sp.first.get(), m, Deadline::after(100ms));
  REQUIRE_FALSE(st);
  CHECK(st.error().code() == Errc::timeout);
}

TEST_CASE("ipc: sending to a closed peer is unavailable - not SIGPIPE", "[ipc]") {
  auto sp = pair_or_die();
  sp.second.reset();
  auto st = send_message(sp.first.get(), Message{{{"a", 1}}, "payload"}, Deadline::after(1s));
  REQUIRE_FALSE(st);
  CHECK(st.error().code() == Errc::unavailable);
}

namespace {
std::atomic<int> g_interrupts{0};
void count_interrupt(int) {
  g_interrupts.fetch_add(1);
}
} // namespace

TEST_CASE("ipc: EINTR during a blocked receive is retried", "[ipc]") {
  struct sigaction sa {
  }, old{};
  sa.sa_handler = count_interrupt; // no SA_RESTART: poll/read really see EINTR
  sigemptyset(&sa.sa_mask);
  REQUIRE(::sigaction(SIGUSR1, &sa, &old) == 0);
  auto sp = pair_or_die();
  pthread_t receiver = ::pthread_self();
  std::atomic<bool> done{false};
  std::thread poker([&] {
    for (int i = 0; i < 20 && !done; ++i) {
      ::pthread_kill(receiver, SIGUSR1);
      std::this_thread::sleep_for(5ms);
    }
    auto st =
        send_message(sp.first.get(), Message{{{"after", "signals"}}, "xyz"}, Deadline::after(5s));
    CHECK(st);
  });
  // With a deadline the wait is in poll, without one in the read itself.
  const bool never = GENERATE(false, true);
  CAPTURE(never);
  auto r = recv_message(sp.second.get(), FrameLimits{},
                        never ? Deadline::never() : Deadline::after(10s));
  done = true;
  poker.join();
  ::sigaction(SIGUSR1, &old, nullptr);
  REQUIRE(r);
  CHECK(r->header["after"] == "signals");
  CHECK(r->payload == "xyz");
  CHECK(g_interrupts.load() > 0);
}

TEST_CASE("ipc: a readable peer-exit fd ends the wait when nothing is buffered", "[ipc]") {
  auto sp = pair_or_die();
  Fd ev(::eventfd(1, EFD_CLOEXEC)); // already readable: "the process exited"
  REQUIRE(ev.valid());
  auto r = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s), ev.get());
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == Errc::unavailable);
  CHECK(r.error().message() == "peer process exited");
  // A message already buffered is still delivered.
  REQUIRE(send_message(sp.first.get(), Message{{{"last", "words"}}, ""}));
  auto r2 = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s), ev.get());
  REQUIRE(r2);
  CHECK(r2->header["last"] == "words");
}

TEST_CASE("ipc: job limits and errors convert to JSON and back", "[ipc]") {
  JobLimits l;
  l.wall = 1234ms;
  l.address_space_bytes = 64 * kMiB;
  l.max_output_bytes = 77;
  l.cpu_seconds = 3;
  auto back = job_limits_from_json(to_json(l));
  REQUIRE(back);
  CHECK(back->wall == l.wall);
  CHECK(back->address_space_bytes == l.address_space_bytes);
  CHECK(back->max_output_bytes == 77);
  CHECK(back->cpu_seconds == 3);
  auto j = to_json(l);
  j["wall_ms"] = "soon";
  auto bad = job_limits_from_json(j);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::invalid_argument);
  CHECK_THAT(bad.error().message(), Catch::Contains("wall_ms"));

  CHECK(effective_cpu_seconds(JobLimits{1500ms, 0, 1, 0}) == 3);
  CHECK(effective_cpu_seconds(JobLimits{1500ms, 0, 1, 9}) == 9);
  CHECK_FALSE(validate(JobLimits{0ms, 0, 1, 0}));
  CHECK_FALSE(validate(JobLimits{1ms, 0, 0, 0}));

  for (int i = 0; i <= static_cast<int>(Errc::internal); ++i) {
    auto code = static_cast<Errc>(i);
    Error e = error_from_json(error_to_json(Error(code, "msg")));
    CHECK(e.code() == code);
    CHECK(e.message() == "msg");
  }
  Error unknown = error_from_json({{"code", "weird"}, {"message", "m"}});
  CHECK(unknown.code() == Errc::internal);
  CHECK_THAT(unknown.message(), Catch::Contains("weird"));
  CHECK(error_from_json(nlohmann::json::array()).code() == Errc::internal);

  CHECK(format_bytes(64 * kMiB) == "64 MiB");
  CHECK(format_bytes(3 * kMiB / 2) == "1.5 MiB");
  CHECK(format_bytes(4 * kKiB) == "4 KiB");
  CHECK(format_bytes(100) == "100 bytes");
}

namespace {
// A pipe's read end, as an object that can be told apart after passing.
ino_t inode_of(int fd) {
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  return st.st_ino;
}
} // namespace

TEST_CASE("ipc: descriptors travel with a message to a receiver that takes them", "[ipc]") {
  auto sp = pair_or_die();
  int p1[2], p2[2];
  REQUIRE(::pipe(p1) == 0);
  REQUIRE(::pipe(p2) == 0);
  Fd a(p1[0]), a_w(p1[1]), b(p2[0]), b_w(p2[1]);
  Message out;
  out.header = {{"op", "exec"}};
  out.payload = binary_payload(300000); // more than one socket buffer: several writes
  out.fds = {a.get(), b.get()};
  std::thread sender([&] { REQUIRE(send_message(sp.first.get(), out)); });
  std::vector<Fd> got;
  auto in = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s), -1, &got);
  sender.join();
  REQUIRE(in);
  CHECK(in->header["op"] == "exec");
  CHECK(in->payload == out.payload);
  REQUIRE(got.size() == 2);
  REQUIRE(in->fds.size() == 2);
  CHECK(in->fds[0] == got[0].get());
  CHECK(inode_of(got[0].get()) == inode_of(a.get()));
  CHECK(inode_of(got[1].get()) == inode_of(b.get()));
  CHECK((::fcntl(got[0].get(), F_GETFD) & FD_CLOEXEC) != 0);
  // The next message brings none: a descriptor belongs to its own message.
  REQUIRE(send_frame(sp.first.get(), {{"n", 2}}, "x"));
  auto next = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s), -1, &got);
  REQUIRE(next);
  CHECK(next->fds.empty());
  CHECK(got.size() == 2);
}

TEST_CASE("ipc: a receiver that takes no descriptors gets the message without them", "[ipc]") {
  auto sp = pair_or_die();
  int p[2];
  REQUIRE(::pipe(p) == 0);
  Fd r(p[0]), w(p[1]);
  int fd = r.get();
  REQUIRE(send_frame(sp.first.get(), {{"n", 1}}, "abc", Deadline::never(), std::span(&fd, 1)));
  r.reset();
  auto in = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s));
  REQUIRE(in);
  CHECK(in->payload == "abc");
  CHECK(in->fds.empty());
  // The kernel closed the descriptor nobody took: the pipe has no reader left.
  pollfd pw{w.get(), POLLOUT, 0};
  REQUIRE(::poll(&pw, 1, 1000) == 1);
  CHECK((pw.revents & POLLERR) != 0);
}

TEST_CASE("ipc: too many descriptors are refused on both sides", "[ipc]") {
  auto sp = pair_or_die();
  std::vector<Fd> pipes;
  std::vector<int> raw;
  for (std::size_t i = 0; i <= kMaxMessageFds; ++i) {
    int p[2];
    REQUIRE(::pipe(p) == 0);
    pipes.emplace_back(p[0]);
    pipes.emplace_back(p[1]);
    raw.push_back(p[0]);
  }
  auto st = send_frame(sp.first.get(), {{"n", 1}}, "", Deadline::never(), raw);
  REQUIRE_FALSE(st);
  CHECK(st.error().code() == Errc::invalid_argument);
  CHECK_THAT(st.error().message(), Catch::Contains("at most 16"));
  // A peer that sends more anyway (not through send_frame).
  std::string frame = *encode_message(Message{{{"n", 1}}, "", {}});
  REQUIRE(send_with_fds(sp.first.get(), frame, raw, 0) == static_cast<ssize_t>(frame.size()));
  std::vector<Fd> got;
  auto in = recv_message(sp.second.get(), FrameLimits{}, Deadline::after(5s), -1, &got);
  REQUIRE_FALSE(in);
  CHECK(in.error().code() == Errc::resource_exhausted);
  CHECK_THAT(in.error().message(), Catch::Contains("more than 16 file descriptors"));
}

TEST_CASE("ipc: descriptors cannot be sent over something that is not a socket", "[ipc]") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  Fd r(p[0]), w(p[1]);
  int fd = r.get();
  auto st = send_frame(w.get(), {{"n", 1}}, "", Deadline::after(1s), std::span(&fd, 1));
  REQUIRE_FALSE(st);
  CHECK(st.error().code() == Errc::invalid_argument);
}
