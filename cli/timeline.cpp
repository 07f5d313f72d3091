#include "timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <tuple>

namespace stretto::cli {

using compiler::CompiledPlan;
using plan::Pass;

namespace {

// Cell categories, in the order a device row prefers them (compute first).
// Compute categories come before kSend (a device row prefers compute over communication).
enum Cat : uint8_t { kF, kB, kBI, kBW, kOpt, kSend, kColl, kCats };
constexpr std::array<char, kCats> kGlyph = {'F', 'B', 'b', 'W', 'O', '>', '='};
constexpr std::array<const char*, kCats> kColor = {"\033[42;30m", "\033[44;37m", "\033[46;30m",
                                                   "\033[45;37m", "\033[47;30m", "\033[43;30m",
                                                   "\033[41;37m"};
constexpr std::array<const char*, kCats> kMeaning = {
    "forward", "backward (input + weight gradient)", "backward, input gradient (BI)",
    "backward, weight gradient (BW)", "optimizer step", "send/recv (activations, gradients)",
    "collective (all-reduce, all-gather, reduce-scatter, all-to-all)"};

Cat category(const CompiledPlan& cp, const engine::Task& tk) {
  const compiler::Node& n = cp.dag.nodes[tk.node];
  if (tk.kind != engine::TaskKind::kCompute)
    return n.kind == compiler::NodeKind::kTransfer ? kSend : kColl;
  if (n.op < cp.model.ops.size() && cp.model.ops[n.op].kind == compiler::OpKind::kOptimizer)
    return kOpt;
  switch (n.tags.pass) {
    case Pass::kB: return kB;
    case Pass::kBI: return kBI;
    case Pass::kBW: return kBW;
    default: return kF;
  }
}

// The median span of a compute region pass (device, stage, microbatch, pass): the unit the
// drawing must resolve (0 without compute).
engine::SimTime median_pass(const CompiledPlan& cp, const sim::Result& r) {
  const engine::Program& p = r.program;
  std::map<std::tuple<uint32_t, int32_t, int32_t, Pass>,
           std::pair<engine::SimTime, engine::SimTime>>
      span;
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const engine::Task& tk = p.tasks[t];
    if (tk.kind != engine::TaskKind::kCompute || tk.part_count == 0) continue;
    const compiler::Node& n = cp.dag.nodes[tk.node];
    if (n.tags.pass == Pass::kNone) continue;
    const auto key = std::make_tuple(p.participants[tk.part_begin].device, n.tags.pp(), n.tags.mb(),
                                     n.tags.pass);
    auto [it, fresh] = span.try_emplace(key, r.timing[t].start, r.timing[t].end);
    if (!fresh) {
      it->second.first = std::min(it->second.first, r.timing[t].start);
      it->second.second = std::max(it->second.second, r.timing[t].end);
    }
  }
  std::vector<engine::SimTime> d;
  for (const auto& [k, v] : span) d.push_back(v.second - v.first);
  if (d.empty()) return 0;
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  return d[d.size() / 2];
}

}  // namespace

std::string timeline(const CompiledPlan& cp, const sim::Result& r, const TimelineOptions& opt) {
  const engine::Program& p = r.program;
  const double span = static_cast<double>(std::max<engine::SimTime>(1, r.step_time));
  const int band = std::max(10, opt.width);
  int W = band;
  const engine::SimTime pass = opt.scale_to_passes ? median_pass(cp, r) : 0;
  bool capped = false;
  if (pass > 0) {
    // Two columns per pass at least, so that alternating passes (1F1B's steady state) show.
    const double want = std::ceil(span / (static_cast<double>(pass) / 2));
    capped = want > kMaxColumns;
    W = static_cast<int>(std::clamp(want, static_cast<double>(band), static_cast<double>(kMaxColumns)));
  }
  auto wanted = [&](uint32_t d) {
    return opt.devices.empty() || (d < opt.devices.size() && opt.devices[d]);
  };
  // Row key: (device, stream) or (device, 0).
  std::map<std::pair<uint32_t, uint16_t>, std::vector<std::array<double, kCats>>> rows;
  size_t skipped_devices = 0;
  {
    std::map<uint32_t, bool> seen;
    for (const auto& pa : p.participants) {
      if (!wanted(pa.device)) continue;
      if (!seen.count(pa.device)) {
        if (seen.size() >= opt.max_rows) {
          seen[pa.device] = false;
          ++skipped_devices;
          continue;
        }
        seen[pa.device] = true;
      }
      if (!seen[pa.device]) continue;
      rows.try_emplace({pa.device, opt.per_stream ? pa.stream : uint16_t{0}},
                       std::vector<std::array<double, kCats>>(static_cast<size_t>(W)));
    }
  }
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const engine::Task& tk = p.tasks[t];
    if (tk.kind == engine::TaskKind::kBarrier) continue;
    const auto& tm = r.timing[t];
    if (tm.end <= tm.start) continue;
    const Cat c = category(cp, tk);
    for (uint32_t k = 0; k < tk.part_count; ++k) {
      const auto& pa = p.participants[tk.part_begin + k];
      auto it = rows.find({pa.device, opt.per_stream ? pa.stream : uint16_t{0}});
      if (it == rows.end()) continue;
      const double a = static_cast<double>(tm.start) / span * W;
      const double b = static_cast<double>(tm.end) / span * W;
      for (int col = std::max(0, static_cast<int>(a)); col < W && col < b; ++col) {
        const double lo = std::max(a, static_cast<double>(col));
        const double hi = std::min(b, static_cast<double>(col + 1));
        if (hi > lo) it->second[static_cast<size_t>(col)][c] += hi - lo;
      }
    }
  }
  const char* off = opt.color ? "\033[0m" : "";
  std::string o;
  o += fmt::format("timeline of one step: {:.3f} ms, {} columns of {:.3f} ms", span / 1e6, W,
                   span / 1e6 / W);
  if (pass > 0)
    o += fmt::format(" (half the median pass, {:.3f} ms{}){}", static_cast<double>(pass) / 1e6,
                     capped ? fmt::format("; capped at {} columns", kMaxColumns) : "",
                     W > band ? fmt::format(", in {} bands", (W + band - 1) / band) : "");
  o += "\n";
  const size_t label_w = opt.per_stream ? 18 : 10;
  std::vector<std::pair<std::string, std::vector<std::string>>> drawn;  // label, glyph per column
  for (const auto& [key, cells] : rows) {
    std::string label = opt.per_stream
                            ? fmt::format("dev {} {}", key.first, p.stream_names[key.second])
                            : fmt::format("device {}", key.first);
    if (label.size() > label_w) label.resize(label_w);
    std::vector<std::string> glyphs;
    glyphs.reserve(cells.size());
    for (const auto& cell : cells) {
      // Compute wins over communication in a device row; a cell less than a quarter busy is
      // idle.
      int best = -1;
      double busy = 0;
      for (int c = 0; c < kCats; ++c) busy += cell[static_cast<size_t>(c)];
      if (busy >= 0.25) {
        double comp = cell[kF] + cell[kB] + cell[kBI] + cell[kBW] + cell[kOpt];
        const int lo = comp >= 0.25 || opt.per_stream ? 0 : kSend;
        const int hi = comp >= 0.25 ? kSend : kCats;
        for (int c = lo; c < hi; ++c)
          if (best < 0 || cell[static_cast<size_t>(c)] > cell[static_cast<size_t>(best)]) best = c;
      }
      std::string g;
      if (best < 0) {
        g = opt.color ? "\033[2m\u00b7\033[0m" : ".";
      } else if (opt.color) {
        g = std::string(kColor[static_cast<size_t>(best)]) + kGlyph[static_cast<size_t>(best)] + off;
      } else {
        g = std::string(1, kGlyph[static_cast<size_t>(best)]);
      }
      glyphs.push_back(std::move(g));
    }
    drawn.emplace_back(std::move(label), std::move(glyphs));
  }
  for (int b0 = 0; b0 < W; b0 += band) {
    const int b1 = std::min(W, b0 + band);
    if (b0 > 0) o += "\n";
    for (const auto& [label, glyphs] : drawn) {
      o += fmt::format("{:>{}} |", label, label_w);
      for (int c = b0; c < b1; ++c) o += glyphs[static_cast<size_t>(c)];
      o += "|\n";
    }
    if (skipped_devices && b0 == 0)
      o += fmt::format("{:>{}}  ... and {} more devices (choose rows with --trace-devices)\n", "",
                       label_w, skipped_devices);
    // Time axis: a tick every 10 columns, labelled in ms.
    const int bw = b1 - b0;
    std::string axis(static_cast<size_t>(bw) + 1, '-');
    std::string labels(static_cast<size_t>(bw) + 12, ' ');
    for (int col = 0; col <= bw; col += 10) {
      axis[static_cast<size_t>(col)] = '+';
      const std::string l = fmt::format("{:.4g}", span / 1e6 * (b0 + col) / W);
      for (size_t k = 0; k < l.size() && static_cast<size_t>(col) + k < labels.size(); ++k)
        labels[static_cast<size_t>(col) + k] = l[k];
    }
    while (!labels.empty() && labels.back() == ' ') labels.pop_back();
    o += fmt::format("{:>{}} {}\n{:>{}} {}  ms\n", "", label_w, axis, "", label_w, labels);
  }
  o += "legend:";
  for (int c = 0; c < kCats; ++c) {
    o += "  ";
    if (opt.color) o += kColor[static_cast<size_t>(c)];
    o += kGlyph[static_cast<size_t>(c)];
    o += off;
    o += fmt::format(" {}", kMeaning[static_cast<size_t>(c)]);
    if (c % 3 == 2 && c + 1 < kCats) o += fmt::format("\n{:7}", "");
  }
  o += fmt::format("\n{:7}  {} idle (no op, or less than a quarter of the column busy)\n", "",
                   opt.color ? "\033[2m\u00b7\033[0m" : ".");
  return o;
}

}  // namespace stretto::cli
