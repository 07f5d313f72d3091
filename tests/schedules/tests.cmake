stretto_test(schedules_test
  SOURCES schedules/golden_test.cpp schedules/compiler_test.cpp schedules/parser_test.cpp
    schedules/fidelity_compile_test.cpp
    schedules/limits_test.cpp schedules/schema_test.cpp
  LIBS stretto::schedules)
