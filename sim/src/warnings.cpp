#include "stretto/sim/warnings.h"

#include <fmt/format.h>

#include <vector>

namespace stretto::sim {

namespace {

// "0-3,8,10-11" from a sorted list of ids.
std::string ranges(const std::vector<int>& ids, size_t max_items = 8) {
  std::string s;
  size_t items = 0;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (items == max_items) {
      s += ", ...";
      break;
    }
    s += (s.empty() ? "" : ",") +
         (j > i ? fmt::format("{}-{}", ids[i], ids[j]) : std::to_string(ids[i]));
    ++items;
    i = j + 1;
  }
  return s;
}

// `pointer`: the part of the plan to change ("" for none).
Warning warning(const char* code, std::string message, std::string hint, std::string pointer) {
  Warning w;
  w.code = code;
  w.diag.severity = Severity::kWarning;
  w.diag.loc.json_pointer = std::move(pointer);
  w.diag.message = std::move(message);
  w.diag.hint = std::move(hint);
  return w;
}

}  // namespace

std::optional<Warning> coverage_warning(const TableCoverage& c) {
  if (c.percent() >= kLowCoveragePercent) return std::nullopt;
  return warning(kWarnLowCoverage,
                 fmt::format("the profiled table covers {:.1f} % of the plan ({} of {} ops, {} "
                             "of {} collectives and transfers); the rest fell back to the "
                             "analytic model",
                             c.percent(), c.ops_measured, c.ops, c.collectives_measured,
                             c.collectives),
                 "profile the missing ops and collectives on the target (stretto profile) or "
                 "read the prediction as partly analytic",
                 "/costmodel");
}

Warnings result_warnings(const compiler::CompiledPlan& cp, const Result& r, bool folded) {
  Warnings out;
  const size_t D = r.devices.size();
  // Devices with no task at all (folded devices count as used when their representative is).
  std::vector<char> used(D, 0);
  for (const auto& pa : r.program.participants)
    if (pa.device < D) used[pa.device] = 1;
  for (size_t d = 0; d < D; ++d)
    if (r.devices[d].folded) used[d] = 1;
  std::vector<int> unused;
  for (size_t d = 0; d < D; ++d)
    if (!used[d]) unused.push_back(static_cast<int>(d));
  if (!unused.empty())
    out.push_back(warning(kWarnUnusedDevices,
                          fmt::format("the plan never uses {} of the cluster's {} devices ({})",
                                      unused.size(), D, ranges(unused)),
                          "declare a smaller cluster, or place work on them",
                          cp.plan.cluster.pointer));
  // Stage imbalance: compute busy time of the devices that compute.
  engine::SimTime lo = -1, hi = -1;
  int lo_d = -1, hi_d = -1;
  for (size_t d = 0; d < D; ++d) {
    const engine::SimTime b = r.devices[d].busy;
    if (b <= 0) continue;
    if (lo < 0 || b < lo) lo = b, lo_d = static_cast<int>(d);
    if (hi < 0 || b > hi) hi = b, hi_d = static_cast<int>(d);
  }
  if (lo > 0 && static_cast<double>(hi) > 1.10 * static_cast<double>(lo))
    out.push_back(warning(
        kWarnImbalance,
        fmt::format("compute is imbalanced across devices: device {} computes {:.3f} ms, "
                    "device {} {:.3f} ms (+{:.0f} %)",
                    hi_d, static_cast<double>(hi) / 1e6, lo_d, static_cast<double>(lo) / 1e6,
                    100.0 * (static_cast<double>(hi) / static_cast<double>(lo) - 1)),
        "the slowest stage sets the pace; move layers (pp_regions, place) so stages do "
        "similar work (the first and last stages also hold the embedding and the output "
        "layer)",
        "/schedule"));  // where the layers are placed
  if (!folded && D >= 256 && cp.classes.size() < D)
    out.push_back(warning(kWarnFoldHint,
                          fmt::format("{} devices simulated one by one; only {} distinct programs",
                                      D, cp.classes.size()),
                          "--fold-replicas simulates one device per class of identical "
                          "programs (same metrics, much faster and smaller)",
                          ""));
  if (const auto c = profiled_coverage(cp))
    if (auto w = coverage_warning(*c)) out.push_back(std::move(*w));
  // Located in the plan, for doors that show locations (the GUI, Python).
  for (Warning& w : out) w.diag.loc.file = cp.plan.file;
  return out;
}

}  // namespace stretto::sim
