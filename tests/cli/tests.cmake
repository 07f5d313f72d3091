stretto_test(cli_test SOURCES cli/cli_test.cpp LIBS nlohmann_json::nlohmann_json)
add_dependencies(cli_test stretto)
stretto_test(fuzz_replay_test SOURCES ${PROJECT_SOURCE_DIR}/fuzz/replay_dirs_test.cpp ${PROJECT_SOURCE_DIR}/fuzz/plan_fuzz.cpp
  LIBS stretto::traces)
target_compile_definitions(fuzz_replay_test PRIVATE STRETTO_REPLAY_MIN=50
  STRETTO_REPLAY_DIRS="${PROJECT_SOURCE_DIR}/fuzz/corpus|${STRETTO_EXAMPLES}|${STRETTO_TEST_DATA}/schedules")
stretto_test(hostile_input_test SOURCES cli/hostile_input_test.cpp LIBS nlohmann_json::nlohmann_json)
add_dependencies(hostile_input_test stretto)
stretto_test(newcomer_test SOURCES cli/newcomer_test.cpp LIBS nlohmann_json::nlohmann_json)
add_dependencies(newcomer_test stretto)
stretto_test(door_cli_test SOURCES cli/door_cli_test.cpp LIBS nlohmann_json::nlohmann_json)
add_dependencies(door_cli_test stretto)
stretto_test(readme_outputs_test SOURCES cli/readme_outputs_test.cpp LIBS nlohmann_json::nlohmann_json)
add_dependencies(readme_outputs_test stretto)
stretto_test(csv_fuzz_replay_test SOURCES ${PROJECT_SOURCE_DIR}/fuzz/replay_dirs_test.cpp ${PROJECT_SOURCE_DIR}/fuzz/csv_fuzz.cpp
  LIBS stretto::pipelines)
target_compile_definitions(csv_fuzz_replay_test PRIVATE
  STRETTO_REPLAY_DIRS="${PROJECT_SOURCE_DIR}/fuzz/corpus-csv|${STRETTO_TEST_DATA}/builders" STRETTO_REPLAY_MIN=10)
stretto_test(profile_fuzz_replay_test SOURCES ${PROJECT_SOURCE_DIR}/fuzz/replay_dirs_test.cpp ${PROJECT_SOURCE_DIR}/fuzz/profile_fuzz.cpp
  LIBS stretto::costmodel)
target_compile_definitions(profile_fuzz_replay_test PRIVATE
  STRETTO_REPLAY_DIRS="${PROJECT_SOURCE_DIR}/fuzz/corpus-profile|${STRETTO_TEST_DATA}/costmodel" STRETTO_REPLAY_MIN=4)
# explore/ is optional (STRETTO_WITH_EXPLORE): its replay test only where it is built.
if(TARGET stretto_explore)
  stretto_test(sweep_fuzz_replay_test SOURCES ${PROJECT_SOURCE_DIR}/fuzz/replay_dirs_test.cpp ${PROJECT_SOURCE_DIR}/fuzz/sweep_fuzz.cpp
    LIBS stretto::explore)
  target_compile_definitions(sweep_fuzz_replay_test PRIVATE
    STRETTO_REPLAY_DIRS="${PROJECT_SOURCE_DIR}/fuzz/corpus-sweep" STRETTO_REPLAY_MIN=7)
endif()
# The GPU script's CMake options still configure (configure only, into a scratch directory):
# a broken option set fails CI here rather than on a lent GPU.
add_test(NAME gpu_check_configures
  COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/gpu_check.sh --configure-only
          ${CMAKE_BINARY_DIR}/gpu-check-configure)
