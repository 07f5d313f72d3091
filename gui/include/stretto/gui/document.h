#pragma once
// The plan being edited: its JSON text (the one source of truth: every widget edits it and
// the worker simulates it), where it lives on disk, and undo/redo.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace stretto::gui {

using OJson = nlohmann::ordered_json;  // keeps the user's key order

class Document {
 public:
  /// Loads `path`; false (and `error`) if it cannot be read. A file that is not valid JSON
  /// still loads: its text is shown and its diagnostics come from the simulation.
  bool load(const std::string& path, std::string* error);
  /// Starts an untitled document.
  void reset(std::string text, std::string path = {});
  /// Writes the text to `path` (empty: the current path) and makes it the current path.
  bool save(const std::string& path, std::string* error);

  const std::string& text() const { return text_; }
  const std::string& path() const { return path_; }
  /// Directory that relative paths in the plan resolve from.
  std::string base_dir() const;
  /// Name shown in diagnostics.
  std::string display_name() const { return path_.empty() ? "<untitled>" : path_; }
  /// The text differs from the file's (as loaded or last saved).
  bool dirty() const { return text_ != saved_; }
  uint64_t revision() const { return revision_; }

  /// Replaces the text (one undo step). `coalesce`: merge with the previous step if it was
  /// also a coalescing edit (typing, dragging a slider).
  void set_text(std::string text, bool coalesce = false);
  /// The text parsed as JSON, or nullopt when it is not valid JSON.
  const std::optional<OJson>& json() const;
  /// The same, unordered (the plan library's JSON type: plan/schema.h takes it); null when the
  /// text is not JSON. Converted once per revision: the Plan panel's tabs read it every frame.
  const nlohmann::json& plain_json() const;
  /// Sets the value at a JSON pointer ("/schedule/3/num_microbatches"), creating object
  /// members as needed; false if the text is not JSON or the pointer cannot be set.
  bool set(const std::string& pointer, const OJson& value, bool coalesce = false);
  /// Removes the value at `pointer` (an object member or an array element).
  bool erase(const std::string& pointer);
  /// Replaces the whole document with `j`, formatted like the examples.
  void set_json(const OJson& j, bool coalesce = false);

  bool can_undo() const { return !undo_.empty(); }
  bool can_redo() const { return !redo_.empty(); }
  void undo();
  void redo();
  /// Ends a coalescing edit (the next coalescing edit starts a new undo step).
  void seal() { coalescing_ = false; }

 private:
  std::string text_, path_, saved_;
  std::vector<std::string> undo_, redo_;
  bool coalescing_ = false;
  uint64_t revision_ = 0;
  mutable std::optional<OJson> json_;
  mutable uint64_t json_rev_ = UINT64_MAX;
  mutable nlohmann::json plain_;
  mutable uint64_t plain_rev_ = UINT64_MAX;
};

/// Plan JSON formatted like the examples: one top-level member per line, one directive per
/// line of the schedule array.
std::string format_plan(const OJson& j);

}  // namespace stretto::gui
