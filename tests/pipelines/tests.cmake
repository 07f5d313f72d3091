# pipelines/: schedule builders and torch CSV interop. The CLI tests run the stretto binary when
# it has been built (full build / CI) and skip otherwise.
stretto_test(pipelines_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/builders_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/torch_csv_test.cpp
  LIBS stretto::compiler)
