# engine/: the discrete-event kernel and max-min link sharing
stretto_test(engine_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/engine_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/maxmin_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/event_queue_test.cpp
  LIBS stretto::sim)
# the engine's private event queue (header only)
target_include_directories(engine_test PRIVATE ${PROJECT_SOURCE_DIR}/engine/src)
