// Pass granularity (granularity.h): merging each region pass's consecutive ops into one task.
#include "stretto/sim/granularity.h"


#include <algorithm>
#include <bit>
#include <cmath>
#include <span>
#include <utility>

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
  // No counters: simulate replays the ops' effects at their rebuilt times.
  // Every coarse dependency comes from an op dependency, so the op program's counts bound the
  // arrays: written in place, then cut to size.
  p.tasks.resize(C);
  p.deps.resize(ops.deps.size());
  p.participants.reserve(ops.participants.size());
  uint32_t* const dep0 = p.deps.data();
  uint32_t num_deps = 0;
  for (uint32_t c = 0; c < C; ++c) {
    const std::span<const uint32_t> mem{pp.members.data() + pp.member_begin[c],
                                        pp.member_begin[c + 1] - pp.member_begin[c]};
    const Task& first = ops.tasks[mem[0]];
    Task& t = p.tasks[c];
    t = first;
    t.part_begin = static_cast<uint32_t>(p.participants.size());
    for (uint32_t k = 0; k < first.part_count; ++k)
      p.participants.push_back(ops.participants[first.part_begin + k]);
    // Its dependencies outside itself, each once, in increasing order.
    uint32_t* const b = dep0 + num_deps;
    uint32_t* e = b;
    for (uint32_t m : mem)
      for (uint32_t u : ops.deps_of(m))
        if (pp.task_of[u] != c) *e++ = pp.task_of[u];
    if (e - b > 1) {
      std::sort(b, e);
      e = std::unique(b, e);
    }
    t.dep_begin = num_deps;
    num_deps = static_cast<uint32_t>(e - dep0);
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
  p.deps.resize(num_deps);
  // Dispatch lists: each coarse task where its first op was issued.
  p.devices.resize(ops.devices.size());
  for (size_t d = 0; d < ops.devices.size(); ++d) {
    const engine::DeviceProgram& od = ops.devices[d];
    engine::DeviceProgram& cd = p.devices[d];
    cd.dispatch_ns = od.dispatch_ns;
    cd.comm_sm_share = od.comm_sm_share;
    cd.comm_hbm_share = od.comm_hbm_share;
    cd.host = od.host;
    cd.dispatch.reserve(od.dispatch.size());
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
