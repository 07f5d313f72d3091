// Timeline panel: toolbar and search, the track overview (minimap), the ruler, one row group
// per device (its lanes with nested pass -> layer -> op slices, or one row per device), the
// baseline's rows under the current ones, a difference lane under each device, flows of the
// selection, range, cursor and hover.
#include <fmt/format.h>
#include <imgui.h>
#include <imgui_internal.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "stretto/gui/app.h"
#include "view_common.h"

namespace stretto::gui {

using namespace view;

namespace {

const ImU32 kSearchOutline = IM_COL32(0, 255, 255, 255);  // a matching op
const int kDimAlpha = 55;                                  // ops the search does not match

// One frame of the panel: geometry, the view, input and what the rows found under the mouse.
struct Frame {
  const Snapshot* s = nullptr;
  const Timeline* T = nullptr;
  ImDrawList* dl = nullptr;
  ImVec2 p0, p1;           // the canvas
  View v;                  // lanes' time axis
  float label_w = 0, mini_h = 0, ruler_h = 0, row_h = 0, level_h = 0, head_h = 0;
  float y_mini = 0, y_ruler = 0, y_top = 0;  // minimap, ruler and rows start here
  double end = 1;          // the step's end
  bool hovered = false;
  double mouse_t = 0;
  float min_label_w = 0;
  bool searching = false;
  // Reference lanes drawn under the current ones: a measured trace, else the pinned baseline.
  const Timeline* ref = nullptr;
  std::vector<int> base_of;  // per lane: the reference lane of the same (device, stream), or -1
  std::vector<float> lane_y;  // per lane: the middle of its ops row, -1 off screen
  std::vector<const DeviceDiff*> diff;  // per device (by_device index): its difference lane's data
  float diff_h = 0;
  std::vector<Box> boxes;
  uint32_t hover_lane = UINT32_MAX;
  long hover_op = -1;
  const CompareRow* hover_diff = nullptr;  // a difference lane's op under the mouse
  int hover_diff_device = -1;
};

// The difference lanes' data: the current result against the reference, per device (made
// again when either changes).
const std::vector<DeviceDiff>& diffs_of(App& app) {
  App::PanelCache& c = cache(app);
  if (c.diff_now.lock() != app.current || c.diff_base.lock() != app.baseline || c.diff_measured.lock() != app.measured) {
    c.diff_now = app.current;
    c.diff_base = app.baseline;
    c.diff_measured = app.measured;
    c.diffs.clear();
    if (app.current && (app.measured || app.baseline))
      c.diffs = device_diffs(device_spans(*app.current),
                             app.measured ? app.measured->device_spans : device_spans(*app.baseline));
  }
  return c.diffs;
}

// ---- toolbar: view buttons, lane mode, search

void toolbar(App& app, const Snapshot& s) {
  TimelineState& tl = app.tl;
  const Timeline& T = s.timeline;
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
  ImGui::SameLine();
  ImGui::Checkbox("one lane per device", &tl.one_lane_per_device);
  app.hook("one lane per device");
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Each device one row: its compute lane's passes (L)");
  if (app.baseline || app.measured) {
    ImGui::SameLine();
    ImGui::Checkbox(app.measured ? "measured" : "baseline", &tl.show_baseline);
    ImGui::SameLine();
    ImGui::Checkbox("difference lanes", &tl.show_diff);
    app.hook("difference lanes");
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("A lane under each device: where its ops differ from the %s.\n"
                        "Upper half: the start moved (red: later, green: earlier).\n"
                        "Lower half: the duration changed (red: longer, green: shorter).\n"
                        "Magenta: in one run only (filled: gone, outlined: new).",
                        app.measured ? "measured trace" : "baseline");
  }
  // Second row: search, counts, staleness.
  ImGui::SetNextItemWidth(320 * app.font_scale);
  ImGui::InputTextWithHint("##search", "search ops: PP3 MB5, layer19.mlp, all-gather", &app.search.query);
  app.hook("search");
  app.update_search();
  if (app.search.pending()) {  // the worker builds the index or matches (search.h)
    ImGui::SameLine();
    ImGui::TextColored(kYellow, "%s", app.search.worker.indexing() ? "indexing..." : "searching...");
    app.hook("search pending");
  }
  if (app.search.active()) {
    ImGui::SameLine();
    ImGui::TextColored(app.search.tasks.empty() ? kRed : ImVec4(0.3f, 1.0f, 1.0f, 1.0f), "%zu match%s",
                       app.search.tasks.size(), app.search.tasks.size() == 1 ? "" : "es");
    ImGui::SameLine();
    if (ImGui::SmallButton("clear")) app.search.query.clear();
  }
  ImGui::SameLine();
  ImGui::TextColored(kGrey, "%zu ops, %zu lanes, step %s", T.ops, T.lanes.size(),
                     format_time(static_cast<double>(s.result.step_time)).c_str());
  if ((app.baseline || app.measured) && tl.show_diff) {  // the difference lanes' legend
    ImGui::SameLine();
    ImGui::TextColored(kGrey, "diff:");
    ImGui::SameLine();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(kDiffWorse), "later/longer");
    ImGui::SameLine();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(kDiffBetter), "earlier/shorter");
    ImGui::SameLine();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(kDiffMissing), "in one run only");
  }
  if (app.stale()) {
    ImGui::SameLine();
    ImGui::TextColored(app.last_failed ? kRed : kYellow, app.last_failed ? "[last good result: the edit failed]" : "[STALE]");
    app.hook("stale");
  }
}

// ---- geometry of the canvas and the view

Frame geometry(App& app, const Snapshot& s) {
  TimelineState& tl = app.tl;
  Frame f;
  f.s = &s;
  f.T = &s.timeline;
  const float scale = app.font_scale;
  f.label_w = 110 * scale;
  f.mini_h = std::round(30 * scale);
  f.ruler_h = 22 * scale;
  f.row_h = std::round(ImGui::GetTextLineHeight() + 6);
  f.level_h = std::round(ImGui::GetTextLineHeight() + 3);
  f.head_h = std::round(ImGui::GetTextLineHeight() + 2);
  f.p0 = ImGui::GetCursorScreenPos();
  ImVec2 avail = ImGui::GetContentRegionAvail();
  avail.x = std::max(avail.x, 50.0f);
  avail.y = std::max(avail.y, 50.0f + f.mini_h);
  ImGui::InvisibleButton("canvas", avail, ImGuiButtonFlags_MouseButtonLeft | ImGuiButtonFlags_MouseButtonRight);
  app.hook("timeline");
  f.hovered = ImGui::IsItemHovered();
  f.p1 = ImVec2(f.p0.x + avail.x, f.p0.y + avail.y);
  f.y_mini = f.p0.y;
  f.y_ruler = f.p0.y + f.mini_h;
  f.y_top = f.y_ruler + f.ruler_h;
  f.v.x_origin = f.p0.x + f.label_w;
  f.v.width = avail.x - f.label_w;
  tl.width = f.v.width;
  f.end = static_cast<double>(std::max<SimTime>(s.timeline.end, 1));
  if (tl.ns_per_px <= 0) {
    tl.ns_per_px = f.end * 1.04 / f.v.width;
    tl.t0 = -f.end * 0.02;
  }
  f.min_label_w = ImGui::CalcTextSize("F0").x + 6;
  f.dl = ImGui::GetWindowDrawList();
  f.searching = app.search.active() && app.search.lane_prefix.size() == s.timeline.lanes.size();
  f.ref = app.measured ? &app.measured->timeline
          : app.baseline && app.baseline.get() != app.current.get() ? &app.baseline->timeline
                                                                    : nullptr;
  f.base_of.assign(s.timeline.lanes.size(), -1);
  if (f.ref && tl.show_baseline) {
    std::unordered_map<std::string, int> by_name;  // "device/stream" -> reference lane
    for (size_t i = 0; i < f.ref->lanes.size(); ++i)
      by_name[fmt::format("{}/{}", f.ref->lanes[i].device, f.ref->lanes[i].name)] = static_cast<int>(i);
    for (size_t i = 0; i < s.timeline.lanes.size(); ++i)
      if (auto it = by_name.find(fmt::format("{}/{}", s.timeline.lanes[i].device, s.timeline.lanes[i].name));
          it != by_name.end())
        f.base_of[i] = it->second;
  }
  f.lane_y.assign(s.timeline.lanes.size(), -1.0f);
  f.diff.assign(s.timeline.by_device.size(), nullptr);
  f.diff_h = f.level_h + 2;
  if (f.ref && tl.show_diff) {
    const auto& all = diffs_of(app);
    for (size_t d = 0; d < s.timeline.by_device.size(); ++d) {
      if (s.timeline.by_device[d].empty()) continue;
      const int dev = s.timeline.lanes[s.timeline.by_device[d][0]].device;
      auto it = std::lower_bound(all.begin(), all.end(), dev, [](const DeviceDiff& x, int v) { return x.device < v; });
      if (it != all.end() && it->device == dev) f.diff[d] = &*it;
    }
  }
  return f;
}

// The compute lane of device d (lanes are grouped by device, compute first), or UINT32_MAX.
uint32_t compute_lane(const Timeline& T, size_t d) {
  return T.by_device[d].empty() || T.lanes[T.by_device[d][0]].stream != 0 ? UINT32_MAX : T.by_device[d][0];
}

float lane_height(const Frame& f, uint32_t li) {
  const Lane& l = f.T->lanes[li];
  return f.row_h + static_cast<float>(l.depth() - 1) * f.level_h + (f.base_of[li] >= 0 ? f.level_h : 0);
}

// Height of device d's rows.
float device_height(const App& app, const Frame& f, size_t d) {
  const Timeline& T = *f.T;
  if (T.by_device[d].empty()) return 0;
  const float diff = f.diff[d] ? f.diff_h : 0;
  if (app.tl.one_lane_per_device) {
    const uint32_t c = compute_lane(T, d);
    return f.row_h + (c != UINT32_MAX && f.base_of[c] >= 0 ? f.level_h : 0) + diff;
  }
  float h = f.head_h + diff;
  if (!app.tl.collapsed[d])
    for (uint32_t li : T.by_device[d]) h += lane_height(f, li);
  return h;
}

// ---- input: wheel zooms at the mouse (Shift+wheel scrolls lanes), left drag pans, right drag
// selects a range; on the minimap a click or drag centres the view there.

void input(App& app, Frame& f, float total_h) {
  TimelineState& tl = app.tl;
  ImGuiIO& io = ImGui::GetIO();
  float& scroll_y = cache(app).scroll_y;
  bool& mini_drag = cache(app).minimap_drag;
  const float row_h = f.row_h;
  if (f.hovered && io.MouseWheel != 0) {
    if (io.KeyShift) {
      scroll_y -= io.MouseWheel * row_h * 3;
    } else {
      const double tm = tl.t0 + static_cast<double>(io.MousePos.x - f.v.x_origin) * tl.ns_per_px;
      const double k = std::pow(1.25, -static_cast<double>(io.MouseWheel));
      tl.ns_per_px = std::clamp(tl.ns_per_px * k, 0.01, f.end);
      tl.fitted = false;
      tl.t0 = tm - static_cast<double>(io.MousePos.x - f.v.x_origin) * tl.ns_per_px;
    }
  }
  const bool in_mini = io.MousePos.y >= f.y_mini && io.MousePos.y < f.y_ruler && io.MousePos.x >= f.v.x_origin;
  if (f.hovered && in_mini && ImGui::IsMouseClicked(ImGuiMouseButton_Left)) mini_drag = true;
  if (mini_drag) {
    if (!ImGui::IsMouseDown(ImGuiMouseButton_Left)) {
      mini_drag = false;
    } else {
      const double t = static_cast<double>(io.MousePos.x - f.v.x_origin) / f.v.width * f.end;
      tl.t0 = t - tl.ns_per_px * f.v.width * 0.5;
      tl.fitted = false;
    }
  } else if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2.0f)) {
    tl.t0 -= static_cast<double>(io.MouseDelta.x) * tl.ns_per_px;
    scroll_y -= io.MouseDelta.y;
    if (io.MouseDelta.x != 0) tl.fitted = false;
  }
  scroll_y = std::clamp(scroll_y, 0.0f, std::max(0.0f, total_h - (f.p1.y - f.y_top)));
  f.v.t0 = tl.t0;
  f.v.ns_per_px = tl.ns_per_px;
  f.mouse_t = f.v.t(io.MousePos.x);
  tl.cursor = f.hovered && io.MousePos.x >= f.v.x_origin && io.MousePos.y >= f.y_ruler ? f.mouse_t : -1;
  if (f.hovered && !in_mini && ImGui::IsMouseClicked(ImGuiMouseButton_Right)) {
    tl.range_t0 = tl.range_t1 = f.mouse_t;
    tl.dragging_range = true;
  }
  if (tl.dragging_range) {
    tl.range_t1 = f.mouse_t;
    if (!ImGui::IsMouseDown(ImGuiMouseButton_Right)) {
      tl.dragging_range = false;
      if (tl.range_t1 < tl.range_t0) std::swap(tl.range_t0, tl.range_t1);
      if (tl.range_t1 - tl.range_t0 < 3 * tl.ns_per_px) tl.range_t0 = tl.range_t1 = -1;
    }
  }
}

// ---- the track overview: every device's compute lane over the whole step (one pixel row or
// more per device, sampled when there are more devices than pixels), the search's matches
// as ticks and the viewport as a frame.

void minimap(App& app, Frame& f) {
  const Timeline& T = *f.T;
  ImDrawList* dl = f.dl;
  const float y0 = f.y_mini, y1 = f.y_ruler - 2;
  dl->AddRectFilled(ImVec2(f.p0.x, y0), ImVec2(f.p1.x, f.y_ruler), IM_COL32(16, 17, 20, 255));
  dl->AddText(ImVec2(f.p0.x + 4, y0 + 2), IM_COL32(150, 150, 150, 255), "overview");
  app.hooks["minimap"] = {f.v.x_origin, y0, f.p1.x, y1};
  View mv;
  mv.x_origin = f.v.x_origin;
  mv.width = f.v.width;
  mv.t0 = 0;
  mv.ns_per_px = f.end / static_cast<double>(f.v.width);
  std::vector<uint32_t> lanes;
  for (size_t d = 0; d < T.by_device.size(); ++d)
    if (uint32_t c = compute_lane(T, d); c != UINT32_MAX) lanes.push_back(c);
  const int rows = std::min<int>(static_cast<int>(lanes.size()), static_cast<int>(y1 - y0 - 2));
  for (int r = 0; r < rows; ++r) {
    const Lane& l = T.lanes[lanes[static_cast<size_t>(r) * lanes.size() / static_cast<size_t>(rows)]];
    const float ry0 = y0 + 1 + (y1 - y0 - 2) * static_cast<float>(r) / static_cast<float>(rows);
    const float ry1 = std::max(ry0 + 1, y0 + 1 + (y1 - y0 - 2) * static_cast<float>(r + 1) / static_cast<float>(rows) - 0.5f);
    f.boxes.clear();
    if (!l.passes.empty())
      layout_spans(l.passes, mv, f.boxes);
    else
      layout_lane(l, mv, f.boxes);
    for (const Box& b : f.boxes)
      dl->AddRectFilled(ImVec2(b.x0, ry0), ImVec2(std::max(b.x1, b.x0 + 1), ry1), class_color(b.cls, f.searching ? 90 : 200));
  }
  if (f.searching) {  // up to 2,000 of the matches, evenly sampled
    const auto& m = app.search.tasks;
    const size_t stride = std::max<size_t>(1, m.size() / 2000);
    for (size_t i = 0; i < m.size(); i += stride) {
      const float x = mv.x(static_cast<double>(f.s->result.timing[m[i]].start));
      dl->AddLine(ImVec2(x, y0), ImVec2(x, y0 + 5), kSearchOutline);
    }
  }
  const float vx0 = std::max(mv.x(f.v.t0), f.v.x_origin), vx1 = std::min(mv.x(f.v.t1()), f.p1.x);
  dl->AddRectFilled(ImVec2(vx0, y0), ImVec2(std::max(vx1, vx0 + 2), y1 + 1), IM_COL32(255, 255, 255, 40));
  dl->AddRect(ImVec2(vx0, y0), ImVec2(std::max(vx1, vx0 + 2), y1 + 1), IM_COL32(255, 255, 255, 255), 0, 0, 1.5f);
  app.hooks["minimap viewport"] = {vx0, y0, std::max(vx1, vx0 + 2), y1 + 1};
}

// ---- the ruler: ticks in one unit chosen from the view ("0", "20 ms", "40 ms")

void ruler(App& app, Frame& f) {
  ImDrawList* dl = f.dl;
  const View& v = f.v;
  const double step = nice_step(90.0 * static_cast<double>(app.font_scale) * v.ns_per_px);
  const float y0 = f.y_ruler;
  dl->AddRectFilled(ImVec2(f.p0.x, y0), ImVec2(f.p1.x, y0 + f.ruler_h), IM_COL32(40, 43, 50, 255));
  bool first = true;
  for (double t = std::floor(v.t0 / step) * step; t <= v.t1(); t += step) {
    const float x = v.x(t);
    if (x < v.x_origin) continue;
    dl->AddLine(ImVec2(x, y0 + f.ruler_h * 0.5f), ImVec2(x, f.p1.y), IM_COL32(70, 74, 84, 255));
    const std::string lab = format_tick(std::abs(t) < step * 1e-6 ? 0.0 : t, step);
    if (x + 3 + ImGui::CalcTextSize(lab.c_str()).x <= f.p1.x)  // a label the edge would cut is left out
      dl->AddText(ImVec2(x + 3, y0 + 2), IM_COL32(200, 200, 200, 255), lab.c_str());
    if (first) {
      const ImVec2 sz = ImGui::CalcTextSize(lab.c_str());
      app.hooks["ruler first label"] = {x + 3, y0 + 2, x + 3 + sz.x, y0 + 2 + sz.y};
      first = false;
    }
    app.tl.labels.push_back("ruler: " + lab);
    for (int k = 1; k < 5; ++k) {
      const float xs = v.x(t + step * k / 5);
      dl->AddLine(ImVec2(xs, y0 + f.ruler_h * 0.75f), ImVec2(xs, y0 + f.ruler_h), IM_COL32(110, 110, 120, 255));
    }
  }
  dl->AddLine(ImVec2(v.x(f.end), y0), ImVec2(v.x(f.end), f.p1.y), IM_COL32(255, 255, 255, 90));  // the step's end
}

// ---- boxes of one level

// The label of an op: the model op ("layer19.mlp.up") under nested slices, which name the
// pass and the layer; else the slice name ("F mb3 PP1", "all-reduce grad PP0").
std::string op_label(const Snapshot& s, uint32_t task, bool nested) {
  if (nested) {
    const auto& cp = s.session->compiled();
    const uint32_t n = s.result.node_of(task);
    if (n < cp.dag.nodes.size() && cp.dag.nodes[n].op < cp.model.ops.size())
      return cp.model.ops[cp.dag.nodes[n].op].name;
  }
  return op_name(s, task);
}

void label_box(App& app, Frame& f, float x0, float x1, float y, const std::string& name) {
  if (x1 - x0 < f.min_label_w) return;
  if (ImGui::CalcTextSize(name.c_str()).x + 4 > x1 - x0) return;
  f.dl->AddText(ImVec2(x0 + 2, y), IM_COL32(255, 255, 255, 255), name.c_str());
  if (app.tl.labels.size() < 4000) app.tl.labels.push_back(name);
}

// The ops of lane li in [y0, y1): idle time shaded by its cause, search, critical path and
// selection outlined, names where they fit.
void op_level(App& app, Frame& f, uint32_t li, float y0, float y1, bool labels) {
  const Lane& lane = f.T->lanes[li];
  const Snapshot& s = *f.s;
  const auto& cp = s.session->compiled();
  const View& v = f.v;
  ImDrawList* dl = f.dl;
  const TimelineState& tl = app.tl;
  f.boxes.clear();
  layout_lane(lane, v, f.boxes);
  app.tl.boxes_drawn += static_cast<int>(f.boxes.size());
  const bool nested = lane.depth() > 1;
  for (const Box& b : f.boxes) {
    const float x0 = std::max(b.x0, v.x_origin - 2), x1 = std::min(b.x1, f.p1.x + 2);
    const uint32_t matches = f.searching ? app.search.in_lane(li, b.first, b.first + b.count - 1) : 1;
    const int alpha = matches ? 255 : kDimAlpha;
    if (tl.show_bubbles && b.count == 1 && b.first > 0) {
      const Op& prev = lane.ops[b.first - 1];
      const float gx0 = v.x(static_cast<double>(prev.end));
      if (b.x0 - gx0 >= 3) {
        const sim::Wait w = sim::wait_cause(cp, s.result, lane.ops[b.first].task, prev.end);
        if (ImU32 c = cause_color(w.cause)) dl->AddRectFilled(ImVec2(std::max(gx0, v.x_origin), y0), ImVec2(b.x0, y1), c);
      }
    }
    if (b.count == 1) {
      const uint32_t task = lane.ops[b.first].task;
      dl->AddRectFilled(ImVec2(x0, y0), ImVec2(std::max(x1, x0 + 1), y1), class_color(b.cls, alpha));
      if (b.x1 - b.x0 >= 4) dl->AddRect(ImVec2(x0, y0), ImVec2(x1, y1), IM_COL32(0, 0, 0, 110));
      if (labels && matches) label_box(app, f, x0, x1, y0, op_label(s, task, nested));
      if (tl.show_critical && task < app.critical.size() && app.critical[task])
        dl->AddRect(ImVec2(x0 - 1, y0 - 1), ImVec2(x1 + 1, y1 + 1), IM_COL32(255, 235, 59, 255), 0, 0, 2.5f);
      if (f.searching && matches)
        dl->AddRect(ImVec2(x0 - 1, y0 - 1), ImVec2(std::max(x1, x0 + 1) + 1, y1 + 1), kSearchOutline, 0, 0, 2);
      if (app.sel.valid() && task == app.sel.task)
        dl->AddRect(ImVec2(x0 - 1, y0 - 1), ImVec2(x1 + 1, y1 + 1), IM_COL32(255, 255, 255, 255), 0, 0, 2);
    } else {
      // A merged run: the colour of most of its time, inset so it reads as many ops.
      dl->AddRectFilled(ImVec2(x0, y0 + 2), ImVec2(std::max(x1, x0 + 1), y1 - 2), class_color(b.cls, matches ? 200 : kDimAlpha));
      if (f.searching && matches)
        dl->AddRectFilled(ImVec2(x0, y0 - 1), ImVec2(std::max(x1, x0 + 1), y0 + 2), kSearchOutline);
    }
  }
}

// Nested slices of lane li (level 0 passes, 1 layers) in [y0, y1), named where they fit.
void span_level(App& app, Frame& f, uint32_t li, const std::vector<Span>& spans, int level, float y0, float y1) {
  const Lane& lane = f.T->lanes[li];
  const Snapshot& s = *f.s;
  const auto& cp = s.session->compiled();
  f.boxes.clear();
  layout_spans(spans, f.v, f.boxes);
  app.tl.boxes_drawn += static_cast<int>(f.boxes.size());
  for (const Box& b : f.boxes) {
    const float x0 = std::max(b.x0, f.v.x_origin - 2), x1 = std::min(b.x1, f.p1.x + 2);
    const Span& sp = spans[b.first];
    const Span& last = spans[b.first + b.count - 1];
    const bool matches = !f.searching || app.search.in_lane(li, sp.first, last.last) > 0;
    const int alpha = !matches ? 35 : level == 0 ? 255 : 110;  // passes solid: the schedule at a glance
    f.dl->AddRectFilled(ImVec2(x0, y0), ImVec2(std::max(x1, x0 + 1), y1), class_color(b.cls, alpha));
    if (b.x1 - b.x0 >= 4) f.dl->AddRect(ImVec2(x0, y0), ImVec2(x1, y1), IM_COL32(0, 0, 0, 140));
    if (b.count != 1 || !matches) continue;
    const uint32_t task = lane.ops[sp.first].task;
    std::string name;
    if (level == 0) {
      name = op_name(s, task);
    } else {
      const uint32_t n = s.result.node_of(task);
      name = n < cp.dag.nodes.size() ? fmt::format("layer {}", cp.dag.nodes[n].tags.layer()) : "?";
    }
    label_box(app, f, x0, x1, y0 - 1, name);
  }
}

// The reference (baseline or measured) lane under a current one: its passes when it has
// them (readable at any zoom), else its ops; muted, with "baseline" in the label column.
void reference_row(App& app, Frame& f, int ref_lane, float y0, float y1) {
  const Lane& rl = f.ref->lanes[static_cast<size_t>(ref_lane)];
  ++app.tl.reference_rows_drawn;
  f.dl->AddRectFilled(ImVec2(f.p0.x, y0), ImVec2(f.p1.x, y1), IM_COL32(30, 32, 38, 255));
  f.dl->AddText(ImVec2(f.p0.x + 24, y0), IM_COL32(140, 140, 150, 255), app.measured ? "measured" : "baseline");
  f.boxes.clear();
  if (!rl.passes.empty())
    layout_spans(rl.passes, f.v, f.boxes);
  else
    layout_lane(rl, f.v, f.boxes);
  for (const Box& b : f.boxes)
    f.dl->AddRectFilled(ImVec2(std::max(b.x0, f.v.x_origin - 2), y0 + 2), ImVec2(std::max(b.x1, b.x0 + 1), y1 - 2),
                        class_color(b.cls, 170));
}

// ---- the difference lane under a device: where the current run differs from the reference,
// per logical op (PP, MB, PASS) of that device. Upper half: the start moved (red, later: from
// the reference's start to the current one; green, earlier); lower half: the duration changed
// (red, longer: the extra time at the op's end; green, shorter: the time it no longer takes,
// after its end); full height, magenta: an op of one run only (filled: gone, where the
// reference ran it; outlined: new). A change narrower than 2 px is drawn 2 px wide.

void diff_row(App& app, Frame& f, size_t d, float y) {
  const DeviceDiff& dd = *f.diff[d];
  const float y1 = y + f.diff_h;
  if (y1 < f.y_top || y > f.p1.y) return;
  ++app.tl.diff_lanes_drawn;
  ImDrawList* dl = f.dl;
  dl->AddRectFilled(ImVec2(f.p0.x, y), ImVec2(f.p1.x, y1), kDiffBackground);
  const std::string label =
      dd.same() ? std::string("no difference")
                : fmt::format("diff {}{}", dd.max_end_delta > 0 ? "+" : "", format_time(static_cast<double>(dd.max_end_delta)));
  dl->AddText(ImVec2(f.p0.x + 14, y + 1), IM_COL32(210, 210, 210, 255), label.c_str());
  app.tl.labels.push_back(label);
  if (d < 64) app.hooks[fmt::format("diff {}", d)] = {f.v.x_origin, y, f.p1.x, y1};
  const View& v = f.v;
  const ImGuiIO& io = ImGui::GetIO();
  const float ym = std::round(y + f.diff_h * 0.5f);
  auto bar = [&](SimTime a, SimTime b, float ya, float yb, ImU32 c, bool filled) {
    float x0 = v.x(static_cast<double>(a)), x1 = v.x(static_cast<double>(b));
    if (x1 - x0 < 2) {
      const float m = (x0 + x1) * 0.5f;
      x0 = m - 1;
      x1 = m + 1;
    }
    if (x1 < v.x_origin || x0 > f.p1.x) return false;
    x0 = std::max(x0, v.x_origin);
    if (filled)
      dl->AddRectFilled(ImVec2(x0, ya), ImVec2(x1, yb), c);
    else
      dl->AddRect(ImVec2(x0, ya), ImVec2(x1, yb), c, 0, 0, 2);
    return f.hovered && io.MousePos.x >= x0 && io.MousePos.x < x1 && io.MousePos.y >= ya && io.MousePos.y < yb;
  };
  for (const CompareRow& r : dd.rows) {
    bool hit = false;
    if (!r.both()) {
      hit = r.e1 < 0 ? bar(r.s0, r.e0, y + 1, y1 - 1, kDiffMissing, true) : bar(r.s1, r.e1, y + 1, y1 - 1, kDiffMissing, false);
    } else {
      const SimTime ds = r.s1 - r.s0, dur = (r.e1 - r.s1) - (r.e0 - r.s0);
      if (ds != 0) hit |= bar(std::min(r.s0, r.s1), std::max(r.s0, r.s1), y + 1, ym, ds > 0 ? kDiffWorse : kDiffBetter, true);
      if (dur > 0) hit |= bar(r.e1 - dur, r.e1, ym, y1 - 1, kDiffWorse, true);
      if (dur < 0) hit |= bar(r.e1, r.e1 - dur, ym, y1 - 1, kDiffBetter, true);
    }
    if (hit) {
      f.hover_diff = &r;
      f.hover_diff_device = dd.device;
    }
  }
}

// The tooltip of a difference lane's op: how it moved.
void diff_tooltip(App& app, const CompareRow& r, int device) {
  const char* ref = app.measured ? "measured" : "baseline";
  auto t = [](SimTime x) { return format_time(static_cast<double>(x)); };
  auto signed_t = [&](SimTime x) { return (x > 0 ? "+" : "") + t(x); };
  ImGui::BeginTooltip();
  app.tl.diff_tooltip =
      fmt::format("PP{} MB{} {} on device {}", r.pp, r.mb, plan::pass_name(static_cast<plan::Pass>(r.pass)), device);
  ImGui::TextUnformatted(app.tl.diff_tooltip.c_str());
  ImGui::Separator();
  if (r.e1 < 0) {
    ImGui::Text("only in the %s: %s - %s", ref, t(r.s0).c_str(), t(r.e0).c_str());
  } else if (r.e0 < 0) {
    ImGui::Text("new (not in the %s): %s - %s", ref, t(r.s1).c_str(), t(r.e1).c_str());
  } else {
    const SimTime ds = r.s1 - r.s0, dur = (r.e1 - r.s1) - (r.e0 - r.s0);
    ImGui::Text("start     %s (%s %s)", signed_t(ds).c_str(), ref, t(r.s0).c_str());
    ImGui::Text("duration  %s (%s %s)", signed_t(dur).c_str(), ref, t(r.e0 - r.s0).c_str());
    ImGui::Text("end       %s", signed_t(r.e1 - r.e0).c_str());
  }
  ImGui::EndTooltip();
}

bool clicked_in(const Frame& f, float x0, float y0, float x1, float y1) {
  const ImGuiIO& io = ImGui::GetIO();
  return f.hovered && ImGui::IsMouseReleased(ImGuiMouseButton_Left) && !ImGui::IsMouseDragPastThreshold(ImGuiMouseButton_Left) &&
         io.MousePos.x >= x0 && io.MousePos.x < x1 && io.MousePos.y >= y0 && io.MousePos.y < y1;
}

void find_hover(Frame& f, uint32_t li, float y0, float y1) {
  const ImGuiIO& io = ImGui::GetIO();
  if (f.hovered && io.MousePos.y >= y0 && io.MousePos.y < y1 && io.MousePos.x >= f.v.x_origin) {
    f.hover_lane = li;
    f.hover_op = op_at(f.T->lanes[li], f.mouse_t, 2 * f.v.ns_per_px);
  }
}

// ---- one lane (expanded mode): its name, nested levels, ops, and the reference row

float lane_rows(App& app, Frame& f, uint32_t li, float y) {
  const Lane& lane = f.T->lanes[li];
  const float h = lane_height(f, li);
  const float ops_y = y + static_cast<float>(lane.depth() - 1) * f.level_h;
  f.lane_y[li] = ops_y + f.row_h * 0.5f;
  if (y + h < f.y_top || y > f.p1.y) return h;
  ++app.tl.lanes_drawn;
  ImDrawList* dl = f.dl;
  if (li < 16) app.hooks[fmt::format("lane {}", li)] = {f.v.x_origin, ops_y, f.p1.x, ops_y + f.row_h};
  if (app.tl.lane == static_cast<int>(li))
    dl->AddRectFilled(ImVec2(f.p0.x, y), ImVec2(f.v.x_origin, ops_y + f.row_h), IM_COL32(70, 90, 140, 255));
  dl->AddText(ImVec2(f.p0.x + 14, y + 3), IM_COL32(170, 170, 170, 255), lane.name.c_str());
  if (li < 16) app.hooks[fmt::format("lane {} name", li)] = {f.p0.x, y, f.v.x_origin, ops_y + f.row_h};
  if (clicked_in(f, f.p0.x, y, f.v.x_origin, ops_y + f.row_h))
    app.tl.lane = app.tl.lane == static_cast<int>(li) ? -1 : static_cast<int>(li);
  float ly = y;
  if (!lane.passes.empty()) {
    span_level(app, f, li, lane.passes, 0, ly + 1, ly + f.level_h - 1);
    ly += f.level_h;
  }
  if (!lane.layers.empty()) {
    span_level(app, f, li, lane.layers, 1, ly + 1, ly + f.level_h - 1);
    ly += f.level_h;
  }
  op_level(app, f, li, ops_y + 2, ops_y + f.row_h - 2, true);
  if (f.base_of[li] >= 0) reference_row(app, f, f.base_of[li], ops_y + f.row_h, ops_y + f.row_h + f.level_h);
  find_hover(f, li, ops_y, ops_y + f.row_h);
  return h;
}

// ---- one device as one row: its compute lane's passes (or ops), its other lanes as a strip

float device_row(App& app, Frame& f, size_t d, float y) {
  const Timeline& T = *f.T;
  const float h = device_height(app, f, d);
  const uint32_t c = compute_lane(T, d);
  for (uint32_t li : T.by_device[d]) f.lane_y[li] = y + f.row_h * 0.5f;
  if (y + h < f.y_top || y > f.p1.y) return h;
  ++app.tl.devices_drawn;
  ImDrawList* dl = f.dl;
  dl->AddRectFilled(ImVec2(f.p0.x, y), ImVec2(f.v.x_origin, y + f.row_h), IM_COL32(34, 37, 44, 255));
  dl->AddText(ImVec2(f.p0.x + 4, y + 3), IM_COL32(230, 230, 230, 255), fmt::format("device {}", d).c_str());
  if (d < 64) app.hooks[fmt::format("device {}", d)] = {f.p0.x, y, f.v.x_origin, y + f.row_h};
  const float strip = 4;
  if (c != UINT32_MAX) {
    ++app.tl.lanes_drawn;
    const Lane& l = T.lanes[c];
    if (!l.passes.empty())
      span_level(app, f, c, l.passes, 0, y + 1, y + f.row_h - strip - 1);
    else
      op_level(app, f, c, y + 1, y + f.row_h - strip - 1, true);
    find_hover(f, c, y, y + f.row_h);
    if (f.base_of[c] >= 0) reference_row(app, f, f.base_of[c], y + f.row_h, y + f.row_h + f.level_h);
  }
  for (uint32_t li : T.by_device[d]) {
    if (li == c) continue;
    f.boxes.clear();
    layout_lane(T.lanes[li], f.v, f.boxes);
    for (const Box& b : f.boxes)
      dl->AddRectFilled(ImVec2(std::max(b.x0, f.v.x_origin - 2), y + f.row_h - strip),
                        ImVec2(std::max(b.x1, b.x0 + 1), y + f.row_h - 1), class_color(b.cls, 220));
  }
  if (f.diff[d]) diff_row(app, f, d, y + h - f.diff_h);
  return h;
}

// ---- all devices: a header per device (click collapses it) and its lanes, or one row each

void rows(App& app, Frame& f) {
  const Timeline& T = *f.T;
  TimelineState& tl = app.tl;
  ImDrawList* dl = f.dl;
  float y = f.y_top - cache(app).scroll_y;
  for (size_t d = 0; d < T.by_device.size(); ++d) {
    if (T.by_device[d].empty()) continue;
    if (tl.one_lane_per_device) {
      y += device_row(app, f, d, y);
      continue;
    }
    if (y + f.head_h >= f.y_top && y <= f.p1.y) {
      ++tl.devices_drawn;
      dl->AddRectFilled(ImVec2(f.p0.x, y), ImVec2(f.p1.x, y + f.head_h), IM_COL32(34, 37, 44, 255));
      const std::string h = fmt::format("{} device {}", tl.collapsed[d] ? "+" : "-", d);
      dl->AddText(ImVec2(f.p0.x + 4, y), IM_COL32(230, 230, 230, 255), h.c_str());
      if (clicked_in(f, f.p0.x, y, f.v.x_origin, y + f.head_h)) tl.collapsed[d] = !tl.collapsed[d];
      if (d < 4) app.hooks[fmt::format("device {}", d)] = {f.p0.x, y, f.v.x_origin, y + f.head_h};
    }
    y += f.head_h;
    if (tl.collapsed[d]) {
      for (uint32_t li : T.by_device[d]) f.lane_y[li] = y - f.head_h * 0.5f;
    } else {
      for (uint32_t li : T.by_device[d]) y += lane_rows(app, f, li, y);
    }
    if (f.diff[d]) {  // under the device's lanes, shown when it is collapsed too
      diff_row(app, f, d, y);
      y += f.diff_h;
    }
  }
}

// ---- flows of the selection: its inputs' ends to its start, and its other participants

void flows(App& app, Frame& f) {
  const Timeline& T = *f.T;
  const auto& r = f.s->result;
  if (!app.sel.valid() || !app.tl.show_flows || app.sel.task >= T.where.size()) return;
  const auto [sl, si] = T.where[app.sel.task];
  if (sl == UINT32_MAX) return;
  const View& v = f.v;
  ImDrawList* dl = f.dl;
  const float sx = v.x(static_cast<double>(r.timing[app.sel.task].start));
  const float sy = f.lane_y[sl];
  for (uint32_t dep : r.program.deps_of(app.sel.task)) {
    // Through barriers (order junctions) to real ops.
    std::vector<uint32_t> stack{dep};
    for (int guard = 0; !stack.empty() && guard < 64; ++guard) {
      const uint32_t t = stack.back();
      stack.pop_back();
      if (r.program.tasks[t].kind == engine::TaskKind::kBarrier) {
        for (uint32_t d2 : r.program.deps_of(t)) stack.push_back(d2);
        continue;
      }
      const auto [dl2, di2] = T.where[t];
      if (dl2 == UINT32_MAX) continue;
      const ImVec2 a(v.x(static_cast<double>(r.timing[t].end)), f.lane_y[dl2]), b(sx, sy);
      dl->AddBezierCubic(a, ImVec2(a.x + 30, a.y), ImVec2(b.x - 30, b.y), b, IM_COL32(255, 255, 255, 200), 1.5f);
      dl->AddTriangleFilled(ImVec2(b.x, b.y), ImVec2(b.x - 7, b.y - 4), ImVec2(b.x - 7, b.y + 4), IM_COL32(255, 255, 255, 220));
    }
  }
  const engine::Task& tk = r.program.tasks[app.sel.task];
  if (tk.part_count > 1) {
    float ymin = sy, ymax = sy;
    for (size_t li = 0; li < T.lanes.size(); ++li)
      if (f.lane_y[li] >= 0 && !T.lanes[li].ops.empty()) {
        const long k = op_at(T.lanes[li], static_cast<double>(r.timing[app.sel.task].start) + 0.5, 0);
        if (k >= 0 && T.lanes[li].ops[static_cast<size_t>(k)].task == app.sel.task)
          ymin = std::min(ymin, f.lane_y[li]), ymax = std::max(ymax, f.lane_y[li]);
      }
    dl->AddLine(ImVec2(sx, ymin), ImVec2(sx, ymax), IM_COL32(255, 255, 255, 160), 1.5f);
  }
}

// ---- hover (tooltip) and click (select, or clear the selection)

void hover_and_click(App& app, Frame& f) {
  const ImGuiIO& io = ImGui::GetIO();
  if (f.hover_diff) {
    diff_tooltip(app, *f.hover_diff, f.hover_diff_device);
  } else if (f.hover_lane != UINT32_MAX && f.hover_op >= 0) {
    const Lane& lane = f.T->lanes[f.hover_lane];
    const Op& op = lane.ops[static_cast<size_t>(f.hover_op)];
    ImGui::BeginTooltip();
    const SimTime free_at = f.hover_op > 0 ? lane.ops[static_cast<size_t>(f.hover_op) - 1].end : 0;
    op_tooltip_body(*f.s, op.task, free_at, lane.name);
    ImGui::EndTooltip();
    if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) && !ImGui::IsMouseDragPastThreshold(ImGuiMouseButton_Left))
      app.sel.task = op.task;
  } else if (f.hovered && ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
             !ImGui::IsMouseDragPastThreshold(ImGuiMouseButton_Left) && io.MousePos.x >= f.v.x_origin &&
             io.MousePos.y >= f.y_top) {
    app.sel = {};
  }
}

}  // namespace

void draw_timeline_panel(App& app) {
  TimelineState& tl = app.tl;
  tl.boxes_drawn = 0;
  tl.lanes_drawn = 0;
  tl.devices_drawn = 0;
  tl.reference_rows_drawn = 0;
  tl.diff_lanes_drawn = 0;
  tl.diff_tooltip.clear();
  if (!app.current) {
    ImGui::TextColored(kGrey, app.worker.busy() ? "Simulating..." : "Open a plan (path field, recent files, or drop a file on the window).");
    if (app.last_failed) ImGui::TextColored(kRed, "The plan has errors: see Diagnostics.");
    return;
  }
  const Snapshot& s = *app.current;
  toolbar(app, s);
  if (tl.show_critical) app.ensure_critical();
  Frame f = geometry(app, s);
  if (tl.collapsed.size() != s.timeline.by_device.size()) tl.collapsed.assign(s.timeline.by_device.size(), 0);
  float total_h = 0;
  for (size_t d = 0; d < s.timeline.by_device.size(); ++d) total_h += device_height(app, f, d);
  input(app, f, total_h);
  ImDrawList* dl = f.dl;
  dl->PushClipRect(f.p0, f.p1, true);
  dl->AddRectFilled(f.p0, f.p1, IM_COL32(24, 26, 30, 255));
  minimap(app, f);
  ruler(app, f);
  dl->PushClipRect(ImVec2(f.p0.x, f.y_top), f.p1, true);
  rows(app, f);
  flows(app, f);
  if (tl.range_t0 >= 0 && tl.range_t1 != tl.range_t0)
    dl->AddRectFilled(ImVec2(f.v.x(std::min(tl.range_t0, tl.range_t1)), f.y_top),
                      ImVec2(f.v.x(std::max(tl.range_t0, tl.range_t1)), f.p1.y), IM_COL32(120, 160, 255, 40));
  if (tl.cursor >= 0) {
    const float x = ImGui::GetIO().MousePos.x;
    dl->AddLine(ImVec2(x, f.y_ruler), ImVec2(x, f.p1.y), IM_COL32(255, 255, 255, 70));
  }
  dl->PopClipRect();
  dl->PopClipRect();
  hover_and_click(app, f);
}

}  // namespace stretto::gui
