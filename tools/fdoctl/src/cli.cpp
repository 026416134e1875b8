#include "fdo/ctl/cli.h"

#include "annotate.h"
#include "context.h"
#include "fdo/version.h"
#include "web/web_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <ostream>

namespace fdo::ctl {

ExitCode exit_code_for(const Error& error) {
  switch (error.code()) {
  case Errc::not_found:
    return ExitCode::not_found;
  case Errc::invalid_argument:
    return ExitCode::usage;
  default:
    return ExitCode::failed;
  }
}

namespace {

constexpr const char* kFooter = R"(Exit status: 0 ok, 1 the daemon (or store) reported an error,
2 usage or invalid input, 3 cannot connect to fdod, 4 not found.
Environment: FDO_SOCKET (default socket), FDO_STATE_DIR (default --state-dir), FDO_STORE
(default --store).
Manual: docs/fdoctl.md)";

// Edit distance counting a swap of two neighbours as one edit (optimal
// string alignment), for suggesting a command to a mistyped one.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// " (did you mean 'X'?)" for the closest of `names` within a third of the
// word's length (at least 1 edit; 2 for words of 6 letters or more), or a
// command that starts with the word; empty when nothing is that close.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& names) {
  std::string best;
  std::size_t best_d = std::max<std::size_t>(1, word.size() / 3) + 1;
  for (const std::string& n : names) {
    std::size_t d = n.rfind(word, 0) == 0 && !word.empty() ? 1 : edit_distance(word, n);
    if (d < best_d) {
      best_d = d;
      best = n;
    }
  }
  return best.empty() ? std::string() : " (did you mean '" + best + "'?)";
}

// --timeout: seconds, 0 = no limit, at most a year (so it converts exactly).
constexpr double kMaxTimeoutS = 365.0 * 24 * 3600;
std::string check_timeout(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || !(v >= 0) || v > kMaxTimeoutS)
    return "--timeout takes seconds from 0 (no limit) to 31536000 (a year), got '" + text + "'";
  return {};
}

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : std::move(fallback);
}

} // namespace

int run_cli(const std::vector<std::string>& args, Io& io) {
  CLI::App app{"fdoctl: run programs through fdod's stages and inspect, diff, export and pin "
               "their optimization profiles"};
  app.name("fdoctl");
  app.footer(kFooter);
  app.require_subcommand(1);
  app.set_version_flag("--version", "fdoctl (fdo) " + std::string(kVersion),
                       "Print the version and exit");
  // Global options may also follow the command (`fdoctl profiles --json`).
  app.fallthrough();

  Globals g;
  g.socket = default_socket_path();
  g.state_dir = env_or("FDO_STATE_DIR", "");
  app.add_option("--socket", g.socket,
                 "fdod's Unix socket (default: $FDO_SOCKET, else /run/fdod/fdod.sock)");
  app.add_option("--state-dir", g.state_dir,
                 "fdod's state directory: read commands fall back to reading its profiles.db "
                 "read-only when the daemon cannot be reached (default: $FDO_STATE_DIR)");
  g.store = env_or("FDO_STORE", "");
  app.add_option("--store", g.store,
                 "the profile store read commands read when fdod is not asked (--offline) or "
                 "cannot be reached: a path or a postgresql:// URI (default: "
                 "<state-dir>/profiles.db; $FDO_STORE)");
  app.add_flag("--offline", g.offline,
               "never contact fdod: read the profile store (--store, or under --state-dir) only");
  app.add_flag("--json", g.json, "machine output: exactly one JSON document on stdout");
  app.add_option("--timeout", g.timeout_s,
                 "seconds to wait for one reply from fdod (default 300; 0 = no limit)")
      ->check(CLI::Validator(check_timeout, "SECONDS", "timeout"));

  std::function<Status(Context&)> action;

  // run
  RunOptions run;
  auto* run_cmd = app.add_subcommand(
      "run", "Register an IR file and execute an entry for N stages, a row per stage, then the "
             "speed-up summary");
  run_cmd->add_option("FILE", run.file, "LLVM IR text (.ll) or bitcode (.bc)")->required();
  run_cmd->add_option("--entry,-e", run.entry, "the function to execute")->required();
  run_cmd
      ->add_option("--arg,-a", run.args,
                   "one argument per parameter, in order: integers (decimal or 0x hex), "
                   "floats, or @N for a pointer parameter (the N-th --buffer); repeat")
      ->allow_extra_args(false);
  run_cmd
      ->add_option("--buffer,-b", run.buffers,
                   "a buffer for pointer parameters: TYPE:v1,v2,... | TYPE:zeros=N | "
                   "u8:text=STRING | TYPE:file=PATH (TYPE: i8 u8 i16 u16 i32 u32 i64 u64 f32 "
                   "f64); repeat")
      ->allow_extra_args(false);
  run_cmd->add_option("--stages,-n", run.stages, "how many stages to execute (default 6)");
  run_cmd->add_option("--name", run.name, "program name shown by fdod (default: the file's stem)");
  run_cmd->add_flag("--show-buffers", run.show_buffers,
                    "print the buffers as the last stage left them");
  run_cmd->add_flag("--wait-optimized", run.wait_optimized,
                    "after the N stages, keep executing until a stage runs code optimized with "
                    "the profile (a background tier-up may land after the last stage)");
  run_cmd
      ->add_option("--wait-timeout", run.wait_timeout_s,
                   "longest --wait-optimized keeps going, seconds (default 60)")
      ->check(CLI::Range(0.0, 86400.0));
  run_cmd->callback([&] { action = [&](Context& c) { return cmd_run(c, run); }; });

  // profiles
  auto* profiles_cmd = app.add_subcommand("profiles", "List profiles");
  profiles_cmd->callback([&] { action = [](Context& c) { return cmd_profiles(c); }; });

  // programs, program delete
  auto* programs_cmd = app.add_subcommand("programs", "List your registered programs");
  programs_cmd->callback([&] { action = [](Context& c) { return cmd_programs(c); }; });
  auto* program_cmd = app.add_subcommand("program", "Manage one registered program");
  program_cmd->require_subcommand(1);
  std::string program_id;
  auto* program_delete = program_cmd->add_subcommand(
      "delete", "Delete a program: its registration, stored bytes and key mappings");
  program_delete->add_option("PROGRAM", program_id, "program id or a unique prefix")->required();
  program_delete->callback(
      [&] { action = [&](Context& c) { return cmd_program_delete(c, program_id); }; });

  // profile ...
  auto* profile_cmd = app.add_subcommand("profile", "Inspect and manage one profile");
  profile_cmd->require_subcommand(1);
  std::string key;
  std::optional<std::int64_t> version;
  bool counts = false;
  auto* show = profile_cmd->add_subcommand("show", "One version of a profile (current by default)");
  show->add_option("KEY", key, "profile key or a unique prefix")->required();
  show->add_option("--version,-v", version, "the version to show (default: current)");
  show->add_flag("--counts", counts, "also print every function's raw counters");
  show->callback([&] {
    action = [&](Context& c) {
      return cmd_profile_show(c, key, version, counts ? RawCounts::print : RawCounts::omit);
    };
  });

  auto* history = profile_cmd->add_subcommand("history", "Every retained version of a profile");
  history->add_option("KEY", key, "profile key or a unique prefix")->required();
  history->callback([&] { action = [&](Context& c) { return cmd_profile_history(c, key); }; });

  std::int64_t v1 = 0, v2 = 0;
  double threshold = 1.0;
  bool all_functions = false;
  auto* diff = profile_cmd->add_subcommand(
      "diff", "Which branch weights and knobs changed between two versions, by function");
  diff->add_option("KEY", key, "profile key or a unique prefix")->required();
  diff->add_option("V1", v1, "the older version")->required();
  diff->add_option("V2", v2, "the newer version")->required();
  diff->add_option("--threshold,-t", threshold,
                   "list counters whose weight moved by at least this many percentage points "
                   "(default 1)");
  diff->add_flag("--all", all_functions,
                 "list every moved counter and name the unchanged functions too");
  diff->callback([&] {
    action = [&](Context& c) {
      return cmd_profile_diff(c, key, v1, v2, threshold,
                              all_functions ? DiffDetail::everything : DiffDetail::largest_moves);
    };
  });

  for (auto [name, op, help] :
       {std::tuple{"pin", PinOp::pin, "Pin a profile: feedback never rewrites it"},
        std::tuple{"unpin", PinOp::unpin, "Unpin a profile"},
        std::tuple{"reset", PinOp::reset,
                   "Back to no profile: the next stage compiles instrumented (history kept)"}}) {
    auto* sub = profile_cmd->add_subcommand(name, help);
    sub->add_option("KEY", key, "profile key or a unique prefix")->required();
    PinOp the_op = op;
    sub->callback([&, the_op] {
      action = [&, the_op](Context& c) { return cmd_profile_pin(c, the_op, key); };
    });
  }

  auto* profile_delete =
      profile_cmd->add_subcommand("delete", "Delete a profile with its whole history and feedback");
  profile_delete->add_option("KEY", key, "profile key or a unique prefix")->required();
  profile_delete->callback(
      [&] { action = [&](Context& c) { return cmd_profile_delete(c, key); }; });

  std::vector<std::string> export_keys;
  bool export_all = false;
  std::string format = "json", output;
  auto* exp = profile_cmd->add_subcommand(
      "export", "Export profiles as a JSON bundle, or one as an LLVM indexed profile");
  exp->add_option("KEY", export_keys, "profile keys or unique prefixes");
  exp->add_flag("--all", export_all, "every profile (json only)");
  exp->add_option("--format,-f", format, "json (default) or profdata")
      ->check(CLI::IsMember({"json", "profdata"}));
  exp->add_option("--output,-o", output, "write to FILE instead of stdout");
  exp->callback([&] {
    action = [&](Context& c) {
      return cmd_profile_export(c, export_keys,
                                export_all ? ExportScope::all_profiles : ExportScope::listed_keys,
                                format, output);
    };
  });

  std::string import_file, import_program;
  auto* imp = profile_cmd->add_subcommand(
      "import", "Import a bundle made by `profile export` (each profile becomes a new version), "
                "or with --program an LLVM indexed profile (.profdata) of the program's source");
  imp->add_option("FILE", import_file, "the bundle (- for stdin), or the .profdata")->required();
  imp->add_option("--program", import_program,
                  "FILE is a .profdata from an offline PGO build of this program's source: seed "
                  "its profile");
  imp->callback([&] {
    action = [&](Context& c) {
      if (!import_program.empty())
        return cmd_profile_import_profdata(c, import_file, import_program);
      return cmd_profile_import(c, import_file);
    };
  });

  AnnotateRequest annotate;
  bool trust_ir = false;
  auto* annotate_cmd = profile_cmd->add_subcommand(
      "annotate", "A program's IR with each block's execution count from its current profile, "
                  "in source names");
  annotate_cmd
      ->add_option("PROGRAM", annotate.target,
                   "program id (or a unique prefix), program name, or profile key (or a unique "
                   "prefix)")
      ->required();
  annotate_cmd->add_option("--function,-f", annotate.function,
                           "only this function (source or canonical name)");
  annotate_cmd->add_flag("--trust-ir", trust_ir,
                         "annotate another uid's program (its IR is parsed by LLVM in this "
                         "process)");
  annotate_cmd->callback([&] {
    annotate.foreign = trust_ir ? ForeignIr::trust : ForeignIr::refuse;
    action = [&](Context& c) { return cmd_profile_annotate(c, annotate); };
  });

  // backup, restore
  std::string backup_file;
  auto* backup = app.add_subcommand(
      "backup", "Copy the profile store under --state-dir to FILE (SQLite online backup; safe "
                "while fdod runs; full history kept)");
  backup->add_option("FILE", backup_file, "the copy to write (must not exist)")->required();
  backup->callback([&] { action = [&](Context& c) { return cmd_backup(c, backup_file); }; });
  auto* restore = app.add_subcommand(
      "restore", "Put a copy made by `backup` back as the profile store: through the running "
                 "fdod, or under --state-dir when fdod is stopped");
  restore->add_option("FILE", backup_file, "the copy to restore")->required();
  restore->callback([&] { action = [&](Context& c) { return cmd_restore(c, backup_file); }; });

  // gc
  GcOptions gc;
  auto* gc_cmd = app.add_subcommand(
      "gc", "Remove unused programs, unpinned profiles unchanged for long and orphaned cache "
            "objects");
  gc_cmd->add_flag("--dry-run", gc.dry_run, "list what would be removed; remove nothing");
  gc_cmd->add_option("--max-age", gc.max_age,
                     "unused for longer than this: days, or N h / N m / N s (default: fdod's "
                     "gc_max_age_days)");
  gc_cmd->callback([&] { action = [&](Context& c) { return cmd_gc(c, gc); }; });

  // cache stats
  auto* cache_cmd = app.add_subcommand("cache", "The compiled-output cache");
  cache_cmd->require_subcommand(1);
  auto* stats = cache_cmd->add_subcommand("stats", "Hits, misses, sizes and compiles per tier");
  stats->callback([&] { action = [](Context& c) { return cmd_cache_stats(c); }; });

  std::string program;
  auto* explain = app.add_subcommand(
      "explain", "The lineage of a program's keys and why each stage hit or missed");
  explain
      ->add_option("PROGRAM", program, "program id (IK, or a unique prefix) or the IR file itself")
      ->required();
  std::uint64_t explain_limit = 20;
  explain->add_option("--limit,-l", explain_limit,
                      "show the most recent N stages (default 20; 0 = every one the daemon keeps)");
  explain->callback(
      [&] { action = [&](Context& c) { return cmd_explain(c, program, explain_limit); }; });

  auto* status = app.add_subcommand("status", "Daemon health, workers, cache and profile counts");
  status->callback([&] { action = [](Context& c) { return cmd_status(c); }; });

  auto* doctor = app.add_subcommand(
      "doctor", "What this host can measure (hardware counters, paranoid level, PMU) and how to "
                "enable what is missing");
  DoctorOptions doctor_options;
  doctor->add_flag("--self-test", doctor_options.self_test,
                   "run known programs through a private fdod with sampling on and check each "
                   "link of the hardware feedback chain (events, samples, attribution, the "
                   "rewrite, its effect); prints a report to paste into a bug");
  doctor->add_option("--fdod", doctor_options.fdod,
                     "the fdod the self-test starts (default: beside fdoctl, else installed)");
  doctor
      ->add_option("--stages", doctor_options.max_stages,
                   "stages per self-test program at most (default 40)")
      ->check(CLI::Range(4, 1000));
  doctor->callback([&] { action = [&](Context& c) { return cmd_doctor(c, doctor_options); }; });

  auto* metrics = app.add_subcommand("metrics", "fdod's Prometheus metrics text");
  metrics->callback([&] { action = [](Context& c) { return cmd_metrics(c); }; });

  auto* config = app.add_subcommand(
      "config", "fdod's effective configuration: every key, its value, its default and whether "
                "SIGHUP changes it (root and the daemon's user)");
  config->callback([&] { action = [](Context& c) { return cmd_config(c); }; });

  add_web_command(app, action);

  std::vector<std::string> rest(args.rbegin(), args.rend());
  if (!rest.empty()) rest.pop_back(); // argv[0]
  try {
    app.parse(rest);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      app.exit(e, io.out, io.err);
      return 0;
    }
    std::string message = e.what();
    // The deepest command given, and the word after it that named none of
    // its commands: "unknown command 'shwo'" with a suggestion.
    CLI::App* at = &app;
    std::string path = "fdoctl";
    while (!at->get_subcommands().empty()) {
      at = at->get_subcommands().front();
      path += " " + at->get_name();
    }
    std::vector<std::string> names;
    for (const CLI::App* sub : at->get_subcommands({}))
      names.push_back(sub->get_name());
    std::string list;
    for (const std::string& n : names)
      list += (list.empty() ? "" : ", ") + n;
    std::string stray;
    if (!names.empty()) {
      bool after = at == &app;
      for (std::size_t i = 1; i < args.size(); ++i) {
        if (!after) {
          after = args[i] == at->get_name();
          continue;
        }
        if (args[i].empty() || args[i][0] == '-') {
          if (args[i] == "--socket" || args[i] == "--state-dir" || args[i] == "--timeout") ++i;
          continue;
        }
        stray = args[i];
        break;
      }
    }
    if (!stray.empty() && std::find(names.begin(), names.end(), stray) == names.end())
      message = (at == &app ? "unknown command '" : "unknown " + path + " command '") + stray +
                "'" + did_you_mean(stray, names) + " (commands: " + list + ")";
    else if (message.find("subcommand is required") != std::string::npos)
      message = path + " needs a command: " + list;
    io.err << "fdoctl: usage error: " << message
           << "\nRun `fdoctl --help` (or `fdoctl COMMAND --help`) for usage.\n";
    return static_cast<int>(ExitCode::usage);
  }
  if (!action) {
    io.err << "fdoctl: usage error: no command given\n" << app.help();
    return static_cast<int>(ExitCode::usage);
  }
  Context ctx(io, g);
  Status st = action(ctx);
  io.out.flush();
  if (st) return 0;
  ExitCode code = ctx.connect_failed() ? ExitCode::unreachable : exit_code_for(st.error());
  io.err << "fdoctl: error: " << st.error().message() << "\n";
  return static_cast<int>(code);
}

} // namespace fdo::ctl
