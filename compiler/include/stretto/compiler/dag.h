#pragma once
// The global training DAG (IR) and its per-device lowering.
//
// Nodes are *sharded* (Pathways): a compute node replicated over data-parallel and
// tensor-parallel devices is one node whose device set lists every device that runs an
// instance; a collective over several groups of the same shape (e.g. one DP all-reduce per TP
// rank) is one node. Per-device programs are derived, once per *device class* (devices that
// run exactly the same nodes, e.g. all DP replicas of a stage).
//
// Invariants after compile():
//  - node ids are dense; edges refer to existing nodes; data edges go from producer to consumer;
//  - the union of data and temporal edges is acyclic (else compile() failed with a deadlock);
//  - every class program is a subsequence of one global topological order, so stream queues of
//    peers order their shared transfers and collectives consistently (no rendezvous inversion).

#include <cstdint>
#include <string>
#include <vector>

#include "stretto/compiler/model.h"
#include "stretto/plan/resolved.h"
#include "stretto/plan/plan.h"
#include "stretto/plan/tags.h"

namespace stretto::compiler {

inline constexpr uint32_t kNone = UINT32_MAX;

enum class NodeKind : uint8_t { kCompute, kTransfer, kCollective, kBarrier };
enum class CommKind : uint8_t {
  kNone,
  kSendRecv,
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kAllToAll,
};
std::string_view comm_kind_name(CommKind k);

/// Why a comm node exists (for reports, memory and traces).
enum class CommPurpose : uint8_t {
  kNone,
  kActivation,   // PP send/recv of forward activations
  kGradient,     // PP send/recv of input gradients
  kGradReduce,   // DP gradient all-reduce / reduce-scatter (per bucket)
  kParamGather,  // ZeRO-3 parameter all-gather (forward or backward)
  kParamSync,    // ZeRO-1/2: all-gather of updated parameters after the optimizer step
  kDispatch,     // EP all-to-all before the experts
  kCombine,      // EP all-to-all after the experts
  kTensorPar,    // TP all-reduce / reduce-scatter / all-gather
  kGradNorm,     // gradient clipping: all-reduce of the squared gradient norm (one fp32 scalar)
                 //   over Megatron-Core's group (TP x PP; ZeRO: all), before the optimizer step
  kTiedGrad,     // tied embeddings: all-reduce of the word-embedding gradient between the
                 //   embedding's devices and the head's copy (first and last stage), pairwise
  kLossReduce,   // vocab-parallel cross-entropy under TP (Megatron's _VocabParallelCrossEntropy):
                 //   three all-reduces of b·s fp32 over the TP group in the loss's forward, the
                 //   logits' max, the predicted (target) logit and the sum of exponentials
  kContextPar,   // context parallelism's communication over the CP groups, by cp_comm_type
                 //   (Transformer Engine): p2p (AttnFuncWithCPAndKVP2P), the K/V (forward) or
                 //   K/V and dK/dV (backward) exchanged with the ring's neighbours beside the
                 //   attention (TpOverlap::kCpRing); all_gather, K and V all-gathered before
                 //   the attention and dK, dV reduce-scattered after its backward; a2a, the
                 //   all-to-alls of Q, K, V and of the output (and of their gradients)
};
std::string_view comm_purpose_name(CommPurpose p);

/// Tensor-parallel communication overlap (`shard_tensor` `tp_comm_overlap`: Megatron-Core's
/// --tp-comm-overlap on Transformer Engine's userbuffers). Each TP collective of a transformer
/// layer's linear layers runs beside the GEMM it feeds or drains, in TE's method for it:
///  - kRing: ring exchange, the sequence-parallel all-gather before a column-parallel GEMM's
///    forward (qkv_fprop, fc1_fprop) and of the output gradient before a row-parallel GEMM's
///    input gradient (proj_dgrad, fc2_dgrad): t − 1 point-to-point steps of the 1/t shard, each
///    overlapping the GEMM on the chunk that arrived before it;
///  - kPipeline: the reduce-scatter after a row-parallel GEMM's forward (proj_fprop, fc2_fprop),
///    the GEMM cut into chunks whose reduce-scatters follow them;
///  - kBulk: the input re-gather beside a column-parallel GEMM's input gradient (qkv_dgrad,
///    fc1_dgrad) and the reduce-scatter of that gradient beside the weight gradient (qkv_wgrad,
///    fc1_wgrad), each as one collective.
/// How long a pair takes is the cost model's closed form (costmodel/tp_overlap.h), priced on
/// the compute node; the collective runs concurrently on its stream.
/// kCpRing is context parallelism's ring attention, paired the same way: the ring exchange
/// node (CommPurpose::kContextPar, a send/recv per CP rank over the CP groups; `bytes` one K/V
/// chunk) runs beside the attention node, whose time is costmodel/cp_attention.h's closed form.
/// kAsync is not tp_comm_overlap: Megatron-LM's asynchronous all-reduce (reduce-scatter with
/// SP) of a column-parallel linear's input gradient, an NCCL collective launched after the
/// input-gradient GEMM, beside the weight-gradient GEMM of the same B node (model key
/// async_tp_grad_reduce); the pair's time is cost/tp_overlap.h's async_pair_ns.
enum class TpOverlap : uint8_t { kNone, kRing, kPipeline, kBulk, kCpRing, kAsync };
std::string_view tp_overlap_name(TpOverlap m);

/// One overlapped (GEMM, collective) pair: `part` says which GEMM of the compute node the
/// collective overlaps (the whole node, or the input- or weight-gradient GEMM of a B node).
enum class OverlapPart : uint8_t { kWhole, kInputGrad, kWeightGrad };
struct TpOverlapPair {
  uint32_t compute = kNone;
  uint32_t comm = kNone;
  TpOverlap method = TpOverlap::kNone;
  OverlapPart part = OverlapPart::kWhole;
};

/// A set of devices. For compute: the devices that run an instance. For a collective: the
/// devices, partitioned into consecutive groups of `group_size` (each group is one collective
/// instance). For a transfer: the senders (src set) or receivers (dst set), paired by index.
struct DeviceSet {
  std::vector<int32_t> devices;
  int32_t group_size = 1;
};

// Ops the compiler adds beyond the model's forward and backward (for executors such as the
// LibTorch backend, which must run them):
//  - recomputed forward (`recompute` directive): compute nodes with `recompute` set and the op's
//    forward work, tagged with the pass (B or BI) of the backward they precede; their TP, SP and
//    EP collectives carry the flag too. They run right before that backward, on the compute
//    stream, from the checkpointed segment input.
//  - optimizer step (plan `optimizer`): a compute node of the op whose kind is
//    OpKind::kOptimizer (the last op of CompiledPlan::model), no tags, PASS none, one per group
//    of devices with equal shards; `bytes` is the HBM traffic of the step on each device
//    (OptimizerSpec::step_bytes_per_param x the device's parameter shard).
//  - gradient-norm all-reduce (CommPurpose::kGradNorm) before the steps, when clipping.
//  - tied-embedding gradient all-reduce (CommPurpose::kTiedGrad), op = the embedding.
struct Node {
  NodeKind kind = NodeKind::kCompute;
  CommKind comm = CommKind::kNone;
  CommPurpose purpose = CommPurpose::kNone;
  plan::Tags tags;         // PP, EP, LAYER, MB and PASS
  uint16_t stream = 0;     // index into TrainingDag::streams
  uint16_t tp = 1;         // tensor-parallel degree of a compute node
  uint32_t op = kNone;     // model op (compute: the op run; comm: the op it serves)
  uint32_t devs = 0;       // DeviceSet index (compute/collective: members; transfer: senders)
  uint32_t devs2 = kNone;  // transfer: receivers
  int64_t bytes = 0;       // comm: message bytes per rank (collective buffer size);
                           // optimizer step: HBM bytes per device
  int32_t directive = -1;  // directive that created it (place/replicate/shard/...), -1 = model
  uint16_t region_k = 0;   // fixed cost model: k-th of region_n compute nodes of this
  uint16_t region_n = 1;   //   (PP, MB, PASS) region pass
  uint32_t consumer = kNone;  // transfer: its receiving side's tags, TrainingDag::consumer_tags
  bool recompute = false;  // a recomputed forward (compute) or one of its collectives
  /// Compute under TP with sequence parallelism: ops that TP replicates (norms, residual adds,
  /// the router) run on this rank's 1/tp of the sequence.
  bool sequence_parallel = false;
  /// tp_comm_overlap: for a collective, TE's method for it (its cost is its chunks'); for a
  /// compute node, kRing (any value but kNone) when a collective overlaps it
  /// (TrainingDag::tp_overlaps has the pairs).
  TpOverlap tp_overlap = TpOverlap::kNone;
};
static_assert(sizeof(Node) <= 64, "a node is one cache line (big plans have millions)");

enum class EdgeKind : uint8_t { kData, kTemporal };
struct Edge {
  uint32_t from, to;
  EdgeKind kind;
  int32_t directive;  // temporal: the order directive; data: -1
};

/// Memory effect of a node instance on each device it runs on.
enum class MemCategory : uint8_t {
  kActivations,
  kCommBuffers,     // send/recv and all-to-all buffers
  kGradBuckets,     // transient full-size gradient buckets (ZeRO-2/3)
  kGatheredParams,  // ZeRO-3 gathered parameters while in use
  kCount
};

struct MemEffect {
  uint32_t node;
  bool at_end;  // false: applied when the node starts; true: when it ends
  MemCategory cat;
  int64_t bytes;  // + allocate, - free (per device instance)
};

/// Static (whole-step) memory per device, by ZeRO level.
struct StaticMemory {
  int64_t params = 0, grads = 0, optimizer = 0;
};

/// Devices that run exactly the same nodes; their programs are identical. `program` and
/// `streams` are empty when compiled without CompileOptions::class_programs.
struct DeviceClass {
  std::vector<int32_t> devices;
  std::vector<uint32_t> program;               // node ids in dispatch order
  std::vector<std::vector<uint32_t>> streams;  // per stream id (dense over dag.streams): queue
};

struct TrainingDag {
  std::vector<Node> nodes;
  std::vector<Edge> edges;
  std::vector<DeviceSet> device_sets;
  std::vector<std::string> streams;  // stream names; 0 = "compute"
  std::vector<MemEffect> mem;        // sorted by node
  // Tags of the receiving side of each transfer (Node::consumer): only transfers have them, so
  // they live here rather than in every node (a node is 64 bytes, and big plans have millions).
  std::vector<plan::Tags> consumer_tags;
  /// Overlapped (GEMM, TP collective) pairs of tp_comm_overlap, in emission order.
  std::vector<TpOverlapPair> tp_overlaps;
  const plan::Tags& consumer_tags_of(const Node& n) const { return consumer_tags[n.consumer]; }
  // CSR over edges (both kinds), built by finalize(): the successor nodes of node i are
  // succ[succ_begin[i] .. succ_begin[i + 1]) (node ids), its incoming edges are
  // pred[pred_begin[i] .. pred_begin[i + 1]) (edge ids, for their kind and directive).
  std::vector<uint32_t> succ_begin, succ;
  std::vector<uint32_t> pred_begin, pred;

  void finalize();  // builds the CSR arrays
  /// User-facing node name: "F PP1 MB3 layer2.mlp.up", "send act PP0->PP1 MB3", ...
  std::string node_name(uint32_t id, const ModelGraph& m) const;
};

struct CompiledPlan {
  plan::Plan plan;
  ModelGraph model;
  TrainingDag dag;
  int num_devices = 0;
  int num_microbatches = 1;
  std::vector<DeviceClass> classes;
  std::vector<uint32_t> topo_order;      // the global order every class program follows
  std::vector<int32_t> class_of_device;  // -1: idle device
  std::vector<StaticMemory> static_mem;  // per device
  int zero_level = 0;                    // max over replicate directives
  /// Blocks (the forward or the backward of one PP region's ops for one microbatch) copied
  /// from an earlier microbatch's rather than emitted, of `blocks` in all, and the microbatches
  /// all of whose blocks were copied (CompileOptions::template_microbatches): counts of compile
  /// work saved, for tests.
  int blocks = 0;
  int blocks_stamped = 0;
  int microbatches_stamped = 0;
  Diagnostics warnings;
  /// The plan's resolved structure (plan/resolved.h), from the plan as written and the directives
  /// above; sim::resolve_plan adds the cost model's options.
  plan::ResolvedPlan resolved;
};

}  // namespace stretto::compiler
