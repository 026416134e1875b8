// Skipping a test whose prerequisite this host lacks, so that it reads as
// skipped, never as passed (a host without PostgreSQL, journald, a second
// uid or cpu-clock sampling must not show all green).
//
// FDO_SKIP(reason) ends the test case with a WARN naming the reason;
// note_skip(reason) alone marks a case that ran only part of itself (its
// SQLite variant, without a PostgreSQL server) as skipped too. Under
// CTest every TEST_CASE runs in its own process (catch_discover_tests, with
// FDO_SKIP_RETURN_CODE=77 in its environment): a run in which a test case
// skipped and nothing failed exits 77, which CTest reports as skipped
// (SKIP_RETURN_CODE 77, CMakeLists.txt's fdo_test). Run by hand, the binary
// goes on with the next test case and exits as Catch says.
#pragma once

#include <catch2/catch.hpp>
#include <string>

namespace fdo::test_support {
// Records that the running test case skipped (tests/catch_main.cpp).
void note_skip(const std::string& reason);
} // namespace fdo::test_support

#define FDO_SKIP(reason)                                                                           \
  do {                                                                                             \
    const std::string fdo_skip_reason_ = (reason);                                                 \
    ::fdo::test_support::note_skip(fdo_skip_reason_);                                              \
    WARN(fdo_skip_reason_);                                                                        \
    return;                                                                                        \
  } while (false)
