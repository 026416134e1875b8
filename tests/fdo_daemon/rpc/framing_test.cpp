#include "fdo/daemon/framing.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using fdo::daemon::Frame;
using fdo::daemon::FrameKind;
using fdo::daemon::FrameParser;

namespace {
std::vector<std::string> lines_of(const std::vector<Frame>& frames) {
  std::vector<std::string> out;
  for (const Frame& f : frames)
    out.push_back(f.kind == FrameKind::line ? f.line
                                            : "<oversized:" + std::to_string(f.bytes) + ">");
  return out;
}
} // namespace

TEST_CASE("framing: a line split at every position yields the same lines", "[framing]") {
  const std::string stream = "{\"a\":1}\n{\"b\":\"two\"}\r\nthird line\n";
  const std::vector<std::string> expected = {"{\"a\":1}", "{\"b\":\"two\"}", "third line"};
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    for (std::size_t cut2 = cut; cut2 <= stream.size(); ++cut2) {
      FrameParser p(1024);
      std::vector<Frame> out;
      p.feed(std::string_view(stream).substr(0, cut), out);
      p.feed(std::string_view(stream).substr(cut, cut2 - cut), out);
      p.feed(std::string_view(stream).substr(cut2), out);
      INFO("cuts at " << cut << ", " << cut2);
      REQUIRE(lines_of(out) == expected);
      REQUIRE(p.buffered_bytes() == 0);
    }
  }
}

TEST_CASE("framing: byte-by-byte feeding", "[framing]") {
  const std::string stream = "one\r\ntwo\nthree\n";
  FrameParser p(16);
  std::vector<Frame> out;
  for (char c : stream)
    p.feed(std::string_view(&c, 1), out);
  REQUIRE(lines_of(out) == std::vector<std::string>{"one", "two", "three"});
}

TEST_CASE("framing: many lines in one chunk - blank lines skipped", "[framing]") {
  FrameParser p(64);
  std::vector<Frame> out;
  std::string chunk;
  for (int i = 0; i < 100; ++i)
    chunk += "line" + std::to_string(i) + "\n" + (i % 3 == 0 ? "\n  \t\r\n\r\n" : "");
  p.feed(chunk, out);
  REQUIRE(out.size() == 100);
  for (int i = 0; i < 100; ++i) {
    REQUIRE(out[i].kind == FrameKind::line);
    REQUIRE(out[i].line == "line" + std::to_string(i));
    REQUIRE(out[i].bytes == out[i].line.size());
  }
}

TEST_CASE("framing: an oversized line is reported once - then parsing resumes", "[framing]") {
  SECTION("in one chunk") {
    FrameParser p(10);
    std::vector<Frame> out;
    p.feed("short\n" + std::string(50, 'x') + "\nafter\n", out);
    REQUIRE(lines_of(out) == std::vector<std::string>{"short", "<oversized:50>", "after"});
  }
  SECTION("arriving in pieces: reported as soon as the limit passes, nothing buffered") {
    FrameParser p(10);
    std::vector<Frame> out;
    p.feed("0123456789", out); // exactly the limit, not yet over
    REQUIRE(out.empty());
    p.feed("ab", out);
    REQUIRE(out.size() == 1);
    REQUIRE(out[0].kind == FrameKind::oversized);
    REQUIRE(out[0].bytes == 12);
    REQUIRE(p.discarding());
    REQUIRE(p.buffered_bytes() == 0);
    for (int i = 0; i < 1000; ++i)
      p.feed(std::string(1000, 'y'), out);
    REQUIRE(out.size() == 1); // still only one report
    REQUIRE(p.buffered_bytes() == 0);
    p.feed("zz\n{\"a\":1}\n", out);
    REQUIRE(lines_of(out) == std::vector<std::string>{"<oversized:12>", "{\"a\":1}"});
    REQUIRE_FALSE(p.discarding());
  }
  SECTION("exactly the limit is fine, with or without \\r") {
    FrameParser p(10);
    std::vector<Frame> out;
    p.feed("0123456789\n", out);
    p.feed("0123456789\r", out);
    REQUIRE(out.size() == 1); // the "\r" may still precede a "\n"
    REQUIRE(p.buffered_bytes() == 11);
    p.feed("\n", out);
    p.feed("01234567890\n", out);
    REQUIRE(lines_of(out) ==
            std::vector<std::string>{"0123456789", "0123456789", "<oversized:11>"});
  }
  SECTION("\\r at the limit followed by more bytes is oversized") {
    FrameParser p(10);
    std::vector<Frame> out;
    p.feed("0123456789\r", out);
    p.feed("x", out);
    REQUIRE(lines_of(out) == std::vector<std::string>{"<oversized:12>"});
    p.feed("tail\nok\n", out);
    REQUIRE(lines_of(out) == std::vector<std::string>{"<oversized:12>", "ok"});
  }
}

TEST_CASE("framing: finish returns an unterminated tail", "[framing]") {
  FrameParser p(100);
  std::vector<Frame> out;
  p.feed("a\nlast", out);
  REQUIRE(lines_of(out) == std::vector<std::string>{"a"});
  auto tail = p.finish();
  REQUIRE(tail);
  REQUIRE(tail->line == "last");
  REQUIRE_FALSE(p.finish());

  FrameParser q(4);
  q.feed("toolong", out);
  REQUIRE_FALSE(q.finish()); // already reported as oversized
  FrameParser r(4);
  r.feed("  \r", out);
  REQUIRE_FALSE(r.finish()); // blank
}

TEST_CASE("framing: a new limit applies from the next line", "[framing]") {
  FrameParser p(100);
  std::vector<Frame> out;
  p.feed("0123456789", out);
  p.set_max_line_bytes(5);
  p.feed("\n0123456789\n", out);
  REQUIRE(lines_of(out) == std::vector<std::string>{"0123456789", "<oversized:10>"});
}

TEST_CASE("framing: in_line and lines_ended track where a line begins and ends", "[framing]") {
  FrameParser p(8);
  std::vector<Frame> out;
  REQUIRE_FALSE(p.in_line());
  REQUIRE(p.lines_ended() == 0);

  p.feed("ab", out);
  REQUIRE(p.in_line());
  REQUIRE(p.lines_ended() == 0);
  p.feed("c\nd", out); // one line ends, the next begins in the same chunk
  REQUIRE(p.in_line());
  REQUIRE(p.lines_ended() == 1);
  p.feed("\n", out);
  REQUIRE_FALSE(p.in_line());
  REQUIRE(p.lines_ended() == 2);

  // Blanks are a line in progress too (a client dribbling spaces is still
  // sending a line), and their terminator counts.
  p.feed("  ", out);
  REQUIRE(p.in_line());
  p.feed("\n", out);
  REQUIRE_FALSE(p.in_line());
  REQUIRE(p.lines_ended() == 3);

  // An oversized line stays in progress while it is discarded.
  p.feed("0123456789", out);
  REQUIRE(p.discarding());
  REQUIRE(p.in_line());
  REQUIRE(p.lines_ended() == 3);
  p.feed("xyz\n", out);
  REQUIRE_FALSE(p.in_line());
  REQUIRE(p.lines_ended() == 4);
  REQUIRE(lines_of(out) == std::vector<std::string>{"abc", "d", "<oversized:10>"});

  // End of stream completes an unterminated tail.
  p.feed("tail", out);
  REQUIRE(p.in_line());
  REQUIRE(p.finish().has_value());
  REQUIRE_FALSE(p.in_line());
  REQUIRE(p.lines_ended() == 5);
}
