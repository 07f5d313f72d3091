// Memory and Numbers panels (the timeline: panels_timeline.cpp).
#include <fmt/format.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>

#include "stretto/gui/app.h"
#include "view_common.h"

namespace stretto::gui {

using namespace view;

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

// ------------------------------------------------------------------------------- Memory

void draw_memory_panel(App& app) {
  app.memory_tooltip = {};
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
  // Capacity is judged on the device total (reserved + CUDA context + NCCL buffers), so it is shown.
  // Short enough for one line at the default layout ("device total X, of C" clipped C there).
  ImGui::PushStyleColor(ImGuiCol_Text, dm.over_capacity ? kRed : kGrey);
  ImGui::TextUnformatted(fmt::format("peak {} at {}, reserved {}, total {} of {}{}",
                                     format_bytes(static_cast<double>(dm.peak_memory)),
                                     format_time(static_cast<double>(dm.peak_time)),
                                     format_bytes(static_cast<double>(dm.peak_reserved)),
                                     format_bytes(static_cast<double>(dm.peak_device())),
                                     format_bytes(capacity), dm.over_capacity ? "  OVER CAPACITY" : "")
                             .c_str());
  ImGui::PopStyleColor();
  app.hook("memory peak line");
  const App::MemoryCurve& now_c = app.memory_curve_of(app.memory_device);
  const App::MemoryCurve& base_c = app.baseline_memory_curve_of(app.memory_device);
  const auto& curve = now_c.samples;
  const auto& base_curve = base_c.samples;
  const bool with_base = !base_curve.empty();
  // Legend: items wrap to the next line rather than run past the panel's edge.
  static constexpr OpClass kCatColor[] = {OpClass::kF, OpClass::kBW, OpClass::kCompute, OpClass::kB,
                                          OpClass::kSendRecv, OpClass::kReduceScatter, OpClass::kAllGather};
  const float sw = std::round(ImGui::GetTextLineHeight() * 0.7f);
  auto legend_item = [&](bool first, const std::string& name, ImU32 color) {
    const float w = sw + 3 + ImGui::CalcTextSize(name.c_str()).x;
    if (!first) {
      ImGui::SameLine();
      if (ImGui::GetContentRegionAvail().x < w) ImGui::NewLine();
    }
    ImGui::ColorButton(name.c_str(), ImGui::ColorConvertU32ToFloat4(color), ImGuiColorEditFlags_NoTooltip, ImVec2(sw, sw));
    ImGui::SameLine(0, 3);
    ImGui::TextUnformatted(name.c_str());
  };
  for (size_t c = 0; c < sim::kMemCategories; ++c)
    legend_item(c == 0, std::string(sim::memory_category_name(c)), class_color(kCatColor[c]));
  if (with_base) legend_item(false, "baseline total (line over now)", kBaselineMemory);
  app.hook("memory legend");
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImVec2 avail = ImGui::GetContentRegionAvail();
  avail.x = std::max(avail.x, 50.0f);
  avail.y = std::max(avail.y, with_base ? 140.0f : 70.0f);
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
  const float axis_w = 60, axis_h = ImGui::GetTextLineHeight() + 4;  // bytes left, time below
  const float x0 = p0.x + axis_w, w = avail.x - axis_w;
  auto X = [&](double t) { return x0 + static_cast<float>((t - t0) / (t1 - t0)) * w; };
  auto peak_bytes = [](const App::MemoryCurve& c) {
    return c.samples.empty() ? 0.0 : static_cast<double>(c.samples[c.peak].total());
  };
  // Each run's peak of reserved bytes (the CUDA caching allocator's segments; sim::DeviceMetrics),
  // for the device shown; 0 without a baseline.
  const auto reserved_of = [&](const std::shared_ptr<const Snapshot>& s) {
    const auto d = static_cast<size_t>(app.memory_device);
    return s && d < s->result.devices.size() ? static_cast<double>(s->result.devices[d].peak_reserved) : 0.0;
  };
  const double reserved_now = reserved_of(app.current), reserved_base = with_base ? reserved_of(app.baseline) : 0.0;
  // One y scale for both runs, so that their heights compare.
  const double peak = std::max({peak_bytes(now_c), peak_bytes(base_c), reserved_now, reserved_base});
  double ymax = app.memory_to_peak ? peak * 1.1 : std::max(capacity, peak) * 1.05;
  if (ymax <= 0) ymax = 1;
  // With a baseline, the baseline's stack is drawn under the current one (same axes).
  const float band_h = with_base ? std::floor(avail.y / 2) : avail.y;
  app.memory_drawn = {};
  app.memory_drawn.device = app.memory_device;
  app.memory_drawn.baseline = with_base;
  // Draws one run's stack in rows [top, top + band_h): categories, grid, capacity, peak and
  // the time axis; run 0 is the current result, 1 the baseline.
  auto plot = [&](const App::MemoryCurve& mc, int run, float top, const char* name, double run_end,
                  double reserved) {
    const auto& cv = mc.samples;
    // A title row (the run and its peak), the plot, the time axis.
    const float title_h = ImGui::GetTextLineHeight() + 2;
    const float plot_bottom = top + band_h - axis_h, plot_h = std::max(band_h - axis_h - title_h, 16.0f);
    auto Y = [plot_bottom, plot_h, ymax](double b) {
      return plot_bottom - 4 - static_cast<float>(b / ymax) * (plot_h - 8);
    };
    auto& drawn = app.memory_drawn.categories[static_cast<size_t>(run)];
    // Stacked categories: one column per pixel, at the largest total within the column (so a
    // short peak is never lost).
    if (!cv.empty()) {
      size_t i = static_cast<size_t>(std::upper_bound(cv.begin(), cv.end(), t0,
                                                      [](double t, const sim::CategorySample& c) {
                                                        return t < static_cast<double>(c.t);
                                                      }) -
                                     cv.begin());
      if (i > 0) --i;
      for (float x = std::max(x0, X(0)); x < p1.x && x <= X(run_end); x += 1.0f) {
        const double ct1 = t0 + static_cast<double>(x + 1 - x0) / w * (t1 - t0);
        size_t best = i;
        for (size_t k = i; k < cv.size() && static_cast<double>(cv[k].t) < ct1; ++k) {
          if (cv[k].total() > cv[best].total()) best = k;
          i = k;
        }
        float yb = Y(0);
        for (size_t c = 0; c < sim::kMemCategories; ++c) {
          const float yt = Y(static_cast<double>(cv[best].bytes[c]) + (Y(0) - yb) / (plot_h - 8) * ymax);
          if (yt < yb) {
            dl->AddRectFilled(ImVec2(x, yt), ImVec2(x + 1, yb), class_color(kCatColor[c]));
            drawn[c] = true;
          }
          yb = std::min(yb, yt);
        }
      }
    }
    if (capacity <= ymax) {
      dl->AddLine(ImVec2(x0, Y(capacity)), ImVec2(p1.x, Y(capacity)), IM_COL32(255, 80, 80, 255), 1.5f);
      dl->AddText(ImVec2(p1.x - ImGui::CalcTextSize("capacity").x - 4, Y(capacity) - ImGui::GetTextLineHeight()),
                  IM_COL32(255, 120, 120, 255), "capacity");
    } else if (run == 0) {
      const std::string above = "capacity " + format_bytes(capacity) + " (above)";
      dl->AddText(ImVec2(p1.x - ImGui::CalcTextSize(above.c_str()).x - 4, top + 2), IM_COL32(255, 120, 120, 255),
                  above.c_str());
    }
    if (reserved > 0 && reserved <= ymax) {  // the peak of reserved bytes: a line over the stack
      const float yr = std::round(Y(reserved));  // on whole pixels: two rows in its own colour
      dl->AddLine(ImVec2(x0, yr), ImVec2(p1.x, yr), kReservedMemory, 2.0f);
      const char* label = "reserved peak";
      dl->AddText(ImVec2(p1.x - ImGui::CalcTextSize(label).x - 4, yr + 1), kReservedMemory, label);
      app.memory_drawn.reserved_line[static_cast<size_t>(run)] = true;
    }
    for (int k = 0; k <= 4; k += with_base ? 2 : 1) {
      const double b = ymax * k / 4;
      dl->AddText(ImVec2(p0.x + 2, std::max(top, Y(b) - 7)), IM_COL32(170, 170, 170, 255), format_bytes(b).c_str());
      dl->AddLine(ImVec2(x0, Y(b)), ImVec2(p1.x, Y(b)), IM_COL32(60, 60, 70, 255));
    }
    if (!cv.empty()) {  // the peak, marked and labelled (GiB, as the tables)
      const sim::CategorySample& pk = cv[mc.peak];
      const float px = X(static_cast<double>(pk.t)), py = Y(static_cast<double>(pk.total()));
      dl->AddCircleFilled(ImVec2(px, py), 4, IM_COL32(255, 255, 255, 255));
      dl->AddText(ImVec2(px + 6, py - ImGui::GetTextLineHeight()), IM_COL32(255, 255, 255, 255), "peak");
      // Titled by its run; alone, the line above the plot gives the peak already.
      const std::string title =
          with_base ? fmt::format("{}: peak {} at {}, reserved {}", name, format_bytes(static_cast<double>(pk.total())),
                                  format_time(static_cast<double>(pk.t)), format_bytes(reserved))
                    : std::string();
      const ImVec2 tp(x0 + 4, top + 2), ts = ImGui::CalcTextSize(title.c_str());
      if (!title.empty()) dl->AddRectFilled(tp, ImVec2(tp.x + ts.x + 4, tp.y + ts.y), IM_COL32(24, 26, 30, 200));
      dl->AddText(ImVec2(tp.x + 2, tp.y), run == 0 ? IM_COL32(255, 255, 255, 255) : kBaselineMemory, title.c_str());
      app.hooks[run == 0 ? "memory now title" : "memory baseline title"] = {tp.x, tp.y, tp.x + ts.x + 4, tp.y + ts.y};
    }
    {  // time axis, in the ruler's units
      const double step = nice_step(90.0 * static_cast<double>(app.font_scale) * (t1 - t0) / static_cast<double>(w));
      dl->AddLine(ImVec2(x0, plot_bottom), ImVec2(p1.x, plot_bottom), IM_COL32(110, 110, 120, 255));
      bool first = true;
      for (double t = std::max(0.0, std::ceil(t0 / step) * step); t <= t1; t += step) {
        const float x = X(t);
        dl->AddLine(ImVec2(x, plot_bottom), ImVec2(x, plot_bottom + 4), IM_COL32(170, 170, 170, 255));
        const std::string lab = format_tick(t, step);
        if (x + 2 + ImGui::CalcTextSize(lab.c_str()).x > p1.x) break;  // the edge would cut it
        dl->AddText(ImVec2(x + 2, plot_bottom + 2), IM_COL32(170, 170, 170, 255), lab.c_str());
        if (first) {
          const ImVec2 sz = ImGui::CalcTextSize(lab.c_str());
          app.hooks[run == 0 ? "memory axis" : "memory baseline axis"] = {x + 2, plot_bottom + 2, x + 2 + sz.x,
                                                                          plot_bottom + 2 + sz.y};
          first = false;
        }
      }
    }
    return Y;
  };
  const auto Y = plot(now_c, 0, p0.y, "now", step_end, reserved_now);
  if (with_base) {
    plot(base_c, 1, p0.y + band_h, "baseline", static_cast<double>(std::max<SimTime>(app.baseline->result.step_time, 1)),
         reserved_base);
    dl->AddLine(ImVec2(p0.x, p0.y + band_h), ImVec2(p1.x, p0.y + band_h), IM_COL32(110, 110, 120, 255));
    // The baseline's total, also as a line over the current stack.
    std::vector<ImVec2> pts;
    size_t i = 0;
    for (float x = std::max(x0, X(0)); x < p1.x; x += 1.0f) {
      const double ct0 = t0 + static_cast<double>(x - x0) / w * (t1 - t0);
      const double ct1 = t0 + static_cast<double>(x + 1 - x0) / w * (t1 - t0);
      while (i + 1 < base_curve.size() && static_cast<double>(base_curve[i + 1].t) <= ct0) ++i;
      if (static_cast<double>(base_curve[i].t) > ct1) continue;
      int64_t top = base_curve[i].total();
      for (size_t k = i + 1; k < base_curve.size() && static_cast<double>(base_curve[k].t) < ct1; ++k)
        top = std::max(top, base_curve[k].total());
      pts.emplace_back(x, Y(static_cast<double>(top)));
    }
    if (pts.size() > 1) dl->AddPolyline(pts.data(), static_cast<int>(pts.size()), kBaselineMemory, 0, 2.0f);
  }
  double cursor = app.tl.cursor;
  if (ImGui::IsItemHovered()) cursor = t0 + static_cast<double>(ImGui::GetIO().MousePos.x - x0) / w * (t1 - t0);
  if (cursor >= 0) {
    dl->AddLine(ImVec2(X(cursor), p0.y), ImVec2(X(cursor), p1.y), IM_COL32(255, 255, 255, 120));
    if (ImGui::IsItemHovered() && !curve.empty()) {
      auto at = [&](const std::vector<sim::CategorySample>& cv) -> const sim::CategorySample& {
        auto it = std::upper_bound(cv.begin(), cv.end(), cursor, [](double t, const sim::CategorySample& c) {
          return t < static_cast<double>(c.t);
        });
        return it == cv.begin() ? *it : *(it - 1);
      };
      const auto& c = at(curve);
      App::MemoryTooltip& tip = app.memory_tooltip;
      tip.shown = true;
      tip.baseline = with_base;
      tip.device = app.memory_device;
      tip.t = cursor;
      tip.bytes[0] = c.bytes;
      if (with_base) tip.bytes[1] = at(base_curve).bytes;
      auto bytes = [](int64_t b) { return format_bytes(static_cast<double>(b)); };
      tip.title = fmt::format("device {} at {}", app.memory_device, format_time(cursor));
      auto total = [](const std::array<int64_t, sim::kMemCategories>& b) {
        int64_t sum = 0;
        for (int64_t x : b) sum += x;
        return sum;
      };
      tip.rows.push_back({"total", bytes(total(tip.bytes[0])), with_base ? bytes(total(tip.bytes[1])) : ""});
      for (size_t k = 0; k < sim::kMemCategories; ++k)
        tip.rows.push_back({std::string(sim::memory_category_name(k)), bytes(tip.bytes[0][k]),
                            with_base ? bytes(tip.bytes[1][k]) : ""});
      // A table, so that the bytes line up in columns (the font is proportional).
      ImGui::BeginTooltip();
      ImGui::TextUnformatted(tip.title.c_str());
      const int cols = with_base ? 3 : 2;
      if (ImGui::BeginTable("memory tooltip", cols, ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_BordersInnerV)) {
        ImGui::TableSetupColumn("");
        ImGui::TableSetupColumn("now");
        if (with_base) ImGui::TableSetupColumn("baseline");
        ImGui::TableHeadersRow();
        for (const auto& row : tip.rows) {
          ImGui::TableNextRow();
          for (int c = 0; c < cols; ++c) {
            ImGui::TableNextColumn();
            const std::string& cell = row[static_cast<size_t>(c)];
            if (c > 0)  // bytes right-aligned (a column narrower than its text grows to fit it)
              ImGui::SetCursorPosX(ImGui::GetCursorPosX() +
                                   std::max(0.0f, ImGui::GetColumnWidth() - ImGui::CalcTextSize(cell.c_str()).x));
            ImGui::TextUnformatted(cell.c_str());
          }
        }
        ImGui::EndTable();
      }
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

void summary_tab(App& app) {
  const std::vector<MetricRow> rows = metric_rows(*app.current, app.baseline.get());
  // The metric column is as wide as its longest name (it clipped "exposed comm per device" at
  // the default layout); the three value columns share the rest.
  float name_w = ImGui::CalcTextSize("metric").x;
  for (const MetricRow& m : rows) name_w = std::max(name_w, ImGui::CalcTextSize(m.metric.c_str()).x);
  if (ImGui::BeginTable("summary", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableSetupColumn("metric", ImGuiTableColumnFlags_WidthFixed, name_w);
    ImGui::TableSetupColumn("now", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableSetupColumn("baseline", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableSetupColumn("delta", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableHeadersRow();
    for (const MetricRow& m : rows) {
      ImGui::TableNextRow();
      for (const std::string* t : {&m.metric, &m.now, &m.baseline, &m.delta}) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(t->c_str());
      }
    }
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
  // Columns fit their header and contents (a header is never cut); the table scrolls
  // sideways when the panel is narrower.
  const ImGuiTableFlags f = ImGuiTableFlags_Sortable | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                            ImGuiTableFlags_ScrollX | ImGuiTableFlags_SizingFixedFit |
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
    rows = compare_rows(logical_spans(*app.current), app.measured ? app.measured->spans : logical_spans(*app.baseline));
  }
  ImGui::TextWrapped("Logical ops aligned by (PP, MB, PASS), largest change of end time first, then new and gone ones (%s):",
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
        ImGui::Text("PP%d MB%d %s", r.pp, r.mb,
                    std::string(plan::pass_name(static_cast<plan::Pass>(r.pass))).c_str());
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

// The search's matches, by start time: click one to select it and show it.
void search_tab(App& app) {
  app.update_search();
  const SearchState& sr = app.search;
  if (!sr.active() && sr.pending()) {
    ImGui::TextColored(kYellow, "%s", sr.worker.indexing() ? "indexing the op names..." : "searching...");
    return;
  }
  if (!sr.active()) {
    ImGui::TextColored(kGrey, "Type in the timeline's search field: words of an op's name and tags "
                              "(PP3 MB5, layer19.mlp, all-gather); every word must match.");
    return;
  }
  ImGui::Text("%zu ops match '%s'", sr.tasks.size(), sr.for_query.c_str());
  const Snapshot& s = *app.current;
  const auto& cp = s.session->compiled();
  if (ImGui::BeginTable("matches", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("op", ImGuiTableColumnFlags_WidthStretch, 5.0f);
    for (const char* c : {"device", "start", "duration"}) ImGui::TableSetupColumn(c, ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableHeadersRow();
    ImGuiListClipper clip;
    clip.Begin(static_cast<int>(sr.tasks.size()));
    while (clip.Step())
      for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
        const uint32_t t = sr.tasks[static_cast<size_t>(i)];
        const auto& tm = s.result.timing[t];
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::PushID(i);
        const std::string name = cp.dag.node_name(s.result.node_of(t), cp.model);
        if (ImGui::Selectable(name.c_str(), app.sel.task == t, ImGuiSelectableFlags_SpanAllColumns)) {
          app.sel.task = t;
          const double len = static_cast<double>(std::max<SimTime>(tm.end - tm.start, 1));
          app.zoom(static_cast<double>(tm.start) - len * 4, static_cast<double>(tm.end) + len * 4);
        }
        if (i < 8) app.hook(fmt::format("match {}", i));
        ImGui::PopID();
        ImGui::TableNextColumn();
        ImGui::Text("%d", s.result.device_of(t));
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(static_cast<double>(tm.start)).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_time(static_cast<double>(tm.end - tm.start)).c_str());
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
  // Tabs keep their whole labels; a narrow panel scrolls them.
  if (ImGui::BeginTabBar("numbers", ImGuiTabBarFlags_FittingPolicyScroll)) {
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
    const std::string search_label =
        app.search.active() ? fmt::format("Search ({})###search", app.search.tasks.size()) : std::string("Search###search");
    tab(search_label.c_str(), "tab search", [&] { search_tab(app); });
    tab("Critical path", "tab critical", [&] { critical_tab(app); });
    ImGui::EndTabBar();
  }
}

}  // namespace stretto::gui
