// Model expansion (see model.h). FLOP and byte counts follow the usual Megatron accounting:
// a GEMM [m,k]x[k,n] costs 2mkn FLOPs forward, and the same again for each of the input
// gradient (dX = dY W^T, "BI") and the weight gradient (dW = X^T dY, "BW"). Core attention is
// either causal flash attention: 2·b·s²·a·d forward (half of the dense 4·b·s²·a·d; a·d = h
// unless the plan's head_dim differs from h / a), backward 2.5x
// forward (recomputes the softmax); or unfused (Megatron-LM 2021-22): Q K^T and P V as batched
// GEMMs over the dense s x s matrix (masked half included: 2·b·s²·h each forward, twice that
// backward), a scale-mask-softmax kernel and dropout over b·a·s² elements. Elementwise ops,
// norms and the bias-dropout-add after each sub-block are memory-bound: bytes moved.
// Saved activations follow Korthikanti et al. 2022 (arXiv 2205.05198) Table 2: sbh(34 + 5as/h)
// bytes per layer for a GPT layer with biases, dropout and unfused attention in 16 bits.
// An eager (unfused PyTorch) program saves what each ATen op's autograd formula keeps
// (tools/autograd/derivatives.yaml): Transformer::eager_memory().
#include "stretto/compiler/model.h"

#include "internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace stretto::compiler {

using plan::JsonSource;
using plan::ModelSpec;
using plan::TagKey;

std::string_view op_kind_name(OpKind k) {
  static constexpr std::string_view kNames[] = {
      "embedding", "norm",   "qkv",     "attention",      "out_proj", "mlp_up",      "mlp_act",
      "mlp_down",  "router", "experts", "shared_experts", "head",     "loss",        "synthetic",
      "attn_scores", "softmax", "attn_context", "residual", "optimizer"};
  return kNames[static_cast<size_t>(k)];
}

namespace {

struct Builder {
  ModelGraph g;
  int64_t dt = 2;   // activations and GEMM operands (the model dtype)
  int64_t pdt = 2;  // parameters as kept and reduced (param_dtype_bytes: bf16 for fp8 models)

  uint32_t add(ModelOp op) {
    g.ops.push_back(std::move(op));
    return static_cast<uint32_t>(g.ops.size() - 1);
  }

  // A GEMM op: X[m,k] · W[k,n]. The input X is saved for BW.
  ModelOp gemm(std::string name, OpKind kind, TpSplit tp, int64_t m, int64_t k, int64_t n,
               int64_t batch = 1) {
    ModelOp op;
    op.name = std::move(name);
    op.kind = kind;
    op.tp = tp;
    op.gemm = {m, n, k, batch};
    double f = 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n) *
               static_cast<double>(batch);
    op.fwd_flops = op.bi_flops = op.bw_flops = f;
    int64_t x = m * k * batch * dt, w = k * n * batch * dt, y = m * n * batch * dt;
    op.fwd_bytes = x + w + y;  // read X and W, write Y
    op.bi_bytes = y + w + x;   // read dY and W, write dX
    op.bw_bytes = x + y + w;   // read X and dY, write dW
    op.param_count = k * n * batch;
    op.param_bytes = k * n * batch * pdt;
    op.saved_bytes = op.saved_bw_bytes = op.saved_input_bytes = x;
    op.out_bytes = y;
    return op;
  }

  // A memory-bound op reading `in` and writing `out` bytes; saves its input for backward.
  ModelOp elementwise(std::string name, OpKind kind, TpSplit tp, int64_t in, int64_t out,
                      int64_t params) {
    ModelOp op;
    op.name = std::move(name);
    op.kind = kind;
    op.tp = tp;
    op.fwd_bytes = in + out + params * dt;
    op.bi_bytes = in + 2 * out + params * dt;  // read X, dY (and weight), write dX
    op.bw_bytes = params ? in + out + params * dt : 0;
    op.fwd_flops = static_cast<double>(in / dt) * 4;
    op.bi_flops = op.fwd_flops * 2;
    op.bw_flops = params ? op.fwd_flops : 0;
    op.param_count = params;
    op.param_bytes = params * pdt;
    op.saved_bytes = op.saved_input_bytes = in;
    op.out_bytes = out;
    return op;
  }
};

int region_of_layer(int layer, int layers, int regions, const std::vector<int>& list) {
  if (!list.empty()) {  // explicit layers per region
    int end = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      end += list[i];
      if (layer < end) return static_cast<int>(i);
    }
    return static_cast<int>(list.size()) - 1;
  }
  // Region i holds layers [floor(i·L/N), floor((i+1)·L/N)).
  for (int i = regions - 1; i >= 0; --i)
    if (static_cast<int64_t>(i) * layers / regions <= layer) return i;
  return 0;
}

// A diagnostic at the model spec's `key`.
Failure model_error(const ModelSpec& spec, const JsonSource* src, const std::string& key,
                    std::string msg, std::string hint) {
  std::string ptr = spec.pointer + (key.empty() ? "" : "/" + key);
  Diagnostic d = src ? src->error_at(ptr, std::move(msg), std::move(hint))
                     : Diagnostic{Severity::kError,
                                  std::move(msg),
                                  SourceLoc{"", 0, 0, ptr},
                                  -1,
                                  std::move(hint),
                                  {},
                                  {}};
  return fail(std::move(d));
}

// The layers' split into pipeline regions: a list that adds up to the layers, or no more
// regions than layers.
Expected<void> check_regions(const ModelSpec& spec, const JsonSource* src) {
  if (!spec.region_layers.empty()) {
    int64_t sum = 0;
    for (int n : spec.region_layers) sum += n;
    if (sum != spec.layers)
      return model_error(spec, src, "pp_regions",
                         fmt::format("pp_regions lists {} layers in all, but the model has {}",
                                     sum, spec.layers),
                         "the per-region layer counts must add up to 'layers'");
  } else if (spec.pp_regions > spec.layers)
    return model_error(spec, src, "pp_regions",
                       fmt::format("pp_regions ({}) exceeds the number of layers ({})",
                                   spec.pp_regions, spec.layers),
                       "each pipeline region holds at least one layer");
  return {};
}

// A synthetic model: one op per layer, each a region of the spec's FLOPs and bytes.
void expand_synthetic(Builder& b, const ModelSpec& spec) {
  ModelGraph& g = b.g;
  const int64_t dt = b.dt;
  g.tokens_per_microbatch = spec.microbatch_size;
  for (int l = 0; l < spec.layers; ++l) {
    ModelOp op;
    op.name = fmt::format("layer{}", l);
    op.kind = OpKind::kSynthetic;
    op.tags.set(TagKey::kPP, region_of_layer(l, spec.layers, spec.pp_regions, spec.region_layers));
    op.tags.set(TagKey::kLayer, l);
    op.fwd_flops = spec.flops;
    op.bi_flops = op.bw_flops = spec.flops;
    op.fwd_bytes = op.bi_bytes = op.bw_bytes = spec.activation_bytes + spec.boundary_bytes;
    op.param_bytes = spec.param_bytes;
    op.param_count = spec.param_bytes / dt;
    op.saved_bytes = spec.activation_bytes;
    // Half of a synthetic region's saved activations are inputs of its weight gradient.
    op.saved_bw_bytes = spec.activation_bytes / 2;
    op.saved_input_bytes = std::min(spec.activation_bytes, spec.boundary_bytes);
    op.out_bytes = spec.boundary_bytes;
    if (l > 0) op.inputs.push_back(static_cast<uint32_t>(l - 1));
    g.total_params += op.param_count;
    g.model_flops_per_microbatch +=
      (op.fwd_flops + op.bi_flops + op.bw_flops) * op.model_flops_share;
    b.add(std::move(op));
  }
}

// A transformer (GPT, Llama, MoE): embedding, layers (attention, then a dense MLP or MoE
// block), final norm, head and loss, with the spec's dimensions.
class Transformer {
 public:
  Transformer(Builder& b, const ModelSpec& spec, int cp_degree, plan::CpCommType cp_comm,
              bool eager)
      : b_(b), spec_(spec), eager_(eager), dt(b.dt), bs(spec.microbatch_size), s(spec.seq_len),
        cp(cp_degree),
        cp_a2a(cp_degree > 1 && cp_comm == plan::CpCommType::kA2A),
        sl(spec.seq_len / cp_degree), T(bs * sl),
        h(spec.hidden), a(spec.heads), kv(spec.kv_heads), d(spec.attention_head_dim()),
        f(spec.ffn_hidden), ad(a * d), V(spec.vocab), qkv_n((a + 2 * kv) * d),
        drop(spec.dropout > 0), norm_params(spec.bias ? 2 * h : h), e(T * h) {}

  void expand() {
    b_.g.tokens_per_microbatch = T;
    prev_ = add_embedding();
    for (int l = 0; l < spec_.layers; ++l) add_layer(l);
    add_head_and_loss();
    if (eager_) eager_memory();
  }

 private:
  struct Layer {
    int l, pp;
  };
  std::string name(const Layer& L, const char* n) const { return fmt::format("layer{}.{}", L.l, n); }
  static void tag(ModelOp& op, int pp, int layer) {
    op.tags.set(TagKey::kPP, pp);
    if (layer >= 0) op.tags.set(TagKey::kLayer, layer);
  }
  uint32_t chain(const Layer& L, ModelOp op, std::vector<uint32_t> in) {
    tag(op, L.pp, L.l);
    op.inputs = std::move(in);
    return b_.add(std::move(op));
  }

  // Embedding: a gather (no FLOPs); its weight gradient is a scatter-add.
  uint32_t add_embedding() {
    ModelOp emb;
    emb.name = "embedding";
    emb.kind = OpKind::kEmbedding;
    emb.tp = TpSplit::kRow;  // vocab-parallel: partial results all-reduced
    emb.fwd_bytes = T * h * dt + T * 8;
    emb.bw_bytes = 2 * T * h * dt;
    emb.param_count = V * h;
    emb.param_bytes = V * h * b_.pdt;
    emb.saved_bytes = emb.saved_input_bytes = T * 8;  // token ids
    emb.out_bytes = T * h * dt;
    tag(emb, 0, -1);
    return b_.add(std::move(emb));
  }

  // Bias-dropout-add after a sub-block: out = residual + dropout(x + bias), one fused kernel.
  ModelOp residual(std::string nm) const {
    ModelOp op;
    op.name = std::move(nm);
    op.kind = OpKind::kResidual;
    op.tp = TpSplit::kReplicated;
    // read x and the residual, write the sum; with dropout also write the 1-byte mask
    op.fwd_bytes = 3 * e * dt + (drop ? e : 0) + (spec_.bias ? h * dt : 0);
    op.fwd_flops = static_cast<double>(e) * (drop ? 3 : 1);
    // the residual branch passes dY through untouched; the other branch is dY * mask / (1-p)
    op.bi_bytes = drop ? 2 * e * dt + e : 0;
    op.bi_flops = drop ? static_cast<double>(e) : 0;
    // dbias = dY summed over tokens
    op.bw_bytes = spec_.bias ? e * dt + h * dt : 0;
    op.bw_flops = spec_.bias ? static_cast<double>(e) : 0;
    op.param_count = spec_.bias ? h : 0;
    op.param_bytes = op.param_count * b_.pdt;
    op.saved_bytes = drop ? e : 0;  // the dropout mask (saved_input_bytes 0: nothing to keep)
    op.out_bytes = e * dt;
    return op;
  }
  ModelOp with_bias(ModelOp op) const {
    if (!spec_.bias) return op;
    op.param_count += op.gemm.n * op.gemm.batch;
    op.param_bytes += op.gemm.n * op.gemm.batch * b_.pdt;
    return op;
  }
  ModelOp norm(std::string nm) const {
    return b_.elementwise(std::move(nm), OpKind::kNorm, TpSplit::kReplicated, e * dt, e * dt,
                          norm_params);
  }

  void add_layer(int l) {
    const Layer L{l, region_of_layer(l, spec_.layers, spec_.pp_regions, spec_.region_layers)};
    const uint32_t layer_in = prev_;
    uint32_t n1 = chain(L, norm(name(L, "attn_norm")), {layer_in});
    uint32_t qkv = chain(
        L, with_bias(b_.gemm(name(L, "attn.qkv"), OpKind::kQKV, TpSplit::kColumn, T, h, qkv_n)),
        {n1});
    uint32_t core = spec_.attention == plan::AttentionImpl::kFlash ? add_flash_attention(L, qkv)
                                                                   : add_unfused_attention(L, qkv);
    uint32_t proj = chain(
        L, b_.gemm(name(L, "attn.out_proj"), OpKind::kOutProj, TpSplit::kRow, T, ad, h), {core});
    uint32_t r1 = chain(L, residual(name(L, "attn.residual")), {proj, layer_in});
    uint32_t n2 = chain(L, norm(name(L, "mlp_norm")), {r1});
    const bool is_moe = spec_.moe && l >= spec_.moe->first_layer &&
                        (l - spec_.moe->first_layer) % spec_.moe->every == 0;
    prev_ = is_moe ? add_moe(L, n2, r1) : add_dense_mlp(L, n2, r1);
  }

  // Context parallelism (cp > 1): the rank's s/cp queries attend to all s keys over the ring's
  // cp steps (the K/V of the other cp − 1 ranks arrive one chunk a step), so its work is 1/cp
  // of the whole attention's, [s/cp, d] x [d, s] per head, as Megatron-Core counts it
  // (the FLOPs of the whole sequence divided over the CP ranks); it reads the received K/V
  // chunks besides its own q, k, v (p2p; all_gather: the gathered K/V, the same bytes).
  // With cp_comm_type a2a (DeepSpeed-Ulysses, TE's AttnFuncWithCPAndQKVOA2A) the all-to-all
  // before it hands each rank the whole sequence of 1/cp of the heads: the same FLOPs, as
  // [s, d] x [d, s] kernels over a/cp heads, reading no other rank's K/V.
  uint32_t add_flash_attention(const Layer& L, uint32_t qkv) {
    ModelOp att;
    att.name = name(L, "attn.core");
    att.kind = OpKind::kAttention;
    att.tp = TpSplit::kHeads;
    att.gemm = cp_a2a ? GemmShape{s, s, d, bs * a / cp}  // per head: [s,d]x[d,s], a/cp heads
                      : GemmShape{sl, s, d, bs * a};     // per head: [s/cp,d]x[d,s]
    att.fwd_flops = 2.0 * static_cast<double>(bs) * sl * s * ad;
    att.bi_flops = 2.5 * att.fwd_flops;
    att.fwd_bytes = T * qkv_n * dt + T * ad * dt + (cp_a2a ? 0 : (cp - 1) * T * 2 * kv * d * dt);
    att.bi_bytes = 2 * att.fwd_bytes + T * ad * dt;
    att.saved_bytes = T * qkv_n * dt + T * ad * dt + T * a * 4;  // q, k, v, output, logsumexp
    att.saved_input_bytes = T * qkv_n * dt;
    att.split_input_bytes = T * qkv_n * dt;  // q, k and v: views of the QKV output
    att.out_bytes = T * ad * dt;
    return chain(L, std::move(att), {qkv});
  }

  // Unfused: S = QK^T over the dense s x s matrix per head, softmax (+ dropout), O = PV.
  uint32_t add_unfused_attention(const Layer& L, uint32_t qkv) {
    const int64_t P = bs * a * s * s;  // score elements
    const int64_t qk = T * ad * dt + T * kv * d * dt, v = T * kv * d * dt;
    const double mm = 2.0 * static_cast<double>(bs) * s * s * ad;  // one dense s x s GEMM
    ModelOp sc;
    sc.name = name(L, "attn.scores");
    sc.kind = OpKind::kAttnScores;
    sc.tp = TpSplit::kHeads;
    sc.act_gemm = true;
    sc.gemm = {s, s, d, bs * a};  // per head: [s,d]x[d,s]
    sc.fwd_flops = mm;
    sc.bi_flops = 2 * mm;  // dQ = dS K, dK = dS^T Q
    sc.fwd_bytes = qk + P * dt;
    sc.bi_bytes = P * dt + 2 * qk;
    sc.saved_bytes = sc.saved_input_bytes = qk;  // Q and K
    sc.out_bytes = P * dt;
    uint32_t sid = chain(L, std::move(sc), {qkv});
    ModelOp sm;
    sm.name = name(L, "attn.softmax");
    sm.kind = OpKind::kSoftmax;
    sm.tp = TpSplit::kHeads;
    // softmax: read S, write P; dropout: read P, write P' and the 1-byte mask
    sm.fwd_bytes = 2 * P * dt + (drop ? 2 * P * dt + P : 0);
    sm.fwd_flops = 5.0 * static_cast<double>(P);
    // dropout backward: read dP', mask, write dP; softmax backward: read dP, P, write dS
    sm.bi_bytes = 3 * P * dt + (drop ? 2 * P * dt + P : 0);
    sm.bi_flops = 4.0 * static_cast<double>(P);
    sm.saved_bytes = P * dt + (drop ? P : 0);  // softmax output (+ dropout mask)
    sm.out_bytes = P * dt;
    uint32_t smid = chain(L, std::move(sm), {sid});
    ModelOp cx;
    cx.name = name(L, "attn.context");
    cx.kind = OpKind::kAttnContext;
    cx.tp = TpSplit::kHeads;
    cx.act_gemm = true;
    cx.gemm = {s, d, s, bs * a};  // per head: [s,s]x[s,d]
    cx.fwd_flops = mm;
    cx.bi_flops = 2 * mm;  // dP' = dO V^T, dV = P'^T dO
    cx.fwd_bytes = P * dt + v + T * ad * dt;
    cx.bi_bytes = T * ad * dt + 2 * P * dt + 2 * v;
    // V, and the dropped-out probabilities when they differ from the softmax output
    cx.saved_bytes = v + (drop ? P * dt : 0);
    cx.saved_input_bytes = v;  // V comes from QKV; the probabilities from inside the core
    cx.out_bytes = T * ad * dt;
    return chain(L, std::move(cx), {smid, qkv});
  }

  // Up, activation, down and the residual (with r1); returns the residual.
  uint32_t add_dense_mlp(const Layer& L, uint32_t n2, uint32_t r1) {
    const int64_t up_n = spec_.gated_mlp ? 2 * f : f;
    uint32_t up = chain(
        L, with_bias(b_.gemm(name(L, "mlp.up"), OpKind::kMlpUp, TpSplit::kColumn, T, h, up_n)),
        {n2});
    ModelOp act_op = b_.elementwise(name(L, "mlp.act"), OpKind::kMlpAct, TpSplit::kColumn,
                                    T * up_n * dt, T * f * dt, 0);
    if (spec_.gated_mlp) act_op.split_input_bytes = T * up_n * dt;  // gate and up halves
    uint32_t act = chain(L, std::move(act_op), {up});
    uint32_t down =
        chain(L, b_.gemm(name(L, "mlp.down"), OpKind::kMlpDown, TpSplit::kRow, T, f, h), {act});
    return chain(L, residual(name(L, "mlp.residual")), {down, r1});
  }

  // Router, routed experts (EP-tagged), shared experts and the residual; returns the residual.
  uint32_t add_moe(const Layer& L, uint32_t n2, uint32_t r1) {
    const plan::MoeSpec& moe = *spec_.moe;
    const int64_t E = moe.experts, k = moe.top_k, ef = moe.expert_ffn_hidden;
    ModelOp router =
        b_.gemm(name(L, "moe.router"), OpKind::kRouter, TpSplit::kReplicated, T, h, E);
    router.saved_bytes += T * E * 4;  // routing probabilities (fp32)
    uint32_t rt = chain(L, std::move(router), {n2});
    // Routed experts as one grouped GEMM block (up, activation, down) over T·k token-slots.
    // Each expert sees T·k/E tokens when balanced; the busiest expert (imbalance, or the
    // capacity every expert is padded to) sets the grouped GEMM's time and the all-to-all size
    // (MoeSpec::load_factor).
    const int64_t up_n = spec_.gated_mlp ? 2 * ef : ef;
    const double load = moe.load_factor();
    const int64_t slots =
        std::max<int64_t>(1, static_cast<int64_t>(std::llround(static_cast<double>(T * k) * load)));
    ModelOp ex;
    ex.name = name(L, "moe.experts");
    ex.kind = OpKind::kExperts;
    ex.tp = TpSplit::kColumn;
    ex.gemm = {std::max<int64_t>(1, slots / E), up_n + h, h, E};
    double gf = 2.0 * static_cast<double>(slots) * h * (up_n + ef);
    ex.fwd_flops = ex.bi_flops = ex.bw_flops = gf;
    ex.model_flops_share = static_cast<double>(T * k) / static_cast<double>(slots);
    ex.param_count = E * (h * up_n + ef * h);
    ex.param_bytes = ex.param_count * b_.pdt;
    const int64_t act_in = slots * (h + up_n + ef) * dt;  // inputs of up, act, down
    ex.fwd_bytes = act_in + ex.param_count * dt + slots * h * dt;
    ex.bi_bytes = ex.bw_bytes = ex.fwd_bytes;
    ex.saved_bytes = act_in;
    ex.saved_bw_bytes = slots * (h + ef) * dt;  // GEMM inputs; the act input is needed by BI
    ex.saved_input_bytes = slots * h * dt;
    ex.out_bytes = T * h * dt;
    ex.tags.set(TagKey::kEP, moe_index_++);
    uint32_t exid = chain(L, std::move(ex), {rt});
    std::vector<uint32_t> outs = {exid};
    if (moe.shared_experts > 0) outs.push_back(add_shared_experts(L, n2));
    // The residual sums the routed (and shared) expert outputs into the stream.
    outs.push_back(r1);
    return chain(L, residual(name(L, "moe.residual")), std::move(outs));
  }

  uint32_t add_shared_experts(const Layer& L, uint32_t n2) {
    const plan::MoeSpec& moe = *spec_.moe;
    const int64_t ef = moe.expert_ffn_hidden;
    const int64_t sf = ef * moe.shared_experts;
    const int64_t sup = spec_.gated_mlp ? 2 * sf : sf;
    ModelOp sh =
        b_.gemm(name(L, "moe.shared"), OpKind::kSharedExperts, TpSplit::kColumn, T, h, sup + h);
    sh.gemm = {T, sup + h, h, 1};
    double sfl = 2.0 * T * h * (sup + sf);
    sh.fwd_flops = sh.bi_flops = sh.bw_flops = sfl;
    sh.param_count = h * sup + sf * h;
    sh.param_bytes = sh.param_count * b_.pdt;
    sh.saved_bytes = T * (h + sup + sf) * dt;
    sh.saved_bw_bytes = T * (h + sf) * dt;
    sh.saved_input_bytes = T * h * dt;
    sh.out_bytes = T * h * dt;
    return chain(L, std::move(sh), {n2});
  }

  // Final norm, head (vocabulary projection) and loss, on the last region.
  void add_head_and_loss() {
    const int last_region = spec_.pp_regions - 1;
    ModelOp fn_op = norm("final_norm");
    tag(fn_op, last_region, -1);
    fn_op.inputs = {prev_};
    uint32_t fn = b_.add(std::move(fn_op));
    ModelOp head = b_.gemm("head", OpKind::kHead, TpSplit::kColumn, T, h, V);
    if (spec_.tie_embeddings) head.param_bytes = head.param_count = 0;
    tag(head, last_region, -1);
    head.inputs = {fn};
    uint32_t hd = b_.add(std::move(head));
    ModelOp loss = b_.elementwise("loss", OpKind::kLoss, TpSplit::kColumn, T * V * dt, T * 4, 0);
    loss.saved_bytes = loss.saved_input_bytes = T * V * dt;  // logits (softmax recomputed from them in backward)
    loss.fwd_bytes = T * V * (dt + 4);
    loss.bi_bytes = T * V * (dt + 4) * 2;
    tag(loss, last_region, -1);
    loss.inputs = {hd};
    b_.add(std::move(loss));
  }

  // An unfused PyTorch program's saved activations and temporaries, op by op, as each ATen
  // op's autograd formula keeps them (tools/autograd/derivatives.yaml, torch 2.11), where they
  // differ from the fused kernels' above:
  // - norm: _fused_rms_norm (F.rms_norm on CUDA) saves input and rstd, native_layer_norm input,
  //   mean and rstd; rstd and mean are fp32 per token.
  // - gated MLP activation, silu(gate) * up: silu saves its input (the gate half), mul saves
  //   both operands, so silu(gate), [tokens, ffn], is kept besides the up GEMM's output (a
  //   fused SwiGLU recomputes it).
  // - flash attention: scaled_dot_product_attention saves q, k, v, its output and the
  //   log-sum-exp; its output is the out projection's input, one tensor, which the out
  //   projection's saved input already counts.
  // - loss, nll_loss(log_softmax(logits, dtype=float32)): log_softmax converts bf16/fp16 logits
  //   to fp32 first (ATen's log_softmax takes the half_to_float kernel for CUDA fp16 only),
  //   _log_softmax saves its fp32 result and nll_loss_forward the same tensor; the logits
  //   themselves are not saved. Its backward holds two fp32 [tokens, vocab] gradients at once
  //   (nll_loss_backward's, and _log_softmax_backward_data's output): bwd_workspace_bytes.
  void eager_memory() {
    const int64_t stat = (spec_.bias ? 2 : 1) * T * 4;  // rstd (and mean), fp32 per token
    for (ModelOp& op : b_.g.ops) {
      switch (op.kind) {
        case OpKind::kNorm:
          op.saved_bytes += stat;
          break;
        case OpKind::kMlpAct:
          if (spec_.gated_mlp) op.saved_bytes += T * f * dt;
          break;
        case OpKind::kAttention:
          if (cp == 1) op.saved_bytes -= T * ad * dt;
          break;
        case OpKind::kLoss:
          // (saved_input_bytes stays the logits: what a checkpoint of the loss would keep)
          op.saved_bytes = T * V * 4;
          op.bwd_workspace_bytes = 2 * T * V * 4;
          break;
        default:
          break;
      }
    }
  }

  Builder& b_;
  const ModelSpec& spec_;
  const bool eager_;  // an unfused PyTorch program's memory (eager_memory)
  const int64_t dt;  // the model dtype's bytes
  // Microbatch size, sequence, tokens, hidden, heads, KV heads, head width d (the plan's
  // head_dim, or h / a: attention works on a·d wide queries and outputs, = h unless head_dim
  // says otherwise, as on Qwen3 and Gemma; keys and values kv·d wide), FFN hidden,
  // query / attention-output width, vocabulary, QKV output width.
  // With context parallelism (cp > 1) every op works on this rank's s/cp tokens (sl; T = bs·sl)
  // but attention, whose keys span the whole sequence s.
  const int64_t bs, s, cp;
  const bool cp_a2a;  // cp_comm_type a2a: attention over the whole sequence, a/cp heads
  const int64_t sl, T, h, a, kv, d, f, ad, V, qkv_n;
  const bool drop;
  const int64_t norm_params;  // LayerNorm weight + bias, or RMSNorm
  const int64_t e;            // hidden-state elements
  uint32_t prev_ = 0;         // the op whose output the next layer takes
  int moe_index_ = 0;
};

}  // namespace

Expected<ModelGraph> expand_model(const ModelSpec& spec, const JsonSource* src, int cp,
                                  plan::CpCommType cp_comm, bool eager) {
  if (auto ok = check_regions(spec, src); !ok) return fail(std::move(ok.error()));
  STRETTO_ASSERT(cp == 1 || (spec.family == ModelSpec::Family::kTransformer &&
                             spec.attention == plan::AttentionImpl::kFlash &&
                             spec.seq_len % (2 * cp) == 0),
                 "context parallelism's conditions are checked by the compiler");
  Builder b;
  b.dt = plan::dtype_bytes(spec.dtype);
  b.pdt = detail::param_dtype_bytes(spec.dtype);
  ModelGraph& g = b.g;
  g.pp_regions = spec.pp_regions;
  g.layers = spec.layers;
  g.dtype = spec.dtype;
  if (spec.family == ModelSpec::Family::kSynthetic) {
    expand_synthetic(b, spec);
    return std::move(g);
  }
  Transformer(b, spec, cp, cp_comm, eager).expand();
  for (const auto& op : g.ops) {
    g.total_params += op.param_count;
    g.model_flops_per_microbatch += op.fwd_flops + op.bi_flops + op.bw_flops;
  }
  return std::move(g);
}

StaticBytesPerParam static_bytes_per_param(plan::DType dtype, const plan::OptimizerSpec& opt) {
  const int dt = detail::param_dtype_bytes(dtype);
  const plan::OptimizerSpec& os = opt.given ? opt : plan::OptimizerSpec{};
  return {dt, dt, os.state_bytes_per_param(dt)};
}

}  // namespace stretto::compiler
