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
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
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
  /// Column of the caret in source_line when that is a window of a long line (limits.h
  /// window_line); 0 = loc.col. Long lines are windowed when rendered either way.
  uint32_t caret_col = 0;

  /// Multi-line human rendering: "file:line:col: error: msg [directive 3]\n  line\n  ^\n  hint".
  std::string render() const;
};

using Diagnostics = std::vector<Diagnostic>;

/// The failure half of an Expected: built by fail(), converts to any Expected<T>.
struct Failure {
  Diagnostics diags;
};
inline Failure fail(Diagnostic d) {
  return Failure{Diagnostics{std::move(d)}};
}
inline Failure fail(Diagnostics ds) {
  return Failure{std::move(ds)};
}

/// A value or the diagnostics explaining why there is none: the subset of C++23's
/// std::expected<T, Diagnostics> that Stretto uses. Our own because Debian's clang 14 (needed
/// for libFuzzer) cannot compile libstdc++ 12's <expected>.
template <class T>
class [[nodiscard]] Expected {
 public:
  using value_type = T;
  Expected(const T& v) : v_(std::in_place_index<0>, v) {}
  Expected(T&& v) : v_(std::in_place_index<0>, std::move(v)) {}
  template <class U, std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                          !std::is_same_v<std::decay_t<U>, Expected> &&
                                          !std::is_same_v<std::decay_t<U>, Failure> &&
                                          !std::is_same_v<std::decay_t<U>, T>,
                                      int> = 0>
  Expected(U&& u) : v_(std::in_place_index<0>, std::forward<U>(u)) {}
  Expected(Failure f) : v_(std::in_place_index<1>, std::move(f.diags)) {}

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }
  T&& operator*() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  Diagnostics& error() & { return std::get<1>(v_); }
  const Diagnostics& error() const& { return std::get<1>(v_); }
  Diagnostics&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Diagnostics> v_;
};

template <>
class [[nodiscard]] Expected<void> {
 public:
  Expected() = default;
  Expected(Failure f) : e_(std::move(f.diags)) {}
  bool has_value() const { return !e_; }
  explicit operator bool() const { return has_value(); }
  Diagnostics& error() & { return *e_; }
  const Diagnostics& error() const& { return *e_; }

 private:
  std::optional<Diagnostics> e_;
};

/// Renders all diagnostics, one after another.
std::string render_all(const Diagnostics& ds);

/// Levenshtein distance, for "did you mean" hints.
size_t edit_distance(std::string_view a, std::string_view b);
/// The candidate nearest to `word` if it is close enough to be a plausible typo, else "".
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

[[noreturn]] void assert_fail(const char* cond, const char* why, const char* file, int line);

}  // namespace stretto

#define STRETTO_ASSERT(cond, why)                                        \
  do {                                                                   \
    if (!(cond)) ::stretto::assert_fail(#cond, why, __FILE__, __LINE__); \
  } while (0)
