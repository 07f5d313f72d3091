stretto_test(cli_test SOURCES cli/cli_test.cpp LIBS nlohmann_json::nlohmann_json)
add_dependencies(cli_test stretto)
