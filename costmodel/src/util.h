#pragma once
// Private helpers of the costmodel library: diagnostics, "did you mean" hints, name tables.
//
// The schedules library owns a general `nearest` and `edit_distance`; the cost model's
// `did_you_mean` adds a prefix rule for truncated option names. Positions come from schedules'
// JsonSource.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stretto/compiler/dag.h"
#include "stretto/support/diag.h"
#include "stretto/plan/json_source.h"
#include "stretto/compiler/model.h"
#include "stretto/plan/plan.h"
#include "stretto/plan/tags.h"

namespace stretto::cost::detail {

/// An error located by file and JSON pointer (line/col unknown), with an optional hint.
Diagnostic diag_at(const std::string& file, const std::string& pointer, std::string message,
                   std::string hint = {});
/// An error at a known line:col (JSON syntax errors).
Diagnostic diag_at_line(const std::string& file, uint32_t line, uint32_t col, std::string message,
                        std::string source_line);

/// `base` + "/" + escaped `key` (stretto::plan::pointer_escape).
std::string child_pointer(const std::string& base, std::string_view key);

/// "did you mean 'x'?" for the closest candidate within a plausible typo distance, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

/// Fills line:column and the source line of the diagnostics that are about `src`'s file and
/// have none yet, from their JSON pointers. Object members are located at their key, so an
/// unknown key points at its name.
void locate(Diagnostics& ds, const plan::JsonSource* src);

/// 1-based line and column of byte `offset` in `text`, and that line's text.
void line_col(const std::string& text, size_t offset, uint32_t& line, uint32_t& col,
              std::string& line_text);

/// Case-insensitive ASCII comparison.
bool iequals(std::string_view a, std::string_view b);
std::string lower(std::string_view s);

// Name tables (table-file spelling).
std::string_view op_name(compiler::OpKind k);
std::optional<compiler::OpKind> parse_op(std::string_view s);
std::vector<std::string> op_names();
std::string_view pass_key(plan::Pass p);
std::optional<plan::Pass> parse_pass_key(std::string_view s);
std::vector<std::string> pass_keys();
std::string_view dtype_name(plan::DType d);
std::optional<plan::DType> parse_dtype(std::string_view s);
std::vector<std::string> dtype_names();
std::string_view comm_name(compiler::CommKind k);
std::optional<compiler::CommKind> parse_comm(std::string_view s);
std::vector<std::string> comm_names();

/// Integer nanoseconds from a non-negative duration in ns (rounded up: never shorter).
/// The longest a single op may cost: 1,000 s, far beyond any kernel or collective of a
/// training step, so that a step's sum of op times stays far from int64 overflow (9.2e18 ns)
/// however a table's times are extrapolated.
inline constexpr double kMaxOpNs = 1e12;

/// `ns` rounded up to whole nanoseconds, saturated at kMaxOpNs (0 for non-positive values).
int64_t ceil_ns(double ns);

}  // namespace stretto::cost::detail
