// program.register, program.compile (execute is in execute.cpp).
#include "fdo/util/base64.h"
#include "methods.h"

namespace fdo::daemon::methods {

namespace {

json entries_json(const std::vector<jit::EntryInfo>& entries) {
  json out = json::array();
  for (const auto& e : entries)
    out.push_back({{"name", e.name}, {"returns", e.return_type}, {"params", e.param_types}});
  return out;
}

Expected<json> program_register(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string raw, program_source(p));
  FDO_TRY(std::string name, optional_param<std::string>(p, "name", ""));
  auto cfg = s.config.get();
  FDO_TRY(ProgramRef rec, s.programs->add(raw, name, ctx.uid, TenantScope::of(ctx.uid, s.sharing()),
                                          cfg->max_program_bytes, cfg->max_programs_per_uid));
  return json{{"program", rec->ik},
              {"profile_key", rec->pk},
              {"name", rec->name},
              {"size", static_cast<std::int64_t>(rec->program.bytes.size())},
              {"entries", entries_json(rec->entries)}};
}

Expected<json> program_compile(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string ik, require_param<std::string>(p, "program"));
  FDO_TRY(ProgramRef rec, s.programs->find(ik, ctx.uid, s.sharing()));
  FDO_TRY(cache::StageOutput so, s.orch->prepare(rec->program, cache::TierUp::sync));
  return json{{"program", so.ik},
              {"profile_key", so.pk},
              {"cache_key", so.ck},
              {"storage_key", so.storage_key},
              {"mode", std::string(to_string(so.mode))},
              {"profile_version", so.profile_version},
              {"cache", cache_outcome_json(so)},
              {"compile_ms", so.compile_ms}};
}

} // namespace

Expected<std::string> program_source(const json& params) {
  if (params.contains("ir") && params.contains("ir_base64"))
    return make_error(Errc::invalid_argument, "give either \"ir\" or \"ir_base64\", not both");
  if (params.contains("ir")) return require_param<std::string>(params, "ir");
  if (params.contains("ir_base64")) {
    FDO_TRY(std::string text, require_param<std::string>(params, "ir_base64"));
    return base64_decode(text);
  }
  return make_error(Errc::invalid_argument,
                    "missing program: give \"program\" (an id from program.register), \"ir\" "
                    "(IR text) or \"ir_base64\" (IR text or bitcode)");
}

Expected<ProgramRef> program_param(ServiceState& s, const json& params, const CallContext& ctx) {
  if (params.contains("program")) {
    FDO_TRY(std::string ik, require_param<std::string>(params, "program"));
    return s.programs->find(ik, ctx.uid, s.sharing());
  }
  FDO_TRY(std::string raw, program_source(params));
  FDO_TRY(std::string name, optional_param<std::string>(params, "name", ""));
  auto cfg = s.config.get();
  return s.programs->add(raw, name, ctx.uid, TenantScope::of(ctx.uid, s.sharing()),
                         cfg->max_program_bytes, cfg->max_programs_per_uid);
}

void write_cache_outcome(JsonText& t, const cache::StageOutput& so) {
  t.begin_object()
      .field("outcome", cache::to_string(so.outcome))
      .field("reason", cache::to_string(so.explanation.reason))
      .field("detail", so.explanation.text)
      .end_object();
}

json cache_outcome_json(const cache::StageOutput& so) {
  JsonText t;
  write_cache_outcome(t, so);
  return json::parse(t.text());
}

void add_program_methods(Dispatcher& d, ServiceState& s) {
  bind(d, "program.register", s, program_register);
  bind(d, "program.compile", s, program_compile);
  // The only method that takes descriptors: memfd buffers (docs/fdod-protocol.md).
  bind(d, "execute", s, execute, MethodClass::work, RequestFds::accepted);
}

} // namespace fdo::daemon::methods
