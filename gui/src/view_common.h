#pragma once
// Internal to the view panels (panels_timeline.cpp, panels_view.cpp): colours, the panel
// cache, op names and the op tooltip.
#include <fmt/format.h>
#include <imgui.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "stretto/gui/app.h"
#include "stretto/engine/engine.h"
#include "stretto/traces/chrome_trace.h"

namespace stretto::gui {

struct App::PanelCache {
  float scroll_y = 0;            // timeline lanes
  std::vector<int> device_order;  // devices table, sorted
  std::weak_ptr<const Snapshot> order_for;
  std::weak_ptr<const Snapshot> stats_for;
  double stats_a = -1, stats_b = -1;
  int stats_lane = -1;
  std::array<KindStat, static_cast<size_t>(OpClass::kCount)> stats{};
  bool minimap_drag = false;
  std::weak_ptr<const Snapshot> cmp_now, cmp_base;
  std::weak_ptr<const Measured> cmp_measured;
  std::vector<CompareRow> rows;
  std::weak_ptr<const Snapshot> diff_now, diff_base;  // the difference lanes' data was made
  std::weak_ptr<const Measured> diff_measured;        // from these
  std::vector<DeviceDiff> diffs;
};

namespace view {

inline App::PanelCache& cache(App& app) {
  if (!app.panel_cache) app.panel_cache = std::make_shared<App::PanelCache>();
  return *app.panel_cache;
}

inline const ImVec4 kGrey(0.65f, 0.65f, 0.65f, 1.0f), kRed(1.0f, 0.42f, 0.38f, 1.0f),
    kGreen(0.45f, 0.9f, 0.5f, 1.0f), kYellow(1.0f, 0.85f, 0.3f, 1.0f);

// The baseline's memory total, drawn over the current stack.
inline const ImU32 kBaselineMemory = IM_COL32(170, 230, 255, 255);
inline const ImU32 kReservedMemory = IM_COL32(255, 150, 230, 255);  // the caching allocator's bytes

// Difference lanes: later or longer than the reference, earlier or shorter, in one run only;
// the lane's background.
inline const ImU32 kDiffWorse = IM_COL32(240, 60, 60, 255), kDiffBetter = IM_COL32(60, 200, 90, 255),
                   kDiffMissing = IM_COL32(210, 80, 230, 255), kDiffBackground = IM_COL32(46, 34, 56, 255);

inline ImU32 class_color(OpClass c, int alpha = 255) {
  static constexpr unsigned char kC[][3] = {
      {66, 133, 244},  // F
      {230, 126, 34},  // B
      {241, 196, 15},  // BI
      {192, 57, 43},   // BW
      {142, 68, 173},  // compute
      {39, 174, 96},   // send/recv
      {22, 160, 133},  // all-reduce
      {0, 188, 212},   // reduce-scatter
      {233, 30, 99},   // all-gather
      {205, 220, 57},  // all-to-all
      {120, 120, 120}, // barrier
  };
  const auto i = std::min<size_t>(static_cast<size_t>(c), std::size(kC) - 1);
  return IM_COL32(kC[i][0], kC[i][1], kC[i][2], alpha);
}

inline ImU32 cause_color(sim::WaitCause c) {
  switch (c) {
    case sim::WaitCause::kTransfer:
      return IM_COL32(39, 174, 96, 70);
    case sim::WaitCause::kCollective:
    case sim::WaitCause::kRendezvous:
      return IM_COL32(22, 160, 133, 70);
    case sim::WaitCause::kOrder:
      return IM_COL32(200, 60, 60, 70);
    case sim::WaitCause::kDispatch:
      return IM_COL32(180, 180, 180, 60);
    case sim::WaitCause::kInput:
      return IM_COL32(66, 133, 244, 60);
    case sim::WaitCause::kNone:
      break;
  }
  return 0;
}

// A "nice" tick step (1, 2, 5 x 10^k ns) at least `min_ns` long.
inline double nice_step(double min_ns) {
  double p = std::pow(10.0, std::floor(std::log10(std::max(min_ns, 1.0))));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (p * m >= min_ns) return p * m;
  return p * 10;
}

inline std::string op_name(const Snapshot& s, uint32_t task) {
  const auto& cp = s.session->compiled();
  const uint32_t n = s.result.node_of(task);
  return n < cp.dag.nodes.size() ? traces::slice_name(cp, n) : "?";
}

inline void op_tooltip_body(const Snapshot& s, uint32_t task, SimTime lane_free, const std::string& lane) {
  const auto& cp = s.session->compiled();
  const auto& r = s.result;
  const uint32_t n = r.node_of(task);
  const auto& tm = r.timing[task];
  ImGui::TextUnformatted(n < cp.dag.nodes.size() ? cp.dag.node_name(n, cp.model).c_str() : "?");
  ImGui::Separator();
  if (n < cp.dag.nodes.size()) {
    const compiler::Node& nd = cp.dag.nodes[n];
    ImGui::Text("tags       %s", nd.tags.str().c_str());
    ImGui::Text("directive  %s", nd.directive >= 0 ? fmt::format("#{}", nd.directive).c_str() : "model");
    if (nd.kind != compiler::NodeKind::kCompute)
      ImGui::Text("bytes      %s", format_bytes(static_cast<double>(nd.bytes)).c_str());
  }
  ImGui::Text("device     %d   stream %s", r.device_of(task), lane.c_str());
  ImGui::Text("start      %s", format_time(static_cast<double>(tm.start)).c_str());
  ImGui::Text("end        %s", format_time(static_cast<double>(tm.end)).c_str());
  ImGui::Text("duration   %s", format_time(static_cast<double>(tm.end - tm.start)).c_str());
  ImGui::Text("slowdown   x%.3f (interference)", engine::slowdown(r.program, task, tm));
  if (lane_free >= 0) {
    const sim::Wait w = sim::wait_cause(cp, r, task, lane_free);
    if (w.cause != sim::WaitCause::kNone)
      ImGui::Text("idle before %s: %s%s", format_time(static_cast<double>(tm.start - lane_free)).c_str(),
                  std::string(sim::wait_cause_name(w.cause)).c_str(),
                  w.blocker != UINT32_MAX ? (" (" + op_name(s, w.blocker) + ")").c_str() : "");
  }
}

}  // namespace view

}  // namespace stretto::gui
