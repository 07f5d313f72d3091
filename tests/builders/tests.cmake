# Schedule builders and torch CSV interop (issue 3). The CLI tests run the stretto binary when
# it has been built (full build / CI) and skip otherwise.
stretto_test(stretto_builders_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/builders_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/torch_csv_test.cpp
  LIBS stretto::schedules)
