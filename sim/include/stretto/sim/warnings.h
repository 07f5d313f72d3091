#pragma once
// Warnings about a simulated step: not errors (the step ran), but things a user planning a run
// wants to know. Every door shows the same set: `simulate` prints them on stderr, the GUI lists
// them in its Diagnostics tab, and the Python module raises them as stretto.StrettoWarning.
// Each is a Diagnostic of severity kWarning (message, hint, where in the plan) with a stable
// code programs can match on.

#include <optional>
#include <string>
#include <vector>

#include "stretto/compiler/compiler.h"
#include "stretto/sim/coverage.h"
#include "stretto/sim/result.h"
#include "stretto/support/diag.h"

namespace stretto::sim {

/// Codes of the warnings below.
inline constexpr const char* kWarnUnusedDevices = "unused-devices";
inline constexpr const char* kWarnImbalance = "compute-imbalance";
inline constexpr const char* kWarnFoldHint = "fold-replicas-hint";
inline constexpr const char* kWarnLowCoverage = "low-table-coverage";

struct Warning {
  std::string code;  // one of the kWarn* above
  Diagnostic diag;   // severity kWarning; loc: the plan's file and the part to change
};
using Warnings = std::vector<Warning>;

/// Devices of the cluster the plan never uses, compute imbalance between devices above 10 %,
/// a plan of 256 devices or more simulated without fold_replicas (`folded` says whether it
/// was), and a profiled table that prices under kLowCoveragePercent of the plan — in that
/// order. Empty when nothing applies.
Warnings result_warnings(const compiler::CompiledPlan& cp, const Result& r, bool folded);

/// The low-coverage warning for a profiled table's coverage `c`; nullopt at or above
/// kLowCoveragePercent.
std::optional<Warning> coverage_warning(const TableCoverage& c);

}  // namespace stretto::sim
