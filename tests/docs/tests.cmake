# docs: README.md and docs/*.md resolve inside the repository (links, anchors, citations).
stretto_test(docs_links_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/docs_links_test.cpp)
target_compile_definitions(docs_links_test PRIVATE STRETTO_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
