# tests for sim: the discrete-event engine and max-min link sharing
stretto_test(sim_engine_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/engine_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/maxmin_test.cpp
  LIBS stretto::sim)
