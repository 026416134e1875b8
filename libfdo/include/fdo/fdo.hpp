// libfdo's C++ interface: a thin, header-only RAII wrapper over the C API in
// fdo/fdo.h. Failures throw fdo::api::Error, which keeps the C error's code,
// message, JSON-RPC code and data. Same threading rule as the C API: a
// Connection may be shared between threads (calls are serialised).
#pragma once

#include "fdo/fdo.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fdo::api {

class Error : public std::runtime_error {
public:
  explicit Error(const fdo_error* e)
      : std::runtime_error(e ? fdo_error_message(e) : "libfdo: unknown error (out of memory?)"),
        code_(e ? fdo_error_get_code(e) : FDO_ERR_INTERNAL),
        rpc_code_(e ? fdo_error_rpc_code(e) : 0), data_json_(e ? fdo_error_data_json(e) : "null") {}

  fdo_error_code code() const noexcept { return code_; }
  const char* code_name() const noexcept { return fdo_error_code_name(code_); }
  // The daemon's JSON-RPC error code; 0 for failures on this side.
  std::int64_t rpc_code() const noexcept { return rpc_code_; }
  // The daemon's error.data as JSON text ("null" when none).
  const std::string& data_json() const noexcept { return data_json_; }

private:
  fdo_error_code code_;
  std::int64_t rpc_code_;
  std::string data_json_;
};

namespace detail {

struct ErrorFree {
  void operator()(fdo_error* e) const noexcept { fdo_error_free(e); }
};
struct StringFree {
  void operator()(char* s) const noexcept { fdo_string_free(s); }
};
struct ConnClose {
  void operator()(fdo_conn* c) const noexcept { fdo_close(c); }
};
struct InprocClose {
  void operator()(fdo_inproc* p) const noexcept { fdo_inproc_close(p); }
};
struct ThreadClose {
  void operator()(fdo_inproc_thread* t) const noexcept { fdo_inproc_thread_close(t); }
};

// Calls a C API function ending in `fdo_error**`; throws on failure.
template <class F> void check(F&& f) {
  fdo_error* raw = nullptr;
  if (f(&raw) != 0) {
    std::unique_ptr<fdo_error, ErrorFree> e(raw);
    throw Error(e.get());
  }
}

inline std::string take(char* s) {
  std::unique_ptr<char, StringFree> owned(s);
  return s ? std::string(s) : std::string();
}

} // namespace detail

inline fdo_value i32(std::int32_t v) {
  fdo_value out{};
  out.type = FDO_I32;
  out.as.i32 = v;
  return out;
}
inline fdo_value i64(std::int64_t v) {
  fdo_value out{};
  out.type = FDO_I64;
  out.as.i64 = v;
  return out;
}
inline fdo_value f32(float v) {
  fdo_value out{};
  out.type = FDO_F32;
  out.as.f32 = v;
  return out;
}
inline fdo_value f64(double v) {
  fdo_value out{};
  out.type = FDO_F64;
  out.as.f64 = v;
  return out;
}
// A pointer argument: the index of a buffer in the call's buffers.
inline fdo_value buffer(std::size_t index) {
  fdo_value out{};
  out.type = FDO_BUFFER;
  out.as.buffer = index;
  return out;
}

struct Program {
  std::string id;
  std::string profile_key;
};

class Connection {
public:
  // Connects and performs the handshake; "" for the default socket.
  explicit Connection(const std::string& socket_path = "", const std::string& client_name = "") {
    fdo_conn* c = nullptr;
    detail::check([&](fdo_error** e) {
      return fdo_connect_as(socket_path.c_str(), client_name.c_str(), &c, e);
    });
    conn_.reset(c);
  }

  fdo_conn* get() const noexcept { return conn_.get(); }
  std::string server_version() const { return fdo_conn_server_version(conn_.get()); }
  bool has_capability(const std::string& name) const {
    return fdo_conn_has_capability(conn_.get(), name.c_str()) != 0;
  }
  void set_timeout_ms(std::int64_t ms) {
    detail::check([&](fdo_error** e) { return fdo_conn_set_timeout_ms(conn_.get(), ms, e); });
  }

  Program register_program(std::string_view ir, fdo_ir_format format = FDO_IR_TEXT,
                           const std::string& name = "") {
    char id[FDO_KEY_SIZE], pk[FDO_KEY_SIZE];
    detail::check([&](fdo_error** e) {
      return fdo_program_register(conn_.get(), name.empty() ? nullptr : name.c_str(), ir.data(),
                                  ir.size(), format, id, pk, e);
    });
    return Program{id, pk};
  }

  // One stage in the daemon; stage_json (optional) gets the whole result.
  fdo_value execute(const std::string& program_id, const std::string& entry,
                    const std::vector<fdo_value>& args = {},
                    std::vector<fdo_buffer>* buffers = nullptr, unsigned flags = 0,
                    std::string* stage_json = nullptr) {
    fdo_call call{entry.c_str(),
                  args.data(),
                  args.size(),
                  buffers ? buffers->data() : nullptr,
                  buffers ? buffers->size() : 0,
                  flags};
    fdo_value ret{};
    char* stage = nullptr;
    detail::check([&](fdo_error** e) {
      return fdo_execute(conn_.get(), program_id.c_str(), &call, &ret,
                         stage_json ? &stage : nullptr, e);
    });
    if (stage_json) *stage_json = detail::take(stage);
    return ret;
  }

  std::string profile(const std::string& profile_key, std::int64_t version = 0) {
    char* out = nullptr;
    detail::check([&](fdo_error** e) {
      return fdo_profile_get(conn_.get(), profile_key.c_str(), version, &out, e);
    });
    return detail::take(out);
  }

  std::string profile_history(const std::string& profile_key) {
    char* out = nullptr;
    detail::check([&](fdo_error** e) {
      return fdo_profile_history(conn_.get(), profile_key.c_str(), &out, e);
    });
    return detail::take(out);
  }

  std::string call_json(const std::string& method, const std::string& params_json = "{}") {
    char* out = nullptr;
    detail::check([&](fdo_error** e) {
      return fdo_call_json(conn_.get(), method.c_str(), params_json.c_str(), &out, e);
    });
    return detail::take(out);
  }

private:
  std::unique_ptr<fdo_conn, detail::ConnClose> conn_;
};

// A program's code linked into this process (fdo_inproc_*): RAII over the
// lease. Close every NativeThread of it first.
class InProcess {
public:
  InProcess(Connection& conn, const std::string& program_id,
            const std::vector<std::string>& entries, const fdo_inproc_options* options = nullptr);

  std::size_t entry(const std::string& name) const {
    std::size_t i = 0;
    detail::check([&](fdo_error** e) { return fdo_inproc_entry(p_.get(), name.c_str(), &i, e); });
    return i;
  }
  fdo_inproc_flush_result flush() {
    fdo_inproc_flush_result r{};
    detail::check([&](fdo_error** e) { return fdo_inproc_flush(p_.get(), &r, e); });
    return r;
  }
  fdo_inproc_lag lagging() const {
    fdo_inproc_lag r{};
    detail::check([&](fdo_error** e) { return fdo_inproc_lagging(p_.get(), &r, e); });
    return r;
  }
  std::uint64_t generation() const { return fdo_inproc_generation(p_.get()); }
  // The variant the running code is and why (fdo_inproc_variant_json), as JSON text.
  std::string variant_json() const {
    std::unique_ptr<char, detail::StringFree> s(fdo_inproc_variant_json(p_.get()));
    if (!s) throw std::bad_alloc();
    return s.get();
  }
  fdo_inproc* get() const { return p_.get(); }

private:
  std::unique_ptr<fdo_inproc, detail::InprocClose> p_;
};

// One thread's native entries (fdo_inproc_thread_*). Not thread-safe.
class NativeThread {
public:
  explicit NativeThread(const InProcess& code) {
    fdo_inproc_thread* t = nullptr;
    detail::check([&](fdo_error** e) { return fdo_inproc_thread_open(code.get(), &t, e); });
    t_.reset(t);
  }
  // The entry's function, of the C type Sig (e.g. std::int64_t(std::int64_t)),
  // valid until quiescent() returns true.
  template <class Sig> Sig* entry(std::size_t index) const {
    void* f = fdo_inproc_thread_entry(t_.get(), index);
    if (!f) throw std::out_of_range("fdo::api::NativeThread: no entry " + std::to_string(index));
    return reinterpret_cast<Sig*>(f);
  }
  // A quiescent point; true when the entries' functions changed.
  bool quiescent() { return fdo_inproc_thread_quiescent(t_.get()) == 1; }
  void count(std::size_t index, std::uint64_t calls, std::uint64_t timed_calls = 0,
             std::uint64_t timed_ns = 0) {
    fdo_inproc_thread_count(t_.get(), index, calls, timed_calls, timed_ns);
  }
  std::uint64_t generation() const { return fdo_inproc_thread_generation(t_.get()); }
  fdo_code_mode mode() const {
    return static_cast<fdo_code_mode>(fdo_inproc_thread_mode(t_.get()));
  }
  std::int64_t profile_version() const { return fdo_inproc_thread_profile_version(t_.get()); }
  fdo_inproc_thread* get() const { return t_.get(); }

private:
  std::unique_ptr<fdo_inproc_thread, detail::ThreadClose> t_;
};

// A call at a time through one thread's native entry: each call is a
// quiescent point (newer code is picked up at once), counted, and one in
// time_every is timed. For loops of many calls, NativeThread::entry with
// quiescent() at the loop's safe points is cheaper still.
template <class Sig> class NativeEntry;
template <class R, class... A> class NativeEntry<R(A...)> {
public:
  NativeEntry(NativeThread& thread, std::size_t index, std::uint32_t time_every = 64)
      : t_(thread.get()), index_(index), time_every_(time_every == 0 ? 1 : time_every) {
    if (!fdo_inproc_thread_entry(t_, index))
      throw std::out_of_range("fdo::api::NativeEntry: no entry " + std::to_string(index));
  }
  R operator()(A... args) {
    auto f = reinterpret_cast<R (*)(A...)>(fdo_inproc_thread_next(t_, index_));
    if (until_timed_-- != 0) return f(args...);
    until_timed_ = time_every_ - 1;
    const auto t0 = std::chrono::steady_clock::now();
    struct Report { // after the call returns, whatever R is
      NativeEntry* self;
      std::chrono::steady_clock::time_point t0;
      ~Report() {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now() - t0);
        fdo_inproc_thread_count(self->t_, self->index_, 0, 1,
                                static_cast<std::uint64_t>(ns.count()));
      }
    } report{this, t0};
    return f(args...);
  }

private:
  fdo_inproc_thread* t_;
  std::size_t index_;
  std::uint32_t time_every_;
  std::uint32_t until_timed_ = 0;
};

inline InProcess::InProcess(Connection& conn, const std::string& program_id,
                            const std::vector<std::string>& entries,
                            const fdo_inproc_options* options) {
  std::vector<const char*> names;
  for (const std::string& n : entries)
    names.push_back(n.c_str());
  fdo_inproc* p = nullptr;
  detail::check([&](fdo_error** e) {
    return fdo_inproc_open(conn.get(), program_id.c_str(), names.data(), names.size(), options, &p,
                           e);
  });
  p_.reset(p);
}

} // namespace fdo::api
