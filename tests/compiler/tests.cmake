# compiler/: passes, lowering, golden compile summaries, published-shape compiles.
stretto_test(compiler_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/golden_test.cpp ${CMAKE_CURRENT_LIST_DIR}/compiler_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/megatron_rules_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/fidelity_compile_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/microbatch_template_test.cpp
  LIBS stretto::compiler)
