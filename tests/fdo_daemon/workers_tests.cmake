# Tests of the worker part of fdo_daemon: message framing, the worker loop and
# the supervised pool. fdo_test_worker is a worker program with misbehaving
# jobs (crash, loop, exhaust memory, lie about lengths) used only by these tests.
add_executable(fdo_test_worker ${CMAKE_CURRENT_LIST_DIR}/test_worker_main.cpp)
target_link_libraries(fdo_test_worker PRIVATE fdo_daemon)

fdo_test(worker_tests
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/ipc_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/worker_loop_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/worker_pool_test.cpp
  LIBS fdo_daemon)
target_compile_definitions(worker_tests PRIVATE
  FDO_TEST_WORKER="$<TARGET_FILE:fdo_test_worker>")
add_dependencies(worker_tests fdo_test_worker)
