// The project's error model outside the JIT: a value or an Error carrying a code
// and a message. (Inside jit/, llvm::Expected/llvm::Error are used and converted
// at the library boundary with to_fdo_error.)
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace fdo {

enum class Errc {
  invalid_argument,   // caller passed something malformed (bad JSON, bad params)
  not_found,          // a key, file or profile that does not exist
  already_exists,     // create-only operation found an existing object
  conflict,           // optimistic-concurrency check failed; caller may retry
  io,                 // a system call failed (errno in the message)
  corrupt,            // stored data failed a checksum, magic or integrity check
  parse,              // input text (IR, JSON) could not be parsed
  verify,             // LLVM verifier rejected the module
  compile,            // the compiler failed after parsing
  link,               // unresolved symbol or relocation failure at load time
  timeout,            // a deadline passed
  crashed,            // a worker or program died (signal)
  resource_exhausted, // a size, memory or rate limit was hit
  permission_denied,  // the caller (tenant) may not do this
  unsupported,        // the host or build cannot do this (e.g. no PMU)
  unavailable,        // a dependency (daemon, worker) cannot be reached
  pinned,             // the profile is pinned and may not be rewritten
  internal,           // a bug: an invariant did not hold
};

std::string_view to_string(Errc code);

class [[nodiscard]] Error {
public:
  Error(Errc code, std::string message) : code_(code), message_(std::move(message)) {}

  Errc code() const { return code_; }
  const std::string& message() const { return message_; }
  // "conflict: profile abc at version 3 (expected 2)"
  std::string describe() const;
  // Prefixes the message with what the caller was doing: "open db: <message>".
  Error context(std::string_view what) &&;
  Error context(std::string_view what) const&;

  // An Errc::io error built from errno with the failing operation named.
  static Error from_errno(std::string_view operation, int err);

private:
  Errc code_;
  std::string message_;
};

template <class T> class [[nodiscard]] Expected {
public:
  using value_type = T;
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Expected(Error err) : v_(std::in_place_index<1>, std::move(err)) {}
  template <class U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, T> &&
           !std::is_same_v<std::decay_t<U>, Error> && !std::is_same_v<std::decay_t<U>, Expected>)
      Expected(U&& value)
      : v_(std::in_place_index<0>, T(std::forward<U>(value))) {}

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & {
    assert(has_value());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(has_value());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(has_value());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& {
    assert(!has_value());
    return std::get<1>(v_);
  }
  Error&& error() && {
    assert(!has_value());
    return std::get<1>(std::move(v_));
  }

  T value_or(T fallback) const& { return has_value() ? value() : std::move(fallback); }

private:
  std::variant<T, Error> v_;
};

template <> class [[nodiscard]] Expected<void> {
public:
  Expected() = default;
  Expected(Error err) : err_(std::move(err)), ok_(false) {}

  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const& {
    assert(!ok_);
    return err_;
  }
  Error&& error() && {
    assert(!ok_);
    return std::move(err_);
  }

private:
  Error err_{Errc::internal, {}};
  bool ok_ = true;
};

using Status = Expected<void>;

inline Status ok() {
  return {};
}

inline Error make_error(Errc code, std::string message) {
  return Error(code, std::move(message));
}

} // namespace fdo

// Propagate an error from an Expected-returning expression:
//   FDO_TRY(auto fd, open_file(path));   or   FDO_TRY_STATUS(write_all(fd, data));
#define FDO_CONCAT_INNER(a, b) a##b
#define FDO_CONCAT(a, b) FDO_CONCAT_INNER(a, b)
#define FDO_TRY_IMPL(tmp, decl, expr)                                                              \
  auto tmp = (expr);                                                                               \
  if (!tmp.has_value()) return std::move(tmp).error();                                             \
  decl = std::move(tmp).value()
#define FDO_TRY(decl, expr) FDO_TRY_IMPL(FDO_CONCAT(fdo_try_, __LINE__), decl, expr)
#define FDO_TRY_STATUS(expr)                                                                       \
  do {                                                                                             \
    auto fdo_try_status_ = (expr);                                                                 \
    if (!fdo_try_status_.has_value()) return std::move(fdo_try_status_).error();                   \
  } while (0)
