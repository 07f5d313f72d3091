#pragma once
// A JSON document together with the source position of every value.
//
// nlohmann::json parses and reports syntax errors (with a byte offset, which we turn into
// line:column), but it does not keep positions of values. After a successful parse, a small
// position scanner walks the same text and records, for every JSON pointer, the line:column
// where its value starts (and for object members, where the key starts). Semantic checks then
// report errors at the exact place in the user's file.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>

#include "stretto/schedules/diag.h"

namespace stretto {

using Json = nlohmann::json;

class JsonSource {
 public:
  /// Parses `text`; `file` is used in locations. Syntax errors become diagnostics.
  static Expected<JsonSource> parse(std::string text, std::string file);
  /// Reads and parses a file.
  static Expected<JsonSource> load(const std::string& path);
  /// Wraps an in-memory value (no positions known; locations carry only the pointer).
  static JsonSource from_json(Json value, std::string file = "<generated>");

  const Json& root() const { return root_; }
  const std::string& file() const { return file_; }
  const std::string& text() const { return text_; }

  /// Location of the value at `pointer` (falls back to the nearest known ancestor).
  SourceLoc loc(const std::string& pointer) const;
  /// Location of the key of the object member at `pointer` (falls back to loc()).
  SourceLoc key_loc(const std::string& pointer) const;
  /// The text of line `line` (1-based), without newline.
  std::string line_text(uint32_t line) const;

  /// A diagnostic located at `pointer`, with the source line filled in.
  Diagnostic error_at(const std::string& pointer, std::string message, std::string hint = {},
                      bool at_key = false) const;

 private:
  struct Pos {
    uint32_t line, col, key_line, key_col;
  };
  Json root_;
  std::string file_;
  std::string text_;
  std::unordered_map<std::string, Pos> pos_;
  void index_positions();
};

/// Escapes a key for use in a JSON pointer ("~" -> "~0", "/" -> "~1").
std::string pointer_escape(std::string_view key);

}  // namespace stretto
