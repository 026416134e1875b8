// One job on a pool worker (WorkerPool::Impl, worker_pool_impl.h): the job
// sent with its limits, the reply awaited within its deadline and checked
// (sizes, envelope, fatal reports), and a worker that failed it retired with
// the failure's kind counted.
#include "fdo/util/log.h"
#include "worker_pool_impl.h"

#include <algorithm>
#include <sys/wait.h>

namespace fdo::daemon {

namespace {

using detail::Child;
using detail::EndedBy;
using detail::ExitInfo;
using detail::Failure;
using detail::FatalReport;
using detail::kExitGrace;
using std::chrono::milliseconds;

// Room for the response envelope and error messages around max_output_bytes.
constexpr std::uint64_t kEnvelopeSlack = 64 * kKiB;

// The job in its envelope: a typed job in an "FDO3" frame; any other as
// CBOR written around the job's own header (no tree).
Status send_job(int sock, std::uint64_t id, const JobLimits& limits, const Message& request,
                nlohmann::json bind, Deadline deadline) {
  if (request.body) {
    TypedEnvelope envelope;
    envelope.id = id;
    envelope.limits = limits;
    envelope.extra = std::move(bind);
    return send_typed_frame(sock, envelope, *request.body, request.payload, deadline, request.fds);
  }
  FDO_TRY(std::string job_header, encode_header(request.header));
  FDO_TRY(std::string header, encode_job_envelope(id, limits, job_header, bind));
  return send_frame_encoded(sock, header, request.payload, deadline, request.fds);
}

} // namespace

Expected<Message> WorkerPool::Impl::run(const Message& request, const JobOptions& options,
                                        JobOutput* output) {
  const JobLimits& limits = options.limits;
  FDO_TRY_STATUS(validate(limits));
  // A worker may have died between jobs (OOM killer, an operator's kill):
  // that is no reason to fail this job, which it never saw. Both retries are
  // bounded, so a pool whose workers keep dying still answers.
  int dead_found = 0, send_retries = 0;
  // A background job preempted once is sent again as a foreground one, so it
  // loses its work at most once (docs/workers.md, "Background jobs").
  JobPriority priority = options.priority;
  // A caller that comes to wait for a background job raises it, waiting or
  // running (JobOptions::urgency).
  const Urgency* urgency = priority == JobPriority::background ? options.urgency.get() : nullptr;
  std::optional<Urgency::Hook> hook;
  if (urgency != nullptr)
    hook.emplace(*options.urgency, [this, urgency] {
      std::lock_guard lk(mu_);
      raise_locked(urgency);
    });
  for (;;) {
    FDO_TRY(int idx, acquire(options.tenant, priority, urgency));
    // The slot is ours alone while it is busy.
    Slot& slot = slots_[static_cast<std::size_t>(idx)];
    Child& child = *slot.child;
    if (dead_found <= 2 * opts.size && child.wait_exited(milliseconds(0))) {
      ++dead_found;
      retire_idle_worker(idx, "found dead before a job");
      continue;
    }
    nlohmann::json bind_request = nullptr;
    if (opts.bind_spec && slot.jobs == 0) {
      auto bind = opts.bind_spec(options.tenant);
      if (!bind) {
        // The process never saw a job and is still clean: back idle and
        // unbound, so whichever job takes it next sends the bind (counting a
        // job here would let this tenant's next job run without a sandbox).
        give_back_unused(idx);
        return std::move(bind).error().context("sandbox for " + opts.name + " jobs");
      }
      bind_request = std::move(*bind);
    }
    if (slot.jobs == 0 && child.cgroup() != nullptr) {
      // The job's limits, on the group: the job cannot raise these.
      CgroupLimits cl;
      if (limits.address_space_bytes != 0)
        cl.memory_max_bytes = child.cgroup()->memory_current() + limits.address_space_bytes;
      cl.pids_max = opts.cgroup_pids_max;
      if (auto st = child.cgroup()->limit(cl); !st) {
        retire_idle_worker(idx, "its cgroup limits could not be set: " + st.error().message());
        return std::move(st).error().context("cgroup of a fresh " + opts.name + " worker");
      }
    }
    child.reset_output();
    const std::uint64_t id = slot.job_id; // set when the slot was handed to us
    // A background job's limit counts only the time it is not stopped.
    const Deadline deadline = Deadline::after(limits.wall).following(slot.pauses);
    Status st = send_job(child.sock(), id, limits, request, std::move(bind_request), deadline);
    if (!st && st.error().code() == Errc::invalid_argument) {
      // Refused before a byte was written (a header too deep to encode, too
      // many descriptors): the request is at fault, the worker is fine. It goes
      // back idle without counting a job, so its next job still binds it
      // (counted as a failure, as the bind-spec failure above is).
      give_back_unused(idx);
      return std::move(st).error().context("send a job to an " + opts.name + " worker");
    }
    if (!st && st.error().code() == Errc::unavailable && send_retries < 1) {
      // The request never arrived whole, so the job did not run: safe to retry once
      // (not counting a retry when its worker was killed to free it: preempted).
      if (was_preempted(idx, id))
        priority = JobPriority::foreground;
      else
        ++send_retries;
      retire_idle_worker(idx, st.error().message());
      continue;
    }
    {
      std::lock_guard lk(mu_);
      ++jobs_;
    }
    // What the job printed is read before the slot can change hands.
    auto collect = [&] {
      if (output != nullptr && child.captures_output())
        *output = child.read_output(opts.capture_output_bytes);
    };
    if (!st) {
      collect();
      Failure kind = st.error().code() == Errc::timeout ? Failure::wall_timeout : Failure::broken;
      auto failed = fail_worker(idx, kind, st.error(), limits, std::nullopt);
      if (!was_preempted(idx, id)) return failed;
      priority = JobPriority::foreground; // sent again once a worker is free
      continue;
    }
    auto done = finish_job(idx, id, deadline, limits, collect,
                           options.after == AfterJob::retire ? "a one-off job of the daemon's" : "",
                           options.check_reply);
    // A background job whose worker was killed for a foreground one is sent
    // again once a worker is free: its caller sees a longer job, not a failure.
    if (done || !was_preempted(idx, id)) return done;
    priority = JobPriority::foreground;
  }
}

Expected<Message>
WorkerPool::Impl::finish_job(int idx, std::uint64_t id, Deadline deadline, const JobLimits& limits,
                             const std::function<void()>& collect_output,
                             const std::string& retire_after,
                             const std::function<Status(const Message&)>& check_reply) {
  Child& child = *slots_[static_cast<std::size_t>(idx)].child;

  auto saturating_add = [](std::uint64_t a, std::uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
  };
  FrameLimits fl;
  fl.max_header_bytes =
      std::min<std::uint64_t>(limits.max_output_bytes, 16 * kMiB) + kEnvelopeSlack;
  fl.max_payload_bytes = limits.max_output_bytes;
  fl.max_total_bytes = saturating_add(limits.max_output_bytes, kEnvelopeSlack);
  std::size_t trailing = 0;
  auto response = recv_message(child.sock(), fl, deadline, child.pidfd(), nullptr, &trailing);
  collect_output();
  if (!response) {
    Failure kind = Failure::broken;
    if (response.error().code() == Errc::timeout) kind = Failure::wall_timeout;
    if (response.error().code() == Errc::resource_exhausted) kind = Failure::output_too_large;
    // Garbage from a live worker is a protocol violation; a cut-off message
    // from a worker that is dying is not.
    if (response.error().code() == Errc::corrupt && !child.wait_exited(milliseconds(50)))
      kind = Failure::protocol;
    return fail_worker(idx, kind, response.error(), limits, std::nullopt);
  }

  auto protocol_error = [&](const std::string& what) {
    return fail_worker(idx, Failure::protocol, make_error(Errc::internal, what), limits,
                       std::nullopt);
  };
  // Bytes after the reply are a message out of turn (a fatal report sent as
  // it died, or garbage): the reply stands, the worker is not used again.
  const std::string out_of_turn =
      trailing == 0 ? std::string()
                    : "it sent " + std::to_string(trailing) + " bytes after its reply";
  // The checks of a reply the pool accepts, whichever envelope it came in.
  auto accept = [&](Message out, std::string retire) -> Expected<Message> {
    if (check_reply)
      if (Status st = check_reply(out); !st)
        return protocol_error("its reply: " + st.error().message());
    release(idx, /*succeeded=*/true,
            !out_of_turn.empty() ? out_of_turn
            : retire.empty()     ? retire_after
                                 : retire);
    return out;
  };
  auto log_bound = [&](const nlohmann::json& bound) {
    log::debug(opts.name + " worker pid " + std::to_string(child.pid()) +
               " bound: " + bound.dump());
  };
  if (response->envelope) {
    // A typed job's successful reply ("FDO3"): fixed fields, no tree.
    const TypedEnvelope& e = *response->envelope;
    if (e.kind != TypedEnvelope::Kind::reply) return protocol_error("response is not a reply");
    if (e.id != id) return protocol_error("response does not answer job " + std::to_string(id));
    if (!e.extra.is_null()) log_bound(e.extra);
    Message out;
    out.payload = std::move(response->payload);
    out.body = response->body;
    return accept(std::move(out), e.retire);
  }
  const auto& h = response->header;
  if (!h.is_object()) return protocol_error("response header is not an object");
  auto rid = h.find("id");
  if (rid == h.end() || !rid->is_number_unsigned() || rid->get<std::uint64_t>() != id)
    return protocol_error("response does not answer job " + std::to_string(id));
  if (auto fatal = h.find("fatal"); fatal != h.end()) {
    FatalReport report;
    if (fatal->is_object()) {
      report.signal = fatal->value("signal", 0);
      report.job_vm_bytes = fatal->value("job_vm_bytes", std::uint64_t{0});
    }
    return fail_worker(idx, Failure::broken,
                       make_error(Errc::crashed, "worker reported a fatal signal"), limits, report);
  }
  auto okv = h.find("ok");
  if (okv == h.end() || !okv->is_boolean()) return protocol_error("response has no boolean 'ok'");
  std::string retire = retire_after;
  if (auto r = h.find("retire"); r != h.end() && r->is_string()) retire = r->get<std::string>();
  if (auto b = h.find("bound"); b != h.end()) log_bound(*b);
  if (okv->get<bool>()) {
    auto result = h.find("result");
    if (result == h.end()) return protocol_error("successful response has no 'result'");
    return accept(Message{std::move(*result), std::move(response->payload)}, retire);
  }
  auto err = h.find("error");
  if (err == h.end()) return protocol_error("failed response has no 'error'");
  Error e = error_from_json(*err);
  release(idx, /*succeeded=*/false, out_of_turn.empty() ? retire : out_of_turn);
  return e;
}

Expected<Message> WorkerPool::Impl::fail_worker(int idx, Failure kind, const Error& cause,
                                                const JobLimits& limits,
                                                const std::optional<FatalReport>& report) {
  // Before the process is reaped: a stopped one is continued first.
  const bool preempted = end_job(idx) == JobEnd::preempted;
  Child& child = *slots_[static_cast<std::size_t>(idx)].child;
  const pid_t pid = child.pid();
  if (preempted) {
    // Killed to free the worker for a foreground job: not a failure of the
    // job's (run() sends it again), and the replacement is the waiter's.
    (void)child.reap();
    log::info(opts.name + " worker pid " + std::to_string(pid) +
              ": its background job was preempted for a foreground one and runs again when a "
              "worker is free");
    std::lock_guard lk(mu_);
    replace_worker_locked(slots_[static_cast<std::size_t>(idx)]);
    return make_error(Errc::unavailable, opts.name + " worker pid " + std::to_string(pid) +
                                             " was preempted for a foreground job");
  }
  EndedBy ended_by = EndedBy::pool;
  if (kind == Failure::broken && child.wait_exited(kExitGrace)) ended_by = EndedBy::itself;
  ExitInfo ended = child.reap();

  // A program that calls exit(n) ends the worker: for an exec pool that is
  // how the job ended, not a failure.
  if (opts.exit_outcome == ExitOutcome::result && kind == Failure::broken &&
      ended_by == EndedBy::itself && !report && ended.status != -1 && WIFEXITED(ended.status)) {
    const int code = WEXITSTATUS(ended.status);
    log::info(opts.name + " worker pid " + std::to_string(pid) +
              ": the program exited with status " + std::to_string(code) +
              "; starting a replacement");
    std::lock_guard lk(mu_);
    ++program_exits_;
    ++failures_.exited;
    replace_worker_locked(slots_[static_cast<std::size_t>(idx)]);
    return Message{{{"exited", {{"status", code}}}}, {}};
  }

  detail::ClassifiedFailure failed =
      detail::classify_failure({opts.name, kind, cause, limits, report, ended, pid, ended_by});
  const Error& err = failed.error;
  log::warning(err.describe() + "; starting a replacement");
  {
    std::lock_guard lk(mu_);
    ++(failures_.*failed.counter);
    replace_worker_locked(slots_[static_cast<std::size_t>(idx)]);
  }
  return err;
}

} // namespace fdo::daemon
