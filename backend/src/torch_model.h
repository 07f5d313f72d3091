#pragma once
// The plan's model as LibTorch code, one function per model op (private to the backend).
//
// Every ModelOp of the compiled plan (schedules/model.h) becomes real tensors: parameters
// (initialised from the seed and the parameter's name, then sliced for tensor or expert
// parallelism, so every layout starts from the same full weights) and a forward function from
// its inputs to its (possibly partial) output. The executor makes the inputs autograd leaves,
// so one op's backward is autograd over that op alone:
//   BI: grad(out -> input leaves and every weight site's output z), keeping the graph;
//   BW: grad(z -> that site's weights) per site, so BW never redoes BI's input-gradient work.
// Layout conventions: activations are [tokens, features] (tokens = microbatch_size·seq_len);
// the router's output carries the tokens and the dense top-k gates, [T, hidden + experts]; the
// experts take [S, T, hidden + experts] (S = expert-parallel sources) and return [S, T, hidden]
// partial sums. Residual adds are done by the executor (residual_source()), after any TP or EP
// reduction of the op's output.

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "stretto/backend/replay.h"
#include "stretto/compiler/compiler.h"

namespace stretto::backend::detail {

/// How a local parameter tensor maps onto the full parameter (for --check).
struct ParamSlice {
  std::string name;
  std::vector<int64_t> full_shape;
  int dim = -1;  // sliced dimension; -1: the whole parameter
  // The local tensor is these [start, start + length) ranges of `dim`, concatenated: one for a
  // TP slice; one per part for a fused weight whose parts are each sharded (QKV's Q, K and V
  // rows, a gated MLP's gate and up rows: rank r holds its rows of every part, as Megatron).
  std::vector<std::pair<int64_t, int64_t>> ranges;
};

struct Param {
  ParamSlice slice;
  at::Tensor value;  // leaf, requires grad
  at::Tensor grad;   // accumulated gradient (same shape)
};

/// Where an op instance runs in its parallel groups.
struct OpPlacement {
  int tp = 1, tp_rank = 0;
  int ep = 1, ep_rank = 0;
};

/// A weight site: z = f(x, params), the last primitive that touches `params`.
struct Site {
  at::Tensor z;
  std::vector<at::Tensor> params;  // leaves
  std::vector<size_t> param_index;  // into the op's Param list
};

/// A forward pass of one op on one microbatch, kept until its backward.
struct OpCtx {
  std::vector<at::Tensor> leaves;  // inputs as autograd leaves (undefined: no gradient)
  at::Tensor out;                  // output (possibly partial)
  std::vector<Site> sites;
  std::vector<at::Tensor> dz;      // after BI: gradient of each site's z
  // Context parallelism: the K/V chunks of the other CP ranks (autograd leaves, [2, b, kv heads,
  // s/cp, d] fp32): p2p, those received at ring steps 1..cp-1; all_gather, the gathered ones
  // by CP rank, this rank's left out (cp_rank says which). After backward_inputs their
  // gradients, which cp_backward() returns to their owners.
  // a2a: the Q/K/V head groups received from the other CP ranks (their chunks of this rank's
  // heads, [b, heads/cp + 2 kv heads/cp, s/cp, d]), by CP rank, this rank's own left out.
  std::vector<at::Tensor> cp_kv, cp_dkv;
  int cp_rank = -1;  // all_gather and a2a: this rank's place in the CP group (-1: p2p)
  // a2a: this rank's heads' attention output over the whole sequence, [b, heads/cp, s, d]:
  // what the backward differentiates (out is its all-to-all back to the rank's own chunks,
  // not in the graph); cp_output_grad() turns the gradient of out into that of cp_root.
  at::Tensor cp_root;
  int64_t bytes = 0;               // activation bytes this context keeps alive
  bool live = false;
};

/// All-reduce (sum or max) over the op's tensor-parallel group, in place (vocab-parallel loss).
using TpAllReduce = std::function<void(at::Tensor&, bool max)>;

/// One hop of context parallelism's p2p ring: posts `send` to the next rank of the CP group
/// and a receive of a tensor of its shape from the previous one; the returned function waits
/// for both and gives the received tensor. `slot` numbers the hops of one op call: forward
/// hops 0 .. cp-2, backward hops cp .. 2cp-2 (the executor makes each a distinct tag).
using CpRingPost = std::function<std::function<at::Tensor()>(const at::Tensor& send, int slot)>;

/// A CP rank's communication over its CP group, by cp_comm_type: p2p, the ring's hops;
/// all_gather, every rank's tensor (by CP rank) and, for the backward's reduce-scatter, a sum
/// over the group in place; a2a, an all-to-all of [cp, ...] (row j to CP rank j) returning
/// what each CP rank sent this one (by CP rank).
struct CpComm {
  CpRingPost ring;
  std::function<std::vector<at::Tensor>(const at::Tensor&)> all_gather;
  std::function<void(at::Tensor&)> all_reduce;
  std::function<std::vector<at::Tensor>(const at::Tensor&)> all_to_all;
};

/// What this build's LibTorch offers the fused path: at::rms_norm (2.4 and later), the public
/// scaled_dot_product_attention (2.0; 1.13's private entry point reads scalars on the host), its
/// enable_gqa (2.5). forward() and kernel_uses() (the report of which kernel ran) decide from
/// the same facts (torch_model.cpp, from TORCH_VERSION).
struct TorchKernels {
  bool rms_norm = false, sdpa = false, sdpa_gqa = false;
};
TorchKernels torch_kernels();

/// Kernels of the model ops (replay.h). kFused: at::layer_norm, at::rms_norm (LibTorch >= 2.4),
/// scaled_dot_product_attention with is_causal (GQA in the kernel from 2.5, else KV heads
/// repeated; never a materialised mask), cross-entropy as an fp32-accumulating log_softmax over
/// the logits' own dtype, SwiGLU over the contiguous halves of one up-projection GEMM.
/// kReference: the explicit formulas. Either way QKV and a gated MLP's up projection are one
/// GEMM of one fused weight (Megatron-Core's linear_qkv and linear_fc1).
using ModelKernels = Kernels;

class TorchModel {
 public:
  /// `context_parallel` > 1: a CP rank's model (the executor's; --check's reference is the
  /// full-sequence model, 1). Replica r of an op's device set is then CP rank r % cp of data
  /// replica r / cp: it holds the load-balanced chunks r % cp and 2cp-1-r % cp of each of that
  /// replica's sequences (2·cp chunks, Megatron's get_batch_on_this_cp_rank), its ops run on
  /// those s/cp tokens, and attention runs over the CP group (`cp_comm`, by cp_comm_type).
  TorchModel(const compiler::CompiledPlan& cp, uint64_t seed, at::TensorOptions opts,
             ModelKernels kernels = ModelKernels::kFused, int context_parallel = 1);

  const compiler::CompiledPlan& plan() const { return cp_; }
  at::TensorOptions options() const { return opts_; }

  /// The op's parameters for a placement (full weights, sliced).
  std::vector<Param> make_params(uint32_t op, const OpPlacement& pl) const;
  /// Op whose output is added to this op's output as the residual stream (kNone: none).
  uint32_t residual_source(uint32_t op) const { return residual_[op]; }
  /// Whether an op is the model's last (no consumers): its output is the scaled loss.
  bool is_last(uint32_t op) const { return consumers_[op] == 0; }

  ModelKernels kernels() const { return kernels_; }

  /// Synthetic input of the first op (token ids, or a synthetic activation) and labels, on the
  /// model's device. Drawn on the host once per (replica, microbatch) and kept, so a forward
  /// never creates a tensor from host data or copies one to the device (prepare() draws them
  /// before the timed steps; a first use draws them otherwise). Not thread-safe: one host
  /// thread per model, as the executor runs it.
  const at::Tensor& input_data(int replica, int mb) const;
  const at::Tensor& labels(int replica, int mb) const;
  void prepare(int replica, int mb) const;

  /// Forward of `op`. `inputs` are the values of op.inputs (leaves or graph tensors); the
  /// first op gets input_data(). `loss_scale` scales the last op's loss. `cp_comm`: a
  /// context-parallel attention's communication (needed when context_parallel() > 1).
  OpCtx forward(uint32_t op, const std::vector<at::Tensor>& inputs, const std::vector<Param>& params,
                const OpPlacement& pl, int replica, int mb, double loss_scale,
                const TpAllReduce& tp_allreduce, const CpComm& cp_comm = {}) const;

  int context_parallel() const { return ctx_par_; }

  /// Shape of an op's full output value for one microbatch (what transfers carry).
  std::vector<int64_t> output_shape(uint32_t op) const;

 private:
  const compiler::CompiledPlan& cp_;
  uint64_t seed_;
  at::TensorOptions opts_;
  ModelKernels kernels_;
  at::Tensor causal_mask_;  // [s, s] bool, true above the diagonal: built once, when needed
  int ctx_par_ = 1;         // context-parallel degree of this model's ranks
  int64_t s_ = 0;           // tokens of each sequence on one rank: seq_len / context_parallel
  struct Data {
    at::Tensor input, labels;
  };
  mutable std::map<std::pair<int, int>, Data> data_;
  const Data& data(int replica, int mb) const;
  std::vector<uint32_t> residual_;
  std::vector<int> consumers_;
  int64_t T_ = 0, h_ = 0, heads_ = 0, kv_ = 0, d_ = 0, f_ = 0, V_ = 0, E_ = 0, k_ = 0, ef_ = 0;
  // synthetic
  int64_t rows_ = 1, width_ = 1, gemms_ = 1;

  // Bias-dropout-add (OpKind::kResidual) and unfused attention (scores, softmax + dropout,
  // context): torch_model_ops.cpp.
  at::Tensor residual_forward(uint32_t op, const std::vector<at::Tensor>& inputs,
                              const std::vector<Param>& params, int replica, int mb,
                              OpCtx& c) const;
  at::Tensor unfused_attention(uint32_t op, const std::vector<at::Tensor>& inputs,
                               const OpPlacement& pl, int replica, int mb) const;
  /// Ring attention of CP rank `rank` (torch_model_ops.cpp): q [b, a, s/cp, d], k and v
  /// [b, kv, s/cp, d] of its two chunks; returns [b, a, s/cp, d] fp32.
  at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int rank, const CpRingPost& post, OpCtx& c) const;
  /// cp_comm_type all_gather (torch_model_ops.cpp): K/V of the whole sequence gathered from
  /// the CP group, one attention of the rank's queries over it, masked by token position.
  at::Tensor gathered_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                int rank, const CpComm& comm, OpCtx& c) const;
  /// cp_comm_type a2a (torch_model_ops.cpp): Q, K and V all-to-all'd from sequence chunks to
  /// head groups, causal_attention() of this rank's heads over the whole sequence, the output
  /// all-to-all'd back; returns [b, a, s/cp, d] of the rank's chunks (not in the graph: the
  /// graph ends in c.cp_root).
  at::Tensor a2a_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           int rank, const CpComm& comm, OpCtx& c) const;
  /// Causal attention of q [b, a, s, d] over k, v [b, kv, s, d] of one whole sequence (s =
  /// seq_len): the fused SDPA where this build has it and kernels are fused, else the formula
  /// with the model's causal mask; KV heads repeated where the kernel has no GQA.
  at::Tensor causal_attention(const at::Tensor& q, at::Tensor k, at::Tensor v) const;
  /// Dropout keep-mask scaled by 1/(1-p), drawn on the model's device by a counter-based hash
  /// of the op, replica, microbatch and each element's index in the `full` tensor (the same
  /// on every device kind, every TP rank, in a recomputed forward and in --check's
  /// reference): no generator, no host draw, no host-to-device copy. The mask of the slice
  /// [start, start + len) of dimension `dim` (len < 0: the whole tensor).
  at::Tensor dropout_mask(uint32_t op, int replica, int mb, const std::vector<int64_t>& full,
                          int dim = 0, int64_t start = 0, int64_t len = -1) const;

  at::Tensor full_weight(const std::string& name, std::vector<int64_t> shape, int64_t fan_in,
                         bool ones = false) const;

 public:
  /// A value of op `o`'s output (output_shape, row-major) laid out in memory as forward()
  /// gives it: the fused gated mlp_up's [T, 2f] is column-major (one GEMM W x^T, so that gate
  /// and up are contiguous blocks). What bench-ops and tests draw an op's inputs as.
  at::Tensor in_output_layout(uint32_t o, const at::Tensor& v) const;
};

/// Backward of one op: BI (inputs and sites, keeps the graph) or the full B. Returns the
/// gradients of ctx.leaves (undefined where no gradient); accumulates parameter gradients for
/// a full B.
std::vector<at::Tensor> backward_inputs(OpCtx& ctx, const at::Tensor& dy, bool full,
                                        std::vector<Param>& params);
/// Context parallelism's backward communication, after backward_inputs of a CP rank's
/// attention (ctx holds cp_dkv), returning each other rank's K/V gradient to it. p2p: the
/// gradient of each chunk received in the forward travels on around the ring, every rank it
/// passes adding its own, until it reaches the chunk's owner (cp-1 hops). all_gather: the
/// reduce-scatter of the gathered K/V's gradient (Gloo has none: a sum over the group of every
/// rank's gradients, of which each keeps its own). What arrives is added to the K and V columns
/// of dx[0], the gradient of the attention's QKV input [T, (a + 2 kv) d] (a query heads first).
/// a2a: the K/V chunks' all-to-all back is that of the Q, K and V head groups received in the
/// forward: each goes back to its owner, which adds it to its QKV input's gradient columns of
/// those heads.
void cp_backward(OpCtx& ctx, std::vector<at::Tensor>& dx, const CpComm& comm,
                 int64_t query_cols);
/// cp_comm_type a2a, before backward_inputs: the gradient of the op's output (this rank's
/// chunks, every head, [T, a d]) all-to-all'd to the head groups' ranks, returned as the
/// gradient of ctx.cp_root (this rank's heads over the whole sequence).
at::Tensor cp_output_grad(const OpCtx& ctx, const at::Tensor& dy, const CpComm& comm);

/// BW after BI: parameter gradients from the sites' saved dz.
void backward_weights(OpCtx& ctx, std::vector<Param>& params);

int64_t tensor_bytes(const at::Tensor& t);

/// GQA: each of the KV heads of [b, kv, s, d] repeated `rep` times in place, [b, kv * rep, s, d]
/// (head j of the result is KV head j / rep). One expand + copy: repeat_interleave with an
/// integer count reads its output size on the host (.item(), a device synchronisation on CUDA).
at::Tensor repeat_kv_heads(const at::Tensor& t, int64_t rep);

/// The local experts' tokens for gates [N, experts] (a token goes to every expert whose gate is
/// positive), N = sources x T tokens, source after source.
///   Dropless (capacity 0): tokens[o_e, o_e + counts[e]) are expert e's, ascending, o_e the sum
///   of the counts before e. The counts are read on the host (once: the sizes of the experts'
///   GEMMs).
///   With a capacity C > 0 (moe.capacity_factor): every expert takes at most C tokens of each
///   source, chosen by `policy` (moe.token_drop_policy): the C with the highest gates (probs;
///   equal gates in token order) or the first C in token order (position); the others are
///   dropped. Its list is padded to
///   exactly sources x C: tokens [experts, sources x C] (padding rows name token 0) and
///   `valid` [experts, sources x C] (1 for a routed token, 0 for padding). Every shape follows
///   from the plan, nothing is read on the host.
struct ExpertTokens {
  at::Tensor tokens;
  std::vector<int64_t> counts;  // dropless only
  at::Tensor valid;             // with a capacity only (bool)
};
ExpertTokens route_tokens(const at::Tensor& gates, int64_t sources = 1, int64_t capacity = 0,
                          plan::MoeSpec::DropPolicy policy = plan::MoeSpec::DropPolicy::kProbs);

/// The capacity of one expert for one source of `tokens` tokens routed top_k of `experts` ways
/// with moe.capacity_factor `factor` (0: dropless, returns 0): ceil(tokens * top_k / experts *
/// factor) as Megatron-Core's get_capacity computes it (moe_utils.py), at most `tokens` (an
/// expert takes a token once).
int64_t expert_capacity(int64_t tokens, int64_t top_k, int64_t experts, double factor);

/// Dropout's keep test for the elements at `index` (int64, any device): true where a hash of
/// (key, index) falls at or above a fraction p of its range. Exact integer arithmetic (every
/// value below 2^49), so every device draws the same mask for the same key and index.
at::Tensor dropout_keep(const at::Tensor& index, uint64_t key, double p);

}  // namespace stretto::backend::detail
