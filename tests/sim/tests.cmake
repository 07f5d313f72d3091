# sim/inspect.h (memory by category, wait causes) and Session::from_text
stretto_test(sim_inspect_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/inspect_test.cpp LIBS stretto::sim)
