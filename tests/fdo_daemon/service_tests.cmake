fdo_test(daemon_service_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/policy_test.cpp ${CMAKE_CURRENT_LIST_DIR}/abi_test.cpp
  LIBS fdo_daemon)
