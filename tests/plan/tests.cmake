# plan/: the parser's located diagnostics and docs/plan.schema.json against the parser.
stretto_test(plan_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/parser_test.cpp ${CMAKE_CURRENT_LIST_DIR}/schema_test.cpp
  LIBS stretto::costmodel)
