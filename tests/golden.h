#pragma once
// Golden files shared by the compile and simulate goldens: a test's text against its .expected
// file. On a difference the test prints a line diff and fails. After a deliberate change, run
// the test with STRETTO_UPDATE_GOLDEN=accept: it writes the new text, prints the same diff and
// passes; review `git diff tests/data` before committing. Any other value of the variable
// writes nothing and fails like an unset one (so that a habit of `=1` cannot refresh blindly).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace stretto::testing {

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

/// The lines only in `expected` ("-") and only in `actual` ("+"), with their line numbers, by a
/// longest common subsequence of the two (golden files are small).
inline std::string line_diff(const std::string& expected, const std::string& actual) {
  const auto a = lines_of(expected), b = lines_of(actual);
  std::vector<std::vector<int>> lcs(a.size() + 1, std::vector<int>(b.size() + 1, 0));
  for (size_t i = a.size(); i-- > 0;)
    for (size_t j = b.size(); j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::string out;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && j < b.size() && a[i] == b[j]) {
      ++i, ++j;
    } else if (i < a.size() && (j == b.size() || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out += "-" + std::to_string(i + 1) + ": " + a[i] + "\n";
      ++i;
    } else {
      out += "+" + std::to_string(j + 1) + ": " + b[j] + "\n";
      ++j;
    }
  }
  if (out.empty() && expected != actual) out = "(the texts differ in line endings only)\n";
  return out;
}

/// Compares `actual` with the golden file `expected_path` (see the header comment).
inline void check_golden(const std::filesystem::path& expected_path, const std::string& actual) {
  const char* env = std::getenv("STRETTO_UPDATE_GOLDEN");
  const bool accept = env != nullptr && std::string(env) == "accept";
  const bool exists = std::filesystem::exists(expected_path);
  const std::string expected = exists ? read_text(expected_path) : std::string();
  if (exists && expected == actual) return;
  const std::string diff = line_diff(expected, actual);
  if (accept) {
    std::ofstream(expected_path, std::ios::binary) << actual;
    std::printf("wrote %s (STRETTO_UPDATE_GOLDEN=accept):\n%s", expected_path.string().c_str(),
                diff.c_str());
    return;
  }
  ADD_FAILURE() << (exists ? "differs from " : "missing ") << expected_path.string() << ":\n"
                << diff
                << (env ? "STRETTO_UPDATE_GOLDEN=" + std::string(env) + " writes nothing; " : "")
                << "after a deliberate change, rerun with STRETTO_UPDATE_GOLDEN=accept and "
                   "review the diff";
}

}  // namespace stretto::testing
