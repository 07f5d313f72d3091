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
#include "stretto/costmodel/cp_attention.h"
#include "stretto/costmodel/tp_overlap.h"
#include "stretto/sim/session.h"

namespace stretto::sim {

using compiler::CompiledPlan;
using compiler::ModelGraph;
using compiler::Node;
using compiler::NodeKind;
using compiler::OpKind;
using compiler::TpSplit;
using engine::Program;
using engine::Task;
using engine::TaskKind;
using plan::Pass;

namespace {

struct Topology {
  const plan::ClusterSpec& c;
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
  const compiler::ModelOp& op = model.ops[nd.op];
  cost::ComputeQuery q;
  q.kind = op.kind;
  q.dtype = model.dtype;
  q.tp = nd.tp;
  q.region_k = nd.region_k;
  q.region_n = nd.region_n;
  double flops = 0;
  int64_t bytes = 0, bw_bytes = 0, split_grad_bytes = 0;
  // A recomputed forward does the op's forward work (tagged with its backward's pass).
  const Pass pass = nd.recompute ? Pass::kF : nd.tags.pass;
  q.pass = pass;
  if (op.kind == OpKind::kOptimizer) {
    // The optimizer step: memory-bound, its HBM bytes per device are on the node (PASS none:
    // the fixed model gives it no time): the fused step's parameters x its bytes per
    // parameter (Compiler::add_optimizer), and the same parameters as an unfused step.
    q.pass = Pass::kNone;
    bytes = nd.bytes;
    const plan::OptimizerSpec& opt = cp_.plan.optimizer;
    const int dt = static_cast<int>(compiler::static_bytes_per_param(model.dtype, opt).params);
    if (const int64_t per = opt.step_bytes_per_param(dt); per > 0)
      q.unfused_step_bytes = nd.bytes / per * opt.unfused_step_bytes_per_param(dt);
  }
  switch (op.kind == OpKind::kOptimizer ? Pass::kNone : pass) {
    case Pass::kF:
      flops = op.fwd_flops, bytes = op.fwd_bytes;
      break;
    case Pass::kB:
      flops = op.bi_flops + op.bw_flops, bytes = op.bi_bytes + op.bw_bytes;
      bw_bytes = op.bw_bytes;
      split_grad_bytes = op.split_input_bytes;
      break;
    case Pass::kBI:
      flops = op.bi_flops, bytes = op.bi_bytes;
      split_grad_bytes = op.split_input_bytes;
      break;
    case Pass::kBW:
      flops = op.bw_flops, bytes = op.bw_bytes;
      break;
    case Pass::kNone:
      break;
  }
  compiler::GemmShape g = op.gemm;
  const bool split = op.tp != TpSplit::kReplicated && op.tp != TpSplit::kNone;
  if (nd.tp > 1 && !split && nd.sequence_parallel) {
    // Sequence parallelism: replicated ops work on this rank's 1/tp of the tokens.
    flops /= nd.tp;
    bytes /= nd.tp;
    bw_bytes /= nd.tp;
    split_grad_bytes /= nd.tp;
    g.m = std::max<int64_t>(1, g.m / nd.tp);
  }
  int64_t param_bytes = op.param_bytes;
  if (nd.tp > 1 && split) {
    flops /= nd.tp;
    bytes /= nd.tp;
    bw_bytes /= nd.tp;
    split_grad_bytes /= nd.tp;
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
  q.split_grad_bytes = split_grad_bytes;
  return q;
}

cost::CommQuery CostQueries::comm(const Node& nd) {
  const compiler::TrainingDag& dag = cp_.dag;
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

namespace {

// build_program's state and steps: links, streams, task numbering (instances; kept instances
// when folding), reservations, memory counters, device programs; then, node by node in the
// global order, its cost (once) and its instances' tasks (participants, dispatch, links,
// dependencies, host-thread effects).
class ProgramBuilder {
 public:
  ProgramBuilder(const CompiledPlan& cp, const cost::CostModel& cm, const std::vector<char>* only)
      : cp_(cp), dag_(cp.dag), model_(cp.model), cl_(cp.plan.cluster), cm_(cm), only_(only),
        topo_{cp.plan.cluster}, D_(cp.num_devices), N_(cp.dag.nodes.size()),
        itf_(cm.interference()), queries_(cp),
        compute_memo_(4 * cp.model.ops.size()),  // (~a query per op, pass)
        comm_memo_(cp.model.ops.size()) {
    last_compute_cost_.resize(cp.model.ops.size() * kPassSlots);
    last_comm_cost_.resize(cp.dag.device_sets.size());
    for (const compiler::TpOverlapPair& pr : cp.dag.tp_overlaps) {
      overlaps_of_[pr.compute].push_back(&pr);
      if (pr.method == compiler::TpOverlap::kAsync) async_gemm_of_[pr.comm] = pr.compute;
    }
  }

  Program build() {
    add_links();
    add_streams();
    number_tasks();
    reserve();
    add_memory_counters();
    add_devices();
    prepare_task_state();
    for (uint32_t n : cp_.topo_order) add_node_tasks(n);
    return std::move(p_);
  }

  // build() of `built`, a program build() made of the same compiled plan and simulated
  // devices under a cost model with the same host_compute: its structure is kept and only what
  // the cost model decides is written again (task work, comm latencies and rate caps, dispatch
  // and interference shares, host cores, host-thread effects), in build()'s order. Nullopt
  // when this cost model would change the structure (a comm task's links appear or vanish, a
  // collective moves between intra- and inter-node links, hosts become shared or not).
  std::optional<Program> recost(Program built) {
    number_tasks();
    p_ = std::move(built);
    if (p_.tasks.size() != num_tasks_ || p_.devices.size() != static_cast<size_t>(D_))
      return std::nullopt;
    if (shares_host_cores(cp_, itf_) == p_.host_cores.empty()) return std::nullopt;
    for (int d = 0; d < D_; ++d) {
      engine::DeviceProgram& dp = p_.devices[d];
      dp.dispatch_ns = cm_.dispatch_ns();
      dp.comm_sm_share = itf_.comm_sm_share;
      dp.comm_hbm_share = itf_.comm_hbm_share;
    }
    if (!p_.host_cores.empty()) {
      p_.host_share_efficiency = itf_.host_share_efficiency;
      std::fill(p_.host_cores.begin(), p_.host_cores.end(), itf_.host_cores);
    }
    prepare_task_state();
    const bool host_effects = !last_compute_.empty() || !issued_since_.empty();
    for (uint32_t n : cp_.topo_order) {
      const Node& nd = dag_.nodes[n];
      const NodeCost c = node_cost(n, nd);
      const uint32_t ninst = only_ ? kept_count_[n] : count_[n];
      const uint32_t first = only_ ? kept_first_[n] : base_[n];
      for (uint32_t j = 0; j < ninst; ++j) {
        const uint32_t tid = first + j;
        Task& t = p_.tasks[tid];
        if (t.node != n || t.kind != c.kind) return std::nullopt;
        t.work = c.work;
        t.mem_bound = c.mem_bound;
        if (c.kind == TaskKind::kComm) {
          engine::CommSpec& s = p_.comms[t.comm];
          // add_comm's links: two per transfer, two per simulated member of a collective
          const uint32_t links =
              t.work <= 0 ? 0 : nd.kind == NodeKind::kTransfer ? 2 : 2 * t.part_count;
          if (s.link_count != links) return std::nullopt;
          if (nd.kind == NodeKind::kCollective && links > 0 &&
              (p_.task_links[s.link_begin] % 4 >= 2) != c.inter_node)
            return std::nullopt;
          s.latency_ns = c.latency;
          s.rate_cap = c.cap;
        }
        if (host_effects) {
          const uint32_t i = only_ ? kept_inst_[tid] : j;
          const std::span<const int> devs = involved(nd, i);
          apply_host_effects(t, nd, tid, devs, wanted_of(nd, i, devs));
        }
      }
    }
    return std::move(p_);
  }

 private:
  bool wanted(int d) const { return !only_ || (*only_)[d]; }

  // ---- links ----
  // (Names, for reports, only where a simulated device can use the link.)
  void add_links() {
    p_.links.resize(static_cast<size_t>(D_) * 4);
    for (int d = 0; d < D_; ++d) {
      auto name = [&](const char* which) {
        return wanted(d) ? fmt::format("dev{}.{}", d, which) : std::string();
      };
      p_.links[link_id(d, 0)] = {cl_.intra_node.bandwidth_GBps, name("intra.out")};
      p_.links[link_id(d, 1)] = {cl_.intra_node.bandwidth_GBps, name("intra.in")};
      p_.links[link_id(d, 2)] = {cl_.inter_node.bandwidth_GBps, name("nic.out")};
      p_.links[link_id(d, 3)] = {cl_.inter_node.bandwidth_GBps, name("nic.in")};
    }
  }

  // ---- streams ----
  uint16_t stream_id(const std::string& name) {
    auto [it, added] = sid_.emplace(name, static_cast<uint16_t>(p_.stream_names.size()));
    if (added) p_.stream_names.push_back(name);
    return it->second;
  }
  void add_streams() {
    for (const auto& s : dag_.streams) stream_id(s);
  }
  // Per-peer send/recv streams "<stream>:<peer>", named once per (stream, peer).
  uint16_t peer_stream_id(uint16_t s, int peer) {
    const size_t k = static_cast<size_t>(s) * D_ + peer;
    if (peer_stream_.empty()) peer_stream_.assign(dag_.streams.size() * D_, UINT16_MAX);
    if (peer_stream_[k] == UINT16_MAX)
      peer_stream_[k] = stream_id(fmt::format("{}:{}", dag_.streams[s], peer));
    return peer_stream_[k];
  }

  // ---- instance numbering ----
  uint32_t instances(const Node& n) const {
    const auto& ds = dag_.device_sets[n.devs];
    if (n.kind == NodeKind::kCollective)
      return static_cast<uint32_t>(ds.devices.size() / ds.group_size);
    return static_cast<uint32_t>(ds.devices.size());
  }
  // position of each device in a device set (-1 if absent), built on first use
  const int32_t* positions(uint32_t set) {
    auto& v = pos_[set];
    if (v.empty()) {
      v.assign(D_, -1);
      const auto& devs = dag_.device_sets[set].devices;
      for (size_t i = 0; i < devs.size(); ++i) v[devs[i]] = static_cast<int32_t>(i);
    }
    return v.data();
  }
  int32_t position(uint32_t set, int d) { return positions(set)[d]; }
  // instance of node n that involves device d, or UINT32_MAX
  uint32_t instance_on(uint32_t n, int d) {
    const Node& nd = dag_.nodes[n];
    int32_t i = position(nd.devs, d);
    if (nd.kind == NodeKind::kTransfer && i < 0 && nd.devs2 != compiler::kNone)
      i = position(nd.devs2, d);
    if (i < 0) return UINT32_MAX;
    if (nd.kind == NodeKind::kCollective) i /= dag_.device_sets[nd.devs].group_size;
    return static_cast<uint32_t>(i);
  }
  // devices an instance involves (a span into the node's device sets, or the transfer pair)
  std::span<const int> involved(const Node& nd, uint32_t inst) {
    const auto& ds = dag_.device_sets[nd.devs];
    if (nd.kind == NodeKind::kCollective)
      return {ds.devices.data() + static_cast<size_t>(inst) * ds.group_size,
              static_cast<size_t>(ds.group_size)};
    if (nd.kind == NodeKind::kTransfer) {
      pair_[0] = ds.devices[inst];
      pair_[1] = dag_.device_sets[nd.devs2].devices[inst];
      return {pair_, 2};
    }
    return {ds.devices.data() + inst, 1};
  }
  // Task numbering. Without folding every instance is a task: task = base[n] + instance.
  // With folding only instances involving a kept device are tasks (number_kept_tasks).
  // (base_ and count_ are read only without folding: not built with it.)
  void number_tasks() {
    pos_.resize(dag_.device_sets.size());
    if (only_) {
      for (int d = 0; d < D_; ++d)
        if ((*only_)[d]) kept_devices_.push_back(d);
      number_kept_tasks();
    } else {
      base_.assign(N_, UINT32_MAX);
      count_.assign(N_, 0);
      uint32_t flat = 0;
      for (uint32_t n : cp_.topo_order) {
        base_[n] = flat;
        count_[n] = instances(dag_.nodes[n]);
        flat += count_[n];
      }
      num_tasks_ = flat;
    }
    wanted_begin_.resize(only_ ? dag_.device_sets.size() : 0);
    wanted_devs_.resize(only_ ? dag_.device_sets.size() : 0);
  }
  // Folded mode: the kept instances of node n are tasks kept_first[n] .. + kept_count[n] - 1,
  // numbered in topo order (so deps point backwards); kept_inst[task] is the instance.
  void number_kept_tasks() {
    kept_first_.assign(N_, 0);
    kept_count_.assign(N_, 0);
    kept_inst_.reserve(N_);
    // A node's kept instances depend only on its device sets and whether it is a collective:
    // found once per distinct (devs, devs2, collective), not once per node.
    // (One map lookup per run of nodes with the same key, not one per node.)
    std::unordered_map<uint64_t, std::vector<uint32_t>> kept_of[2];
    uint64_t last_key = UINT64_MAX;
    const std::vector<uint32_t>* last = nullptr;
    for (uint32_t n : cp_.topo_order) {
      const Node& nd = dag_.nodes[n];
      const bool coll = nd.kind == NodeKind::kCollective;
      const uint64_t key = (static_cast<uint64_t>(nd.devs) << 32) | nd.devs2;
      const uint64_t full_key = key ^ (coll ? uint64_t{1} << 63 : 0);  // devs < 2^31
      if (full_key == last_key) {
        kept_first_[n] = static_cast<uint32_t>(kept_inst_.size());
        for (uint32_t i : *last) kept_inst_.push_back(i);  // (mostly one: cheaper than insert)
        kept_count_[n] = static_cast<uint32_t>(last->size());
        continue;
      }
      auto [it, added] = kept_of[coll ? 1 : 0].try_emplace(key);
      std::vector<uint32_t>& insts = it->second;
      last_key = full_key;
      last = &insts;
      if (added) {
        for (int d : kept_devices_) {
          const uint32_t i = instance_on(n, d);
          if (i != UINT32_MAX) insts.push_back(i);
        }
        std::sort(insts.begin(), insts.end());
        insts.erase(std::unique(insts.begin(), insts.end()), insts.end());
      }
      kept_first_[n] = static_cast<uint32_t>(kept_inst_.size());
      kept_inst_.insert(kept_inst_.end(), insts.begin(), insts.end());
      kept_count_[n] = static_cast<uint32_t>(insts.size());
    }
    num_tasks_ = kept_inst_.size();
  }
  // The devices of an instance that are simulated (all without folding), in the instance's
  // order: for collectives, per device set and group, computed once (a 64-wide all-to-all has
  // one kept member per class when folded).
  std::span<const int> wanted_of(const Node& nd, uint32_t inst, std::span<const int> devs) {
    if (!only_) return devs;
    if (nd.kind != NodeKind::kCollective) {
      // One device or a transfer's two: the simulated ones, in order, are a subspan of them.
      STRETTO_ASSERT(devs.size() <= 2, "an instance of a compute, barrier or transfer node");
      const bool first = wanted(devs[0]), last = wanted(devs.back());
      if (devs.size() == 1) return first ? devs : devs.first(0);
      return first && last ? devs : first ? devs.first(1) : last ? devs.last(1) : devs.first(0);
    }
    auto& begin = wanted_begin_[nd.devs];
    auto& list = wanted_devs_[nd.devs];
    if (begin.empty()) {
      const auto& ds = dag_.device_sets[nd.devs];
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
  }
  uint32_t task_of(uint32_t n, uint32_t i) const {
    if (!only_) return base_[n] + i;
    for (uint32_t k = kept_first_[n]; k < kept_first_[n] + kept_count_[n]; ++k)
      if (kept_inst_[k] == i) return k;
    return UINT32_MAX;
  }

  // Sizes up front, so that the big arrays are written once and never regrow (a regrowth
  // copies gigabytes at the reference scale). Participants and links are exact; dependencies
  // get an upper bound, whose untouched tail costs address space only.
  void reserve() {
    size_t parts = 0, links = 0, deps = 0, comms = 0;
    for (uint32_t n = 0; n < N_; ++n) {
      const Node& nd = dag_.nodes[n];
      const size_t ninst = only_ ? kept_count_[n] : count_[n];
      if (nd.kind == NodeKind::kTransfer || nd.kind == NodeKind::kCollective) comms += ninst;
      const size_t per = nd.kind == NodeKind::kCompute    ? 1
                         : nd.kind == NodeKind::kTransfer ? 2
                         : nd.kind == NodeKind::kCollective
                             ? static_cast<size_t>(dag_.device_sets[nd.devs].group_size)
                             : 0;
      parts += ninst * per;
      links += ninst * per * 2;
      deps += ninst * std::max<size_t>(per, 1) *
              (dag_.pred_begin[n + 1] - dag_.pred_begin[n] + (itf_.host_compute ? 1 : 0));
    }
    p_.tasks.reserve(num_tasks_);
    p_.comms.reserve(comms);
    p_.participants.reserve(parts);
    p_.task_links.reserve(links);
    p_.deps.reserve(deps);
  }

  // ---- memory: the DAG's memory effects are the program's counters (one per dynamic
  // category), applied on every device an instance runs on ----
  void add_memory_counters() {
    p_.num_counters = static_cast<uint32_t>(compiler::MemCategory::kCount);
    p_.effect_begin.assign(N_ + 1, 0);
    for (const compiler::MemEffect& m : dag_.mem) ++p_.effect_begin[m.node + 1];
    for (size_t i = 0; i < N_; ++i) p_.effect_begin[i + 1] += p_.effect_begin[i];
    p_.effects.resize(dag_.mem.size());
    std::vector<uint32_t> fill(p_.effect_begin.begin(), p_.effect_begin.end() - 1);
    for (const compiler::MemEffect& m : dag_.mem)
      p_.effects[fill[m.node]++] = {static_cast<uint8_t>(m.cat), m.at_end, m.bytes};
  }

  // ---- per-device dispatch lists ----
  // A device's list is its class program (a subsequence of the global topological order),
  // restricted to the instances that involve it. Tasks are created in that same order, so each
  // task is appended to the lists of the devices it involves as it is created.
  void add_devices() {
    p_.devices.resize(D_);
    for (int d = 0; d < D_; ++d) {
      engine::DeviceProgram& dp = p_.devices[d];
      dp.dispatch_ns = cm_.dispatch_ns();
      dp.comm_sm_share = itf_.comm_sm_share;
      dp.comm_hbm_share = itf_.comm_hbm_share;
      const int c = cp_.class_of_device[d];
      // (the class program's length; compiled without class programs, the lists grow as needed)
      if (c >= 0 && wanted(d)) dp.dispatch.reserve(cp_.classes[c].program.size());
    }
    // Host cores: where a node holds more host-CPU devices than it has cores, its devices
    // time-share them (program.h); one host per such node.
    if (shares_host_cores(cp_, itf_)) {
      p_.host_share_efficiency = itf_.host_share_efficiency;
      const int per_node = cp_.plan.cluster.devices_per_node;
      for (int d = 0; d < D_; ++d) {
        const auto h = static_cast<uint32_t>(d / per_node);
        if (h >= p_.host_cores.size()) p_.host_cores.resize(h + 1, itf_.host_cores);
        p_.devices[d].host = h;
      }
    }
  }
  void dispatch(int d, uint32_t tid) {
    if (wanted(d) && cp_.class_of_device[d] >= 0) p_.devices[d].dispatch.push_back(tid);
  }

  // The per-lane dependency filter's and the host-thread models' state.
  void prepare_task_state() {
    lane_best_.assign(dag_.streams.size(), UINT32_MAX);
    num_streams_ = dag_.streams.size();
    recent_.assign(static_cast<size_t>(D_) * num_streams_ * kRecent, UINT32_MAX);
    last_compute_.assign(itf_.host_compute ? static_cast<size_t>(D_) : 0, UINT32_MAX);
    before_last_compute_ = last_compute_;
    cold_model_ = itf_.host_compute &&
                  std::any_of(itf_.host_cold_factor.begin(), itf_.host_cold_factor.end(),
                              [](double f) { return f != 1.0; });
    reuse_model_ = itf_.host_compute &&
                   std::any_of(itf_.host_reuse_factor.begin(), itf_.host_reuse_factor.end(),
                               [](double f) { return f != 1.0; });
    const bool host_model =
        itf_.host_compute && (itf_.host_op_ns > 0 || cold_model_ || reuse_model_);
    issued_since_.assign(host_model ? static_cast<size_t>(D_) : 0, 0);
    last_comm_.assign(cold_model_ ? static_cast<size_t>(D_) : 0, compiler::CommKind::kNone);
  }

  // What every instance of a node costs (the same for all: queried once).
  struct NodeCost {
    TaskKind kind = TaskKind::kCompute;
    int64_t work = 0, latency = 0;
    double cap = 0;
    bool mem_bound = false;
    bool inter_node = false;  // comm: the bottleneck is the inter-node link
  };
  NodeCost node_cost(uint32_t n, const Node& nd) {
    NodeCost c;
    if (nd.kind == NodeKind::kCompute) {
      const cost::ComputeCost& cc = compute_cost(nd);
      c.work = nd.tp_overlap == compiler::TpOverlap::kNone ? cc.ns : overlapped_work(n, nd, cc.ns);
      c.mem_bound = cc.mem_bound;
    } else if (nd.kind == NodeKind::kTransfer || nd.kind == NodeKind::kCollective) {
      // (by reference: a CommCost's copy copies its two strings)
      const cost::CommCost& cc = comm_cost(nd);
      c.work = cc.wire_bytes;
      c.latency = cc.latency_ns;
      c.cap = cc.rate_cap;
      c.inter_node = cc.inter_node;
    }
    c.kind = nd.kind == NodeKind::kCompute   ? TaskKind::kCompute
             : nd.kind == NodeKind::kBarrier ? TaskKind::kBarrier
                                             : TaskKind::kComm;
    return c;
  }

  // The memo's answer for a compute node. The nodes of one (op, pass) repeat once per
  // microbatch with the same key (mostly), so the last key and answer of each (op, pass) are
  // compared first, and only a different key is looked up in the memo's table.
  const cost::ComputeCost& compute_cost(const Node& nd) {
    const QueryKey<3> k = node_key(nd, model_);
    LastComputeCost& last =
        last_compute_cost_[static_cast<size_t>(nd.op) * kPassSlots + static_cast<size_t>(nd.tags.pass)];
    if (last.cost == nullptr || !(last.key == k))
      last = {k, &compute_memo_.get(k, [&] { return cm_.compute(queries_.compute(nd)); })};
    return *last.cost;
  }

  // tp_comm_overlap (compiler/dag.h TpOverlap): an overlapped collective costs its chunks
  // (cost::overlapped_comm_cost, memoised under its method), and the GEMM it overlaps takes
  // the pair's closed form (cost::overlapped_pair_ns) on its compute node. The asynchronous
  // input-gradient all-reduce (kAsync) costs the collective itself, and the weight-gradient
  // GEMM beside it cost::async_pair_ns, which holds its SM share (so the engine, seeing an
  // overlapped task, does not slow the GEMM a second time).
  const cost::CommCost& comm_cost(const Node& x) {
    // Every field the answer depends on (queries_.comm's and the memo keys' below): a node
    // with the same fields as the last one of its device set gets that one's answer, without
    // building its query. (Collectives of one device set repeat once per microbatch.)
    QueryKey<3> fk;
    fk.w = {static_cast<uint64_t>(x.kind) | static_cast<uint64_t>(x.comm) << 8 |
                static_cast<uint64_t>(x.tp_overlap) << 16 |
                static_cast<uint64_t>(x.tags.pass) << 24 | static_cast<uint64_t>(x.recompute) << 32,
            static_cast<uint64_t>(x.bytes),
            static_cast<uint64_t>(x.devs) | static_cast<uint64_t>(x.devs2) << 32};
    LastCommCost& last = last_comm_cost_[x.devs];
    if (last.cost == nullptr || !(last.key == fk)) last = {fk, &comm_cost_of_query(x)};
    return *last.cost;
  }
  const cost::CommCost& comm_cost_of_query(const Node& x) {
    const cost::CommQuery q = queries_.comm(x);
    if (x.tp_overlap == compiler::TpOverlap::kNone)
      return comm_memo_.get(key_of(q), [&] { return cm_.comm(q); });
    QueryKey<4> k = key_of(q);
    k.w[0] |= static_cast<uint64_t>(x.tp_overlap) << 24;
    if (x.tp_overlap == compiler::TpOverlap::kCpRing) {
      // context parallelism's ring (cost/cp_attention.h): the forward's steps or the backward's
      // (a recomputed forward's ring is tagged with its backward's pass)
      const bool bwd = x.tags.pass != Pass::kF && !x.recompute;
      k.w[0] |= static_cast<uint64_t>(bwd) << 32;
      return comm_memo_.get(k, [&] { return cost::cp_ring_comm_cost(cm_, q, bwd); });
    }
    return comm_memo_.get(k, [&] { return cost::overlapped_comm_cost(cm_, q, x.tp_overlap); });
  }
  int64_t overlapped_work(uint32_t n, const Node& nd, int64_t whole_ns) {
    const std::vector<const compiler::TpOverlapPair*>& prs = overlaps_of_.at(n);
    auto with = [&](compiler::OverlapPart part, int64_t gemm_ns) {
      for (const compiler::TpOverlapPair* pr : prs)
        if (pr->method == compiler::TpOverlap::kCpRing)
          return cp_pair_ns(nd, dag_.nodes[pr->comm], gemm_ns);
        else if (pr->part == part && pr->method == compiler::TpOverlap::kAsync)
          return cost::async_pair_ns(gemm_ns, comm_cost(dag_.nodes[pr->comm]).time_ns,
                                     cm_.interference().comm_sm_share);
        else if (pr->part == part)
          return cost::overlapped_pair_ns(pr->method, gemm_ns,
                                          comm_cost(dag_.nodes[pr->comm]).time_ns, nd.tp,
                                          cl_.device.sms);
      return gemm_ns;
    };
    if (prs.front()->part == compiler::OverlapPart::kWhole) return with(compiler::OverlapPart::kWhole, whole_ns);
    // One B node: its input-gradient and weight-gradient GEMMs, each with its own pair.
    auto part_ns = [&](Pass pass) {
      Node x = nd;
      x.tags.pass = pass;
      return compute_memo_.get(node_key(x, model_), [&] { return cm_.compute(queries_.compute(x)); })
          .ns;
    };
    // The asynchronous all-reduce alone: the whole B node plus what the collective adds to
    // its weight-gradient GEMM (not BI and BW priced apart, whose rounding would make the node
    // a few ns longer than the synchronous order's B + C when nothing hides: s = 1).
    if (prs.size() == 1 && prs.front()->method == compiler::TpOverlap::kAsync) {
      const int64_t bw = part_ns(Pass::kBW);
      return whole_ns + with(compiler::OverlapPart::kWeightGrad, bw) - bw;
    }
    return with(compiler::OverlapPart::kInputGrad, part_ns(Pass::kBI)) +
           with(compiler::OverlapPart::kWeightGrad, part_ns(Pass::kBW));
  }

  // Context parallelism: the attention node of a (attention, ring exchange) pair takes
  // cost/cp_attention.h's closed form of its cp steps (each its own kernel, priced on its
  // shape), each beside one ring step, on the SMs the ring's kernels leave.
  int64_t cp_pair_ns(const Node& att, const Node& ring, int64_t attn_ns) {
    const cost::CommQuery q = queries_.comm(ring);
    const int cp = q.group_size;
    const cost::CpSteps a =
        cost::cp_attention_steps(cm_, queries_.compute(att), attn_ns, cp);
    const double share = cm_.interference().comm_sm_share;
    if (ring.tags.pass == Pass::kF || ring.recompute)  // (a recomputed forward: F's steps)
      return cost::cp_attention_fwd_ns(cp, a, cost::cp_step_ns(cm_, q, 1), share);
    return cost::cp_attention_bwd_ns(cp, a, cost::cp_step_ns(cm_, q, 1),
                                     cost::cp_step_ns(cm_, q, 2), share);
  }

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
  static bool has_lane(const Node& x) {
    return x.kind == NodeKind::kCompute || x.kind == NodeKind::kCollective;
  }

  // The tasks of node n: one per (kept) instance.
  void add_node_tasks(uint32_t n) {
    const Node& nd = dag_.nodes[n];
    const NodeCost c = node_cost(n, nd);
    const bool own_lane = has_lane(nd);
    resolve_preds(n, nd, own_lane);
    const uint32_t ninst = only_ ? kept_count_[n] : count_[n];
    for (uint32_t j = 0; j < ninst; ++j) add_task(n, nd, j, c, own_lane);
  }

  // The node's predecessors, resolved once for all its instances; (a) applied here.
  void resolve_preds(uint32_t n, const Node& nd, bool own_lane) {
    preds_.clear();
    for (uint32_t k = dag_.pred_begin[n]; k < dag_.pred_begin[n + 1]; ++k) {
      const uint32_t pn = dag_.edges[dag_.pred[k]].from;
      const Node& pred = dag_.nodes[pn];
      const bool lane = has_lane(pred);
      if (lane && own_lane && pred.stream == nd.stream) continue;  // (a)
      PredInfo pi;
      pi.node = pn;
      pi.base = only_ ? 0 : base_[pn];
      pi.lane = lane;
      pi.stream = pred.stream;
      pi.group = pred.kind == NodeKind::kCollective ? dag_.device_sets[pred.devs].group_size : 1;
      pi.pos1 = positions(pred.devs);
      if (pred.kind == NodeKind::kTransfer && pred.devs2 != compiler::kNone)
        pi.pos2 = positions(pred.devs2);
      preds_.push_back(pi);
    }
  }

  // The task of the j-th (kept) instance of node n.
  void add_task(uint32_t n, const Node& nd, uint32_t j, const NodeCost& c, bool own_lane) {
    const uint32_t tid = (only_ ? kept_first_[n] : base_[n]) + j;
    const uint32_t i = only_ ? kept_inst_[tid] : j;
    STRETTO_ASSERT(tid == p_.tasks.size(), "tasks are numbered in order");
    Task& t = p_.tasks.emplace_back();
    t.node = n;
    t.work = c.work;
    t.mem_bound = c.mem_bound;
    t.overlapped = nd.tp_overlap != compiler::TpOverlap::kNone && c.kind == TaskKind::kComm;
    t.kind = c.kind;
    const std::span<const int> devs = involved(nd, i);
    // the simulated ones among them (all of them without folding)
    const std::span<const int> kept = wanted_of(nd, i, devs);
    add_participants(t, nd, devs, kept);
    if (c.kind != TaskKind::kBarrier) {
      // each kept device once (devs[0], if kept, is kept[0]; its repeats are skipped)
      for (size_t k = 0; k < kept.size(); ++k)
        if (k == 0 || kept[k] != devs[0]) dispatch(kept[k], tid);
    }
    add_comm(t, nd, devs, kept, c);
    // deps, device by device: a lane-less dependency as it is; of those on one lane (the
    // predecessor's stream on this device) only the highest id (b); then each task once.
    // Written straight into p.deps (reserved for the worst case, so it never regrows).
    const size_t dep_begin = p_.deps.size();
    for (int d : kept) add_deps_on(d, nd, own_lane, c.kind);
    apply_host_effects(t, nd, tid, devs, kept);
    dedupe_deps(dep_begin);
    t.dep_begin = static_cast<uint32_t>(dep_begin);
  }

  // With replica folding, only simulated devices take part.
  void add_participants(Task& t, const Node& nd, std::span<const int> devs,
                        std::span<const int> kept) {
    t.part_begin = static_cast<uint32_t>(p_.participants.size());
    if (nd.kind == NodeKind::kCompute) {
      p_.participants.push_back({static_cast<uint32_t>(devs[0]), nd.stream});
    } else if (nd.kind == NodeKind::kTransfer) {
      if (wanted(devs[0]))
        p_.participants.push_back(
            {static_cast<uint32_t>(devs[0]), peer_stream_id(nd.stream, devs[1])});
      if (wanted(devs[1]))
        p_.participants.push_back(
            {static_cast<uint32_t>(devs[1]), peer_stream_id(nd.stream, devs[0])});
    } else if (nd.kind == NodeKind::kCollective) {
      for (int d : kept) p_.participants.push_back({static_cast<uint32_t>(d), nd.stream});
    }
    t.part_count = static_cast<uint32_t>(p_.participants.size()) - t.part_begin;
  }

  // links (comm only): the bottleneck class of each member; and the comm task's CommSpec
  void add_comm(Task& t, const Node& nd, std::span<const int> devs, std::span<const int> kept,
                const NodeCost& c) {
    const auto link_begin = static_cast<uint32_t>(p_.task_links.size());
    if (nd.kind == NodeKind::kTransfer && t.work > 0) {
      bool inter = topo_.node_of(devs[0]) != topo_.node_of(devs[1]);
      p_.task_links.push_back(link_id(devs[0], inter ? 2 : 0));
      p_.task_links.push_back(link_id(devs[1], inter ? 3 : 1));
    } else if (nd.kind == NodeKind::kCollective && t.work > 0) {
      int lk = c.inter_node ? 2 : 0;
      for (int d : kept) {
        p_.task_links.push_back(link_id(d, lk));
        p_.task_links.push_back(link_id(d, lk + 1));
      }
    }
    if (c.kind == TaskKind::kComm) {
      t.comm = static_cast<uint32_t>(p_.comms.size());
      p_.comms.push_back({c.latency, c.cap, link_begin,
                          static_cast<uint32_t>(p_.task_links.size()) - link_begin});
    }
  }

  // The dependencies of a task on device d, appended to p.deps.
  void add_deps_on(int d, const Node& nd, bool own_lane, TaskKind kind) {
    // (c): what earlier tasks of this lane depended on; this task's kept dependencies join
    uint32_t* const mem =
        own_lane ? &recent_[(static_cast<size_t>(d) * num_streams_ + nd.stream) * kRecent]
                 : nullptr;
    auto keep = [&](uint32_t id) {
      if (mem) {
        if (std::find(mem, mem + kRecent, id) != mem + kRecent) return;  // implied
        std::copy_backward(mem, mem + kRecent - 1, mem + kRecent);
        mem[0] = id;
      }
      p_.deps.push_back(id);
    };
    for (const PredInfo& pr : preds_) {
      int32_t pi = pr.pos1[d];
      if (pi < 0 && pr.pos2) pi = pr.pos2[d];
      if (pi < 0) continue;
      const uint32_t inst = static_cast<uint32_t>(pr.group == 1 ? pi : pi / pr.group);
      const uint32_t ptid = only_ ? task_of(pr.node, inst) : pr.base + inst;
      if (ptid == UINT32_MAX) continue;
      if (!pr.lane) {
        keep(ptid);
      } else if (lane_best_[pr.stream] == UINT32_MAX) {
        lane_best_[pr.stream] = ptid;
        lanes_touched_.push_back(pr.stream);
      } else {
        lane_best_[pr.stream] = std::max(lane_best_[pr.stream], ptid);
      }
    }
    for (uint16_t st : lanes_touched_) {
      keep(lane_best_[st]);
      lane_best_[st] = UINT32_MAX;
    }
    lanes_touched_.clear();
    // The device's host thread issues this task only once it has run its previous compute
    // task (and waited for that task's inputs): a compute op blocks the thread.
    // Megatron-LM's asynchronous input-gradient all-reduce (TpOverlap::kAsync) is launched
    // between its B node's two GEMMs, so it waits for the compute task before that B node,
    // not for the B node, whose time already holds it (cost::async_pair_ns): after the B node
    // it would run a second time, on its stream, beyond the compute.
    if (!last_compute_.empty() && kind != TaskKind::kBarrier) {
      uint32_t host = last_compute_[static_cast<size_t>(d)];
      if (host != UINT32_MAX && kind == TaskKind::kComm &&
          nd.tp_overlap == compiler::TpOverlap::kAsync) {
        const auto it = async_gemm_of_.find(static_cast<uint32_t>(&nd - dag_.nodes.data()));
        if (it != async_gemm_of_.end() && p_.tasks[host].node == it->second)
          host = before_last_compute_[static_cast<size_t>(d)];
      }
      if (host != UINT32_MAX) keep(host);
    }
  }

  // Host-thread compute (cost::Interference::host_compute): a device's compute task becomes
  // the one its later tasks wait for, and pays for the host bookkeeping of the ops issued
  // since its previous one (host_op_ns), runs slower after communication work (the last
  // one's host_cold_factor) and on stale activations (host_reuse_factor).
  void apply_host_effects(Task& t, const Node& nd, uint32_t tid, std::span<const int> devs,
                          std::span<const int> kept) {
    const TaskKind kind = t.kind;
    if (!last_compute_.empty() && kind == TaskKind::kCompute && wanted(devs[0])) {
      before_last_compute_[static_cast<size_t>(devs[0])] = last_compute_[static_cast<size_t>(devs[0])];
      last_compute_[static_cast<size_t>(devs[0])] = tid;
    }
    if (!issued_since_.empty() && kind == TaskKind::kCompute && wanted(devs[0])) {
      const auto d0 = static_cast<size_t>(devs[0]);
      int64_t& since = issued_since_[d0];
      if (cold_model_ && since > 0) {
        const double f = itf_.host_cold_factor[static_cast<size_t>(last_comm_[d0])];
        if (f != 1.0) t.work = static_cast<int64_t>(std::ceil(static_cast<double>(t.work) * f));
      }
      if (reuse_model_) {
        const double f = itf_.host_reuse_factor[stale_.visit(devs[0], nd, model_)];
        if (f != 1.0) t.work = static_cast<int64_t>(std::ceil(static_cast<double>(t.work) * f));
      }
      t.work += itf_.host_op_ns * (1 + since);
      since = 0;
    } else if (!issued_since_.empty() && kind == TaskKind::kComm) {
      for (int d : kept) {
        ++issued_since_[static_cast<size_t>(d)];
        if (cold_model_) last_comm_[static_cast<size_t>(d)] = nd.comm;
      }
    }
  }

  // Each dependency of the task whose list starts at dep_begin once. The engine does not need
  // them sorted: short lists keep their order (a pairwise check, cheaper than sorting millions
  // of short lists), long ones (wide collectives) are sorted.
  void dedupe_deps(size_t dep_begin) {
    uint32_t* const ids = p_.deps.data() + dep_begin;
    const size_t num_ids = p_.deps.size() - dep_begin;
    if (num_ids > 16) {
      std::sort(ids, ids + num_ids);
      p_.deps.resize(static_cast<size_t>(std::unique(ids, ids + num_ids) - p_.deps.data()));
    } else if (num_ids > 1) {
      size_t kept = 1;
      for (size_t a = 1; a < num_ids; ++a) {
        if (std::find(ids, ids + kept, ids[a]) == ids + kept) ids[kept++] = ids[a];
      }
      p_.deps.resize(dep_begin + kept);
    }
  }

  const CompiledPlan& cp_;
  const compiler::TrainingDag& dag_;
  const ModelGraph& model_;
  const plan::ClusterSpec& cl_;
  const cost::CostModel& cm_;
  const std::vector<char>* only_;  // simulated devices (replica folding); null: all
  const Topology topo_;
  const int D_;
  const size_t N_;
  const cost::Interference itf_;
  Program p_;
  // streams
  std::map<std::string, uint16_t> sid_;
  std::vector<uint16_t> peer_stream_;  // by (stream, peer)
  // task numbering
  std::vector<uint32_t> base_, count_;      // by node: first task, instances
  std::vector<std::vector<int32_t>> pos_;   // by device set: each device's position
  int pair_[2] = {0, 0};                    // involved(): a transfer's two devices
  std::vector<int> kept_devices_;
  std::vector<uint32_t> kept_first_, kept_count_, kept_inst_;
  size_t num_tasks_ = 0;
  std::vector<std::vector<uint32_t>> wanted_begin_;  // wanted_of(), by device set
  std::vector<std::vector<int>> wanted_devs_;
  // dependencies
  struct PredInfo {
    uint32_t node = 0;
    bool lane = false;
    uint16_t stream = 0;
    int32_t group = 1;
    const int32_t* pos1 = nullptr;  // position of each device in the predecessor's device set
    const int32_t* pos2 = nullptr;  // transfer: in its receiver set
    uint32_t base = 0;              // task id of its instance 0 (without folding)
  };
  std::vector<PredInfo> preds_;            // of the node being built
  std::vector<uint32_t> lane_best_;        // by stream: highest dep
  std::vector<uint16_t> lanes_touched_;
  // (c): per (device, stream) lane, the last kRecent dependencies of its tasks, newest first.
  static constexpr size_t kRecent = 4;
  size_t num_streams_ = 0;
  std::vector<uint32_t> recent_;
  // Host-thread compute (cost::Interference::host_compute): per device, its last compute task
  // so far in dispatch order; every later task of the device depends on it.
  std::vector<uint32_t> last_compute_;
  // ... and the one before it (the thread issues an asynchronous input-gradient all-reduce
  // inside its B node: it waits for that one)
  std::vector<uint32_t> before_last_compute_;
  // ... and its host thread's bookkeeping (cost::Interference::host_op_ns): per device, the ops
  // issued since its last compute op; the next compute op pays for them and for itself.
  // ... and the kind of the last of them (cost::Interference::host_cold_factor): the next
  // compute op runs that much slower, its operands displaced by the host's communication work.
  // ... and whether its backward ops reuse stale activations (cost::Interference::
  // host_reuse_factor; the rule is cost::StaleActivations, shared with `stretto profile`).
  bool cold_model_ = false, reuse_model_ = false;
  cost::StaleActivations stale_;
  std::vector<int64_t> issued_since_;
  std::vector<compiler::CommKind> last_comm_;
  CostQueries queries_;
  QueryMemo<QueryKey<3>, cost::ComputeCost> compute_memo_;
  // compute_cost's last key and answer by (op, pass): the memo's values do not move
  static constexpr size_t kPassSlots = 5;  // plan::Pass: kNone, kF, kB, kBI, kBW
  static_assert(static_cast<size_t>(plan::Pass::kBW) + 1 == kPassSlots);
  struct LastComputeCost {
    QueryKey<3> key;
    const cost::ComputeCost* cost = nullptr;
  };
  std::vector<LastComputeCost> last_compute_cost_;
  QueryMemo<QueryKey<4>, cost::CommCost> comm_memo_;
  struct LastCommCost {  // comm_cost's last key and answer by device set
    QueryKey<3> key;
    const cost::CommCost* cost = nullptr;
  };
  std::vector<LastCommCost> last_comm_cost_;
  std::unordered_map<uint32_t, std::vector<const compiler::TpOverlapPair*>> overlaps_of_;  // by GEMM node
  std::unordered_map<uint32_t, uint32_t> async_gemm_of_;  // kAsync pairs: GEMM node by comm node
};

}  // namespace

Program build_program(const CompiledPlan& cp, const cost::CostModel& cm,
                      const std::vector<char>* only) {
  return ProgramBuilder(cp, cm, only).build();
}

std::optional<Program> recost_program(Program built, const CompiledPlan& cp,
                                      const cost::CostModel& cm,
                                      const std::vector<char>* only) {
  return ProgramBuilder(cp, cm, only).recost(std::move(built));
}

}  // namespace stretto::sim
