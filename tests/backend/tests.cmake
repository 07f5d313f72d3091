# Replay backend: real processes, real Gloo on loopback (only when the backend is built).
if(TARGET stretto_backend)
  stretto_test(backend_test SOURCES backend/backend_test.cpp LIBS stretto::backend)
  add_dependencies(backend_test stretto)
endif()
