// Pass granularity (granularity.h): merging each region pass's consecutive ops into one task.
#include "stretto/sim/granularity.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <span>

namespace stretto::sim {

using engine::DeviceCounters;
using engine::Program;
using engine::SimTime;
using engine::Task;
using engine::TaskTiming;

std::string_view granularity_name(Granularity g) { return g == Granularity::kPass ? "pass" : "op"; }

std::optional<Granularity> parse_granularity(std::string_view s) {
  if (s == "op") return Granularity::kOp;
  if (s == "pass") return Granularity::kPass;
  return std::nullopt;
}

namespace {

constexpr uint32_t kNoTask = UINT32_MAX;

// What one region pass is: the ops of one (PP region, microbatch, pass).
struct PassKey {
  int32_t pp = 0, mb = 0;
  plan::Pass pass = plan::Pass::kNone;
  bool operator==(const PassKey&) const = default;
};

// Step 1: which coarse task runs each op task (coarse ids follow their first op's id, so the
// coarse program's dependencies point backwards too).
std::vector<uint32_t> assign_passes(const compiler::CompiledPlan& cp, const Program& ops,
                                    uint32_t& num_coarse) {
  const size_t T = ops.tasks.size();
  // Explicit dependents of each task (a run may not continue past a task that anything outside
  // the run waits for).
  std::vector<uint32_t> dependents(T, 0);
  for (uint32_t u : ops.deps) ++dependents[u];
  // Open runs by compute lane (device, DAG stream: compute never runs on a per-peer stream).
  const size_t S = cp.dag.streams.size();
  const size_t D = ops.devices.size();
  struct Open {
    uint32_t coarse = kNoTask, last = kNoTask;
    PassKey key;
  };
  std::vector<Open> open(D * S);
  std::vector<uint32_t> task_of(T, kNoTask);
  uint32_t next = 0;
  for (uint32_t t = 0; t < T; ++t) {
    const Task& task = ops.tasks[t];
    if (task.kind != engine::TaskKind::kCompute) {
      task_of[t] = next++;
      // Whatever a lane runs that is not compute ends its run.
      for (uint32_t k = 0; k < task.part_count; ++k) {
        const engine::Participant& pa = ops.participants[task.part_begin + k];
        if (pa.stream < S) open[static_cast<size_t>(pa.device) * S + pa.stream].coarse = kNoTask;
      }
      continue;
    }
    const engine::Participant& pa = ops.participants[task.part_begin];
    Open& lane = open[static_cast<size_t>(pa.device) * S + pa.stream];
    const plan::Tags& tags = cp.dag.nodes[task.node].tags;
    const PassKey key{tags.pp(), tags.mb(), tags.pass};
    bool join = lane.coarse != kNoTask && lane.key == key;
    if (join) {
      // Every dependency inside the run, and nothing outside it waiting for the run's last op.
      uint32_t on_last = 0;
      for (uint32_t u : ops.deps_of(t)) {
        if (task_of[u] != lane.coarse) join = false;
        if (u == lane.last) ++on_last;
      }
      if (dependents[lane.last] != on_last) join = false;
    }
    if (!join) {
      lane.coarse = next++;
      lane.key = key;
    }
    lane.last = t;
    task_of[t] = lane.coarse;
  }
  num_coarse = next;
  return task_of;
}

}  // namespace

PassProgram coarsen_to_passes(const compiler::CompiledPlan& cp, const Program& ops) {
  PassProgram pp;
  uint32_t C = 0;
  pp.task_of = assign_passes(cp, ops, C);
  const size_t T = ops.tasks.size();
  // Members of each coarse task, in id (= run) order.
  pp.member_begin.assign(static_cast<size_t>(C) + 1, 0);
  for (uint32_t c : pp.task_of) ++pp.member_begin[c + 1];
  for (size_t c = 0; c < C; ++c) pp.member_begin[c + 1] += pp.member_begin[c];
  pp.members.resize(T);
  {
    std::vector<uint32_t> fill(pp.member_begin.begin(), pp.member_begin.end() - 1);
    for (uint32_t t = 0; t < T; ++t) pp.members[fill[pp.task_of[t]]++] = t;
  }

  Program& p = pp.program;
  p.stream_names = ops.stream_names;
  p.comms = ops.comms;
  p.task_links = ops.task_links;
  p.links = ops.links;
  p.host_cores = ops.host_cores;
  p.host_share_efficiency = ops.host_share_efficiency;
  // No counters: op_counters() replays the ops' effects at their rebuilt times.
  p.tasks.reserve(C);
  p.deps.reserve(ops.deps.size());
  p.participants.reserve(ops.participants.size());
  std::vector<uint32_t> deps;
  for (uint32_t c = 0; c < C; ++c) {
    const std::span<const uint32_t> mem{pp.members.data() + pp.member_begin[c],
                                        pp.member_begin[c + 1] - pp.member_begin[c]};
    const Task& first = ops.tasks[mem[0]];
    Task& t = p.tasks.emplace_back(first);
    t.part_begin = static_cast<uint32_t>(p.participants.size());
    for (uint32_t k = 0; k < first.part_count; ++k)
      p.participants.push_back(ops.participants[first.part_begin + k]);
    deps.clear();
    for (uint32_t m : mem)
      for (uint32_t u : ops.deps_of(m))
        if (pp.task_of[u] != c) deps.push_back(pp.task_of[u]);
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    t.dep_begin = static_cast<uint32_t>(p.deps.size());
    p.deps.insert(p.deps.end(), deps.begin(), deps.end());
    if (mem.size() == 1) continue;
    // A merged run: the sum of its work, bound as the larger part of it is.
    int64_t work = 0, mem_work = 0;
    for (uint32_t m : mem) {
      work += ops.tasks[m].work;
      if (ops.tasks[m].mem_bound) mem_work += ops.tasks[m].work;
    }
    t.work = work;
    t.mem_bound = 2 * mem_work > work;
  }
  // Dispatch lists: each coarse task where its first op was issued.
  p.devices.resize(ops.devices.size());
  for (size_t d = 0; d < ops.devices.size(); ++d) {
    const engine::DeviceProgram& od = ops.devices[d];
    engine::DeviceProgram& cd = p.devices[d];
    cd.dispatch_ns = od.dispatch_ns;
    cd.comm_sm_share = od.comm_sm_share;
    cd.comm_hbm_share = od.comm_hbm_share;
    cd.host = od.host;
    for (uint32_t t : od.dispatch) {
      const uint32_t c = pp.task_of[t];
      if (pp.members[pp.member_begin[c]] == t) cd.dispatch.push_back(c);
    }
  }
  return pp;
}

std::vector<TaskTiming> expand_timing(const PassProgram& pp, const Program& ops,
                                      const std::vector<TaskTiming>& coarse) {
  std::vector<TaskTiming> out(ops.tasks.size());
  for (size_t c = 0; c < coarse.size(); ++c) {
    const uint32_t b = pp.member_begin[c], e = pp.member_begin[c + 1];
    const TaskTiming ct = coarse[c];
    if (e - b == 1 || ct.start < 0) {
      for (uint32_t i = b; i < e; ++i) out[pp.members[i]] = ct;
      continue;
    }
    int64_t work = 0;
    for (uint32_t i = b; i < e; ++i) work += ops.tasks[pp.members[i]].work;
    const SimTime span = ct.end - ct.start;
    int64_t before = 0;
    SimTime at = ct.start;
    for (uint32_t i = b; i < e; ++i) {
      before += ops.tasks[pp.members[i]].work;
      // At full rate the span is the work and each op gets exactly its own.
      const SimTime end =
          i + 1 == e     ? ct.end
          : span == work ? ct.start + before
          : work == 0    ? ct.start
                         : ct.start + static_cast<SimTime>(std::llround(
                                          static_cast<double>(span) * static_cast<double>(before) /
                                          static_cast<double>(work)));
      out[pp.members[i]] = {at, end};
      at = end;
    }
  }
  return out;
}

}  // namespace stretto::sim

namespace stretto::sim {

std::vector<DeviceCounters> op_counters(const Program& ops, const std::vector<TaskTiming>& timing,
                                        bool curves) {
  std::vector<DeviceCounters> out;
  if (ops.effect_begin.empty() || ops.num_counters == 0) return out;
  const size_t D = ops.devices.size();
  const uint32_t nc = ops.num_counters;
  out.resize(D);
  for (DeviceCounters& c : out) c.curve.push_back({0, 0});
  // A task's start or end with effects, on each device it takes part in (once per device).
  struct Change {
    SimTime t;
    uint32_t task;
    bool at_end;
  };
  auto has = [&](uint32_t n, bool at_end) {
    for (uint32_t e = ops.effect_begin[n]; e < ops.effect_begin[n + 1]; ++e)
      if (ops.effects[e].at_end == at_end) return true;
    return false;
  };
  std::vector<uint32_t> stamp(D, UINT32_MAX);
  auto for_devices = [&](uint32_t t, auto&& f) {
    const Task& task = ops.tasks[t];
    for (uint32_t k = 0; k < task.part_count; ++k) {
      const uint32_t d = ops.participants[task.part_begin + k].device;
      if (stamp[d] == t) continue;
      stamp[d] = t;
      f(d);
    }
  };
  std::vector<uint32_t> begin(D + 1, 0);
  // Counting pass, then filling pass (one array of changes grouped by device).
  for (uint32_t t = 0; t < ops.tasks.size(); ++t) {
    const uint32_t n = ops.tasks[t].node;
    if (timing[t].start < 0 || n + size_t{1} >= ops.effect_begin.size() ||
        ops.effect_begin[n] == ops.effect_begin[n + 1])
      continue;
    const int k = has(n, false) + has(n, true);
    for_devices(t, [&](uint32_t d) { begin[d + 1] += static_cast<uint32_t>(k); });
  }
  for (size_t d = 0; d < D; ++d) begin[d + 1] += begin[d];
  std::vector<Change> changes(begin[D]);
  std::vector<uint32_t> fill(begin.begin(), begin.end() - 1);
  std::fill(stamp.begin(), stamp.end(), UINT32_MAX);
  for (uint32_t t = 0; t < ops.tasks.size(); ++t) {
    const uint32_t n = ops.tasks[t].node;
    if (timing[t].start < 0 || n + size_t{1} >= ops.effect_begin.size() ||
        ops.effect_begin[n] == ops.effect_begin[n + 1])
      continue;
    const bool s = has(n, false), e = has(n, true);
    for_devices(t, [&](uint32_t d) {
      if (s) changes[fill[d]++] = {timing[t].start, t, false};
      if (e) changes[fill[d]++] = {timing[t].end, t, true};
    });
  }
  // Per device, in time order: apply an instant's changes, then sample (program.h: within one
  // instant only the end state counts; the peak is the first time the total reached its max).
  std::array<int64_t, engine::kMaxCounters> level{};
  for (size_t d = 0; d < D; ++d) {
    Change* first = changes.data() + begin[d];
    Change* last = changes.data() + begin[d + 1];
    std::stable_sort(first, last, [](const Change& a, const Change& b) { return a.t < b.t; });
    level.fill(0);
    int64_t total = 0;
    DeviceCounters& c = out[d];
    for (Change* i = first; i != last;) {
      const SimTime now = i->t;
      for (; i != last && i->t == now; ++i) {
        const uint32_t n = ops.tasks[i->task].node;
        for (uint32_t k = ops.effect_begin[n]; k < ops.effect_begin[n + 1]; ++k) {
          const engine::CounterEffect& ef = ops.effects[k];
          if (ef.at_end != i->at_end) continue;
          level[ef.counter] += ef.delta;
          total += ef.delta;
        }
      }
      if (curves) {
        if (c.curve.back().t == now)
          c.curve.back().total = total;
        else
          c.curve.push_back({now, total});
      }
      if (total > c.peak) {
        c.peak = total;
        c.peak_time = now;
        std::copy(level.begin(), level.begin() + nc, c.at_peak.begin());
      }
    }
  }
  return out;
}

}  // namespace stretto::sim
