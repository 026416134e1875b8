// Whether this test binary was built with sanitizers (tools/test.sh
// --sanitize=...). Tests of mechanisms a sanitizer runtime changes (address
// space limits: its shadow memory reserves terabytes) say so and check what
// still holds there.
#pragma once

namespace fdo::test_support {

constexpr bool sanitizer_build() {
#ifdef FDO_SANITIZER_BUILD
  return true;
#else
  return false;
#endif
}

// ThreadSanitizer starts a thread of its own in a forked child, so code that
// must run single-threaded there (entering the sandbox) cannot be tested in
// forked children of a TSan build.
constexpr bool thread_sanitizer_build() {
#if defined(__SANITIZE_THREAD__)
  return true;
#else
  return false;
#endif
}

} // namespace fdo::test_support
