# The socket server part of fdo_daemon: NDJSON framing, JSON-RPC dispatch,
# the Boost.Asio Unix-socket server, configuration and systemd integration.
list(APPEND FDO_DAEMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/framing.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/jsonrpc.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/systemd.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/server.cpp)
list(APPEND FDO_DAEMON_LIBS
  nlohmann_json::nlohmann_json Boost::headers Threads::Threads PkgConfig::SYSTEMD)
