// Shared helpers for the jit tests: fixtures and thunk slot conversions.
#pragma once

#include "fdo/jit/compiler.h"

#include <bit>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fdo::jit::test {

inline std::string fixture(const std::string& name) {
  std::string path = std::string(FDO_SOURCE_DIR) + "/tests/jit/fixtures/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing fixture " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::uint64_t slot(double d) {
  return std::bit_cast<std::uint64_t>(d);
}
inline std::uint64_t slot(float f) {
  return std::bit_cast<std::uint32_t>(f);
}
inline std::uint64_t slot(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}
inline double as_double(std::uint64_t s) {
  return std::bit_cast<double>(s);
}
inline float as_float(std::uint64_t s) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(s));
}

inline CompileResult compile_or_throw(const std::string& program, const CompileRequest& request) {
  auto r = compile(program, request);
  if (!r) throw std::runtime_error("compile failed: " + r.error().describe());
  return std::move(r).value();
}

inline CompileRequest request(CompileMode mode, const ProfileDoc* profile = nullptr,
                              bool keep_ir = false) {
  CompileRequest r;
  r.mode = mode;
  r.profile = profile;
  r.keep_ir = keep_ir;
  return r;
}

// The lines of `text`, without their '\n'.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    out.push_back(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
  return out;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The text of the function `name` (from its `define` line to the closing
// brace) in IR text.
inline std::string function_body(const std::string& ir, const std::string& name) {
  std::size_t pos = 0;
  while ((pos = ir.find("\ndefine ", pos)) != std::string::npos) {
    std::size_t eol = ir.find('\n', pos + 1);
    if (ir.substr(pos, eol - pos).find(" @" + name + "(") != std::string::npos)
      return ir.substr(pos, ir.find("\n}\n", eol) - pos);
    pos = eol;
  }
  return {};
}

} // namespace fdo::jit::test
