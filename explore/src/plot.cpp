// sweep --plot: step time against peak memory as SVG (plot.h).
#include "stretto/explore/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "stretto/explore/sweep.h"

namespace stretto::explore {

using plan::Json;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Chart geometry (px): the plot area and the legend column right of it.
constexpr double kW = 900, kH = 560, kLeft = 72, kRight = 690, kTop = 104, kBottom = 500;
// Matplotlib's "tab10" palette: ten colours told apart by most readers.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string xml(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string value_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// A tick step of 1, 2 or 5 x 10^k covering `range` in about `n` steps.
double nice_step(double range, int n) {
  const double raw = std::max(range, 1e-9) / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (p * m >= raw) return p * m;
  return p * 10;
}

std::string tick_text(double v, double step) {
  const int dec = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return fmt::format("{:.{}f}", v, dec);
}

bool value_less(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() < b.get<double>();
  return a.dump() < b.dump();
}

// The parameter the dots are coloured by: `family` when it varies, else the first swept
// parameter (by name) with 2 to 10 values; "" when none.
std::string color_key(const std::vector<PointResult>& rows, std::vector<Json>& values) {
  std::map<std::string, std::vector<Json>> seen;
  for (const auto& r : rows)
    if (r.simulated())
      for (const auto& [k, v] : r.params.items()) {
        auto& vs = seen[k];
        if (std::none_of(vs.begin(), vs.end(), [&](const Json& x) { return x == v; })) vs.push_back(v);
      }
  auto pick = [&](const std::string& k) {
    values = seen[k];
    std::sort(values.begin(), values.end(), value_less);
    return k;
  };
  if (auto it = seen.find("family"); it != seen.end() && it->second.size() >= 2 && it->second.size() <= 10)
    return pick("family");
  for (const auto& [k, vs] : seen)
    if (vs.size() >= 2 && vs.size() <= 10) return pick(k);
  values.clear();
  return "";
}

}  // namespace

std::string sweep_svg(const std::vector<PointResult>& rows, const std::string& title, PlotSummary* summary) {
  PlotSummary sum;
  double max_mem = 0, max_step = 0, min_step = 0;
  std::set<double> caps;
  for (const auto& r : rows) {
    if (!r.simulated()) {
      ++sum.not_drawn;
      continue;
    }
    (r.feasible() ? sum.feasible : sum.over_capacity)++;
    max_mem = std::max(max_mem, static_cast<double>(r.peak_memory_bytes) / kGiB);
    max_step = std::max(max_step, r.step_time_ms);
    if (r.step_time_ms > 0) min_step = min_step > 0 ? std::min(min_step, r.step_time_ms) : r.step_time_ms;
    if (r.memory_cap_GiB > 0) caps.insert(r.memory_cap_GiB);
  }
  // One cap for every point: drawn when it is within reach of the points (x axis up to 1.5x
  // the largest peak), else named only.
  const double cap = caps.size() == 1 ? *caps.begin() : 0;
  const bool draw_cap = cap > 0 && cap <= std::max(max_mem, 1e-9) * 1.5;
  const double x_step = nice_step(std::max(draw_cap ? cap : 0.0, max_mem), 6);
  const double x_max = x_step * std::ceil(std::max(draw_cap ? cap : 0.0, max_mem) * 1.04 / x_step + 1e-9);
  // Step times spread over more than 4x: a log scale from the 1-2-5 value below the fastest
  // to the one above the slowest, so that the fast points (the interesting ones) spread out;
  // else linear from 0.
  const bool log_y = min_step > 0 && max_step / min_step > 4;
  std::vector<double> y_ticks;
  double y_lo = 0, y_hi = 0;
  if (log_y) {
    std::vector<double> v125;  // 1, 2, 5 x 10^k from at most the fastest to past the slowest
    for (double p = std::pow(10.0, std::floor(std::log10(min_step))); p <= max_step * 10; p *= 10)
      for (double m : {1.0, 2.0, 5.0}) v125.push_back(p * m);
    y_lo = v125.front();
    for (double v : v125)
      if (v <= min_step) y_lo = v;
    y_hi = v125.back();
    for (auto it = v125.rbegin(); it != v125.rend(); ++it)
      if (*it >= max_step) y_hi = *it;
    for (double v : v125)
      if (v >= y_lo && v <= y_hi) y_ticks.push_back(v);
  } else {
    const double y_step = nice_step(max_step, 6);
    y_hi = y_step * std::ceil(max_step * 1.04 / y_step + 1e-9);
    for (double v = 0; v <= y_hi + y_step * 1e-6; v += y_step) y_ticks.push_back(v);
  }
  auto X = [&](double gib) { return kLeft + (kRight - kLeft) * (x_max > 0 ? gib / x_max : 0); };
  auto Y = [&](double ms) {
    if (log_y) return kBottom - (kBottom - kTop) * std::log(ms / y_lo) / std::log(y_hi / y_lo);
    return kBottom - (kBottom - kTop) * (y_hi > 0 ? ms / y_hi : 0);
  };

  const std::vector<size_t> front = pareto_front(rows);
  sum.front = front.size();
  std::vector<Json> values;
  sum.color_by = color_key(rows, values);
  auto color_of = [&](const PointResult& r) -> std::string {
    if (sum.color_by.empty() || !r.params.contains(sum.color_by)) return kPalette[0];
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] == r.params[sum.color_by]) return kPalette[i % std::size(kPalette)];
    return kPalette[7];
  };

  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      kW, kH);
  // The title on up to two lines (cut at a space), the counts under it.
  std::vector<std::string> head;
  std::string rest = title;
  while (!rest.empty() && head.size() < 2) {
    size_t cut = rest.size();
    if (cut > 95) {
      cut = rest.rfind(' ', 95);
      if (cut == std::string::npos || head.size() == 1) cut = std::min<size_t>(rest.size(), 95);
    }
    head.push_back(rest.substr(0, cut));
    rest = cut < rest.size() ? rest.substr(cut + (rest[cut] == ' ')) : "";
  }
  if (!rest.empty()) head.back() += "...";
  double ty = 22;
  for (const std::string& line : head) {
    o += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", kLeft - 50, ty, xml(line));
    ty += 18;
  }
  o += fmt::format(
      "<text x=\"{}\" y=\"{}\" fill=\"#444\">{} simulated points: {} within the memory cap (filled), {} over it "
      "(hollow); {} invalid, not drawn.</text>\n",
      kLeft - 50, ty + 2, sum.feasible + sum.over_capacity, sum.feasible, sum.over_capacity, sum.not_drawn);
  o += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#444\">The line joins the Pareto front ({} of the points).{}</text>\n",
                   kLeft - 50, ty + 18, front.size(),
                   cap > 0 && !draw_cap ? fmt::format(" Memory cap {:g} GiB, right of the chart.", cap) : std::string());
  // Grid, ticks and axis titles.
  for (double v = 0; v <= x_max + x_step * 1e-6; v += x_step)
    o += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        X(v), kTop, kBottom, kBottom + 16, tick_text(v, x_step));
  for (double v : y_ticks)
    o += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#e4e4e4\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, Y(v), kRight, kLeft - 6, Y(v) + 4, fmt::format("{:g}", v));
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", kLeft, kTop,
                   kRight - kLeft, kBottom - kTop);
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">peak memory per device (GiB)</text>\n",
                   (kLeft + kRight) / 2, kBottom + 36);
  o += fmt::format(
      "<text x=\"18\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0})\">step time (ms{1})</text>\n",
      (kTop + kBottom) / 2, log_y ? ", log scale" : "");
  if (draw_cap)
    o += fmt::format(
        "<line class=\"cap\" x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#d62728\" "
        "stroke-dasharray=\"6 4\"/><text x=\"{3:.1f}\" y=\"{4}\" fill=\"#d62728\" text-anchor=\"end\">memory cap "
        "{5:g} GiB</text>\n",
        X(cap), kTop, kBottom, X(cap) - 4, kTop + 14, cap);
  // Dots: over the cap first (hollow), then the feasible ones, the front last and on top.
  std::vector<char> on_front(rows.size(), 0);
  for (size_t i : front) on_front[i] = 1;
  auto dot = [&](const PointResult& r, bool is_front) {
    std::string params;
    for (const auto& [k, v] : r.params.items())
      params += fmt::format("{}{}={}", params.empty() ? "" : " ", k, value_text(v));
    const double gib = static_cast<double>(r.peak_memory_bytes) / kGiB;
    const std::string c = color_of(r);
    o += fmt::format(
        "<circle class=\"{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\" stroke=\"{}\" stroke-width=\"{}\" "
        "data-hash=\"{}\" data-step-ms=\"{:.3f}\" data-peak-gib=\"{:.3f}\"><title>{}: {:.3f} ms, {:.2f} GiB{}; "
        "{}</title></circle>\n",
        r.feasible() ? (is_front ? "ok front" : "ok") : "over", X(gib), Y(r.step_time_ms), is_front ? 5 : 3.5,
        r.feasible() ? c : "none", is_front ? "#111" : c, is_front ? 1.5 : 1.2, xml(r.hash), r.step_time_ms, gib,
        xml(r.hash), r.step_time_ms, gib, r.feasible() ? "" : " (over the memory cap)", xml(params));
  };
  for (const auto& r : rows)
    if (r.status == "over_capacity") dot(r, false);
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].feasible() && !on_front[i]) dot(rows[i], false);
  if (!front.empty()) {
    std::string pts;
    for (size_t i : front)
      pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ",
                         X(static_cast<double>(rows[i].peak_memory_bytes) / kGiB), Y(rows[i].step_time_ms));
    o += fmt::format("<polyline class=\"front\" points=\"{}\" fill=\"none\" stroke=\"#111\" stroke-width=\"1.2\"/>\n",
                     pts);
    for (size_t i : front) dot(rows[i], true);
    const PointResult& best = rows[front[0]];
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-weight=\"bold\">fastest: {:.1f} ms</text>\n",
                     X(static_cast<double>(best.peak_memory_bytes) / kGiB) + 8, Y(best.step_time_ms) - 8,
                     best.step_time_ms);
  }
  // Legend: the colour key's values.
  double ly = kTop + 4;
  o += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n", kRight + 20, ly + 8,
                   sum.color_by.empty() ? "points" : xml(sum.color_by));
  ly += 24;
  if (sum.color_by.empty()) {
    o += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">simulated</text>\n",
                     kRight + 26, ly - 4, kPalette[0], kRight + 36, ly);
    ly += 20;
  }
  for (size_t i = 0; i < values.size(); ++i, ly += 20)
    o += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n", kRight + 26,
                     ly - 4, kPalette[i % std::size(kPalette)], kRight + 36, ly, xml(value_text(values[i])));
  ly += 10;
  o += fmt::format(
      "<circle cx=\"{0}\" cy=\"{1}\" r=\"3.5\" fill=\"none\" stroke=\"#555\"/><text x=\"{2}\" y=\"{3}\">over the "
      "memory cap</text>\n"
      "<line x1=\"{4}\" y1=\"{5}\" x2=\"{6}\" y2=\"{5}\" stroke=\"#111\"/><text x=\"{2}\" y=\"{7}\">Pareto "
      "front</text>\n",
      kRight + 26, ly - 4, kRight + 36, ly, kRight + 18, ly + 16, kRight + 32, ly + 20);
  o += "</svg>\n";
  if (summary) *summary = sum;
  return o;
}

}  // namespace stretto::explore
