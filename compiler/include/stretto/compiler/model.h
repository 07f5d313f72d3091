#pragma once
// Model expansion: a ModelSpec becomes a forward graph of ops for ONE microbatch.
//
// Each op is the unit the compiler schedules and the cost model times. It carries what the
// cost and memory models need: FLOPs and bytes for forward, input-gradient (BI) and
// weight-gradient (BW) work, parameter bytes, activation bytes saved for backward (and the
// part of them that only BW needs), and the output size (what crosses a device boundary).
// All numbers are for the whole op on one microbatch before any tensor-parallel split.
// Tags follow Piper's annotations: PP (region), LAYER, EP (expert block, MoE layers only).

#include <cstdint>
#include <string>
#include <vector>

#include "stretto/plan/plan.h"
#include "stretto/plan/tags.h"

namespace stretto::compiler {

enum class OpKind : uint8_t {
  kEmbedding,
  kNorm,
  kQKV,        // column-parallel GEMM
  kAttention,  // core attention (flash), no params
  kOutProj,    // row-parallel GEMM
  kMlpUp,      // column-parallel GEMM (gate+up fused when gated)
  kMlpAct,     // elementwise
  kMlpDown,    // row-parallel GEMM
  kRouter,     // small GEMM + top-k
  kExperts,    // grouped GEMMs of the routed experts (EP-tagged)
  kSharedExperts,
  kHead,       // vocab projection
  kLoss,       // cross-entropy
  kSynthetic,  // synthetic region
  // Unfused attention (model.attention = "unfused"; Megatron-LM 2021-22): three ops in place
  // of kAttention. All split by heads under TP.
  kAttnScores,   // S = Q K^T, batched GEMM per head over the dense s x s matrix (no params)
  kSoftmax,      // fused scale-mask-softmax over b*a*s^2 elements (+ dropout on the probabilities)
  kAttnContext,  // O = P V, batched GEMM per head (no params)
  // Bias-dropout-add after the attention output projection and after the MLP (Megatron's
  // fused kernel): out = residual + dropout(x + bias). Replicated under TP (it follows the
  // row-parallel all-reduce); holds the bias of the preceding row-parallel GEMM.
  kResidual,
  // Not a model op: the per-device optimizer step the compiler adds when the plan has an
  // `optimizer` (CompiledPlan::model gets one op of this kind; see dag.h, Node::op).
  kOptimizer,
};
std::string_view op_kind_name(OpKind k);

/// How an op splits under tensor parallelism (Megatron-style).
enum class TpSplit : uint8_t { kNone, kColumn, kRow, kHeads, kReplicated };

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;  // [m,k] x [k,n]; zero if not a GEMM
  int64_t batch = 1;            // grouped GEMMs (experts)
};

struct ModelOp {
  std::string name;  // "layer3.attn.qkv"
  OpKind kind = OpKind::kSynthetic;
  plan::Tags tags;  // PP, LAYER, EP (no MB/PASS: those come from split and the compiler)
  TpSplit tp = TpSplit::kNone;
  GemmShape gemm;
  double fwd_flops = 0, bi_flops = 0, bw_flops = 0;
  int64_t fwd_bytes = 0, bi_bytes = 0, bw_bytes = 0;  // HBM traffic (read + write)
  int64_t param_bytes = 0;                            // weights, in the model dtype
  int64_t param_count = 0;                            // number of parameters (for optimizer state)
  int64_t saved_bytes = 0;                            // activations kept from F until its backward
  int64_t saved_bw_bytes = 0;    // the part of saved_bytes only BW needs (freed at BW)
  int64_t saved_input_bytes = 0;  // the part of saved_bytes that is the op's input (what a
                                  // recompute checkpoint keeps; the size of its input gradient)
  int64_t out_bytes = 0;         // output activation (sent across a stage boundary)
  /// Temporaries alive only inside the op's input-gradient pass (B or BI), on top of its
  /// saved activations: allocated when it starts, freed when it ends. An eager loss's two
  /// fp32 [tokens, vocab] gradients (docs/semantics.md); 0 for every other op.
  int64_t bwd_workspace_bytes = 0;
  /// Of the input: the bytes the op reads as split views of one tensor (a flash attention's
  /// q, k and v are views of the one QKV GEMM's output; a gated MLP's activation reads the gate
  /// and up halves of the one up GEMM's output). An unfused program's autograd gathers their
  /// gradients into one tensor (split's backward is a `cat`: read and written once more); a
  /// fused kernel writes them in place. 0 for every other op.
  int64_t split_input_bytes = 0;
  /// The share of the op's FLOPs that are model FLOPs (what MFU counts): the routed experts of
  /// an imbalanced or capacity-padded router compute more slots than a balanced router's T·k,
  /// which costs time but is not model work; 1 for every other op.
  double model_flops_share = 1.0;
  /// Activation-by-activation GEMM (attention scores / context): both input gradients are BI
  /// work (dQ and dK, or dP and dV); BW is empty.
  bool act_gemm = false;
  std::vector<uint32_t> inputs;  // producer ops (forward data edges), all with smaller ids

  /// Whether the op has a weight gradient: parameters, or weight-gradient work (a tied head on
  /// the embedding's devices has no parameters of its own, but computes their gradient). Where
  /// the backward is split into BI + BW, an op without one (attention core, activations, loss)
  /// gets no BW node: its whole backward is BI, as in zero-bubble runtimes, which defer only
  /// the weight GEMMs.
  bool has_weight_grad() const { return param_count > 0 || bw_flops > 0 || bw_bytes > 0; }
};

struct ModelGraph {
  std::vector<ModelOp> ops;  // topological order
  int pp_regions = 1;
  int layers = 0;
  plan::DType dtype = plan::DType::kBF16;
  int64_t tokens_per_microbatch = 0;
  double model_flops_per_microbatch = 0;  // forward + backward, for MFU (6·N·T + attention;
                                          // MoE: a balanced router's top_k experts per token)
  int64_t total_params = 0;
};

/// Expands the model. Errors (e.g. pp_regions > layers) point at spec.pointer fields.
/// `cp` > 1 (context parallelism): the ops of ONE CP rank, on its s/cp tokens of each sequence
/// (tokens_per_microbatch and model_flops_per_microbatch are that rank's); the caller has
/// checked a transformer with flash attention and seq_len divisible by 2·cp.
/// `cp_comm` a2a: attention kernels over the whole sequence and a/cp heads (the caller has
/// checked heads and kv_heads divisible by tp·cp).
/// `eager`: the saved activations of an unfused PyTorch program (kernel_style eager,
/// plan::eager_kernel_style) instead of the fused kernels' (Megatron-Core / Transformer Engine,
/// Korthikanti et al. 2022 Table 2); only the memory fields differ (docs/semantics.md).
Expected<ModelGraph> expand_model(const plan::ModelSpec& spec,
                                  const plan::JsonSource* src = nullptr, int cp = 1,
                                  plan::CpCommType cp_comm = plan::CpCommType::kP2P,
                                  bool eager = false);

/// Bytes per parameter of a device's static memory before any ZeRO sharding, as the compiler
/// prices them (CompiledPlan::static_mem): weights and gradients in the parameters' dtype (bf16
/// for an fp8 model, whose fp8 weight copies are not counted here), and the state of the plan's
/// optimizer (OptimizerSpec::state_bytes_per_param; Adam with master weights when the plan
/// names no optimizer). The one rule the compiler and the sweep estimate both use.
struct StaticBytesPerParam {
  int64_t params = 0, grads = 0, optimizer = 0;
};
StaticBytesPerParam static_bytes_per_param(plan::DType dtype, const plan::OptimizerSpec& opt);

}  // namespace stretto::compiler
