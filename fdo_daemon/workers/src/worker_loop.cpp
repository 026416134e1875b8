#include "fdo/daemon/worker_loop.h"

#include "fdo/util/log.h"
#include "worker_signals.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <optional>
#include <sched.h>
#include <string_view>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fdo::daemon {

using detail::read_vm_bytes;

namespace {

rlim_t clamp_soft(rlim_t want, const rlimit& original) {
  if (original.rlim_max != RLIM_INFINITY && want > original.rlim_max) return original.rlim_max;
  return want;
}

// Applies one job's RLIMIT_AS soft limit; restores the limit the worker
// started with on destruction (the hard limit is never touched).
class AddressSpaceScope {
public:
  explicit AddressSpaceScope(const rlimit& orig_as) : as_(orig_as) {}
  AddressSpaceScope(const AddressSpaceScope&) = delete;
  AddressSpaceScope& operator=(const AddressSpaceScope&) = delete;
  ~AddressSpaceScope() {
    if (as_set_) ::setrlimit(RLIMIT_AS, &as_);
  }

  Status apply(const JobLimits& limits, std::uint64_t vm_now) {
    if (limits.address_space_bytes == 0) return ok();
    std::uint64_t want = vm_now > UINT64_MAX - limits.address_space_bytes
                             ? UINT64_MAX
                             : vm_now + limits.address_space_bytes;
    rlimit r{clamp_soft(static_cast<rlim_t>(want), as_), as_.rlim_max};
    // Clamped to the sandbox's hard limit, the job's limit is the one in
    // force already (the usual case): no call to set it, none to restore.
    if (r.rlim_cur == as_.rlim_cur) return ok();
    if (::setrlimit(RLIMIT_AS, &r) != 0) return Error::from_errno("setrlimit(RLIMIT_AS)", errno);
    as_set_ = true;
    return ok();
  }

private:
  rlimit as_;
  bool as_set_ = false;
};

// A job's RLIMIT_CPU soft limit: the CPU the worker has used so far, in whole
// seconds rounded up, plus the job's allowance (effective_cpu_seconds). The
// limit counts the whole process, so it follows the worker's usage; it is set
// only when that sum changes (once per CPU-second the worker uses, or for a
// job with another allowance), not twice per job. After a short job it stays
// in force: a process cannot use more CPU than its wall time times the host's
// CPUs, so a job shorter than half its allowance over the CPUs leaves at least
// half of it for the reply and the wait for the next job (and the next job
// sets its own). After a longer job it is lifted, as it was before the job.
// The CPU used is read (getrusage) only when it may have reached another
// whole second since the last reading: the process cannot have used more
// than the wall time since then times the host's CPUs, so between readings
// a job with the same allowance finds the limit it needs in force.
class CpuLimit {
public:
  CpuLimit(const rlimit& original, long cpus)
      : original_(original), cpus_(std::max<long>(cpus, 1)) {}

  // The limits the worker runs under changed (the sandbox lowered the hard
  // limit): what is in force now is not known to be a job's.
  void rebase(const rlimit& original) {
    original_ = original;
    armed_.reset();
  }

  Status arm(const JobLimits& limits) {
    const std::uint64_t allowance = effective_cpu_seconds(limits);
    const auto now = std::chrono::steady_clock::now();
    if (armed_ && reading_ && allowance == armed_allowance_) {
      const auto since = std::chrono::duration_cast<std::chrono::microseconds>(now - reading_->at);
      const std::uint64_t most_us =
          reading_->used_us + static_cast<std::uint64_t>(std::max<std::int64_t>(since.count(), 0)) *
                                  static_cast<std::uint64_t>(cpus_);
      if (most_us <= reading_->used_s * 1000000) return ok(); // still in the same second
    }
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    std::uint64_t used_us = std::uint64_t(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
                            std::uint64_t(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    std::uint64_t used_s = (used_us + 999999) / 1000000;
    reading_ = Reading{now, used_us, used_s};
    rlim_t want = clamp_soft(static_cast<rlim_t>(used_s + allowance), original_);
    if (armed_ != want) {
      rlimit c{want, original_.rlim_max};
      if (::setrlimit(RLIMIT_CPU, &c) != 0)
        return Error::from_errno("setrlimit(RLIMIT_CPU)", errno);
      armed_ = want;
    }
    armed_allowance_ = allowance; // the limit in force is this allowance's
    return ok();
  }

  // Puts back the limit the worker started with (before binding: the
  // sandbox's limits are read afterwards as the worker's own).
  void lift() {
    if (!armed_) return;
    ::setrlimit(RLIMIT_CPU, &original_);
    armed_.reset();
  }

  // After the handler: lifts the job's limit unless the job was short enough
  // that what it leaves of its allowance covers the reply.
  void after_job(std::chrono::steady_clock::duration wall, const JobLimits& limits) {
    if (!armed_) return;
    // In nanoseconds: whole seconds over 2 x CPUs would round to 0 on a host
    // with more CPUs than the allowance has seconds.
    const auto keep_below =
        std::chrono::nanoseconds(std::chrono::seconds(effective_cpu_seconds(limits))) /
        (2 * static_cast<std::int64_t>(cpus_));
    if (wall < keep_below) return;
    lift();
  }

private:
  // The process's CPU time when last read.
  struct Reading {
    std::chrono::steady_clock::time_point at;
    std::uint64_t used_us = 0;
    std::uint64_t used_s = 0; // rounded up
  };
  rlimit original_;
  long cpus_;
  std::optional<rlim_t> armed_; // the soft limit this object set and left in force
  std::uint64_t armed_allowance_ = 0;
  std::optional<Reading> reading_;
};

Error memory_error(const JobLimits& limits) {
  if (limits.address_space_bytes != 0)
    return make_error(Errc::resource_exhausted, "exceeded the memory limit of " +
                                                    format_bytes(limits.address_space_bytes) +
                                                    " (allocation failed)");
  return make_error(Errc::resource_exhausted, "out of memory (allocation failed)");
}

Expected<Message> call_handler(const ContextJobHandler& handler, const Message& request,
                               const JobContext& ctx) {
  try {
    return handler(request, ctx);
  } catch (const std::bad_alloc&) {
    // The handler's memory was released while unwinding; there is room to report.
    return memory_error(ctx.limits);
  } catch (const std::exception& e) {
    return make_error(Errc::internal, std::string("job handler threw an exception: ") + e.what());
  } catch (...) {
    return make_error(Errc::internal, "job handler threw a non-standard exception");
  }
}

struct Request {
  std::uint64_t id = 0;
  JobLimits limits;
  Message job;
  nlohmann::json bind; // null unless the pool asks this worker to bind
};

// What the loop adds to a reply besides the job's own result.
struct ReplyExtras {
  std::string retire;             // why the pool must replace this worker; empty = reusable
  nlohmann::json bound = nullptr; // the sandbox report, on the job that bound the worker
};

// A worker is reusable for its tenant's next job only if the job left nothing
// running and did not keep memory it cannot account for.
std::string hygiene_problem(const Fd& task_dir, std::uint64_t vm_at_bind,
                            std::uint64_t retire_growth, LeftoverThreads threads,
                            std::optional<std::size_t> counted) {
  if (std::size_t n = counted ? *counted : process_thread_count(task_dir.get());
      n > 1 && threads == LeftoverThreads::retire)
    return "the job left " + std::to_string(n - 1) + " thread(s) running";
  if (retire_growth != 0 && vm_at_bind != 0) {
    std::uint64_t vm = read_vm_bytes();
    if (vm > vm_at_bind + retire_growth)
      return "its mapped memory grew by " + format_bytes(vm - vm_at_bind) +
             " since it was bound (over " + format_bytes(retire_growth) + ")";
  }
  return {};
}

Expected<Request> parse_request(Message&& frame, std::uint64_t& id_out) {
  if (frame.envelope) {
    // A typed job ("FDO3"): the envelope's fixed fields, no tree.
    const TypedEnvelope& e = *frame.envelope;
    id_out = e.id;
    if (e.kind != TypedEnvelope::Kind::job)
      return make_error(Errc::invalid_argument, "job request's envelope is a reply's");
    if (frame.body->op == TypedOp::none)
      return make_error(Errc::invalid_argument, "typed job request names no op");
    FDO_TRY_STATUS(validate(e.limits));
    Request r;
    r.id = e.id;
    r.limits = e.limits;
    r.job.body = frame.body;
    r.job.payload = std::move(frame.payload);
    r.job.fds = std::move(frame.fds);
    r.bind = e.extra;
    return r;
  }
  const auto& h = frame.header;
  if (!h.is_object())
    return make_error(Errc::invalid_argument, "job request header is not an object");
  auto id = h.find("id");
  if (id == h.end() || !id->is_number_unsigned())
    return make_error(Errc::invalid_argument, "job request has no numeric 'id'");
  id_out = id->get<std::uint64_t>();
  auto limits = h.find("limits");
  if (limits == h.end()) return make_error(Errc::invalid_argument, "job request has no 'limits'");
  FDO_TRY(JobLimits l, job_limits_from_json(*limits));
  FDO_TRY_STATUS(validate(l));
  auto job = h.find("job");
  if (job == h.end()) return make_error(Errc::invalid_argument, "job request has no 'job' header");
  Request r;
  r.id = id_out;
  r.limits = l;
  r.job.header = std::move(*job);
  r.job.payload = std::move(frame.payload);
  r.job.fds = std::move(frame.fds);
  if (auto bind = h.find("bind"); bind != h.end()) r.bind = std::move(*bind);
  return r;
}

constexpr std::size_t kMaxErrorMessageBytes = 16 * kKiB;

void add_extras(nlohmann::json& header, const ReplyExtras& extras) {
  if (!extras.retire.empty()) header["retire"] = extras.retire;
  if (!extras.bound.is_null()) header["bound"] = extras.bound;
}

Status send_error(int fd, std::uint64_t id, const Error& error, const ReplyExtras& extras = {}) {
  auto err = error_to_json(error);
  if (error.message().size() > kMaxErrorMessageBytes)
    err["message"] = error.message().substr(0, kMaxErrorMessageBytes) + "... (truncated)";
  nlohmann::json header = {{"id", id}, {"ok", false}, {"error", std::move(err)}};
  add_extras(header, extras);
  return send_frame(fd, header, {}, Deadline::never());
}

Error output_too_large(std::uint64_t size, const JobLimits& limits) {
  return make_error(Errc::resource_exhausted,
                    "job output of " + std::to_string(size) + " bytes exceeds the limit of " +
                        format_bytes(limits.max_output_bytes) + " (max_output_bytes)");
}

Status send_result(int fd, std::uint64_t id, Expected<Message> result, const JobLimits& limits,
                   const ReplyExtras& extras) {
  if (!result) return send_error(fd, id, result.error(), extras);
  if (result->body) {
    // A typed reply ("FDO3"). What counts against max_output_bytes is the
    // payload, as a CBOR reply's result header and payload.
    if (result->payload.size() > limits.max_output_bytes)
      return send_error(fd, id, output_too_large(result->payload.size(), limits), extras);
    TypedEnvelope envelope;
    envelope.kind = TypedEnvelope::Kind::reply;
    envelope.id = id;
    envelope.retire = extras.retire;
    envelope.extra = extras.bound;
    Status sent = send_typed_frame(fd, envelope, *result->body, result->payload);
    // Refused before a byte was written (a bind report that does not encode):
    // the error goes instead, as for a CBOR reply.
    if (!sent && sent.error().code() == Errc::invalid_argument)
      return send_error(fd, id, sent.error(), extras);
    return sent;
  }
  auto result_header = encode_header(result->header);
  if (!result_header) return send_error(fd, id, result_header.error(), extras);
  std::uint64_t size = result_header->size() + result->payload.size();
  if (size > limits.max_output_bytes)
    return send_error(fd, id, output_too_large(size, limits), extras);
  nlohmann::json envelope = {{"id", id}, {"ok", true}};
  add_extras(envelope, extras);
  // The result is spliced in already encoded: it may be large, and was
  // encoded once above to check its size.
  auto header = encode_header_with(envelope, "result", *result_header);
  if (!header) return send_error(fd, id, header.error(), extras);
  return send_frame_encoded(fd, *header, result->payload, Deadline::never());
}

Expected<nlohmann::json> bind_worker(const BindHandler& bind, const nlohmann::json& request) {
  if (!bind) return make_error(Errc::unsupported, "this worker program cannot enter a sandbox");
  if (!request.is_object() || !request.contains("spec"))
    return make_error(Errc::invalid_argument, "bind request without a sandbox spec");
  auto report = bind(request["spec"]);
  if (!report) return std::move(report).error().context("enter the sandbox");
  return report;
}

int channel_broken(const Error& e) {
  // The daemon went away: nothing to report to, and nothing wrong with us.
  if (e.code() == Errc::unavailable) return 0;
  log::error("worker channel broken: " + e.describe());
  return 2;
}

} // namespace

int run_worker_loop(int fd, ContextJobHandler handler, WorkerLoopOptions options) {
  if (auto st = detail::setup_worker_process(); !st) {
    log::error("worker setup failed: " + st.error().describe());
    return 1;
  }
  auto guard = detail::FatalSignalGuard::install(fd);
  if (!guard) {
    log::error("worker setup failed: " + guard.error().describe());
    return 1;
  }
  rlimit orig_as{}, orig_cpu{};
  ::getrlimit(RLIMIT_AS, &orig_as);
  ::getrlimit(RLIMIT_CPU, &orig_cpu);
  CpuLimit cpu_limit(orig_cpu, ::sysconf(_SC_NPROCESSORS_ONLN));
  bool bound = false;
  std::uint64_t vm_at_bind = 0, retire_growth = 0;
  // Kept open for the per-job thread count (process_thread_count).
  Fd task_dir(::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC));

  nlohmann::json hello = {
      {"hello", {{"protocol", kWorkerProtocolVersion}, {"pid", static_cast<long>(::getpid())}}}};
  if (auto st = send_frame(fd, hello, {}, Deadline::never()); !st)
    return channel_broken(st.error());

  for (;;) {
    // Descriptors sent with the job (memfd buffers): open until its reply is sent.
    std::vector<Fd> job_fds;
    auto frame = recv_message(fd, options.request_limits, Deadline::never(), -1, &job_fds);
    if (!frame) return channel_broken(frame.error());
    std::uint64_t id = 0;
    auto request = parse_request(std::move(*frame), id);
    if (!request) {
      if (auto st = send_error(fd, id, request.error().context("malformed job request")); !st)
        return channel_broken(st.error());
      continue;
    }
    JobContext ctx{request->id, request->limits};
    ReplyExtras extras;
    if (!request->bind.is_null() && !bound) {
      cpu_limit.lift();
      auto report = bind_worker(options.bind, request->bind);
      if (!report) {
        // Whatever part of the sandbox was applied, this process is no
        // longer a clean unbound worker.
        extras.retire = "binding failed";
        if (auto st = send_error(fd, ctx.id, report.error(), extras); !st)
          return channel_broken(st.error());
        continue;
      }
      bound = true;
      extras.bound = std::move(*report);
      // The sandbox may have lowered the hard limits: per-job limits are
      // applied under (and restored to) what it left.
      ::getrlimit(RLIMIT_AS, &orig_as);
      ::getrlimit(RLIMIT_CPU, &orig_cpu);
      cpu_limit.rebase(orig_cpu);
      vm_at_bind = read_vm_bytes();
      retire_growth = request->bind.value("retire_growth_bytes", std::uint64_t{0});
    }
    std::optional<Expected<Message>> result;
    {
      AddressSpaceScope scope(orig_as);
      std::uint64_t vm = read_vm_bytes();
      Status st = scope.apply(ctx.limits, vm);
      if (st) st = cpu_limit.arm(ctx.limits);
      if (!st) {
        result.emplace(std::move(st).error().context("apply job limits"));
      } else {
        guard->job_started(ctx.id, vm);
        const auto started = std::chrono::steady_clock::now();
        result.emplace(call_handler(handler, request->job, ctx));
        guard->job_ended();
        cpu_limit.after_job(std::chrono::steady_clock::now() - started, ctx.limits);
      }
    } // the address-space limit restored here, before the answer is built
    // What the job printed is in the capture files before the reply leaves.
    std::fflush(stdout);
    std::fflush(stderr);
    if (bound)
      extras.retire =
          hygiene_problem(task_dir, vm_at_bind, retire_growth, options.leftover_threads,
                          options.threads_after_job ? options.threads_after_job() : std::nullopt);
    if (extras.retire.empty() && options.retire_after) extras.retire = options.retire_after();
    if (auto st = send_result(fd, ctx.id, std::move(*result), ctx.limits, extras); !st)
      return channel_broken(st.error());
  }
}

int run_worker_loop(int fd, JobHandler handler, WorkerLoopOptions options) {
  return run_worker_loop(
      fd, ContextJobHandler([h = std::move(handler)](const Message& request, const JobContext&) {
        return h(request);
      }),
      options);
}

std::size_t process_thread_count(int task_dir_fd) {
  // procfs gives /proc/PID/task a link count of 2 + the number of threads:
  // one fstat, no text to generate and parse.
  Fd opened;
  if (task_dir_fd < 0) {
    opened.reset(::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    task_dir_fd = opened.get();
  }
  struct stat st {};
  if (task_dir_fd < 0 || ::fstat(task_dir_fd, &st) != 0 || st.st_nlink < 3) return 1;
  return static_cast<std::size_t>(st.st_nlink - 2);
}

Expected<int> worker_fd_from_args(int argc, const char* const* argv) {
  std::string_view value;
  bool found = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--fd" && i + 1 < argc) {
      value = argv[i + 1];
      found = true;
      break;
    }
    if (a.starts_with("--fd=")) {
      value = a.substr(5);
      found = true;
      break;
    }
  }
  if (!found)
    return make_error(Errc::invalid_argument,
                      "missing '--fd N': this program is a worker started by fdod's worker pool");
  int fd = -1;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), fd);
  if (ec != std::errc() || end != value.data() + value.size() || fd < 0)
    return make_error(Errc::invalid_argument,
                      "--fd '" + std::string(value) + "' is not a file descriptor number");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
    return make_error(Errc::invalid_argument,
                      "--fd " + std::to_string(fd) + " is not an open socket");
  return fd;
}

Expected<int> worker_nice_from_args(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--nice") continue;
    const std::string_view value = i + 1 < argc ? argv[i + 1] : "";
    int nice = -1;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), nice);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || nice < 0 ||
        nice > 19)
      return make_error(Errc::invalid_argument,
                        "--nice '" + std::string(value) + "' is not a nice value from 0 to 19");
    return nice;
  }
  return 0;
}

Status lower_cpu_priority(int nice) {
  if (nice <= 0) return ok();
  // Linux keeps both per thread and hands them to the threads a thread
  // starts: set here, before the worker starts any, they cover the process.
  const sched_param param{};
  if (::sched_setscheduler(0, SCHED_BATCH, &param) != 0)
    return Error::from_errno("sched_setscheduler(SCHED_BATCH)", errno);
  if (::setpriority(PRIO_PROCESS, 0, nice) != 0)
    return Error::from_errno("setpriority(" + std::to_string(nice) + ")", errno);
  return ok();
}

} // namespace fdo::daemon
