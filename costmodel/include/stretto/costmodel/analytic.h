#pragma once
// The analytic cost model: closed formulas, no measurements.
//
// Compute (one op instance on one device, alone):
//   GEMM-like ops (QKV, OutProj, MlpUp, MlpDown, Router, Experts, SharedExperts, Head, and
//   Synthetic) follow a roofline,
//       t = max( flops / (peak(dtype) * eff), bytes / (hbm * memory_efficiency) ),
//   where eff = gemm_efficiency * fill * depth (see gemm_efficiency()):
//     fill  - how much of the machine the output tiles keep busy: tiles of gemm_tile_m x
//             gemm_tile_n over `sms` SMs, split-K when there are fewer tiles than SMs, and (with
//             wave_quantization) whole waves: a GEMM of sms+1 tiles takes two waves;
//     depth - the main loop's share of a tile's time, kd / (kd + gemm_k_half) with kd the
//             reduction depth per split (prologue/epilogue amortisation).
//   Backward: the caller passes the pass's total flops/bytes and the *forward* shape [m,k]x[k,n];
//   BI is the GEMM [m,n]x[n,k] (depth n), BW is [k,m]x[m,n] (depth m), B = BI + BW, each half
//   of the flops. Flash attention (query rows m = s, batch = heads x microbatch) runs
//   blocks = ceil(s / 128) x batch query blocks: t = flops / (peak * eff * fill) with
//   fill = min(1, blocks / sms), waves = blocks / sms and
//       eff = attention_efficiency * s / (s + attention_seq_half)
//             * waves / (waves + attention_waves_half)  [* attention_bwd_ratio in backward];
//   a zero half-point drops its term. Memory-bound ops (Norm, MlpAct, Loss, Embedding) take
//   bytes / rate: with kernel_style "roofline" rate = hbm * memory_efficiency; with "fused" or
//   "eager" (the h100-sxm and h200 kinds, where the kernels were measured) the rate the measured
//   PyTorch kernels of that style reach for the op class and pass (op_GBps). A fused norm's
//   backward reads its inputs once for both gradients (bytes - bw_bytes); an embedding's
//   backward adds the dense vocab x hidden gradient (param_bytes). Residual adds, softmax and the
//   optimizer step stay at hbm * memory_efficiency (a stream, as measured for `add`).
//   Under "eager" an op also pays, at hbm * memory_efficiency, the work an unfused program runs
//   around it: the `cat` of split input gradients (2 x split_grad_bytes, B and BI), the weight
//   gradient's accumulation into .grad (3 x param_bytes, B and BW), and the optimizer's extra
//   passes (unfused_step_bytes in place of bytes). Fused and roofline pay none of them.
//   Every pass that does any work lasts at least launch_floor_us per kernel (B = 2 kernels).
//
// Communication:
//   all-reduce, all-gather, reduce-scatter: NCCL's own model (nccl.h), algorithm and protocol
//     chosen like NCCL; `nccl_algo` / `nccl_proto` options act like NCCL_ALGO / NCCL_PROTO.
//   send/recv (no NCCL model): one flow of `bytes` over the link class joining the two ranks,
//     latency = that link's latency_us + NCCL's per-hop ring/Simple hardware latency for the
//     class (tuning.cc hwLat: NVLink 3.4, PCI 5.7, NET 14 us), or `p2p_latency_us` if given.
//   all-to-all among g ranks on N nodes (ppn = g/N): each rank keeps 1/g of its buffer and
//     sends (ppn-1)/g of it over the intra-node link and (g-ppn)/g over its NIC, both at once;
//     the slower of the two is the bottleneck (wire_bytes, rate_cap, inter_node); latency as
//     send/recv over the bottleneck class.
//   Islands: a collective or transfer with crosses_island uses the DCN link instead of the
//   inter-node link (bandwidth and latency) where the cluster defines one; for collectives the
//   DCN latency is added to NCCL's network latency per inter-node step.
//
// Every constant has a default documented in AnalyticParams, with its source; every one can be
// overridden in the plan's "costmodel" object. Unknown keys are errors with a "did you mean".
// The h100-sxm and h200 device kinds start from GEMM and attention curves fitted to kernels
// measured on those GPUs (calibrated_defaults(); bench/gpu/fit_curves.py); every other kind
// starts from the AnalyticParams defaults.

#include <string>
#include <vector>

#include "stretto/costmodel/cost_model.h"
#include "stretto/plan/resolved.h"
#include "stretto/costmodel/nccl.h"

namespace stretto::cost {

/// How the memory-bound ops (norms, activations, loss, embedding) run: `roofline` at
/// memory_efficiency x HBM on the compiler's byte counts (no measured kernels); `fused` as
/// Megatron-Core / Transformer Engine runs them (one fused kernel per op and pass: the fastest
/// kernel measured for each); `eager` as an unfused PyTorch program runs them (the ATen op it
/// calls: F.rms_norm's fused kernel, silu(g) * u in two kernels, cross-entropy over an fp32 copy
/// of the logits; Stretto's CUDA replay runs these). Default: fused on h100-sxm and h200,
/// roofline elsewhere.
enum class KernelStyle : uint8_t { kRoofline, kFused, kEager };
const char* kernel_style_name(KernelStyle s);

/// The memory-bound op classes and passes with a measured rate (AnalyticParams::op_GBps).
enum class MemOpClass : uint8_t {
  kNormF, kNormB, kActF, kActB, kLossF, kLossB, kEmbeddingF, kEmbeddingB, kCount
};

/// Tunables of the analytic model. Option keys in the plan are the member names.
struct AnalyticParams {
  // --- compute -------------------------------------------------------------------------------
  /// Asymptotic fraction of dense peak reached by large GEMMs. Published cuBLAS BF16 figures on
  /// H100 SXM are ~700-800 TFLOPS of 989 (0.7-0.8); with fill and depth terms at ~0.95 for an
  /// 8192^3 GEMM, 0.80 lands at ~755 TFLOPS. The h100-sxm and h200 kinds use their measured
  /// curves instead (0.711 / 0.704 with gemm_k_half 188 / 191, gemm_split_k_min 157 / 321,
  /// no wave quantization; calibrated_defaults()).
  double gemm_efficiency = 0.80;
  /// Fraction of peak reached by fused attention (the asymptote when attention_seq_half and
  /// attention_waves_half are set). FlashAttention-3 paper (Shah et al., 2024):
  /// FlashAttention-2 reaches ~35-40% of H100 BF16 peak, FlashAttention-3 up to 75% (fwd). We
  /// default to FA2-class kernels. The h100-sxm and h200 kinds use the curve fitted to torch
  /// 2.11 SDPA measured on them (0.711 / 0.701 asymptote; calibrated_defaults()).
  double attention_efficiency = 0.40;
  /// Sequence length at which the flash-attention efficiency is half of attention_efficiency:
  /// the per-block depth term s / (s + attention_seq_half) (a causal query block at row i runs
  /// i key blocks, so short sequences spend more of their time in prologue and epilogue).
  /// 0 (default): no such term.
  double attention_seq_half = 0;
  /// Waves of query blocks (blocks / sms) at which the flash-attention efficiency is half: the
  /// term waves / (waves + attention_waves_half), the tail of unequal causal blocks over the
  /// SMs. 0 (default): no such term.
  double attention_waves_half = 0;
  /// Efficiency of the attention backward over the forward's at the same shape (the backward
  /// is priced at 2.5x the forward's flops). 1 (default): the same efficiency.
  double attention_bwd_ratio = 1;
  /// Achieved fraction of nominal HBM bandwidth for streaming kernels. A guess informed by
  /// STREAM-like results on HBM GPUs (typically 85-92% of the data-sheet number).
  double memory_efficiency = 0.90;
  /// Kernel style of the memory-bound ops (see KernelStyle); option `kernel_style`.
  KernelStyle kernel_style = KernelStyle::kRoofline;
  /// Achieved bytes per ns (GB/s) of each MemOpClass under kernel_style fused / eager, from
  /// measured kernels (calibrated_defaults(); sources in costmodel/src/analytic.cpp); 0 = no
  /// measurement (roofline).
  std::array<double, static_cast<size_t>(MemOpClass::kCount)> op_GBps{};
  /// Output tile of a GEMM CTA: 128x128 is the common CUTLASS/cuBLAS Hopper BF16 tile.
  int gemm_tile_m = 128;
  int gemm_tile_n = 128;
  /// Reduction depth at which the main loop is half of a tile's time (prologue, epilogue and
  /// pipeline fill). A modelling choice (about 4 k-tiles of 64), not a published number.
  double gemm_k_half = 256;
  /// Minimum reduction depth per split-K slice when there are fewer tiles than SMs (CUTLASS
  /// split-K / stream-K spread small GEMMs over idle SMs). A modelling choice.
  double gemm_split_k_min = 256;
  /// Whole-wave rounding of tiles over SMs (NVIDIA "Matrix Multiplication Background" guide:
  /// wave quantization). Off: a smooth fill min(1, tiles/sms), monotone in the GEMM size.
  bool wave_quantization = true;
  /// Tensor-core clock sustained under a training load over the clock the data-sheet peak is
  /// quoted at. A100 SXM: the 312 TFLOPS peak is at the 1410 MHz boost clock, but at its 400 W
  /// power limit a GEMM-bound load holds about 1305 MHz, the clock NVIDIA uses for A100 Rpeak in
  /// its HPL submissions (G. Lockwood, "Peak FLOPS", glennklockwood.com/garden/peak-FLOPS):
  /// 1305/1410 = 0.926. H100 and later: 1 (their data-sheet peaks, e.g. 989 TFLOPS at 1830 MHz,
  /// are already below the maximum boost, and their GEMM curves are fitted to GEMMs measured
  /// at 700 W, so the sustained clock is inside gemm_efficiency). Negative = derive from the
  /// device kind.
  double sustained_clock_ratio = -1;
  /// Minimum duration of one kernel (launch + ramp): "a few microseconds" is the commonly
  /// quoted CUDA launch cost; 3 us.
  double launch_floor_us = 3.0;

  // --- host -----------------------------------------------------------------------------------
  /// CPU time to issue one op (DESIGN §3 "dispatch"): order of PyTorch eager per-operator
  /// overhead (a few to ~10 us per aten op through Python, the dispatcher and cudaLaunchKernel;
  /// e.g. H. He, "Making Deep Learning Go Brrrr From First Principles", 2022). A guess: 5 us.
  double dispatch_us = 5.0;

  // --- interference (DESIGN §3) ---------------------------------------------------------------
  /// Fraction of compute taken while a comm kernel runs. Default 20 / sms: DeepSeek-V3
  /// (arXiv 2412.19437) dedicates 20 of the H800's 132 SMs to communication. Negative = derive.
  double comm_sm_share = -1;
  /// Fraction of HBM bandwidth taken while a comm kernel runs. A documented guess (0.10): a
  /// collective at inter-node rates moves a few % of HBM bandwidth, at NVLink rates ~25%.
  double comm_hbm_share = 0.10;
  /// Cores that the devices of one node share when each device is a process computing on the
  /// host CPU (the `cpu` preset: one replay process per device). Where a node holds more such
  /// devices than cores, the operating system time-shares the cores: a devices computing at
  /// once each get min(1, host_cores / a) of a core. 0 = not limited (GPUs). `stretto profile
  /// --device cpu` records the profiling host's core count here.
  double host_cores = 0;
  /// Whether compute runs on the host thread that issues the device's ops (1) or is queued to
  /// an accelerator (0). On a CPU device (the replay backend's Gloo processes) the thread runs
  /// each op to its end before it posts the next communication, so a prefetch or a send
  /// waits for the compute before it in program order. Negative = derive: 1 for device kind
  /// "cpu", else 0.
  int host_compute = -1;
  /// Host-thread time per op of a host-compute device outside the ops' own measured times (the
  /// replay's bookkeeping: issuing an op, recording it, releasing its tensors), microseconds.
  /// The ops a device issues between two compute ops delay the second by this much each (its
  /// own issue included): the thread does that work before it computes. 0 = none (GPUs, and
  /// the analytic `cpu` preset); `stretto profile --device cpu` measures it (docs/validation.md).
  double host_op_us = 0;
  /// Slowdown of a host-compute device's compute op that runs right after the host thread's
  /// communication work, by the kind of the last communication op issued since the device's
  /// previous compute op (indexed by CommKind): packing and unpacking buffers and the transport's
  /// copies displace the op's operands from the caches, so it runs cold. 1 = none (GPUs, the
  /// analytic `cpu` preset); `stretto profile --device cpu` measures it per kind as the median,
  /// over op shapes measured both ways, of the ratio of the mean times after such an op and
  /// after a compute op (docs/validation.md).
  std::array<double, kCommKinds> host_cold_factor = unit_cold_factors();
  /// With host_cores: while a node's computing devices outnumber its cores, the share of the
  /// cores they get, (0, 1]: each of `a` computing devices runs at host_share_efficiency *
  /// host_cores / a (context switches, and processes that share a core refill its caches for
  /// each other). 1 = pure processor sharing; `stretto profile --device cpu` measures it from
  /// the oversubscribed plans it replays (docs/validation.md).
  double host_share_efficiency = 1.0;
  /// Slowdown of a host-compute device's backward op (B, BI, BW) whose activations are stale,
  /// by reuse distance k (other microbatches whose forward ran on the device since its own,
  /// saving activations that displace its own from the caches: a GPipe backward, say, against
  /// 1F1B's last stage): [min(k, 3)], [0] = 1. 1 = none (GPUs, the analytic `cpu` preset);
  /// `stretto profile --device cpu` measures each distance as the time-weighted ratio, over op
  /// shapes measured both ways, of the mean times at that distance and fresh
  /// (docs/validation.md).
  std::array<double, kReuseDistances> host_reuse_factor = unit_reuse_factors();

  // --- communication --------------------------------------------------------------------------
  /// NCCL's view of the machine (arch from the device kind, NVLink if the intra-node link is
  /// faster than PCIe 5.0 x16's 64 GB/s, Intel host, no extra network latency as NCCL's IB
  /// plugin reports none, masks from nccl_algo / nccl_proto).
  NcclSystem nccl;
  /// Fixed latency of a send/recv or all-to-all, overriding the derived one. Negative = derive.
  double p2p_latency_us = -1;
  /// The per-device intra-node bandwidth NCCL's topology search works with (GB/s), when the
  /// intra-node link is NVLink. NCCL does not use the data-sheet figure: it counts NVLinks at
  /// its own per-link speed (src/graph/topo.h: SM70_NVLINK_BW 20.0, SM80_NVLINK_BW 20.0,
  /// SM90_NVLINK_BW 20.6, SM100_NVLINK_BW 40.1 GB/s) where the data sheets say 25 GB/s per
  /// link per direction for NVLink 2-4 and 50 for NVLink 5. So an A100's 12 links are 240 GB/s
  /// to NCCL (data sheet 300), an H100's 18 links 370.8 (data sheet 450). Default (negative):
  /// the cluster's intra-node bandwidth scaled by that ratio for the device's architecture.
  /// Send/recv and all-to-all flows keep the link's own bandwidth.
  double nccl_intra_GBps = -1;
};

/// NCCL's per-link NVLink speed over the data sheet's, for an architecture (see
/// AnalyticParams::nccl_intra_GBps): 20/25 (Volta, Ampere), 20.6/25 (Hopper), 40.1/50
/// (Blackwell).
double nccl_nvlink_ratio(NcclArch arch);

/// The option keys the analytic and profiled models accept (for hints and docs).
const std::vector<std::string>& analytic_option_names();

/// The defaults for a device kind before any option: AnalyticParams{} with, for the h100-sxm
/// and h200 presets, the GEMM and flash-attention curves fitted to kernels measured on those
/// GPUs (tests/data/costmodel/{h100,h200}_kernels_measured_raw.json, bench/gpu/fit_curves.py).
/// Case-insensitive; other kinds (a100-sxm, cpu, custom names) get AnalyticParams{}.
AnalyticParams calibrated_defaults(const std::string& device_kind);

/// Reads `options` (the plan's costmodel object minus what the plan parser consumed) over the
/// defaults for `cluster` (calibrated_defaults of its device kind). Diagnostics point at `pointer`
/// + "/key" in `file`.
Expected<AnalyticParams> parse_analytic_params(const plan::Json& options,
                                               const plan::ClusterSpec& cluster,
                                               const std::string& pointer, const std::string& file);

/// The cost-model options of a resolved plan (plan/resolved.h): the scalar options of the
/// analytic (and profiled) model after `options` are read over calibrated_defaults, each with
/// its source (plan: written in the costmodel object; preset: the device kind's calibrated
/// value; default: AnalyticParams{}). Names and paths are the option keys under /costmodel.
/// Empty for the fixed model and when the options do not parse (the compile reports why).
std::vector<plan::ResolvedField> resolved_options(const plan::CostModelSpec& spec,
                                                  const plan::ClusterSpec& cluster);

/// Fraction of dense peak reached by one GEMM of `shape` (output rows x cols, reduction depth,
/// `batch` independent GEMMs) on `dev`: gemm_efficiency * fill * depth. In (0, gemm_efficiency].
double gemm_efficiency(const AnalyticParams& p, const plan::DeviceSpec& dev, int64_t rows,
                       int64_t cols, int64_t depth, int64_t batch = 1);
/// Same for a forward GemmShape ([m,k] x [k,n]: rows m, cols n, depth k).
double gemm_efficiency(const AnalyticParams& p, const plan::DeviceSpec& dev,
                       const compiler::GemmShape& g);

/// Compute cost of one op instance (see the header comment).
ComputeCost analytic_compute(const AnalyticParams& p, const plan::DeviceSpec& dev,
                             const ComputeQuery& q);
/// Communication cost of one collective instance or transfer, alone on idle links.
CommCost analytic_comm(const AnalyticParams& p, const plan::ClusterSpec& cluster,
                       const CommQuery& q);

/// True for ops timed as GEMMs (tensor cores), false for memory-bound ones.
bool is_gemm_like(compiler::OpKind k);

}  // namespace stretto::cost
