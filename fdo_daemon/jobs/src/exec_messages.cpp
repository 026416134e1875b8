#include "fdo/daemon/exec_messages.h"

#include "fdo/util/profile_wire.h"
#include "fdo/util/wire.h"
#include "message_body.h"

namespace fdo::daemon {

using namespace detail;
using wire::WireReader;
using wire::WireWriter;

namespace {

// Leads each body: a layout change is a clear error, never a misread.
constexpr std::uint32_t kJobMagic = 0x314A5845u;   // "EXJ1"
constexpr std::uint32_t kReplyMagic = 0x32525845u; // "EXR2" (2: argument value profiles)

// Least bytes an element takes, for count checks: a string is its u32 length.
constexpr std::size_t kStr = 4;
constexpr std::size_t kU64 = 8;

void put_strings(WireWriter& w, const std::vector<std::string>& v) {
  w.count(v.size());
  for (const auto& s : v)
    w.str(s);
}
std::vector<std::string> get_strings(WireReader& r) {
  std::vector<std::string> v(r.count(kStr));
  for (auto& s : v)
    s = r.str();
  return v;
}

void put_u64s(WireWriter& w, const std::vector<std::uint64_t>& v) {
  w.count(v.size());
  for (std::uint64_t x : v)
    w.u64(x);
}
std::vector<std::uint64_t> get_u64s(WireReader& r) {
  std::vector<std::uint64_t> v(r.count(kU64));
  for (auto& x : v)
    x = r.u64();
  return v;
}

// string -> u64 maps (event -> samples).
void put_counts(WireWriter& w, const std::map<std::string, std::uint64_t>& m) {
  w.count(m.size());
  for (const auto& [k, n] : m) {
    w.str(k);
    w.u64(n);
  }
}
std::map<std::string, std::uint64_t> get_counts(WireReader& r) {
  std::map<std::string, std::uint64_t> m;
  for (std::size_t i = 0, n = r.count(kStr + kU64); i < n; ++i) {
    std::string k = r.str();
    m[std::move(k)] = r.u64();
  }
  return m;
}

template <class E> std::uint8_t last_of(E last) {
  return static_cast<std::uint8_t>(last);
}

// ---- job ----

void put_job(WireWriter& w, const ExecJob& j) {
  w.u32(kJobMagic);
  w.str(j.key);
  w.str(j.entry);
  put_u64s(w, j.slots);
  w.count(j.buffer_of_param.size());
  for (std::int32_t b : j.buffer_of_param)
    w.u32(static_cast<std::uint32_t>(b));
  w.count(j.buffers.size());
  for (const ExecBufferSpec& b : j.buffers) {
    w.u64(b.size);
    w.boolean(b.fd.has_value());
    if (b.fd) w.u32(*b.fd);
  }
  w.boolean(j.return_buffers);
  w.boolean(j.verbose);
  put_strings(w, j.events);
  w.u64(j.cache_entries);
  w.boolean(j.sampling.has_value());
  if (j.sampling) {
    put_strings(w, j.sampling->events);
    w.u64(j.sampling->frequency_hz);
    w.u64(j.sampling->max_samples);
  }
  w.boolean(j.function_ranges);
  w.opt_u64(j.object_size);
  w.str(j.metadata);
}

void get_job(WireReader& r, ExecJob& j) {
  expect_magic(r, kJobMagic);
  j.key = r.str();
  j.entry = r.str();
  j.slots = get_u64s(r);
  j.buffer_of_param.resize(r.count(4));
  for (auto& b : j.buffer_of_param)
    b = static_cast<std::int32_t>(r.u32());
  j.buffers.resize(r.count(kU64 + 1));
  for (ExecBufferSpec& b : j.buffers) {
    b.size = r.u64();
    if (r.boolean()) b.fd = r.u32();
  }
  j.return_buffers = r.boolean();
  j.verbose = r.boolean();
  j.events = get_strings(r);
  j.cache_entries = r.u64();
  if (r.boolean()) {
    StageSamplingRequest s;
    s.events = get_strings(r);
    s.frequency_hz = r.u64();
    s.max_samples = r.u64();
    j.sampling = std::move(s);
  }
  j.function_ranges = r.boolean();
  j.object_size = r.opt_u64();
  j.metadata = r.str();
}

// ---- reply ----

void put_reading(WireWriter& w, const perf::EventReading& e) {
  w.str(e.name);
  w.opt_u64(e.value);
  w.u64(e.raw);
  w.u64(e.enabled_ns);
  w.u64(e.running_ns);
  w.f64(e.running_ratio);
  w.boolean(e.multiplexed);
  w.u8(static_cast<std::uint8_t>(e.status));
  w.str(e.reason);
  w.i64(e.error);
}
void get_reading(WireReader& r, perf::EventReading& e) {
  e.name = r.str();
  e.value = r.opt_u64();
  e.raw = r.u64();
  e.enabled_ns = r.u64();
  e.running_ns = r.u64();
  e.running_ratio = r.f64();
  e.multiplexed = r.boolean();
  e.status = static_cast<perf::EventStatus>(
      r.enum_u8(last_of(perf::EventStatus::other), "an event's status"));
  e.reason = r.str();
  e.error = static_cast<int>(r.i64());
}

void put_measurement(WireWriter& w, const perf::Measurement& m) {
  w.count(m.events.size());
  for (const auto& e : m.events)
    put_reading(w, e);
  w.opt_u64(m.task_clock_ns);
  w.str(m.task_clock_reason);
  w.u64(m.thread_cpu_ns);
  w.u64(m.process_cpu_ns);
  w.u64(m.wall_ns);
  w.u8(static_cast<std::uint8_t>(m.method));
}
void get_measurement(WireReader& r, perf::Measurement& m) {
  // A reading takes at least its name, the value flag, four u64, two
  // booleans... : 4 + 1 + 32 + 1 + 1 + 4 + 8.
  m.events.resize(r.count(51));
  for (auto& e : m.events)
    get_reading(r, e);
  m.task_clock_ns = r.opt_u64();
  m.task_clock_reason = r.str();
  m.thread_cpu_ns = r.u64();
  m.process_cpu_ns = r.u64();
  m.wall_ns = r.u64();
  m.method = static_cast<perf::ReadMethod>(
      r.enum_u8(last_of(perf::ReadMethod::none), "the measurement's read method"));
}

void put_samples(WireWriter& w, const StageSampleReport& s) {
  w.count(s.events.size());
  for (const perf::SamplerEvent& e : s.events) {
    w.str(e.name);
    w.u8(static_cast<std::uint8_t>(e.status));
    w.i64(e.error);
    w.str(e.reason);
    w.boolean(e.branch_stack);
  }
  for (std::uint64_t v :
       {s.frequency_hz, s.recorded, s.attributed, s.lost_samples, s.lost_records, s.throttles})
    w.u64(v);
  w.count(s.functions.size());
  for (const auto& [fn, per_event] : s.functions) {
    w.str(fn);
    put_counts(w, per_event);
  }
  put_counts(w, s.outside_jit);
  w.count(s.tallies.blocks.size());
  for (const auto& [event, fns] : s.tallies.blocks) {
    w.str(event);
    w.count(fns.size());
    for (const auto& [fn, blocks] : fns) {
      w.str(fn);
      w.count(blocks.size());
      for (const auto& [block, n] : blocks) {
        w.u32(block);
        w.u64(n);
      }
    }
  }
  w.count(s.tallies.branches.size());
  for (const auto& [fn, branches] : s.tallies.branches) {
    w.str(fn);
    w.count(branches.size());
    for (const auto& [branch, per_event] : branches) {
      w.u32(branch);
      put_counts(w, per_event);
    }
  }
  w.str(s.error);
}
void get_samples(WireReader& r, StageSampleReport& s) {
  s.events.resize(r.count(kStr + 1 + kU64 + kStr + 1));
  for (perf::SamplerEvent& e : s.events) {
    e.name = r.str();
    e.status = static_cast<perf::EventStatus>(
        r.enum_u8(last_of(perf::EventStatus::other), "a sampled event's status"));
    e.error = static_cast<int>(r.i64());
    e.reason = r.str();
    e.branch_stack = r.boolean();
  }
  for (std::uint64_t* v : {&s.frequency_hz, &s.recorded, &s.attributed, &s.lost_samples,
                           &s.lost_records, &s.throttles})
    *v = r.u64();
  for (std::size_t i = 0, n = r.count(kStr + 4); i < n; ++i) {
    std::string fn = r.str();
    s.functions[std::move(fn)] = get_counts(r);
  }
  s.outside_jit = get_counts(r);
  for (std::size_t i = 0, n = r.count(kStr + 4); i < n; ++i) {
    auto& fns = s.tallies.blocks[r.str()];
    for (std::size_t f = 0, nf = r.count(kStr + 4); f < nf; ++f) {
      auto& blocks = fns[r.str()];
      for (std::size_t b = 0, nb = r.count(4 + kU64); b < nb; ++b) {
        std::uint32_t block = r.u32();
        blocks[block] = r.u64();
      }
    }
  }
  for (std::size_t i = 0, n = r.count(kStr + 4); i < n; ++i) {
    auto& branches = s.tallies.branches[r.str()];
    for (std::size_t b = 0, nb = r.count(4 + 4); b < nb; ++b) {
      std::uint32_t branch = r.u32();
      branches[branch] = get_counts(r);
    }
  }
  s.error = r.str();
}

void put_reply(WireWriter& w, const ExecReply& reply) {
  const StageObservation& o = reply.observation;
  w.u32(kReplyMagic);
  w.u8(static_cast<std::uint8_t>(reply.outcome));
  if (reply.outcome == ExecOutcome::missing_object) return;
  w.u64(o.ret);
  w.boolean(o.exited.has_value());
  if (o.exited) w.i64(*o.exited);
  w.u64(o.exec_ns);
  w.boolean(o.measurement.has_value());
  if (o.measurement) put_measurement(w, *o.measurement);
  w.count(o.counts.size());
  for (const auto& [fn, counts] : o.counts) {
    w.str(fn);
    put_u64s(w, counts);
  }
  w.count(o.values.size());
  for (const auto& [fn, v] : o.values) {
    w.str(fn);
    wire::put_value_sites(w, v.indirect_calls);
    wire::put_value_sites(w, v.memop_sizes);
    wire::put_arg_values(w, v.arguments);
  }
  w.boolean(o.samples.has_value());
  if (o.samples) put_samples(w, *o.samples);
  w.boolean(o.function_ranges.has_value());
  if (o.function_ranges) {
    w.count(o.function_ranges->size());
    for (const jit::FunctionRange& f : *o.function_ranges) {
      w.str(f.name);
      w.u64(f.start);
      w.u64(f.size);
    }
  }
  put_u64s(w, o.buffer_sizes);
}

void get_reply(WireReader& r, ExecReply& reply) {
  StageObservation& o = reply.observation;
  expect_magic(r, kReplyMagic);
  reply.outcome =
      static_cast<ExecOutcome>(r.enum_u8(last_of(ExecOutcome::missing_object), "the outcome"));
  if (r.failed() || reply.outcome == ExecOutcome::missing_object) return;
  o.ret = r.u64();
  if (r.boolean()) {
    const std::size_t at = r.offset();
    std::int64_t status = r.i64();
    if (status < INT32_MIN || status > INT32_MAX)
      r.fail("an exit status at byte " + std::to_string(at) + " is out of range");
    o.exited = static_cast<std::int32_t>(status);
  }
  o.exec_ns = r.u64();
  if (r.boolean()) get_measurement(r, o.measurement.emplace());
  for (std::size_t i = 0, n = r.count(kStr + 4); i < n; ++i) {
    std::string fn = r.str();
    o.counts[std::move(fn)] = get_u64s(r);
  }
  for (std::size_t i = 0, n = r.count(kStr + 12); i < n; ++i) {
    jit::FunctionValueProfile& v = o.values[r.str()];
    v.indirect_calls = wire::get_value_sites(r);
    v.memop_sizes = wire::get_value_sites(r);
    v.arguments = wire::get_arg_values(r);
  }
  if (r.boolean()) get_samples(r, o.samples.emplace());
  if (r.boolean()) {
    auto& ranges = o.function_ranges.emplace();
    ranges.resize(r.count(kStr + 2 * kU64));
    for (jit::FunctionRange& f : ranges) {
      f.name = r.str();
      f.start = r.u64();
      f.size = r.u64();
    }
  }
  o.buffer_sizes = get_u64s(r);
}

} // namespace

Expected<std::string> encode_exec_job(const ExecJob& job) {
  return encode_with(put_job, job);
}

Expected<ExecJob> decode_exec_job(std::string_view bytes) {
  return decode_with(get_job, bytes, "exec job");
}

Expected<std::string> encode_exec_reply(const ExecReply& reply) {
  return encode_with(put_reply, reply);
}

Expected<ExecReply> decode_exec_reply(std::string_view bytes) {
  return decode_with(get_reply, bytes, "exec reply");
}

Expected<Message> exec_job_message(const ExecJob& job) {
  Message m;
  FDO_TRY(m.payload, encode_exec_job(job));
  m.body = TypedBody{TypedOp::exec, m.payload.size()};
  return m;
}

Expected<Message> exec_reply_message(const ExecReply& reply, std::string_view buffers) {
  Message m;
  FDO_TRY(m.payload, encode_exec_reply(reply));
  m.body = TypedBody{TypedOp::none, m.payload.size()};
  m.payload.append(buffers);
  return m;
}

Expected<Decoded<ExecJob>> exec_job_of(const Message& m) {
  FDO_TRY(std::size_t n, body_length(m, Errc::invalid_argument, "exec job"));
  std::string_view payload = m.payload;
  FDO_TRY(ExecJob job, decode_exec_job(payload.substr(0, n)));
  return Decoded<ExecJob>{std::move(job), payload.substr(n)};
}

Expected<Decoded<ExecReply>> exec_reply_of(const Message& m) {
  FDO_TRY(std::size_t n, body_length(m, Errc::corrupt, "exec reply"));
  std::string_view payload = m.payload;
  FDO_TRY(ExecReply reply, decode_exec_reply(payload.substr(0, n)));
  return Decoded<ExecReply>{std::move(reply), payload.substr(n)};
}

} // namespace fdo::daemon
