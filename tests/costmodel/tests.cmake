# Cost model tests (costmodel/): fixed, analytic compute, NCCL collectives, profiled tables,
# option and table diagnostics. Data: tests/data/costmodel/.
stretto_test(costmodel_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/fixed_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/analytic_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/nccl_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/profiled_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/options_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/fidelity_costmodel_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/calibration_test.cpp
  LIBS stretto::costmodel)
# Context parallelism's attention closed forms (costmodel/cp_attention.h), by hand
stretto_test(costmodel_cp_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cp_attention_test.cpp
  LIBS stretto::costmodel)
