// A message header as text, for error messages only (never on the wire):
// invalid UTF-8 replaced, so a handler's message quoting client bytes prints.
// Shared by the header encoding (ipc_header.cpp) and the job protocol
// (job_protocol.cpp); private to fdo_daemon_workers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace fdo::daemon::detail {

std::string dump_header(const nlohmann::json& header);

} // namespace fdo::daemon::detail
