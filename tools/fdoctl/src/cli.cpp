#include "fdo/ctl/cli.h"

#include "context.h"

#include <CLI/CLI.hpp>
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
Environment: FDO_SOCKET (default socket), FDO_STATE_DIR (default --state-dir).
Manual: docs/fdoctl.md)";

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
  app.add_flag("--offline", g.offline,
               "never contact fdod: read the profile store under --state-dir only");
  app.add_flag("--json", g.json, "machine output: exactly one JSON document on stdout");
  app.add_option("--timeout", g.timeout_s, "seconds to wait for one reply from fdod (default 300)")
      ->check(CLI::PositiveNumber);

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
  run_cmd->callback([&] { action = [&](Context& c) { return cmd_run(c, run); }; });

  // profiles
  auto* profiles_cmd = app.add_subcommand("profiles", "List profiles");
  profiles_cmd->callback([&] { action = [](Context& c) { return cmd_profiles(c); }; });

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
  explain->callback([&] { action = [&](Context& c) { return cmd_explain(c, program); }; });

  auto* status = app.add_subcommand("status", "Daemon health, workers, cache and profile counts");
  status->callback([&] { action = [](Context& c) { return cmd_status(c); }; });

  auto* doctor = app.add_subcommand(
      "doctor", "What this host can measure (hardware counters, paranoid level, PMU) and how to "
                "enable what is missing");
  doctor->callback([&] { action = [](Context& c) { return cmd_doctor(c); }; });

  auto* metrics = app.add_subcommand("metrics", "fdod's Prometheus metrics text");
  metrics->callback([&] { action = [](Context& c) { return cmd_metrics(c); }; });

  auto* config = app.add_subcommand(
      "config", "fdod's effective configuration: every key, its value, its default and whether "
                "SIGHUP changes it (root and the daemon's user)");
  config->callback([&] { action = [](Context& c) { return cmd_config(c); }; });

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
    if (message.find("subcommand is required") != std::string::npos) {
      // Name the commands the deepest command given takes.
      CLI::App* at = &app;
      std::string path = "fdoctl";
      while (!at->get_subcommands().empty()) {
        at = at->get_subcommands().front();
        path += " " + at->get_name();
      }
      std::string names;
      for (const CLI::App* sub : at->get_subcommands({}))
        names += (names.empty() ? "" : ", ") + sub->get_name();
      std::string first = args.size() > 1 ? args[1] : "";
      if (at == &app && !first.empty() && first[0] != '-')
        message = "unknown command '" + first + "' (commands: " + names + ")";
      else
        message = path + " needs a command: " + names;
    }
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
