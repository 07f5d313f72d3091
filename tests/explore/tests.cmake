find_package(SQLite3 REQUIRED)  # (explore_test writes a schema-1 results database)
stretto_test(explore_test SOURCES explore/explore_test.cpp explore/sweep_cli_test.cpp
  explore/door_consistency_test.cpp
  LIBS stretto::explore SQLite::SQLite3)
add_dependencies(explore_test stretto)
# The single-node Slurm check (scripts/slurm_test.sh): skips itself (exit 77) where the
# daemons cannot start.
add_test(NAME slurm_array_sweep COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/slurm_test.sh
  $<TARGET_FILE:stretto>)
set_tests_properties(slurm_array_sweep PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 RUN_SERIAL TRUE)
