# Tests of the server part of fdo_daemon (framing, JSON-RPC, config, the Asio
# server in-process and as a process, systemd units).
add_executable(fdod_test_server ${CMAKE_CURRENT_LIST_DIR}/test_server_main.cpp)
target_link_libraries(fdod_test_server PRIVATE fdo_daemon CLI11::CLI11)

fdo_test(daemon_server_tests
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/framing_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/jsonrpc_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/config_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/server_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/server_process_test.cpp
  LIBS fdo_daemon)
target_compile_definitions(daemon_server_tests PRIVATE
  FDO_TEST_SERVER="$<TARGET_FILE:fdod_test_server>")
add_dependencies(daemon_server_tests fdod_test_server)

# systemd-analyze verify on the shipped units (ExecStart pointed at a built
# binary, since verify checks that it exists). Exit 77 = skipped.
add_test(NAME daemon_server_units_verify
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/verify_units.sh
          ${PROJECT_SOURCE_DIR}/tools/systemd $<TARGET_FILE:fdod_test_server>)
set_tests_properties(daemon_server_units_verify PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60)
