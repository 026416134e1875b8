// The version of fdod's wire protocol (docs/fdod-protocol.md, "Handshake"),
// shared by the daemon's `hello` method and the client libraries. The major
// version changes when a client of the old one would misread the new one;
// the minor version when something is added that old clients can ignore.
#pragma once

namespace fdo {

inline constexpr int kProtocolMajor = 1;
inline constexpr int kProtocolMinor = 0;

} // namespace fdo
