#pragma once
// A JSON document together with the source position of every value.
//
// nlohmann::json parses and reports syntax errors (with a byte offset, which we turn into
// line:column), but it does not keep positions of values. After a successful parse, a small
// position scanner walks the same text (iteratively, alongside the parsed document) and
// records, for every value, the line:column where it starts (and for object members, where
// the key starts), keyed by the value's node: memory linear in the file size. A JSON pointer
// is resolved by walking the document. Nesting deeper than kMaxJsonDepth is refused before
// parsing, and files are read through read_input_file (regular files up to a size limit).

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "stretto/support/diag.h"

namespace stretto::plan {

using Json = nlohmann::json;

class JsonSource {
 public:
  /// Parses `text`; `file` is used in locations. Syntax errors become diagnostics.
  static Expected<JsonSource> parse(std::string text, std::string file);
  /// Reads and parses a file.
  static Expected<JsonSource> load(const std::string& path);
  /// Wraps an in-memory value (no positions known; locations carry only the pointer).
  static JsonSource from_json(Json value, std::string file = "<generated>");

  JsonSource() = default;
  JsonSource(JsonSource&&) noexcept = default;
  JsonSource& operator=(JsonSource&&) noexcept = default;
  /// A copy re-indexes its own document (positions are keyed by node).
  JsonSource(const JsonSource& o);
  JsonSource& operator=(const JsonSource& o);

  const Json& root() const { return root_; }
  const std::string& file() const { return file_; }
  const std::string& text() const { return text_; }
  /// The value at JSON pointer `pointer` (RFC 6901), or null when there is none (or the
  /// pointer is malformed). Unlike nlohmann's at(), a miss costs no exception.
  const Json* find(std::string_view pointer) const;

  /// Location of the value at `pointer` (falls back to the nearest known ancestor).
  SourceLoc loc(const std::string& pointer) const;
  /// Location of the key of the object member at `pointer` (falls back to loc()).
  SourceLoc key_loc(const std::string& pointer) const;
  /// The text of line `line` (1-based), without newline.
  std::string line_text(uint32_t line) const;
  /// The text of line `line` windowed around `col` (see window_line; `col` is updated).
  std::string line_window(uint32_t line, uint32_t& col) const;

  /// A diagnostic located at `pointer`, with the source line filled in.
  Diagnostic error_at(const std::string& pointer, std::string message, std::string hint = {},
                      bool at_key = false) const;

 private:
  using Pos = std::array<uint32_t, 4>;  // line, col, key line, key col
  Json root_;
  std::string file_;
  std::string text_;
  Pos root_pos_{0, 0, 0, 0};
  std::unordered_map<const Json*, Pos> pos_;
  mutable std::vector<size_t> line_starts_;  // built on first use
  void index_positions();
  // The deepest node on `pointer`'s path that has a known position, and whether the whole
  // pointer resolved.
  const Pos* find_pos(const std::string& pointer, bool& exact) const;
};

/// Removes the object member at `pointer` of `doc` (nothing when there is none).
void erase_at(Json& doc, const std::string& pointer);

/// Escapes a key for use in a JSON pointer ("~" -> "~0", "/" -> "~1").
std::string pointer_escape(std::string_view key);

}  // namespace stretto::plan
