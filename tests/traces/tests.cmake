# tests for traces (owner fills in)
stretto_test(traces_reader_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/chrome_reader_test.cpp LIBS stretto::traces)
