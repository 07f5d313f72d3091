#pragma once
// Runs the `stretto` binary of this build (STRETTO_BINARY) for CLI-level tests.
#include <cstdio>
#include <string>
#include <utility>

/// Runs `stretto ARGS` with single-threaded BLAS; stderr goes to `err_file`. Returns the exit
/// code and stdout.
inline std::pair<int, std::string> run_stretto(const std::string& args,
                                               const std::string& err_file = "/dev/null") {
  const std::string cmd = "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 " + std::string(STRETTO_BINARY) +
                          " " + args + " 2>" + err_file;
  FILE* f = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int rc = pclose(f);
  return {WEXITSTATUS(rc), out};
}
