# The lead's part of fdo_daemon: feedback policy, call ABI, store/compiler
# adapters, JSON-RPC methods, worker job handlers.
list(APPEND FDO_DAEMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/abi.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/policy.cpp)
