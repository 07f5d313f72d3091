#pragma once
// The library's warnings about a simulated step (sim/warnings.h: devices the plan never uses,
// compute imbalance over 10 %, a large plan simulated without --fold-replicas, a profiled
// table covering under 90 % of the plan) on stderr.

#include "stretto/compiler/compiler.h"
#include "stretto/sim/result.h"

namespace stretto::cli {

/// Prints the warnings that apply (sim::result_warnings); returns how many.
int print_warnings(const compiler::CompiledPlan& cp, const sim::Result& r, bool folded);

/// Columns of the terminal on stdout or stderr (COLUMNS, ioctl), 100 if unknown.
int terminal_width();

}  // namespace stretto::cli
