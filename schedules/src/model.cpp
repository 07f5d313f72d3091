// Model expansion (see model.h). FLOP and byte counts follow the usual Megatron accounting:
// a GEMM [m,k]x[k,n] costs 2mkn FLOPs forward, and the same again for each of the input
// gradient (dX = dY W^T, "BI") and the weight gradient (dW = X^T dY, "BW"). Core attention is
// causal flash attention: 2·b·s²·h forward (half of the dense 4·b·s²·h), backward 2.5x forward
// (recomputes the softmax). Elementwise ops and norms are memory-bound: bytes moved.
#include "stretto/schedules/model.h"

#include <fmt/format.h>

namespace stretto {

std::string_view op_kind_name(OpKind k) {
  static constexpr std::string_view kNames[] = {
      "embedding", "norm",   "qkv",     "attention",      "out_proj", "mlp_up", "mlp_act",
      "mlp_down",  "router", "experts", "shared_experts", "head",     "loss",   "synthetic"};
  return kNames[static_cast<size_t>(k)];
}

namespace {

struct Builder {
  ModelGraph g;
  int64_t dt = 2;

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
    op.param_bytes = w;
    op.saved_bytes = op.saved_bw_bytes = x;
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
    op.param_bytes = params * dt;
    op.saved_bytes = in;
    op.out_bytes = out;
    return op;
  }
};

int region_of_layer(int layer, int layers, int regions) {
  // Region i holds layers [floor(i·L/N), floor((i+1)·L/N)).
  for (int i = regions - 1; i >= 0; --i)
    if (static_cast<int64_t>(i) * layers / regions <= layer) return i;
  return 0;
}

}  // namespace

Expected<ModelGraph> expand_model(const ModelSpec& spec, const JsonSource* src) {
  auto err = [&](const std::string& key, std::string msg, std::string hint) {
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
  };
  if (spec.pp_regions > spec.layers)
    return err("pp_regions",
               fmt::format("pp_regions ({}) exceeds the number of layers ({})", spec.pp_regions,
                           spec.layers),
               "each pipeline region holds at least one layer");
  Builder b;
  b.dt = dtype_bytes(spec.dtype);
  const int64_t dt = b.dt;
  ModelGraph& g = b.g;
  g.pp_regions = spec.pp_regions;
  g.layers = spec.layers;
  g.dtype = spec.dtype;
  const int last_region = spec.pp_regions - 1;

  if (spec.family == ModelSpec::Family::kSynthetic) {
    g.tokens_per_microbatch = spec.microbatch_size;
    for (int l = 0; l < spec.layers; ++l) {
      ModelOp op;
      op.name = fmt::format("layer{}", l);
      op.kind = OpKind::kSynthetic;
      op.tags.set(TagKey::kPP, region_of_layer(l, spec.layers, spec.pp_regions));
      op.tags.set(TagKey::kLayer, l);
      op.fwd_flops = spec.flops;
      op.bi_flops = op.bw_flops = spec.flops;
      op.fwd_bytes = op.bi_bytes = op.bw_bytes = spec.activation_bytes + spec.boundary_bytes;
      op.param_bytes = spec.param_bytes;
      op.param_count = spec.param_bytes / dt;
      op.saved_bytes = spec.activation_bytes;
      // Half of a synthetic region's saved activations are inputs of its weight gradient.
      op.saved_bw_bytes = spec.activation_bytes / 2;
      op.out_bytes = spec.boundary_bytes;
      if (l > 0) op.inputs.push_back(static_cast<uint32_t>(l - 1));
      g.total_params += op.param_count;
      g.model_flops_per_microbatch += op.fwd_flops + op.bi_flops + op.bw_flops;
      b.add(std::move(op));
    }
    return std::move(g);
  }

  const int64_t bs = spec.microbatch_size, s = spec.seq_len, T = bs * s, h = spec.hidden;
  const int64_t a = spec.heads, kv = spec.kv_heads, d = h / a, f = spec.ffn_hidden;
  const int64_t V = spec.vocab, qkv_n = (a + 2 * kv) * d;
  g.tokens_per_microbatch = T;

  auto tag = [&](ModelOp& op, int pp, int layer) {
    op.tags.set(TagKey::kPP, pp);
    if (layer >= 0) op.tags.set(TagKey::kLayer, layer);
  };

  // Embedding: a gather (no FLOPs); its weight gradient is a scatter-add.
  ModelOp emb;
  emb.name = "embedding";
  emb.kind = OpKind::kEmbedding;
  emb.tp = TpSplit::kRow;  // vocab-parallel: partial results all-reduced
  emb.fwd_bytes = T * h * dt + T * 8;
  emb.bw_bytes = 2 * T * h * dt;
  emb.param_count = V * h;
  emb.param_bytes = V * h * dt;
  emb.saved_bytes = T * 8;  // token ids
  emb.out_bytes = T * h * dt;
  tag(emb, 0, -1);
  uint32_t prev = b.add(std::move(emb));

  int moe_index = 0;
  for (int l = 0; l < spec.layers; ++l) {
    const int pp = region_of_layer(l, spec.layers, spec.pp_regions);
    auto name = [&](const char* n) { return fmt::format("layer{}.{}", l, n); };
    auto chain = [&](ModelOp op, std::vector<uint32_t> in) {
      tag(op, pp, l);
      op.inputs = std::move(in);
      return b.add(std::move(op));
    };
    uint32_t n1 = chain(b.elementwise(name("attn_norm"), OpKind::kNorm, TpSplit::kReplicated,
                                      T * h * dt, T * h * dt, h),
                        {prev});
    uint32_t qkv =
        chain(b.gemm(name("attn.qkv"), OpKind::kQKV, TpSplit::kColumn, T, h, qkv_n), {n1});
    ModelOp att;
    att.name = name("attn.core");
    att.kind = OpKind::kAttention;
    att.tp = TpSplit::kHeads;
    att.gemm = {s, s, d, bs * a};  // per head: [s,d]x[d,s]
    att.fwd_flops = 2.0 * static_cast<double>(bs) * s * s * h;
    att.bi_flops = 2.5 * att.fwd_flops;
    att.fwd_bytes = T * qkv_n * dt + T * h * dt;
    att.bi_bytes = 2 * att.fwd_bytes + T * h * dt;
    att.saved_bytes = T * qkv_n * dt + T * h * dt + T * a * 4;  // q, k, v, output, logsumexp
    att.out_bytes = T * h * dt;
    uint32_t core = chain(std::move(att), {qkv});
    uint32_t proj =
        chain(b.gemm(name("attn.out_proj"), OpKind::kOutProj, TpSplit::kRow, T, h, h), {core});
    uint32_t n2 = chain(b.elementwise(name("mlp_norm"), OpKind::kNorm, TpSplit::kReplicated,
                                      T * h * dt, T * h * dt, h),
                        {proj});
    const bool is_moe = spec.moe && l >= spec.moe->first_layer &&
                        (l - spec.moe->first_layer) % spec.moe->every == 0;
    if (!is_moe) {
      const int64_t up_n = spec.gated_mlp ? 2 * f : f;
      uint32_t up =
          chain(b.gemm(name("mlp.up"), OpKind::kMlpUp, TpSplit::kColumn, T, h, up_n), {n2});
      uint32_t act = chain(b.elementwise(name("mlp.act"), OpKind::kMlpAct, TpSplit::kColumn,
                                         T * up_n * dt, T * f * dt, 0),
                           {up});
      prev = chain(b.gemm(name("mlp.down"), OpKind::kMlpDown, TpSplit::kRow, T, f, h), {act});
      continue;
    }
    const MoeSpec& moe = *spec.moe;
    const int64_t E = moe.experts, k = moe.top_k, ef = moe.expert_ffn_hidden;
    ModelOp router = b.gemm(name("moe.router"), OpKind::kRouter, TpSplit::kReplicated, T, h, E);
    router.saved_bytes += T * E * 4;  // routing probabilities (fp32)
    uint32_t rt = chain(std::move(router), {n2});
    // Routed experts as one grouped GEMM block (up, activation, down) over T·k token-slots,
    // balanced routing: each expert sees T·k/E tokens.
    const int64_t up_n = spec.gated_mlp ? 2 * ef : ef;
    const int64_t slots = T * k;
    ModelOp ex;
    ex.name = name("moe.experts");
    ex.kind = OpKind::kExperts;
    ex.tp = TpSplit::kColumn;
    ex.gemm = {std::max<int64_t>(1, slots / E), up_n + h, h, E};
    double gf = 2.0 * static_cast<double>(slots) * h * (up_n + ef);
    ex.fwd_flops = ex.bi_flops = ex.bw_flops = gf;
    ex.param_count = E * (h * up_n + ef * h);
    ex.param_bytes = ex.param_count * dt;
    const int64_t act_in = slots * (h + up_n + ef) * dt;  // inputs of up, act, down
    ex.fwd_bytes = act_in + ex.param_bytes + slots * h * dt;
    ex.bi_bytes = ex.bw_bytes = ex.fwd_bytes;
    ex.saved_bytes = act_in;
    ex.saved_bw_bytes = slots * (h + ef) * dt;  // GEMM inputs; the act input is needed by BI
    ex.out_bytes = T * h * dt;
    ex.tags.set(TagKey::kEP, moe_index++);
    uint32_t exid = chain(std::move(ex), {rt});
    std::vector<uint32_t> outs = {exid};
    if (moe.shared_experts > 0) {
      const int64_t sf = ef * moe.shared_experts;
      const int64_t sup = spec.gated_mlp ? 2 * sf : sf;
      ModelOp sh =
          b.gemm(name("moe.shared"), OpKind::kSharedExperts, TpSplit::kColumn, T, h, sup + h);
      sh.gemm = {T, sup + h, h, 1};
      double sfl = 2.0 * T * h * (sup + sf);
      sh.fwd_flops = sh.bi_flops = sh.bw_flops = sfl;
      sh.param_count = h * sup + sf * h;
      sh.param_bytes = sh.param_count * dt;
      sh.saved_bytes = T * (h + sup + sf) * dt;
      sh.saved_bw_bytes = T * (h + sf) * dt;
      sh.out_bytes = T * h * dt;
      outs.push_back(chain(std::move(sh), {n2}));
    }
    // Residual sum of routed and shared outputs is fused into the next op's input.
    prev = exid;
    if (outs.size() > 1) {
      // Make the next op depend on both branches by routing through the last one added.
      g.ops[outs.back()].inputs.push_back(exid);
      prev = outs.back();
    }
  }
  uint32_t fn = [&] {
    ModelOp op =
        b.elementwise("final_norm", OpKind::kNorm, TpSplit::kReplicated, T * h * dt, T * h * dt, h);
    tag(op, last_region, -1);
    op.inputs = {prev};
    return b.add(std::move(op));
  }();
  ModelOp head = b.gemm("head", OpKind::kHead, TpSplit::kColumn, T, h, V);
  if (spec.tie_embeddings) head.param_bytes = head.param_count = 0;
  tag(head, last_region, -1);
  head.inputs = {fn};
  uint32_t hd = b.add(std::move(head));
  ModelOp loss = b.elementwise("loss", OpKind::kLoss, TpSplit::kColumn, T * V * dt, T * 4, 0);
  loss.saved_bytes = T * V * dt;  // logits (softmax recomputed from them in backward)
  loss.fwd_bytes = T * V * (dt + 4);
  loss.bi_bytes = T * V * (dt + 4) * 2;
  tag(loss, last_region, -1);
  loss.inputs = {hd};
  b.add(std::move(loss));

  for (const auto& op : g.ops) {
    g.total_params += op.param_count;
    g.model_flops_per_microbatch += op.fwd_flops + op.bi_flops + op.bw_flops;
  }
  return std::move(g);
}

}  // namespace stretto
