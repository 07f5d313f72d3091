stretto_test(integration_test
  SOURCES integration/simulate_test.cpp integration/trace_test.cpp integration/closed_forms_test.cpp
    integration/simulated_golden_test.cpp
    integration/granularity_test.cpp integration/bench_plans_test.cpp
  LIBS stretto::traces)
# granularity_test's reference counters use sim/src's radix sort and counter sampling
target_include_directories(integration_test PRIVATE ${PROJECT_SOURCE_DIR}/sim/src)
stretto_test(fidelity_test
  SOURCES integration/fidelity_test.cpp integration/op_class_fidelity_test.cpp
  LIBS stretto::sim stretto::traces)
