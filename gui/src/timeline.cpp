// Timeline lanes and level-of-detail layout (see timeline.h).
#include "stretto/gui/timeline.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <tuple>


namespace stretto::gui {

using compiler::CommKind;
using compiler::CompiledPlan;
using plan::Pass;

std::string_view op_class_name(OpClass c) {
  static constexpr std::string_view kN[] = {"F",         "B",         "BI",           "BW",
                                            "compute",   "send/recv", "all-reduce",   "reduce-scatter",
                                            "all-gather", "all-to-all", "barrier"};
  const auto i = static_cast<size_t>(c);
  return i < std::size(kN) ? kN[i] : "?";
}

OpClass op_class(const CompiledPlan& cp, const sim::Result& r, uint32_t task) {
  const engine::Task& t = r.program.tasks[task];
  if (t.kind == engine::TaskKind::kBarrier) return OpClass::kBarrier;
  const uint32_t n = t.node;
  if (n >= cp.dag.nodes.size())
    return t.kind == engine::TaskKind::kComm ? OpClass::kSendRecv : OpClass::kCompute;
  const compiler::Node& node = cp.dag.nodes[n];
  if (t.kind == engine::TaskKind::kCompute) {
    switch (node.tags.pass) {
      case Pass::kF:
        return OpClass::kF;
      case Pass::kB:
        return OpClass::kB;
      case Pass::kBI:
        return OpClass::kBI;
      case Pass::kBW:
        return OpClass::kBW;
      case Pass::kNone:
        return OpClass::kCompute;
    }
    return OpClass::kCompute;
  }
  switch (node.comm) {
    case CommKind::kAllReduce:
      return OpClass::kAllReduce;
    case CommKind::kReduceScatter:
      return OpClass::kReduceScatter;
    case CommKind::kAllGather:
      return OpClass::kAllGather;
    case CommKind::kAllToAll:
      return OpClass::kAllToAll;
    default:
      return OpClass::kSendRecv;
  }
}

namespace {

// The enclosing slices of a lane: runs of consecutive ops of one (stage, microbatch, pass),
// and of one layer within such a run. A level that would only repeat the ops (one op per
// slice) is left empty.
void nest_lane(Lane& l, const sim::Result& r, const CompiledPlan& cp) {
  using Key = std::tuple<int32_t, int32_t, int, int32_t>;  // PP, MB, pass, layer
  const auto& nodes = cp.dag.nodes;
  std::vector<Span> passes, layers;
  Key open_pass{-2, -2, -2, -2}, open_layer{-2, -2, -2, -2};
  for (uint32_t i = 0; i < l.ops.size(); ++i) {
    const Op& o = l.ops[i];
    const uint32_t n = r.node_of(o.task);
    const bool nested = n < nodes.size() && nodes[n].kind == compiler::NodeKind::kCompute &&
                        nodes[n].tags.pass != Pass::kNone;
    if (!nested) {
      open_pass = open_layer = Key{-2, -2, -2, -2};
      continue;
    }
    const plan::Tags& tg = nodes[n].tags;
    const Key pk{tg.pp(), tg.mb(), static_cast<int>(tg.pass), -1};
    if (pk == open_pass) {
      passes.back().end = o.end;
      passes.back().last = i;
    } else {
      passes.push_back({o.start, o.end, i, i, o.cls});
      open_pass = pk;
      open_layer = Key{-2, -2, -2, -2};
    }
    if (tg.layer() == plan::kAbsent) {
      open_layer = Key{-2, -2, -2, -2};
      continue;
    }
    const Key lk{tg.pp(), tg.mb(), static_cast<int>(tg.pass), tg.layer()};
    if (lk == open_layer) {
      layers.back().end = o.end;
      layers.back().last = i;
    } else {
      layers.push_back({o.start, o.end, i, i, o.cls});
      open_layer = lk;
    }
  }
  auto repeats = [](const std::vector<Span>& a, size_t below) { return a.empty() || a.size() == below; };
  if (!repeats(layers, l.ops.size()) && layers.size() != passes.size()) l.layers = std::move(layers);
  if (!repeats(passes, l.layers.empty() ? l.ops.size() : l.layers.size())) l.passes = std::move(passes);
}

// Each task's first placement (lane, index) and the timeline's end, from its sorted lanes.
void locate_ops(Timeline& tl) {
  for (uint32_t li = 0; li < tl.lanes.size(); ++li) {
    const Lane& l = tl.lanes[li];
    for (uint32_t i = 0; i < l.ops.size(); ++i) {
      auto& w = tl.where[l.ops[i].task];
      if (w.first == UINT32_MAX) w = {li, i};
      tl.end = std::max(tl.end, l.ops[i].end);
    }
  }
}

}  // namespace

Timeline build_timeline(const sim::Result& r, const CompiledPlan& cp) {
  Timeline tl;
  const engine::Program& p = r.program;
  tl.where.assign(p.tasks.size(), {UINT32_MAX, 0});
  if (r.timing.size() != p.tasks.size()) return tl;
  const size_t D = p.devices.size(), S = std::max<size_t>(1, p.stream_names.size());
  tl.by_device.resize(D);
  // One pass over the participants marks the (device, stream) lanes in use; lanes are then
  // numbered by device, then stream (stream 0 is "compute"); a second pass fills them.
  std::vector<uint32_t> lane_of(D * S, UINT32_MAX), count(D * S, 0);
  auto each_participant = [&](auto&& f) {
    for (uint32_t t = 0; t < p.tasks.size(); ++t) {
      const engine::Task& tk = p.tasks[t];
      if (tk.kind == engine::TaskKind::kBarrier) continue;
      for (uint32_t k = 0; k < tk.part_count; ++k) {
        const engine::Participant& pa = p.participants[tk.part_begin + k];
        if (pa.device < D && pa.stream < S) f(t, static_cast<size_t>(pa.device) * S + pa.stream);
      }
    }
  };
  each_participant([&](uint32_t, size_t slot) {
    lane_of[slot] = 0;
    ++count[slot];
  });
  for (size_t slot = 0; slot < lane_of.size(); ++slot) {
    if (lane_of[slot] == UINT32_MAX) continue;
    lane_of[slot] = static_cast<uint32_t>(tl.lanes.size());
    Lane l;
    l.device = static_cast<int>(slot / S);
    l.stream = static_cast<uint16_t>(slot % S);
    l.name = l.stream < p.stream_names.size() ? p.stream_names[l.stream] : "?";
    l.ops.reserve(count[slot]);
    tl.by_device[slot / S].push_back(lane_of[slot]);
    tl.lanes.push_back(std::move(l));
  }
  each_participant([&](uint32_t t, size_t slot) {
    if (r.timing[t].start < 0) return;
    auto& ops = tl.lanes[lane_of[slot]].ops;
    if (!ops.empty() && ops.back().task == t) return;  // listed twice on one lane
    ops.push_back({r.timing[t].start, r.timing[t].end, t, op_class(cp, r, t)});
  });
  for (uint32_t li = 0; li < tl.lanes.size(); ++li) {
    Lane& l = tl.lanes[li];
    // Task ids are a topological order, nearly time order: the sort is cheap. (Ops are added
    // by task id, so the stable sort by start orders them by (start, task).)
    auto by_start = [](const Op& a, const Op& b) { return a.start < b.start; };
    if (!std::is_sorted(l.ops.begin(), l.ops.end(), by_start))
      std::stable_sort(l.ops.begin(), l.ops.end(), by_start);
    tl.ops += l.ops.size();
    if (l.stream == 0) nest_lane(l, r, cp);
  }
  locate_ops(tl);
  return tl;
}

namespace {

// Whether two programs have the structure a timeline reads: the same tasks (kind, DAG node,
// participants) on the same devices and streams.
bool same_structure(const engine::Program& a, const engine::Program& b) {
  if (a.tasks.size() != b.tasks.size() || a.participants.size() != b.participants.size() ||
      a.devices.size() != b.devices.size() || a.stream_names != b.stream_names)
    return false;
  for (size_t t = 0; t < a.tasks.size(); ++t) {
    const engine::Task &x = a.tasks[t], &y = b.tasks[t];
    if (x.kind != y.kind || x.node != y.node || x.part_begin != y.part_begin ||
        x.part_count != y.part_count)
      return false;
  }
  for (size_t i = 0; i < a.participants.size(); ++i)
    if (a.participants[i].device != b.participants[i].device ||
        a.participants[i].stream != b.participants[i].stream)
      return false;
  return true;
}

}  // namespace

std::optional<Timeline> retime_timeline(Timeline prev, const sim::Result& prev_r,
                                        const sim::Result& r, const CompiledPlan& cp) {
  const size_t n = r.program.tasks.size();
  if (prev.where.size() != n || prev_r.timing.size() != n || r.timing.size() != n ||
      !same_structure(prev_r.program, r.program))
    return std::nullopt;
  // The same ops run (an op that did not run, start < 0, is in no lane).
  for (size_t t = 0; t < n; ++t)
    if ((prev_r.timing[t].start < 0) != (r.timing[t].start < 0)) return std::nullopt;
  Timeline tl = std::move(prev);
  tl.end = 0;
  bool reordered = false;
  for (Lane& l : tl.lanes) {
    for (Op& o : l.ops) {
      o.start = r.timing[o.task].start;
      o.end = r.timing[o.task].end;
    }
    // build_timeline's order: by (start, task), a total order within a lane.
    auto before = [](const Op& a, const Op& b) { return a.start < b.start || (a.start == b.start && a.task < b.task); };
    if (std::is_sorted(l.ops.begin(), l.ops.end(), before)) {
      for (Span& s : l.passes) s.start = l.ops[s.first].start, s.end = l.ops[s.last].end;
      for (Span& s : l.layers) s.start = l.ops[s.first].start, s.end = l.ops[s.last].end;
    } else {
      std::sort(l.ops.begin(), l.ops.end(), before);
      l.passes.clear();
      l.layers.clear();
      if (l.stream == 0) nest_lane(l, r, cp);
      reordered = true;
    }
  }
  if (reordered) {
    tl.where.assign(n, {UINT32_MAX, 0});
    locate_ops(tl);
  } else {
    for (const Lane& l : tl.lanes)
      for (const Op& o : l.ops) tl.end = std::max(tl.end, o.end);
  }
  return tl;
}

namespace {

template <class T>
void layout_boxes(const std::vector<T>& ops, const View& v, std::vector<Box>& out) {
  const size_t n = ops.size();
  if (n == 0 || v.width <= 0 || v.ns_per_px <= 0) return;
  const double t0 = v.t0, t1 = v.t1();
  // First op that ends after t0 (ends are non-decreasing in a FIFO lane).
  size_t i = static_cast<size_t>(
      std::partition_point(ops.begin(), ops.end(),
                           [&](const T& o) { return static_cast<double>(o.end) < t0; }) -
      ops.begin());
  auto first_start_at_or_after = [&](size_t from, double t) {
    return static_cast<size_t>(std::partition_point(ops.begin() + static_cast<long>(from),
                                                    ops.end(),
                                                    [&](const T& o) {
                                                      return static_cast<double>(o.start) < t;
                                                    }) -
                               ops.begin());
  };
  while (i < n && static_cast<double>(ops[i].start) < t1) {
    const float x0 = v.x(static_cast<double>(ops[i].start));
    const float x1 = v.x(static_cast<double>(ops[i].end));
    if (x1 - x0 >= 1.0f) {
      out.push_back({x0, x1, static_cast<uint32_t>(i), 1, ops[i].cls});
      ++i;
      continue;
    }
    // A run: every op that starts before one pixel past the run's right edge joins, unless
    // it is itself wide (then it is drawn on its own).
    float rx1 = std::max(x1, x0 + 1.0f);
    size_t j = i + 1;
    for (;;) {
      size_t k = first_start_at_or_after(j, v.t(rx1 + 1.0f));
      if (k == j) break;
      if (v.x(static_cast<double>(ops[k - 1].end)) - v.x(static_cast<double>(ops[k - 1].start)) >=
          1.0f) {
        if (k - 1 == j) break;  // the next op is wide: end the run before it
        --k;
      }
      rx1 = std::max(rx1, v.x(static_cast<double>(ops[k - 1].end)));
      j = k;
    }
    // The run's colour: the class that covers most of its time, from at most 16 evenly
    // spaced ops (so a run's cost does not grow with the ops it merges).
    std::array<SimTime, static_cast<size_t>(OpClass::kCount)> weight{};
    // An odd stride, so that alternating patterns (F, B, F, B) are not aliased to one class.
    const size_t len = j - i, stride = len <= 16 ? 1 : ((len / 16) | 1);
    for (size_t k = i; k < j; k += stride)
      weight[static_cast<size_t>(ops[k].cls)] += ops[k].end - ops[k].start + 1;
    const auto best = static_cast<OpClass>(std::max_element(weight.begin(), weight.end()) - weight.begin());
    out.push_back({x0, rx1, static_cast<uint32_t>(i), static_cast<uint32_t>(len), best});
    i = j;
  }
}

}  // namespace

void layout_lane(const Lane& lane, const View& v, std::vector<Box>& out) {
  layout_boxes(lane.ops, v, out);
}

void layout_spans(const std::vector<Span>& spans, const View& v, std::vector<Box>& out) {
  layout_boxes(spans, v, out);
}

std::vector<std::string> search_words(std::string_view query) {
  std::vector<std::string> words;
  std::string w;
  for (char c : query) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!w.empty()) words.push_back(std::move(w));
      w.clear();
    } else {
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (!w.empty()) words.push_back(std::move(w));
  return words;
}

bool search_match(std::string_view text, const std::vector<std::string>& words) {
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  for (const std::string& w : words) {
    bool found = false;
    for (size_t at = text.find(w); at != std::string_view::npos; at = text.find(w, at + 1)) {
      const size_t after = at + w.size();
      if (digit(w.back()) && after < text.size() && digit(text[after])) continue;
      found = true;
      break;
    }
    if (!found) return false;
  }
  return true;
}

std::string search_text(const CompiledPlan& cp, uint32_t node) {
  std::string s = cp.dag.node_name(node, cp.model);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

long op_at(const Lane& lane, double t, double slack) {
  const auto& ops = lane.ops;
  auto it = std::partition_point(ops.begin(), ops.end(), [&](const Op& o) {
    return static_cast<double>(o.end) + slack < t;
  });
  for (; it != ops.end() && static_cast<double>(it->start) - slack <= t; ++it)
    if (static_cast<double>(it->end) + slack >= t) return it - ops.begin();
  return -1;
}

}  // namespace stretto::gui
