#include "annotate.h"

#include "context.h"
#include "fdo/jit/annotate.h"
#include "fdo/util/base64.h"
#include "fdo/util/profile.h"
#include "fdo/util/strings.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <unistd.h>

namespace fdo::ctl {

using nlohmann::json;

namespace {

struct Target {
  std::string program;
  std::string profile_key;
};

bool is_hex(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// A program id or unique prefix, then a program name, then a profile key (or
// unique prefix) that one of the caller's programs has.
Expected<Target> resolve_target(Backend& backend, const std::string& text) {
  FDO_TRY(json list, call(backend, "program.list"));
  const json programs = list.value("programs", json::array());
  auto pk_of = [](const json& p) {
    return p.contains("profile_key") && p["profile_key"].is_string()
               ? p["profile_key"].get<std::string>()
               : std::string();
  };
  std::vector<const json*> by_id, by_name, by_pk;
  for (const json& p : programs) {
    const std::string ik = p.value("program", "");
    const std::string pk = pk_of(p);
    if (is_hex(text) && ik.starts_with(text)) by_id.push_back(&p);
    if (p.value("name", "") == text) by_name.push_back(&p);
    if (is_hex(text) && !pk.empty() && pk.starts_with(text)) by_pk.push_back(&p);
  }
  for (const auto* found : {&by_id, &by_name}) {
    if (found->size() == 1) return Target{(*found)[0]->value("program", ""), pk_of(*(*found)[0])};
    if (found->size() > 1)
      return make_error(Errc::invalid_argument,
                        "'" + text + "' names " + std::to_string(found->size()) +
                            " programs; give more digits of the program id (`fdoctl programs`)");
  }
  // Programs with the same canonical IR share one profile: any of them will do.
  std::set<std::string> keys;
  for (const json* p : by_pk)
    keys.insert(pk_of(*p));
  if (keys.size() == 1) return Target{by_pk.front()->value("program", ""), *keys.begin()};
  if (keys.size() > 1)
    return make_error(Errc::invalid_argument, "'" + text + "' is a prefix of " +
                                                  std::to_string(keys.size()) +
                                                  " profile keys; give more digits");
  return make_error(Errc::not_found,
                    "no program or profile '" + text +
                        "' among your registered programs (annotating needs the program's IR; "
                        "`fdoctl programs` lists them)");
}

bool function_matches(const jit::AnnotatedFunction& f, const std::string& name) {
  return name.empty() || f.symbol == name || f.source_name == name || f.pgo_name == name;
}

json samples_json(const jit::EventSamples& samples) {
  json out = json::object();
  for (const auto& [event, n] : samples)
    out[event] = n;
  return out;
}

json function_json(const jit::AnnotatedFunction& f) {
  json blocks = json::array();
  for (const jit::AnnotatedBlock& b : f.blocks) {
    json per_call = nullptr;
    if (b.count && f.entry_count && *f.entry_count > 0)
      per_call = static_cast<double>(*b.count) / static_cast<double>(*f.entry_count);
    blocks.push_back({{"label", b.label},
                      {"count", b.count ? json(*b.count) : json(nullptr)},
                      {"per_call", per_call},
                      {"canonical_blocks", b.canonical_blocks},
                      {"samples", samples_json(b.samples)},
                      {"sample_share", b.sample_share ? json(*b.sample_share) : json(nullptr)},
                      {"lines", b.lines}});
  }
  return {{"name", f.symbol},
          {"source_name", f.source_name},
          {"pgo_name", f.pgo_name},
          {"signature", f.signature},
          {"entry_count", f.entry_count ? json(*f.entry_count) : json(nullptr)},
          {"approximate", f.approximate},
          {"unplaced_samples", samples_json(f.unplaced_samples)},
          {"blocks", std::move(blocks)}};
}

// `, 12.5% of samples, branch-misses 7`: the block's clock share, then the
// samples of every other event.
std::string samples_text(const json& block, const std::string& clock_event) {
  std::string out;
  if (block.contains("sample_share") && !block["sample_share"].is_null()) {
    char buf[48];
    std::snprintf(buf, sizeof buf, ", %.1f%% of samples",
                  block["sample_share"].get<double>() * 100);
    out += buf;
  }
  const json samples = block.value("samples", json::object()); // items() keeps a reference
  for (const auto& [event, n] : samples.items())
    if (event != clock_event) out += ", " + event + " " + std::to_string(n.get<std::uint64_t>());
  return out;
}

} // namespace

Expected<json> annotate_program(Backend& backend, const AnnotateRequest& request) {
  FDO_TRY(Target target, resolve_target(backend, request.target));
  FDO_TRY(json source, call(backend, "program.source", {{"program", target.program}}));
  const std::int64_t owner = source.value("owner", std::int64_t{-1});
  if (request.foreign == ForeignIr::refuse && owner != static_cast<std::int64_t>(::getuid()))
    return make_error(Errc::permission_denied,
                      "program " + target.program + " belongs to uid " + std::to_string(owner) +
                          ": annotating parses its IR with LLVM in this process, which is not "
                          "hardened against hostile IR. Annotate it as that user, or pass "
                          "--trust-ir if you trust the program");
  FDO_TRY(std::string bytes, base64_decode(source.value("ir_base64", "")));
  std::string pk =
      target.profile_key.empty() ? source.value("profile_key", "") : target.profile_key;
  if (pk.empty())
    return make_error(Errc::not_found,
                      "program " + target.program + " has no profile yet (run a stage first)");
  FDO_TRY(json got, call(backend, "profile.get", {{"profile_key", pk}}));
  FDO_TRY(ProfileDoc doc, profile_from_json(got.value("profile", json::object())));
  FDO_TRY(jit::Annotation annotation, jit::annotate(bytes, doc));

  json functions = json::array();
  for (const jit::AnnotatedFunction& f : annotation.functions)
    if (function_matches(f, request.function)) functions.push_back(function_json(f));
  if (functions.empty() && !request.function.empty())
    return make_error(Errc::not_found,
                      "no function '" + request.function + "' in program " + target.program);
  return json{{"program", target.program},
              {"program_name", source.value("name", "")},
              {"profile_key", pk},
              {"profile_version", got.value("version", std::int64_t{0})},
              {"sampling", annotation.sampling
                               ? json{{"event", annotation.sampling->clock_event},
                                      {"samples", annotation.sampling->clock_samples}}
                               : json(nullptr)},
              {"functions", std::move(functions)},
              {"diagnostics", annotation.diagnostics}};
}

std::string render_annotation(const json& doc) {
  std::ostringstream out;
  out << "; program " << doc.value("program_name", "") << " (" << doc.value("program", "")
      << "), profile " << doc.value("profile_key", "") << " v"
      << doc.value("profile_version", std::int64_t{0}) << "\n";
  for (const json& d : doc.value("diagnostics", json::array()))
    out << "; warning: " << d.get<std::string>() << "\n";
  const json sampling = doc.value("sampling", json());
  const std::string clock_event =
      sampling.is_object() ? sampling.value("event", std::string()) : std::string();
  if (sampling.is_object())
    out << "; sampled: " << sampling.value("samples", std::uint64_t{0}) << " " << clock_event
        << " samples in program code; \"% of samples\" is a block's share of them\n";
  for (const json& f : doc.value("functions", json::array())) {
    out << "\n; function " << f.value("source_name", "");
    if (f["entry_count"].is_null())
      out << ": no counts in the profile\n";
    else
      out << ": entry count " << f["entry_count"].get<std::uint64_t>()
          << (f.value("approximate", false) ? " (counts past 2^32: block counts are proportional)"
                                            : "")
          << "\n";
    const json unplaced = f.value("unplaced_samples", json::object());
    for (const auto& [event, n] : unplaced.items())
      out << "; " << n.get<std::uint64_t>() << " " << event
          << " samples in canonical blocks not shown below (folded away before PGO use)\n";
    out << f.value("signature", "") << "\n";
    bool first = true;
    for (const json& b : f["blocks"]) {
      if (!first) out << "\n";
      first = false;
      std::string note;
      if (!b["count"].is_null()) {
        note = "count " + std::to_string(b["count"].get<std::uint64_t>());
        if (!b["per_call"].is_null()) {
          char buf[48];
          std::snprintf(buf, sizeof buf, ", %.2f per call", b["per_call"].get<double>());
          note += buf;
        }
      } else if (!f["entry_count"].is_null()) {
        note = "count unknown";
      }
      std::string sampled = samples_text(b, clock_event);
      note += note.empty() && !sampled.empty() ? sampled.substr(2) : sampled;
      std::string head = b.value("label", "") + ":";
      if (!note.empty()) {
        head.resize(std::max<std::size_t>(head.size() + 1, 40), ' ');
        head += "; " + note;
      }
      out << head << "\n";
      for (const json& line : b["lines"])
        out << "  " << line.get<std::string>() << "\n";
    }
    out << "}\n";
  }
  return out.str();
}

Status cmd_profile_annotate(Context& ctx, const AnnotateRequest& request) {
  FDO_TRY(auto backend, ctx.backend(Need::read));
  FDO_TRY(json doc, annotate_program(*backend, request));
  if (ctx.json_output()) {
    ctx.emit(doc);
    return ok();
  }
  ctx.io().out << render_annotation(doc);
  return ok();
}

} // namespace fdo::ctl
