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

} // namespace fdo::test_support
