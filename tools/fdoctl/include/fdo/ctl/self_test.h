// `fdoctl doctor --self-test` (docs/perf.md, "Checking a host's hardware
// path"): known programs run through a private fdod with sampling on — a
// branch that mispredicts half the time, code that overflows the L1 i-cache —
// and each link of the hardware feedback chain is checked from what fdod
// reports: the events open, samples arrive, they land on the right function
// and IR branch, the rewrite marks the branch or lays out the code, and the
// effect is timed. A link this host cannot exercise (no PMU, no branch stack)
// is reported untested with the reason, as are the links after it.
//
// evaluate_self_test() is pure, over what the driver gathered
// (self_test_run.cpp), so the hardware path is tested here on recorded
// results of a host with a PMU.
#pragma once

#include "fdo/util/expected.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace fdo::ctl {

// One program's run through the private fdod.
struct SelfTestProgram {
  std::vector<nlohmann::json> stages;   // each execute result's "stage", in order
  std::vector<nlohmann::json> versions; // profile.get of every version, oldest first
  std::string error;                    // why the run stopped ("" when it completed)
};

struct SelfTestRun {
  std::string daemon_error; // fdod did not start ("" when it did)
  nlohmann::json capabilities = nlohmann::json::object();
  SelfTestProgram branch; // kSelfTestBranchIr
  SelfTestProgram icache; // self_test_icache_ir()
};

enum class LinkStatus { pass, fail, untested };
std::string_view to_string(LinkStatus s);

struct Link {
  std::string name;
  LinkStatus status = LinkStatus::untested;
  std::string detail;
};

// The programs: `run(n)` of the branch program takes a 50/50 pseudo-random
// branch (its IR branch kSelfTestBranch) n times; the i-cache program's
// `run(n)` calls kSelfTestHotFunctions functions of ~12 KB each in turn,
// with never-run ones of the same size between them in the text.
extern const char* const kSelfTestBranchIr;
constexpr std::uint32_t kSelfTestBranch = 0;
constexpr int kSelfTestHotFunctions = 4;
std::string self_test_icache_ir();

// What the rewrites under test write into a profile document: the branch
// program's run marked at kSelfTestBranch, a hot function of the i-cache
// program laid out hot. The driver stops on them; the verdicts look for them.
bool self_test_branch_marked(const nlohmann::json& profile);
bool self_test_hot_laid_out(const nlohmann::json& profile);

std::vector<Link> evaluate_self_test(const SelfTestRun& run);
// The report a user can paste into a bug: the host, then one line per link.
std::string render_self_test(const SelfTestRun& run, const std::vector<Link>& links);
nlohmann::json self_test_json(const SelfTestRun& run, const std::vector<Link>& links);

// Runs the programs through a private fdod at `fdod_path` ("" = beside this
// fdoctl, else the installed one) for at most `max_stages` stages each.
SelfTestRun run_self_test(const std::string& fdod_path, int max_stages);

} // namespace fdo::ctl
