// Directives -> global training DAG (see dag.h, compiler.h).
//
// Passes: expand model; determine microbatches (split); place every (op, microbatch) unit on
// devices (place), widen by tensor parallelism (shard_tensor), check replication (replicate)
// and expert sharding (shard); create forward and backward compute nodes (a backward is split
// into BI + BW where an order filter names BI or BW for it); insert communication:
// send/recv across devices, EP all-to-alls, TP collectives, ZeRO-3 parameter gathers, DP
// gradient reduction per bucket; then order + lower + validate (lower.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <span>

#include "internal.h"
#include "stretto/pipelines/builders.h"
#include "stretto/plan/estimate.h"
#include "stretto/pipelines/layout_base.h"

namespace stretto::compiler {

using plan::Directive;
using plan::DirectiveOp;
using plan::Filter;
using plan::JsonSource;
using plan::ModelSpec;
using plan::OptimizerSpec;
using plan::Pass;
using plan::TagKey;
using plan::Tags;

std::string_view comm_kind_name(CommKind k) {
  static constexpr std::string_view kN[] = {"none",           "send/recv",  "all-reduce",
                                            "reduce-scatter", "all-gather", "all-to-all"};
  return kN[static_cast<size_t>(k)];
}
std::string_view comm_purpose_name(CommPurpose p) {
  static constexpr std::string_view kN[] = {"none",        "activation",   "gradient",
                                            "grad-reduce", "param-gather", "param-sync",
                                            "dispatch",    "combine",      "tensor-parallel",
                                            "grad-norm",   "tied-grad",    "loss-reduce",
                                            "context-parallel"};
  return kN[static_cast<size_t>(p)];
}
std::string_view tp_overlap_name(TpOverlap m) {
  static constexpr std::string_view kN[] = {"none", "ring exchange", "pipeline", "bulk",
                                            "context-parallel ring", "async"};
  return kN[static_cast<size_t>(m)];
}

void TrainingDag::finalize() {
  const size_t n = nodes.size();
  succ_begin.assign(n + 1, 0);
  pred_begin.assign(n + 1, 0);
  for (const auto& e : edges) ++succ_begin[e.from + 1], ++pred_begin[e.to + 1];
  for (size_t i = 0; i < n; ++i)
    succ_begin[i + 1] += succ_begin[i], pred_begin[i + 1] += pred_begin[i];
  succ.resize(edges.size());
  pred.resize(edges.size());
  std::vector<uint32_t> sf(succ_begin.begin(), succ_begin.end() - 1);
  std::vector<uint32_t> pf(pred_begin.begin(), pred_begin.end() - 1);
  for (uint32_t i = 0; i < edges.size(); ++i) {
    succ[sf[edges[i].from]++] = edges[i].to;
    pred[pf[edges[i].to]++] = i;
  }
  // Memory effects by node, stably (a counting sort: node ids are dense).
  auto by_node = [](const MemEffect& a, const MemEffect& b) { return a.node < b.node; };
  if (std::is_sorted(mem.begin(), mem.end(), by_node)) return;
  std::vector<uint32_t> at(n + 1, 0);
  for (const MemEffect& m : mem) ++at[m.node + 1];
  for (size_t i = 0; i < n; ++i) at[i + 1] += at[i];
  std::vector<MemEffect> sorted(mem.size());
  for (const MemEffect& m : mem) sorted[at[m.node]++] = m;
  mem = std::move(sorted);
}

namespace {
std::string without_pass(Tags t) {
  t.pass = Pass::kNone;
  return t.str();
}
}  // namespace

std::string TrainingDag::node_name(uint32_t id, const ModelGraph& m) const {
  const Node& n = nodes[id];
  auto devs = [&](uint32_t s) {
    const auto& d = device_sets[s].devices;
    std::string out;
    for (size_t i = 0; i < d.size() && i < 8; ++i) out += (i ? "," : "") + std::to_string(d[i]);
    if (d.size() > 8) out += fmt::format(",...({} devices)", d.size());
    return d.size() == 1 ? "device " + out : "devices [" + out + "]";
  };
  std::string op = n.op != kNone && n.op < m.ops.size() ? m.ops[n.op].name : "";
  switch (n.kind) {
    case NodeKind::kCompute:
      if (n.recompute)
        return fmt::format("{} F (recompute, before {}) ({}) on {}", without_pass(n.tags),
                           plan::pass_name(n.tags.pass), op, devs(n.devs));
      return fmt::format("{} ({}) on {}", n.tags.str(), op, devs(n.devs));
    case NodeKind::kTransfer:
      return fmt::format("send {} {} -> {} ({}, from {} to {})", comm_purpose_name(n.purpose),
                         n.tags.str(), consumer_tags_of(n).str(), op, devs(n.devs), devs(n.devs2));
    case NodeKind::kCollective:
      return fmt::format("{} {} {}{}{} ({}) on {}", comm_kind_name(n.comm),
                         comm_purpose_name(n.purpose), n.tags.str(),
                         n.recompute ? " (recompute)" : "",
                         n.tp_overlap != TpOverlap::kNone
                             ? fmt::format(" (overlapped, {})", tp_overlap_name(n.tp_overlap))
                             : "",
                         op, devs(n.devs));
    case NodeKind::kBarrier:
      return fmt::format("order barrier of directive {}", n.directive);
  }
  return "?";
}

namespace detail {

Diagnostic diag_at(const JsonSource* src, const std::string& file, const std::string& ptr,
                   std::string msg, std::string hint, int directive) {
  Diagnostic d = src ? src->error_at(ptr, std::move(msg), std::move(hint))
                     : Diagnostic{Severity::kError,
                                  std::move(msg),
                                  SourceLoc{file, 0, 0, ptr},
                                  -1,
                                  std::move(hint),
                                  {},
                                  {}};
  d.directive = directive;
  return d;
}

}  // namespace detail

namespace {

using detail::diag_at;

constexpr int64_t kMB = 1 << 20;

// Whether two device lists share a device.
bool meets(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  for (int32_t d : a)
    if (std::find(b.begin(), b.end(), d) != b.end()) return true;
  return false;
}

struct UnitInfo {
  int32_t place = -1, repl = -1, shard = -1, tp_dir = -1;
  // placed devices (one per replica): the place directive's list, which the plan owns (not a
  // copy per unit: at 64 replicas x 256 microbatches the copies dominated allocation)
  std::span<const int> replicas;
  uint32_t devs = kNone;          // all devices running the unit (replica-major, TP inner)
  int tp = 1;
  bool split_bwd = false;
  uint32_t f = kNone, b = kNone, bi = kNone, bw = kNone;
  // recompute: mode (-1 none, else RecomputeMode), checkpoint segment, whether this op is its
  // last, bytes kept at the forward (its share of the segment input), recomputed output node
  // and the ZeRO-3 gather the recomputed forward made for the backward
  int8_t rc = -1;
  bool rc_last = false;
  int32_t rc_seg = -1;
  int64_t rc_kept = 0;
  uint32_t rf = kNone, rc_gather = kNone;
};

class Compiler {
 public:
  Compiler(CompiledPlan& cp, const JsonSource* src, Diagnostics& diags,
           bool template_microbatches)
      : cp_(cp), plan_(cp.plan), src_(src), diags_(diags), sets_(cp.dag.device_sets),
        template_microbatches_(template_microbatches) {}

  bool run();

 private:
  CompiledPlan& cp_;
  const plan::Plan& plan_;
  const JsonSource* src_;
  Diagnostics& diags_;
  detail::DeviceSetTable sets_;
  const bool template_microbatches_;  // CompileOptions::template_microbatches
  int M_ = 1;
  bool has_split_ = false;
  std::vector<UnitInfo> units_;  // index mb * nops + op
  std::vector<std::vector<uint32_t>> segments_;  // recompute checkpoint segments: ops, in order
  std::map<std::string, uint16_t, std::less<>> stream_ids_;
  uint32_t head_op_ = kNone, emb_op_ = kNone;  // tied embeddings on different devices
  bool tied_copy_ = false;

  size_t nops_ = 0;  // model ops (the optimizer pseudo-op appended later is not a unit)
  size_t nops() const { return nops_; }
  UnitInfo& unit(uint32_t op, int mb) { return units_[static_cast<size_t>(mb) * nops() + op]; }
  const UnitInfo& unit(uint32_t op, int mb) const {
    return units_[static_cast<size_t>(mb) * nops() + op];
  }
  Tags unit_tags(uint32_t op, int mb) const {
    Tags t = cp_.model.ops[op].tags;
    if (has_split_) t.set(TagKey::kMB, mb);
    return t;
  }
  // Filter matching of units without building each unit's tags: a unit's tags are its op's
  // with MB set to the microbatch (after a split), so `f.matches(unit_tags(o, mb))` is
  // "o in matching_ops(f) and mb_matches(f, mb)" (at 1,024 devices x 256 microbatches the
  // per-unit matches dominated the directive passes).
  std::vector<uint32_t> matching_ops(const Filter& f) const {
    std::vector<uint32_t> out;
    for (uint32_t o = 0; o < nops(); ++o) {
      const Tags& t = cp_.model.ops[o].tags;
      bool ok = !f.pass || *f.pass == t.pass;
      for (size_t i = 0; i < f.cond.size() && ok; ++i)
        if (i != static_cast<size_t>(TagKey::kMB) || !has_split_) ok = f.cond[i].matches(t.v[i]);
      if (ok) out.push_back(o);
    }
    return out;
  }
  bool mb_matches(const Filter& f, int mb) const {
    return !has_split_ || f.cond[static_cast<size_t>(TagKey::kMB)].matches(mb);
  }
  void error(const std::string& ptr, std::string msg, std::string hint, int directive,
             std::vector<DiagNote> notes = {}) {
    Diagnostic d = diag_at(src_, plan_.file, ptr, std::move(msg), std::move(hint), directive);
    d.notes = std::move(notes);
    diags_.push_back(std::move(d));
  }
  SourceLoc loc(const std::string& ptr) const {
    return src_ ? src_->loc(ptr) : SourceLoc{plan_.file, 0, 0, ptr};
  }
  uint16_t stream(std::string_view name) {
    // (find first: emplace would build, and free, a map node on every call)
    if (auto it = stream_ids_.find(name); it != stream_ids_.end()) return it->second;
    const auto id = static_cast<uint16_t>(cp_.dag.streams.size());
    stream_ids_.emplace(std::string(name), id);
    cp_.dag.streams.emplace_back(name);
    return id;
  }

  bool check_devices(const Directive& d);
  // Context parallelism (replicate's context_parallel; Megatron-Core --context-parallel-size):
  // one degree for the whole plan, checked before the model is expanded on s/cp tokens.
  int ctx_par_ = 1;
  plan::CpCommType ctx_comm_ = plan::CpCommType::kP2P;
  int32_t ctx_dir_ = -1;  // the first replicate directive with context_parallel > 1
  bool check_context_parallel();
  bool check_context_parallel_covers();
  std::string ctx_pointer(const char* key) const;
  uint32_t add_cp_ring(uint32_t o, int mb, Pass pass, bool bwd, const UnitInfo& u,
                       const std::vector<uint32_t>& deps, uint32_t attention);
  int64_t cp_kv_bytes(const UnitInfo& u) const;
  uint32_t cp_chain(CommKind kind, uint32_t o, int mb, Pass pass, const UnitInfo& u,
                    std::initializer_list<int64_t> bytes, std::vector<uint32_t>& deps);
  // (`bwd`: the attention's backward; a recomputed forward runs in a backward pass)
  void cp_before_attention(uint32_t o, int mb, Pass pass, bool bwd, const UnitInfo& u,
                           std::vector<uint32_t>& deps);
  uint32_t cp_after_attention(uint32_t o, int mb, Pass pass, bool bwd, const UnitInfo& u,
                              uint32_t c, const std::vector<uint32_t>& deps);
  std::vector<uint32_t> cp_groups_of_;
  uint32_t cp_groups(const UnitInfo& u);
  bool apply_split();
  bool apply_place();
  bool apply_tensor_parallel();
  // Megatron's refusal: attention is split by heads, so every TP degree divides heads and
  // kv_heads.
  bool check_heads_divisible();
  // Megatron's vocabulary padding (--make-vocab-size-divisible-by x TP): re-expands the model
  // with the padded vocabulary once the embedding's and head's TP degrees are known.
  void pad_vocab();
  bool check_replication();
  void mark_split_backward();
  bool apply_recompute();
  void tie_embeddings();
  int64_t act_bytes(uint32_t o, const UnitInfo& u, int64_t b) const;
  // build_nodes, in steps: each microbatch's forward then backward units (with their
  // transfers and collectives), then the DP gradient reductions and the optimizer step.
  void build_nodes();
  struct EmitState;  // what the forward and backward emitters share within one build_nodes
  struct DagSizes {
    size_t nodes, edges, mem;
  };
  void reserve_microbatches(const DagSizes& base);
  // Microbatch templates, by block: each microbatch is emitted as 2R blocks, the forward of
  // each run of consecutive ops of one PP region (runs_, ascending), then their backwards (runs
  // descending); a block's nodes, edges, memory effects and consumer tags are contiguous, and
  // its edges end in it. A block of a later microbatch whose units (and those of the
  // neighbours it reads) are alike an earlier microbatch's same block, up to which place
  // directive placed them, is a copy of that block (stamp_block), not emitted again.
  struct BlockClass {
    int mb;  // the microbatch (1 or later) whose emitted block the class copies
    size_t nodes, nodes_end, edges, edges_end, mem, mem_end, consumers, consumers_end;
    size_t overlaps = 0, overlaps_end = 0;  // its tp_comm_overlap pairs
    std::vector<uint32_t> ext;       // the microbatch's other blocks that edges into this one leave
    std::vector<uint32_t> from_ext;  // of each edge from another block, in order: its ext index
    std::vector<std::pair<uint32_t, uint32_t>> sent;  // (producer, devs) transfers made here
  };
  struct BlockAt {
    size_t nodes;  // where the block starts
    int32_t cls;   // its class (-1: microbatch 0, untemplated, or emitted with an error)
  };
  using DirectiveMap = std::vector<std::pair<int32_t, int32_t>>;  // template's -> this one's
  std::vector<std::pair<uint32_t, uint32_t>> runs_;               // [begin, end) of ops
  // Ops whose units each block reads, with what is read: all but split_bwd (a forward's own
  // ops and producers), all (a backward's own ops and consumers), devices only (a backward's
  // producers outside its run, which a recomputed forward reads).
  enum class Reads : uint8_t { kForward, kAll, kDevices };
  std::vector<std::vector<std::pair<uint32_t, Reads>>> block_reads_;
  std::vector<std::vector<BlockClass>> classes_;  // per block
  std::vector<BlockAt> block_at_;                 // mb * blocks + block
  std::vector<int32_t> last_class_;               // per block: the class it took last
  std::vector<uint32_t> ext_shift_;  // stamp_block's scratch: node shift of each ext block
  std::vector<int32_t> place_kind_;  // place directive -> the same (devices, stream) id
  size_t nblocks() const { return 2 * runs_.size(); }
  void plan_blocks(const std::vector<std::vector<uint32_t>>& consumers);
  void emit_block(EmitState& es, size_t k, int mb);
  bool alike(const UnitInfo& x, const UnitInfo& y, Reads r) const;
  bool same_units(int a, int b) const;
  struct MicrobatchAt {
    size_t nodes, edges, mem, consumers, overlaps;  // where a microbatch starts
  };
  void copy_previous(const MicrobatchAt& from, int mb);
  int32_t find_class(const EmitState& es, size_t k, int mb, DirectiveMap& dm) const;
  size_t block_holding(int mb, size_t k, size_t n) const;
  void add_class(const EmitState& es, size_t k, BlockClass b);
  void stamp_block(EmitState& es, size_t k, const BlockClass& c, int mb, const DirectiveMap& dm);
  uint16_t tp_stream(const UnitInfo& u);
  uint16_t ep_stream(const UnitInfo& u);
  uint32_t add_collective(CommKind kind, CommPurpose purpose, uint32_t op, int mb, Pass pass,
                          uint32_t groups, uint16_t strm, int64_t bytes, int32_t directive);
  uint32_t add_compute(uint32_t o, int mb, Pass pass);
  void comm_buffer(uint32_t n, int64_t bytes);
  uint32_t add_all_to_all(CommPurpose purpose, uint32_t o, int mb, Pass pass, const UnitInfo& u);
  uint32_t add_zero3_gather(uint32_t o, int mb, Pass pass, const UnitInfo& u);
  bool zero3(uint32_t o, const UnitInfo& u) const;
  // The bytes of op o's parameters one device of its TP group holds: a TP-split op's 1/tp, a
  // replicated op's (norms, biases of row-parallel layers) whole, as local_params counts them.
  int64_t local_param_bytes(uint32_t o, const UnitInfo& u) const;
  bool keeps_gathered(const UnitInfo& u) const;
  void note_pass(EmitState& es, uint32_t o, int mb, bool bwd, const UnitInfo& u, uint32_t node);
  void bound_gather(EmitState& es, uint32_t g, uint32_t o, int mb, bool bwd, const UnitInfo& u);
  uint32_t emit_forward(EmitState& es, uint32_t o, int mb, bool rc,
                        const std::vector<uint32_t>& trigger);
  void recomputed_inputs(uint32_t o, int mb, std::vector<uint32_t>& deps);
  void received_inputs(EmitState& es, uint32_t o, int mb, std::vector<uint32_t>& deps);
  uint32_t forward_gather(EmitState& es, uint32_t o, int mb, bool rc, Pass pass,
                          std::vector<uint32_t>& deps);
  uint32_t forward_outputs(uint32_t o, int mb, Pass pass, uint32_t c,
                           const std::vector<uint32_t>& deps);
  bool tp_overlapped(const UnitInfo& u, const ModelOp& op) const;
  void overlap_pair(uint32_t c, uint32_t comm, TpOverlap method, OverlapPart part);
  void emit_backward(EmitState& es, uint32_t o, int mb);
  void received_gradients(EmitState& es, uint32_t o, int mb, std::vector<uint32_t>& deps);
  uint32_t backward_gather(EmitState& es, uint32_t o, int mb, Pass bp);
  uint32_t backward_regather(uint32_t o, int mb, Pass bp, const std::vector<uint32_t>& deps);
  uint32_t backward_compute(EmitState& es, uint32_t o, int mb, uint32_t gather, uint32_t regather,
                            const std::vector<uint32_t>& deps);
  uint32_t backward_outputs(uint32_t o, int mb, Pass bp, uint32_t first, uint32_t regather,
                            const std::vector<uint32_t>& deps);
  void add_gradient_reductions(std::vector<uint32_t>& reduce_of_op,
                               std::vector<uint32_t>& param_syncs);
  void add_optimizer(const std::vector<uint32_t>& reduce_of_op,
                     const std::vector<uint32_t>& param_syncs);
  // Gradient clipping's groups: the devices `all` (those holding parameters) cut into the
  // groups one gradient-norm all-reduce each sums over (Megatron-Core's
  // grad_stats_parallel_group), by size: {group size, devices group after group}.
  std::map<int32_t, std::vector<int32_t>> grad_norm_groups(const std::vector<int32_t>& all);
  void compute_static_memory();

  uint32_t add_node(Node n) {
    cp_.dag.nodes.push_back(n);
    return static_cast<uint32_t>(cp_.dag.nodes.size() - 1);
  }
  void edge(uint32_t a, uint32_t b) { cp_.dag.edges.push_back({a, b, EdgeKind::kData, -1}); }
  void mem(uint32_t node, bool at_end, MemCategory c, int64_t bytes) {
    if (bytes) cp_.dag.mem.push_back({node, at_end, c, bytes});
  }
  // DP groups (same TP rank across replicas) and TP groups of a unit's device set. Both depend
  // on the set alone (it holds replicas x tp devices, group size tp), so each set's are
  // interned once and remembered by set id.
  std::vector<uint32_t> dp_groups_of_, tp_groups_of_;
  static uint32_t& memo_of(std::vector<uint32_t>& v, uint32_t set) {
    if (v.size() <= set) v.resize(set + 1, kNone);
    return v[set];
  }
  uint32_t dp_groups(const UnitInfo& u) {
    const auto& all = cp_.dag.device_sets[u.devs].devices;
    const size_t R = u.replicas.size();
    // (a set that is not exactly replicas x tp, which TP groups sharing a leader can give, is
    // not remembered: R is not a function of it)
    const bool exact = all.size() == R * static_cast<size_t>(u.tp);
    if (exact && memo_of(dp_groups_of_, u.devs) != kNone) return dp_groups_of_[u.devs];
    std::vector<int32_t> d;
    for (int t = 0; t < u.tp; ++t)
      for (size_t r = 0; r < R; ++r) d.push_back(all[r * u.tp + t]);
    const uint32_t id = sets_.intern(std::move(d), static_cast<int32_t>(R));
    if (exact) memo_of(dp_groups_of_, u.devs) = id;
    return id;
  }
  uint32_t tp_groups(const UnitInfo& u) {
    // (the set's group size is u.tp: apply_tensor_parallel interned it so)
    if (memo_of(tp_groups_of_, u.devs) != kNone) return tp_groups_of_[u.devs];
    const uint32_t id = sets_.intern(cp_.dag.device_sets[u.devs].devices, u.tp);
    memo_of(tp_groups_of_, u.devs) = id;
    return id;
  }
  uint32_t cross(uint32_t prod, uint32_t cons, int mb, Pass pass, CommPurpose purpose,
                 int64_t bytes);
  // Devices holding a copy of op o's parameters, in first-use order (each distinct device
  // set of its microbatches once: DualPipe places two copies).
  std::vector<int32_t> holders_of(uint32_t o) {
    std::vector<uint32_t> sets;
    for (int mb = 0; mb < M_; ++mb) {
      uint32_t s = unit(o, mb).devs;
      if (std::find(sets.begin(), sets.end(), s) == sets.end()) sets.push_back(s);
    }
    // Each device once, in first-seen order (a scratch mark per device, cleared after).
    std::vector<int32_t> out;
    for (uint32_t s : sets)
      for (int32_t d : cp_.dag.device_sets[s].devices) {
        if (static_cast<size_t>(d) >= holder_mark_.size()) holder_mark_.resize(static_cast<size_t>(d) + 1, 0);
        if (!holder_mark_[static_cast<size_t>(d)]) {
          holder_mark_[static_cast<size_t>(d)] = 1;
          out.push_back(d);
        }
      }
    for (int32_t d : out) holder_mark_[static_cast<size_t>(d)] = 0;
    return out;
  }
  std::vector<uint8_t> holder_mark_;
  // Op o's parameters as each holder keeps them: `count` after tensor and expert sharding
  // (before ZeRO), the data-parallel degree R that ZeRO divides by, and the replicate
  // directive (null when none). Shared by the static memory and the optimizer step.
  struct LocalParams {
    std::vector<int32_t> holders;
    int64_t count = 0;
    int64_t R = 1;
    const Directive* repl = nullptr;
  };
  LocalParams local_params(uint32_t o) {
    const ModelOp& op = cp_.model.ops[o];
    LocalParams lp;
    lp.holders = holders_of(o);
    const UnitInfo& u = unit(o, 0);
    const bool split = op.tp != TpSplit::kReplicated && op.tp != TpSplit::kNone;
    lp.count = split ? op.param_count / u.tp : op.param_count;
    if (u.shard >= 0) lp.count /= static_cast<int64_t>(u.replicas.size());
    lp.repl = u.repl >= 0 ? &plan_.schedule[u.repl] : nullptr;
    lp.R = u.shard >= 0 ? 1 : static_cast<int64_t>(lp.holders.size()) / u.tp;
    return lp;
  }
};

// Context parallelism: the replicate directives' context_parallel, one degree for the plan
// (Megatron-Core has one --context-parallel-size), with Megatron-Core's conditions: a
// transformer with fused (flash) attention (TE's DotProductAttention runs the CP ring), and a
// sequence cut into 2·cp chunks (the load-balanced causal split, get_batch_on_this_cp_rank).
bool Compiler::check_context_parallel() {
  for (const Directive& d : plan_.schedule) {
    if (d.op != DirectiveOp::kReplicate || d.context_parallel <= 1) continue;
    if (ctx_dir_ < 0) {
      ctx_dir_ = d.index;
      ctx_par_ = d.context_parallel;
      ctx_comm_ = d.cp_comm_type;
    } else if (d.cp_comm_type != ctx_comm_) {
      error(d.pointer + "/cp_comm_type",
            fmt::format("cp_comm_type {}, but an earlier replicate has {}",
                        plan::cp_comm_type_name(d.cp_comm_type),
                        plan::cp_comm_type_name(ctx_comm_)),
            "give every context-parallel replicate the same cp_comm_type", d.index,
            {{loc(plan_.schedule[ctx_dir_].pointer), "set here"}});
      return false;
    } else if (d.context_parallel != ctx_par_) {
      error(d.pointer + "/context_parallel",
            fmt::format("context_parallel = {}, but an earlier replicate has {}",
                        d.context_parallel, ctx_par_),
            "a plan has one context-parallel degree (Megatron-Core's --context-parallel-size)",
            d.index, {{loc(plan_.schedule[ctx_dir_].pointer), "set here"}});
      return false;
    }
  }
  if (ctx_par_ <= 1) return true;
  const Directive& d = plan_.schedule[ctx_dir_];
  const plan::ModelSpec& m = plan_.model;
  const std::string at = ctx_pointer("context_parallel");
  if (m.family != plan::ModelSpec::Family::kTransformer) {
    error(at,
          "context_parallel needs a transformer: a synthetic model has no sequence to split",
          "drop context_parallel", d.index);
    return false;
  }
  if (m.attention != plan::AttentionImpl::kFlash) {
    error(at,
          "context_parallel needs fused (flash) attention: Transformer Engine's attention runs "
          "the CP ring, and unfused attention has none",
          "set \"attention\": \"flash\" in \"model\", or drop context_parallel", d.index,
          {{loc(m.pointer), "the model"}});
    return false;
  }
  if (m.seq_len % (2 * ctx_par_) != 0) {
    error(at,
          fmt::format("context_parallel = {} with seq_len {}: context parallelism cuts each "
                      "sequence into 2·cp = {} chunks (load-balanced causal ring attention), "
                      "and {} does not divide it",
                      ctx_par_, m.seq_len, 2 * ctx_par_, 2 * ctx_par_),
          "pick cp so that 2·cp divides seq_len (Megatron-Core asserts the same)", d.index,
          {{loc(m.pointer + "/seq_len"), "seq_len"}});
    return false;
  }
  return true;
}

// Where the user wrote the plan's CP setting `key` (context_parallel or cp_comm_type): a
// layout's generated replicate points at the layout, whose keys are `cp` and `cp_comm_type`.
std::string Compiler::ctx_pointer(const char* key) const {
  const Directive& d = plan_.schedule[ctx_dir_];
  const bool from_layout = plan_.builder && plan_.builder->layout &&
                           d.pointer == plan_.builder->layout->pointer;
  const std::string k = key;
  return d.pointer + "/" + (from_layout && k == "context_parallel" ? "cp" : k);
}

// Every op is split over the CP group (the model was expanded on s/cp tokens): every unit is
// replicated by a directive with the plan's context_parallel. With cp_comm_type a2a every
// CP rank computes 1/cp of a TP rank's heads (TE's AttnFuncWithCPAndQKVOA2A asserts "The
// number of attention heads needs to be divisible by CP size!" of the query and KV heads).
bool Compiler::check_context_parallel_covers() {
  if (ctx_par_ <= 1) return true;
  for (int mb = 0; mb < M_; ++mb)
    for (uint32_t o = 0; o < nops(); ++o) {
      const UnitInfo& u = unit(o, mb);
      const plan::ModelSpec& m = plan_.model;
      if (ctx_comm_ == plan::CpCommType::kA2A && cp_.model.ops[o].kind == OpKind::kAttention &&
          ((m.heads / u.tp) % ctx_par_ != 0 || (m.kv_heads / u.tp) % ctx_par_ != 0)) {
        error(ctx_pointer("cp_comm_type"),
              fmt::format("cp_comm_type a2a with cp = {}: each TP rank's {} query and {} KV "
                          "heads are split over the CP ranks, and {} does not divide them",
                          ctx_par_, m.heads / u.tp, m.kv_heads / u.tp, ctx_par_),
              "pick cp dividing heads / tp and kv_heads / tp (Transformer Engine asserts the "
              "same), or use cp_comm_type p2p or all_gather",
              ctx_dir_, {{loc(m.pointer + "/kv_heads"), "the model's heads"}});
        return false;
      }
      if (u.repl >= 0 && plan_.schedule[u.repl].context_parallel == ctx_par_) continue;
      error(plan_.schedule[u.place].pointer,
            fmt::format("{} is not context-parallel, but the plan splits sequences over {} CP "
                        "ranks",
                        cp_.model.ops[o].name, ctx_par_),
            "context parallelism splits every op's tokens: replicate every region with the same "
            "context_parallel",
            u.place, {{loc(plan_.schedule[ctx_dir_].pointer + "/context_parallel"), "set here"}});
      return false;
    }
  return true;
}

// The CP groups of a unit's devices (replica-major, TP inner): for every cp consecutive
// replicas (one CP group of leaders) and TP rank, the cp devices in ring order.
uint32_t Compiler::cp_groups(const UnitInfo& u) {
  if (memo_of(cp_groups_of_, u.devs) != kNone) return cp_groups_of_[u.devs];
  const auto& all = cp_.dag.device_sets[u.devs].devices;
  const size_t R = u.replicas.size(), cpd = static_cast<size_t>(ctx_par_);
  const auto tp = static_cast<size_t>(u.tp);
  STRETTO_ASSERT(all.size() == R * tp && R % cpd == 0, "CP groups tile the unit's replicas");
  std::vector<int32_t> d;
  d.reserve(all.size());
  for (size_t g = 0; g < R / cpd; ++g)
    for (size_t t = 0; t < tp; ++t)
      for (size_t c = 0; c < cpd; ++c) d.push_back(all[(g * cpd + c) * tp + t]);
  const uint32_t id = sets_.intern(std::move(d), ctx_par_);
  memo_of(cp_groups_of_, u.devs) = id;
  return id;
}

// The ring exchange beside a CP rank's attention (forward, or backward: the pass says which):
// one send/recv per rank to its ring neighbour per step, `bytes` one K/V chunk (K and V of
// the rank's s/cp tokens, its kv_heads/tp heads); how many steps and what each carries is
// costmodel/cp_attention.h's. It starts with the attention (TE launches the first exchange
// before the first step), and the pair's closed form prices the attention node.
uint32_t Compiler::add_cp_ring(uint32_t o, int mb, Pass pass, bool bwd, const UnitInfo& u,
                               const std::vector<uint32_t>& deps, uint32_t attention) {
  const int64_t bytes = cp_kv_bytes(u);
  const uint32_t ring = add_collective(CommKind::kSendRecv, CommPurpose::kContextPar, o, mb,
                                       pass, cp_groups(u), stream("cp"), bytes, u.repl);
  for (uint32_t d : deps) edge(d, ring);
  // TE's double buffer: the chunk in use and the one arriving (backward: K/V and dK/dV each).
  comm_buffer(ring, (bwd ? 4 : 2) * bytes);
  overlap_pair(attention, ring, TpOverlap::kCpRing, OverlapPart::kWhole);
  return ring;
}

// One CP rank's K and V (its s/cp tokens, kv_heads/tp heads): the p2p ring's chunk.
int64_t Compiler::cp_kv_bytes(const UnitInfo& u) const {
  const plan::ModelSpec& m = plan_.model;
  return 2 * cp_.model.tokens_per_microbatch * (m.kv_heads / u.tp) * m.attention_head_dim() *
         plan::dtype_bytes(cp_.model.dtype);
}

// Collectives of `kind` over the CP groups on stream `cp`, one per tensor (`bytes`), issued in
// order after `deps`; deps becomes the last one. An all-to-all's receive buffer is allocated
// when it starts and kept (Transformer Engine's flash_attn_a2a_communicate allocates every
// output, torch.empty_like, before it returns them all): the caller frees them.
uint32_t Compiler::cp_chain(CommKind kind, uint32_t o, int mb, Pass pass, const UnitInfo& u,
                            std::initializer_list<int64_t> bytes, std::vector<uint32_t>& deps) {
  uint32_t last = kNone;
  for (int64_t b : bytes) {
    const uint32_t n = add_collective(kind, CommPurpose::kContextPar, o, mb, pass, cp_groups(u),
                                      stream("cp"), b, u.repl);
    for (uint32_t d : deps) edge(d, n);
    if (kind == CommKind::kAllToAll) mem(n, false, MemCategory::kCommBuffers, b);
    deps = {n};
    last = n;
  }
  return last;
}

// The CP communication a rank's attention waits for (Transformer Engine, context_parallel.py):
//  * all_gather (AttnFuncWithCPAndKVAllGather): K and V all-gathered over the CP group, one
//    all-gather each (gather_along_first_dim), before the forward and again before the
//    backward; the gathered K/V (cp·chunk) is held until the attention ends, and the backward
//    also holds the whole dK/dV (cp·chunk) from its start until it is reduce-scattered.
//  * a2a (AttnFuncWithCPAndQKVOA2A): all-to-alls of Q, K and V (forward) or of the output
//    gradient (backward), one per tensor, each rank's whole send buffer; what they receive
//    (the attention's inputs over the whole sequence, a/cp heads) is held until the attention
//    ends (then it is what the attention saves, or done with).
void Compiler::cp_before_attention(uint32_t o, int mb, Pass pass, bool bwd, const UnitInfo& u,
                                   std::vector<uint32_t>& deps) {
  const plan::ModelSpec& m = plan_.model;
  const int64_t kv = cp_kv_bytes(u), dt = plan::dtype_bytes(cp_.model.dtype);
  const int64_t q = cp_.model.tokens_per_microbatch * (m.heads / u.tp) * m.attention_head_dim() * dt;
  if (ctx_comm_ == plan::CpCommType::kAllGather) {
    const int64_t gathered = ctx_par_ * kv;  // K and V of the whole sequence
    const uint32_t first = static_cast<uint32_t>(cp_.dag.nodes.size());
    cp_chain(CommKind::kAllGather, o, mb, pass, u, {gathered / 2, gathered / 2}, deps);
    mem(first, false, MemCategory::kCommBuffers, gathered);
  } else if (ctx_comm_ == plan::CpCommType::kA2A) {
    if (!bwd)
      cp_chain(CommKind::kAllToAll, o, mb, pass, u, {q, kv / 2, kv / 2}, deps);
    else
      cp_chain(CommKind::kAllToAll, o, mb, pass, u, {q}, deps);
  }
}

// What follows a rank's attention node `c` (returns the node consumers wait for):
//  * p2p: the ring exchange beside it (add_cp_ring); c itself;
//  * all_gather: the forward frees the gathered K/V; the backward frees it and reduce-scatters
//    dK and dV (reduce_scatter_along_first_dim, one each, the whole cp·chunk input), then frees
//    them;
//  * a2a: frees what the all-to-alls before it received, at its end; all-to-all of the output
//    (forward) or of dQ, dK and dV (backward), whose receive buffers are held until the last
//    of them ends (one flash_attn_a2a_communicate call returns them together).
uint32_t Compiler::cp_after_attention(uint32_t o, int mb, Pass pass, bool bwd,
                                      const UnitInfo& u, uint32_t c,
                                      const std::vector<uint32_t>& deps) {
  const plan::ModelSpec& m = plan_.model;
  const int64_t kv = cp_kv_bytes(u), dt = plan::dtype_bytes(cp_.model.dtype);
  const int64_t q = cp_.model.tokens_per_microbatch * (m.heads / u.tp) * m.attention_head_dim() * dt;
  std::vector<uint32_t> after = {c};
  switch (ctx_comm_) {
    case plan::CpCommType::kP2P:
      add_cp_ring(o, mb, pass, bwd, u, deps, c);
      return c;
    case plan::CpCommType::kAllGather: {
      const int64_t gathered = ctx_par_ * kv;
      mem(c, true, MemCategory::kCommBuffers, -gathered);
      if (!bwd) return c;
      mem(c, false, MemCategory::kCommBuffers, gathered);  // dK, dV of the whole sequence
      const uint32_t last = cp_chain(CommKind::kReduceScatter, o, mb, pass, u,
                                     {gathered / 2, gathered / 2}, after);
      mem(last, true, MemCategory::kCommBuffers, -gathered);
      return last;
    }
    case plan::CpCommType::kA2A: {
      mem(c, true, MemCategory::kCommBuffers, -(bwd ? q : q + kv));  // received before it
      const uint32_t last =
          bwd ? cp_chain(CommKind::kAllToAll, o, mb, pass, u, {q, kv / 2, kv / 2}, after)
              : cp_chain(CommKind::kAllToAll, o, mb, pass, u, {q}, after);
      mem(last, true, MemCategory::kCommBuffers, -(bwd ? q + kv : q));
      return last;
    }
  }
  return c;
}

bool Compiler::check_devices(const Directive& d) {
  bool ok = true;
  auto check = [&](const std::vector<int>& v, const std::string& ptr) {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] >= cp_.num_devices) {
        error(ptr + "/" + std::to_string(i),
              fmt::format("device {} is out of range: the cluster has {} devices (0..{})", v[i],
                          cp_.num_devices, cp_.num_devices - 1),
              "raise cluster.nodes or cluster.devices_per_node, or use a smaller id", d.index);
        ok = false;
      }
  };
  check(d.devices, d.pointer + "/devices");
  for (size_t g = 0; g < d.device_groups.size(); ++g)
    check(d.device_groups[g],
          d.pointer + "/devices" +
              (d.device_groups.size() > 1 || !d.devices.empty() ? "/" + std::to_string(g) : ""));
  return ok;
}

bool Compiler::apply_split() {
  const Directive* split = nullptr;
  for (const auto& d : plan_.schedule) {
    if (d.op != DirectiveOp::kSplit) continue;
    if (split) {
      error(d.pointer, "a second 'split' directive", "split the whole DAG once into microbatches",
            d.index, {{loc(split->pointer), "the first split is here"}});
      return false;
    }
    split = &d;
    Filter all;
    if (!(d.filter.cond == all.cond) || d.filter.pass) {
      error(d.pointer + "/filter", "'split' must apply to the whole DAG",
            "use \"filter\": {} (partial splits are not supported)", d.index);
      return false;
    }
  }
  if (split) {
    has_split_ = true;
    M_ = split->num_microbatches;
  }
  cp_.num_microbatches = M_;
  return true;
}

bool Compiler::apply_place() {
  units_.assign(nops() * M_, UnitInfo{});
  std::vector<size_t> matched(plan_.schedule.size(), 0);
  for (const auto& d : plan_.schedule) {
    if (d.op != DirectiveOp::kPlace) continue;
    if (d.filter.pass) {
      error(d.filter.pointer + "/PASS", "'place' cannot select a pass",
            "forward and backward of a region run where the region is placed", d.index);
      continue;
    }
    const std::vector<uint32_t> fops = matching_ops(d.filter);
    for (int mb = 0; mb < M_; ++mb) {
      if (!mb_matches(d.filter, mb)) continue;
      for (uint32_t o : fops) {
        ++matched[d.index];
        UnitInfo& u = unit(o, mb);
        if (u.place >= 0) {
          const Directive& other = plan_.schedule[u.place];
          if (other.devices != d.devices) {
            error(d.pointer,
                  fmt::format("{} MB{} is placed twice, on different devices",
                              cp_.model.ops[o].name, mb),
                  "make the filters of the two place directives disjoint", d.index,
                  {{loc(other.pointer), "first placed here"}});
            return false;
          }
          continue;
        }
        u.place = d.index;
        u.replicas = d.devices;
      }
    }
  }
  bool ok = true;
  for (const auto& d : plan_.schedule)
    if (d.op == DirectiveOp::kPlace && !d.filter.pass && matched[d.index] == 0) {
      error(d.pointer + "/filter", fmt::format("filter {} matches nothing", d.filter.str()),
            fmt::format("the model has PP regions 0..{}{}", cp_.model.pp_regions - 1,
                        has_split_ ? fmt::format(" and microbatches 0..{}", M_ - 1) : ""),
            d.index);
      ok = false;
    }
  // Unplaced units, reported once per PP region (naming its first and last op).
  std::map<int32_t, std::pair<uint32_t, uint32_t>> unplaced;  // pp -> (first op, last op)
  std::map<int32_t, int> unplaced_mb;
  for (uint32_t o = 0; o < nops(); ++o)
    for (int mb = 0; mb < M_; ++mb)
      if (unit(o, mb).place < 0) {
        int32_t pp = cp_.model.ops[o].tags.pp();
        auto [it, added] = unplaced.emplace(pp, std::make_pair(o, o));
        it->second.second = o;
        if (added) unplaced_mb[pp] = mb;
        break;
      }
  for (const auto& [pp, r] : unplaced) {
    const auto& ops = cp_.model.ops;
    std::string span =
        r.first == r.second ? ops[r.first].name : ops[r.first].name + " .. " + ops[r.second].name;
    error("/schedule",
          fmt::format(
              "region PP{} ({}) is not placed{}", pp, span,
              has_split_ ? fmt::format(" (first unplaced microbatch: {})", unplaced_mb[pp]) : ""),
          fmt::format("add {{\"op\":\"place\",\"filter\":{{\"PP\":{}}},\"devices\":[...]}}", pp),
          -1);
    ok = false;
  }
  return ok;
}

bool Compiler::apply_tensor_parallel() {
  bool ok = true;
  for (const auto& d : plan_.schedule) {
    if (d.op != DirectiveOp::kShardTensor) continue;
    if (d.filter.pass) {
      error(d.filter.pointer + "/PASS", "'shard_tensor' cannot select a pass", "", d.index);
      ok = false;
      continue;
    }
    if (d.tp_comm_overlap && cp_.plan.cluster.device.sms <= 16) {
      error(d.pointer + "/tp_comm_overlap",
            fmt::format("'tp_comm_overlap' on a device of {} SMs: Transformer Engine's "
                        "communication kernels take 16",
                        cp_.plan.cluster.device.sms),
            "use a GPU preset (h100-sxm, h200, a100-sxm) or drop tp_comm_overlap", d.index);
      ok = false;
      continue;
    }
    // Transformer Engine's userbuffers exchange a TP group's shards over NVLink (CUDA IPC
    // buffers within one node): a TP group across nodes cannot overlap that way.
    if (d.tp_comm_overlap) {
      const int per_node = std::max(1, cp_.plan.cluster.devices_per_node);
      for (size_t g = 0; g < d.device_groups.size() && ok; ++g)
        for (int dev : d.device_groups[g])
          if (dev / per_node != d.device_groups[g][0] / per_node) {
            error(d.pointer + "/devices/" + std::to_string(g),
                  fmt::format("'tp_comm_overlap' with TP group {} across nodes (devices {} and "
                              "{}, {} devices per node)",
                              g, d.device_groups[g][0], dev, per_node),
                  "Transformer Engine's userbuffers overlap a TP group within one node "
                  "(NVLink): keep each TP group on one node, or drop tp_comm_overlap",
                  d.index);
            ok = false;
            break;
          }
      if (!ok) continue;
    }
    // Devices in some TP group of the directive (a flag per device; others are in none).
    std::vector<char> in_group(static_cast<size_t>(std::max(cp_.num_devices, 0)), 0);
    for (const auto& grp : d.device_groups)
      for (int dev : grp)
        if (dev >= 0 && dev < cp_.num_devices) in_group[static_cast<size_t>(dev)] = 1;
    int32_t checked_place = -2;  // the place directive whose replicas all passed the check
    size_t matched = 0;
    const std::vector<uint32_t> fops = matching_ops(d.filter);
    for (int mb = 0; mb < M_ && ok; ++mb)
      for (size_t fi = 0; fi < fops.size() && ok && mb_matches(d.filter, mb); ++fi) {
        const uint32_t o = fops[fi];
        ++matched;
        UnitInfo& u = unit(o, mb);
        if (u.tp_dir >= 0) {
          error(d.pointer, fmt::format("{} is tensor-sharded twice", cp_.model.ops[o].name), "",
                d.index, {{loc(plan_.schedule[u.tp_dir].pointer), "first sharded here"}});
          ok = false;
          break;
        }
        u.tp_dir = d.index;
        u.tp = static_cast<int>(d.device_groups[0].size());
        if (u.place == checked_place) continue;  // (the same replicas, already checked)
        for (int dev : u.replicas)
          if (dev < 0 || dev >= cp_.num_devices || !in_group[static_cast<size_t>(dev)]) {
            error(d.pointer + "/devices",
                  fmt::format("{} is placed on device {}, which is in no TP group of this "
                              "directive",
                              cp_.model.ops[o].name, dev),
                  "each placed device must belong to exactly one TP group (as its leader)", d.index,
                  {{loc(plan_.schedule[u.place].pointer), "placed here"}});
            ok = false;
            break;
          }
        if (ok) checked_place = u.place;
      }
    if (ok && matched == 0) {
      error(d.pointer + "/filter", fmt::format("filter {} matches nothing", d.filter.str()), "",
            d.index);
      ok = false;
    }
  }
  if (!ok) return false;
  // Device sets of every unit: replicas x TP group. Units with the same replicas and TP
  // directive share one set, so each distinct (directive, replicas) is built once, with the
  // groups of each device looked up in an index instead of searched (at 6,144 devices the
  // search over every group for every replica of every unit dominated compilation).
  std::map<std::pair<int32_t, std::vector<int32_t>>, uint32_t> memo;
  std::map<int32_t, std::vector<std::vector<uint32_t>>> groups_of;  // directive -> dev -> groups
  // Units of one (TP directive, place directive) have the same replicas (the place
  // directive's devices): looked up by the two indices first, without copying the replicas.
  std::map<std::pair<int32_t, int32_t>, uint32_t> by_directives;
  // (Consecutive units mostly share their directives: the last pair is tried first.)
  std::pair<int32_t, int32_t> last_dirs{INT32_MIN, INT32_MIN};
  uint32_t last_devs = 0;
  for (int mb = 0; mb < M_; ++mb)
    for (uint32_t o = 0; o < nops(); ++o) {
      UnitInfo& u = unit(o, mb);
      if (std::make_pair(u.tp_dir, u.place) == last_dirs) {
        u.devs = last_devs;
        continue;
      }
      if (auto it = by_directives.find({u.tp_dir, u.place}); it != by_directives.end()) {
        u.devs = it->second;
        last_dirs = it->first;
        last_devs = it->second;
        continue;
      }
      auto key = std::make_pair(u.tp_dir, std::vector<int32_t>(u.replicas.begin(), u.replicas.end()));
      if (auto it = memo.find(key); it != memo.end()) {
        by_directives.emplace(std::make_pair(u.tp_dir, u.place), it->second);
        u.devs = it->second;
        continue;
      }
      std::vector<int32_t> devs;
      if (u.tp_dir >= 0) {
        const Directive& d = plan_.schedule[u.tp_dir];
        auto& index = groups_of[u.tp_dir];
        if (index.empty()) {
          index.resize(static_cast<size_t>(cp_.num_devices));
          for (size_t g = 0; g < d.device_groups.size(); ++g)
            for (int x : d.device_groups[g])
              if (x >= 0 && x < cp_.num_devices &&
                  (index[x].empty() || index[x].back() != g))
                index[x].push_back(static_cast<uint32_t>(g));
        }
        for (int dev : u.replicas) {
          if (dev < 0 || dev >= cp_.num_devices) continue;
          for (uint32_t g : index[dev]) {
            // The placed device leads its group; the rest follow in the group's order.
            devs.push_back(dev);
            for (int x : d.device_groups[g])
              if (x != dev) devs.push_back(x);
          }
        }
      } else {
        devs.assign(u.replicas.begin(), u.replicas.end());
      }
      u.devs = sets_.intern(std::move(devs), u.tp);
      memo.emplace(std::move(key), u.devs);
      by_directives.emplace(std::make_pair(u.tp_dir, u.place), u.devs);
    }
  return true;
}

bool Compiler::check_replication() {
  bool ok = true;
  std::vector<size_t> matched(plan_.schedule.size(), 0);
  std::set<std::pair<int, int>> reported;  // (directive, place directive) already reported
  for (const auto& d : plan_.schedule) {
    if (d.op != DirectiveOp::kReplicate && d.op != DirectiveOp::kShard) continue;
    if (d.filter.pass) {
      error(d.filter.pointer + "/PASS",
            fmt::format("'{}' cannot select a pass", plan::directive_op_name(d.op)), "", d.index);
      ok = false;
      continue;
    }
    const std::vector<uint32_t> fops = matching_ops(d.filter);
    const std::vector<int32_t> want(d.devices.begin(), d.devices.end());
    int32_t equal_place = -2;  // a place directive whose devices are `want` (its units' replicas)
    for (int mb = 0; mb < M_; ++mb) {
      if (!mb_matches(d.filter, mb)) continue;
      for (uint32_t o : fops) {
        UnitInfo& u = unit(o, mb);
        ++matched[d.index];
        if (u.place != equal_place && std::ranges::equal(want, u.replicas)) equal_place = u.place;
        if (u.place != equal_place) {
          if (reported.insert({d.index, u.place}).second)
            error(d.pointer + "/devices",
                  fmt::format("{} lists devices that differ from where {} ({}) is placed",
                              plan::directive_op_name(d.op), cp_.model.ops[o].tags.str(),
                              cp_.model.ops[o].name),
                  "replicate/shard the same devices the region is placed on", d.index,
                  {{loc(plan_.schedule[u.place].pointer + "/devices"), "placed here"}});
          ok = false;
          continue;
        }
        if (d.op == DirectiveOp::kReplicate)
          u.repl = d.index;
        else {
          if (cp_.model.ops[o].tags.ep() == plan::kAbsent)
            continue;  // shard applies to EP ops only
          u.shard = d.index;
        }
      }
    }
  }
  for (const auto& d : plan_.schedule)
    if ((d.op == DirectiveOp::kReplicate || d.op == DirectiveOp::kShard) && !d.filter.pass &&
        matched[d.index] == 0) {
      error(d.pointer + "/filter", fmt::format("filter {} matches nothing", d.filter.str()), "",
            d.index);
      ok = false;
    }
  if (!ok) return false;
  for (int mb = 0; mb < M_ && ok; ++mb)
    for (uint32_t o = 0; o < nops(); ++o) {
      const UnitInfo& u = unit(o, mb);
      if (u.replicas.size() > 1 && u.repl < 0 && u.shard < 0) {
        error(plan_.schedule[u.place].pointer + "/devices",
              fmt::format("{} is placed on {} devices but neither replicated nor sharded",
                          cp_.model.ops[o].name, u.replicas.size()),
              "add a 'replicate' (data parallel) or, for expert blocks, a 'shard' directive "
              "over the same devices",
              u.place);
        ok = false;
        break;
      }
    }
  return ok;
}

int64_t Compiler::act_bytes(uint32_t o, const UnitInfo& u, int64_t b) const {
  // Split ops hold 1/tp of their activations; replicated ops (norms, residuals) hold all unless
  // sequence parallel. The input of a column-parallel GEMM (QKV, MLP up, head, shared experts)
  // is the full hidden state on every TP rank without SP (Korthikanti et al. 2022, Table 2:
  // sbh(10 + 24/t + 5as/(ht)), the 10 being replicated LayerNorm, QKV/MLP-up inputs and
  // dropout masks), and the 1/t sequence shard with SP.
  const ModelOp& op = cp_.model.ops[o];
  const bool sp = u.tp_dir >= 0 && plan_.schedule[u.tp_dir].sequence_parallel;
  if (sp) return b / u.tp;
  if (op.tp == TpSplit::kReplicated || op.tp == TpSplit::kNone) return b;
  const bool column_gemm = op.tp == TpSplit::kColumn &&
                           (op.kind == OpKind::kQKV || op.kind == OpKind::kMlpUp ||
                            op.kind == OpKind::kHead || op.kind == OpKind::kSharedExperts);
  if (column_gemm) {
    // The saved input is replicated; anything else the op saves is split.
    const int64_t in = std::min(b, op.saved_input_bytes);
    return in + (b - in) / u.tp;
  }
  return b / u.tp;
}

bool Compiler::apply_recompute() {
  bool ok = true;
  for (const auto& d : plan_.schedule) {
    if (d.op != DirectiveOp::kRecompute) continue;
    if (d.filter.pass) {
      error(d.filter.pointer + "/PASS", "'recompute' cannot select a pass",
            "a recomputed forward runs right before the backward that needs it", d.index);
      ok = false;
      continue;
    }
    size_t matched = 0;
    const std::vector<uint32_t> fops = matching_ops(d.filter);
    for (int mb = 0; mb < M_; ++mb)
      for (size_t fi = 0; fi < fops.size() && mb_matches(d.filter, mb); ++fi) {
        const uint32_t o = fops[fi];
        const OpKind k = cp_.model.ops[o].kind;
        const bool core = k == OpKind::kAttention || k == OpKind::kAttnScores ||
                          k == OpKind::kSoftmax || k == OpKind::kAttnContext;
        if (d.recompute == plan::RecomputeMode::kSelective && !core) continue;
        ++matched;
        unit(o, mb).rc = static_cast<int8_t>(d.recompute);
      }
    if (matched == 0) {
      error(d.pointer + "/filter", fmt::format("filter {} matches nothing", d.filter.str()),
            d.recompute == plan::RecomputeMode::kSelective
                ? "selective recompute applies to the core attention ops of the matched layers"
                : "recompute applies to model ops, e.g. {\"LAYER\": \"*\"} for every layer",
            d.index);
      ok = false;
    }
  }
  if (!ok) return false;
  // Checkpoint segments: runs of consecutive recomputed ops of one PP region and layer on the
  // same devices (Megatron's "uniform" method with one layer per checkpoint).
  for (int mb = 0; mb < M_; ++mb) {
    int32_t cur = -1;
    for (uint32_t o = 0; o < nops(); ++o) {
      UnitInfo& u = unit(o, mb);
      if (u.rc < 0) {
        cur = -1;
        continue;
      }
      const Tags& t = cp_.model.ops[o].tags;
      if (cur >= 0) {
        const uint32_t p = segments_[static_cast<size_t>(cur)].back();
        const UnitInfo& up = unit(p, mb);
        const Tags& tp = cp_.model.ops[p].tags;
        if (p + 1 != o || up.rc != u.rc || up.devs != u.devs || tp.pp() != t.pp() ||
            tp.get(TagKey::kLayer) != t.get(TagKey::kLayer))
          cur = -1;
      }
      if (cur < 0) {
        segments_.emplace_back();
        cur = static_cast<int32_t>(segments_.size() - 1);
      }
      segments_[static_cast<size_t>(cur)].push_back(o);
      u.rc_seg = cur;
    }
  }
  for (int mb = 0; mb < M_; ++mb)
    for (uint32_t o = 0; o < nops(); ++o) {
      UnitInfo& u = unit(o, mb);
      if (u.rc < 0) continue;
      const auto& seg = segments_[static_cast<size_t>(u.rc_seg)];
      u.rc_last = seg.back() == o;
      // The checkpoint keeps the segment's inputs: an op reading from outside the segment
      // keeps the input part of its saved activations.
      bool external = cp_.model.ops[o].inputs.empty();
      for (uint32_t i : cp_.model.ops[o].inputs)
        if (unit(i, mb).rc_seg != u.rc_seg) external = true;
      u.rc_kept = external ? act_bytes(o, u, std::min(cp_.model.ops[o].saved_input_bytes,
                                                       cp_.model.ops[o].saved_bytes))
                           : 0;
    }
  return true;
}

bool Compiler::check_heads_divisible() {
  const ModelSpec& m = plan_.model;
  if (m.family != ModelSpec::Family::kTransformer) return true;
  const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  std::vector<char> reported(plan_.schedule.size(), 0);
  bool ok = true;
  for (uint32_t o = 0; o < nops(); ++o) {
    const ModelOp& op = cp_.model.ops[o];
    if (op.kind != OpKind::kQKV && op.tp != TpSplit::kHeads) continue;
    for (int mb = 0; mb < M_; ++mb) {
      const UnitInfo& u = unit(o, mb);
      if (u.tp <= 1 || u.tp_dir < 0 || reported[static_cast<size_t>(u.tp_dir)]) continue;
      if (m.heads % u.tp == 0 && kv % u.tp == 0) continue;
      reported[static_cast<size_t>(u.tp_dir)] = 1;
      const bool heads_bad = m.heads % u.tp != 0;
      error(plan_.schedule[u.tp_dir].pointer,
            fmt::format("tensor parallelism of degree {} splits attention by heads, but {} ({}) "
                        "is not divisible by {}",
                        u.tp, heads_bad ? "heads" : "kv_heads", heads_bad ? m.heads : kv, u.tp),
            fmt::format("use a TP degree that divides both heads ({}) and kv_heads ({}), as "
                        "Megatron-LM requires",
                        m.heads, kv),
            u.tp_dir,
            {{loc(m.pointer + (heads_bad ? "/heads" : "/kv_heads")),
              heads_bad ? "heads is set here" : "kv_heads is set here"}});
      ok = false;
    }
  }
  return ok;
}

void Compiler::pad_vocab() {
  const ModelSpec& m = plan_.model;
  if (m.family != ModelSpec::Family::kTransformer || m.vocab <= 0) return;
  int tp = 1;
  for (uint32_t o = 0; o < nops(); ++o) {
    const OpKind k = cp_.model.ops[o].kind;
    if (k == OpKind::kEmbedding || k == OpKind::kHead || k == OpKind::kLoss)
      for (int mb = 0; mb < M_; ++mb) tp = std::max(tp, unit(o, mb).tp);
  }
  // Megatron-LM's _vocab_size_with_padding (plan::padded_vocab; make_vocab_size_divisible_by
  // defaults to 128 as Megatron's --make-vocab-size-divisible-by).
  const int64_t padded = plan::padded_vocab(m, tp);
  if (padded == m.vocab) return;
  ModelSpec spec = m;
  spec.vocab = padded;
  auto model =
      expand_model(spec, src_, ctx_par_, ctx_comm_, plan::eager_kernel_style(plan_.costmodel));
  STRETTO_ASSERT(model && model->ops.size() == cp_.model.ops.size(),
                 "the padded vocabulary changes sizes, not the ops");
  cp_.model = std::move(*model);
}

void Compiler::tie_embeddings() {
  // Tied input/output embeddings on different devices (first and last pipeline stage): the
  // head holds a copy of the embedding weights, and the two copies' gradients are all-reduced
  // before the optimizer step (Megatron's _allreduce_embedding_grads).
  if (!plan_.model.tie_embeddings) return;
  auto& ops = cp_.model.ops;
  for (uint32_t o = 0; o < nops(); ++o) {
    if (ops[o].kind == OpKind::kEmbedding && emb_op_ == kNone) emb_op_ = o;
    if (ops[o].kind == OpKind::kHead) head_op_ = o;
  }
  if (emb_op_ == kNone || head_op_ == kNone) return;
  const UnitInfo& ue = unit(emb_op_, 0);
  const UnitInfo& uh = unit(head_op_, 0);
  if (ue.devs == uh.devs) return;
  if (cp_.dag.device_sets[ue.devs].devices.size() != cp_.dag.device_sets[uh.devs].devices.size())
    return;  // reported as a stage-boundary mismatch elsewhere
  ops[head_op_].param_count = ops[emb_op_].param_count;
  ops[head_op_].param_bytes = ops[emb_op_].param_bytes;
  tied_copy_ = true;
}

void Compiler::mark_split_backward() {
  // A unit's backward is split into BI + BW when any order filter names BI or BW for it.
  // A zero-bubble or DualPipe order names each op's BI and BW once per microbatch, so the ops
  // of a filter are found once per distinct set of conditions (the MB one aside: matching_ops
  // does not read it when microbatches are split), and a filter of one MB marks that one.
  const auto kMB = static_cast<size_t>(TagKey::kMB);
  std::map<std::array<std::pair<int, int32_t>, 4>, std::vector<uint32_t>> ops_of;
  for (const auto& d : plan_.schedule) {
    if (d.op != DirectiveOp::kOrder) continue;
    for (const auto& g : d.groups)
      for (const auto& f : g) {
        if (!f.pass || (*f.pass != Pass::kBI && *f.pass != Pass::kBW)) continue;
        std::array<std::pair<int, int32_t>, 4> key;
        for (size_t i = 0; i < key.size(); ++i)
          key[i] = i == kMB && has_split_ ? std::pair{-1, 0}
                                          : std::pair{static_cast<int>(f.cond[i].kind),
                                                      f.cond[i].value};
        auto [it, added] = ops_of.try_emplace(key);
        if (added) {
          Filter nf = f;
          nf.pass.reset();
          it->second = matching_ops(nf);
        }
        const std::vector<uint32_t>& fops = it->second;
        const plan::TagCond& mbc = f.cond[kMB];
        const bool one = has_split_ && mbc.kind == plan::TagCond::kEquals;
        const int lo = one ? std::max(mbc.value, 0) : 0;
        const int hi = one ? static_cast<int>(std::min<int64_t>(int64_t{mbc.value} + 1, M_)) : M_;
        for (int mb = lo; mb < hi; ++mb) {
          if (!mb_matches(f, mb)) continue;
          for (uint32_t o : fops) unit(o, mb).split_bwd = true;
        }
      }
  }
}

// A transfer between two units' device sets (paired by index), or kNone if they coincide.
uint32_t Compiler::cross(uint32_t prod, uint32_t cons, int mb, Pass pass, CommPurpose purpose,
                         int64_t bytes) {
  const UnitInfo& up = unit(prod, mb);
  const UnitInfo& uc = unit(cons, mb);
  uint32_t src = purpose == CommPurpose::kGradient ? uc.devs : up.devs;
  uint32_t dst = purpose == CommPurpose::kGradient ? up.devs : uc.devs;
  if (src == dst) return kNone;
  Node n;
  n.kind = NodeKind::kTransfer;
  n.comm = CommKind::kSendRecv;
  n.purpose = purpose;
  const uint32_t from_op = purpose == CommPurpose::kGradient ? cons : prod;
  const uint32_t to_op = purpose == CommPurpose::kGradient ? prod : cons;
  n.tags = unit_tags(from_op, mb);
  n.tags.pass = pass;
  Tags ct = unit_tags(to_op, mb);
  ct.pass = pass;
  n.consumer = static_cast<uint32_t>(cp_.dag.consumer_tags.size());
  cp_.dag.consumer_tags.push_back(ct);
  n.op = prod;
  n.devs = src;
  n.devs2 = dst;
  const UnitInfo& place_side = purpose == CommPurpose::kGradient ? uc : up;
  n.directive = place_side.place;
  const Directive& pd = plan_.schedule[place_side.place];
  n.stream = stream(pd.stream.empty() ? "pp" : pd.stream);
  // With TP, every rank sends its 1/tp slice (Megatron's scatter-gather optimisation).
  n.bytes = bytes / std::max(1, up.tp);
  return add_node(n);
}

// What the forward and backward emitters of one build_nodes share.
struct Compiler::EmitState {
  std::vector<std::vector<uint32_t>> consumers;  // of each op
  // ZeRO-3 prefetch bound (FSDP): the gather of a unit (the param ops of one PP region and
  // layer) waits for the pass of the unit `prefetch + 1` places earlier in the same region pass
  // (forward: layers ascending; backward: descending), so at most prefetch + 1 units of a region
  // pass are gathered at once. A backward's first units wait for the region's forward of the
  // same microbatch. Only orders that data dependencies already imply are used, so the bound
  // never contradicts a schedule (across microbatches and regions the schedule decides). With a
  // split backward a unit's pass is its BI (its BW may be deferred, as zero-bubble schedules do).
  using SeqKey = std::tuple<uint32_t, bool, int, int32_t>;  // devs, backward, mb, PP
  std::map<SeqKey, std::vector<std::pair<int32_t, uint32_t>>> gather_seq;  // (layer, last pass)
  // (keyed by microbatch first, as `sent`: a copied block copies its microbatch's)
  std::map<std::tuple<int, int32_t, uint32_t>, uint32_t> fwd_last;  // (mb, PP, devs) -> last F
  // forward activation transfers: (mb, producer, receiving devs) -> transfer
  std::map<std::tuple<int, uint32_t, uint32_t>, uint32_t> sent;
  // Dependency lists of the forward and backward being emitted, reused (not one allocation per
  // unit and pass).
  std::vector<uint32_t> fwd_deps, bwd_deps;
};

void Compiler::build_nodes() {
  auto& dag = cp_.dag;
  stream("compute");
  EmitState es;
  es.consumers.resize(nops());
  for (uint32_t o = 0; o < nops(); ++o)
    for (uint32_t i : cp_.model.ops[o].inputs) es.consumers[i].push_back(o);
  plan_blocks(es.consumers);

  const DagSizes base{dag.nodes.size(), dag.edges.size(), dag.mem.size()};
  // The first microbatch: a few nodes and edges per op (F, B and their transfers), so it does
  // not grow from empty by doubling either.
  dag.nodes.reserve(base.nodes + 4 * nops() + 64);
  dag.edges.reserve(base.edges + 8 * nops() + 64);
  dag.mem.reserve(base.mem + 4 * nops() + 64);
  const size_t nb = nblocks();
  block_at_.assign(static_cast<size_t>(M_) * nb, BlockAt{0, -1});
  classes_.assign(nb, {});
  last_class_.assign(nb, -1);
  DirectiveMap dm;
  MicrobatchAt prev{};
  for (int mb = 0; mb < M_; ++mb) {
    if (mb == 1) reserve_microbatches(base);
    const MicrobatchAt here{dag.nodes.size(), dag.edges.size(), dag.mem.size(),
                            dag.consumer_tags.size(), dag.tp_overlaps.size()};
    // (microbatch 0 is never a template: under ZeRO-3 without resharding it alone gathers)
    const bool templated = template_microbatches_ && mb > 0;
    // A microbatch whose units are the previous one's, placed by the same directives, is a
    // copy of the previous one as a whole (no block of which was emitted with an error).
    const BlockAt* prev_blocks = &block_at_[static_cast<size_t>(std::max(mb - 1, 0)) * nb];
    if (templated && mb >= 2 &&
        std::all_of(prev_blocks, prev_blocks + nb, [](const BlockAt& b) { return b.cls >= 0; }) &&
        same_units(mb - 1, mb)) {
      copy_previous(prev, mb);
      cp_.blocks_stamped += static_cast<int>(nb);
      ++cp_.microbatches_stamped;
      prev = here;
      continue;
    }
    prev = here;
    size_t stamped = 0;
    for (size_t k = 0; k < nb; ++k) {
      BlockAt& at = block_at_[static_cast<size_t>(mb) * nb + k];
      at.nodes = dag.nodes.size();
      if (const int32_t c = templated ? find_class(es, k, mb, dm) : -1; c >= 0) {
        stamp_block(es, k, classes_[k][static_cast<size_t>(c)], mb, dm);
        at.cls = last_class_[k] = c;
        ++stamped;
        continue;
      }
      const BlockClass before{.mb = mb,
                              .nodes = dag.nodes.size(),
                              .edges = dag.edges.size(),
                              .mem = dag.mem.size(),
                              .consumers = dag.consumer_tags.size(),
                              .overlaps = dag.tp_overlaps.size()};
      const size_t errors = diags_.size();
      emit_block(es, k, mb);
      if (templated && diags_.size() == errors) add_class(es, k, before);
    }
    cp_.blocks_stamped += static_cast<int>(stamped);
    if (nb > 0 && stamped == nb) ++cp_.microbatches_stamped;
  }
  cp_.blocks = static_cast<int>(static_cast<size_t>(M_) * nb);

  std::vector<uint32_t> reduce_of_op(nops(), kNone);  // the reduction covering each op
  std::vector<uint32_t> param_syncs;                  // ZeRO-1/2 all-gathers after the step
  add_gradient_reductions(reduce_of_op, param_syncs);
  add_optimizer(reduce_of_op, param_syncs);
}

// The blocks of a microbatch (runs_, and which units each block reads), and which place
// directives place alike (the same devices and stream: DualPipe places each stage and
// microbatch with its own directive, alike for the microbatches of one direction).
void Compiler::plan_blocks(const std::vector<std::vector<uint32_t>>& consumers) {
  const auto& ops = cp_.model.ops;
  runs_.clear();
  std::set<int32_t> regions;
  bool distinct = true;
  for (uint32_t o = 0; o < nops(); ++o) {
    if (!runs_.empty() && ops[runs_.back().first].tags.pp() == ops[o].tags.pp()) {
      runs_.back().second = o + 1;
      continue;
    }
    distinct &= regions.insert(ops[o].tags.pp()).second;
    runs_.emplace_back(o, o + 1);
  }
  // (a region in two runs would share its prefetch bound's state between two blocks)
  if (!distinct) runs_.assign(1, {0u, static_cast<uint32_t>(nops())});
  const size_t R = runs_.size();
  std::vector<size_t> run_of(nops());
  for (size_t r = 0; r < R; ++r)
    for (uint32_t o = runs_[r].first; o < runs_[r].second; ++o) run_of[o] = r;
  block_reads_.assign(2 * R, {});
  std::vector<char> seen(nops(), 0);
  for (size_t r = 0; r < R; ++r)
    for (const bool forward : {true, false}) {
      auto& reads = block_reads_[forward ? r : 2 * R - 1 - r];
      auto add = [&](uint32_t o, Reads how) {
        if (!seen[o]) reads.emplace_back(o, how), seen[o] = 1;
      };
      const auto [first, end] = runs_[r];
      for (uint32_t o = first; o < end; ++o) add(o, forward ? Reads::kForward : Reads::kAll);
      for (uint32_t o = first; o < end && !forward; ++o)
        for (uint32_t c : consumers[o]) add(c, Reads::kAll);
      for (uint32_t o = first; o < end; ++o)
        for (uint32_t i : ops[o].inputs)
          if (run_of[i] != r) add(i, forward ? Reads::kForward : Reads::kDevices);
      for (const auto& read : reads) seen[read.first] = 0;
    }
  place_kind_.assign(plan_.schedule.size(), -1);
  std::map<std::pair<std::vector<int>, std::string>, int32_t> kinds;
  for (const plan::Directive& d : plan_.schedule)
    if (d.op == plan::DirectiveOp::kPlace)
      place_kind_[static_cast<size_t>(d.index)] =
          kinds.emplace(std::make_pair(d.devices, d.stream), static_cast<int32_t>(kinds.size()))
              .first->second;
}

void Compiler::emit_block(EmitState& es, size_t k, int mb) {
  const size_t R = runs_.size();
  if (k < R) {
    for (uint32_t o = runs_[k].first; o < runs_[k].second; ++o)
      unit(o, mb).f = emit_forward(es, o, mb, false, {});
    return;
  }
  const auto [first, end] = runs_[2 * R - 1 - k];
  for (uint32_t o = end; o-- > first;) emit_backward(es, o, mb);
}

// Whether a block emitted with unit x would be emitted alike with unit y, reading `r` of them
// (up to which of two alike place directives placed them).
bool Compiler::alike(const UnitInfo& x, const UnitInfo& y, Reads r) const {
  if (x.devs != y.devs) return false;
  if (r == Reads::kDevices) return true;
  if (x.place != y.place &&
      (x.place < 0 || y.place < 0 ||
       place_kind_[static_cast<size_t>(x.place)] != place_kind_[static_cast<size_t>(y.place)]))
    return false;
  if (x.repl != y.repl || x.shard != y.shard || x.tp_dir != y.tp_dir || x.tp != y.tp ||
      (r == Reads::kAll && x.split_bwd != y.split_bwd) || x.rc != y.rc || x.rc_last != y.rc_last ||
      x.rc_kept != y.rc_kept || (x.rc_seg < 0) != (y.rc_seg < 0))
    return false;
  // (each microbatch has its own checkpoint segments: alike when they hold the same ops)
  return x.rc_seg < 0 ||
         segments_[static_cast<size_t>(x.rc_seg)] == segments_[static_cast<size_t>(y.rc_seg)];
}

// Whether microbatches a and b have the same units, placed by the same directives (everything
// emit_forward and emit_backward read of them besides the microbatch number and node ids).
bool Compiler::same_units(int a, int b) const {
  for (uint32_t o = 0; o < nops(); ++o) {
    const UnitInfo& x = unit(o, a);
    const UnitInfo& y = unit(o, b);
    if (x.place != y.place || !alike(x, y, Reads::kAll)) return false;
  }
  return true;
}

// A class of block k that microbatch mb's block k is a copy of (-1: none), with the map of
// place directives; besides alike units, the blocks its edges come from must have the same
// layout in mb as in the template (the same class), and the transfers it makes must not
// exist in mb yet.
int32_t Compiler::find_class(const EmitState& es, size_t k, int mb, DirectiveMap& dm) const {
  const size_t nb = nblocks();
  const auto& cs = classes_[k];
  // (the class the block took last is tried first: alike microbatches come in runs; and the
  // cheap checks first)
  const size_t n = cs.size();
  const size_t last = last_class_[k] >= 0 ? static_cast<size_t>(last_class_[k]) : 0;
  for (size_t j = 0; j < n; ++j) {
    const size_t ci = (last + j) % n;
    const BlockClass& c = cs[ci];
    bool ok = true;
    for (size_t i = 0; i < c.ext.size() && ok; ++i) {
      const int32_t a = block_at_[static_cast<size_t>(c.mb) * nb + c.ext[i]].cls;
      ok = a >= 0 && a == block_at_[static_cast<size_t>(mb) * nb + c.ext[i]].cls;
    }
    for (size_t i = 0; i < c.sent.size() && ok; ++i)
      ok = !es.sent.contains({mb, c.sent[i].first, c.sent[i].second});
    bool places_differ = false;
    for (size_t i = 0; i < block_reads_[k].size() && ok; ++i) {
      const auto [o, how] = block_reads_[k][i];
      ok = alike(unit(o, c.mb), unit(o, mb), how);
      places_differ |= unit(o, c.mb).place != unit(o, mb).place;
    }
    // Which place directive of the template's stands for which of mb's: a function, or the
    // nodes could not say which directive placed them.
    dm.clear();
    for (size_t i = 0; i < block_reads_[k].size() && ok && places_differ; ++i) {
      const auto [o, how] = block_reads_[k][i];
      const int32_t from = unit(o, c.mb).place, to = unit(o, mb).place;
      if (how == Reads::kDevices) continue;
      auto it = std::find_if(dm.begin(), dm.end(), [&](const auto& p) { return p.first == from; });
      if (it == dm.end())
        dm.emplace_back(from, to);
      else
        ok = it->second == to;
    }
    if (ok) return static_cast<int32_t>(ci);
  }
  return -1;
}

// The block of microbatch mb, before block k, that holds node id n.
size_t Compiler::block_holding(int mb, size_t k, size_t n) const {
  const BlockAt* first = &block_at_[static_cast<size_t>(mb) * nblocks()];
  const BlockAt* it =
      std::upper_bound(first, first + k, n, [](size_t x, const BlockAt& b) { return x < b.nodes; });
  STRETTO_ASSERT(it != first, "a microbatch's edges stay within its block");
  return static_cast<size_t>(it - first) - 1;
}

// Makes the block k that microbatch b.mb just emitted (from b's starts) a class.
void Compiler::add_class(const EmitState& es, size_t k, BlockClass b) {
  const auto& dag = cp_.dag;
  b.nodes_end = dag.nodes.size();
  b.edges_end = dag.edges.size();
  b.mem_end = dag.mem.size();
  b.consumers_end = dag.consumer_tags.size();
  b.overlaps_end = dag.tp_overlaps.size();
  for (size_t i = b.edges; i < b.edges_end; ++i)
    if (dag.edges[i].from < b.nodes)
      b.from_ext.push_back(static_cast<uint32_t>(block_holding(b.mb, k, dag.edges[i].from)));
  b.ext = b.from_ext;
  std::sort(b.ext.begin(), b.ext.end());
  b.ext.erase(std::unique(b.ext.begin(), b.ext.end()), b.ext.end());
  for (uint32_t& x : b.from_ext)
    x = static_cast<uint32_t>(std::lower_bound(b.ext.begin(), b.ext.end(), x) - b.ext.begin());
  for (auto it = es.sent.lower_bound({b.mb, 0, 0});
       it != es.sent.end() && std::get<0>(it->first) == b.mb; ++it)
    if (it->second >= b.nodes && it->second < b.nodes_end)
      b.sent.emplace_back(std::get<1>(it->first), std::get<2>(it->first));
  block_at_[static_cast<size_t>(b.mb) * nblocks() + k].cls = last_class_[k] =
      static_cast<int32_t>(classes_[k].size());
  classes_[k].push_back(std::move(b));
}

// Microbatch mb's block k as a copy of class c's: nodes (MB tag set, place directives mapped),
// their edges (from this block: shifted; from an earlier block: to the same place in mb's
// block, of the same layout), memory effects and transfers' consumer tags; the units' emitted
// nodes and what the emitter remembers of the block (the prefetch bound's passes, the last
// forward pass, the transfers made) likewise.
void Compiler::stamp_block(EmitState& es, size_t k, const BlockClass& c, int mb,
                           const DirectiveMap& dm) {
  auto& dag = cp_.dag;
  const uint32_t shift = static_cast<uint32_t>(dag.nodes.size() - c.nodes);
  const uint32_t consumer_shift = static_cast<uint32_t>(dag.consumer_tags.size() - c.consumers);
  const bool same_directives =
      std::all_of(dm.begin(), dm.end(), [](const auto& p) { return p.first == p.second; });
  for (size_t i = c.nodes; i < c.nodes_end; ++i) {
    Node n = dag.nodes[i];
    if (has_split_) n.tags.set(TagKey::kMB, mb);
    if (n.consumer != kNone) n.consumer += consumer_shift;
    if (!same_directives)
      for (const auto& [from, to] : dm)
        if (n.directive == from) {
          n.directive = to;
          break;
        }
    dag.nodes.push_back(n);
  }
  for (size_t i = c.consumers; i < c.consumers_end; ++i) {
    Tags ct = dag.consumer_tags[i];
    if (has_split_) ct.set(TagKey::kMB, mb);
    dag.consumer_tags.push_back(ct);
  }
  const size_t nb = nblocks();
  // (an edge from another block goes to the same place in mb's block, of the same layout)
  ext_shift_.resize(c.ext.size());
  for (size_t i = 0; i < c.ext.size(); ++i)
    ext_shift_[i] =
        static_cast<uint32_t>(block_at_[static_cast<size_t>(mb) * nb + c.ext[i]].nodes -
                              block_at_[static_cast<size_t>(c.mb) * nb + c.ext[i]].nodes);
  size_t from = 0;  // edges from other blocks so far
  for (size_t i = c.edges; i < c.edges_end; ++i) {
    Edge e = dag.edges[i];
    STRETTO_ASSERT(e.to >= c.nodes && e.to < c.nodes_end && e.from < c.nodes_end,
                   "a block's edges end in it");
    e.to += shift;
    e.from += e.from >= c.nodes ? shift : ext_shift_[c.from_ext[from++]];
    dag.edges.push_back(e);
  }
  for (size_t i = c.mem; i < c.mem_end; ++i) {
    MemEffect m = dag.mem[i];
    m.node += shift;
    dag.mem.push_back(m);
  }
  for (size_t i = c.overlaps; i < c.overlaps_end; ++i) {
    TpOverlapPair pr = dag.tp_overlaps[i];
    pr.compute += shift;
    pr.comm += shift;
    dag.tp_overlaps.push_back(pr);
  }
  auto moved = [&](uint32_t id) { return id == kNone ? kNone : id + shift; };
  const size_t R = runs_.size();
  const bool forward = k < R;
  const auto [first, end] = runs_[forward ? k : 2 * R - 1 - k];
  for (uint32_t o = first; o < end; ++o) {
    const UnitInfo& from = unit(o, c.mb);
    UnitInfo& to = unit(o, mb);
    if (forward) {
      to.f = moved(from.f);
      continue;
    }
    to.b = moved(from.b);
    to.bi = moved(from.bi);
    to.bw = moved(from.bw);
    to.rf = moved(from.rf);
    to.rc_gather = moved(from.rc_gather);
  }
  // (the prefetch bound's passes are read only by the block that notes them; the last forward
  // pass of each region by its backward block, and a transfer by later forward blocks; one
  // run of every op when a region is in two runs: then every region's)
  if (!forward) return;
  const int32_t pp = cp_.model.ops[first].tags.pp();
  for (auto it = es.fwd_last.lower_bound({c.mb, INT32_MIN, 0});
       it != es.fwd_last.end() && std::get<0>(it->first) == c.mb; ++it)
    if (runs_.size() == 1 || std::get<1>(it->first) == pp)
      es.fwd_last.emplace(std::make_tuple(mb, std::get<1>(it->first), std::get<2>(it->first)),
                          moved(it->second));
  for (const auto& [prod, devs] : c.sent)
    es.sent.emplace(std::make_tuple(mb, prod, devs), moved(es.sent.at({c.mb, prod, devs})));
}

// Microbatch mb as a copy of the previous one (which starts at `from` and ends here), whose
// units it has: nodes (MB tag set), edges, memory effects and consumer tags shifted by the
// previous microbatch's size, and its blocks' starts, classes and units' nodes likewise. (No
// block of it is emitted, so the emitter's memory of it is not needed.)
void Compiler::copy_previous(const MicrobatchAt& from, int mb) {
  auto& dag = cp_.dag;
  const size_t end = dag.nodes.size();
  const uint32_t shift = static_cast<uint32_t>(end - from.nodes);
  const uint32_t consumer_shift = static_cast<uint32_t>(dag.consumer_tags.size() - from.consumers);
  for (size_t i = from.nodes; i < end; ++i) {
    Node n = dag.nodes[i];
    if (has_split_) n.tags.set(TagKey::kMB, mb);
    if (n.consumer != kNone) n.consumer += consumer_shift;
    dag.nodes.push_back(n);
  }
  for (size_t i = from.consumers, e = dag.consumer_tags.size(); i < e; ++i) {
    Tags ct = dag.consumer_tags[i];
    if (has_split_) ct.set(TagKey::kMB, mb);
    dag.consumer_tags.push_back(ct);
  }
  for (size_t i = from.edges, e = dag.edges.size(); i < e; ++i) {
    Edge x = dag.edges[i];
    STRETTO_ASSERT(x.from >= from.nodes && x.from < end && x.to >= from.nodes && x.to < end,
                   "a microbatch's edges stay within its block");
    x.from += shift;
    x.to += shift;
    dag.edges.push_back(x);
  }
  for (size_t i = from.mem, e = dag.mem.size(); i < e; ++i) {
    MemEffect m = dag.mem[i];
    m.node += shift;
    dag.mem.push_back(m);
  }
  for (size_t i = from.overlaps, e = dag.tp_overlaps.size(); i < e; ++i) {
    TpOverlapPair pr = dag.tp_overlaps[i];
    pr.compute += shift;
    pr.comm += shift;
    dag.tp_overlaps.push_back(pr);
  }
  const size_t nb = nblocks();
  for (size_t k = 0; k < nb; ++k) {
    const BlockAt& b = block_at_[static_cast<size_t>(mb - 1) * nb + k];
    block_at_[static_cast<size_t>(mb) * nb + k] = {b.nodes + shift, b.cls};
  }
  auto moved = [&](uint32_t id) { return id == kNone ? kNone : id + shift; };
  for (uint32_t o = 0; o < nops(); ++o) {
    const UnitInfo& x = unit(o, mb - 1);
    UnitInfo& y = unit(o, mb);
    y.f = moved(x.f);
    y.b = moved(x.b);
    y.bi = moved(x.bi);
    y.bw = moved(x.bw);
    y.rf = moved(x.rf);
    y.rc_gather = moved(x.rc_gather);
  }
}

// Every microbatch emits about as much as the first (emitted since `base`): reserve once, not
// by doubling (the copies and page faults of the growth were a tenth of a big plan's compile).
void Compiler::reserve_microbatches(const DagSizes& base) {
  auto& dag = cp_.dag;
  const size_t m = static_cast<size_t>(M_);
  // (plus a barrier per order group, as order_and_lower adds on one class of devices)
  dag.nodes.reserve(base.nodes + (dag.nodes.size() - base.nodes) * m + m +
                    detail::order_groups(plan_) + 1024);
  // (plus the gradient reductions' inputs, one per op and microbatch, and a few temporal
  // edges per order group)
  dag.edges.reserve(base.edges + (dag.edges.size() - base.edges) * m + 2 * m + nops() * m +
                    8 * detail::order_groups(plan_) + 1024);
  dag.mem.reserve(base.mem + (dag.mem.size() - base.mem) * m + m + 1024);
}

uint16_t Compiler::tp_stream(const UnitInfo& u) {
  const auto& s = plan_.schedule[u.tp_dir].stream;
  return stream(s.empty() ? "tp" : s);
}
uint16_t Compiler::ep_stream(const UnitInfo& u) {
  const auto& s = plan_.schedule[u.shard].stream;
  return stream(s.empty() ? "ep" : s);
}

uint32_t Compiler::add_collective(CommKind kind, CommPurpose purpose, uint32_t op, int mb,
                                  Pass pass, uint32_t groups, uint16_t strm, int64_t bytes,
                                  int32_t directive) {
  Node n;
  n.kind = NodeKind::kCollective;
  n.comm = kind;
  n.purpose = purpose;
  n.tags = mb >= 0 ? unit_tags(op, mb) : cp_.model.ops[op].tags;
  n.tags.pass = pass;
  n.op = op;
  n.devs = groups;
  n.stream = strm;
  n.bytes = bytes;
  n.directive = directive;
  return add_node(n);
}

uint32_t Compiler::add_compute(uint32_t o, int mb, Pass pass) {
  const UnitInfo& u = unit(o, mb);
  Node n;
  n.kind = NodeKind::kCompute;
  n.tags = unit_tags(o, mb);
  n.tags.pass = pass;
  n.op = o;
  n.devs = u.devs;
  n.tp = static_cast<uint16_t>(u.tp);
  n.sequence_parallel = u.tp > 1 && u.tp_dir >= 0 && plan_.schedule[u.tp_dir].sequence_parallel;
  n.directive = u.place;
  n.stream = 0;
  return add_node(n);
}

// Comm buffers live while the node runs.
void Compiler::comm_buffer(uint32_t n, int64_t bytes) {
  mem(n, false, MemCategory::kCommBuffers, bytes);
  mem(n, true, MemCategory::kCommBuffers, -bytes);
}

// EP all-to-all (dispatch or combine) of a unit: every token's top-k slots, hidden-wide.
uint32_t Compiler::add_all_to_all(CommPurpose purpose, uint32_t o, int mb, Pass pass,
                                  const UnitInfo& u) {
  // Sized by the busiest expert's share (MoeSpec::load_factor: imbalance or capacity).
  const auto& moe = cp_.plan.model.moe;
  const double load = moe ? moe->load_factor() : 1.0;
  const int64_t bytes = static_cast<int64_t>(std::llround(
      static_cast<double>(cp_.model.tokens_per_microbatch * (moe ? moe->top_k : 1) *
                          cp_.plan.model.hidden * plan::dtype_bytes(cp_.model.dtype) / u.tp) *
      load));
  uint32_t n = add_collective(CommKind::kAllToAll, purpose, o, mb, pass, dp_groups(u),
                              ep_stream(u), bytes, u.shard);
  comm_buffer(n, bytes);
  return n;
}

// ZeRO-3: gather a unit's parameters before a pass (kNone if not sharded).
uint32_t Compiler::add_zero3_gather(uint32_t o, int mb, Pass pass, const UnitInfo& u) {
  const Directive* rd = u.repl >= 0 ? &plan_.schedule[u.repl] : nullptr;
  const ModelOp& op = cp_.model.ops[o];
  if (!rd || !rd->shard_params || op.param_bytes == 0 || u.shard >= 0 || u.replicas.size() < 2)
    return kNone;
  const int64_t pb = local_param_bytes(o, u);
  uint32_t n =
      add_collective(CommKind::kAllGather, CommPurpose::kParamGather, o, mb, pass, dp_groups(u),
                     stream(rd->gather_stream.empty() ? "dp" : rd->gather_stream), pb, u.repl);
  mem(n, false, MemCategory::kGatheredParams, pb);
  return n;
}

int64_t Compiler::local_param_bytes(uint32_t o, const UnitInfo& u) const {
  const ModelOp& op = cp_.model.ops[o];
  const bool split = op.tp != TpSplit::kReplicated && op.tp != TpSplit::kNone;
  return split ? op.param_bytes / std::max(1, u.tp) : op.param_bytes;
}

bool Compiler::zero3(uint32_t o, const UnitInfo& u) const {
  const Directive* rd = u.repl >= 0 ? &plan_.schedule[u.repl] : nullptr;
  return rd && rd->shard_params && cp_.model.ops[o].param_bytes > 0;
}

// ZeRO-3 without resharding after forward: a unit's parameters stay gathered from its forward
// to its gradient's reduction.
bool Compiler::keeps_gathered(const UnitInfo& u) const {
  const Directive* rd = u.repl >= 0 ? &plan_.schedule[u.repl] : nullptr;
  return rd && rd->shard_params && !rd->reshard_after_forward;
}

// Records that `node` (a compute pass of unit o) ran, for the prefetch bound (EmitState).
void Compiler::note_pass(EmitState& es, uint32_t o, int mb, bool bwd, const UnitInfo& u,
                         uint32_t node) {
  if (!zero3(o, u)) return;
  const Tags& t = cp_.model.ops[o].tags;
  auto& seq = es.gather_seq[EmitState::SeqKey{u.devs, bwd, mb, t.pp()}];
  const int32_t layer = t.get(TagKey::kLayer);
  if (!seq.empty() && seq.back().first == layer)
    seq.back().second = node;
  else
    seq.push_back({layer, node});
  if (!bwd) es.fwd_last[{mb, t.pp(), u.devs}] = node;
}

void Compiler::bound_gather(EmitState& es, uint32_t g, uint32_t o, int mb, bool bwd,
                            const UnitInfo& u) {
  const Directive& rd = plan_.schedule[u.repl];
  const Tags& t = cp_.model.ops[o].tags;
  auto& seq = es.gather_seq[EmitState::SeqKey{u.devs, bwd, mb, t.pp()}];
  // Units completed before this one, newest last; the current unit may be open already.
  size_t n = seq.size();
  if (n && seq.back().first == t.get(TagKey::kLayer)) --n;
  const size_t back = static_cast<size_t>(rd.prefetch) + 1;
  if (n >= back) {
    edge(seq[n - back].second, g);
  } else if (bwd) {
    if (auto it = es.fwd_last.find({mb, t.pp(), u.devs}); it != es.fwd_last.end())
      edge(it->second, g);
  }
}

// Emits the forward of unit (o, mb) and returns the node after which its output is complete.
// A recomputed forward (`rc`) takes its inputs from the recomputed outputs of producers in the
// same checkpoint segment and from the checkpoint otherwise (no transfers are redone), waits
// for `trigger` (the gradient that reaches the segment), is tagged with the pass of the
// backward it precedes and flagged `recompute` (its collectives too).
uint32_t Compiler::emit_forward(EmitState& es, uint32_t o, int mb, bool rc,
                                const std::vector<uint32_t>& trigger) {
  UnitInfo& u = unit(o, mb);
  const ModelOp& op = cp_.model.ops[o];
  const bool sp = u.tp_dir >= 0 && plan_.schedule[u.tp_dir].sequence_parallel;
  const Pass bp = u.split_bwd ? Pass::kBI : Pass::kB;
  const Pass pass = rc ? bp : Pass::kF;
  const size_t first_node = cp_.dag.nodes.size();
  std::vector<uint32_t>& deps = es.fwd_deps;
  deps.assign(trigger.begin(), trigger.end());
  if (rc)
    recomputed_inputs(o, mb, deps);
  else
    received_inputs(es, o, mb, deps);
  const uint32_t gather = forward_gather(es, o, mb, rc, pass, deps);
  uint32_t ring_ag = kNone;  // with tp_comm_overlap: the all-gather beside the GEMM
  // TP with sequence parallelism: all-gather the sequence before column-parallel GEMMs. Its
  // bytes are NCCL's (docs/costmodel.md): the gathered output, the whole b x s x h input.
  if (sp && (op.tp == TpSplit::kColumn) && op.kind != OpKind::kMlpAct &&
      op.kind != OpKind::kLoss && u.tp > 1) {
    uint32_t ag = add_collective(CommKind::kAllGather, CommPurpose::kTensorPar, o, mb, pass,
                                 tp_groups(u), tp_stream(u), op.saved_input_bytes, u.tp_dir);
    for (uint32_t d : deps) edge(d, ag);
    if (tp_overlapped(u, op))
      ring_ag = ag;  // the GEMM starts on its own shard (TE's ring exchange)
    else
      deps = {ag};
  }
  // EP: all-to-all dispatch before the experts.
  if (u.shard >= 0) {
    uint32_t a2a = add_all_to_all(CommPurpose::kDispatch, o, mb, pass, u);
    for (uint32_t d : deps) edge(d, a2a);
    deps = {a2a};
  }
  const bool cp_attention = ctx_par_ > 1 && op.kind == OpKind::kAttention;
  if (cp_attention) cp_before_attention(o, mb, pass, false, u, deps);
  const uint32_t c = add_compute(o, mb, pass);
  for (uint32_t d : deps) edge(d, c);
  if (ring_ag != kNone) overlap_pair(c, ring_ag, TpOverlap::kRing, OverlapPart::kWhole);
  const uint32_t cp_out = cp_attention ? cp_after_attention(o, mb, pass, false, u, c, deps) : c;
  note_pass(es, o, mb, rc, u, c);
  // Saved activations: a checkpointed op keeps only its share of the segment's input at its
  // forward, and the rest when it is recomputed.
  const int64_t saved = act_bytes(o, u, op.saved_bytes);
  const int64_t kept = u.rc >= 0 ? u.rc_kept : saved;
  mem(c, true, MemCategory::kActivations, rc ? saved - kept : kept);
  if (gather != kNone && !rc && !keeps_gathered(u))
    mem(c, true, MemCategory::kGatheredParams, -local_param_bytes(o, u));
  const uint32_t out = cp_out != c ? cp_out : forward_outputs(o, mb, pass, c, deps);
  if (rc)
    for (size_t i = first_node; i < cp_.dag.nodes.size(); ++i) cp_.dag.nodes[i].recompute = true;
  return out;
}

// A recomputed forward's inputs: the recomputed outputs of producers in its checkpoint segment,
// the checkpointed forward outputs of the other local producers.
void Compiler::recomputed_inputs(uint32_t o, int mb, std::vector<uint32_t>& deps) {
  const UnitInfo& u = unit(o, mb);
  for (uint32_t i : cp_.model.ops[o].inputs) {
    const UnitInfo& ui = unit(i, mb);
    if (ui.rc_seg >= 0 && ui.rc_seg == u.rc_seg && ui.rf != kNone)
      deps.push_back(ui.rf);
    else if (ui.devs == u.devs)
      deps.push_back(ui.f);
  }
}

// A forward's inputs: local producers directly; remote producers through a transfer, one per
// remote device set (merging the producers there).
void Compiler::received_inputs(EmitState& es, uint32_t o, int mb, std::vector<uint32_t>& deps) {
  const auto& ops = cp_.model.ops;
  const ModelOp& op = ops[o];
  const UnitInfo& u = unit(o, mb);
  std::map<uint32_t, std::pair<uint32_t, std::vector<uint32_t>>> remote;  // devs->(prod, fs)
  for (uint32_t i : op.inputs) {
    const UnitInfo& ui = unit(i, mb);
    if (ui.devs == u.devs)
      deps.push_back(ui.f);
    else {
      auto& r = remote[ui.devs];
      if (r.second.empty() || ops[i].out_bytes > ops[r.first].out_bytes) r.first = i;
      r.second.push_back(ui.f);
    }
  }
  for (auto& [devs, r] : remote) {
    const UnitInfo& ui = unit(r.first, mb);
    if (cp_.dag.device_sets[ui.devs].devices.size() !=
        cp_.dag.device_sets[u.devs].devices.size()) {
      error(plan_.schedule[u.place].pointer,
            fmt::format("{} on {} devices consumes {} on {} devices: data-parallel and "
                        "tensor-parallel degrees must match across a stage boundary",
                        op.name, cp_.dag.device_sets[u.devs].devices.size(), ops[r.first].name,
                        cp_.dag.device_sets[ui.devs].devices.size()),
            "give both stages the same number of replicas and the same TP degree", u.place,
            {{loc(plan_.schedule[ui.place].pointer), "the producer is placed here"}});
      continue;
    }
    // One transfer per (producer, microbatch, receiving devices): consumers on the same
    // devices (a layer's norm and its residual add) share the received activation.
    const auto key = std::make_tuple(mb, r.first, u.devs);
    if (auto it = es.sent.find(key); it != es.sent.end()) {
      deps.push_back(it->second);
      continue;
    }
    uint32_t t = cross(r.first, o, mb, Pass::kF, CommPurpose::kActivation, ops[r.first].out_bytes);
    for (uint32_t f : r.second) edge(f, t);
    comm_buffer(t, cp_.dag.nodes[t].bytes);
    deps.push_back(t);
    es.sent.emplace(key, t);
  }
}

// ZeRO-3: gather this op's parameters before its forward. A recomputed forward gathers for
// the backward that follows it (FSDP's pre-backward unshard): the backward reuses it.
uint32_t Compiler::forward_gather(EmitState& es, uint32_t o, int mb, bool rc, Pass pass,
                                  std::vector<uint32_t>& deps) {
  UnitInfo& u = unit(o, mb);
  uint32_t gather = kNone;
  if (!keeps_gathered(u) || (!rc && mb == 0)) {
    gather = add_zero3_gather(o, mb, pass, u);
    if (gather != kNone) {
      bound_gather(es, gather, o, mb, rc, u);
      deps.push_back(gather);
    }
  }
  if (rc) u.rc_gather = gather;
  return gather;
}

// The communication after a forward's compute node `c` (EP combine, vocab-parallel loss
// reductions, TP partial sums), chained; returns the last node.
// tp_comm_overlap (dag.h TpOverlap): the linear layers of a transformer layer whose TP
// collectives Transformer Engine's userbuffers overlap (Megatron-Core builds them from TE's
// LayerNormLinear / Linear; the output layer, experts and embedding are not TE modules).
bool Compiler::tp_overlapped(const UnitInfo& u, const ModelOp& op) const {
  return u.tp > 1 && u.tp_dir >= 0 && plan_.schedule[u.tp_dir].tp_comm_overlap &&
         (op.kind == OpKind::kQKV || op.kind == OpKind::kOutProj || op.kind == OpKind::kMlpUp ||
          op.kind == OpKind::kMlpDown);
}
void Compiler::overlap_pair(uint32_t c, uint32_t comm, TpOverlap method, OverlapPart part) {
  cp_.dag.nodes[comm].tp_overlap = method;
  cp_.dag.nodes[c].tp_overlap = TpOverlap::kRing;  // (any value: "overlapped")
  cp_.dag.tp_overlaps.push_back({c, comm, method, part});
}

// The communication after a forward's compute node `c` (EP combine, the vocab-parallel loss's
// all-reduces, TP partial sums), chained; returns the node consumers wait for. `deps` are
// c's own dependencies (an overlapped reduce-scatter starts with c).
uint32_t Compiler::forward_outputs(uint32_t o, int mb, Pass pass, uint32_t c,
                                   const std::vector<uint32_t>& deps) {
  const UnitInfo& u = unit(o, mb);
  const ModelOp& op = cp_.model.ops[o];
  const bool sp = u.tp_dir >= 0 && plan_.schedule[u.tp_dir].sequence_parallel;
  uint32_t out = c;
  if (u.shard >= 0) {
    uint32_t a2a = add_all_to_all(CommPurpose::kCombine, o, mb, pass, u);
    edge(out, a2a);
    out = a2a;
  }
  // Vocab-parallel cross-entropy (Megatron-Core's _VocabParallelCrossEntropy.forward): each
  // TP rank holds 1/t of the logits, so the max logit (MAX), the target's logit and the sum
  // of exponentials (SUM) of every token are all-reduced over the TP group, one fp32 per
  // token each, in that order. The backward needs no communication (each rank's softmax
  // slice is local once the sums are known).
  if (u.tp > 1 && op.kind == OpKind::kLoss) {
    for (int i = 0; i < 3; ++i) {
      uint32_t ar = add_collective(CommKind::kAllReduce, CommPurpose::kLossReduce, o, mb, pass,
                                   tp_groups(u), tp_stream(u),
                                   cp_.model.tokens_per_microbatch * 4, u.tp_dir);
      edge(out, ar);
      out = ar;
    }
  }
  // TP: row-parallel outputs are partial sums.
  if (u.tp > 1 && (op.tp == TpSplit::kRow)) {
    uint32_t cl = add_collective(sp ? CommKind::kReduceScatter : CommKind::kAllReduce,
                                 CommPurpose::kTensorPar, o, mb, pass, tp_groups(u), tp_stream(u),
                                 op.out_bytes, u.tp_dir);
    if (tp_overlapped(u, op) && out == c) {
      // Chunked beside the GEMM (TE's pipeline method): both start together, and the
      // GEMM's node, priced with the chunks' closed form, is what consumers wait for.
      for (uint32_t d : deps) edge(d, cl);
      overlap_pair(c, cl, TpOverlap::kPipeline, OverlapPart::kWhole);
    } else {
      edge(out, cl);
      out = cl;
    }
  }
  return out;
}

// Emits the backward of unit (o, mb): its input gradients, the recomputed forward of its
// checkpoint segment, the collectives before it, its compute (B, or BI + BW), and those after.
void Compiler::emit_backward(EmitState& es, uint32_t o, int mb) {
  UnitInfo& u = unit(o, mb);
  const ModelOp& op = cp_.model.ops[o];
  const bool sp = u.tp_dir >= 0 && plan_.schedule[u.tp_dir].sequence_parallel;
  std::vector<uint32_t>& deps = es.bwd_deps;
  deps.clear();
  // The forward must have run (saved activations): u.f is the op's output node (with
  // recompute, the recomputed output, added below).
  if (u.rc < 0) deps.push_back(u.f);
  received_gradients(es, o, mb, deps);
  // Recomputation: when the gradient reaches a checkpoint segment (at its last op), its
  // forward re-runs, in order, right before the segment's backward.
  if (u.rc >= 0 && u.rc_last) {
    const std::vector<uint32_t>& seg = segments_[static_cast<size_t>(u.rc_seg)];
    for (uint32_t so : seg) unit(so, mb).rf = emit_forward(es, so, mb, true, deps);
  }
  if (u.rc >= 0) deps.push_back(u.rf);
  const Pass bp = u.split_bwd ? Pass::kBI : Pass::kB;
  const bool overlapped = tp_overlapped(u, op);
  uint32_t ring_ag = kNone;  // with tp_comm_overlap: the all-gather beside the dgrad GEMM
  if (u.tp > 1 && op.tp == TpSplit::kRow && sp) {
    // Backward of the forward reduce-scatter: all-gather the output gradient (the
    // gathered output: the whole gradient, as the forward reduce-scatter's input).
    uint32_t ag = add_collective(CommKind::kAllGather, CommPurpose::kTensorPar, o, mb, bp,
                                 tp_groups(u), tp_stream(u), op.out_bytes, u.tp_dir);
    for (uint32_t d : deps) edge(d, ag);
    if (overlapped)
      ring_ag = ag;
    else
      deps = {ag};
  }
  const uint32_t gather = backward_gather(es, o, mb, bp);
  if (gather != kNone) deps.push_back(gather);
  if (u.shard >= 0) {  // gradient of the combine: all-to-all back to the experts
    uint32_t a2a = add_all_to_all(CommPurpose::kCombine, o, mb, bp, u);
    for (uint32_t d : deps) edge(d, a2a);
    deps = {a2a};
  }
  const uint32_t regather = backward_regather(o, mb, bp, deps);
  const bool cp_attention = ctx_par_ > 1 && op.kind == OpKind::kAttention;
  if (cp_attention) cp_before_attention(o, mb, bp, true, u, deps);
  const uint32_t first = backward_compute(es, o, mb, gather, regather, deps);
  const uint32_t cp_out =
      cp_attention ? cp_after_attention(o, mb, bp, true, u, first, deps) : first;
  if (overlapped) {
    const OverlapPart dgrad = u.split_bwd ? OverlapPart::kWhole : OverlapPart::kInputGrad;
    if (ring_ag != kNone) {
      overlap_pair(first, ring_ag, TpOverlap::kRing, dgrad);
      if (u.split_bwd) edge(ring_ag, u.bw);  // the weight gradient reads the gathered dY
    }
    if (regather != kNone) overlap_pair(first, regather, TpOverlap::kBulk, dgrad);
  }
  const uint32_t out =
      cp_out != first ? cp_out : backward_outputs(o, mb, bp, first, regather, deps);
  // Producers wait for the complete input gradient.
  if (u.split_bwd)
    u.bi = out;
  else
    u.b = out;
}

// A backward's output gradients: local consumers' directly; remote consumers' through a
// transfer, one per remote device set.
void Compiler::received_gradients(EmitState& es, uint32_t o, int mb,
                                  std::vector<uint32_t>& deps) {
  const UnitInfo& u = unit(o, mb);
  std::map<uint32_t, std::pair<uint32_t, std::vector<uint32_t>>> remote;
  for (uint32_t c : es.consumers[o]) {
    const UnitInfo& uc = unit(c, mb);
    uint32_t gnode = uc.split_bwd ? uc.bi : uc.b;
    if (uc.devs == u.devs)
      deps.push_back(gnode);
    else {
      auto& r = remote[uc.devs];
      r.first = c;
      r.second.push_back(gnode);
    }
  }
  for (auto& [devs, r] : remote) {
    uint32_t t = cross(o, r.first, mb, u.split_bwd ? Pass::kBI : Pass::kB,
                       CommPurpose::kGradient, cp_.model.ops[o].out_bytes);
    if (t == kNone) continue;
    for (uint32_t g : r.second) edge(g, t);
    comm_buffer(t, cp_.dag.nodes[t].bytes);
    deps.push_back(t);
  }
}

// ZeRO-3: the backward's parameter gather (the recomputed forward's, which it reuses, under
// recompute; none while the parameters stay gathered from the forward).
uint32_t Compiler::backward_gather(EmitState& es, uint32_t o, int mb, Pass bp) {
  const UnitInfo& u = unit(o, mb);
  uint32_t gather = u.rc >= 0 ? u.rc_gather : kNone;
  if (u.rc < 0 && !keeps_gathered(u)) {
    gather = add_zero3_gather(o, mb, bp, u);
    if (gather != kNone) bound_gather(es, gather, o, mb, true, u);
  }
  return gather;
}

// Sequence parallelism: a column-parallel GEMM saved only its 1/t sequence shard of the
// input, so its backward all-gathers the input again for the weight gradient
// (Megatron-Core's LinearWithGradAccumulationAndAsyncCommunication.backward, and
// Transformer Engine's Linear with sequence_parallel). It is launched with the backward
// and overlaps the input-gradient GEMM; the weight gradient waits for it. The gathered
// input (b·s·h) is held until the weight gradient is done. kNone when there is none.
uint32_t Compiler::backward_regather(uint32_t o, int mb, Pass bp,
                                     const std::vector<uint32_t>& deps) {
  const UnitInfo& u = unit(o, mb);
  const ModelOp& op = cp_.model.ops[o];
  const bool sp = u.tp_dir >= 0 && plan_.schedule[u.tp_dir].sequence_parallel;
  if (!(sp && u.tp > 1 && op.tp == TpSplit::kColumn && op.kind != OpKind::kMlpAct &&
        op.kind != OpKind::kLoss && op.has_weight_grad()))
    return kNone;
  const int64_t bytes = op.saved_input_bytes;
  const uint32_t regather = add_collective(CommKind::kAllGather, CommPurpose::kTensorPar, o, mb,
                                           bp, tp_groups(u), tp_stream(u), bytes, u.tp_dir);
  for (uint32_t d : deps) edge(d, regather);
  mem(regather, false, MemCategory::kCommBuffers, bytes);
  return regather;
}

// The backward's compute: B, or BI + BW (BI alone for an op without a weight gradient), after
// `deps`, freeing the saved activations (and the gathered parameters and the re-gathered
// input); returns the node computing the input gradient.
uint32_t Compiler::backward_compute(EmitState& es, uint32_t o, int mb, uint32_t gather,
                                    uint32_t regather, const std::vector<uint32_t>& deps) {
  UnitInfo& u = unit(o, mb);
  const ModelOp& op = cp_.model.ops[o];
  const int64_t saved = act_bytes(o, u, op.saved_bytes);
  const int64_t saved_bw = act_bytes(o, u, op.saved_bw_bytes);
  uint32_t first;
  if (u.split_bwd && !op.has_weight_grad()) {
    // Nothing to defer: the whole backward is BI, and no BW node (no kernel, no host
    // dispatch, its activations freed at BI).
    u.bi = first = add_compute(o, mb, Pass::kBI);
    for (uint32_t d : deps) edge(d, u.bi);
    mem(u.bi, true, MemCategory::kActivations, -saved);
    if (gather != kNone) mem(u.bi, true, MemCategory::kGatheredParams, -local_param_bytes(o, u));
    note_pass(es, o, mb, true, u, u.bi);
  } else if (u.split_bwd) {
    u.bi = first = add_compute(o, mb, Pass::kBI);
    u.bw = add_compute(o, mb, Pass::kBW);
    for (uint32_t d : deps) edge(d, u.bi);
    edge(u.bi, u.bw);
    mem(u.bi, true, MemCategory::kActivations, -(saved - saved_bw));
    mem(u.bw, true, MemCategory::kActivations, -saved_bw);
    if (gather != kNone) mem(u.bw, true, MemCategory::kGatheredParams, -local_param_bytes(o, u));
    if (regather != kNone) {
      edge(regather, u.bw);
      mem(u.bw, true, MemCategory::kCommBuffers, -op.saved_input_bytes);
    }
    note_pass(es, o, mb, true, u, u.bi);
  } else {
    u.b = first = add_compute(o, mb, Pass::kB);
    for (uint32_t d : deps) edge(d, u.b);
    mem(u.b, true, MemCategory::kActivations, -saved);
    if (gather != kNone) mem(u.b, true, MemCategory::kGatheredParams, -local_param_bytes(o, u));
    note_pass(es, o, mb, true, u, u.b);
  }
  // Temporaries of the input-gradient pass (an eager loss's fp32 gradients): alive while it runs.
  const int64_t ws = act_bytes(o, u, op.bwd_workspace_bytes);
  mem(first, false, MemCategory::kActivations, ws);
  mem(first, true, MemCategory::kActivations, -ws);
  return first;
}

// The communication after a backward's input-gradient node `first` (EP dispatch's gradient,
// TP partial sums), chained; returns the last node.
uint32_t Compiler::backward_outputs(uint32_t o, int mb, Pass bp, uint32_t first,
                                    uint32_t regather, const std::vector<uint32_t>& deps) {
  const UnitInfo& u = unit(o, mb);
  const ModelOp& op = cp_.model.ops[o];
  const bool sp = u.tp_dir >= 0 && plan_.schedule[u.tp_dir].sequence_parallel;
  uint32_t out = first;
  if (u.shard >= 0) {  // input gradient back through the dispatch
    uint32_t a2a = add_all_to_all(CommPurpose::kDispatch, o, mb, bp, u);
    edge(out, a2a);
    out = a2a;
  }
  // TP: the input gradient of a column-parallel op is a partial sum.
  if (u.tp > 1 && op.tp == TpSplit::kColumn && op.kind != OpKind::kMlpAct &&
      op.kind != OpKind::kLoss) {
    uint32_t c = add_collective(sp ? CommKind::kReduceScatter : CommKind::kAllReduce,
                                CommPurpose::kTensorPar, o, mb, bp, tp_groups(u), tp_stream(u),
                                op.saved_input_bytes, u.tp_dir);
    // tp_comm_overlap in one B node: the reduce-scatter of the input gradient runs beside
    // the weight-gradient GEMM (TE's bulk qkv_wgrad / fc1_wgrad), after the re-gather on the
    // same stream; the B node, priced with the pair's closed form, is what the producers'
    // backward waits for. (Split BI/BW: it follows BI, beside whatever runs next.)
    // Without it, Megatron-LM (since 2022) launches the same collective with NCCL right after
    // the input-gradient GEMM, beside the weight-gradient GEMM (model async_tp_grad_reduce;
    // 2021 Megatron-LM ran it after both GEMMs): the same pair, NCCL's kernels sharing the
    // SMs (TpOverlap::kAsync).
    const bool bulk = tp_overlapped(u, op);
    const bool beside_wgrad =
        (bulk || plan_.model.async_tp_grad_reduce) && !u.split_bwd && out == first;
    if (beside_wgrad) {
      for (uint32_t d : deps) edge(d, c);
      overlap_pair(first, c, bulk ? TpOverlap::kBulk : TpOverlap::kAsync,
                   OverlapPart::kWeightGrad);
    } else {
      edge(out, c);
    }
    // One backward node (B) holds both GEMMs: the re-gather overlaps it, and its buffer is
    // freed once both are done (the reduce-scatter follows both).
    if (regather != kNone && !u.split_bwd) {
      edge(regather, c);
      mem(c, true, MemCategory::kCommBuffers, -op.saved_input_bytes);
    }
    if (!beside_wgrad) out = c;
  }
  return out;
}

// ---- DP gradient reduction, per bucket, after the last backward that produces it ----
// Reduction group of an op: every device holding a copy of its parameters (replicas of
// all microbatches' placements: DualPipe's second copy too), per TP rank. Fills each op's
// reduction and the ZeRO-1/2 parameter all-gathers after the step.
void Compiler::add_gradient_reductions(std::vector<uint32_t>& reduce_of_op,
                                       std::vector<uint32_t>& param_syncs) {
  const auto& ops = cp_.model.ops;
  struct Key {
    uint32_t groups;
    int32_t repl;
    bool operator<(const Key& o) const {
      return std::tie(groups, repl) < std::tie(o.groups, o.repl);
    }
  };
  std::map<Key, std::vector<uint32_t>> pending;  // bucket ops so far
  std::map<Key, int64_t> pending_bytes;
  auto flush = [&](const Key& k) {
    auto& list = pending[k];
    if (list.empty()) return;
    const Directive* rd = k.repl >= 0 ? &plan_.schedule[k.repl] : nullptr;
    int64_t bytes = pending_bytes[k];
    const bool zero2 = rd && rd->shard_grads;
    const bool zero1 = rd && rd->shard_optimizer;
    uint16_t strm = stream(rd && !rd->reduce_stream.empty() ? rd->reduce_stream : "dp");
    uint32_t n = add_collective(zero1 ? CommKind::kReduceScatter : CommKind::kAllReduce,
                                CommPurpose::kGradReduce, list.front(), -1, Pass::kNone, k.groups,
                                strm, bytes, k.repl);
    for (uint32_t o : list) {
      reduce_of_op[o] = n;
      for (int mb = 0; mb < M_; ++mb) {
        const UnitInfo& u = unit(o, mb);
        edge(u.split_bwd ? u.bw : u.b, n);
      }
      // ZeRO-3 without resharding after forward: the unit stays gathered until its gradient
      // is reduced.
      const UnitInfo& u0 = unit(o, 0);
      if (rd && rd->shard_params && !rd->reshard_after_forward && u0.shard < 0)
        mem(n, true, MemCategory::kGatheredParams, -local_param_bytes(o, u0));
    }
    // ZeRO-2/3: full-size gradients of the bucket exist until reduce-scattered.
    if (zero2) {
      mem(n, false, MemCategory::kGradBuckets, bytes);
      mem(n, true, MemCategory::kGradBuckets, -bytes);
    }
    if (zero1 && !(rd && rd->shard_params)) {
      // Updated parameter shards are all-gathered after the optimizer step.
      uint32_t ag = add_collective(CommKind::kAllGather, CommPurpose::kParamSync, list.front(), -1,
                                   Pass::kNone, k.groups, strm, bytes, k.repl);
      edge(n, ag);
      param_syncs.push_back(ag);
    }
    list.clear();
    pending_bytes[k] = 0;
  };
  for (uint32_t oo = static_cast<uint32_t>(nops()); oo-- > 0;) {
    const uint32_t o = oo;
    const ModelOp& op = ops[o];
    if (op.param_bytes == 0) continue;
    const UnitInfo& u0 = unit(o, 0);
    if (u0.shard >= 0) continue;  // EP: expert shards are distinct parameters
    std::vector<int32_t> holders = holders_of(o);
    const int tp = u0.tp;
    const size_t copies = holders.size() / tp;
    if (copies < 2) continue;
    std::vector<int32_t> grouped;
    for (int t = 0; t < tp; ++t)
      for (size_t r = 0; r < copies; ++r) grouped.push_back(holders[r * tp + t]);
    Key k{sets_.intern(std::move(grouped), static_cast<int32_t>(copies)), u0.repl};
    pending[k].push_back(o);
    pending_bytes[k] += local_param_bytes(o, u0);
    const double bucket = u0.repl >= 0 ? plan_.schedule[u0.repl].bucket_size_MB : 25.0;
    if (pending_bytes[k] >= static_cast<int64_t>(bucket * kMB)) flush(k);
  }
  for (auto& [k, v] : pending) flush(k);
}

void Compiler::add_optimizer(const std::vector<uint32_t>& reduce_of_op,
                             const std::vector<uint32_t>& param_syncs) {
  auto& dag = cp_.dag;
  const auto& ops = cp_.model.ops;
  const uint16_t dp_stream = stream("dp");
  auto collective = [&](CommKind kind, CommPurpose purpose, uint32_t op, uint32_t groups,
                        int64_t bytes) {
    Node n;
    n.kind = NodeKind::kCollective;
    n.comm = kind;
    n.purpose = purpose;
    n.tags = ops[op].tags;
    n.op = op;
    n.devs = groups;
    n.stream = dp_stream;
    n.bytes = bytes;
    return add_node(n);
  };
  // What each op's gradient is final after, per device set: its reduction, or (no data
  // parallelism) its backward on every microbatch.
  std::map<uint32_t, std::vector<uint32_t>> final_by_set;  // device set -> nodes
  for (uint32_t o = 0; o < nops(); ++o) {
    if (ops[o].param_count == 0) continue;
    if (reduce_of_op[o] != kNone) {
      final_by_set[dag.nodes[reduce_of_op[o]].devs].push_back(reduce_of_op[o]);
      continue;
    }
    for (int mb = 0; mb < M_; ++mb) {
      const UnitInfo& u = unit(o, mb);
      final_by_set[u.devs].push_back(u.split_bwd ? u.bw : u.b);
    }
  }
  // Tied embeddings: all-reduce the gradients of the two copies, pairing the i-th device of the
  // embedding's holders with the i-th of the head's.
  if (tied_copy_) {
    const auto he = holders_of(emb_op_), hh = holders_of(head_op_);
    if (he.size() == hh.size()) {
      std::vector<int32_t> pairs;
      for (size_t i = 0; i < he.size(); ++i) pairs.push_back(he[i]), pairs.push_back(hh[i]);
      const UnitInfo& ue = unit(emb_op_, 0);
      const uint32_t set = sets_.intern(std::move(pairs), 2);
      const uint32_t n = collective(CommKind::kAllReduce, CommPurpose::kTiedGrad, emb_op_, set,
                                    ops[emb_op_].param_bytes / std::max(1, ue.tp));
      for (uint32_t o : {emb_op_, head_op_}) {
        if (reduce_of_op[o] != kNone) {
          edge(reduce_of_op[o], n);
        } else {
          for (int mb = 0; mb < M_; ++mb) {
            const UnitInfo& u = unit(o, mb);
            edge(u.split_bwd ? u.bw : u.b, n);
          }
        }
      }
      final_by_set[set].push_back(n);
    }
  }
  const OptimizerSpec& opt = plan_.optimizer;
  if (!opt.given || opt.kind == OptimizerSpec::Kind::kNone) return;
  // Parameters each device updates: its (TP-, EP- and ZeRO-sharded) share of every op it holds.
  // (An fp8 model's weights and gradients are bf16: param_dtype_bytes.)
  const int dt = detail::param_dtype_bytes(cp_.model.dtype);
  std::vector<int64_t> params(static_cast<size_t>(cp_.num_devices), 0);
  for (uint32_t o = 0; o < nops(); ++o) {
    if (ops[o].param_count == 0) continue;
    const LocalParams lp = local_params(o);
    const int64_t count =
        lp.repl && lp.repl->shard_optimizer ? lp.count / std::max<int64_t>(1, lp.R) : lp.count;
    for (int32_t d : lp.holders) params[static_cast<size_t>(d)] += count;
  }
  // Devices with the same parameter count and the same final gradient nodes share one step node.
  std::vector<std::vector<uint32_t>> sets_of_dev(static_cast<size_t>(cp_.num_devices));
  for (const auto& [set, nodes] : final_by_set)
    for (int32_t d : dag.device_sets[set].devices) sets_of_dev[static_cast<size_t>(d)].push_back(set);
  std::map<std::pair<int64_t, std::vector<uint32_t>>, std::vector<int32_t>> groups;
  std::vector<int32_t> all;
  for (int32_t d = 0; d < cp_.num_devices; ++d) {
    if (params[static_cast<size_t>(d)] == 0) continue;
    auto& v = sets_of_dev[static_cast<size_t>(d)];
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    groups[{params[static_cast<size_t>(d)], v}].push_back(d);
    all.push_back(d);
  }
  if (all.empty()) return;
  // The optimizer pseudo-op (OpKind::kOptimizer) every step node runs.
  ModelOp step;
  step.name = "optimizer.step";
  step.kind = OpKind::kOptimizer;
  cp_.model.ops.push_back(step);
  const uint32_t step_op = static_cast<uint32_t>(cp_.model.ops.size() - 1);
  // Gradient clipping: the global gradient norm, one fp32 scalar all-reduced over each group of
  // grad_norm_groups, after every gradient its devices hold is final (Megatron-Core's
  // get_grad_norm_fp32). One node per group size (every group alike in a regular layout).
  std::vector<uint32_t> norms;
  if (opt.grad_clip)
    for (auto& [g, devs] : grad_norm_groups(all)) {
      if (g < 2) continue;
      const uint32_t set = sets_.intern(std::move(devs), g);
      const uint32_t norm = collective(CommKind::kAllReduce, CommPurpose::kGradNorm, step_op, set, 4);
      const auto& members = dag.device_sets[set].devices;
      for (const auto& [fs, nodes] : final_by_set)
        if (meets(dag.device_sets[fs].devices, members))
          for (uint32_t n : nodes) edge(n, norm);
      norms.push_back(norm);
    }
  const int64_t per_param = opt.step_bytes_per_param(dt);
  std::vector<std::pair<uint32_t, uint32_t>> steps;  // (node, device set)
  for (auto& [key, devs] : groups) {
    Node n;
    n.kind = NodeKind::kCompute;
    n.op = step_op;
    n.stream = 0;
    n.bytes = key.first * per_param;  // HBM bytes of the step on each device
    const uint32_t set = sets_.intern(devs, 1);
    n.devs = set;
    const uint32_t id = add_node(n);
    // (a device whose group is itself alone has no norm node: its own gradients are final)
    bool normed = false;
    for (uint32_t norm : norms)
      if (meets(dag.device_sets[dag.nodes[norm].devs].devices, devs)) {
        edge(norm, id);
        normed = true;
      }
    if (!normed)
      for (uint32_t fs : key.second)
        for (uint32_t x : final_by_set[fs]) edge(x, id);
    steps.push_back({id, set});
  }
  // ZeRO-1/2: the updated shards are all-gathered after the step of every member.
  for (uint32_t ag : param_syncs) {
    const auto& members = dag.device_sets[dag.nodes[ag].devs].devices;
    for (const auto& [id, set] : steps)
      if (meets(dag.device_sets[set].devices, members)) edge(id, ag);
  }
}

std::map<int32_t, std::vector<int32_t>> Compiler::grad_norm_groups(
    const std::vector<int32_t>& all) {
  // Megatron-Core sums the squared norm over the optimizer's grad_stats_parallel_group
  // (megatron/core/optimizer/__init__.py, clip_grads.py get_grad_norm_fp32):
  //  - the distributed optimizer (DistributedOptimizer: every gradient reduce-scattered, each
  //    rank's norm over its own shard): intra_dist_opt_group, every rank of the one optimizer
  //    instance, the world. Here: any replicate directive that shards the optimizer state
  //    (ZeRO-1/2/3), and the group is every device holding parameters;
  //  - otherwise (Float16OptimizerWithFloat16Params, FP32Optimizer): the model-parallel group,
  //    TP x PP: one replica's devices, as the gradients are already all-reduced over DP (and
  //    CP, whose ranks hold the whole stage). Here: the r-th copy of every parameter (its
  //    holders r*tp .. r*tp + tp - 1, the DP x CP reduction's order) belongs to group r across
  //    stages; an expert op's shards (EP) are one copy, so its holders join one group.
  //    (Megatron-Core's expert optimizer reduces over expert TP x EP x PP on its own, a second
  //    all-reduce; here the groups that experts join are merged into one.)
  const int D = cp_.num_devices;
  std::vector<int32_t> parent(static_cast<size_t>(std::max(0, D)));
  for (int32_t d = 0; d < D; ++d) parent[static_cast<size_t>(d)] = d;
  auto find = [&](int32_t d) {
    while (parent[static_cast<size_t>(d)] != d)
      d = parent[static_cast<size_t>(d)] = parent[static_cast<size_t>(parent[static_cast<size_t>(d)])];
    return d;
  };
  auto unite = [&](int32_t a, int32_t b) { parent[static_cast<size_t>(find(a))] = find(b); };
  bool dist_opt = false;
  for (const Directive& d : plan_.schedule)
    dist_opt = dist_opt || (d.op == DirectiveOp::kReplicate && d.shard_optimizer);
  if (dist_opt) {
    for (int32_t d : all) unite(d, all.front());
  } else {
    std::map<size_t, int32_t> copy_of;  // copy r -> a device of its group
    for (uint32_t o = 0; o < nops(); ++o) {
      if (cp_.model.ops[o].param_count == 0) continue;
      const UnitInfo& u0 = unit(o, 0);
      const std::vector<int32_t> holders = holders_of(o);
      const size_t per = u0.shard >= 0 ? holders.size() : static_cast<size_t>(std::max(1, u0.tp));
      for (size_t i = 0; i < holders.size(); ++i) {
        const auto [it, fresh] = copy_of.emplace(i / per, holders[i]);
        if (!fresh) unite(holders[i], it->second);
      }
    }
  }
  // Each group's devices ascending, groups in the order of their first device.
  std::map<int32_t, std::vector<int32_t>> members;  // root -> devices
  for (int32_t d : all) members[find(d)].push_back(d);
  std::vector<std::vector<int32_t>> groups;
  for (auto& [root, devs] : members) groups.push_back(std::move(devs));
  std::sort(groups.begin(), groups.end());
  std::map<int32_t, std::vector<int32_t>> by_size;
  for (const auto& g : groups) {
    auto& v = by_size[static_cast<int32_t>(g.size())];
    v.insert(v.end(), g.begin(), g.end());
  }
  return by_size;
}

void Compiler::compute_static_memory() {
  // Mixed-precision Adam accounting of the ZeRO paper: 2 bytes of parameters and 2 of
  // gradients per parameter in bf16/fp16 (dtype bytes in general) and K = 12 bytes of
  // optimizer state (fp32 master weights, momentum, variance). An fp8 model keeps its weights
  // and gradients in bf16 and its optimizer state as a bf16 model does (Transformer Engine's
  // fp8 recipe: param_dtype_bytes), plus the fp8 weight copies TE caches for the GEMMs it runs
  // in fp8 (fp8_weight_copy_bytes: the transformer layers' linear layers; Megatron-Core's
  // embedding, output layer and router are not TE modules and stay in bf16).
  const int dt = detail::param_dtype_bytes(cp_.model.dtype);
  const int fp8_copy = detail::fp8_weight_copy_bytes(cp_.model.dtype);
  cp_.static_mem.assign(cp_.num_devices, StaticMemory{});
  for (uint32_t o = 0; o < nops(); ++o) {
    if (cp_.model.ops[o].param_count == 0) continue;
    const LocalParams lp = local_params(o);
    const std::vector<int32_t>& holders = lp.holders;
    const int64_t count = lp.count, R = lp.R;
    const Directive* rd = lp.repl;
    // Optimizer state per parameter: the plan's optimizer (OptimizerSpec), else its default,
    // Adam with master weights: the ZeRO paper's mixed-precision K = 12 for 16-bit parameters,
    // 8 (the moments) for fp32 ones, whose weights are their own master.
    const int64_t k = static_bytes_per_param(cp_.model.dtype, plan_.optimizer).optimizer;
    const OpKind kind = cp_.model.ops[o].kind;
    const bool te_gemm = kind == OpKind::kQKV || kind == OpKind::kOutProj ||
                         kind == OpKind::kMlpUp || kind == OpKind::kMlpDown ||
                         kind == OpKind::kExperts || kind == OpKind::kSharedExperts;
    int64_t params = count * (dt + (te_gemm ? fp8_copy : 0)), grads = count * dt, opt = count * k;
    if (rd && rd->shard_optimizer) opt /= R;
    if (rd && rd->shard_grads) grads /= R;
    if (rd && rd->shard_params) params /= R;
    for (int32_t d : holders) {
      cp_.static_mem[d].params += params;
      cp_.static_mem[d].grads += grads;
      cp_.static_mem[d].optimizer += opt;
    }
    if (rd) {
      int z = rd->shard_params ? 3 : rd->shard_grads ? 2 : rd->shard_optimizer ? 1 : 0;
      cp_.zero_level = std::max(cp_.zero_level, z);
    }
  }
}

bool Compiler::run() {
  if (!check_context_parallel()) return false;
  auto model = expand_model(plan_.model, src_, ctx_par_, ctx_comm_,
                            plan::eager_kernel_style(plan_.costmodel));
  if (!model) {
    diags_ = model.error();
    return false;
  }
  cp_.model = std::move(*model);
  nops_ = cp_.model.ops.size();
  cp_.num_devices = plan_.cluster.num_devices();
  bool ok = true;
  for (const auto& d : plan_.schedule) ok &= check_devices(d);
  if (!ok || !apply_split()) return false;
  if (!apply_place() || !apply_tensor_parallel() || !check_heads_divisible() ||
      !check_replication() || !check_context_parallel_covers())
    return false;
  pad_vocab();
  mark_split_backward();
  if (!apply_recompute()) return false;
  tie_embeddings();
  build_nodes();
  if (!diags_.empty()) return false;
  // Fixed-cost bookkeeping: k-th of n compute nodes of each (PP, MB, PASS) region pass, k in
  // creation (id) order. Recomputed forwards form their own region pass (timed as F by the
  // fixed model). Counted per key in a dense table (PP and MB are -1 or below their counts).
  // Its size is bounded by the DAG's: pp_regions <= layers, and every layer has at least one
  // op with an F and a B node per microbatch.
  {
    auto& nodes = cp_.dag.nodes;
    int32_t max_pp = -1;
    for (const Node& n : nodes)
      if (n.kind == NodeKind::kCompute) max_pp = std::max(max_pp, n.tags.pp());
    const size_t mbs = static_cast<size_t>(M_) + 1;
    constexpr size_t kPasses = 5;  // Pass values
    auto rkey = [&](const Node& n) {
      const Tags& t = n.tags;
      STRETTO_ASSERT(t.pp() >= -1 && t.mb() >= -1 && t.mb() < M_, "region tags in range");
      return ((static_cast<size_t>(t.pp() + 1) * mbs + static_cast<size_t>(t.mb() + 1)) *
                  kPasses +
              static_cast<size_t>(t.pass)) *
                 2 +
             (n.recompute ? 1 : 0);
    };
    std::vector<uint32_t> count(static_cast<size_t>(max_pp + 2) * mbs * kPasses * 2, 0);
    // (each compute node's key computed once, for both passes)
    STRETTO_ASSERT(count.size() <= UINT32_MAX, "region keys fit 32 bits");
    std::vector<uint32_t> key_of(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i)
      if (Node& n = nodes[i]; n.kind == NodeKind::kCompute) {
        key_of[i] = static_cast<uint32_t>(rkey(n));
        n.region_k = static_cast<uint16_t>(count[key_of[i]]++);
      }
    for (size_t i = 0; i < nodes.size(); ++i)
      if (Node& n = nodes[i]; n.kind == NodeKind::kCompute)
        n.region_n = static_cast<uint16_t>(count[key_of[i]]);
  }
  compute_static_memory();
  return true;
}

}  // namespace

Expected<CompiledPlan> compile(const plan::Plan& plan_in, const JsonSource* src,
                               const CompileOptions& opt) {
  // Sizes whose products overflow, and plans larger than memory allows (estimate.h).
  if (auto bad = plan::check_plan_sizes(plan_in, src); !bad.empty()) return fail(std::move(bad));
  if (auto big = plan::check_memory_budget(plan_in, src, false, false); !big.empty())
    return fail(std::move(big));
  // A builder call: the real cause (pp_regions, devices) located at the call (layout.h).
  if (auto bad = pipelines::check_builder_call(plan_in, src); !bad.empty())
    return fail(std::move(bad));
  CompiledPlan cp;
  cp.plan = plan_in;
  const JsonSource* const file_src = src;
  if (plan_in.builder) {
    auto ds = pipelines::expand_builder(*plan_in.builder);
    if (!ds) {
      Diagnostics diags = ds.error();
      pipelines::locate_builder_diagnostics(diags, src, *plan_in.builder);
      for (auto& d : diags)
        if (!d.loc.known() && src) {
          std::string ptr =
              d.loc.json_pointer.empty() ? plan_in.builder->pointer : d.loc.json_pointer;
          SourceLoc l = src->loc(ptr);
          d.loc = l;
          d.source_line = src->line_text(l.line);
        }
      return fail(std::move(diags));
    }
    cp.plan.schedule = std::move(*ds);
    cp.plan.builder.reset();
    // Directives made by the builder have no source text; point diagnostics at the call.
    src = nullptr;
  }
  Diagnostics diags;
  // Problems in builder-generated directives point at the builder call (layout.h).
  auto located = [&](Diagnostics ds) {
    if (plan_in.builder) pipelines::locate_builder_diagnostics(ds, file_src, *plan_in.builder);
    return fail(std::move(ds));
  };
  Compiler c(cp, src, diags, opt.template_microbatches);
  if (!c.run()) return located(std::move(diags));
  // (order_and_lower finalizes the DAG once its temporal edges are in)
  if (!detail::order_and_lower(cp, src, opt.class_programs, diags)) return located(std::move(diags));
  cp.resolved = plan::resolve_structure(plan_in, cp.plan.schedule, file_src);
  return cp;
}

Expected<CompiledPlan> compile_file(const std::string& path, const CompileOptions& opt) {
  auto src = JsonSource::load(path);
  if (!src) return fail(src.error());
  auto plan = plan::parse_plan(*src);
  if (!plan) return fail(plan.error());
  return compile(*plan, &*src, opt);
}

}  // namespace stretto::compiler
