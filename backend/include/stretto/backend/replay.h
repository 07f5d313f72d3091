#pragma once
// Real execution of a compiled plan (DESIGN.md §8): `stretto replay`.
//
// One process per device of the plan. Each process ("rank" = device id) executes its device's
// lowered program from the compiled plan -- the class program, in the order the simulator
// dispatches it -- with real LibTorch modules for every model op (transformer or synthetic),
// and real communication through c10d: Gloo between CPU processes, NCCL between GPUs.
//
// Terms:
//  - op: one instance of a DAG node on one device (a compute pass F/B/BI/BW of one model op and
//    microbatch; a send or a receive; the device's part of a collective). Ops are named like
//    the simulator's Chrome trace ("F mb3 PP1", "send act mb3 PP0→PP1", "all-reduce
//    grad-reduce PP0") and carry their DAG node id, so prediction and measurement align op by op.
//  - stream: the logical stream of the simulator (compute, dp, ep, tp; send/recv streams split
//    per peer as "pp:3"). On CPU, compute runs on the process's host thread in program order and
//    every communication stream is a FIFO of asynchronous c10d work completed by its own waiter
//    thread; on CUDA each logical stream is a CUDA stream, with events for cross-stream edges.
//  - step: one training iteration (every microbatch's forward and backward, the gradient
//    reductions and the optimizer step). Times are integer nanoseconds from the step's start
//    (the moment all ranks left the step's start barrier).
//
// This header is torch-free: LibTorch lives only in backend/src. Everything here is plain data
// (JSON-serialisable with to_json/from_json below) plus four entry points:
//  - check_supported(): what the backend cannot run, refused up front (exit 2 in the CLI);
//  - expected_ops(): the op sequence a device must execute (for tests and `validate`);
//  - run_rank(): run this process as one rank of a group (multi-host, torchrun/srun);
//  - launch_local(): fork + exec one process per device on this host, gather the results.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stretto/compiler/compiler.h"
#include "stretto/plan/json_source.h"
#include "stretto/sim/result.h"

namespace stretto::backend {

enum class DeviceKind : uint8_t { kAuto, kCpu, kCuda };
enum class Optimizer : uint8_t { kSgd, kAdam, kNone };
/// Which kernels the model ops run (docs/validation.md, "Replay kernels"): `fused`, the fused
/// kernels ATen offers (layer_norm / rms_norm, scaled-dot-product attention with is_causal and
/// GQA, log-softmax cross-entropy over the logits' own dtype); `reference`, the explicit
/// formulas (norms from mean and rsqrt, attention from scores, a mask and softmax), kept to
/// test the fused path against.
enum class Kernels : uint8_t { kFused, kReference };

/// Which kernel one family of the model's ops runs, and why when it is not the one `--kernels`
/// asked for (a fallback: this LibTorch lacks the fused kernel). Stated in every replay and
/// bench-ops report, so a fallback is never silent.
struct KernelUse {
  std::string family;  ///< "rms_norm", "layer_norm", "attention", "swiglu", "gelu", "cross_entropy", ...
  std::string kernel;  ///< what runs: "at::layer_norm", "formula: x * rsqrt(mean(x^2) + eps) * weight"
  std::string op;      ///< the ATen operator doing the work, as profilers name it ("aten::layer_norm")
  std::string reason;  ///< why the fused kernel does not run (empty: it runs, or reference asked)
  bool fallback = false;  ///< `--kernels fused` asked for a fused kernel this LibTorch lacks
};

/// The kernel of every op family of the plan's model under `kernels` on this build's LibTorch
/// (empty for a synthetic model). The model code (backend/src/torch_model.cpp) decides with the
/// same compile-time facts.
std::vector<KernelUse> kernel_uses(const compiler::CompiledPlan& cp, Kernels kernels);
/// The uses as JSON (an array of {family, kernel, op, fallback, reason}), as table lines
/// ("family: kernel (fallback: reason)", each prefixed by `indent` after the first), and the
/// one stderr warning that lists the fallbacks (empty when there are none).
plan::Json kernel_uses_json(const std::vector<KernelUse>& uses);
std::string kernel_uses_table(const std::vector<KernelUse>& uses, const std::string& indent);
std::string kernel_fallback_warning(const std::vector<KernelUse>& uses);

/// How to replay.
struct ReplayOptions {
  int iterations = 5;  ///< measured steps
  int warmup = 1;      ///< steps run first and not measured
  /// A rank that waits longer than this for a peer (a send, a receive, a collective) fails,
  /// naming the op; the launcher then stops the group.
  int64_t timeout_ms = 60000;
  DeviceKind device = DeviceKind::kAuto;  ///< auto: CUDA when LibTorch has it and a GPU is seen
  Optimizer optimizer = Optimizer::kSgd;
  double lr = 1e-3;
  uint64_t seed = 1234;  ///< parameters and synthetic data
  /// --check: one step, then every parameter's gradient (after the DP reduction) and its value
  /// after the optimizer step are compared with a single-process run of the same global batch
  /// without any parallelism, stepped by LibTorch's optimizer.
  bool check = false;
  /// Keep every op's times (per-op durations, traces). Off, only step times and metrics.
  bool record_ops = true;
  /// Recompute every forward before its backward (full activation recomputation): the
  /// forward keeps only its inputs; the backward reruns it with autograd first.
  bool recompute_full = false;
  Kernels kernels = Kernels::kFused;
  /// CUDA only (--cuda-graphs): capture the device's whole step once, after the warm-up
  /// steps, and replay that graph for every measured step (launch overhead removed). Step
  /// times only: no per-op records. check_supported() admits one-device plans without MoE or
  /// Adam (what synchronises the host or keeps host state).
  bool cuda_graphs = false;
  /// Refuse plans with more processes than this on this host (0: no limit).
  int max_procs = 0;
  /// Intra-op threads per rank (torch::set_num_threads; BLAS threads come from the
  /// environment: OPENBLAS_NUM_THREADS, which the launcher sets to this value when unset).
  int threads = 1;
  /// Tests only: rank `fault_rank` fails at its `fault_op`-th op (0-based, counted over the
  /// whole run) -- `fault_kind` "crash" (abort), "kill" (SIGKILL), "exit" (exit 7) or "hang"
  /// (sleeps forever) -- or, with "drop", loses the `fault_op`-th data it receives, or, with
  /// "skip-step", leaves its shard of model op `fault_op` unstepped (--check must then fail).
  int fault_rank = -1;
  int64_t fault_op = -1;
  std::string fault_kind = "crash";
};

/// One executed op on one device.
struct OpRecord {
  int device = 0;
  std::string stream;  ///< "compute", "pp:1", "dp", ...
  std::string name;    ///< the simulator's slice name: "F mb3 PP1"
  uint32_t node = 0;   ///< DAG node id
  int iteration = 0;   ///< 0-based over measured steps (-1: warm-up, not kept)
  int64_t start_ns = 0, end_ns = 0;  ///< from the step's start
  /// When this device's host issued the op, on the same clock: a compute op's start; a
  /// collective or transfer's post. Its start_ns is later where its stream's previous op ends
  /// later (the stream is a FIFO) or, ranks on one host, where another participant posts it
  /// later (the group starts with its last member).
  int64_t post_ns = 0;
  /// Communication: host time spent unpacking its result (a received activation put in place,
  /// gathered parameters written back, a reduced bucket scattered into the gradients) when its
  /// consumer first needed it. Not part of [start, end): the op's stream is a FIFO.
  int64_t unpack_ns = 0;
};

/// What one device measured, averaged over the measured steps (field meanings as
/// sim::DeviceMetrics: busy = union of compute intervals, bubble = step - busy, exposed_comm =
/// communication while no compute runs).
struct DeviceReport {
  int id = 0;
  int64_t busy_ns = 0, bubble_ns = 0, exposed_comm_ns = 0, comm_ns = 0;
  double bubble_ratio = 0;
  /// CUDA: the caching allocator's peak allocated bytes. CPU: the peak of the bytes of live
  /// tensors the backend holds, by the simulator's categories (sim::memory_category_name).
  int64_t peak_memory = 0;
  std::array<int64_t, sim::kMemCategories> breakdown{};  ///< at the peak
  /// The optimizer state this device holds after its steps (SGD's momentum, Adam's two
  /// moments), the bytes of the tensors themselves: for its ZeRO shard only on a ZeRO rank.
  int64_t optimizer_state_bytes = 0;
  int64_t step_ns = 0;  ///< this device's own step (start barrier to its last op), mean
  /// Host time outside the model's kernels and outside waiting for communication: posting
  /// ops, applying received data, recording times (the replay's own overhead), mean.
  int64_t overhead_ns = 0;
  /// Parts of overhead_ns: posting communication (packing its buffers included) and
  /// unpacking received results (OpRecord::unpack_ns), mean per step. The rest of overhead_ns
  /// is the replay's per-op bookkeeping, which `profile` files as the host_op_us option.
  int64_t post_ns = 0, unpack_ns = 0;
  int ops_per_step = 0;  ///< ops this device executes in a step
  /// The same on the host thread's CPU clock (immune to the process being descheduled):
  /// CPU time of the replay machinery, and CPU time inside the model's kernels, mean.
  int64_t overhead_cpu_ns = 0, compute_cpu_ns = 0;
  /// CPU time packing and unpacking gradient buckets and ZeRO shards (the copies DDP and ZeRO
  /// make too); not counted in overhead_cpu_ns, mean.
  int64_t pack_cpu_ns = 0;
};

/// One parameter's gradient compared with the single-process reference (--check).
/// One parameter on one device compared with the reference: its gradient, or its update
/// (value after the optimizer step minus the initial value).
struct GradCheck {
  std::string param;  ///< "layer3.mlp.up.weight"
  int device = 0;
  int64_t elements = 0;      ///< compared elements (a ZeRO shard or TP slice compares its part)
  double max_abs_diff = 0;   ///< max |x - x_ref|
  double max_rel_diff = 0;   ///< max |x - x_ref| / max |x_ref| over the parameter
};

struct CheckReport {
  std::vector<GradCheck> params;  ///< gradients after the DP reduction, of every checked step
  double max_abs_diff = 0, max_rel_diff = 0;
  /// max_rel_diff over the first step's gradients alone: the later steps' gradients also
  /// depend on the earlier updates, the first step's on the initial parameters only.
  double max_rel_diff_first_step = 0;
  std::string worst_param;
  /// Parameters after the optimizer step (this rank's ZeRO shard, or the whole tensor once a
  /// ZeRO-1/2 all-gather brought every shard back), against LibTorch's optimizer stepping the
  /// reference; differences relative to the reference's update.
  std::vector<GradCheck> weights;
  double max_abs_diff_weights = 0, max_rel_diff_weights = 0;
  std::string worst_weight;
  std::string optimizer;   ///< "sgd", "adam" or "none": the step both took
  bool grad_clip = false;  ///< both clipped gradients to a global norm of 1 first
  double tolerance = 1e-4;  ///< max_rel_diff and max_rel_diff_weights must not exceed it
  bool passed = false;
  double loss = 0, reference_loss = 0;  ///< the step's summed loss, replayed and reference
  /// What could not be matched, each failing the check: a gradient or parameter a rank
  /// returned that matches no parameter (or no slice) of the reference, and elements of a
  /// reference parameter that no device's gradient or stepped value was compared with.
  std::vector<std::string> unmatched;
};

/// What one rank sends back to the launcher (or to rank 0 in multi-host mode).
struct RankResult {
  int rank = 0;
  std::vector<int64_t> step_ns;  ///< this rank's step time per measured iteration
  DeviceReport report;
  std::vector<OpRecord> ops;  ///< every measured iteration's ops (when record_ops)
  double loss = 0;            ///< loss of the first step, summed over its microbatches (loss ranks)
  std::string device;         ///< "cpu", "cuda:0"
  /// Per measured iteration: the step's start on this host's monotonic clock (ns) and the
  /// host name, so ranks of one host are put on one timeline when merged.
  std::vector<int64_t> t0_ns;
  std::string host;
};

/// The merged measurement of a replay.
struct ReplayResult {
  std::string plan;
  std::string backend;     ///< "gloo (cpu)" or "nccl (cuda)"
  std::string dtype_note;  ///< "fp32 (the plan says bf16; CPU runs fp32)"
  int world_size = 0, iterations = 0, warmup = 0;
  std::vector<int64_t> step_ns;  ///< per measured iteration: the slowest rank's step
  double step_mean_ms = 0, step_std_ms = 0, step_min_ms = 0;
  double bubble_ratio = 0;        ///< Σ bubble / (devices × mean step)
  int64_t exposed_comm_ns = 0;    ///< summed over devices
  std::vector<DeviceReport> devices;
  std::vector<OpRecord> ops;  ///< all ranks, every measured iteration
  double loss = 0;
  std::optional<CheckReport> check;
  double wall_ms = 0;  ///< whole replay including process start
  Kernels kernels = Kernels::kFused;       ///< --kernels
  std::vector<KernelUse> kernel_families;  ///< what each op family ran (kernel_uses())
};

/// Where the processes of a local group come from: `exe args... --rank R --world-size N
/// --master ADDR:PORT` is exec'd per rank (the CLI passes its own binary and "replay PLAN").
struct LaunchOptions {
  std::string exe;
  std::vector<std::string> args;
  std::string master_addr = "127.0.0.1";
  bool quiet = false;  ///< no progress lines on stderr
  /// Where the group's temporary status directory is made (removed when the run ends).
  std::string tmp_dir = "/tmp";
};

/// This process as one rank (multi-host mode, or a child of launch_local).
struct RankSpec {
  int rank = 0, world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// Rank 0 hosts the rendezvous store unless the launcher does (launch_local sets this).
  bool store_is_external = false;
};

/// Reasons the backend cannot run a plan (a feature it lacks, more processes than allowed, a
/// device the host lacks); empty when it can. Torch-free and cheap.
Diagnostics check_supported(const compiler::CompiledPlan& cp, const ReplayOptions& opt);

/// The ops device `device` executes in one step, in program order, with stream and name
/// (times zero): what run_rank() records for every step.
std::vector<OpRecord> expected_ops(const compiler::CompiledPlan& cp, int device);

/// Runs this process as rank `spec.rank`: joins the group, replays the steps, publishes its
/// RankResult in the store. Rank 0 in multi-host mode then gathers everyone's and returns the
/// merged result; other ranks return a result holding only their own data. A failure (a peer
/// died, a timeout, a bad plan) is a diagnostic naming the rank and the op.
Expected<ReplayResult> run_rank(const compiler::CompiledPlan& cp, const RankSpec& spec,
                                const ReplayOptions& opt);

/// Launches one process per device on this host (fork + exec, TCP store on loopback), waits
/// for them and merges their results; with opt.check also runs the single-process reference.
/// A rank that crashes, is killed or hangs stops the whole group within opt.timeout_ms; no
/// child process and no temporary file is left behind. SIGINT/SIGTERM stop the group.
Expected<ReplayResult> launch_local(const compiler::CompiledPlan& cp, const ReplayOptions& opt,
                                    const LaunchOptions& launch);

/// Merges per-rank results (step = slowest rank per iteration; mean/std/min; per-device reports).
ReplayResult merge_results(const compiler::CompiledPlan& cp, const ReplayOptions& opt,
                           std::vector<RankResult> ranks);

/// Several replays of one plan as one measurement (`--rounds`): their measured steps and ops in
/// sequence (iterations renumbered), step statistics over all of them, per-device metrics
/// averaged with the replays' step counts as weights, peak memory the highest.
ReplayResult pool_results(std::vector<ReplayResult> runs);

/// Output, with the field names of `simulate --format json` where the meaning is the same
/// (step_time_ms, bubble_ratio, exposed_comm_ms, devices[{id, busy_ms, bubble_ms, ...}]) plus
/// step_time_std_ms, step_time_min_ms, ops[], check{}; `predicted` (optional) adds the
/// simulator's numbers for the same plan next to the measured ones.
plan::Json result_json(const compiler::CompiledPlan& cp, const ReplayResult& r,
                       const sim::Result* predicted);
std::string result_table(const compiler::CompiledPlan& cp, const ReplayResult& r,
                         const sim::Result* predicted);
/// Chrome trace of one measured step (`iteration`), named like the simulator's.
std::string chrome_trace(const compiler::CompiledPlan& cp, const ReplayResult& r,
                         int iteration = -1);

/// True when the backend was built with CUDA/NCCL (LibTorch with CUDA).
bool has_cuda_build();
/// True when the backend has Gloo (CPU replays across processes); a CUDA wheel may lack it.
bool has_gloo_build();
/// True when a CUDA device is usable now.
bool cuda_available();
/// Number of CUDA devices (0 without a CUDA build); a CUDA replay needs one per rank.
int cuda_device_count();

plan::Json to_json(const RankResult& r);
Expected<RankResult> rank_result_from_json(const plan::Json& j);

}  // namespace stretto::backend
