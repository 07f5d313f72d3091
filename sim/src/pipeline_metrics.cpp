#include "stretto/sim/pipeline_metrics.h"

#include <algorithm>
#include <utility>

#include "fork_join.h"

namespace stretto::sim {

using engine::SimTime;

namespace {

using Interval = std::pair<SimTime, SimTime>;

// Appends [s, e) to `v`, joined to the last interval when it starts where that one ends (the
// union, all merge() keeps of them, is the same; a device's ops run back to back, a merged
// region pass's always, so this keeps `v` short). Inlined: it is called once per op (an
// out-of-line call cost about as much as its work).
[[gnu::always_inline]] inline void add(std::vector<Interval>& v, SimTime s, SimTime e) {
  if (!v.empty() && v.back().second == s && v.back().first <= s && s <= e)
    v.back().second = e;
  else
    v.push_back({s, e});
}

// Sorts and merges `v` in place into disjoint intervals; returns their total length. (The
// intervals come in task order, which is nearly time order: often sorted already.)
SimTime merge(std::vector<Interval>& v) {
  if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
  size_t k = 0;
  for (const Interval& x : v) {
    if (x.second <= x.first) continue;
    if (k > 0 && x.first <= v[k - 1].second)
      v[k - 1].second = std::max(v[k - 1].second, x.second);
    else
      v[k++] = x;
  }
  v.resize(k);
  SimTime total = 0;
  for (const Interval& x : v) total += x.second - x.first;
  return total;
}

// Length of (a minus b) inside [lo, hi); a and b merged.
SimTime uncovered(const std::vector<Interval>& a, const std::vector<Interval>& b, SimTime lo,
                  SimTime hi) {
  SimTime total = 0;
  size_t j = 0;
  for (const Interval& x : a) {
    SimTime s = std::max(x.first, lo);
    const SimTime e = std::min(x.second, hi);
    if (s >= e) continue;
    while (j < b.size() && b[j].second <= s) ++j;
    for (size_t k = j; k < b.size() && b[k].first < e && s < e; ++k) {
      if (b[k].first > s) total += b[k].first - s;
      s = std::max(s, b[k].second);
    }
    if (s < e) total += e - s;
  }
  return total;
}

}  // namespace

PipelineMetrics pipeline_metrics(const compiler::CompiledPlan& cp, const Result& r,
                                 int threads) {
  PipelineMetrics m;
  const size_t D = r.devices.size();
  m.devices.assign(D, {});
  const engine::Program& p = r.program;
  // Devices [first, last), one at a time, from its dispatch list (each task it takes part in,
  // once), so that only one device's intervals are held at a time; each writes only its own
  // entry of m.devices.
  auto measure = [&](size_t first, size_t last) {
    std::vector<Interval> compute, collectives;
    for (size_t d = first; d < last; ++d) {
      compute.clear();
      collectives.clear();
      if (d < p.devices.size())
        for (const uint32_t t : p.devices[d].dispatch) {
          const engine::Task& tk = p.tasks[t];
          const engine::TaskTiming& tm = r.timing[t];
          if (tk.kind == engine::TaskKind::kCompute)
            add(compute, tm.start, tm.end);
          else if (tk.kind == engine::TaskKind::kComm && tk.node < cp.dag.nodes.size() &&
                   cp.dag.nodes[tk.node].kind == compiler::NodeKind::kCollective)
            add(collectives, tm.start, tm.end);
        }
      DevicePipeline& dp = m.devices[d];
      const SimTime busy = merge(compute);
      merge(collectives);
      if (!compute.empty()) {
        dp.computes = true;
        dp.first_start = compute.front().first;
        dp.last_end = compute.back().second;
        dp.compute = busy;
        dp.exposed_collectives_in_span =
            uncovered(collectives, compute, dp.first_start, dp.last_end);
      }
      dp.exposed_collectives = uncovered(collectives, compute, 0, r.step_time);
    }
  };
  std::vector<uint32_t> work(D + 1, 0);
  for (size_t d = 0; d < D; ++d)
    work[d + 1] = work[d] + 1 +
                  (d < p.devices.size() ? static_cast<uint32_t>(p.devices[d].dispatch.size()) : 0);
  const std::vector<uint32_t> ranges =
      device_ranges(work, static_cast<uint32_t>(std::max(threads, 1)));
  fork_join(ranges.size() - 1, [&](size_t j) { measure(ranges[j], ranges[j + 1]); });
  for (size_t d = 0; d < D; ++d) {
    const int rep = r.devices[d].representative;
    if (r.devices[d].folded && rep >= 0 && static_cast<size_t>(rep) < D)
      m.devices[d] = m.devices[static_cast<size_t>(rep)];
  }
  double idle = 0, span = 0, coll = 0;
  SimTime worst = 0;
  for (size_t d = 0; d < D; ++d) {
    const DevicePipeline& dp = m.devices[d];
    coll += static_cast<double>(dp.exposed_collectives);
    if (!dp.computes) continue;
    idle += static_cast<double>(dp.idle());
    span += static_cast<double>(dp.last_end - dp.first_start);
    if (dp.idle() > worst) {
      worst = dp.idle();
      m.largest_bubble_device = static_cast<int>(d);
    }
  }
  m.pipeline_bubble_ratio = span > 0 ? idle / span : 0;
  m.exposed_comm_ms_per_device =
      D ? static_cast<double>(r.exposed_comm) / 1e6 / static_cast<double>(D) : 0;
  m.exposed_collectives_ms_per_device = D ? coll / 1e6 / static_cast<double>(D) : 0;
  return m;
}

}  // namespace stretto::sim
