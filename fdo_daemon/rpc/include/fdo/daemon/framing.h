// NDJSON framing for the socket protocol: bytes in, complete lines out. Does no
// I/O so it can be fed arbitrary chunk boundaries in tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::daemon {

enum class FrameKind {
  line,     // one complete line, terminator stripped
  oversized // a line went past the limit; its bytes are being discarded
};

struct Frame {
  FrameKind kind = FrameKind::line;
  std::string line;      // empty for oversized
  std::size_t bytes = 0; // line: line.size(); oversized: bytes seen when the limit was hit
};

// Splits a byte stream into lines terminated by "\n" (a "\r" before it is
// stripped too). Lines of only spaces, tabs and "\r" are skipped. A line
// longer than max_line_bytes (terminator excluded) produces one `oversized`
// frame as soon as the limit is passed; the rest of that line, up to and
// including its "\n", is dropped without buffering, and parsing then resumes.
// Memory use is bounded by max_line_bytes + 1 whatever the input.
class FrameParser {
public:
  explicit FrameParser(std::size_t max_line_bytes);

  // Appends the frames completed by `chunk` to `out` in stream order.
  void feed(std::string_view chunk, std::vector<Frame>& out);
  // End of stream: the unterminated tail as a final line, if it is not blank.
  // (An oversized tail was already reported and yields nothing.)
  std::optional<Frame> finish();

  // Takes effect now if no line is in progress, else from the next line (a
  // line is never judged by two limits).
  void set_max_line_bytes(std::size_t max_line_bytes) {
    pending_max_ = max_line_bytes;
    if (buf_.empty() && !discarding_) max_ = max_line_bytes;
  }
  std::size_t max_line_bytes() const { return max_; }
  // Drops the line in progress and frees its buffer (the connection closed).
  void reset() {
    std::string().swap(buf_);
    discarding_ = false;
    begin_line();
  }
  std::size_t buffered_bytes() const { return buf_.size(); }
  bool discarding() const { return discarding_; }
  // A line has begun and its terminator has not arrived yet (bytes buffered,
  // blanks included, or an oversized line being discarded). The server's read
  // deadline runs exactly while this holds.
  bool in_line() const { return !buf_.empty() || discarding_; }
  // Terminators consumed so far (blank, oversized and finished lines alike):
  // a change across feed() means the line in progress, if any, began in that
  // chunk.
  std::uint64_t lines_ended() const { return lines_ended_; }

private:
  void complete_line(std::string_view tail, std::vector<Frame>& out);
  void begin_line() { max_ = pending_max_; }

  std::size_t max_;
  std::size_t pending_max_;
  std::string buf_;
  bool discarding_ = false;
  std::uint64_t lines_ended_ = 0;
};

} // namespace fdo::daemon
