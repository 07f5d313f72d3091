// Compiled plan + cost model -> instance-level engine program (see program.h).
//
// Instances: a compute or barrier node runs once per device of its set; a transfer once per
// (sender, receiver) pair; a collective once per group. Tasks are numbered in the plan's
// global topological order, so dependencies always point backwards.
// Instance mapping across an edge p -> n: an instance X of n depends on the instance of p
// that runs on each device X involves (compute: its device; transfer: both ends; collective:
// every member of its group).
// Streams: a logical stream used for send/recv is split per peer ("pp:3" on device 0 is its
// send/recv stream with device 3), as torch's ProcessGroupNCCL gives each peer pair its own
// communicator and stream; every other stream is one FIFO per device.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "stretto/sim/session.h"

namespace stretto::sim {

namespace {

struct Topology {
  const ClusterSpec& c;
  int node_of(int d) const { return d / c.devices_per_node; }
  int island_of(int d) const {
    int nodes_per_island = std::max(1, c.nodes / std::max(1, c.islands));
    return node_of(d) / nodes_per_island;
  }
};

// Link ids: per device, 0 = intra-node out, 1 = intra-node in, 2 = inter-node out (NIC),
// 3 = inter-node in; DCN between islands shares the NIC links (its capacity is a cap).
uint32_t link_id(int device, int kind) {
  return static_cast<uint32_t>(device) * 4 + kind;
}

}  // namespace

Program build_program(const CompiledPlan& cp, const cost::CostModel& cm,
                      std::vector<uint32_t>* task_node, std::vector<int32_t>* task_device,
                      const std::vector<char>* only) {
  const TrainingDag& dag = cp.dag;
  const ModelGraph& model = cp.model;
  const ClusterSpec& cl = cp.plan.cluster;
  Topology topo{cl};
  const int D = cp.num_devices;
  auto wanted = [&](int d) { return !only || (*only)[d]; };
  Program p;

  // ---- links ----
  p.links.resize(static_cast<size_t>(D) * 4);
  for (int d = 0; d < D; ++d) {
    p.links[link_id(d, 0)] = {cl.intra_node.bandwidth_GBps, fmt::format("dev{}.intra.out", d)};
    p.links[link_id(d, 1)] = {cl.intra_node.bandwidth_GBps, fmt::format("dev{}.intra.in", d)};
    p.links[link_id(d, 2)] = {cl.inter_node.bandwidth_GBps, fmt::format("dev{}.nic.out", d)};
    p.links[link_id(d, 3)] = {cl.inter_node.bandwidth_GBps, fmt::format("dev{}.nic.in", d)};
  }

  // ---- streams ----
  std::map<std::string, uint16_t> sid;
  auto stream_id = [&](const std::string& name) {
    auto [it, added] = sid.emplace(name, static_cast<uint16_t>(p.stream_names.size()));
    if (added) p.stream_names.push_back(name);
    return it->second;
  };
  for (const auto& s : dag.streams) stream_id(s);

  // ---- instance numbering ----
  const size_t N = dag.nodes.size();
  std::vector<uint32_t> base(N, UINT32_MAX), count(N, 0);
  auto instances = [&](const Node& n) -> uint32_t {
    const auto& ds = dag.device_sets[n.devs];
    if (n.kind == NodeKind::kCollective)
      return static_cast<uint32_t>(ds.devices.size() / ds.group_size);
    return static_cast<uint32_t>(ds.devices.size());
  };
  // position of each device in each device set (-1 if absent)
  std::vector<std::vector<int32_t>> pos(dag.device_sets.size());
  auto position = [&](uint32_t set, int d) -> int32_t {
    auto& v = pos[set];
    if (v.empty()) {
      v.assign(D, -1);
      const auto& devs = dag.device_sets[set].devices;
      for (size_t i = 0; i < devs.size(); ++i) v[devs[i]] = static_cast<int32_t>(i);
    }
    return v[d];
  };
  // instance of node n that involves device d, or UINT32_MAX
  auto instance_on = [&](uint32_t n, int d) -> uint32_t {
    const Node& nd = dag.nodes[n];
    int32_t i = position(nd.devs, d);
    if (nd.kind == NodeKind::kTransfer && i < 0 && nd.devs2 != kNone) i = position(nd.devs2, d);
    if (i < 0) return UINT32_MAX;
    if (nd.kind == NodeKind::kCollective) i /= dag.device_sets[nd.devs].group_size;
    return static_cast<uint32_t>(i);
  };
  // devices an instance involves
  auto involved = [&](uint32_t n, uint32_t inst, std::vector<int>& out) {
    out.clear();
    const Node& nd = dag.nodes[n];
    const auto& ds = dag.device_sets[nd.devs];
    if (nd.kind == NodeKind::kCollective) {
      for (int32_t k = 0; k < ds.group_size; ++k)
        out.push_back(ds.devices[inst * ds.group_size + k]);
    } else {
      out.push_back(ds.devices[inst]);
      if (nd.kind == NodeKind::kTransfer) out.push_back(dag.device_sets[nd.devs2].devices[inst]);
    }
  };
  // Task numbering. Without folding every instance is a task: task = base[n] + instance.
  // With folding only instances involving a kept device are tasks: each node keeps a short
  // list of (instance, task) pairs (at most one per kept device).
  std::vector<int> devs;
  std::vector<int> kept_devices;
  if (only)
    for (int d = 0; d < D; ++d)
      if ((*only)[d]) kept_devices.push_back(d);
  uint32_t flat = 0;
  for (uint32_t n : cp.topo_order) {
    base[n] = flat;
    count[n] = instances(dag.nodes[n]);
    flat += count[n];
  }
  std::vector<uint32_t> kept_begin, kept_inst, kept_task;  // folded mode, by node
  std::vector<uint32_t> scratch_inst;
  if (only) {
    kept_begin.assign(N + 1, 0);
    uint32_t next = 0;
    // Nodes are visited in topo order, so task ids increase along it (deps point backwards).
    std::vector<std::vector<uint32_t>> inst_of(N);
    for (uint32_t n : cp.topo_order) {
      scratch_inst.clear();
      for (int d : kept_devices) {
        uint32_t i = instance_on(n, d);
        if (i != UINT32_MAX) scratch_inst.push_back(i);
      }
      std::sort(scratch_inst.begin(), scratch_inst.end());
      scratch_inst.erase(std::unique(scratch_inst.begin(), scratch_inst.end()), scratch_inst.end());
      inst_of[n] = scratch_inst;
    }
    for (uint32_t n = 0; n < N; ++n)
      kept_begin[n + 1] = kept_begin[n] + static_cast<uint32_t>(inst_of[n].size());
    kept_inst.resize(kept_begin[N]);
    kept_task.resize(kept_begin[N]);
    for (uint32_t n : cp.topo_order)
      for (size_t j = 0; j < inst_of[n].size(); ++j) {
        kept_inst[kept_begin[n] + j] = inst_of[n][j];
        kept_task[kept_begin[n] + j] = next++;
      }
    p.tasks.resize(next);
  } else {
    p.tasks.resize(flat);
  }
  auto task_of = [&](uint32_t n, uint32_t i) -> uint32_t {
    if (!only) return base[n] + i;
    for (uint32_t k = kept_begin[n]; k < kept_begin[n + 1]; ++k)
      if (kept_inst[k] == i) return kept_task[k];
    return UINT32_MAX;
  };
  if (task_node) task_node->assign(p.tasks.size(), 0);
  if (task_device) task_device->assign(p.tasks.size(), 0);

  // ---- costs, participants, links, deps ----
  const cost::Interference itf = cm.interference();
  std::vector<uint32_t> dep_scratch;
  for (uint32_t n : cp.topo_order) {
    const Node& nd = dag.nodes[n];
    // Costs are the same for every instance of a node: query once.
    int64_t work = 0, latency = 0;
    double cap = 0;
    bool mem_bound = false;
    cost::CommCost cc;
    if (nd.kind == NodeKind::kCompute) {
      const ModelOp& op = model.ops[nd.op];
      cost::ComputeQuery q;
      q.kind = op.kind;
      q.pass = nd.tags.pass;
      q.dtype = model.dtype;
      q.tp = nd.tp;
      q.region_k = nd.region_k;
      q.region_n = nd.region_n;
      double flops = 0;
      int64_t bytes = 0;
      switch (nd.tags.pass) {
        case Pass::kF:
          flops = op.fwd_flops, bytes = op.fwd_bytes;
          break;
        case Pass::kB:
          flops = op.bi_flops + op.bw_flops, bytes = op.bi_bytes + op.bw_bytes;
          break;
        case Pass::kBI:
          flops = op.bi_flops, bytes = op.bi_bytes;
          break;
        case Pass::kBW:
          flops = op.bw_flops, bytes = op.bw_bytes;
          break;
        case Pass::kNone:
          break;
      }
      GemmShape g = op.gemm;
      const bool split = op.tp != TpSplit::kReplicated && op.tp != TpSplit::kNone;
      if (nd.tp > 1 && split) {
        flops /= nd.tp;
        bytes /= nd.tp;
        if (op.tp == TpSplit::kColumn)
          g.n = std::max<int64_t>(1, g.n / nd.tp);
        else if (op.tp == TpSplit::kRow)
          g.k = std::max<int64_t>(1, g.k / nd.tp);
        else if (op.tp == TpSplit::kHeads)
          g.batch = std::max<int64_t>(1, g.batch / nd.tp);
      }
      q.gemm = g;
      q.flops = flops;
      q.bytes = bytes;
      cost::ComputeCost c = cm.compute(q);
      work = c.ns;
      mem_bound = c.mem_bound;
    } else if (nd.kind == NodeKind::kTransfer || nd.kind == NodeKind::kCollective) {
      cost::CommQuery q;
      q.kind = nd.comm;
      q.bytes = nd.bytes;
      q.dtype = model.dtype;
      const auto& ds = dag.device_sets[nd.devs];
      if (nd.kind == NodeKind::kTransfer) {
        q.group_size = 2;
        int a = ds.devices[0], b = dag.device_sets[nd.devs2].devices[0];
        q.nodes_spanned = topo.node_of(a) == topo.node_of(b) ? 1 : 2;
        q.crosses_island = topo.island_of(a) != topo.island_of(b);
      } else {
        q.group_size = ds.group_size;
        std::vector<int> nodes_seen, islands_seen;
        for (int32_t k = 0; k < ds.group_size; ++k) {
          int d = ds.devices[k];
          if (std::find(nodes_seen.begin(), nodes_seen.end(), topo.node_of(d)) == nodes_seen.end())
            nodes_seen.push_back(topo.node_of(d));
          if (std::find(islands_seen.begin(), islands_seen.end(), topo.island_of(d)) ==
              islands_seen.end())
            islands_seen.push_back(topo.island_of(d));
        }
        q.nodes_spanned = static_cast<int>(nodes_seen.size());
        q.crosses_island = islands_seen.size() > 1;
      }
      cc = cm.comm(q);
      work = cc.wire_bytes;
      latency = cc.latency_ns;
      cap = cc.rate_cap;
    }
    const uint32_t ninst = only ? kept_begin[n + 1] - kept_begin[n] : count[n];
    for (uint32_t j = 0; j < ninst; ++j) {
      const uint32_t i = only ? kept_inst[kept_begin[n] + j] : j;
      const uint32_t tid = only ? kept_task[kept_begin[n] + j] : base[n] + j;
      Task& t = p.tasks[tid];
      t.node = n;
      t.work = work;
      t.latency_ns = latency;
      t.rate_cap = cap;
      t.mem_bound = mem_bound;
      involved(n, i, devs);
      if (task_node) (*task_node)[tid] = n;
      if (task_device) (*task_device)[tid] = devs[0];
      t.kind = nd.kind == NodeKind::kCompute   ? TaskKind::kCompute
               : nd.kind == NodeKind::kBarrier ? TaskKind::kBarrier
                                               : TaskKind::kComm;
      // participants
      t.part_begin = static_cast<uint32_t>(p.participants.size());
      // With replica folding, only simulated devices take part.
      if (nd.kind == NodeKind::kCompute) {
        p.participants.push_back({static_cast<uint32_t>(devs[0]), nd.stream});
      } else if (nd.kind == NodeKind::kTransfer) {
        const std::string& s = dag.streams[nd.stream];
        if (wanted(devs[0]))
          p.participants.push_back(
              {static_cast<uint32_t>(devs[0]), stream_id(fmt::format("{}:{}", s, devs[1]))});
        if (wanted(devs[1]))
          p.participants.push_back(
              {static_cast<uint32_t>(devs[1]), stream_id(fmt::format("{}:{}", s, devs[0]))});
      } else if (nd.kind == NodeKind::kCollective) {
        for (int d : devs)
          if (wanted(d)) p.participants.push_back({static_cast<uint32_t>(d), nd.stream});
      }
      t.part_count = static_cast<uint32_t>(p.participants.size()) - t.part_begin;
      // links (comm only): the bottleneck class of each member
      t.link_begin = static_cast<uint32_t>(p.task_links.size());
      if (nd.kind == NodeKind::kTransfer && t.work > 0) {
        bool inter = topo.node_of(devs[0]) != topo.node_of(devs[1]);
        p.task_links.push_back(link_id(devs[0], inter ? 2 : 0));
        p.task_links.push_back(link_id(devs[1], inter ? 3 : 1));
      } else if (nd.kind == NodeKind::kCollective && t.work > 0) {
        int kind = cc.inter_node ? 2 : 0;
        for (int d : devs) {
          if (!wanted(d)) continue;
          p.task_links.push_back(link_id(d, kind));
          p.task_links.push_back(link_id(d, kind + 1));
        }
      }
      t.link_count = static_cast<uint32_t>(p.task_links.size()) - t.link_begin;
      // deps
      dep_scratch.clear();
      for (uint32_t k = dag.pred_begin[n]; k < dag.pred_begin[n + 1]; ++k) {
        uint32_t pn = dag.edges[dag.pred[k]].from;
        for (int d : devs) {
          if (!wanted(d)) continue;
          uint32_t pi = instance_on(pn, d);
          if (pi == UINT32_MAX) continue;
          uint32_t ptid = task_of(pn, pi);
          if (ptid != UINT32_MAX) dep_scratch.push_back(ptid);
        }
      }
      std::sort(dep_scratch.begin(), dep_scratch.end());
      dep_scratch.erase(std::unique(dep_scratch.begin(), dep_scratch.end()), dep_scratch.end());
      t.dep_begin = static_cast<uint32_t>(p.deps.size());
      p.deps.insert(p.deps.end(), dep_scratch.begin(), dep_scratch.end());
      t.dep_count = static_cast<uint32_t>(dep_scratch.size());
    }
  }

  // ---- per-device dispatch lists ----
  p.devices.resize(D);
  for (int d = 0; d < D; ++d) {
    DeviceProgram& dp = p.devices[d];
    dp.dispatch_ns = cm.dispatch_ns();
    dp.comm_sm_share = itf.comm_sm_share;
    dp.comm_hbm_share = itf.comm_hbm_share;
    int c = cp.class_of_device[d];
    if (c < 0 || !wanted(d)) continue;
    const auto& prog = cp.classes[c].program;
    dp.dispatch.reserve(prog.size());
    for (uint32_t n : prog) {
      uint32_t i = instance_on(n, d);
      if (i == UINT32_MAX) continue;
      uint32_t tid = task_of(n, i);
      if (tid != UINT32_MAX) dp.dispatch.push_back(tid);
    }
  }
  // Growth slack of the big arrays can be ~2x; release it before the engine allocates its
  // own state (the copy happens while memory use is still below the later peak).
  p.deps.shrink_to_fit();
  p.participants.shrink_to_fit();
  p.task_links.shrink_to_fit();
  return p;
}

}  // namespace stretto::sim
