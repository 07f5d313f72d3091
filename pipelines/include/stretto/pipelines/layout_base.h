#pragma once
// The builder side of the layout shorthand (plan/layout.h parses it): the base directives a
// layout stands for, and the checks of a builder call against the model and cluster.

#include <string>
#include <vector>

#include "stretto/plan/layout.h"
#include "stretto/plan/plan.h"
#include "stretto/support/diag.h"

namespace stretto::pipelines {

/// The base directives a layout stands for, given the schedule's stage -> rank map
/// (`stage_to_rank`, one entry per stage) and whether it is bidirectional (DualPipe).
Expected<std::vector<plan::Directive>> layout_base(const plan::Layout& layout,
                                                   const std::vector<int>& stage_to_rank,
                                                   bool bidirectional, const std::string& family);

/// Checks a builder call against the model and cluster before expansion: the number of model
/// regions the schedule needs (pp_regions = ranks x stages per rank), and the devices a
/// layout needs. Diagnostics point at the builder call in `src`.
Diagnostics check_builder_call(const plan::Plan& plan, const plan::JsonSource* src);

/// Diagnostics about directives a builder generated carry pointers that are not in the file;
/// this points them at the builder call (and keeps the generated directive in the message).
void locate_builder_diagnostics(Diagnostics& ds, const plan::JsonSource* src,
                                const plan::BuilderCall& call);

}  // namespace stretto::pipelines
