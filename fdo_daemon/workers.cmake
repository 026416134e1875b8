# The worker-process part of fdo_daemon: the message channel between the daemon
# and its workers (ipc), the worker-side job loop, and the supervised pool.
list(APPEND FDO_DAEMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/ipc.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/worker_loop.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/worker_pool.cpp)
list(APPEND FDO_DAEMON_LIBS nlohmann_json::nlohmann_json Threads::Threads)
