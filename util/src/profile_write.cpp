// A profile document written straight from the struct: the checks
// profile_from_json would make of its JSON, its canonical text and its
// digest, without building the nlohmann tree of a document that can hold
// thousands of functions (the store writes one on every rewrite stage).
// Each writer lists members in nlohmann's (sorted) order, so the text is
// byte for byte canonical_json(to_json(doc)) (tests/util/profile_write_test).
#include "fdo/util/hash.h"
#include "fdo/util/json_text.h"
#include "fdo/util/profile.h"
#include "fdo/util/value_json.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace fdo {

using nlohmann::json;

namespace {

// Which members of a function entry are written: the document's, or the
// compile-affecting ones the digest covers.
enum class Members { document, compile };

void write_hex(JsonText& w, std::uint64_t v) {
  char buf[17];
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i, v >>= 4)
    buf[i] = kHex[v & 0xf];
  w.string(std::string_view(buf, 16));
}

// value_sites_json's form: [[value, count], ...] per site.
void write_site(JsonText& w, const ValueSite& site, ValueText text) {
  w.begin_array();
  for (const auto& [value, count] : site) {
    w.begin_array();
    if (text == ValueText::hex)
      write_hex(w, value);
    else
      w.number(value);
    w.number(count).end_array();
  }
  w.end_array();
}

void write_sites(JsonText& w, std::string_view key, const std::vector<ValueSite>& sites,
                 ValueText text) {
  if (sites.empty()) return; // absent, as in function_compile_json
  w.key(key).begin_array();
  for (const ValueSite& site : sites)
    write_site(w, site, text);
  w.end_array();
}

template <class T> void write_numbers(JsonText& w, std::string_view key, const std::vector<T>& v) {
  w.key(key).begin_array();
  for (T n : v)
    w.number(static_cast<std::uint64_t>(n));
  w.end_array();
}

// Byte ranges of a document's text that its digested form leaves out: the
// members of a function entry only the document has. Each begins with its
// ',' (neither is ever an entry's first member), so the text with them cut
// is the digested entry byte for byte.
using Cuts = std::vector<std::pair<std::size_t, std::size_t>>;

// `w.field(k, v)`, its bytes recorded in `cuts` when there are any.
void document_only_field(JsonText& w, std::string_view k, const std::string& v, Cuts* cuts) {
  const std::size_t begin = w.size();
  w.field(k, v);
  if (cuts != nullptr) cuts->emplace_back(begin, w.size());
}

// One functions[name] entry: function_compile_json's members (and, in the
// document, fingerprint and source_name), sorted.
void write_function(JsonText& w, const FunctionProfile& f, Members members, Cuts* cuts) {
  const bool doc = members == Members::document;
  w.begin_object();
  if (!f.arg_values.empty()) {
    w.key("arg_values").begin_array();
    for (const ArgValues& a : f.arg_values) {
      w.begin_object().field("arg", a.arg).field("other", a.other).key("values");
      write_site(w, a.values, ValueText::number);
      w.end_object();
    }
    w.end_array();
  }
  w.key("cfg_hash");
  write_hex(w, f.cfg_hash);
  write_numbers(w, "counts", f.counts);
  if (doc && !f.fingerprint.empty()) document_only_field(w, "fingerprint", f.fingerprint, cuts);
  write_sites(w, "indirect_calls", f.indirect_calls, ValueText::hex);
  if (f.layout != FunctionLayout::normal) w.field("layout", to_string(f.layout));
  write_sites(w, "memop_sizes", f.memop_sizes, ValueText::number);
  if (doc && !f.source_name.empty()) document_only_field(w, "source_name", f.source_name, cuts);
  write_numbers(w, "unpredictable", f.unpredictable);
  w.end_object();
}

void write_functions(JsonText& w, std::string_view key,
                     const std::map<std::string, FunctionProfile>& fns, Members members,
                     Cuts* cuts = nullptr) {
  // std::map orders names as nlohmann's object does (std::string's <).
  w.key(key).begin_object();
  for (const auto& [name, f] : fns) {
    w.key(name);
    write_function(w, f, members, cuts);
  }
  w.end_object();
}

// About how many bytes write_functions writes for `fns` (an overestimate
// for the usual small counts), so the text is allocated once.
std::size_t text_bytes(const std::map<std::string, FunctionProfile>& fns) {
  std::size_t n = 2;
  for (const auto& [name, f] : fns) {
    n += name.size() + f.fingerprint.size() + f.source_name.size() + 96;
    n += 8 * (f.counts.size() + f.unpredictable.size());
    for (const auto* sites : {&f.indirect_calls, &f.memop_sizes})
      for (const ValueSite& site : *sites)
        n += 4 + 40 * site.size();
    for (const ArgValues& a : f.arg_values)
      n += 48 + 40 * a.values.size();
  }
  return n;
}

// The checks get_functions makes that a struct can fail: a layout the enum
// does not name, an argument position out of range or listed twice, and in
// cs_functions a hash without the context-sensitive flag.
Status check_functions(const char* key, const std::map<std::string, FunctionProfile>& fns) {
  const bool cs = std::string_view(key) == "cs_functions";
  for (const auto& [name, f] : fns) {
    const std::string path = std::string(key) + "." + name;
    if (f.layout != FunctionLayout::normal && f.layout != FunctionLayout::hot &&
        f.layout != FunctionLayout::cold)
      return profile_field_error(path + ".layout", "must be one of normal, hot, cold");
    for (std::size_t i = 0; i < f.arg_values.size(); ++i) {
      if (f.arg_values[i].arg > 0xffff)
        return profile_field_error(path + ".arg_values.arg", "must be in [0, 65535]");
      for (std::size_t j = 0; j < i; ++j)
        if (f.arg_values[j].arg == f.arg_values[i].arg)
          return profile_field_error(path + ".arg_values", "lists an argument twice");
    }
    if (cs && !is_cs_hash(f.cfg_hash))
      return profile_field_error(path + ".cfg_hash",
                                 "must carry the context-sensitive flag (bit 60)");
  }
  return ok();
}

// What a double becomes in the text and back: a non-finite one is written
// as null.
void null_non_finite(json& j) {
  if (j.is_number_float()) {
    if (!std::isfinite(j.get<double>())) j = nullptr;
  } else if (j.is_structured()) {
    for (json& e : j)
      null_non_finite(e);
  }
}

} // namespace

Status normalize_profile(ProfileDoc& doc) {
  if (doc.format < 1 || doc.format > ProfileDoc::kFormat)
    return profile_field_error("$.format",
                               "must be in [1, " + std::to_string(ProfileDoc::kFormat) + "]");
  FDO_TRY(doc.knobs, knobs_from_json(to_json(doc.knobs)));
  FDO_TRY_STATUS(check_functions("functions", doc.functions));
  FDO_TRY_STATUS(check_functions("cs_functions", doc.cs_functions));
  FDO_TRY_STATUS(check_functions("outside_functions", doc.outside_functions));
  if (doc.hardware.is_null()) doc.hardware = json::object();
  if (!doc.hardware.is_object()) return profile_field_error("hardware", "must be an object");
  null_non_finite(doc.hardware);
  // The guard's record and the GPU part are small: their own codecs check
  // them, and give them the form a read does.
  if (doc.guard.empty()) {
    doc.guard = GuardRecord{};
  } else {
    FDO_TRY(doc.guard, guard_from_json(to_json(doc.guard)));
  }
  if (doc.gpu.empty()) {
    doc.gpu = GpuProfile{};
  } else {
    FDO_TRY(doc.gpu, gpu_profile_from_json(to_json(doc.gpu)));
  }
  if (doc.reprofile_of < 0) doc.reprofile_of = 0; // not written, read as 0
  if (doc.provenance.stage < 0)
    return profile_field_error("provenance.stage",
                               "must be in [0, " +
                                   std::to_string(std::numeric_limits<std::int64_t>::max()) + "]");
  return ok();
}

namespace {

// Where the members the digest shares with the document lie in its text.
struct DigestParts {
  Cuts cuts;                                 // document-only members of function entries
  std::size_t functions_end = 0;             // "{", cs_functions, format and functions end here
  std::pair<std::size_t, std::size_t> knobs; // ',"knobs":...'
  std::pair<std::size_t, std::size_t> outside_functions; // empty when absent
};

// The document's text, and where its digested members lie in it.
Expected<std::string> write_document(const ProfileDoc& doc, DigestParts& parts) {
  Cuts* cuts = &parts.cuts;
  JsonText w(InvalidUtf8::refuse);
  w.reserve(1024 + text_bytes(doc.functions) + text_bytes(doc.cs_functions) +
            text_bytes(doc.outside_functions));
  try {
    w.begin_object();
    if (!doc.cs_functions.empty())
      write_functions(w, "cs_functions", doc.cs_functions, Members::document, cuts);
    w.field("format", doc.format);
    write_functions(w, "functions", doc.functions, Members::document, cuts);
    parts.functions_end = w.size();
    if (!doc.gpu.empty()) w.field("gpu", to_json(doc.gpu));
    if (!doc.guard.empty()) w.field("guard", to_json(doc.guard));
    w.field("hardware", doc.hardware);
    std::size_t begin = w.size();
    w.field("knobs", to_json(doc.knobs));
    parts.knobs = {begin, w.size()};
    if (!doc.outside_functions.empty()) {
      begin = w.size();
      write_functions(w, "outside_functions", doc.outside_functions, Members::document, cuts);
      parts.outside_functions = {begin, w.size()};
    }
    const Provenance& p = doc.provenance;
    w.key("provenance")
        .begin_object()
        .field("created_at", p.created_at)
        .field("host", p.host)
        .field("program", p.program)
        .field("reason", p.reason)
        .field("stage", p.stage)
        .end_object();
    if (doc.reprofile_of > 0) w.field("reprofile_of", doc.reprofile_of);
    w.end_object();
  } catch (const json::exception& e) {
    // A string that is not UTF-8 cannot be written as JSON.
    return make_error(Errc::invalid_argument, e.what());
  }
  return std::move(w).take();
}

// What every profile digest's hashed text starts with.
constexpr std::string_view kDigestDomain = "fdo.profile.v1\n";

// The digest over the compile-affecting members (profile_digest's text).
std::string hash_digest_text(std::string_view text) {
  Hasher h;
  h.update(kDigestDomain).update(text);
  return h.hex();
}

// Hashes what is appended to it as one text, in blocks: BLAKE3 hashes a long
// update many chunks at a time, and the digested text of a big program's
// document (~400 KB) is never built whole (fresh pages: ~100 faults).
class DigestFeed {
public:
  DigestFeed() { h_.update(kDigestDomain); }
  void append(std::string_view s) {
    while (!s.empty()) {
      const std::size_t n = std::min(s.size(), buf_.size() - used_);
      std::memcpy(buf_.data() + used_, s.data(), n);
      used_ += n;
      s.remove_prefix(n);
      if (used_ == buf_.size()) flush();
    }
  }
  std::string hex() {
    flush();
    return h_.hex();
  }

private:
  void flush() {
    h_.update(std::string_view(buf_.data(), used_));
    used_ = 0;
  }
  Hasher h_;
  std::array<char, 16384> buf_;
  std::size_t used_ = 0;
};

// Appends text[begin, end) less the cuts inside it (cuts are in order; `next`
// is the first not yet passed).
void append_cut(DigestFeed& out, std::string_view text, std::size_t begin, std::size_t end,
                const Cuts& cuts, std::size_t& next) {
  for (; next < cuts.size() && cuts[next].first < end; ++next) {
    out.append(text.substr(begin, cuts[next].first - begin));
    begin = cuts[next].second;
  }
  out.append(text.substr(begin, end - begin));
}

} // namespace

Expected<std::string> profile_text(const ProfileDoc& doc) {
  DigestParts unused;
  return write_document(doc, unused);
}

Expected<ProfileTextAndDigest> profile_text_and_digest(const ProfileDoc& doc) {
  DigestParts parts;
  FDO_TRY(std::string text, write_document(doc, parts));
  // profile_digest's text: the document's up to the end of `functions`, the
  // GPU launch bounds, knobs, outside_functions, each with the
  // document-only members of its entries cut.
  DigestFeed digested;
  std::size_t next = 0;
  append_cut(digested, text, 0, parts.functions_end, parts.cuts, next);
  if (json bounds = gpu_digest_part(doc.gpu); !bounds.is_null()) {
    JsonText g(InvalidUtf8::refuse);
    g.begin_object().field("gpu_launch_bounds", bounds).end_object();
    std::string_view member(g.text()); // {"gpu_launch_bounds":...}
    digested.append(",");
    digested.append(member.substr(1, member.size() - 2));
  }
  digested.append(
      std::string_view(text).substr(parts.knobs.first, parts.knobs.second - parts.knobs.first));
  if (parts.outside_functions.second != 0)
    append_cut(digested, text, parts.outside_functions.first, parts.outside_functions.second,
               parts.cuts, next);
  digested.append("}");
  std::string digest = digested.hex();
  return ProfileTextAndDigest{std::move(text), std::move(digest)};
}

std::string profile_digest(const ProfileDoc& doc) {
  // The compile-affecting part, canonical: the same members as the
  // document's, less bookkeeping. Optional members only when present, so
  // documents without them keep the digest they always had. A name that is
  // not UTF-8 throws, as canonical_json does.
  JsonText w(InvalidUtf8::refuse);
  w.reserve(1024 + text_bytes(doc.functions) + text_bytes(doc.cs_functions) +
            text_bytes(doc.outside_functions));
  w.begin_object();
  if (!doc.cs_functions.empty())
    write_functions(w, "cs_functions", doc.cs_functions, Members::compile);
  w.field("format", doc.format);
  write_functions(w, "functions", doc.functions, Members::compile);
  if (json bounds = gpu_digest_part(doc.gpu); !bounds.is_null())
    w.field("gpu_launch_bounds", bounds);
  w.field("knobs", to_json(doc.knobs));
  if (!doc.outside_functions.empty())
    write_functions(w, "outside_functions", doc.outside_functions, Members::compile);
  w.end_object();
  return hash_digest_text(w.text());
}

} // namespace fdo
