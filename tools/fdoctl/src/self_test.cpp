// The self-test's programs and its verdict on each link (self_test.h); the
// driver that runs them is self_test_run.cpp.
#include "fdo/ctl/self_test.h"

#include "fdo/util/enum_names.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

namespace fdo::ctl {

using nlohmann::json;

namespace {
constexpr EnumNames<LinkStatus, 3> kLinkNames{{{
    {LinkStatus::pass, "pass"},
    {LinkStatus::fail, "fail"},
    {LinkStatus::untested, "untested"},
}}};
} // namespace

std::string_view to_string(LinkStatus s) {
  return kLinkNames.name(s);
}

// A pseudo-random bit decides branch 0 (a store on one side keeps it a
// branch in the optimized code); the latch is branch 1.
const char* const kSelfTestBranchIr = R"(; fdoctl doctor --self-test: a branch that mispredicts
@out = global [1024 x i64] zeroinitializer

define i64 @run(i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %latch ]
  %x = phi i64 [ 88172645463325252, %entry ], [ %x1, %latch ]
  %acc = phi i64 [ 0, %entry ], [ %acc1, %latch ]
  %m = mul i64 %x, 6364136223846793005
  %x1 = add i64 %m, 1442695040888963407
  %hi = lshr i64 %x1, 33
  %bit = and i64 %hi, 1
  %c = icmp eq i64 %bit, 0
  br i1 %c, label %then, label %latch
then:
  %slot = and i64 %i, 1023
  %p = getelementptr [1024 x i64], ptr @out, i64 0, i64 %slot
  store i64 %x1, ptr %p
  br label %latch
latch:
  %acc1 = add i64 %acc, %bit
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i64 %acc1
}
)";

std::string self_test_icache_ir() {
  // Each function: a chain of multiply / shift / xor steps nothing can fold,
  // about 12 bytes of code a step. Hot functions alternate with cold ones.
  constexpr int kSteps = 1000;
  std::ostringstream ir;
  ir << "; fdoctl doctor --self-test: code that overflows the L1 i-cache\n";
  auto function = [&](const std::string& name) {
    ir << "define i64 @" << name << "(i64 %v0) noinline {\n";
    for (int k = 0; k < kSteps; ++k) {
      ir << "  %a" << k << " = mul i64 %v" << k << ", " << (2 * k + 0x9E3779B1LL) << "\n";
      ir << "  %b" << k << " = lshr i64 %a" << k << ", " << (7 + k % 23) << "\n";
      ir << "  %v" << k + 1 << " = xor i64 %a" << k << ", %b" << k << "\n";
    }
    ir << "  ret i64 %v" << kSteps << "\n}\n\n";
  };
  for (int h = 0; h < kSelfTestHotFunctions; ++h) {
    function("hot" + std::to_string(h));
    function("cold" + std::to_string(2 * h));
    function("cold" + std::to_string(2 * h + 1));
  }
  ir << "define i64 @run(i64 %n) {\nentry:\n  br label %loop\nloop:\n"
        "  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]\n"
        "  %acc = phi i64 [ 1, %entry ], [ %r"
     << kSelfTestHotFunctions - 1 << ", %loop ]\n";
  for (int h = 0; h < kSelfTestHotFunctions; ++h)
    ir << "  %r" << h << " = call i64 @hot" << h << "(i64 "
       << (h == 0 ? std::string("%acc") : "%r" + std::to_string(h - 1)) << ")\n";
  ir << "  %i.next = add i64 %i, 1\n  %done = icmp eq i64 %i.next, %n\n"
        "  br i1 %done, label %exit, label %loop\nexit:\n  ret i64 %r"
     << kSelfTestHotFunctions - 1 << "\n}\n";
  return ir.str();
}

namespace {

constexpr const char* kBranchMisses = "branch-misses";
constexpr const char* kIcacheMisses = "L1-icache-load-misses";

const json& member(const json& j, std::string_view key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::uint64_t count(const json& j) {
  return j.is_number_unsigned() || j.is_number_integer() ? j.get<std::uint64_t>() : 0;
}

// The event as the first sampled stage's worker opened it; null when no
// stage was sampled.
const json* opened_event(const SelfTestProgram& p, std::string_view name) {
  for (const json& st : p.stages) {
    const json& events = member(member(st, "samples"), "events");
    if (!events.is_array()) continue;
    for (const json& e : events)
      if (member(e, "name") == name) return &e;
    return nullptr;
  }
  return nullptr;
}

bool sampled(const SelfTestProgram& p) {
  return std::any_of(p.stages.begin(), p.stages.end(),
                     [](const json& st) { return member(st, "samples").is_object(); });
}

const json& sampling_of(const json& version) {
  return member(member(member(version, "profile"), "hardware"), "sampling");
}

// The most miss samples of `event` any version recorded, per function.
std::map<std::string, std::uint64_t> misses_by_function(const SelfTestProgram& p,
                                                        std::string_view event) {
  std::map<std::string, std::uint64_t> best;
  std::uint64_t best_total = 0;
  for (const json& v : p.versions) {
    const json& fns = member(member(sampling_of(v), "misses"), event);
    if (!fns.is_object()) continue;
    std::map<std::string, std::uint64_t> here;
    std::uint64_t total = 0;
    for (const auto& [fn, n] : fns.items()) {
      here[fn] = count(n);
      total += count(n);
    }
    if (total > best_total) {
      best_total = total;
      best = std::move(here);
    }
  }
  return best;
}

std::uint64_t total(const std::map<std::string, std::uint64_t>& m) {
  std::uint64_t t = 0;
  for (const auto& [k, v] : m)
    t += v;
  return t;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * share);
  return buf;
}

std::int64_t version_number(const json& v) {
  const json& n = member(v, "version");
  return n.is_number_integer() ? n.get<std::int64_t>() : 0;
}

// The first version the predicate holds for; 0 when none.
template <class Pred> std::int64_t first_version(const SelfTestProgram& p, Pred pred) {
  for (const json& v : p.versions)
    if (pred(member(v, "profile"))) return version_number(v);
  return 0;
}

std::string reasons(const SelfTestProgram& p) {
  std::string out;
  for (const json& v : p.versions) {
    const json& r = member(v, "reason");
    if (!r.is_string()) continue;
    if (!out.empty()) out += "; ";
    out += "v";
    out += std::to_string(version_number(v));
    out += ": ";
    out += r.get<std::string>();
  }
  return out.empty() ? "no profile version" : out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// Optimized stages' times before `version` and from it on.
Link timed(const SelfTestProgram& p, std::int64_t version, const std::string& what) {
  std::vector<double> before, after;
  for (const json& st : p.stages) {
    if (member(st, "mode") != "optimized" || !member(st, "exec_ns").is_number()) continue;
    const std::int64_t v = count(member(st, "profile_version"));
    (static_cast<std::int64_t>(v) < version ? before : after)
        .push_back(member(st, "exec_ns").get<double>());
  }
  Link l{"the effect of " + what + " is timed", LinkStatus::untested, ""};
  if (before.size() < 3 || after.size() < 3) {
    l.detail = "too few optimized stages on each side (" + std::to_string(before.size()) +
               " before, " + std::to_string(after.size()) + " after)";
    return l;
  }
  char buf[160];
  const double ratio = median(after) / median(before);
  std::snprintf(buf, sizeof buf,
                "median stage %.2f ms before, %.2f ms after (%.2fx, %zu+%zu stages)",
                median(before) / 1e6, median(after) / 1e6, ratio, before.size(), after.size());
  l.status = LinkStatus::pass;
  l.detail = buf;
  return l;
}

// Appends `link`; later links of a chain whose link did not pass are
// untested ("needs ...").
struct Chain {
  std::vector<Link>& out;
  std::string blocked; // the link that did not pass
  bool add(Link link) {
    if (!blocked.empty()) {
      link.status = LinkStatus::untested;
      link.detail = "needs: " + blocked;
    } else if (link.status != LinkStatus::pass) {
      blocked = link.name;
    }
    out.push_back(std::move(link));
    return blocked.empty();
  }
};

Link event_opens(const SelfTestProgram& p, std::string_view event) {
  Link l{std::string(event) + " opens", LinkStatus::pass, ""};
  if (!p.error.empty() && p.stages.empty()) {
    l.status = LinkStatus::fail;
    l.detail = "the program did not run: " + p.error;
    return l;
  }
  if (!sampled(p)) {
    l.status = LinkStatus::fail;
    l.detail = "no stage was sampled";
    return l;
  }
  const json* e = opened_event(p, event);
  if (e == nullptr) {
    l.status = LinkStatus::fail;
    l.detail = "fdod did not try to open it (sampling.events)";
    return l;
  }
  const std::string status =
      member(*e, "status").is_string() ? member(*e, "status").get<std::string>() : "";
  if (status == "available") {
    l.detail = "opened in the exec worker";
    return l;
  }
  l.status = LinkStatus::untested;
  l.detail = status;
  if (count(member(*e, "errno")) != 0)
    l.detail += " (errno " + std::to_string(count(member(*e, "errno"))) + ")";
  if (status == "no_pmu")
    l.detail += ": the kernel has no PMU for it (a VM without a virtual PMU?); `fdoctl doctor` "
                "says how to enable one";
  else if (status == "not_permitted")
    l.detail += ": perf_event_paranoid or a missing CAP_PERFMON forbids it; see `fdoctl doctor`";
  if (member(*e, "reason").is_string() && !member(*e, "reason").get<std::string>().empty())
    l.detail += ": " + member(*e, "reason").get<std::string>();
  return l;
}

double share_of(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

void clock_links(const SelfTestRun& run, std::vector<Link>& out) {
  Chain chain{out, {}};
  const SelfTestProgram& p = run.branch;
  std::string clock;
  std::uint64_t in_run = 0, in_program = 0, stages = 0;
  for (const json& st : p.stages) {
    const json& s = member(st, "samples");
    if (!member(s, "clock_event").is_string()) continue;
    clock = member(s, "clock_event").get<std::string>();
    ++stages;
    for (const auto& [fn, n] : member(s, "functions").items()) {
      in_program += count(n);
      if (fn == "run") in_run += count(n);
    }
  }
  Link arrive{"software clock samples arrive", LinkStatus::pass, ""};
  if (clock.empty()) {
    arrive.status = sampled(p) ? LinkStatus::untested : LinkStatus::fail;
    arrive.detail = sampled(p) ? "no software clock could be opened" : "no stage was sampled";
  } else if (in_program == 0) {
    arrive.status = LinkStatus::fail;
    arrive.detail = clock + " opened but no sample landed in the program over " +
                    std::to_string(stages) + " stages";
  } else {
    arrive.detail = clock + ": " + std::to_string(in_program) + " samples in the program over " +
                    std::to_string(stages) + " stages";
  }
  chain.add(std::move(arrive));
  const double share = share_of(in_run, in_program);
  chain.add({"clock samples land in the program's function",
             share >= 0.9 ? LinkStatus::pass : LinkStatus::fail,
             "run holds " + percent(share) + " of them"});
}

// The branch of `run` with the most sampled misses, in the version that has
// the most; nullopt when none has any.
struct TopBranch {
  std::string branch;
  std::uint64_t samples = 0, of = 0;
};
std::optional<TopBranch> top_branch(const SelfTestProgram& p) {
  std::optional<TopBranch> best;
  for (const json& v : p.versions) {
    TopBranch here;
    for (const auto& [branch, b] : member(member(sampling_of(v), "branches"), "run").items()) {
      const std::uint64_t n = count(member(member(b, "misses"), kBranchMisses));
      here.of += n;
      if (n > here.samples) {
        here.samples = n;
        here.branch = branch;
      }
    }
    if (here.of > 0 && (!best || here.of > best->of)) best = here;
  }
  return best;
}

void branch_links(const SelfTestRun& run, std::vector<Link>& out) {
  Chain chain{out, {}};
  const SelfTestProgram& p = run.branch;
  const bool opened = chain.add(event_opens(p, kBranchMisses));
  // Beside the chain: without a stack, attribution uses each sample's IP.
  const json* e = opened ? opened_event(p, kBranchMisses) : nullptr;
  if (e == nullptr)
    out.push_back(
        {"branch stack (LBR) on branch-misses", LinkStatus::untested, "needs: " + chain.blocked});
  else if (member(*e, "branch_stack") == true)
    out.push_back({"branch stack (LBR) on branch-misses", LinkStatus::pass,
                   "samples carry the branch stack: a miss is attributed to the mispredicted "
                   "branch itself"});
  else
    out.push_back({"branch stack (LBR) on branch-misses", LinkStatus::untested,
                   "the CPU or kernel refused a branch stack: attribution uses each sample's IP, "
                   "which may skid past the branch (docs/perf.md)"});

  const auto misses = misses_by_function(p, kBranchMisses);
  const std::uint64_t all = total(misses);
  chain.add({"branch-miss samples arrive", all > 0 ? LinkStatus::pass : LinkStatus::fail,
             all > 0 ? std::to_string(all) + " in the program (" +
                           std::to_string(misses.count("run") ? misses.at("run") : 0) + " in run)"
                     : "no version of the profile recorded a branch-miss sample"});

  const std::string want = std::to_string(kSelfTestBranch);
  const auto top = top_branch(p);
  chain.add({"miss samples land on the mispredicting IR branch",
             top && top->branch == want ? LinkStatus::pass : LinkStatus::fail,
             top ? "branch " + top->branch + " of run holds " + std::to_string(top->samples) +
                       " of " + std::to_string(top->of) + " (expected branch " + want + ")"
                 : "no miss sample was attributed to a branch of run"});

  const std::int64_t marked = first_version(p, self_test_branch_marked);
  chain.add({"the rewrite marks the branch !unpredictable",
             marked > 0 ? LinkStatus::pass : LinkStatus::fail,
             marked > 0 ? "profile v" + std::to_string(marked)
                        : "no version marks it; the rewrites: " + reasons(p)});
  chain.add(timed(p, marked, "the mark"));
}

void icache_links(const SelfTestRun& run, std::vector<Link>& out) {
  Chain chain{out, {}};
  const SelfTestProgram& p = run.icache;
  chain.add(event_opens(p, kIcacheMisses));
  const auto misses = misses_by_function(p, kIcacheMisses);
  const std::uint64_t all = total(misses);
  chain.add({"i-cache miss samples arrive", all > 0 ? LinkStatus::pass : LinkStatus::fail,
             all > 0 ? std::to_string(all) + " in the program"
                     : "no version of the profile recorded an i-cache miss sample"});
  std::uint64_t hot = 0;
  for (const auto& [fn, n] : misses)
    if (fn.starts_with("hot")) hot += n;
  const double share = share_of(hot, all);
  chain.add({"miss samples land in the hot functions",
             share >= 0.8 ? LinkStatus::pass : LinkStatus::fail,
             "hot0..hot" + std::to_string(kSelfTestHotFunctions - 1) + " hold " + percent(share)});
  const std::int64_t laid_out = first_version(p, self_test_hot_laid_out);
  chain.add({"the rewrite lays the hot functions out together",
             laid_out > 0 ? LinkStatus::pass : LinkStatus::fail,
             laid_out > 0 ? "profile v" + std::to_string(laid_out)
                          : "no version lays them out; the rewrites: " + reasons(p)});
  chain.add(timed(p, laid_out, "the layout"));
}

} // namespace

bool self_test_branch_marked(const json& profile) {
  const json& u = member(member(member(profile, "functions"), "run"), "unpredictable");
  return u.is_array() && std::find(u.begin(), u.end(), json(kSelfTestBranch)) != u.end();
}

bool self_test_hot_laid_out(const json& profile) {
  for (int h = 0; h < kSelfTestHotFunctions; ++h)
    if (member(member(member(profile, "functions"), "hot" + std::to_string(h)), "layout") == "hot")
      return true;
  return false;
}

std::vector<Link> evaluate_self_test(const SelfTestRun& run) {
  std::vector<Link> out;
  if (!run.daemon_error.empty()) {
    out.push_back({"a private fdod starts", LinkStatus::fail, run.daemon_error});
    return out;
  }
  out.push_back({"a private fdod starts", LinkStatus::pass, "sampling every stage"});
  clock_links(run, out);
  branch_links(run, out);
  icache_links(run, out);
  return out;
}

namespace {
std::string host_line(const SelfTestRun& run) {
  const json& caps = run.capabilities;
  const json& perf = member(caps, "perf");
  const json& target = member(caps, "target");
  std::string line = "fdo " + (member(caps, "fdo_version").is_string()
                                   ? member(caps, "fdo_version").get<std::string>()
                                   : "?");
  if (member(target, "cpu").is_string())
    line += ", cpu " + member(target, "cpu").get<std::string>();
  if (member(perf, "perf_event_paranoid").is_number_integer())
    line +=
        ", perf_event_paranoid " + std::to_string(member(perf, "perf_event_paranoid").get<int>());
  const json& pmus = member(perf, "kernel_pmus");
  std::string names;
  if (pmus.is_array())
    for (const json& n : pmus)
      if (n.is_string()) names += (names.empty() ? "" : " ") + n.get<std::string>();
  line += ", kernel PMUs: " + (names.empty() ? std::string("none") : names);
  return line;
}
} // namespace

std::string render_self_test(const SelfTestRun& run, const std::vector<Link>& links) {
  std::ostringstream out;
  out << "fdo hardware self-test\nhost: " << host_line(run) << "\n\n";
  int counts[3] = {0, 0, 0};
  for (const Link& l : links) {
    ++counts[static_cast<int>(l.status)];
    std::string tag = "[";
    tag += to_string(l.status);
    tag += "]";
    tag.resize(11, ' ');
    out << tag << l.name << ": " << l.detail << "\n";
  }
  out << "\n" << counts[0] << " passed, " << counts[1] << " failed, " << counts[2] << " untested\n";
  return out.str();
}

json self_test_json(const SelfTestRun& run, const std::vector<Link>& links) {
  json arr = json::array();
  for (const Link& l : links)
    arr.push_back(
        {{"link", l.name}, {"status", std::string(to_string(l.status))}, {"detail", l.detail}});
  return {{"host", host_line(run)}, {"links", arr}};
}

} // namespace fdo::ctl
