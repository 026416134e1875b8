// Test doubles for the cache: a fake compiler that counts calls, can be held
// at a gate, can fail on demand, and derives PK from a "canonical" form of the
// program (comment lines dropped), so two programs differing only in comments
// share one PK like two IR modules differing only in names would.
#pragma once

#include "fdo/cache/interfaces.h"
#include "fdo/util/hash.h"
#include "support/temp_dir.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fdo::cache::testing {

struct CompileCall {
  std::string ik, scope, bytes; // the Program as the compiler received it
  std::string pk, digest;
  std::int64_t version = 0;
  CompileMode mode = CompileMode::plain;
  CompilePriority priority = CompilePriority::stage;
  std::shared_ptr<Urgency> urgency; // a background compile's
  const Program* program = nullptr; // the object it was handed (compared, never followed)
};

class FakeCompiler : public Compiler {
public:
  explicit FakeCompiler(std::string identity = "llvm-16.0.6;fdo-0.1;passes-1;x86_64-pc-linux-gnu;"
                                               "skylake;+avx2,+fma")
      : identity_(std::move(identity)) {}

  std::string identity() const override {
    std::lock_guard lock(mu_);
    return identity_;
  }
  void set_identity(std::string id) {
    std::lock_guard lock(mu_);
    identity_ = std::move(id);
  }

  static std::string canonical(std::string_view bytes) {
    std::istringstream in{std::string(bytes)};
    std::string line, out;
    while (std::getline(in, line))
      if (!line.empty() && line[0] != ';') out += line + "\n";
    return out;
  }
  static std::string pk_of(std::string_view bytes) { return blake3_hex("pk\n" + canonical(bytes)); }

  Expected<Identification> identify(const Program& p) override {
    {
      std::lock_guard lock(mu_);
      identifies_++;
      identified_.push_back(p);
    }
    if (p.bytes.starts_with("garbage"))
      return make_error(Errc::parse, "fake parse error: expected a module");
    return Identification{pk_of(p.bytes)};
  }

  Expected<CompiledOutput> compile(const Program& p, const ProfileRef& profile, CompileMode mode,
                                   CompilePriority priority,
                                   const std::shared_ptr<Urgency>& urgency) override {
    std::unique_lock lock(mu_);
    compiles_++;
    calls_.push_back({p.ik, p.scope, p.bytes, profile.pk, profile.digest, profile.version, mode,
                      priority, urgency, &p});
    blocked_++;
    gate_cv_.wait(lock, [&] { return gate_open_; });
    blocked_--;
    std::string identity = identity_;
    bool fail = fail_next_ > 0;
    if (fail) fail_next_--;
    std::size_t pad = object_size_;
    auto delay = delay_;
    lock.unlock();
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (fail) return make_error(Errc::compile, "fake compile failure");
    CompiledOutput out;
    out.object = "OBJ|" + identity + "|" + profile.pk + "|v" + std::to_string(profile.version) +
                 "|" + std::string(to_string(mode)) + "|" + blake3_hex(p.bytes) + "|";
    if (out.object.size() < pad) out.object.append(pad - out.object.size(), 'x');
    out.metadata = "{\"mode\":\"" + std::string(to_string(mode)) +
                   "\",\"version\":" + std::to_string(profile.version) + "}";
    return out;
  }

  // Holds every compile at the gate until open_gate().
  void close_gate() {
    std::lock_guard lock(mu_);
    gate_open_ = false;
  }
  void open_gate() {
    {
      std::lock_guard lock(mu_);
      gate_open_ = true;
    }
    gate_cv_.notify_all();
  }
  int blocked() const {
    std::lock_guard lock(mu_);
    return blocked_;
  }
  void fail_next(int n) {
    std::lock_guard lock(mu_);
    fail_next_ = n;
  }
  void set_object_size(std::size_t n) {
    std::lock_guard lock(mu_);
    object_size_ = n;
  }
  void set_delay(std::chrono::milliseconds d) {
    std::lock_guard lock(mu_);
    delay_ = d;
  }
  int compiles() const {
    std::lock_guard lock(mu_);
    return compiles_;
  }
  int identifies() const {
    std::lock_guard lock(mu_);
    return identifies_;
  }
  std::vector<CompileCall> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  // Every Program identify() received, in order.
  std::vector<Program> identified() const {
    std::lock_guard lock(mu_);
    return identified_;
  }

private:
  mutable std::mutex mu_;
  std::condition_variable gate_cv_;
  std::string identity_;
  bool gate_open_ = true;
  int blocked_ = 0;
  int fail_next_ = 0;
  int compiles_ = 0;
  int identifies_ = 0;
  std::size_t object_size_ = 0;
  std::chrono::milliseconds delay_{0};
  std::vector<CompileCall> calls_;
  std::vector<Program> identified_;
};

struct TempDir : fdo::test_support::TempDir {
  TempDir() : fdo::test_support::TempDir("fdo-cache-test") {}
};

// "p" + n without GCC 12's -Wrestrict false positive on literal + to_string.
inline std::string numbered(std::string_view prefix, long long n) {
  std::string s(prefix);
  s += std::to_string(n);
  return s;
}

// The Program a stage submits: `bytes` in `scope` ("" = unscoped).
inline Program as_program(std::string bytes, std::string scope = "") {
  return Program{{}, std::move(scope), std::move(bytes), {}};
}

// A small IR-looking program; `comment` changes the bytes (and so the IK) but
// not the canonical form (and so not the PK).
inline std::string program(const std::string& name, const std::string& comment = "") {
  return "; ModuleID = '" + name + "'" + (comment.empty() ? "" : "\n; " + comment) +
         "\ndefine i32 @" + name + "(i32 %x) {\nentry:\n  %r = add i32 %x, 1\n  ret i32 %r\n}\n";
}

// A profile whose counts make choose_mode() pick optimized.
inline ProfileDoc profile_with_counts(std::uint64_t hot) {
  ProfileDoc doc;
  FunctionProfile f;
  f.cfg_hash = 0x1234;
  f.counts = {hot, hot / 2 + 1};
  doc.functions["f"] = f;
  return doc;
}

// Polls `pred` until it holds or `limit` passes; returns whether it held.
template <class Pred>
bool eventually(Pred pred, std::chrono::seconds limit = std::chrono::seconds(20)) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

} // namespace fdo::cache::testing
