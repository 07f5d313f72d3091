#pragma once
// Private factories of the concrete cost models; make_cost_model (cost_model.cpp) picks one.

#include <memory>

#include "stretto/costmodel/analytic.h"
#include "stretto/costmodel/cost_model.h"
#include "stretto/costmodel/profile_table.h"

namespace stretto::cost::detail {

/// Per-pass constants (DESIGN §2 "fixed").
std::unique_ptr<CostModel> make_fixed_model(const plan::CostModelSpec& spec);
/// Roofline + NCCL.
std::unique_ptr<CostModel> make_analytic_model(AnalyticParams p, const plan::ClusterSpec& cluster);
/// Measured table over the analytic model.
std::unique_ptr<CostModel> make_profiled_model(AnalyticParams p, const plan::ClusterSpec& cluster,
                                               ProfileTable table);

}  // namespace stretto::cost::detail
