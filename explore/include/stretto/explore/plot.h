#pragma once
// A sweep's points as a chart (`stretto sweep --plot FILE.svg`): step time against peak memory
// per device, one dot per simulated point coloured by one of the swept parameters, the Pareto
// front joined, points over the memory cap hollow and the cap drawn. Plain SVG 1.1: a browser
// or the README shows it; each dot carries its point (hash, parameters, numbers) as a
// <title> tooltip and as data- attributes.

#include <string>
#include <vector>

#include "stretto/explore/store.h"

namespace stretto::explore {

/// What sweep_svg drew (for the CLI's message and for tests).
struct PlotSummary {
  size_t feasible = 0, over_capacity = 0, front = 0, not_drawn = 0;  // invalid points
  std::string color_by;  // the parameter the dots are coloured by ("" when none varies)
};

/// The chart of `rows` (a complete SVG document) headed by `title`.
std::string sweep_svg(const std::vector<PointResult>& rows, const std::string& title,
                      PlotSummary* summary = nullptr);

}  // namespace stretto::explore
