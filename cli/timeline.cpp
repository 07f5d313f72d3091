#include "timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>

namespace stretto::cli {

namespace {

// Cell categories, in the order a device row prefers them (compute first).
enum Cat : uint8_t { kF, kB, kBI, kBW, kSend, kColl, kCats };
constexpr std::array<char, kCats> kGlyph = {'F', 'B', 'b', 'W', '>', '='};
constexpr std::array<const char*, kCats> kColor = {"\033[42;30m", "\033[44;37m", "\033[46;30m",
                                                   "\033[45;37m", "\033[43;30m", "\033[41;37m"};
constexpr std::array<const char*, kCats> kMeaning = {
    "forward", "backward (input + weight gradient)", "backward, input gradient (BI)",
    "backward, weight gradient (BW)", "send/recv (activations, gradients)",
    "collective (all-reduce, all-gather, reduce-scatter, all-to-all)"};

Cat category(const CompiledPlan& cp, const sim::Task& tk) {
  const Node& n = cp.dag.nodes[tk.node];
  if (tk.kind != sim::TaskKind::kCompute) return n.kind == NodeKind::kTransfer ? kSend : kColl;
  switch (n.tags.pass) {
    case Pass::kB: return kB;
    case Pass::kBI: return kBI;
    case Pass::kBW: return kBW;
    default: return kF;
  }
}

}  // namespace

std::string timeline(const CompiledPlan& cp, const sim::Result& r, const TimelineOptions& opt) {
  const sim::Program& p = r.program;
  const int W = std::max(10, opt.width);
  const double span = static_cast<double>(std::max<sim::SimTime>(1, r.step_time));
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
    const sim::Task& tk = p.tasks[t];
    if (tk.kind == sim::TaskKind::kBarrier) continue;
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
  o += fmt::format("timeline of one step: {:.3f} ms, {} columns of {:.3f} ms\n", span / 1e6, W,
                   span / 1e6 / W);
  const size_t label_w = opt.per_stream ? 18 : 10;
  for (const auto& [key, cells] : rows) {
    std::string label = opt.per_stream
                            ? fmt::format("dev {} {}", key.first, p.stream_names[key.second])
                            : fmt::format("device {}", key.first);
    if (label.size() > label_w) label.resize(label_w);
    o += fmt::format("{:>{}} |", label, label_w);
    for (const auto& cell : cells) {
      // Compute wins over communication in a device row; a cell less than a quarter busy is
      // idle.
      int best = -1;
      double busy = 0;
      for (int c = 0; c < kCats; ++c) busy += cell[static_cast<size_t>(c)];
      if (busy >= 0.25) {
        double comp = cell[kF] + cell[kB] + cell[kBI] + cell[kBW];
        const int lo = comp >= 0.25 || opt.per_stream ? 0 : kSend;
        const int hi = comp >= 0.25 ? kSend : kCats;
        for (int c = lo; c < hi; ++c)
          if (best < 0 || cell[static_cast<size_t>(c)] > cell[static_cast<size_t>(best)]) best = c;
      }
      if (best < 0) {
        o += opt.color ? "\033[2m\u00b7\033[0m" : ".";
      } else if (opt.color) {
        o += kColor[static_cast<size_t>(best)];
        o += kGlyph[static_cast<size_t>(best)];
        o += off;
      } else {
        o += kGlyph[static_cast<size_t>(best)];
      }
    }
    o += "|\n";
  }
  if (skipped_devices)
    o += fmt::format("{:>{}}  ... and {} more devices (choose rows with --trace-devices)\n", "",
                     label_w, skipped_devices);
  // Time axis: a tick every 10 columns, labelled in ms.
  std::string axis(static_cast<size_t>(W) + 1, '-');
  std::string labels(static_cast<size_t>(W) + 12, ' ');
  for (int col = 0; col <= W; col += 10) {
    axis[static_cast<size_t>(col)] = '+';
    const std::string l = fmt::format("{:.4g}", span / 1e6 * col / W);
    for (size_t k = 0; k < l.size() && static_cast<size_t>(col) + k < labels.size(); ++k)
      labels[static_cast<size_t>(col) + k] = l[k];
  }
  while (!labels.empty() && labels.back() == ' ') labels.pop_back();
  o += fmt::format("{:>{}} {}\n{:>{}} {}  ms\n", "", label_w, axis, "", label_w, labels);
  o += "legend:";
  for (int c = 0; c < kCats; ++c) {
    o += "  ";
    if (opt.color) o += kColor[static_cast<size_t>(c)];
    o += kGlyph[static_cast<size_t>(c)];
    o += off;
    o += fmt::format(" {}", kMeaning[static_cast<size_t>(c)]);
    if (c == 2) o += fmt::format("\n{:7}", "");
  }
  o += fmt::format("\n{:7}  {} idle (no op, or less than a quarter of the column busy)\n", "",
                   opt.color ? "\033[2m\u00b7\033[0m" : ".");
  return o;
}

}  // namespace stretto::cli
