stretto_test(integration_test
  SOURCES integration/simulate_test.cpp integration/trace_test.cpp integration/closed_forms_test.cpp
    integration/simulated_golden_test.cpp
    integration/granularity_test.cpp integration/bench_plans_test.cpp
  LIBS stretto::traces)
stretto_test(fidelity_test
  SOURCES integration/fidelity_test.cpp integration/op_class_fidelity_test.cpp
  LIBS stretto::sim stretto::traces)
