#pragma once
// How much of a plan a measured cost table prices (no silent fallbacks, DESIGN.md §2). The
// profiled cost model answers each query from its table when the table has the query's series
// and from the analytic model otherwise; this counts, over the plan's DAG nodes, which did
// which, so `simulate`, `describe` and `validate` can say it.

#include <optional>
#include <string>
#include <vector>

#include "stretto/compiler/compiler.h"
#include "stretto/costmodel/profile_table.h"
#include "stretto/plan/json_source.h"

namespace stretto::sim {

struct TableCoverage {
  /// Compute nodes with work (flops or bytes), and how many the table prices.
  size_t ops = 0, ops_measured = 0;
  /// Transfer and collective nodes, and how many the table prices.
  size_t collectives = 0, collectives_measured = 0;
  /// What fell back to the analytic model, distinct, sorted: "attention BW", "all_reduce x8".
  std::vector<std::string> ops_fell_back, collectives_fell_back;

  /// Measured share of the ops and collectives together, percent (100 when there are none).
  double percent() const;
};

/// Coverage of the plan's queries (CostQueries, as the simulator asks them) by `table`.
TableCoverage table_coverage(const compiler::CompiledPlan& cp, const cost::ProfileTable& table);
/// The coverage of a plan whose cost model is `profiled`, by its table (read again from
/// cp.plan.costmodel.profile, as the plan resolved it); nullopt for other cost models or a
/// table that cannot be read (the cost model reports that).
std::optional<TableCoverage> profiled_coverage(const compiler::CompiledPlan& cp);

/// Coverage under which `validate` warns (percent of the plan's ops and collectives).
inline constexpr double kLowCoveragePercent = 90.0;

/// {"ops": N, "ops_measured": M, "collectives": ..., "percent": ..., "ops_fell_back": [...],
/// "collectives_fell_back": [...]}
plan::Json coverage_json(const TableCoverage& c);
/// Two or three lines for people, each starting with `indent`.
std::string coverage_text(const TableCoverage& c, const std::string& indent);

}  // namespace stretto::sim
