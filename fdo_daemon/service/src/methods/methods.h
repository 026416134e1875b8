// The JSON-RPC methods (docs/fdod.md, schemas/methods/), one named handler per
// method, grouped by family. Each add_* registers its family's handlers.
#pragma once

#include "../state.h"
#include "fdo/daemon/jsonrpc.h"

#include <nlohmann/json.hpp>

namespace fdo::daemon::methods {

using nlohmann::json;

// health, capabilities, metrics, config
void add_status_methods(Dispatcher& d, ServiceState& s);
// program.register, program.compile, execute
void add_program_methods(Dispatcher& d, ServiceState& s);
// profile.list, profile.get, profile.history, profile.pin, profile.unpin,
// profile.reset, profile.export, profile.import
void add_profile_methods(Dispatcher& d, ServiceState& s);
// cache.stats, cache.explain
void add_cache_methods(Dispatcher& d, ServiceState& s);

// --- shared by the families ---------------------------------------------

// A program named by "program" (an id) or submitted inline ("ir" / "ir_base64",
// registered on the way).
Expected<ProgramRef> program_param(ServiceState& s, const json& params, const CallContext& ctx);
// The IR of a request: "ir" (text) or "ir_base64" (text or bitcode).
Expected<std::string> program_source(const json& params);
// The "cache" object of a stage: outcome, reason, detail.
json cache_outcome_json(const cache::StageOutput& so);

// The execute method (execute.cpp): one stage.
Expected<json> execute(ServiceState& s, const json& params, const CallContext& ctx);

// Binds a handler of the form `Expected<json> fn(ServiceState&, const json&,
// const CallContext&)` to the dispatcher. MethodClass::control only for
// methods that never wait on a worker, the store or a compile (the server
// runs them on its small control pool).
template <class Fn>
void bind(Dispatcher& d, const char* method, ServiceState& s, Fn fn,
          MethodClass method_class = MethodClass::work) {
  d.add(
      method,
      [&s, fn](const json& params, const CallContext& ctx) -> Expected<json> {
        return fn(s, params, ctx);
      },
      method_class);
}

} // namespace fdo::daemon::methods
