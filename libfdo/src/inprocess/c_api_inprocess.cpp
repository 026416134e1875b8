// The C API's in-process functions (fdo/fdo.h, "In-process execution") over
// the engine (engine.h), talking to fdod through the caller's fdo_conn.
#include "../c_api_internal.h"
#include "engine.h"

#include <memory>

using namespace fdo;

namespace {

// The engine's daemon calls go through the connection the runtime opened,
// serialised with the runtime's own calls on it by the connection's mutex.
class ConnLink final : public inprocess::DaemonLink {
public:
  explicit ConnLink(fdo_conn* conn) : conn_(conn) {}
  Expected<inprocess::LinkReply> call(std::string_view method,
                                      const nlohmann::json& params) override {
    std::lock_guard lk(conn_->mu);
    FDO_TRY(client::ReplyWithFds r, conn_->client.call_with_fds(method, params));
    return inprocess::LinkReply{std::move(r.result), std::move(r.fds)};
  }

private:
  fdo_conn* conn_;
};

} // namespace

namespace {

int mode_of(const std::string& mode) {
  return mode == "instrumented" ? FDO_CODE_INSTRUMENTED
         : mode == "optimized"  ? FDO_CODE_OPTIMIZED
                                : FDO_CODE_PLAIN;
}

} // namespace

struct fdo_inproc {
  std::unique_ptr<inprocess::Engine> engine;
};

struct fdo_inproc_thread {
  std::unique_ptr<inprocess::CallerThread> thread;
};

struct fdo_inproc_hold {
  inprocess::Hold hold;
  std::size_t entries;
};

extern "C" {

int fdo_inproc_open(fdo_conn* conn, const char* program, const char* const* entries,
                    size_t n_entries, const fdo_inproc_options* options, fdo_inproc** out,
                    fdo_error** err) {
  return capi::guarded(err, [&] {
    if (!conn || !program || !out || (n_entries != 0 && !entries) || n_entries == 0)
      return capi::fail(err, Errc::invalid_argument,
                        "fdo_inproc_open: conn, program, out and at least one entry are required");
    inprocess::EngineOptions o;
    o.program = program;
    for (size_t i = 0; i < n_entries; ++i) {
      if (!entries[i])
        return capi::fail(err, Errc::invalid_argument, "fdo_inproc_open: entry name is NULL");
      o.entries.emplace_back(entries[i]);
    }
    if (options) {
      const std::int64_t flushing = capi::raw_enum(options->flushing);
      if (flushing != FDO_INPROC_FLUSH_BACKGROUND && flushing != FDO_INPROC_FLUSH_MANUAL)
        return capi::fail(err, Errc::invalid_argument, "fdo_inproc_open: unknown flushing mode");
      o.flushing = flushing == FDO_INPROC_FLUSH_MANUAL ? inprocess::Flushing::manual
                                                       : inprocess::Flushing::background;
      if (options->flush_interval_ms != 0)
        o.flush_interval = std::chrono::milliseconds(options->flush_interval_ms);
      if (options->time_every != 0) o.time_every = options->time_every;
    }
    auto engine = inprocess::Engine::open(std::make_shared<ConnLink>(conn), std::move(o));
    if (!engine) return capi::fail(err, engine.error());
    *out = new fdo_inproc{std::move(*engine)};
    return 0;
  });
}

int fdo_inproc_entry(const fdo_inproc* inproc, const char* name, size_t* index, fdo_error** err) {
  return capi::guarded(err, [&] {
    if (!inproc || !name || !index)
      return capi::fail(err, Errc::invalid_argument,
                        "fdo_inproc_entry: inproc, name and index are required");
    auto i = inproc->engine->entry_index(name);
    if (!i)
      return capi::fail(err, Errc::not_found,
                        std::string("fdo_inproc_entry: '") + name +
                            "' was not named to fdo_inproc_open");
    *index = *i;
    return 0;
  });
}

int fdo_inproc_call(const fdo_inproc* inproc, size_t entry, uint64_t* args, uint64_t* ret) {
  if (!inproc || entry >= inproc->engine->entry_count()) return -1;
  inproc->engine->call(entry, args, ret);
  return 0;
}

int fdo_inproc_flush(fdo_inproc* inproc, fdo_inproc_flush_result* result, fdo_error** err) {
  return capi::guarded(err, [&] {
    if (!inproc) return capi::fail(err, Errc::invalid_argument, "fdo_inproc_flush: inproc is NULL");
    auto r = inproc->engine->flush();
    if (!r) return capi::fail(err, r.error());
    if (result) {
      result->batches = static_cast<uint32_t>(r->batches);
      result->stale = r->stale ? 1 : 0;
      result->swapped = r->swapped ? 1 : 0;
      result->generation = r->generation;
      result->profile_version = r->profile_version;
    }
    return 0;
  });
}

uint64_t fdo_inproc_generation(const fdo_inproc* inproc) {
  return inproc ? inproc->engine->generation() : 0;
}

int fdo_inproc_mode(const fdo_inproc* inproc) {
  return inproc ? mode_of(inproc->engine->mode()) : -1;
}

int64_t fdo_inproc_profile_version(const fdo_inproc* inproc) {
  return inproc ? inproc->engine->profile_version() : 0;
}

char* fdo_inproc_sampling_json(const fdo_inproc* inproc) {
  if (!inproc) return nullptr;
  try {
    return capi::dup_string(inproc->engine->sampling().dump());
  } catch (...) {
    return nullptr; // out of memory: nothing may cross into C
  }
}

char* fdo_inproc_variant_json(const fdo_inproc* inproc) {
  if (!inproc) return nullptr;
  try {
    return capi::dup_string(inproc->engine->variant().dump());
  } catch (...) {
    return nullptr; // out of memory: nothing may cross into C
  }
}

int fdo_inproc_hold_open(const fdo_inproc* inproc, fdo_inproc_hold** out, fdo_error** err) {
  return capi::guarded(err, [&] {
    if (!inproc || !out)
      return capi::fail(err, Errc::invalid_argument,
                        "fdo_inproc_hold_open: inproc and out are required");
    *out = new fdo_inproc_hold{inproc->engine->hold(), inproc->engine->entry_count()};
    return 0;
  });
}

int fdo_inproc_hold_call(fdo_inproc_hold* hold, size_t entry, uint64_t* args, uint64_t* ret) {
  if (!hold || entry >= hold->entries) return -1;
  hold->hold.call(entry, args, ret);
  return 0;
}

uint64_t fdo_inproc_hold_generation(const fdo_inproc_hold* hold) {
  return hold ? hold->hold.generation() : 0;
}

void fdo_inproc_hold_close(fdo_inproc_hold* hold) {
  delete hold;
}

int fdo_inproc_thread_open(const fdo_inproc* inproc, fdo_inproc_thread** out, fdo_error** err) {
  return capi::guarded(err, [&] {
    if (!inproc || !out)
      return capi::fail(err, Errc::invalid_argument,
                        "fdo_inproc_thread_open: inproc and out are required");
    auto t = inproc->engine->attach();
    if (!t) return capi::fail(err, t.error());
    *out = new fdo_inproc_thread{std::move(*t)};
    return 0;
  });
}

void* fdo_inproc_thread_entry(const fdo_inproc_thread* thread, size_t entry) {
  if (!thread || entry >= thread->thread->entry_count()) return nullptr;
  return thread->thread->entry(entry);
}

int fdo_inproc_thread_quiescent(fdo_inproc_thread* thread) {
  if (!thread) return -1;
  return thread->thread->quiescent() ? 1 : 0;
}

void* fdo_inproc_thread_next(fdo_inproc_thread* thread, size_t entry) {
  if (!thread || entry >= thread->thread->entry_count()) return nullptr;
  return thread->thread->next(entry);
}

void fdo_inproc_thread_count(fdo_inproc_thread* thread, size_t entry, uint64_t calls,
                             uint64_t timed_calls, uint64_t timed_ns) {
  if (!thread || entry >= thread->thread->entry_count()) return;
  thread->thread->count(entry, calls, timed_calls, timed_ns);
}

uint64_t fdo_inproc_thread_generation(const fdo_inproc_thread* thread) {
  return thread ? thread->thread->generation() : 0;
}

int fdo_inproc_thread_mode(const fdo_inproc_thread* thread) {
  return thread ? mode_of(thread->thread->mode()) : -1;
}

int64_t fdo_inproc_thread_profile_version(const fdo_inproc_thread* thread) {
  return thread ? thread->thread->profile_version() : 0;
}

void fdo_inproc_thread_close(fdo_inproc_thread* thread) {
  try {
    delete thread;
  } catch (...) {
    // Unloading older code logs its own failures; nothing may cross into C.
  }
}

int fdo_inproc_lagging(const fdo_inproc* inproc, fdo_inproc_lag* out, fdo_error** err) {
  return capi::guarded(err, [&] {
    if (!inproc || !out)
      return capi::fail(err, Errc::invalid_argument,
                        "fdo_inproc_lagging: inproc and out are required");
    inprocess::LagReport r = inproc->engine->lagging();
    out->threads = static_cast<uint32_t>(r.threads);
    out->generations_held = static_cast<uint32_t>(r.generations_held);
    out->oldest_ms = static_cast<uint64_t>(r.oldest.count());
    return 0;
  });
}

void fdo_inproc_close(fdo_inproc* inproc) {
  try {
    delete inproc;
  } catch (...) {
    // The engine's destructor logs its own failures; nothing may cross into C.
  }
}

} // extern "C"
