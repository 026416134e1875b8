// fdoctl run FILE --entry NAME: register the IR, execute N stages, a row per
// stage as it finishes, then the summary (stages.h says what is computed).
#include "context.h"
#include "fdo/ctl/call_args.h"
#include "fdo/ctl/stages.h"
#include "fdo/ctl/table.h"
#include "fdo/util/base64.h"
#include "fdo/util/fd.h"
#include "fdo/util/ir_format.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <stop_token>
#include <thread>

namespace fdo::ctl {

using nlohmann::json;

namespace {

// --wait-optimized runs at most this many stages past --stages.
constexpr int kMaxWaitStages = 100000;

// A status line on the terminal, redrawn in place with the time spent so far
// (a stage can compile for a minute) and erased before the next table row.
// Only when both streams are terminals: never in pipes, logs or --json output.
class Progress {
public:
  Progress(Io& io, bool enabled) : io_(io), enabled_(enabled) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Shows `label (N.N s)` and keeps the seconds ticking until clear().
  void show(std::string label) {
    if (!enabled_) return;
    clear();
    auto started = std::chrono::steady_clock::now();
    draw(label, 0.0);
    ticker_ = std::jthread([this, label = std::move(label), started](std::stop_token stop) {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lk(m);
      while (!cv.wait_for(lk, stop, std::chrono::milliseconds(250), [] { return false; })) {
        if (stop.stop_requested()) return;
        draw(label,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      }
    });
  }
  void clear() {
    if (!enabled_) return;
    if (ticker_.joinable()) {
      ticker_.request_stop();
      ticker_.join();
    }
    std::lock_guard lk(mu_);
    if (shown_) {
      io_.err << "\r\033[K";
      io_.err.flush();
      shown_ = false;
    }
  }

private:
  void draw(const std::string& label, double seconds) {
    char secs[32];
    std::snprintf(secs, sizeof secs, " (%.1f s)", seconds);
    std::lock_guard lk(mu_);
    io_.err << "\r\033[K" << label << secs;
    io_.err.flush();
    shown_ = true;
  }

  Io& io_;
  bool enabled_;
  std::mutex mu_; // the ticker and the caller both write the line
  bool shown_ = false;
  std::jthread ticker_;
};

const json* find_entry(const json& reg, const std::string& name) {
  if (!reg.is_object() || !reg.contains("entries") || !reg["entries"].is_array()) return nullptr;
  for (const json& e : reg["entries"])
    if (e.value("name", "") == name) return &e;
  return nullptr;
}

std::string signature(const json& e) {
  std::string s = e.value("returns", "?") + " " + e.value("name", "?") + "(";
  bool first = true;
  for (const json& p : e.value("params", json::array())) {
    s += (first ? "" : ", ") + (p.is_string() ? p.get<std::string>() : std::string("?"));
    first = false;
  }
  return s + ")";
}

} // namespace

Status cmd_run(Context& ctx, const RunOptions& o) {
  if (o.stages < 1 || o.stages > 1000000)
    return make_error(Errc::invalid_argument, "--stages must be between 1 and 1000000");
  auto bytes = read_file(o.file, std::size_t(1) << 30);
  if (!bytes)
    return make_error(Errc::invalid_argument,
                      "cannot read IR file " + o.file + ": " + bytes.error().message());
  if (bytes->empty())
    return make_error(Errc::invalid_argument, o.file + " is empty: expected LLVM IR (.ll) or "
                                                       "bitcode (.bc)");
  std::string name = o.name.empty() ? std::filesystem::path(o.file).stem().string() : o.name;
  FDO_TRY(auto backend, ctx.backend(Need::daemon));
  Progress progress(ctx.io(), !ctx.json_output() && ctx.io().out_is_tty && ctx.io().err_is_tty);

  progress.show("registering " + o.file + " (" + format_bytes(bytes->size()) +
                (is_llvm_bitcode(*bytes) ? " of bitcode" : " of IR text") + ")");
  // Text and bitcode alike travel as base64: the daemon keys the exact bytes,
  // and base64 keeps them exact whatever the text's encoding.
  auto registered =
      call(*backend, "program.register", {{"ir_base64", base64_encode(*bytes)}, {"name", name}});
  // IR the daemon's compile worker cannot parse or verify is malformed input
  // (exit 2, docs/fdoctl.md), not a daemon failure.
  if (!registered &&
      (registered.error().code() == Errc::parse || registered.error().code() == Errc::verify))
    return make_error(Errc::invalid_argument,
                      o.file + " is not valid LLVM IR: " + registered.error().message());
  FDO_TRY(json reg, std::move(registered));
  const json* entry = find_entry(reg, o.entry);
  if (entry == nullptr) {
    std::string known;
    for (const json& e : reg.value("entries", json::array()))
      known += "\n  " + signature(e);
    return make_error(Errc::not_found, o.file + " has no entry '" + o.entry + "'; its entries:" +
                                           (known.empty() ? std::string(" none") : known));
  }
  std::vector<std::string> param_types;
  for (const json& p : entry->value("params", json::array()))
    param_types.push_back(p.is_string() ? p.get<std::string>() : "?");
  FDO_TRY(CallParams call_params, build_call(o.entry, param_types, o.args, o.buffers));

  std::ostream& out = ctx.io().out;
  StreamTable table(stage_columns());
  if (!ctx.json_output()) {
    progress.clear();
    out << "program " << reg.value("program", "") << " (" << reg.value("name", "") << ", "
        << format_bytes(static_cast<std::uint64_t>(reg.value("size", 0))) << ")\nprofile key "
        << reg.value("profile_key", "") << "\nentry   " << signature(*entry) << "\n\n"
        << table.header();
    out.flush();
  }
  json results = json::array();
  std::vector<StageRow> rows;
  // --wait-optimized: after the N stages, more stages until one runs code
  // optimized with the profile (an async tier-up lands in the background),
  // for at most wait_timeout_s.
  using Clock = std::chrono::steady_clock;
  auto wait_deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(o.wait_timeout_s * 1000));
  auto optimized = [&] { return !rows.empty() && rows.back().mode == "optimized"; };
  int extra = 0;
  for (int i = 0;; ++i) {
    bool waiting = i >= o.stages;
    if (waiting && (!o.wait_optimized || optimized() || Clock::now() >= wait_deadline ||
                    extra >= kMaxWaitStages))
      break;
    if (waiting) {
      ++extra;
      // A pending tier-up needs the compile worker, not more stages: pace them.
      if (!rows.empty() && rows.back().outcome == "tier_up_pending")
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    char buf[96];
    if (waiting)
      std::snprintf(buf, sizeof buf, "stage %d running (waiting for optimized code)", i + 1);
    else
      std::snprintf(buf, sizeof buf, "stage %d/%d running", i + 1, o.stages);
    progress.show(buf);
    // verbose: a counter that did not count is shown with its reason.
    json params = {{"program", reg["program"]},
                   {"entry", o.entry},
                   {"args", call_params.args},
                   {"verbose", true}};
    if (!call_params.buffers.empty()) params["buffers"] = call_params.buffers;
    bool last = i + 1 >= o.stages; // with --wait-optimized, any stage may be the last
    if (o.show_buffers && last && !call_params.buffers.empty()) params["return_buffers"] = true;
    auto r = call(*backend, "execute", params);
    progress.clear();
    if (!r)
      return std::move(r).error().context("stage " + std::to_string(i + 1) + " of " +
                                          std::to_string(o.stages) +
                                          (waiting ? " (waiting for optimized code)" : ""));
    FDO_TRY(StageRow row, stage_row(*r));
    if (!ctx.json_output()) {
      out << table.row(stage_cells(row));
      out.flush();
    }
    rows.push_back(std::move(row));
    results.push_back(std::move(*r));
  }
  if (o.wait_optimized && !ctx.json_output()) {
    if (optimized())
      out << "optimized code reached at stage " << rows.size() - 1 << " (" << extra
          << " stage(s) past --stages " << o.stages << ")\n";
    else
      out << "no stage ran optimized code within " << o.wait_timeout_s << " s (" << extra
          << " extra stage(s)); see `fdoctl explain` and the policy.* keys\n";
  }
  if (o.wait_optimized && !optimized())
    ctx.io().err << "fdoctl: note: --wait-optimized gave up after " << extra
                 << " extra stage(s): no optimized code yet\n";
  RunSummary summary = summarize(rows);
  if (ctx.json_output()) {
    ctx.emit({{"program", reg},
              {"entry", o.entry},
              {"args", call_params.args},
              {"buffers", call_params.buffers},
              {"stages", results},
              {"summary", to_json(summary)}});
    return ok();
  }
  out << render_summary(summary, rows);
  if (o.show_buffers && !results.empty() && results.back().contains("buffers")) {
    out << "\nbuffers after the last stage:\n";
    std::size_t i = 0;
    for (const json& b : results.back()["buffers"])
      out << "  @" << i++ << " " << b.value("type", "?") << ": "
          << (b.contains("data") ? b["data"].dump() : b.value("base64", "")) << "\n";
  }
  return ok();
}

} // namespace fdo::ctl
