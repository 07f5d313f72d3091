#pragma once
// Runs the `stretto` binary from a test: exit code, stdout and stderr, in a per-process
// temporary folder (issue 14's CLI tests).
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace stretto_test {

struct Result {
  int code;
  std::string out, err;
};

inline std::filesystem::path tmpdir() {
  static const std::filesystem::path d = [] {
    std::filesystem::path p =
        std::filesystem::temp_directory_path() / ("stretto_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    return p;
  }();
  return d;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Runs `shell_command` (which must send stderr to `err`) and collects the results.
inline Result run_shell(const std::string& shell_command, const std::filesystem::path& err) {
  FILE* f = popen(shell_command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  const int status = pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out, slurp(err)};
}

/// An example plan's path (examples/NAME).
inline std::string example(const std::string& name) {
  return std::string(STRETTO_EXAMPLES) + "/" + name;
}

/// Writes `text` to NAME in the temporary folder; returns its path.
inline std::filesystem::path write_file(const std::string& name, const std::string& text) {
  const std::filesystem::path p = tmpdir() / name;
  std::ofstream(p) << text;
  return p;
}

}  // namespace stretto_test
