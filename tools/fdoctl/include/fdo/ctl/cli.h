// fdoctl's command line (CLI11): global options, every command, exit codes.
// main.cpp is a shim over run_cli so tests drive the same code in-process.
#pragma once

#include "fdo/util/expected.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace fdo::ctl {

// Exit codes scripts can rely on (docs/fdoctl.md, "EXIT STATUS").
enum class ExitCode : int {
  ok = 0,
  failed = 1,      // the daemon (or store) reported an error, or the connection broke mid-request
  usage = 2,       // bad command line, unreadable input file, invalid argument values
  unreachable = 3, // cannot connect to fdod (and no usable --state-dir for a read command)
  not_found = 4,   // no such profile, version, program or entry; a key prefix matching nothing
};

// The exit code for an error that did not come from connecting.
ExitCode exit_code_for(const Error& error);

struct Io {
  std::ostream& out;
  std::ostream& err;
  bool out_is_tty = false; // progress lines and binary-output refusal
  bool err_is_tty = false;
};

// Parses `args` (args[0] is the program name) and runs the command.
int run_cli(const std::vector<std::string>& args, Io& io);

} // namespace fdo::ctl
