// The critical path summarised (see critical_path.h).
#include "stretto/sim/critical_path.h"
#include "stretto/support/plural.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace stretto::sim {

using compiler::CompiledPlan;
using compiler::Node;
using compiler::NodeKind;
using engine::SimTime;
using plan::kAbsent;
using plan::Pass;
using plan::pass_name;

namespace {

double ms(SimTime ns) {
  return static_cast<double>(ns) / 1e6;
}

const Node* node_of(const CompiledPlan& cp, const Result& r, const CriticalStep& s) {
  const uint32_t n = r.node_of(s.task);
  return n < cp.dag.nodes.size() ? &cp.dag.nodes[n] : nullptr;
}

std::string kind_of(const CompiledPlan& cp, const Node* n) {
  if (!n) return "?";
  switch (n->kind) {
    case NodeKind::kCompute:
      if (n->op < cp.model.ops.size() && cp.model.ops[n->op].kind == compiler::OpKind::kOptimizer)
        return "optimizer";
      return "compute";
    case NodeKind::kTransfer:
      return "send/recv";
    case NodeKind::kCollective:
      return std::string(compiler::comm_kind_name(n->comm));
    case NodeKind::kBarrier:
      return "order barrier";
  }
  return "?";
}

// A compute step's region pass: (device, stage, microbatch, pass); comm steps have none.
struct RegionPass {
  bool valid = false;
  int device = -1;
  int32_t stage = kAbsent, mb = kAbsent;
  Pass pass = Pass::kNone;
  bool recompute = false;
  bool operator==(const RegionPass&) const = default;
};

RegionPass region_pass(const Node* n, int device) {
  RegionPass k;
  if (!n || n->kind != NodeKind::kCompute) return k;
  k.valid = true;
  k.device = device;
  k.stage = n->tags.pp();
  k.mb = n->tags.mb();
  k.pass = n->tags.pass;
  k.recompute = n->recompute;
  return k;
}

std::string region_pass_name(const RegionPass& k) {
  std::string s = k.recompute ? "F (recompute)" : std::string(pass_name(k.pass));
  if (k.mb != kAbsent) s += fmt::format(" mb{}", k.mb);
  if (k.stage != kAbsent) s += fmt::format(" PP{}", k.stage);
  return s;
}

// The path cut into segments: runs of one region pass on one device (joined when a step
// follows the previous one on its stream or through its input, i.e. not over a link or an
// order edge), and each communication op alone.
template <typename F>
void for_each_segment(const CompiledPlan& cp, const Result& r,
                      const std::vector<CriticalStep>& path, F&& f) {
  for (size_t i = 0; i < path.size();) {
    const RegionPass k = region_pass(node_of(cp, r, path[i]), path[i].device);
    size_t j = i + 1;
    if (k.valid)
      while (j < path.size() &&
             (path[j].wait == PathWait::kData || path[j].wait == PathWait::kStream) &&
             region_pass(node_of(cp, r, path[j]), path[j].device) == k)
        ++j;
    f(i, j - 1, k);
    i = j;
  }
}

}  // namespace

std::string_view path_wait_name(PathWait w) {
  static constexpr std::string_view kN[] = {"start", "data", "link", "order", "stream", "dispatch"};
  return kN[static_cast<size_t>(w)];
}

CriticalPathSummary summarize_critical_path(const CompiledPlan& cp, const Result& r,
                                            const std::vector<CriticalStep>& path, size_t top) {
  CriticalPathSummary s;
  s.steps = path.size();
  s.breakdown = breakdown(path);
  // Each step's share of the step time: its end minus the end of the step before it.
  std::vector<SimTime> share(path.size());
  SimTime prev_end = 0;
  for (size_t i = 0; i < path.size(); ++i) {
    const SimTime end = std::max(prev_end, path[i].end);
    share[i] = end - prev_end;
    prev_end = end;
  }
  s.step_time = prev_end;
  std::map<std::tuple<int32_t, Pass, std::string>, size_t> cell_of;
  for (size_t i = 0; i < path.size(); ++i) {
    const Node* n = node_of(cp, r, path[i]);
    const int32_t stage = n ? n->tags.pp() : kAbsent;
    const Pass pass = n ? n->tags.pass : Pass::kNone;
    std::string kind = kind_of(cp, n);
    auto [it, fresh] = cell_of.try_emplace({stage, pass, kind}, s.cells.size());
    if (fresh) s.cells.push_back({stage, pass, std::move(kind), 0, 0});
    s.cells[it->second].time += share[i];
    ++s.cells[it->second].ops;
    const auto w = static_cast<size_t>(path[i].wait);
    s.waited_time[w] += share[i];
    ++s.waited_links[w];
  }
  std::stable_sort(s.cells.begin(), s.cells.end(),
                   [](const auto& a, const auto& b) { return a.time > b.time; });
  std::vector<CriticalPathSummary::Segment> segs;
  for_each_segment(cp, r, path, [&](size_t first, size_t last, const RegionPass& k) {
    CriticalPathSummary::Segment g;
    g.first = first;
    g.last = last;
    g.device = path[first].device;
    g.what = k.valid ? region_pass_name(k) : path[first].what;
    g.start = path[first].start;
    g.end = path[last].end;
    for (size_t i = first; i <= last; ++i) g.time += share[i];
    g.wait = path[first].wait;
    segs.push_back(std::move(g));
  });
  s.segments = segs.size();
  std::stable_sort(segs.begin(), segs.end(),
                   [](const auto& a, const auto& b) { return a.time > b.time; });
  if (segs.size() > top) segs.resize(top);
  s.top = std::move(segs);
  return s;
}

nlohmann::json critical_path_json(const CompiledPlan& cp, const Result& r,
                                  const std::vector<CriticalStep>& path, bool full, size_t top) {
  nlohmann::json j = nlohmann::json::object();
  const CriticalPathSummary s = summarize_critical_path(cp, r, path, top);
  j["critical_path_breakdown_ms"] = {{"compute", ms(s.breakdown.compute)},
                                     {"communication", ms(s.breakdown.comm)},
                                     {"waiting", ms(s.breakdown.wait)}};
  nlohmann::json sum = {{"steps", s.steps}, {"segments", s.segments}, {"step_time_ms", ms(s.step_time)}};
  nlohmann::json cells = nlohmann::json::array();
  for (const auto& c : s.cells)
    cells.push_back({{"stage", c.stage == kAbsent ? nlohmann::json(nullptr) : nlohmann::json(c.stage)},
                     {"pass", pass_name(c.pass)},
                     {"kind", c.kind},
                     {"time_ms", ms(c.time)},
                     {"ops", c.ops}});
  sum["by_stage_pass_kind"] = std::move(cells);
  nlohmann::json segs = nlohmann::json::array();
  for (const auto& g : s.top)
    segs.push_back({{"what", g.what},
                    {"device", g.device},
                    {"start_ms", ms(g.start)},
                    {"end_ms", ms(g.end)},
                    {"time_ms", ms(g.time)},
                    {"ops", g.last - g.first + 1},
                    {"waited_on", path_wait_name(g.wait)}});
  sum["top_segments"] = std::move(segs);
  nlohmann::json waits = nlohmann::json::object();
  for (size_t w = 0; w < kPathWaits; ++w)
    waits[std::string(path_wait_name(static_cast<PathWait>(w)))] = {
        {"time_ms", ms(s.waited_time[w])}, {"links", s.waited_links[w]}};
  sum["waited_on"] = std::move(waits);
  j["critical_path_summary"] = std::move(sum);
  if (full) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& st : path)
      steps.push_back({{"op", st.what},
                       {"device", st.device},
                       {"start_ms", ms(st.start)},
                       {"end_ms", ms(st.end)},
                       {"waited_for", st.waited_for},
                       {"waited_on", path_wait_name(st.wait)}});
    j["critical_path"] = std::move(steps);
  }
  return j;
}

std::string critical_path_summary_text(const CriticalPathSummary& s) {
  const CriticalPathBreakdown& b = s.breakdown;
  const double total = static_cast<double>(std::max<SimTime>(1, b.compute + b.comm + b.wait));
  std::string o = "\ncritical path (what determines the step time):\n";
  o += fmt::format(
      "  {:.3f} ms = compute {:.3f} ms ({:.0f}%) + communication {:.3f} ms ({:.0f}%) + waiting "
      "{:.3f} ms ({:.0f}%, host dispatch and rendezvous); {} in {}\n",
      ms(b.compute + b.comm + b.wait), ms(b.compute), 100 * b.compute / total, ms(b.comm),
      100 * b.comm / total, ms(b.wait), 100 * b.wait / total,
      count_noun(static_cast<long long>(s.steps), "op", "ops"),
      count_noun(static_cast<long long>(s.segments), "segment", "segments"));
  const double step = static_cast<double>(std::max<SimTime>(1, s.step_time));
  o += "\n  what it waited on at each link (time of the path reached that way):\n";
  for (size_t w = 0; w < kPathWaits; ++w) {
    if (s.waited_links[w] == 0) continue;
    static constexpr std::string_view kMeaning[] = {
        "the path's first op", "a compute op's output", "data over a link (transfer, collective)",
        "an order directive's edge", "the previous op of its stream", "its host thread"};
    o += fmt::format("  {:>9}  {:>10.3f} ms  {:>5.1f}%  {:>7} links  ({})\n",
                     path_wait_name(static_cast<PathWait>(w)), ms(s.waited_time[w]),
                     100 * static_cast<double>(s.waited_time[w]) / step, s.waited_links[w],
                     kMeaning[w]);
  }
  o += "\n  time by stage x pass x kind:\n";
  o += fmt::format("  {:>6}  {:>5}  {:<15}  {:>10}  {:>6}  {:>7}\n", "stage", "pass", "kind",
                   "ms", "share", "ops");
  const size_t shown = std::min<size_t>(s.cells.size(), 24);
  for (size_t i = 0; i < shown; ++i) {
    const auto& c = s.cells[i];
    o += fmt::format("  {:>6}  {:>5}  {:<15}  {:>10.3f}  {:>5.1f}%  {:>7}\n",
                     c.stage == kAbsent ? std::string("-") : fmt::format("PP{}", c.stage),
                     pass_name(c.pass), c.kind, ms(c.time), 100 * static_cast<double>(c.time) / step,
                     c.ops);
  }
  if (s.cells.size() > shown)
    o += fmt::format("  ... and {} smaller cells (--format json lists them all)\n",
                     s.cells.size() - shown);
  o += fmt::format("\n  the {} longest segments (a region pass on one device, or a communication op):\n",
                   s.top.size());
  o += fmt::format("  {:>10}  {:>10}  {:>10}  {:>6}  {:>6}  {:<9}  {}\n", "start ms", "end ms",
                   "share ms", "device", "ops", "waited on", "segment");
  for (const auto& g : s.top)
    o += fmt::format("  {:>10.3f}  {:>10.3f}  {:>10.3f}  {:>6}  {:>6}  {:<9}  {}\n", ms(g.start),
                     ms(g.end), ms(g.time), g.device, g.last - g.first + 1, path_wait_name(g.wait),
                     g.what);
  o += "  (every op: --critical-path=full)\n";
  return o;
}

std::string critical_path_full_text(const std::vector<CriticalStep>& path) {
  std::string o = "\ncritical path, every op (what determines the step time):\n";
  const CriticalPathBreakdown b = breakdown(path);
  const double total = static_cast<double>(std::max<SimTime>(1, b.compute + b.comm + b.wait));
  o += fmt::format(
      "  {:.3f} ms = compute {:.3f} ms ({:.0f}%) + communication {:.3f} ms ({:.0f}%) + waiting "
      "{:.3f} ms ({:.0f}%, host dispatch and rendezvous)\n",
      ms(b.compute + b.comm + b.wait), ms(b.compute), 100 * b.compute / total, ms(b.comm),
      100 * b.comm / total, ms(b.wait), 100 * b.wait / total);
  o += fmt::format("  {:>10}  {:>10}  {:>6}  {:<9}  {}\n", "start ms", "end ms", "device",
                   "waited on", "op: why it started then");
  for (const CriticalStep& st : path)
    o += fmt::format("  {:>10.3f}  {:>10.3f}  {:>6}  {:<9}  {}: {}\n", ms(st.start), ms(st.end),
                     st.device, path_wait_name(st.wait), st.what, st.waited_for);
  return o;
}

}  // namespace stretto::sim
