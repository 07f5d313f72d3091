#pragma once
// Diagnostics for user input (STYLE.md "Errors at boundaries").
//
// Bad input never aborts: every library entry point that reads user input returns
// `Expected<T>`, i.e. either a value or a non-empty list of `Diagnostic`s. A diagnostic carries
// where the problem is (file, line:column, JSON pointer), which directive caused it, a hint
// ("did you mean ..."), and optional notes that point at other places (e.g. the other
// directives of a deadlock cycle). Broken internal invariants are bugs: STRETTO_ASSERT.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

namespace stretto {

/// Where something is in an input file. line/col are 1-based; 0 means unknown.
struct SourceLoc {
  std::string file;
  uint32_t line = 0;
  uint32_t col = 0;
  std::string json_pointer;  // RFC 6901, "" = whole document

  bool known() const { return line != 0; }
  /// "plan.json:12:5 (/schedule/3/filter)" or "plan.json (/schedule/3)" or "plan.json".
  std::string str() const;
};

enum class Severity : uint8_t { kError, kWarning, kNote };

struct DiagNote {
  SourceLoc loc;
  std::string message;
};

struct Diagnostic {
  Severity severity = Severity::kError;
  std::string message;
  SourceLoc loc;
  int directive = -1;  // index into schedule[], -1 if not about a directive
  std::string hint;    // "did you mean 'devices'?"
  std::vector<DiagNote> notes;
  std::string source_line;  // the offending line of the file, for a caret display

  /// Multi-line human rendering: "file:line:col: error: msg [directive 3]\n  line\n  ^\n  hint".
  std::string render() const;
};

using Diagnostics = std::vector<Diagnostic>;

template <class T>
using Expected = std::expected<T, Diagnostics>;

inline std::unexpected<Diagnostics> fail(Diagnostic d) {
  return std::unexpected<Diagnostics>(Diagnostics{std::move(d)});
}
inline std::unexpected<Diagnostics> fail(Diagnostics ds) {
  return std::unexpected<Diagnostics>(std::move(ds));
}

/// Renders all diagnostics, one after another.
std::string render_all(const Diagnostics& ds);

/// Levenshtein distance, for "did you mean" hints.
size_t edit_distance(std::string_view a, std::string_view b);
/// The candidate nearest to `word` if it is close enough to be a plausible typo, else "".
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

[[noreturn]] void assert_fail(const char* cond, const char* why, const char* file, int line);

}  // namespace stretto

#define STRETTO_ASSERT(cond, why)                                       \
  do {                                                                  \
    if (!(cond)) ::stretto::assert_fail(#cond, why, __FILE__, __LINE__); \
  } while (0)
