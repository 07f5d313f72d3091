# tests for gui: headless ImGui panels with injected input, and a real window under Xvfb
if(TARGET stretto_gui)
  stretto_test(gui_test
    SOURCES
      ${CMAKE_CURRENT_LIST_DIR}/timeline_test.cpp
      ${CMAKE_CURRENT_LIST_DIR}/panels_test.cpp
    LIBS stretto::gui nlohmann_json::nlohmann_json)
  # The real window: its own target so its tests hold the xvfb lock (xvfb-run -a picks display
  # numbers racily).
  add_executable(gui_window_test ${CMAKE_CURRENT_LIST_DIR}/window_test.cpp)
  target_link_libraries(gui_window_test PRIVATE stretto::gui nlohmann_json::nlohmann_json
    GTest::gtest_main stretto_warnings)
  target_compile_definitions(gui_window_test PRIVATE
    STRETTO_EXAMPLES="${STRETTO_EXAMPLES}" STRETTO_BINARY="$<TARGET_FILE:stretto>"
    STRETTO_GUI_SHOTS="${CMAKE_BINARY_DIR}/gui_shots" STRETTO_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    STRETTO_UNDER_XVFB="${PROJECT_SOURCE_DIR}/scripts/under_xvfb.sh")
  add_dependencies(gui_window_test stretto)
  gtest_discover_tests(gui_window_test DISCOVERY_TIMEOUT 60 PROPERTIES RESOURCE_LOCK xvfb)
endif()
