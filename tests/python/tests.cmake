# The Python package's pytest suite (tests/python/*.py), one ctest entry. run_pytest.py exits
# 77 (skipped) when the interpreter has no pytest; scripts/setup.sh installs it, so CI runs it.
add_test(NAME python_pytest
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/run_pytest.py
                 ${CMAKE_CURRENT_SOURCE_DIR}/python
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python_pytest PROPERTIES
  SKIP_RETURN_CODE 77
  TIMEOUT 900
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;PYTHONPATH=${CMAKE_BINARY_DIR}/python;STRETTO_BINARY=$<TARGET_FILE:stretto>;STRETTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};STRETTO_UNDER_XVFB=${PROJECT_SOURCE_DIR}/scripts/under_xvfb.sh")
