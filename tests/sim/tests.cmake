# tests for sim: the discrete-event engine and max-min link sharing
stretto_test(sim_engine_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/engine_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/maxmin_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/event_queue_test.cpp
  LIBS stretto::sim)
# the engine's private event queue (header only)
target_include_directories(sim_engine_test PRIVATE ${PROJECT_SOURCE_DIR}/sim/src)
# sim/inspect.h (memory by category, wait causes) and Session::from_text
stretto_test(sim_inspect_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/inspect_test.cpp LIBS stretto::sim)
