# profile and validate (backend/src/loop_validate.cpp, cli/cmd_validate.cpp): real replays of
# tiny two-process plans over Gloo. Only with the LibTorch backend.
if(TARGET stretto_backend)
  stretto_test(loop_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/loop_test.cpp LIBS stretto::backend)
  add_dependencies(loop_test stretto)
endif()
