# support/: input limits, byte sizes, checked arithmetic, line windows.
stretto_test(support_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/limits_test.cpp LIBS stretto::plan)
