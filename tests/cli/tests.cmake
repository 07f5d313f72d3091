stretto_test(cli_test SOURCES cli/cli_test.cpp LIBS nlohmann_json::nlohmann_json)
add_dependencies(cli_test stretto)
stretto_test(fuzz_replay_test SOURCES ${PROJECT_SOURCE_DIR}/fuzz/replay_test.cpp ${PROJECT_SOURCE_DIR}/fuzz/plan_fuzz.cpp
  LIBS stretto::traces)
target_compile_definitions(fuzz_replay_test PRIVATE STRETTO_FUZZ_CORPUS="${PROJECT_SOURCE_DIR}/fuzz/corpus")
