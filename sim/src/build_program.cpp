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
#include <array>
#include <bit>
#include <cmath>
#include <deque>
#include <map>
#include <span>
#include <unordered_map>

#include "stretto/costmodel/host_reuse.h"
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

// Cost queries repeat (every microbatch asks the same ones) and cost models are pure
// (cost_model.h), so build_program answers each distinct query once. A compute query is a
// function of a few node fields (node_key: every field CostQueries::compute reads), so those
// are the key and a repeat costs no query at all; a comm query is keyed by the whole query
// (its inputs include device-set topology). Keys compare word by word (doubles bit for bit).
// Tools that need every node's query ask CostQueries directly.
template <size_t N>
struct QueryKey {
  std::array<uint64_t, N> w{};
  bool operator==(const QueryKey& o) const {  // (word by word, inlined: `= default` calls memcmp)
    bool eq = true;
    for (size_t i = 0; i < N; ++i) eq &= w[i] == o.w[i];
    return eq;
  }
  size_t hash() const {  // independent multiplies, one fold
    uint64_t h = 0;
    for (size_t i = 0; i < N; ++i) h += (w[i] ^ (i + 1)) * 0x9e3779b97f4a7c15ULL;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};
// Open addressing with linear probing over a power-of-two table (no node per entry, no modulo):
// the lookup is a multiply and, almost always, one key compare.
template <class Key, class Cost>
class QueryMemo {
 public:
  explicit QueryMemo(size_t expected) {
    slots_.resize(std::bit_ceil(std::max<size_t>(64, 2 * expected)));
  }
  template <class Compute>
  const Cost& get(const Key& k, Compute&& compute) {
    size_t i = slot_of(k);
    if (slots_[i].value != kEmpty) return values_[slots_[i].value];
    if (2 * (values_.size() + 1) > slots_.size()) {  // keep it at most half full
      std::vector<Slot> old(slots_.size() * 2);
      old.swap(slots_);
      for (const Slot& s : old)
        if (s.value != kEmpty) slots_[slot_of(s.key)] = s;
      i = slot_of(k);
    }
    slots_[i] = {k, static_cast<uint32_t>(values_.size())};
    values_.push_back(compute());
    return values_.back();
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    Key key;
    uint32_t value = kEmpty;
  };
  // The slot holding `k`, or the empty slot where it would go.
  size_t slot_of(const Key& k) const {
    size_t i = k.hash() & (slots_.size() - 1);
    while (slots_[i].value != kEmpty && !(slots_[i].key == k)) i = (i + 1) & (slots_.size() - 1);
    return i;
  }
  std::vector<Slot> slots_;
  std::deque<Cost> values_;  // (references stay valid as it grows)
};

// What CostQueries::compute(nd) depends on besides the plan's model: keep the two in step.
QueryKey<3> node_key(const Node& nd, const ModelGraph& model) {
  const bool optimizer = model.ops[nd.op].kind == OpKind::kOptimizer;
  QueryKey<3> k;
  k.w = {static_cast<uint64_t>(nd.op) | static_cast<uint64_t>(nd.tags.pass) << 32 |
             static_cast<uint64_t>(nd.recompute) << 40 |
             static_cast<uint64_t>(nd.sequence_parallel) << 41,
         static_cast<uint64_t>(nd.tp) | static_cast<uint64_t>(nd.region_k) << 16 |
             static_cast<uint64_t>(nd.region_n) << 32,
         optimizer ? static_cast<uint64_t>(nd.bytes) : 0};
  return k;
}
QueryKey<4> key_of(const cost::CommQuery& q) {
  QueryKey<4> k;
  k.w[0] = 1ULL << 63 | static_cast<uint64_t>(q.kind) | static_cast<uint64_t>(q.dtype) << 8 |
           static_cast<uint64_t>(q.crosses_island) << 16;
  k.w[1] = static_cast<uint64_t>(q.bytes);
  k.w[2] = static_cast<uint64_t>(static_cast<uint32_t>(q.group_size));
  k.w[3] = static_cast<uint64_t>(static_cast<uint32_t>(q.nodes_spanned));
  return k;
}

}  // namespace

CostQueries::CostQueries(const CompiledPlan& cp)
    : cp_(cp),
      nodes_spanned_(cp.dag.device_sets.size(), 0),
      crosses_island_(cp.dag.device_sets.size(), 0) {}

cost::ComputeQuery CostQueries::compute(const Node& nd) const {
  const ModelGraph& model = cp_.model;
  const ModelOp& op = model.ops[nd.op];
  cost::ComputeQuery q;
  q.kind = op.kind;
  q.dtype = model.dtype;
  q.tp = nd.tp;
  q.region_k = nd.region_k;
  q.region_n = nd.region_n;
  double flops = 0;
  int64_t bytes = 0, bw_bytes = 0;
  // A recomputed forward does the op's forward work (tagged with its backward's pass).
  const Pass pass = nd.recompute ? Pass::kF : nd.tags.pass;
  q.pass = pass;
  if (op.kind == OpKind::kOptimizer) {
    // The optimizer step: memory-bound, its HBM bytes per device are on the node (PASS none:
    // the fixed model gives it no time).
    q.pass = Pass::kNone;
    bytes = nd.bytes;
  }
  switch (op.kind == OpKind::kOptimizer ? Pass::kNone : pass) {
    case Pass::kF:
      flops = op.fwd_flops, bytes = op.fwd_bytes;
      break;
    case Pass::kB:
      flops = op.bi_flops + op.bw_flops, bytes = op.bi_bytes + op.bw_bytes;
      bw_bytes = op.bw_bytes;
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
  if (nd.tp > 1 && !split && nd.sequence_parallel) {
    // Sequence parallelism: replicated ops work on this rank's 1/tp of the tokens.
    flops /= nd.tp;
    bytes /= nd.tp;
    bw_bytes /= nd.tp;
    g.m = std::max<int64_t>(1, g.m / nd.tp);
  }
  int64_t param_bytes = op.param_bytes;
  if (nd.tp > 1 && split) {
    flops /= nd.tp;
    bytes /= nd.tp;
    bw_bytes /= nd.tp;
    param_bytes /= nd.tp;
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
  q.bw_bytes = bw_bytes;
  q.param_bytes = param_bytes;
  return q;
}

cost::CommQuery CostQueries::comm(const Node& nd) {
  const TrainingDag& dag = cp_.dag;
  const ModelGraph& model = cp_.model;
  const Topology topo{cp_.plan.cluster};
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
    if (nodes_spanned_[nd.devs] == 0) {
      std::vector<int> nodes_seen, islands_seen;
      for (int32_t k = 0; k < ds.group_size; ++k) {
        int d = ds.devices[k];
        if (std::find(nodes_seen.begin(), nodes_seen.end(), topo.node_of(d)) ==
            nodes_seen.end())
          nodes_seen.push_back(topo.node_of(d));
        if (std::find(islands_seen.begin(), islands_seen.end(), topo.island_of(d)) ==
            islands_seen.end())
          islands_seen.push_back(topo.island_of(d));
      }
      nodes_spanned_[nd.devs] = static_cast<int>(nodes_seen.size());
      crosses_island_[nd.devs] = islands_seen.size() > 1;
    }
    q.nodes_spanned = nodes_spanned_[nd.devs];
    q.crosses_island = crosses_island_[nd.devs] != 0;
  }
  return q;
}

bool shares_host_cores(const CompiledPlan& cp, const cost::Interference& itf) {
  return itf.host_cores > 0 && cp.plan.cluster.devices_per_node > itf.host_cores;
}

Program build_program(const CompiledPlan& cp, const cost::CostModel& cm,
                      const std::vector<char>* only) {
  const TrainingDag& dag = cp.dag;
  const ModelGraph& model = cp.model;
  const ClusterSpec& cl = cp.plan.cluster;
  Topology topo{cl};
  const int D = cp.num_devices;
  auto wanted = [&](int d) { return !only || (*only)[d]; };
  Program p;

  // ---- links ----
  // (Names, for reports, only where a simulated device can use the link.)
  p.links.resize(static_cast<size_t>(D) * 4);
  for (int d = 0; d < D; ++d) {
    auto name = [&](const char* which) {
      return wanted(d) ? fmt::format("dev{}.{}", d, which) : std::string();
    };
    p.links[link_id(d, 0)] = {cl.intra_node.bandwidth_GBps, name("intra.out")};
    p.links[link_id(d, 1)] = {cl.intra_node.bandwidth_GBps, name("intra.in")};
    p.links[link_id(d, 2)] = {cl.inter_node.bandwidth_GBps, name("nic.out")};
    p.links[link_id(d, 3)] = {cl.inter_node.bandwidth_GBps, name("nic.in")};
  }

  // ---- streams ----
  std::map<std::string, uint16_t> sid;
  auto stream_id = [&](const std::string& name) {
    auto [it, added] = sid.emplace(name, static_cast<uint16_t>(p.stream_names.size()));
    if (added) p.stream_names.push_back(name);
    return it->second;
  };
  for (const auto& s : dag.streams) stream_id(s);
  // Per-peer send/recv streams "<stream>:<peer>", named once per (stream, peer).
  std::vector<uint16_t> peer_stream;
  auto peer_stream_id = [&](uint16_t s, int peer) {
    const size_t k = static_cast<size_t>(s) * D + peer;
    if (peer_stream.empty()) peer_stream.assign(dag.streams.size() * D, UINT16_MAX);
    if (peer_stream[k] == UINT16_MAX)
      peer_stream[k] = stream_id(fmt::format("{}:{}", dag.streams[s], peer));
    return peer_stream[k];
  };

  // ---- instance numbering ----
  const size_t N = dag.nodes.size();
  std::vector<uint32_t> base(N, UINT32_MAX), count(N, 0);
  auto instances = [&](const Node& n) -> uint32_t {
    const auto& ds = dag.device_sets[n.devs];
    if (n.kind == NodeKind::kCollective)
      return static_cast<uint32_t>(ds.devices.size() / ds.group_size);
    return static_cast<uint32_t>(ds.devices.size());
  };
  // position of each device in each device set (-1 if absent), built on first use
  std::vector<std::vector<int32_t>> pos(dag.device_sets.size());
  auto positions = [&](uint32_t set) -> const int32_t* {
    auto& v = pos[set];
    if (v.empty()) {
      v.assign(D, -1);
      const auto& devs = dag.device_sets[set].devices;
      for (size_t i = 0; i < devs.size(); ++i) v[devs[i]] = static_cast<int32_t>(i);
    }
    return v.data();
  };
  auto position = [&](uint32_t set, int d) { return positions(set)[d]; };
  // instance of node n that involves device d, or UINT32_MAX
  auto instance_on = [&](uint32_t n, int d) -> uint32_t {
    const Node& nd = dag.nodes[n];
    int32_t i = position(nd.devs, d);
    if (nd.kind == NodeKind::kTransfer && i < 0 && nd.devs2 != kNone) i = position(nd.devs2, d);
    if (i < 0) return UINT32_MAX;
    if (nd.kind == NodeKind::kCollective) i /= dag.device_sets[nd.devs].group_size;
    return static_cast<uint32_t>(i);
  };
  // devices an instance involves (a span into the node's device sets, or the transfer pair)
  int pair[2];
  auto involved = [&](const Node& nd, uint32_t inst) -> std::span<const int> {
    const auto& ds = dag.device_sets[nd.devs];
    if (nd.kind == NodeKind::kCollective)
      return {ds.devices.data() + static_cast<size_t>(inst) * ds.group_size,
              static_cast<size_t>(ds.group_size)};
    if (nd.kind == NodeKind::kTransfer) {
      pair[0] = ds.devices[inst];
      pair[1] = dag.device_sets[nd.devs2].devices[inst];
      return {pair, 2};
    }
    return {ds.devices.data() + inst, 1};
  };
  // Task numbering. Without folding every instance is a task: task = base[n] + instance.
  // With folding only instances involving a kept device are tasks (see kept_first below).
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
  // Folded mode: the kept instances of node n are tasks kept_first[n] .. + kept_count[n] - 1,
  // numbered in topo order (so deps point backwards); kept_inst[task] is the instance.
  std::vector<uint32_t> kept_first, kept_count, kept_inst;
  size_t num_tasks = flat;
  if (only) {
    kept_first.assign(N, 0);
    kept_count.assign(N, 0);
    kept_inst.reserve(N);
    // A node's kept instances depend only on its device sets and whether it is a collective:
    // found once per distinct (devs, devs2, collective), not once per node.
    // (One map lookup per run of nodes with the same key, not one per node.)
    std::unordered_map<uint64_t, std::vector<uint32_t>> kept_of[2];
    uint64_t last_key = UINT64_MAX;
    const std::vector<uint32_t>* last = nullptr;
    for (uint32_t n : cp.topo_order) {
      const Node& nd = dag.nodes[n];
      const bool coll = nd.kind == NodeKind::kCollective;
      const uint64_t key = (static_cast<uint64_t>(nd.devs) << 32) | nd.devs2;
      const uint64_t full_key = key ^ (coll ? uint64_t{1} << 63 : 0);  // devs < 2^31
      if (full_key == last_key) {
        kept_first[n] = static_cast<uint32_t>(kept_inst.size());
        kept_inst.insert(kept_inst.end(), last->begin(), last->end());
        kept_count[n] = static_cast<uint32_t>(last->size());
        continue;
      }
      auto [it, added] = kept_of[coll ? 1 : 0].try_emplace(key);
      std::vector<uint32_t>& insts = it->second;
      last_key = full_key;
      last = &insts;
      if (added) {
        for (int d : kept_devices) {
          const uint32_t i = instance_on(n, d);
          if (i != UINT32_MAX) insts.push_back(i);
        }
        std::sort(insts.begin(), insts.end());
        insts.erase(std::unique(insts.begin(), insts.end()), insts.end());
      }
      kept_first[n] = static_cast<uint32_t>(kept_inst.size());
      kept_inst.insert(kept_inst.end(), insts.begin(), insts.end());
      kept_count[n] = static_cast<uint32_t>(insts.size());
    }
    num_tasks = kept_inst.size();
  }
  // The devices of an instance that are simulated (all without folding), in the instance's
  // order: for collectives, per device set and group, computed once (a 64-wide all-to-all has
  // one kept member per class when folded).
  std::vector<std::vector<uint32_t>> wanted_begin(only ? dag.device_sets.size() : 0);
  std::vector<std::vector<int>> wanted_devs(only ? dag.device_sets.size() : 0);
  std::vector<int> wanted_scratch;
  auto wanted_of = [&](const Node& nd, uint32_t inst,
                       std::span<const int> devs) -> std::span<const int> {
    if (!only) return devs;
    if (nd.kind != NodeKind::kCollective) {
      wanted_scratch.clear();
      for (int d : devs)
        if (wanted(d)) wanted_scratch.push_back(d);
      return wanted_scratch;
    }
    auto& begin = wanted_begin[nd.devs];
    auto& list = wanted_devs[nd.devs];
    if (begin.empty()) {
      const auto& ds = dag.device_sets[nd.devs];
      const size_t groups = ds.devices.size() / static_cast<size_t>(ds.group_size);
      begin.push_back(0);
      for (size_t g = 0; g < groups; ++g) {
        for (int32_t k = 0; k < ds.group_size; ++k) {
          const int d = ds.devices[g * static_cast<size_t>(ds.group_size) + static_cast<size_t>(k)];
          if (wanted(d)) list.push_back(d);
        }
        begin.push_back(static_cast<uint32_t>(list.size()));
      }
    }
    return {list.data() + begin[inst], begin[inst + 1] - begin[inst]};
  };
  auto task_of = [&](uint32_t n, uint32_t i) -> uint32_t {
    if (!only) return base[n] + i;
    for (uint32_t k = kept_first[n]; k < kept_first[n] + kept_count[n]; ++k)
      if (kept_inst[k] == i) return k;
    return UINT32_MAX;
  };
  const cost::Interference itf = cm.interference();
  // Sizes up front, so that the big arrays are written once and never regrow (a regrowth
  // copies gigabytes at the reference scale). Participants and links are exact; dependencies
  // get an upper bound, whose untouched tail costs address space only.
  {
    size_t parts = 0, links = 0, deps = 0, comms = 0;
    for (uint32_t n = 0; n < N; ++n) {
      const Node& nd = dag.nodes[n];
      const size_t ninst = only ? kept_count[n] : count[n];
      if (nd.kind == NodeKind::kTransfer || nd.kind == NodeKind::kCollective) comms += ninst;
      const size_t per = nd.kind == NodeKind::kCompute    ? 1
                         : nd.kind == NodeKind::kTransfer ? 2
                         : nd.kind == NodeKind::kCollective
                             ? static_cast<size_t>(dag.device_sets[nd.devs].group_size)
                             : 0;
      parts += ninst * per;
      links += ninst * per * 2;
      deps += ninst * std::max<size_t>(per, 1) *
              (dag.pred_begin[n + 1] - dag.pred_begin[n] + (itf.host_compute ? 1 : 0));
    }
    p.tasks.reserve(num_tasks);
    p.comms.reserve(comms);
    p.participants.reserve(parts);
    p.task_links.reserve(links);
    p.deps.reserve(deps);
  }

  // ---- memory: the DAG's memory effects are the program's counters (one per dynamic
  // category), applied on every device an instance runs on ----
  p.num_counters = static_cast<uint32_t>(MemCategory::kCount);
  p.effect_begin.assign(N + 1, 0);
  for (const MemEffect& m : dag.mem) ++p.effect_begin[m.node + 1];
  for (size_t i = 0; i < N; ++i) p.effect_begin[i + 1] += p.effect_begin[i];
  p.effects.resize(dag.mem.size());
  {
    std::vector<uint32_t> fill(p.effect_begin.begin(), p.effect_begin.end() - 1);
    for (const MemEffect& m : dag.mem)
      p.effects[fill[m.node]++] = {static_cast<uint8_t>(m.cat), m.at_end, m.bytes};
  }

  // ---- per-device dispatch lists ----
  // A device's list is its class program (a subsequence of the global topological order),
  // restricted to the instances that involve it. Tasks are created in that same order, so each
  // task is appended to the lists of the devices it involves as it is created.
  p.devices.resize(D);
  for (int d = 0; d < D; ++d) {
    DeviceProgram& dp = p.devices[d];
    dp.dispatch_ns = cm.dispatch_ns();
    dp.comm_sm_share = itf.comm_sm_share;
    dp.comm_hbm_share = itf.comm_hbm_share;
    const int c = cp.class_of_device[d];
    // (the class program's length; compiled without class programs, the lists grow as needed)
    if (c >= 0 && wanted(d)) dp.dispatch.reserve(cp.classes[c].program.size());
  }
  // Host cores: where a node holds more host-CPU devices than it has cores, its devices
  // time-share them (program.h); one host per such node.
  if (shares_host_cores(cp, itf)) {
    p.host_share_efficiency = itf.host_share_efficiency;
    const int per_node = cp.plan.cluster.devices_per_node;
    for (int d = 0; d < D; ++d) {
      const auto h = static_cast<uint32_t>(d / per_node);
      if (h >= p.host_cores.size()) p.host_cores.resize(h + 1, itf.host_cores);
      p.devices[d].host = h;
    }
  }
  auto dispatch = [&](int d, uint32_t tid) {
    if (wanted(d) && cp.class_of_device[d] >= 0) p.devices[d].dispatch.push_back(tid);
  };

  // ---- costs, participants, links, deps ----
  std::vector<uint32_t> lane_best(dag.streams.size(), UINT32_MAX);  // by stream: highest dep
  std::vector<uint16_t> lanes_touched;
  struct PredInfo {
    uint32_t node = 0;
    bool lane = false;
    uint16_t stream = 0;
    int32_t group = 1;
    const int32_t* pos1 = nullptr;  // position of each device in the predecessor's device set
    const int32_t* pos2 = nullptr;  // transfer: in its receiver set
    uint32_t base = 0;              // task id of its instance 0 (without folding)
  };
  std::vector<PredInfo> preds;
  // (c) below: per (device, stream) lane, the last kRecent dependencies of its tasks, newest
  // first.
  constexpr size_t kRecent = 4;
  const size_t num_streams = dag.streams.size();
  std::vector<uint32_t> recent(static_cast<size_t>(D) * num_streams * kRecent, UINT32_MAX);
  // Host-thread compute (cost::Interference::host_compute): per device, its last compute task
  // so far in dispatch order; every later task of the device depends on it.
  std::vector<uint32_t> last_compute(itf.host_compute ? static_cast<size_t>(D) : 0, UINT32_MAX);
  // ... and its host thread's bookkeeping (cost::Interference::host_op_ns): per device, the ops
  // issued since its last compute op; the next compute op pays for them and for itself.
  // ... and the kind of the last of them (cost::Interference::host_cold_factor): the next
  // compute op runs that much slower, its operands displaced by the host's communication work.
  const bool cold_model =
      itf.host_compute &&
      std::any_of(itf.host_cold_factor.begin(), itf.host_cold_factor.end(),
                  [](double f) { return f != 1.0; });
  // ... and whether its backward ops reuse stale activations (cost::Interference::
  // host_reuse_factor; the rule is cost::StaleActivations, shared with `stretto profile`).
  const bool reuse_model =
      itf.host_compute &&
      std::any_of(itf.host_reuse_factor.begin(), itf.host_reuse_factor.end(),
                  [](double f) { return f != 1.0; });
  cost::StaleActivations stale;
  const bool host_model = itf.host_compute && (itf.host_op_ns > 0 || cold_model || reuse_model);
  std::vector<int64_t> issued_since(host_model ? static_cast<size_t>(D) : 0, 0);
  std::vector<CommKind> last_comm(cold_model ? static_cast<size_t>(D) : 0, CommKind::kNone);
  CostQueries queries(cp);
  QueryMemo<QueryKey<3>, cost::ComputeCost> compute_memo(4 * model.ops.size());  // (~a query per op, pass)
  QueryMemo<QueryKey<4>, cost::CommCost> comm_memo(model.ops.size());
  for (uint32_t n : cp.topo_order) {
    const Node& nd = dag.nodes[n];
    // Costs are the same for every instance of a node: query once.
    int64_t work = 0, latency = 0;
    double cap = 0;
    bool mem_bound = false;
    cost::CommCost cc;
    if (nd.kind == NodeKind::kCompute) {
      const cost::ComputeCost c =
          compute_memo.get(node_key(nd, model), [&] { return cm.compute(queries.compute(nd)); });
      work = c.ns;
      mem_bound = c.mem_bound;
    } else if (nd.kind == NodeKind::kTransfer || nd.kind == NodeKind::kCollective) {
      const cost::CommQuery q = queries.comm(nd);
      cc = comm_memo.get(key_of(q), [&] { return cm.comm(q); });
      work = cc.wire_bytes;
      latency = cc.latency_ns;
      cap = cc.rate_cap;
    }
    const TaskKind kind = nd.kind == NodeKind::kCompute   ? TaskKind::kCompute
                          : nd.kind == NodeKind::kBarrier ? TaskKind::kBarrier
                                                          : TaskKind::kComm;
    // Dependencies implied by a FIFO are left out. Every device program is a subsequence of the
    // one global topological order and task ids follow it, so on one (device, stream) lane a
    // lower task id runs first. Hence (a) a dependency on the task's own lane is implied, and
    // (b) of several dependencies on one lane only the last (highest id) is needed, and (c) a
    // dependency that an earlier task of one of the task's own lanes already has is implied
    // (that task ended first, after it). (b) removes most of the order barriers' fan-in, (c)
    // their fan-out: of a group's ops on a lane only the first waits for the group's barrier
    // (on the reference plan, (a) and (b) leave 68.5 M dependencies of 117 M, (c) 23.2 M).
    // Lanes are known for compute and collective nodes (their node's stream on every device
    // involved); transfers (per-peer streams) and barriers (no lane) keep all their dependencies.
    auto has_lane = [](const Node& x) {
      return x.kind == NodeKind::kCompute || x.kind == NodeKind::kCollective;
    };
    const bool own_lane = has_lane(nd);
    // The node's predecessors, resolved once for all its instances; (a) applied here.
    preds.clear();
    for (uint32_t k = dag.pred_begin[n]; k < dag.pred_begin[n + 1]; ++k) {
      const uint32_t pn = dag.edges[dag.pred[k]].from;
      const Node& pred = dag.nodes[pn];
      const bool lane = has_lane(pred);
      if (lane && own_lane && pred.stream == nd.stream) continue;  // (a)
      PredInfo pi;
      pi.node = pn;
      pi.base = base[pn];
      pi.lane = lane;
      pi.stream = pred.stream;
      pi.group = pred.kind == NodeKind::kCollective ? dag.device_sets[pred.devs].group_size : 1;
      pi.pos1 = positions(pred.devs);
      if (pred.kind == NodeKind::kTransfer && pred.devs2 != kNone) pi.pos2 = positions(pred.devs2);
      preds.push_back(pi);
    }
    const uint32_t ninst = only ? kept_count[n] : count[n];
    for (uint32_t j = 0; j < ninst; ++j) {
      const uint32_t tid = (only ? kept_first[n] : base[n]) + j;
      const uint32_t i = only ? kept_inst[tid] : j;
      STRETTO_ASSERT(tid == p.tasks.size(), "tasks are numbered in order");
      Task& t = p.tasks.emplace_back();
      t.node = n;
      t.work = work;
      t.mem_bound = mem_bound;
      t.kind = kind;
      const std::span<const int> devs = involved(nd, i);
      // the simulated ones among them (all of them without folding)
      const std::span<const int> kept = wanted_of(nd, i, devs);
      // participants
      t.part_begin = static_cast<uint32_t>(p.participants.size());
      // With replica folding, only simulated devices take part.
      if (nd.kind == NodeKind::kCompute) {
        p.participants.push_back({static_cast<uint32_t>(devs[0]), nd.stream});
      } else if (nd.kind == NodeKind::kTransfer) {
        if (wanted(devs[0]))
          p.participants.push_back(
              {static_cast<uint32_t>(devs[0]), peer_stream_id(nd.stream, devs[1])});
        if (wanted(devs[1]))
          p.participants.push_back(
              {static_cast<uint32_t>(devs[1]), peer_stream_id(nd.stream, devs[0])});
      } else if (nd.kind == NodeKind::kCollective) {
        for (int d : kept) p.participants.push_back({static_cast<uint32_t>(d), nd.stream});
      }
      t.part_count = static_cast<uint32_t>(p.participants.size()) - t.part_begin;
      if (kind != TaskKind::kBarrier) {
        // each kept device once (devs[0], if kept, is kept[0]; its repeats are skipped)
        for (size_t k = 0; k < kept.size(); ++k)
          if (k == 0 || kept[k] != devs[0]) dispatch(kept[k], tid);
      }
      // links (comm only): the bottleneck class of each member
      const auto link_begin = static_cast<uint32_t>(p.task_links.size());
      if (nd.kind == NodeKind::kTransfer && t.work > 0) {
        bool inter = topo.node_of(devs[0]) != topo.node_of(devs[1]);
        p.task_links.push_back(link_id(devs[0], inter ? 2 : 0));
        p.task_links.push_back(link_id(devs[1], inter ? 3 : 1));
      } else if (nd.kind == NodeKind::kCollective && t.work > 0) {
        int lk = cc.inter_node ? 2 : 0;
        for (int d : kept) {
          p.task_links.push_back(link_id(d, lk));
          p.task_links.push_back(link_id(d, lk + 1));
        }
      }
      if (kind == TaskKind::kComm) {
        t.comm = static_cast<uint32_t>(p.comms.size());
        p.comms.push_back(
            {latency, cap, link_begin, static_cast<uint32_t>(p.task_links.size()) - link_begin});
      }
      // deps, device by device: a lane-less dependency as it is; of those on one lane (the
      // predecessor's stream on this device) only the highest id (b); then each task once.
      // Written straight into p.deps (reserved for the worst case, so it never regrows).
      const size_t dep_begin = p.deps.size();
      for (int d : kept) {
        // (c): what earlier tasks of this lane depended on; this task's kept dependencies join
        uint32_t* const mem =
            own_lane ? &recent[(static_cast<size_t>(d) * num_streams + nd.stream) * kRecent]
                     : nullptr;
        auto keep = [&](uint32_t id) {
          if (mem) {
            if (std::find(mem, mem + kRecent, id) != mem + kRecent) return;  // implied
            std::copy_backward(mem, mem + kRecent - 1, mem + kRecent);
            mem[0] = id;
          }
          p.deps.push_back(id);
        };
        for (const PredInfo& pr : preds) {
          int32_t pi = pr.pos1[d];
          if (pi < 0 && pr.pos2) pi = pr.pos2[d];
          if (pi < 0) continue;
          const uint32_t inst = static_cast<uint32_t>(pr.group == 1 ? pi : pi / pr.group);
          const uint32_t ptid = only ? task_of(pr.node, inst) : pr.base + inst;
          if (ptid == UINT32_MAX) continue;
          if (!pr.lane) {
            keep(ptid);
          } else if (lane_best[pr.stream] == UINT32_MAX) {
            lane_best[pr.stream] = ptid;
            lanes_touched.push_back(pr.stream);
          } else {
            lane_best[pr.stream] = std::max(lane_best[pr.stream], ptid);
          }
        }
        for (uint16_t st : lanes_touched) {
          keep(lane_best[st]);
          lane_best[st] = UINT32_MAX;
        }
        lanes_touched.clear();
        // The device's host thread issues this task only once it has run its previous compute
        // task (and waited for that task's inputs): a compute op blocks the thread.
        if (!last_compute.empty() && kind != TaskKind::kBarrier &&
            last_compute[static_cast<size_t>(d)] != UINT32_MAX)
          keep(last_compute[static_cast<size_t>(d)]);
      }
      if (!last_compute.empty() && kind == TaskKind::kCompute && wanted(devs[0]))
        last_compute[static_cast<size_t>(devs[0])] = tid;
      if (!issued_since.empty() && kind == TaskKind::kCompute && wanted(devs[0])) {
        const auto d0 = static_cast<size_t>(devs[0]);
        int64_t& since = issued_since[d0];
        if (cold_model && since > 0) {
          const double f = itf.host_cold_factor[static_cast<size_t>(last_comm[d0])];
          if (f != 1.0) t.work = static_cast<int64_t>(std::ceil(static_cast<double>(t.work) * f));
        }
        if (reuse_model) {
          const double f = itf.host_reuse_factor[stale.visit(devs[0], nd, model)];
          if (f != 1.0) t.work = static_cast<int64_t>(std::ceil(static_cast<double>(t.work) * f));
        }
        t.work += itf.host_op_ns * (1 + since);
        since = 0;
      } else if (!issued_since.empty() && kind == TaskKind::kComm) {
        for (int d : kept) {
          ++issued_since[static_cast<size_t>(d)];
          if (cold_model) last_comm[static_cast<size_t>(d)] = nd.comm;
        }
      }
      // Each task once. The engine does not need them sorted: short lists keep their order (a
      // pairwise check, cheaper than sorting millions of short lists), long ones (wide
      // collectives) are sorted.
      uint32_t* const ids = p.deps.data() + dep_begin;
      const size_t num_ids = p.deps.size() - dep_begin;
      if (num_ids > 16) {
        std::sort(ids, ids + num_ids);
        p.deps.resize(static_cast<size_t>(std::unique(ids, ids + num_ids) - p.deps.data()));
      } else if (num_ids > 1) {
        size_t kept = 1;
        for (size_t a = 1; a < num_ids; ++a) {
          if (std::find(ids, ids + kept, ids[a]) == ids + kept) ids[kept++] = ids[a];
        }
        p.deps.resize(dep_begin + kept);
      }
      t.dep_begin = static_cast<uint32_t>(dep_begin);
    }
  }

  return p;
}

}  // namespace stretto::sim
