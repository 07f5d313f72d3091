#pragma once
// The plan's pipeline schedule as torch.distributed.pipelining's CSV action table.

#include <string>
#include <vector>

#include "stretto/plan/plan.h"

namespace stretto::gui {

/// place + split + order directives read back (schedule_from_directives) and written as
/// torch's CSV; diagnostics when they are not one pipeline schedule.
Expected<std::string> torch_csv_of(const std::vector<plan::Directive>& directives);

}  // namespace stretto::gui
