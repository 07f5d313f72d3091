# Replay backend: real processes, real Gloo on loopback (only when the backend is built).
if(TARGET stretto_backend)
  # backend_test calls ATen itself (reference tensors, operator hooks): LibTorch's include path
  # comes with stretto_torch, not through stretto::backend (a wheel's headers are not in /usr).
  stretto_test(backend_test SOURCES backend/backend_test.cpp LIBS stretto::backend stretto_torch)
  add_dependencies(backend_test stretto)
endif()
