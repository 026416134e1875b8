fdo_test(daemon_policy_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/policy_test.cpp LIBS fdo_daemon)
