// fdoctl talks to fdod through libfdo's client core (libfdo/include/fdo/client/rpc_client.h);
// these names keep fdoctl's code and its users reading as before.
#pragma once

#include "fdo/client/rpc_client.h"

namespace fdo::ctl {

using client::ClientOptions;
using client::decode_reply;
using client::default_socket_path;
using client::errc_from_name;
using client::kSystemSocketPath;
using client::Reply;
using client::RpcClient;
using client::RpcFailure;

// ClientOptions for fdoctl: its name and its flags in the advice.
inline ClientOptions cli_client_options() {
  ClientOptions o;
  o.client_name = "fdoctl";
  o.connect_hint = "pass --socket PATH / set FDO_SOCKET; to read profiles while the daemon is "
                   "down pass --state-dir DIR";
  o.timeout_hint = "raise --timeout for long compiles or executions";
  return o;
}

} // namespace fdo::ctl
