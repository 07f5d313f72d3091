stretto_test(traces_reader_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/chrome_reader_test.cpp LIBS stretto::traces)
# Trace tests (traces/): the streaming Kineto/Chrome reader, the Kineto importer, op labels,
# timelines and `compare`. Data: tests/data/traces/ (make_synthetic.py writes the hand-made
# traces; real/ holds traces PyTorch 2.11's profiler wrote on an H100, see docs/validation.md).
stretto_test(traces_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/kineto_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/compare_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/kineto_step_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/profile_options_test.cpp
  LIBS stretto::traces)
add_dependencies(traces_test stretto)
