#pragma once
// Warnings on stderr after a simulation (issue 14): devices the plan never uses, compute
// imbalance between pipeline stages over 10 %, a large plan simulated without --fold-replicas.

#include "stretto/compiler/compiler.h"
#include "stretto/sim/result.h"

namespace stretto::cli {

/// Prints the warnings that apply; returns how many.
int print_warnings(const CompiledPlan& cp, const sim::Result& r, bool folded);

/// Columns of the terminal on stdout or stderr (COLUMNS, ioctl), 100 if unknown.
int terminal_width();

}  // namespace stretto::cli
