// program.source: the IR a program was registered with, for its owner (and
// operators), so `fdoctl profile annotate` can annotate it in the caller's
// own process. fdod itself never parses it (docs/security.md, "Annotated IR").
#include "fdo/util/base64.h"
#include "fdo/util/ir_format.h"
#include "methods.h"

namespace fdo::daemon::methods {

namespace {

Expected<json> program_source_method(ServiceState& s, const json& p, const CallContext& ctx) {
  FDO_TRY(std::string ik, require_param<std::string>(p, "program"));
  // Shared profiles let tenants run each other's programs; the IR itself
  // stays its owner's. Another tenant's program reads as an unknown one.
  const bool op = is_operator(ctx);
  FDO_TRY(ProgramRef rec, s.programs->find(ik, ctx.uid, op ? ProfileSharing::shared : s.sharing()));
  if (!op && rec->owner != ctx.uid)
    return make_error(Errc::not_found, "no program " + ik + " (register it first)");
  const std::string& bytes = rec->program.bytes;
  json out{{"program", rec->ik},
           {"profile_key", rec->pk},
           {"name", rec->name},
           {"owner", rec->owner},
           {"size", static_cast<std::int64_t>(bytes.size())}};
  // Base64 either way: IR text may hold bytes that are not UTF-8 (quoted
  // names), which a JSON string cannot carry.
  out["format"] = is_llvm_bitcode(bytes) ? "bitcode" : "text";
  out["ir_base64"] = base64_encode(bytes);
  return out;
}

} // namespace

void add_program_source_method(Dispatcher& d, ServiceState& s) {
  bind(d, "program.source", s, program_source_method);
}

} // namespace fdo::daemon::methods
