# The lead's part of fdo_daemon: feedback policy, call ABI, the service
# (store/compiler adapters, JSON-RPC methods, feedback loop) and the worker
# job handlers.
list(APPEND FDO_DAEMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/abi.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/policy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/service.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/worker_jobs.cpp)
list(APPEND FDO_DAEMON_LIBS fdo_profile_store fdo_cache fdo_jit fdo_perf)
