# sim/inspect.h (memory by category, wait causes) and Session::from_text
stretto_test(sim_inspect_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/inspect_test.cpp LIBS stretto::sim)
# Every collective and transfer the compiler emits: NCCL's bytes and the α–β time the cost
# model gives them, as the simulator asks it (sim::CostQueries)
stretto_test(sim_collectives_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/collective_bytes_test.cpp
  LIBS stretto::sim)
# sim/coverage.h: which of a plan's ops and collectives a profiled table prices
stretto_test(sim_coverage_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/coverage_test.cpp LIBS stretto::sim)
# sim/pipeline_metrics.h and Result's MFU: what each step metric counts
stretto_test(sim_metrics_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cpp LIBS stretto::sim)
# sim/critical_path.h: the critical path's summary and JSON
stretto_test(sim_critical_path_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/critical_path_test.cpp LIBS stretto::sim)
# tp_comm_overlap: the chunked pairs' prices, a step by hand, exposed comm, refusals
stretto_test(sim_tp_overlap_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/tp_overlap_test.cpp LIBS stretto::sim)
# sim/caching_allocator.h: PyTorch's CUDA caching allocator by hand, and simulate's reserved bytes
stretto_test(sim_allocator_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/allocator_test.cpp LIBS stretto::sim)
# (and the reserved replay's order of effects, sim/src/replay_order.h)
target_include_directories(sim_allocator_test PRIVATE ${PROJECT_SOURCE_DIR}/sim/src)
# recost_program and simulate(previous): a cost-model edit re-costs the previous program; the
# result equals a fresh simulation field by field
stretto_test(sim_recost_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/recost_test.cpp LIBS stretto::sim)
# context parallelism: rank order, s/cp ops, the ring pairs' prices, a step by hand, memory, refusals
stretto_test(sim_cp_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cp_test.cpp LIBS stretto::sim)
