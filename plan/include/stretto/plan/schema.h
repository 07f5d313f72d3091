#pragma once
// The plan's schema: one table of every key a plan file may hold (docs/plan-format.md).
//
// Every reader and writer of plan JSON takes a key's facts from here, so they cannot drift:
// the parser (plan.cpp, layout.cpp: allowed keys, types, ranges, required keys, enum values),
// the cost model's option reader (ranges of the analytic options), the GUI's editor (bounds,
// directive keys and templates), sweep axes (value checks), and docs/plan.schema.json, which is
// generated from this table (`stretto schema`; a test fails when the checked-in file differs).
//
// Terms:
//   section  an object kind of the plan: "plan" (the top level), "model", "moe", "cluster",
//            "link" (intra_node, inter_node, dcn), "costmodel", "optimizer", "builder" (a
//            builder call), "layout", "filter", and one per directive op ("place",
//            "replicate", "shard", "shard_tensor", "split", "order", "recompute").
//   key      one member of a section, in the order the parser lists them in hints.
//   absent   what a key the plan leaves out resolves to (`when_absent`, resolved.h's sources):
//            `default` = the `fallback` value; `preset` = the cluster preset or the device
//            kind's calibration; `layout`, `builder`, `derived` = computed from other values;
//            for `directives`, the value is read from the directive list.

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stretto/plan/json_source.h"

namespace stretto::plan {

/// Where a resolved value came from (resolved.h); for a schema key, where it comes from when
/// the plan leaves it out.
enum class ValueSource : uint8_t {
  kPlan,
  kLayout,
  kDirectives,
  kBuilder,
  kPreset,
  kDefault,
  kDerived
};
/// "plan", "layout", "directives", "builder", "preset", "default", "derived".
std::string_view value_source_name(ValueSource s);

enum class KeyType : uint8_t {
  kInteger,
  kNumber,
  kBoolean,
  kString,
  kEnum,    // a string out of `choices`
  kObject,  // a nested section (`section_ref`)
  kOther,   // described by `schema` (lists, unions)
};

enum class Requirement : uint8_t {
  kOptional,
  kRequired,     // always
  kConditional,  // required in some cases (the doc string says which; the parser decides)
};

struct PlanKey {
  std::string_view section;
  std::string_view key;
  KeyType type = KeyType::kOther;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  std::span<const std::string_view> choices = {};  // kEnum
  std::string_view fallback = {};  // JSON text of the default ("" = none)
  ValueSource when_absent = ValueSource::kDefault;
  Requirement requirement = Requirement::kOptional;
  std::string_view section_ref = {};  // kObject: the section the value is; kOther: items' section
  std::string_view schema = {};       // kOther: the JSON Schema fragment of the value
  std::string_view doc = {};
  std::string_view example = {};  // JSON text a new directive starts with (directive_template)
  std::string_view applies = {};  // "" = always; else the kind of model or cost model it is for

  bool required() const { return requirement == Requirement::kRequired; }
  bool numeric() const { return type == KeyType::kInteger || type == KeyType::kNumber; }
  /// Whether `x` is inside the key's range (numeric keys).
  bool in_range(double x) const {
    return (min_exclusive ? x > min : x >= min) && x <= max;
  }
  /// `x` moved into the range (an exclusive minimum clamps to the smallest value above it).
  double clamp(double x) const;
  /// The default as JSON (null when there is none).
  Json default_value() const;
};

/// Every key of every section, in the parser's order within a section.
std::span<const PlanKey> plan_schema();
/// The key `key` of `section`, or nullptr.
const PlanKey* plan_key(std::string_view section, std::string_view key);
/// Like plan_key, for a key the code knows exists (asserts).
const PlanKey& schema_key(std::string_view section, std::string_view key);
/// The keys of `section`, in order.
std::vector<std::string> section_keys(std::string_view section);
/// The section an object at `pointer` of `plan` is ("/model" -> "model", "/schedule/layout" ->
/// "layout", "/schedule/3" -> its op, ...; "" when the pointer names no section).
std::string section_at(const Json& plan, std::string_view pointer);
/// The key at `pointer` of `plan` (e.g. "/schedule/layout/tp", "/cluster/intra_node/latency_us",
/// "/schedule/2/bucket_size"), or nullptr.
const PlanKey* plan_key_at(const Json& plan, std::string_view pointer);
/// The keys of a fixed cost model: "kind" and those that apply to "fixed".
std::vector<std::string> fixed_costmodel_keys();
/// The directive ops, in the parser's order (DirectiveOp's order).
std::span<const std::string_view> directive_ops();
/// A new directive of `op` as an editor adds it: "op" and every required key, with the
/// section's example values.
Json directive_template(std::string_view op);

/// docs/plan.schema.json: a JSON Schema (draft-07) of the plan, generated from the table.
/// `stretto schema` prints it; the text is dump(2) plus a newline.
std::string plan_json_schema_text();

/// The sections docs/plan-format.md carries key tables of, in the order
/// `stretto schema --format markdown` prints them: "plan", "model", "moe", "cluster", "link",
/// "costmodel", "optimizer", "builder", "layout", "filter", then the directive ops.
std::vector<std::string_view> markdown_sections();
/// The markdown table of `section`'s keys: key, type, range, default (or what resolves it when
/// the plan leaves it out: preset, layout, builder, derived), meaning (the doc string).
std::string plan_schema_markdown_table(std::string_view section);
/// Every section's table between its markers `<!-- schema:S -->` and `<!-- /schema:S -->`
/// (`stretto schema --format markdown`).
std::string plan_schema_markdown();
/// `doc` (docs/plan-format.md) with the text between each pair of markers replaced by that
/// section's table. On an unknown section, a marker without its pair, or a section of
/// markdown_sections() the doc has no markers for, returns "" and sets `error`.
std::string splice_schema_tables(std::string_view doc, std::string* error);

}  // namespace stretto::plan
