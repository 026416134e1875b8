#include "fdo/daemon/framing.h"

#include <algorithm>

namespace fdo::daemon {

namespace {
bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}
} // namespace

FrameParser::FrameParser(std::size_t max_line_bytes)
    : max_(max_line_bytes), pending_max_(max_line_bytes) {}

void FrameParser::complete_line(std::string_view tail, std::vector<Frame>& out) {
  ++lines_ended_;
  std::size_t total = buf_.size() + tail.size();
  char last = !tail.empty() ? tail.back() : (!buf_.empty() ? buf_.back() : '\0');
  std::size_t content = (total > 0 && last == '\r') ? total - 1 : total;
  if (content > max_) {
    out.push_back({FrameKind::oversized, {}, content});
    std::string().swap(buf_);
  } else {
    buf_.append(tail);
    if (!buf_.empty() && buf_.back() == '\r') buf_.pop_back();
    if (blank(buf_)) {
      buf_.clear();
    } else {
      Frame f{FrameKind::line, std::move(buf_), 0};
      f.bytes = f.line.size();
      out.push_back(std::move(f));
      buf_ = std::string();
    }
  }
  begin_line();
}

void FrameParser::feed(std::string_view chunk, std::vector<Frame>& out) {
  while (!chunk.empty()) {
    std::size_t nl = chunk.find('\n');
    if (discarding_) {
      if (nl == std::string_view::npos) return;
      discarding_ = false;
      ++lines_ended_;
      chunk.remove_prefix(nl + 1);
      begin_line();
      continue;
    }
    if (nl != std::string_view::npos) {
      complete_line(chunk.substr(0, nl), out);
      chunk.remove_prefix(nl + 1);
      continue;
    }
    // No terminator in this chunk: buffer it, but never more than the limit
    // plus one byte (a "\r" that may turn out to precede the "\n").
    std::size_t total = buf_.size() + chunk.size();
    bool over = total > max_ + 1 || (total == max_ + 1 && chunk.back() != '\r');
    if (over) {
      out.push_back({FrameKind::oversized, {}, total});
      std::string().swap(buf_);
      discarding_ = true;
      return;
    }
    buf_.append(chunk);
    return;
  }
}

std::optional<Frame> FrameParser::finish() {
  if (discarding_) {
    discarding_ = false;
    begin_line();
    return std::nullopt;
  }
  std::vector<Frame> out;
  if (!buf_.empty()) complete_line({}, out);
  begin_line();
  if (out.empty()) return std::nullopt;
  return std::move(out.front());
}

} // namespace fdo::daemon
