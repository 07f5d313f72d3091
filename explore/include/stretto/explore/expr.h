#pragma once
// A tiny, safe expression language for sweep constraints ("tp * pp * dp == 64",
// "family != 'dualpipev' || pp >= 2"). No calls, no assignment, no loops: numbers (doubles),
// single- or double-quoted strings, identifiers bound per point, and the C operators
//   || && !  == != < <= > >=  + - * / %  unary -  ( )
// with C precedence. `and`, `or`, `not` are accepted as spellings of && || !. Comparing a
// string with a number, an unknown identifier, or division by zero is an evaluation error
// (reported, never a crash). Parsing is bounded: expressions over 4 KiB or nested deeper than
// 64 levels are rejected.

#include <map>
#include <memory>
#include <string>
#include <variant>

#include "stretto/support/diag.h"

namespace stretto::explore {

/// A value: a number or a string.
using Value = std::variant<double, std::string>;
/// Identifier bindings for one evaluation.
using Bindings = std::map<std::string, Value, std::less<>>;

class Expr {
 public:
  /// Parses `text`; errors name the column and what was expected.
  static Expected<Expr> parse(const std::string& text);
  /// Evaluates; a non-zero number (or a non-empty string) is true.
  Expected<Value> eval(const Bindings& b) const;
  Expected<bool> test(const Bindings& b) const;
  const std::string& text() const { return text_; }
  struct Node;

 private:
  std::shared_ptr<const Node> root_;
  std::string text_;
};

}  // namespace stretto::explore
