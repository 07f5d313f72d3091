// Timeline, Memory and Numbers panels.
#include <fmt/format.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <algorithm>
#include <array>
#include <memory>
#include <cmath>
#include <map>
#include <unordered_map>

#include "stretto/gui/app.h"
#include "stretto/engine/engine.h"
#include "stretto/traces/chrome_trace.h"

namespace stretto::gui {

using Stat = KindStat;

std::array<KindStat, static_cast<size_t>(OpClass::kCount)> kind_stats(const Timeline& tl, double a,
                                                                      double b, int lane) {
  std::array<KindStat, static_cast<size_t>(OpClass::kCount)> stats{};
  for (size_t li = 0; li < tl.lanes.size(); ++li) {
    if (lane >= 0 && li != static_cast<size_t>(lane)) continue;
    const Lane& l = tl.lanes[li];
    auto it = std::partition_point(l.ops.begin(), l.ops.end(),
                                   [&](const Op& o) { return static_cast<double>(o.end) <= a; });
    for (; it != l.ops.end() && static_cast<double>(it->start) < b; ++it) {
      KindStat& st = stats[static_cast<size_t>(it->cls)];
      const SimTime d = it->end - it->start;
      ++st.count;
      st.total += d;
      st.max = std::max(st.max, d);
    }
  }
  return stats;
}
struct CompareRow {
  int pp, mb, pass;
  SimTime s0, e0, s1, e1;
};
struct App::PanelCache {
  float scroll_y = 0;            // timeline lanes
  std::vector<int> device_order;  // devices table, sorted
  std::weak_ptr<const Snapshot> order_for;
  std::weak_ptr<const Snapshot> stats_for;
  double stats_a = -1, stats_b = -1;
  int stats_lane = -1;
  std::array<Stat, static_cast<size_t>(OpClass::kCount)> stats{};
  std::weak_ptr<const Snapshot> cmp_now, cmp_base;
  std::weak_ptr<const Measured> cmp_measured;
  std::vector<CompareRow> rows;
};

namespace {

App::PanelCache& cache(App& app) {
  if (!app.panel_cache) app.panel_cache = std::make_shared<App::PanelCache>();
  return *app.panel_cache;
}

const ImVec4 kGrey(0.65f, 0.65f, 0.65f, 1.0f), kRed(1.0f, 0.42f, 0.38f, 1.0f),
    kGreen(0.45f, 0.9f, 0.5f, 1.0f), kYellow(1.0f, 0.85f, 0.3f, 1.0f);

ImU32 class_color(OpClass c, int alpha = 255) {
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

ImU32 cause_color(sim::WaitCause c) {
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
double nice_step(double min_ns) {
  double p = std::pow(10.0, std::floor(std::log10(std::max(min_ns, 1.0))));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (p * m >= min_ns) return p * m;
  return p * 10;
}

std::string op_name(const Snapshot& s, uint32_t task) {
  const auto& cp = s.session->compiled();
  const uint32_t n = s.result.node_of(task);
  return n < cp.dag.nodes.size() ? traces::slice_name(cp, n) : "?";
}

void op_tooltip_body(const Snapshot& s, uint32_t task, SimTime lane_free, const std::string& lane) {
  const auto& cp = s.session->compiled();
  const auto& r = s.result;
  const uint32_t n = r.node_of(task);
  const auto& tm = r.timing[task];
  ImGui::TextUnformatted(n < cp.dag.nodes.size() ? cp.dag.node_name(n, cp.model).c_str() : "?");
  ImGui::Separator();
  if (n < cp.dag.nodes.size()) {
    const Node& nd = cp.dag.nodes[n];
    ImGui::Text("tags       %s", nd.tags.str().c_str());
    ImGui::Text("directive  %s", nd.directive >= 0 ? fmt::format("#{}", nd.directive).c_str() : "model");
    if (nd.kind != NodeKind::kCompute)
      ImGui::Text("bytes      %s", format_bytes(static_cast<double>(nd.bytes)).c_str());
  }
  ImGui::Text("device     %d   stream %s", r.device_of(task), lane.c_str());
  ImGui::Text("start      %s", format_time(static_cast<double>(tm.start)).c_str());
  ImGui::Text("end        %s", format_time(static_cast<double>(tm.end)).c_str());
  ImGui::Text("duration   %s", format_time(static_cast<double>(tm.end - tm.start)).c_str());
  ImGui::Text("slowdown   x%.3f (interference)", sim::slowdown(r.program, task, tm));
  if (lane_free >= 0) {
    const sim::Wait w = sim::wait_cause(cp, r, task, lane_free);
    if (w.cause != sim::WaitCause::kNone)
      ImGui::Text("idle before %s: %s%s", format_time(static_cast<double>(tm.start - lane_free)).c_str(),
                  std::string(sim::wait_cause_name(w.cause)).c_str(),
                  w.blocker != UINT32_MAX ? (" (" + op_name(s, w.blocker) + ")").c_str() : "");
  }
}

}  // namespace

// ------------------------------------------------------------------------------- Timeline

void draw_timeline_panel(App& app) {
  TimelineState& tl = app.tl;
  tl.boxes_drawn = 0;
  tl.lanes_drawn = 0;
  if (!app.current) {
    ImGui::TextColored(kGrey, app.worker.busy() ? "Simulating..." : "Open a plan (path field, recent files, or drop a file on the window).");
    if (app.last_failed) ImGui::TextColored(kRed, "The plan has errors: see Diagnostics.");
    return;
  }
  const Snapshot& s = *app.current;
  const Timeline& T = s.timeline;
  const auto& cp = s.session->compiled();
  // ---- toolbar
  if (ImGui::Button("Fit")) app.fit();
  app.hook("fit");
  const bool has_range = tl.range_t0 >= 0 && tl.range_t1 != tl.range_t0;
  ImGui::SameLine();
  if (ImGui::Button("Zoom to range") && has_range)
    app.zoom(std::min(tl.range_t0, tl.range_t1), std::max(tl.range_t0, tl.range_t1));
  app.hook("zoom to range");
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Right-drag on the timeline to select a range (R zooms to it)");
  ImGui::SameLine();
  ImGui::Checkbox("bubbles", &tl.show_bubbles);
  ImGui::SameLine();
  ImGui::Checkbox("critical path", &tl.show_critical);
  app.hook("critical");
  ImGui::SameLine();
  ImGui::Checkbox("flows", &tl.show_flows);
  if (app.baseline || app.measured) {
    ImGui::SameLine();
    ImGui::Checkbox(app.measured ? "measured" : "baseline", &tl.show_baseline);
  }
  ImGui::SameLine();
  ImGui::TextColored(kGrey, "%zu ops, %zu lanes, step %s", T.ops, T.lanes.size(),
                     format_time(static_cast<double>(s.result.step_time)).c_str());
  if (app.stale()) {
    ImGui::SameLine();
    ImGui::TextColored(app.last_failed ? kRed : kYellow, app.last_failed ? "[last good result: the edit failed]" : "[STALE]");
    app.hook("stale");
  }
  if (tl.show_critical) app.ensure_critical();

  // ---- geometry
  const float scale = app.font_scale;
  const float label_w = 110 * scale, ruler_h = 22 * scale;
  const float row_h = std::round(ImGui::GetTextLineHeight() + 6), head_h = std::round(ImGui::GetTextLineHeight() + 2);
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImVec2 avail = ImGui::GetContentRegionAvail();
  avail.x = std::max(avail.x, 50.0f);
  avail.y = std::max(avail.y, 50.0f);
  ImGui::InvisibleButton("canvas", avail,
                         ImGuiButtonFlags_MouseButtonLeft | ImGuiButtonFlags_MouseButtonRight);
  app.hook("timeline");
  const bool hovered = ImGui::IsItemHovered();
  const ImVec2 p1(p0.x + avail.x, p0.y + avail.y);
  View v;
  v.x_origin = p0.x + label_w;
  v.width = avail.x - label_w;
  tl.width = v.width;
  const double end = static_cast<double>(std::max<SimTime>(T.end, 1));
  if (tl.ns_per_px <= 0) {
    tl.ns_per_px = end * 1.04 / v.width;
    tl.t0 = -end * 0.02;
  }
  ImGuiIO& io = ImGui::GetIO();
  // ---- input: wheel zooms at the mouse (Shift+wheel scrolls lanes), left drag pans, right
  // drag selects a range
  if (tl.collapsed.size() != T.by_device.size()) tl.collapsed.assign(T.by_device.size(), 0);
  float total_h = 0;
  for (size_t d = 0; d < T.by_device.size(); ++d)
    if (!T.by_device[d].empty())
      total_h += head_h + (tl.collapsed[d] ? 0 : row_h * static_cast<float>(T.by_device[d].size()));
  float& scroll_y = cache(app).scroll_y;
  const float lanes_h = avail.y - ruler_h;
  if (hovered && io.MouseWheel != 0) {
    if (io.KeyShift) {
      scroll_y -= io.MouseWheel * row_h * 3;
    } else {
      const double tm = tl.t0 + static_cast<double>(io.MousePos.x - v.x_origin) * tl.ns_per_px;
      const double f = std::pow(1.25, -static_cast<double>(io.MouseWheel));
      tl.ns_per_px = std::clamp(tl.ns_per_px * f, 0.01, end);
      tl.fitted = false;
      tl.t0 = tm - static_cast<double>(io.MousePos.x - v.x_origin) * tl.ns_per_px;
    }
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2.0f)) {
    tl.t0 -= static_cast<double>(io.MouseDelta.x) * tl.ns_per_px;
    scroll_y -= io.MouseDelta.y;
    if (io.MouseDelta.x != 0) tl.fitted = false;
  }
  scroll_y = std::clamp(scroll_y, 0.0f, std::max(0.0f, total_h - lanes_h));
  v.t0 = tl.t0;
  v.ns_per_px = tl.ns_per_px;
  const double mouse_t = v.t(io.MousePos.x);
  tl.cursor = hovered && io.MousePos.x >= v.x_origin ? mouse_t : -1;
  if (hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Right)) {
    tl.range_t0 = tl.range_t1 = mouse_t;
    tl.dragging_range = true;
  }
  if (tl.dragging_range) {
    tl.range_t1 = mouse_t;
    if (!ImGui::IsMouseDown(ImGuiMouseButton_Right)) {
      tl.dragging_range = false;
      if (tl.range_t1 < tl.range_t0) std::swap(tl.range_t0, tl.range_t1);
      if (tl.range_t1 - tl.range_t0 < 3 * tl.ns_per_px) tl.range_t0 = tl.range_t1 = -1;
    }
  }

  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->PushClipRect(p0, p1, true);
  dl->AddRectFilled(p0, p1, IM_COL32(24, 26, 30, 255));
  // ---- ruler
  const double step = nice_step(90.0 * static_cast<double>(scale) * v.ns_per_px);
  dl->AddRectFilled(p0, ImVec2(p1.x, p0.y + ruler_h), IM_COL32(40, 43, 50, 255));
  for (double t = std::floor(v.t0 / step) * step; t <= v.t1(); t += step) {
    const float x = v.x(t);
    if (x < v.x_origin) continue;
    dl->AddLine(ImVec2(x, p0.y + ruler_h * 0.5f), ImVec2(x, p1.y), IM_COL32(70, 74, 84, 255));
    const std::string lab = format_time(t);
    dl->AddText(ImVec2(x + 3, p0.y + 2), IM_COL32(200, 200, 200, 255), lab.c_str());
    for (int k = 1; k < 5; ++k) {
      const float xs = v.x(t + step * k / 5);
      dl->AddLine(ImVec2(xs, p0.y + ruler_h * 0.75f), ImVec2(xs, p0.y + ruler_h), IM_COL32(110, 110, 120, 255));
    }
  }
  // The step's end.
  dl->AddLine(ImVec2(v.x(end), p0.y), ImVec2(v.x(end), p1.y), IM_COL32(255, 255, 255, 90));

  // ---- rows
  const float y_top = p0.y + ruler_h;
  dl->PushClipRect(ImVec2(p0.x, y_top), p1, true);
  std::vector<float> lane_y(T.lanes.size(), -1.0f);
  std::vector<Box> boxes;
  std::unordered_map<std::string, uint32_t> base_lane;  // "device/stream" -> baseline lane
  // Reference lanes under the current ones: a measured trace, else the pinned baseline.
  const Timeline* ref = app.measured ? &app.measured->timeline
                        : app.baseline && app.baseline.get() != app.current.get() ? &app.baseline->timeline
                                                                                  : nullptr;
  const bool show_base = ref && tl.show_baseline;
  if (show_base)
    for (uint32_t i = 0; i < ref->lanes.size(); ++i) {
      const Lane& l = ref->lanes[i];
      base_lane[fmt::format("{}/{}", l.device, l.name)] = i;
    }
  struct Hover {
    uint32_t lane = UINT32_MAX;
    long op = -1;
  } hover;
  float y = y_top - scroll_y;
  const float min_label_w = ImGui::CalcTextSize("F0").x + 6;
  for (size_t d = 0; d < T.by_device.size(); ++d) {
    if (T.by_device[d].empty()) continue;
    // Device header: click toggles the group.
    if (y + head_h >= y_top && y <= p1.y) {
      dl->AddRectFilled(ImVec2(p0.x, y), ImVec2(p1.x, y + head_h), IM_COL32(34, 37, 44, 255));
      const std::string h = fmt::format("{} device {}", tl.collapsed[d] ? "+" : "-", d);
      dl->AddText(ImVec2(p0.x + 4, y), IM_COL32(230, 230, 230, 255), h.c_str());
      if (hovered && ImGui::IsMouseReleased(ImGuiMouseButton_Left) && io.MousePos.x < v.x_origin &&
          io.MousePos.y >= y && io.MousePos.y < y + head_h && !ImGui::IsMouseDragPastThreshold(ImGuiMouseButton_Left))
        tl.collapsed[d] = !tl.collapsed[d];
      if (d < 4) app.hooks[fmt::format("device {}", d)] = {p0.x, y, v.x_origin, y + head_h};
    }
    y += head_h;
    if (tl.collapsed[d]) {
      for (uint32_t li : T.by_device[d]) lane_y[li] = y - head_h * 0.5f;
      continue;
    }
    for (uint32_t li : T.by_device[d]) {
      const Lane& lane = T.lanes[li];
      lane_y[li] = y + row_h * 0.5f;
      if (y + row_h < y_top || y > p1.y) {
        y += row_h;
        continue;
      }
      ++tl.lanes_drawn;
      if (li < 16) app.hooks[fmt::format("lane {}", li)] = {v.x_origin, y, p1.x, y + row_h};
      if (tl.lane == static_cast<int>(li))
        dl->AddRectFilled(ImVec2(p0.x, y), ImVec2(v.x_origin, y + row_h), IM_COL32(70, 90, 140, 255));
      dl->AddText(ImVec2(p0.x + 14, y + 3), IM_COL32(170, 170, 170, 255), lane.name.c_str());
      if (li < 16) app.hooks[fmt::format("lane {} name", li)] = {p0.x, y, v.x_origin, y + row_h};
      if (hovered && ImGui::IsMouseReleased(ImGuiMouseButton_Left) && io.MousePos.x < v.x_origin &&
          io.MousePos.y >= y && io.MousePos.y < y + row_h && !ImGui::IsMouseDragPastThreshold(ImGuiMouseButton_Left))
        tl.lane = tl.lane == static_cast<int>(li) ? -1 : static_cast<int>(li);
      const float by0 = y + 2, by1 = y + row_h - 2;
      boxes.clear();
      layout_lane(lane, v, boxes);
      tl.boxes_drawn += static_cast<int>(boxes.size());
      for (const Box& b : boxes) {
        const float x0 = std::max(b.x0, v.x_origin - 2), x1 = std::min(b.x1, p1.x + 2);
        // Idle time before a single op, shaded with its cause.
        if (tl.show_bubbles && b.count == 1 && b.first > 0) {
          const Op& prev = lane.ops[b.first - 1];
          const float gx0 = v.x(static_cast<double>(prev.end));
          if (b.x0 - gx0 >= 3) {
            const sim::Wait w = sim::wait_cause(cp, s.result, lane.ops[b.first].task, prev.end);
            if (ImU32 c = cause_color(w.cause))
              dl->AddRectFilled(ImVec2(std::max(gx0, v.x_origin), by0), ImVec2(b.x0, by1), c);
          }
        }
        if (b.count == 1) {
          dl->AddRectFilled(ImVec2(x0, by0), ImVec2(std::max(x1, x0 + 1), by1), class_color(b.cls));
          if (b.x1 - b.x0 >= 4) dl->AddRect(ImVec2(x0, by0), ImVec2(x1, by1), IM_COL32(0, 0, 0, 110));
          if (x1 - x0 >= min_label_w) {
            const std::string name = op_name(s, lane.ops[b.first].task);
            const float tw = ImGui::CalcTextSize(name.c_str()).x;
            if (tw + 4 <= x1 - x0) {
              dl->AddText(ImVec2(x0 + 2, by0), IM_COL32(255, 255, 255, 255), name.c_str());
              if (tl.labels.size() < 4000) tl.labels.push_back(name);
            }
          }
          if (tl.show_critical && lane.ops[b.first].task < app.critical.size() &&
              app.critical[lane.ops[b.first].task])
            dl->AddRect(ImVec2(x0 - 1, by0 - 1), ImVec2(x1 + 1, by1 + 1), IM_COL32(255, 235, 59, 255), 0, 0, 2.5f);
        } else {
          // A merged run: the middle op's colour, hatched lighter so it reads as many ops.
          dl->AddRectFilled(ImVec2(x0, by0 + 2), ImVec2(std::max(x1, x0 + 1), by1 - 2), class_color(b.cls, 200));
        }
        if (app.sel.valid() && b.count == 1 && lane.ops[b.first].task == app.sel.task)
          dl->AddRect(ImVec2(x0 - 1, by0 - 1), ImVec2(x1 + 1, by1 + 1), IM_COL32(255, 255, 255, 255), 0, 0, 2);
      }
      if (show_base) {
        auto it = base_lane.find(fmt::format("{}/{}", lane.device, lane.name));
        if (it != base_lane.end()) {
          boxes.clear();
          layout_lane(ref->lanes[it->second], v, boxes);
          for (const Box& b : boxes)
            dl->AddRectFilled(ImVec2(b.x0, by1 - 1), ImVec2(std::max(b.x1, b.x0 + 1), by1 + 2),
                              class_color(b.cls, 150));
        }
      }
      if (hovered && io.MousePos.y >= y && io.MousePos.y < y + row_h && io.MousePos.x >= v.x_origin) {
        hover.lane = li;
        hover.op = op_at(lane, mouse_t, 2 * v.ns_per_px);
      }
      y += row_h;
    }
  }
  // ---- flows of the selection: its inputs' ends to its start, and its other participants
  if (app.sel.valid() && tl.show_flows && app.sel.task < T.where.size()) {
    const auto [sl, si] = T.where[app.sel.task];
    if (sl != UINT32_MAX) {
      const auto& r = s.result;
      const float sx = v.x(static_cast<double>(r.timing[app.sel.task].start));
      const float sy = lane_y[sl];
      for (uint32_t dep : r.program.deps_of(app.sel.task)) {
        // Through barriers (order junctions) to real ops.
        std::vector<uint32_t> stack{dep};
        for (int guard = 0; !stack.empty() && guard < 64; ++guard) {
          const uint32_t t = stack.back();
          stack.pop_back();
          if (r.program.tasks[t].kind == sim::TaskKind::kBarrier) {
            for (uint32_t d2 : r.program.deps_of(t)) stack.push_back(d2);
            continue;
          }
          const auto [dl2, di2] = T.where[t];
          if (dl2 == UINT32_MAX) continue;
          const ImVec2 a(v.x(static_cast<double>(r.timing[t].end)), lane_y[dl2]), b(sx, sy);
          dl->AddBezierCubic(a, ImVec2(a.x + 30, a.y), ImVec2(b.x - 30, b.y), b,
                             IM_COL32(255, 255, 255, 200), 1.5f);
          dl->AddTriangleFilled(ImVec2(b.x, b.y), ImVec2(b.x - 7, b.y - 4), ImVec2(b.x - 7, b.y + 4),
                                IM_COL32(255, 255, 255, 220));
        }
      }
      const sim::Task& tk = r.program.tasks[app.sel.task];
      if (tk.part_count > 1) {
        float ymin = sy, ymax = sy;
        for (size_t li = 0; li < T.lanes.size(); ++li)
          if (lane_y[li] >= 0 && !T.lanes[li].ops.empty()) {
            const long k = op_at(T.lanes[li], static_cast<double>(r.timing[app.sel.task].start) + 0.5, 0);
            if (k >= 0 && T.lanes[li].ops[static_cast<size_t>(k)].task == app.sel.task)
              ymin = std::min(ymin, lane_y[li]), ymax = std::max(ymax, lane_y[li]);
          }
        dl->AddLine(ImVec2(sx, ymin), ImVec2(sx, ymax), IM_COL32(255, 255, 255, 160), 1.5f);
      }
    }
  }
  // ---- range and cursor
  if (tl.range_t0 >= 0 && tl.range_t1 != tl.range_t0)
    dl->AddRectFilled(ImVec2(v.x(std::min(tl.range_t0, tl.range_t1)), y_top),
                      ImVec2(v.x(std::max(tl.range_t0, tl.range_t1)), p1.y), IM_COL32(120, 160, 255, 40));
  if (tl.cursor >= 0)
    dl->AddLine(ImVec2(io.MousePos.x, p0.y), ImVec2(io.MousePos.x, p1.y), IM_COL32(255, 255, 255, 70));
  dl->PopClipRect();
  dl->PopClipRect();
  // ---- hover and click
  if (hover.lane != UINT32_MAX && hover.op >= 0) {
    const Lane& lane = T.lanes[hover.lane];
    const Op& op = lane.ops[static_cast<size_t>(hover.op)];
    ImGui::BeginTooltip();
    const SimTime free_at = hover.op > 0 ? lane.ops[static_cast<size_t>(hover.op) - 1].end : 0;
    op_tooltip_body(s, op.task, free_at, lane.name);
    ImGui::EndTooltip();
    if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) && !ImGui::IsMouseDragPastThreshold(ImGuiMouseButton_Left))
      app.sel.task = op.task;
  } else if (hovered && ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
             !ImGui::IsMouseDragPastThreshold(ImGuiMouseButton_Left) && io.MousePos.x >= v.x_origin) {
    app.sel = {};
  }
}

// ------------------------------------------------------------------------------- Memory

void draw_memory_panel(App& app) {
  if (!app.current) return;
  const Snapshot& s = *app.current;
  const auto& r = s.result;
  const auto& cp = s.session->compiled();
  const int D = static_cast<int>(r.devices.size());
  if (D == 0) return;
  app.memory_device = std::clamp(app.memory_device, 0, D - 1);
  ImGui::SetNextItemWidth(60);
  ImGui::InputInt("##memdev", &app.memory_device, 0);
  app.hook("memory_device");
  ImGui::SameLine(0, 4);
  if (ImGui::Button("-")) --app.memory_device;
  ImGui::SameLine(0, 4);
  if (ImGui::Button("+")) ++app.memory_device;
  ImGui::SameLine();
  ImGui::TextUnformatted("device");
  app.memory_device = std::clamp(app.memory_device, 0, D - 1);
  const auto& dm = r.devices[static_cast<size_t>(app.memory_device)];
  const double capacity = cp.plan.cluster.device.memory_GiB * 1024.0 * 1024.0 * 1024.0;
  ImGui::SameLine();
  ImGui::Checkbox("scale to peak", &app.memory_to_peak);
  app.hook("scale to peak");
  ImGui::TextColored(dm.over_capacity ? kRed : kGrey, "peak %s at %s of %s%s",
                     format_bytes(static_cast<double>(dm.peak_memory)).c_str(),
                     format_time(static_cast<double>(dm.peak_time)).c_str(),
                     format_bytes(capacity).c_str(), dm.over_capacity ? "  OVER CAPACITY" : "");
  const auto& curve = app.memory_curve(app.memory_device);
  // Legend.
  static constexpr OpClass kCatColor[] = {OpClass::kF, OpClass::kBW, OpClass::kCompute, OpClass::kB,
                                          OpClass::kSendRecv, OpClass::kReduceScatter, OpClass::kAllGather};
  for (size_t c = 0; c < sim::kMemCategories; ++c) {
    if (c) ImGui::SameLine();
    ImGui::ColorButton(std::string(sim::memory_category_name(c)).c_str(),
                       ImGui::ColorConvertU32ToFloat4(class_color(kCatColor[c])),
                       ImGuiColorEditFlags_NoTooltip, ImVec2(10, 10));
    ImGui::SameLine(0, 3);
    ImGui::TextUnformatted(std::string(sim::memory_category_name(c)).c_str());
  }
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImVec2 avail = ImGui::GetContentRegionAvail();
  avail.x = std::max(avail.x, 50.0f);
  avail.y = std::max(avail.y, 40.0f);
  ImGui::InvisibleButton("memplot", avail);
  app.hook("memory");
  const ImVec2 p1(p0.x + avail.x, p0.y + avail.y);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->PushClipRect(p0, p1, true);
  dl->AddRectFilled(p0, p1, IM_COL32(24, 26, 30, 255));
  // Same time axis as the timeline (its view), scaled to this width.
  const double step_end = static_cast<double>(std::max<SimTime>(r.step_time, 1));
  double t0 = app.tl.t0, t1 = app.tl.t0 + app.tl.ns_per_px * app.tl.width;
  if (!(t1 > t0)) t0 = 0, t1 = step_end;
  const float axis_w = 60;
  const float x0 = p0.x + axis_w, w = avail.x - axis_w;
  auto X = [&](double t) { return x0 + static_cast<float>((t - t0) / (t1 - t0)) * w; };
  double ymax = app.memory_to_peak ? static_cast<double>(dm.peak_memory) * 1.1
                                   : std::max(capacity, static_cast<double>(dm.peak_memory)) * 1.05;
  if (ymax <= 0) ymax = 1;
  auto Y = [&](double b) { return p1.y - 4 - static_cast<float>(b / ymax) * (avail.y - 8); };
  // Stacked categories: one column per pixel, at the largest total within the column (so a
  // short peak is never lost).
  if (!curve.empty()) {
    size_t i = static_cast<size_t>(std::upper_bound(curve.begin(), curve.end(), t0,
                                                    [](double t, const sim::CategorySample& c) {
                                                      return t < static_cast<double>(c.t);
                                                    }) -
                                   curve.begin());
    if (i > 0) --i;
    for (float x = std::max(x0, X(0)); x < p1.x && x <= X(step_end); x += 1.0f) {
      const double ct1 = t0 + static_cast<double>(x + 1 - x0) / w * (t1 - t0);
      size_t best = i;
      for (size_t k = i; k < curve.size() && static_cast<double>(curve[k].t) < ct1; ++k) {
        if (curve[k].total() > curve[best].total()) best = k;
        i = k;
      }
      float yb = Y(0);
      for (size_t c = 0; c < sim::kMemCategories; ++c) {
        const float yt = Y(static_cast<double>(curve[best].bytes[c]) + (Y(0) - yb) / (avail.y - 8) * ymax);
        if (yt < yb) dl->AddRectFilled(ImVec2(x, yt), ImVec2(x + 1, yb), class_color(kCatColor[c]));
        yb = std::min(yb, yt);
      }
    }
  }
  // Capacity, peak, cursor, axis.
  if (capacity <= ymax) {
    dl->AddLine(ImVec2(x0, Y(capacity)), ImVec2(p1.x, Y(capacity)), IM_COL32(255, 80, 80, 255), 1.5f);
    dl->AddText(ImVec2(x0 + 4, Y(capacity) - ImGui::GetTextLineHeight()), IM_COL32(255, 120, 120, 255), "capacity");
  } else {
    dl->AddText(ImVec2(x0 + 4, p0.y + 2), IM_COL32(255, 120, 120, 255),
                ("capacity " + format_bytes(capacity) + " (above)").c_str());
  }
  const float px = X(static_cast<double>(dm.peak_time)), py = Y(static_cast<double>(dm.peak_memory));
  dl->AddCircleFilled(ImVec2(px, py), 4, IM_COL32(255, 255, 255, 255));
  dl->AddText(ImVec2(px + 6, py - ImGui::GetTextLineHeight()), IM_COL32(255, 255, 255, 255), "peak");
  for (int k = 0; k <= 4; ++k) {
    const double b = ymax * k / 4;
    dl->AddText(ImVec2(p0.x + 2, Y(b) - 7), IM_COL32(170, 170, 170, 255), format_bytes(b).c_str());
    dl->AddLine(ImVec2(x0, Y(b)), ImVec2(p1.x, Y(b)), IM_COL32(60, 60, 70, 255));
  }
  double cursor = app.tl.cursor;
  if (ImGui::IsItemHovered()) cursor = t0 + static_cast<double>(ImGui::GetIO().MousePos.x - x0) / w * (t1 - t0);
  if (cursor >= 0) {
    dl->AddLine(ImVec2(X(cursor), p0.y), ImVec2(X(cursor), p1.y), IM_COL32(255, 255, 255, 120));
    if (ImGui::IsItemHovered() && !curve.empty()) {
      auto it = std::upper_bound(curve.begin(), curve.end(), cursor, [](double t, const sim::CategorySample& c) {
        return t < static_cast<double>(c.t);
      });
      const auto& c = it == curve.begin() ? *it : *(it - 1);
      ImGui::BeginTooltip();
      ImGui::Text("device %d at %s: %s", app.memory_device, format_time(cursor).c_str(),
                  format_bytes(static_cast<double>(c.total())).c_str());
      for (size_t k = 0; k < sim::kMemCategories; ++k)
        ImGui::Text("  %-16s %s", std::string(sim::memory_category_name(k)).c_str(),
                    format_bytes(static_cast<double>(c.bytes[k])).c_str());
      ImGui::EndTooltip();
    }
  }
  if (app.sel.valid() && app.sel.task < r.timing.size()) {
    const auto& tm = r.timing[app.sel.task];
    dl->AddRectFilled(ImVec2(X(static_cast<double>(tm.start)), p0.y), ImVec2(X(static_cast<double>(tm.end)) + 1, p1.y),
                      IM_COL32(255, 255, 255, 40));
  }
  dl->PopClipRect();
}

// ------------------------------------------------------------------------------- Numbers

namespace {

void metric_row(const char* name, const std::string& value, const std::string& base, const std::string& delta) {
  ImGui::TableNextRow();
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(name);
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(value.c_str());
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(base.c_str());
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(delta.c_str());
}

void summary_tab(App& app) {
  const auto& r = app.current->result;
  const sim::Result* b = app.baseline ? &app.baseline->result : nullptr;
  int64_t peak = 0, bpeak = 0;
  for (const auto& d : r.devices) peak = std::max(peak, d.peak_memory);
  if (b)
    for (const auto& d : b->devices) bpeak = std::max(bpeak, d.peak_memory);
  if (ImGui::BeginTable("summary", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableSetupColumn("metric");
    ImGui::TableSetupColumn("now");
    ImGui::TableSetupColumn("baseline");
    ImGui::TableSetupColumn("delta");
    ImGui::TableHeadersRow();
    auto tcol = [&](const char* n, double now, std::optional<double> base) {
      metric_row(n, format_time(now), base ? format_time(*base) : "",
                 base ? fmt::format("{:+.2f}%", *base != 0 ? (now - *base) / *base * 100 : 0) : "");
    };
    tcol("step time", static_cast<double>(r.step_time),
         b ? std::optional<double>(static_cast<double>(b->step_time)) : std::nullopt);
    metric_row("bubble", fmt::format("{:.2f}%", r.bubble_ratio * 100), b ? fmt::format("{:.2f}%", b->bubble_ratio * 100) : "",
               b ? fmt::format("{:+.2f} pt", (r.bubble_ratio - b->bubble_ratio) * 100) : "");
    tcol("exposed comm (sum)", static_cast<double>(r.exposed_comm),
         b ? std::optional<double>(static_cast<double>(b->exposed_comm)) : std::nullopt);
    metric_row("MFU", fmt::format("{:.2f}%", r.mfu * 100), b ? fmt::format("{:.2f}%", b->mfu * 100) : "",
               b ? fmt::format("{:+.2f} pt", (r.mfu - b->mfu) * 100) : "");
    metric_row("tokens/s", fmt::format("{:.0f}", r.tokens_per_s), b ? fmt::format("{:.0f}", b->tokens_per_s) : "",
               b ? fmt::format("{:+.0f}", r.tokens_per_s - b->tokens_per_s) : "");
    metric_row("peak memory (max)", format_bytes(static_cast<double>(peak)), b ? format_bytes(static_cast<double>(bpeak)) : "",
               b ? format_bytes(static_cast<double>(peak - bpeak)) : "");
    metric_row("devices", fmt::format("{}", r.devices.size()), b ? fmt::format("{}", b->devices.size()) : "", "");
    metric_row("events", fmt::format("{}", r.events), b ? fmt::format("{}", b->events) : "", "");
    metric_row("simulation wall", fmt::format("{:.1f} ms", r.sim_wall_ms), b ? fmt::format("{:.1f} ms", b->sim_wall_ms) : "", "");
    ImGui::EndTable();
  }
  app.hook("summary");
}

void devices_tab(App& app) {
  const auto& r = app.current->result;
  std::vector<int>& order = cache(app).device_order;
  if (order.size() != r.devices.size()) {
    order.resize(r.devices.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  }
  const ImGuiTableFlags f = ImGuiTableFlags_Sortable | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                            ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_Resizable;
  if (ImGui::BeginTable("devices", 7, f)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* c : {"device", "busy", "bubble", "bubble %", "exposed comm", "comm", "peak memory"})
      ImGui::TableSetupColumn(c);
    ImGui::TableHeadersRow();
    const bool fresh = cache(app).order_for.lock() != app.current;  // a new result: sort again
    cache(app).order_for = app.current;
    if (ImGuiTableSortSpecs* ss = ImGui::TableGetSortSpecs(); ss && (ss->SpecsDirty || fresh)) {
      if (ss->SpecsCount > 0) {
        const int col = ss->Specs[0].ColumnIndex;
        const bool asc = ss->Specs[0].SortDirection == ImGuiSortDirection_Ascending;
        auto key = [&](int i) -> double {
          const auto& d = r.devices[static_cast<size_t>(i)];
          switch (col) {
            case 1: return static_cast<double>(d.busy);
            case 2: return static_cast<double>(d.bubble);
            case 3: return d.bubble_ratio;
            case 4: return static_cast<double>(d.exposed_comm);
            case 5: return static_cast<double>(d.comm);
            case 6: return static_cast<double>(d.peak_memory);
            default: return i;
          }
        };
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return asc ? key(a) < key(b) : key(a) > key(b); });
      }
      ss->SpecsDirty = false;
    }
    ImGuiListClipper clip;
    clip.Begin(static_cast<int>(order.size()));
    while (clip.Step())
      for (int row = clip.DisplayStart; row < clip.DisplayEnd; ++row) {
        const auto& d = r.devices[static_cast<size_t>(order[static_cast<size_t>(row)])];
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::Text("%d%s", d.id, d.folded ? " (folded)" : "");
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(static_cast<double>(d.busy)).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(static_cast<double>(d.bubble)).c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%.2f%%", d.bubble_ratio * 100);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(static_cast<double>(d.exposed_comm)).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(static_cast<double>(d.comm)).c_str());
        ImGui::TableNextColumn();
        if (d.over_capacity)
          ImGui::TextColored(kRed, "%s", format_bytes(static_cast<double>(d.peak_memory)).c_str());
        else
          ImGui::TextUnformatted(format_bytes(static_cast<double>(d.peak_memory)).c_str());
      }
    ImGui::EndTable();
  }
  app.hook("devices table");
}

void selection_tab(App& app) {
  const Snapshot& s = *app.current;
  if (app.sel.valid() && app.sel.task < s.result.timing.size()) {
    const auto [li, oi] = s.timeline.where[app.sel.task];
    SimTime free_at = -1;
    std::string lane = "?";
    if (li != UINT32_MAX) {
      lane = s.timeline.lanes[li].name;
      free_at = oi > 0 ? s.timeline.lanes[li].ops[oi - 1].end : 0;
    }
    op_tooltip_body(s, app.sel.task, free_at, lane);
    ImGui::Separator();
  } else {
    ImGui::TextColored(kGrey, "Click an op to select it; right-drag on the timeline to select a range.");
  }
  // Statistics of the selected range (or the whole step) per op kind.
  const double a = app.tl.range_t0 >= 0 ? std::min(app.tl.range_t0, app.tl.range_t1) : 0;
  const double b = app.tl.range_t0 >= 0 ? std::max(app.tl.range_t0, app.tl.range_t1)
                                         : static_cast<double>(s.result.step_time);
  App::PanelCache& pc = cache(app);
  auto& stats = pc.stats;
  const int lane = app.tl.lane < static_cast<int>(s.timeline.lanes.size()) ? app.tl.lane : -1;
  if (pc.stats_for.lock() != app.current || pc.stats_a != a || pc.stats_b != b || pc.stats_lane != lane) {
    pc.stats_for = app.current, pc.stats_a = a, pc.stats_b = b, pc.stats_lane = lane;
    stats = kind_stats(s.timeline, a, b, lane);
  }
  if (lane >= 0)
    ImGui::Text("ops in %s .. %s, device %d lane %s (click the lane's name again for all lanes)",
                format_time(a).c_str(), format_time(b).c_str(), s.timeline.lanes[static_cast<size_t>(lane)].device,
                s.timeline.lanes[static_cast<size_t>(lane)].name.c_str());
  else
    ImGui::Text("ops in %s .. %s, all lanes (click a lane's name for that lane)", format_time(a).c_str(),
                format_time(b).c_str());
  app.hook("range stats");
  if (ImGui::BeginTable("stats", 5, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV)) {
    for (const char* c : {"kind", "count", "total", "mean", "max"}) ImGui::TableSetupColumn(c);
    ImGui::TableHeadersRow();
    for (size_t k = 0; k < stats.size(); ++k) {
      if (!stats[k].count) continue;
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(class_color(static_cast<OpClass>(k))), "%s",
                         std::string(op_class_name(static_cast<OpClass>(k))).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%zu", stats[k].count);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_time(static_cast<double>(stats[k].total)).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_time(static_cast<double>(stats[k].total) / static_cast<double>(stats[k].count)).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_time(static_cast<double>(stats[k].max)).c_str());
    }
    ImGui::EndTable();
  }
}

void compare_tab(App& app) {
  if (!app.baseline && !app.measured) {
    ImGui::TextColored(kGrey, "Pin a baseline (P, or the Pin baseline button), edit, and compare here; "
                              "or open a measured Chrome trace (path field, Open trace).");
    return;
  }
  if (app.measured) {
    const auto& m = *app.measured;
    const double pred = static_cast<double>(app.current->result.step_time), meas = static_cast<double>(m.end);
    ImGui::Text("measured %s: %zu slices, span %s; predicted %s (%+.2f%%)", m.path.c_str(), m.timeline.ops,
                format_time(meas).c_str(), format_time(pred).c_str(), meas > 0 ? (pred - meas) / meas * 100 : 0.0);
    ImGui::SameLine();
    if (ImGui::SmallButton("close trace")) {
      app.measured.reset();
      return;
    }
  } else {
    summary_tab(app);
  }
  using Row = CompareRow;
  App::PanelCache& pc = cache(app);
  auto& rows = pc.rows;
  if (pc.cmp_now.lock() != app.current || pc.cmp_base.lock() != app.baseline ||
      pc.cmp_measured.lock() != app.measured) {
    pc.cmp_now = app.current;
    pc.cmp_base = app.baseline;
    pc.cmp_measured = app.measured;
    rows.clear();
    auto now = logical_spans(*app.current);
    auto base = app.measured ? app.measured->spans : logical_spans(*app.baseline);
    for (const auto& [k, v] : now) {
      Row r{std::get<0>(k), std::get<1>(k), std::get<2>(k), -1, -1, v.first, v.second};
      if (auto it = base.find(k); it != base.end()) r.s0 = it->second.first, r.e0 = it->second.second;
      rows.push_back(r);
    }
    for (const auto& [k, v] : base)
      if (!now.count(k)) rows.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), v.first, v.second, -1, -1});
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return std::llabs((a.e1 - a.e0)) > std::llabs((b.e1 - b.e0));
    });
  }
  ImGui::Text("Logical ops aligned by (PP, MB, PASS), largest change of end time first (%s):",
              app.measured ? "measured vs predicted" : "baseline vs now");
  app.hook("diff table");
  if (ImGui::BeginTable("diff", 6, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* c : {"op", app.measured ? "measured start" : "baseline start", app.measured ? "measured end" : "baseline end", "start", "end", "end delta"})
      ImGui::TableSetupColumn(c);
    ImGui::TableHeadersRow();
    ImGuiListClipper clip;
    clip.Begin(static_cast<int>(rows.size()));
    while (clip.Step())
      for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
        const Row& r = rows[static_cast<size_t>(i)];
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::Text("PP%d MB%d %s", r.pp, r.mb, std::string(pass_name(static_cast<Pass>(r.pass))).c_str());
        auto t = [](SimTime x) { return x < 0 ? std::string("-") : format_time(static_cast<double>(x)); };
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(t(r.s0).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(t(r.e0).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(t(r.s1).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(t(r.e1).c_str());
        ImGui::TableNextColumn();
        if (r.e0 >= 0 && r.e1 >= 0) {
          const SimTime d = r.e1 - r.e0;
          ImGui::TextColored(d > 0 ? kRed : d < 0 ? kGreen : kGrey, "%s", (d > 0 ? "+" + format_time(static_cast<double>(d)) : format_time(static_cast<double>(d))).c_str());
        } else {
          ImGui::TextUnformatted(r.e0 < 0 ? "new" : "gone");
        }
      }
    ImGui::EndTable();
  }
}

void critical_tab(App& app) {
  app.ensure_critical();
  const auto b = sim::breakdown(app.critical_steps);
  ImGui::Text("compute %s + communication %s + waiting %s", format_time(static_cast<double>(b.compute)).c_str(),
              format_time(static_cast<double>(b.comm)).c_str(), format_time(static_cast<double>(b.wait)).c_str());
  if (ImGui::BeginTable("crit", 5, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* c : {"op", "device", "start", "duration", "waited for"}) ImGui::TableSetupColumn(c);
    ImGui::TableHeadersRow();
    ImGuiListClipper clip;
    clip.Begin(static_cast<int>(app.critical_steps.size()));
    while (clip.Step())
      for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
        const auto& st = app.critical_steps[static_cast<size_t>(i)];
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::PushID(i);
        if (ImGui::Selectable(st.what.c_str(), app.sel.task == st.task, ImGuiSelectableFlags_SpanAllColumns)) {
          app.sel.task = st.task;
          const double len = static_cast<double>(st.end - st.start);
          app.zoom(static_cast<double>(st.start) - len * 4, static_cast<double>(st.end) + len * 4);
        }
        ImGui::PopID();
        ImGui::TableNextColumn();
        ImGui::Text("%d", st.device);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(static_cast<double>(st.start)).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(static_cast<double>(st.end - st.start)).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(st.waited_for.c_str());
      }
    ImGui::EndTable();
  }
}

}  // namespace

void draw_numbers_panel(App& app) {
  if (!app.current) return;
  if (ImGui::BeginTabBar("numbers")) {
    auto tab = [&](const char* label, const char* hook_name, auto&& body) {
      const bool open = ImGui::BeginTabItem(label);
      app.hook(hook_name);
      if (!open) return;
      body();
      ImGui::EndTabItem();
    };
    tab("Summary", "tab summary", [&] { summary_tab(app); });
    tab("Devices", "tab devices", [&] { devices_tab(app); });
    tab("Selection", "tab selection", [&] { selection_tab(app); });
    tab("Compare", "tab compare", [&] { compare_tab(app); });
    tab("Critical path", "tab critical", [&] { critical_tab(app); });
    ImGui::EndTabBar();
  }
}

}  // namespace stretto::gui
