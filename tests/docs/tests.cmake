# docs: README.md and docs/*.md resolve inside the repository (links, anchors, citations), and
# what they quote of result files kept in the repository equals those files.
stretto_test(docs_links_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/docs_links_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/docs_figures_test.cpp)
target_compile_definitions(docs_links_test PRIVATE STRETTO_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
