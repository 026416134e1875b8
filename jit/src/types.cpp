#include "fdo/jit/types.h"

#include <charconv>

namespace fdo::jit {

namespace {
bool parse_int(std::string_view s, int& out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}
} // namespace

std::optional<ParseDiagnostic> parse_diagnostic(const fdo::Error& error) {
  if (error.code() != Errc::parse) return std::nullopt;
  std::string_view msg = error.message();
  // "line L, column C: message"; anything else (bitcode) has no location.
  constexpr std::string_view kLine = "line ", kColumn = ", column ", kSep = ": ";
  if (msg.substr(0, kLine.size()) != kLine) return ParseDiagnostic{0, 0, std::string(msg)};
  std::size_t col_at = msg.find(kColumn);
  std::size_t sep_at = col_at == std::string_view::npos ? col_at : msg.find(kSep, col_at);
  ParseDiagnostic d;
  if (sep_at == std::string_view::npos ||
      !parse_int(msg.substr(kLine.size(), col_at - kLine.size()), d.line) ||
      !parse_int(msg.substr(col_at + kColumn.size(), sep_at - col_at - kColumn.size()), d.column))
    return ParseDiagnostic{0, 0, std::string(msg)};
  d.message = std::string(msg.substr(sep_at + kSep.size()));
  return d;
}

std::string AbiType::to_string() const {
  switch (kind) {
  case AbiKind::void_:
    return "void";
  case AbiKind::integer: {
    std::string text(1, 'i');
    text.append(std::to_string(bits));
    return text;
  }
  case AbiKind::f32:
    return "float";
  case AbiKind::f64:
    return "double";
  case AbiKind::ptr:
    return "ptr";
  }
  return "void";
}

Expected<AbiType> parse_abi_type(std::string_view text) {
  if (text == "void") return AbiType{AbiKind::void_, 0};
  if (text == "float") return AbiType{AbiKind::f32, 32};
  if (text == "double") return AbiType{AbiKind::f64, 64};
  if (text == "ptr") return AbiType{AbiKind::ptr, 64};
  int bits = 0;
  if (text.size() >= 2 && text[0] == 'i' && parse_int(text.substr(1), bits) && bits >= 1 &&
      bits <= 64)
    return AbiType{AbiKind::integer, static_cast<unsigned>(bits)};
  return make_error(Errc::invalid_argument, "unsupported ABI type '" + std::string(text) +
                                                "' (expected i1..i64, float, double, ptr or void)");
}

std::string describe(const Specialization& s) {
  std::string out = s.function + " (";
  for (std::size_t i = 0; i < s.args.size(); ++i) {
    if (i) out += ", ";
    out += "arg " + std::to_string(s.args[i].first) + " = " + std::to_string(s.args[i].second);
  }
  const std::uint64_t pct = s.calls ? s.matched * 100 / s.calls : 0;
  out += ": " + std::to_string(pct) + "% of " + std::to_string(s.calls) + " profiled calls)";
  return out;
}

std::string_view clone_origin(std::string_view symbol) {
  for (std::string_view suffix : {kSpecializedSuffix, kGeneralSuffix})
    if (symbol.size() > suffix.size() && symbol.ends_with(suffix))
      return symbol.substr(0, symbol.size() - suffix.size());
  return symbol;
}

} // namespace fdo::jit
