# Thin binaries over the fdo_daemon library, placed at the top of the build
# tree so fdod finds fdo-worker beside itself.
add_executable(fdod ${CMAKE_CURRENT_SOURCE_DIR}/main.cpp)
target_link_libraries(fdod PRIVATE fdo_daemon CLI11::CLI11)
add_executable(fdo-worker ${CMAKE_CURRENT_SOURCE_DIR}/worker_main.cpp)
target_link_libraries(fdo-worker PRIVATE fdo_daemon)
set_target_properties(fdod fdo-worker PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
