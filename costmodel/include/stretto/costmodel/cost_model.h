#pragma once
// Cost models: how long a compute op or a communication takes on a given cluster.
//
// Three kinds (DESIGN.md §2 "costmodel"):
//  - fixed:     per-pass constants (F, B, BI, BW per region pass; `comm` per transfer) for
//               analytic checks. A region pass (PP=s, MB=i, PASS=P) takes the constant however
//               many compute nodes it holds: node k of n gets C*(k+1)/n - C*k/n ns.
//  - analytic:  roofline with a size-dependent GEMM efficiency curve, HBM-bound elementwise
//               ops, a kernel launch floor; collectives with NCCL's algorithm/protocol model.
//  - profiled:  a JSON table of measured times with interpolation, falling back to analytic.
// Communication answers are "fluid" descriptions that the engine can share on links:
//  time_alone = latency_ns + wire_bytes / rate_cap, where rate_cap (bytes/ns) is the rate the
//  op's wire bytes reach alone on its bottleneck link (for NCCL collectives the protocol-capped
//  bus bandwidth, so bytes / time = the algorithm bandwidth); the engine slows it when links
//  are shared.
//
// Units and conventions (shared by every implementation):
//  - all durations are integer nanoseconds; 1 GB/s == 1 byte/ns, so link and bus bandwidths in
//    GB/s are used as bytes/ns without conversion;
//  - CommQuery::bytes is the collective's buffer size per rank, NCCL's `nBytes` of its tuning
//    model: the whole buffer for all-reduce, the gathered output for all-gather, the input of
//    reduce-scatter, each rank's whole send buffer for all-to-all, the message for send/recv;
//  - CommCost::wire_bytes / rate_cap describe the per-device *bottleneck link* (the link class
//    named by `inter_node`): payload bytes that cross it and the payload rate reached alone
//    (protocol overheads such as LL's flag words are folded into rate_cap). rate_cap never
//    exceeds the raw bandwidth of that link. time_ns == latency_ns + transfer_ns(wire, rate).
//
// More detail per model: analytic.h (compute + point-to-point), nccl.h (collectives),
// profile_table.h (measured tables); docs/costmodel.md for the whole picture.

#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "stretto/compiler/dag.h"
#include "stretto/compiler/model.h"
#include "stretto/plan/plan.h"

namespace stretto::cost {

/// One compute op instance (one device, one pass, one microbatch) to be timed.
struct ComputeQuery {
  compiler::OpKind kind = compiler::OpKind::kSynthetic;
  plan::Pass pass = plan::Pass::kF;  // F, B, BI or BW (B = BI + BW work)
  compiler::GemmShape gemm;          // already divided by the TP degree where the op is split
  double flops = 0;      // for this pass, this instance (after TP split)
  int64_t bytes = 0;     // HBM traffic for this pass, this instance
  // Of `bytes` in a B pass: the weight-gradient (BW) part, so a kernel that computes both
  // gradients in one sweep over its inputs can leave it out (fused norms). 0 otherwise.
  int64_t bw_bytes = 0;
  // The op's parameter bytes on this instance (after the TP split): the dense gradient an
  // embedding backward writes over vocab x hidden.
  int64_t param_bytes = 0;
  // Of a backward (B or BI): the input-gradient bytes an unfused program gathers with one cat
  // (compiler::ModelOp::split_input_bytes, after the TP split). 0 otherwise.
  int64_t split_grad_bytes = 0;
  // Of the optimizer step: its HBM bytes as an unfused optimizer runs it, one pass per
  // elementwise op (plan::OptimizerSpec::unfused_step_bytes_per_param); `bytes` is the fused
  // one-pass step's. 0 otherwise.
  int64_t unfused_step_bytes = 0;
  plan::DType dtype = plan::DType::kBF16;
  int tp = 1;
  // region bookkeeping for the fixed model
  int region_k = 0, region_n = 1;
};

/// Duration of a compute op alone on an idle device.
struct ComputeCost {
  int64_t ns = 0;          // duration alone on an idle device
  bool mem_bound = false;  // limited by HBM bandwidth rather than tensor cores
};

/// One collective instance or point-to-point transfer to be timed.
struct CommQuery {
  compiler::CommKind kind = compiler::CommKind::kSendRecv;
  int64_t bytes = 0;      // buffer size per rank (NCCL's tuning nBytes; see the top comment)
  int group_size = 2;     // ranks in one collective instance
  int nodes_spanned = 1;  // distinct nodes in the group
  bool crosses_island = false;
  plan::DType dtype = plan::DType::kBF16;
};

/// A transfer's fluid description (see the top comment); all values are for one instance.
struct CommCost {
  int64_t latency_ns = 0;   // fixed part
  int64_t wire_bytes = 0;   // bytes each rank pushes over its bottleneck link
  double rate_cap = 0;      // wire bytes per ns alone (<= link bandwidth); 0 with wire_bytes 0
  int64_t time_ns = 0;      // latency_ns + ceil(wire_bytes / rate_cap): the time alone
  std::string algo, proto;  // NCCL's choice ("ring"/"tree"/"pat"/"p2p"/"fixed"/"none",
                            // "simple"/"ll"/"ll128"/"")
  bool inter_node = false;  // bottleneck is the inter-node link
};

/// Tensor-core peak of GEMMs in `d` over DeviceSpec::peak_tflops (the dense BF16/FP16 peak):
/// FP8 2, BF16/FP16 1, FP32 0.5 (TF32), per the H100 data sheet. The analytic model's roofline
/// and MFU's denominator both use it.
double dtype_peak_factor(plan::DType d);

/// Time to push `wire_bytes` at `rate_cap` bytes/ns, rounded up to whole ns (0 for no bytes).
/// The one place where CommCost's fluid description is turned into a duration.
inline int64_t transfer_ns(int64_t wire_bytes, double rate_cap) {
  if (wire_bytes <= 0 || !(rate_cap > 0)) return 0;
  return static_cast<int64_t>(std::ceil(static_cast<double>(wire_bytes) / rate_cap));
}

/// Number of CommKind values (an array indexed by CommKind has this size).
inline constexpr size_t kCommKinds = static_cast<size_t>(compiler::CommKind::kAllToAll) + 1;
/// host_cold_factor without effect: 1 for every kind.
constexpr std::array<double, kCommKinds> unit_cold_factors() {
  std::array<double, kCommKinds> a{};
  for (double& x : a) x = 1.0;
  return a;
}

/// Reuse distances host_reuse_factor tells apart: 0 (fresh), 1, 2, 3 or more (host_reuse.h).
inline constexpr size_t kReuseDistances = 4;
/// host_reuse_factor without effect: 1 at every distance.
constexpr std::array<double, kReuseDistances> unit_reuse_factors() {
  std::array<double, kReuseDistances> a{};
  for (double& x : a) x = 1.0;
  return a;
}

/// Resource interference while communication kernels run on a device.
struct Interference {
  double comm_sm_share = 0;   // fraction of compute capacity taken by active comm kernels
  double comm_hbm_share = 0;  // fraction of HBM bandwidth taken (slows memory-bound ops)
  double host_cores = 0;      // cores one node's host-CPU devices share (0: not limited)
  /// Compute runs on the thread that issues the device's ops (a CPU process): the next op is
  /// issued only after the previous compute op ended; false for GPUs (kernels are queued).
  bool host_compute = false;
  /// With host_compute: host-thread ns per op issued, paid before the device's next compute op
  /// (AnalyticParams::host_op_us).
  int64_t host_op_ns = 0;
  /// With host_compute: a compute op that the device's host thread runs right after
  /// communication work (a post or an unpack of a collective or transfer issued since its
  /// previous compute op) takes host_cold_factor[kind of the last such op] times its table
  /// time; 1 = no effect (AnalyticParams::host_cold_factor).
  std::array<double, kCommKinds> host_cold_factor = unit_cold_factors();
  /// With host_cores: the share of the cores that a node's computing devices get while they
  /// outnumber the cores, (0, 1] (AnalyticParams::host_share_efficiency).
  double host_share_efficiency = 1.0;
  /// With host_compute: a backward op (B, BI or BW) whose activations are stale (k other
  /// microbatches ran a forward on its device since the forward of its op and microbatch:
  /// StaleActivations, host_reuse.h) takes host_reuse_factor[min(k, 3)] times its table time;
  /// [0] is 1, and 1 everywhere = no effect (AnalyticParams::host_reuse_factor).
  std::array<double, kReuseDistances> host_reuse_factor = unit_reuse_factors();
};

/// A cost model. Implementations are immutable after construction: every method is const and
/// thread-safe, so one model can serve simulations on parallel threads. Answers are pure
/// functions of the query, so sim::build_program asks each distinct query once per program.
class CostModel {
 public:
  virtual ~CostModel() = default;
  /// Duration of one compute op instance alone.
  virtual ComputeCost compute(const ComputeQuery& q) const = 0;
  /// Cost of one collective instance or transfer alone on idle links.
  virtual CommCost comm(const CommQuery& q) const = 0;
  /// What running communication kernels take from compute on the same device.
  virtual Interference interference() const = 0;
  /// Host cost to issue one op (0 for fixed).
  virtual int64_t dispatch_ns() const = 0;
  /// "fixed", "analytic" or "profiled".
  virtual std::string_view name() const = 0;
};

/// Builds the model named by `spec` for `cluster`. `base_dir` resolves relative table paths.
/// Bad specs (unknown option, unreadable table) are diagnostics located at spec.pointer.
Expected<std::unique_ptr<CostModel>> make_cost_model(const plan::CostModelSpec& spec,
                                                     const plan::ClusterSpec& cluster,
                                                     const std::string& base_dir,
                                                     const plan::JsonSource* src = nullptr);

}  // namespace stretto::cost
