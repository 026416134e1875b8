// A temporary directory for one test: created under the system temp dir
// (prefix plus a unique suffix), removed with everything in it at scope exit.
// Shared by every Catch2 test (on fdo_catch_main's include path).
#pragma once

#include <filesystem>
#include <stdexcept>
#include <stdlib.h>
#include <string>
#include <string_view>

namespace fdo::test_support {

class TempDir {
public:
  explicit TempDir(std::string_view prefix = "fdo-test") {
    // mkdtemp replaces the six trailing X's with a unique suffix.
    std::string tmpl =
        (std::filesystem::temp_directory_path() / (std::string(prefix) + "-" + std::string(6, 'X')))
            .string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp(" + tmpl + ") failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // The path of `name` inside the directory (not created).
  std::string file(std::string_view name) const { return (path_ / name).string(); }

private:
  std::filesystem::path path_;
};

} // namespace fdo::test_support
