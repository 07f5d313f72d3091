// Memory by category and wait causes (see inspect.h).
#include "stretto/sim/inspect.h"

#include <algorithm>

namespace stretto::sim {

using engine::SimTime;
using engine::TaskKind;

std::vector<CategorySample> memory_by_category(const compiler::CompiledPlan& cp, const Result& r,
                                               int device) {
  std::vector<CategorySample> out;
  const engine::Program& p = r.program;
  if (device < 0 || static_cast<size_t>(device) >= p.devices.size()) return out;
  if (static_cast<size_t>(device) < r.devices.size() && r.devices[device].folded) return out;
  CategorySample cur;
  if (static_cast<size_t>(device) < cp.static_mem.size()) {
    cur.bytes[0] = cp.static_mem[device].params;
    cur.bytes[1] = cp.static_mem[device].grads;
    cur.bytes[2] = cp.static_mem[device].optimizer;
  }
  struct Change {
    SimTime t;
    uint8_t cat;
    int64_t delta;
  };
  std::vector<Change> changes;
  if (!p.effect_begin.empty() && r.timing.size() == p.tasks.size()) {
    for (uint32_t t : p.devices[device].dispatch) {
      const uint32_t n = p.tasks[t].node;
      if (n + 1 >= p.effect_begin.size()) continue;
      for (uint32_t e = p.effect_begin[n]; e < p.effect_begin[n + 1]; ++e) {
        const engine::CounterEffect& ef = p.effects[e];
        const SimTime at = ef.at_end ? r.timing[t].end : r.timing[t].start;
        changes.push_back({at, static_cast<uint8_t>(3 + ef.counter), ef.delta});
      }
    }
  }
  std::stable_sort(changes.begin(), changes.end(),
                   [](const Change& a, const Change& b) { return a.t < b.t; });
  cur.t = 0;
  size_t i = 0;
  // Changes at t = 0 belong to the first sample.
  for (; i < changes.size() && changes[i].t <= 0; ++i)
    if (changes[i].cat < kMemCategories) cur.bytes[changes[i].cat] += changes[i].delta;
  out.push_back(cur);
  while (i < changes.size()) {
    const SimTime t = changes[i].t;
    for (; i < changes.size() && changes[i].t == t; ++i)
      if (changes[i].cat < kMemCategories) cur.bytes[changes[i].cat] += changes[i].delta;
    if (cur.bytes == out.back().bytes) continue;
    cur.t = t;
    out.push_back(cur);
  }
  return out;
}

std::string_view wait_cause_name(WaitCause c) {
  switch (c) {
    case WaitCause::kNone:
      return "none";
    case WaitCause::kInput:
      return "waiting for an input";
    case WaitCause::kTransfer:
      return "waiting for a transfer";
    case WaitCause::kCollective:
      return "waiting for a collective";
    case WaitCause::kOrder:
      return "waiting for an order edge";
    case WaitCause::kRendezvous:
      return "waiting for a collective peer";
    case WaitCause::kDispatch:
      return "host dispatch";
  }
  return "?";
}

Wait wait_cause(const compiler::CompiledPlan& cp, const Result& r, uint32_t task,
                SimTime lane_free) {
  Wait w;
  const engine::Program& p = r.program;
  if (task >= p.tasks.size() || task >= r.timing.size()) return w;
  const SimTime start = r.timing[task].start;
  w.ready = lane_free;
  if (start <= lane_free) return w;
  // The dependency that ended last (ties: lowest task id), through barriers to what they join.
  SimTime best_end = -1;
  uint32_t best = UINT32_MAX;
  for (uint32_t d : p.deps_of(task))
    if (r.timing[d].end > best_end) best_end = r.timing[d].end, best = d;
  if (best != UINT32_MAX && best_end > lane_free) {
    w.ready = best_end;
    w.blocker = best;
    // A barrier is an order directive's junction (temporal edges); follow it to a real op.
    uint32_t b = best;
    for (int hops = 0; hops < 64 && p.tasks[b].kind == TaskKind::kBarrier; ++hops) {
      SimTime e = -1;
      uint32_t nb = UINT32_MAX;
      for (uint32_t d : p.deps_of(b))
        if (r.timing[d].end > e) e = r.timing[d].end, nb = d;
      if (nb == UINT32_MAX) break;
      b = nb;
    }
    const uint32_t n = r.node_of(task), bn = r.node_of(b);
    bool temporal = p.tasks[best].kind == TaskKind::kBarrier;
    if (!temporal && n < cp.dag.nodes.size() && n + 1 < cp.dag.pred_begin.size())
      for (uint32_t k = cp.dag.pred_begin[n]; k < cp.dag.pred_begin[n + 1]; ++k) {
        const compiler::Edge& e = cp.dag.edges[cp.dag.pred[k]];
        if (e.from == bn && e.kind == compiler::EdgeKind::kTemporal) temporal = true;
      }
    w.blocker = b;
    if (temporal)
      w.cause = WaitCause::kOrder;
    else if (bn < cp.dag.nodes.size() && cp.dag.nodes[bn].kind == compiler::NodeKind::kTransfer)
      w.cause = WaitCause::kTransfer;
    else if (bn < cp.dag.nodes.size() && cp.dag.nodes[bn].kind == compiler::NodeKind::kCollective)
      w.cause = WaitCause::kCollective;
    else
      w.cause = WaitCause::kInput;
    if (best_end >= start) return w;
  }
  // Inputs were ready before it started: a comm op waited for a peer, anything else for its
  // host thread.
  w.ready = std::max(lane_free, best_end);
  w.blocker = UINT32_MAX;
  w.cause = p.tasks[task].kind == TaskKind::kComm ? WaitCause::kRendezvous : WaitCause::kDispatch;
  return w;
}

}  // namespace stretto::sim
