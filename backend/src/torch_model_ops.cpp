// Ops of the merged cost model the replay executes beyond the original set (see
// torch_model.h): the bias-dropout-add that ends every sub-block (OpKind::kResidual) and
// unfused attention (scores, softmax with dropout on the probabilities, context), and context
// parallelism's attention (cp_comm_type p2p, all_gather and a2a).
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "torch_model.h"

namespace stretto::backend::detail {

using compiler::OpKind;

at::Tensor TorchModel::dropout_mask(uint32_t o, int replica, int mb,
                                    const std::vector<int64_t>& full, int dim, int64_t start,
                                    int64_t len) const {
  const double p = cp_.plan.model.dropout;
  const std::string key = fmt::format("dropout/{}/{}/{}/{}", seed_, cp_.model.ops[o].name, replica, mb);
  // Each element's index in the full tensor: [outer, len, inner] around dimension `dim`.
  const size_t d = static_cast<size_t>(dim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= full[i];
  for (size_t i = d + 1; i < full.size(); ++i) inner *= full[i];
  if (len < 0) len = full[d] - start;
  const auto lng = at::TensorOptions().dtype(at::kLong).device(opts_.device());
  const at::Tensor index = at::arange(outer, lng).mul_(full[d] * inner).view({outer, 1, 1}) +
                           at::arange(start, start + len, lng).mul_(inner).view({1, len, 1}) +
                           at::arange(inner, lng).view({1, 1, inner});
  std::vector<int64_t> shape = full;
  shape[d] = len;
  const at::Tensor keep = dropout_keep(index, std::hash<std::string>{}(key), p).reshape(shape);
  return keep.to(opts_.dtype()).mul_(1.0 / (1.0 - p));
}

at::Tensor TorchModel::residual_forward(uint32_t o, const std::vector<at::Tensor>& inputs,
                                        const std::vector<Param>& params, int replica, int mb,
                                        OpCtx& c) const {
  // out = residual + dropout(sum of the branch outputs + bias); the residual stream is the
  // last input (model.cpp: {out_proj, block input}, {mlp.down, ...}, {experts, [shared], ...}).
  if (inputs.size() < 2)
    throw std::runtime_error(fmt::format("replay: {} needs a branch and a residual input",
                                         cp_.model.ops[o].name));
  at::Tensor x = inputs[0];
  for (size_t i = 1; i + 1 < inputs.size(); ++i) x = x + inputs[i];
  if (!params.empty()) {
    x = x + params[0].value;
    c.sites.push_back(Site{x, {params[0].value}, {0}});
  }
  if (cp_.plan.model.dropout > 0) x = x * dropout_mask(o, replica, mb, x.sizes().vec());
  return x + inputs.back();
}

at::Tensor TorchModel::unfused_attention(uint32_t o, const std::vector<at::Tensor>& inputs,
                                         const OpPlacement& pl, int replica, int mb) const {
  const compiler::ModelOp& op = cp_.model.ops[o];
  const int64_t al = heads_ / pl.tp, kvl = kv_ / pl.tp;
  const int64_t bs = cp_.plan.model.microbatch_size, s = cp_.plan.model.seq_len;
  // Heads of the QKV output [T, (al + 2 kvl) d] as [bs, heads, s, d], KV repeated for GQA.
  auto heads = [&](const at::Tensor& qkv, int64_t off, int64_t n) {
    at::Tensor t = qkv.narrow(1, off * d_, n * d_).reshape({bs, s, n, d_}).transpose(1, 2);
    return repeat_kv_heads(t, al / n);
  };
  switch (op.kind) {
    case OpKind::kAttnScores: {
      const at::Tensor& qkv = inputs.at(0);
      const at::Tensor scores = at::matmul(heads(qkv, 0, al), heads(qkv, al, kvl).transpose(-2, -1)) /
                                std::sqrt(static_cast<double>(d_));
      return scores.masked_fill(causal_mask_, -std::numeric_limits<float>::infinity());
    }
    case OpKind::kSoftmax: {
      at::Tensor p = at::softmax(inputs.at(0), -1);
      if (cp_.plan.model.dropout > 0)  // the full model's mask, this rank's heads
        p = p * dropout_mask(o, replica, mb, {bs, heads_, s, s}, 1, pl.tp_rank * al, al);
      return p;
    }
    case OpKind::kAttnContext:
      return at::matmul(inputs.at(0), heads(inputs.at(1), al + kvl, kvl))
          .transpose(1, 2)
          .reshape({bs * s, al * d_});
    default:
      throw std::runtime_error(fmt::format("replay: {} is not an attention op", op.name));
  }
}

// Context parallelism, cp_comm_type p2p (Transformer Engine's AttnFuncWithCPAndKVP2P as
// Megatron-Core runs it with the load-balanced split). CP rank r holds chunks r and 2cp-1-r of
// each sequence (q, k, v: [b, heads, 2c, d], its two chunks of c tokens in sequence order). At
// ring step i it holds the K/V of rank src = (r - i) mod cp, and which of its queries see which
// of those keys follows from the chunk positions:
//   i = 0 (src = r): its own two chunks, causal (positions increase along the local sequence);
//   src < r (1 <= i <= r): every query sees src's first chunk (src < r < 2cp-1-r), none sees
//     its second (2cp-1-src > 2cp-1-r): all queries against K/V[:c], no mask;
//   src > r (i > r): only the second query chunk (2cp-1-r) sees anything, and it sees both of
//     src's chunks (src < cp <= 2cp-1-r, and 2cp-1-src < 2cp-1-r): q[c:] against all K/V, no
//     mask; the first query chunk (r < src) is skipped.
// Each step gives a partial output and its log-sum-exp per query; they are merged as flash
// attention merges blocks (the running log-sum-exp). While step i computes, its K/V go on to
// rank r+1 and rank r-1's arrive (one hop per step, cp-1 hops). The received chunks are
// autograd leaves, so the backward yields their gradients (OpCtx::cp_dkv), which
// cp_backward_ring() returns to their owners. Each step is the explicit formula (scores,
// logsumexp, softmax times V) in fp32: the public SDPA returns no log-sum-exp to merge by.
at::Tensor TorchModel::ring_attention(const at::Tensor& q_in, const at::Tensor& k_in,
                                      const at::Tensor& v_in, int rank,
                                      const CpRingPost& post, OpCtx& c) const {
  const int cp = ctx_par_;
  const at::Tensor q = q_in.to(at::kFloat);
  const int64_t a = q.size(1), kvh = k_in.size(1), len = q.size(2), half = len / 2;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_));
  // Partial attention of queries qq against keys/values kk, vv: (output, log-sum-exp).
  auto partial = [&](const at::Tensor& qq, at::Tensor kk, at::Tensor vv, bool causal) {
    if (a != kvh) {  // GQA: KV heads repeated for their query heads
      kk = repeat_kv_heads(kk, a / kvh);
      vv = repeat_kv_heads(vv, a / kvh);
    }
    at::Tensor scores = at::matmul(qq, kk.transpose(-2, -1)) * scale;
    if (causal)
      scores = scores.masked_fill(
          at::ones({qq.size(2), kk.size(2)}, at::TensorOptions().dtype(at::kBool).device(q.device()))
              .triu(1),
          -std::numeric_limits<float>::infinity());
    at::Tensor lse = at::logsumexp(scores, {-1});
    return std::make_pair(at::matmul(at::exp(scores - lse.unsqueeze(-1)), vv), lse);
  };
  at::Tensor out, lse;
  // Merges a partial result for the queries [from, len) into (out, lse).
  auto merge = [&](const at::Tensor& o, const at::Tensor& l, int64_t from) {
    const at::Tensor oo = out.narrow(2, from, len - from), ol = lse.narrow(2, from, len - from);
    const at::Tensor nl = at::logaddexp(ol, l);
    const at::Tensor no = oo * at::exp(ol - nl).unsqueeze(-1) + o * at::exp(l - nl).unsqueeze(-1);
    if (from == 0) {
      out = no;
      lse = nl;
    } else {
      out = at::cat({out.narrow(2, 0, from), no}, 2);
      lse = at::cat({lse.narrow(2, 0, from), nl}, 2);
    }
  };
  at::Tensor kv = at::stack({k_in, v_in}).to(at::kFloat);  // [2, b, kv heads, len, d]
  for (int i = 0; i < cp; ++i) {
    std::function<at::Tensor()> arrive;
    if (i + 1 < cp) arrive = post(kv.detach().contiguous(), i);  // on to rank r+1
    const int src = ((rank - i) % cp + cp) % cp;
    const at::Tensor k = kv.select(0, 0), v = kv.select(0, 1);
    if (i == 0) {
      std::tie(out, lse) = partial(q, k, v, /*causal=*/true);
    } else if (src < rank) {
      auto [o, l] = partial(q, k.narrow(2, 0, half), v.narrow(2, 0, half), false);
      merge(o, l, 0);
    } else {
      auto [o, l] = partial(q.narrow(2, half, half), k, v, false);
      merge(o, l, half);
    }
    if (arrive) {
      kv = arrive();  // rank r-1's step-i chunk: this rank's step i+1
      if (at::GradMode::is_enabled()) kv.set_requires_grad(true);
      c.cp_kv.push_back(kv);
    }
  }
  return out;
}

namespace {

// The whole sequence from the CP ranks' tensors (by CP rank): rank i holds chunks i and
// 2cp-1-i, the two halves of dimension `dim`; the 2cp chunks concatenated in sequence order.
at::Tensor in_sequence_order(const std::vector<at::Tensor>& by_rank, int64_t dim) {
  const int cp = static_cast<int>(by_rank.size());
  const int64_t half = by_rank[0].size(dim) / 2;
  std::vector<at::Tensor> chunks;
  for (int m = 0; m < 2 * cp; ++m) {
    const int owner = m < cp ? m : 2 * cp - 1 - m;
    chunks.push_back(by_rank[static_cast<size_t>(owner)].narrow(dim, m < cp ? 0 : half, half));
  }
  return at::cat(chunks, dim);
}

// What the other CP ranks sent (parts, by CP rank) becomes autograd leaves kept in c.cp_kv;
// this rank's own place takes `own`, which stays in the graph.
void take_received(std::vector<at::Tensor>& parts, const at::Tensor& own, int rank, OpCtx& c) {
  c.cp_rank = rank;
  for (size_t j = 0; j < parts.size(); ++j) {
    if (static_cast<int>(j) == rank) {
      parts[j] = own;
      continue;
    }
    if (at::GradMode::is_enabled()) parts[j].set_requires_grad(true);
    c.cp_kv.push_back(parts[j]);
  }
}

}  // namespace

// cp_comm_type all_gather (Transformer Engine's AttnFuncWithCPAndKVAllGather): the K/V of
// every CP rank gathered (rank j holds chunks j and 2cp-1-j), laid out in sequence order, and
// one attention of this rank's queries (chunks r and 2cp-1-r) over the whole sequence, a key
// visible to a query when its position is not later. The other ranks' K/V are autograd leaves
// (OpCtx::cp_kv by CP rank, this rank's own skipped: its gradient flows through the graph);
// cp_backward() reduce-scatters their gradients. The formula in fp32, as ring_attention.
at::Tensor TorchModel::gathered_attention(const at::Tensor& q_in, const at::Tensor& k_in,
                                          const at::Tensor& v_in, int rank, const CpComm& comm,
                                          OpCtx& c) const {
  const int cp = ctx_par_;
  const at::Tensor q = q_in.to(at::kFloat);
  const int64_t a = q.size(1), kvh = k_in.size(1), len = q.size(2), chunk = len / 2;
  const at::Tensor kv = at::stack({k_in, v_in}).to(at::kFloat);  // [2, b, kv heads, len, d]
  std::vector<at::Tensor> parts = comm.all_gather(kv.detach());
  take_received(parts, kv, rank, c);
  const at::Tensor full = in_sequence_order(parts, 3);
  at::Tensor k = full.select(0, 0), v = full.select(0, 1);
  if (a != kvh) {
    k = repeat_kv_heads(k, a / kvh);
    v = repeat_kv_heads(v, a / kvh);
  }
  const auto lng = at::TensorOptions().dtype(at::kLong).device(q.device());
  const at::Tensor q_pos =
      at::cat({at::arange(rank * chunk, (rank + 1) * chunk, lng),
               at::arange((2 * cp - 1 - rank) * chunk, (2 * cp - rank) * chunk, lng)});
  const at::Tensor hidden = at::arange(2 * cp * chunk, lng).unsqueeze(0).gt(q_pos.unsqueeze(1));
  const at::Tensor scores =
      (at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d_)))
          .masked_fill(hidden, -std::numeric_limits<float>::infinity());
  return at::matmul(at::softmax(scores, -1), v);
}

// cp_comm_type a2a (DeepSpeed-Ulysses; Transformer Engine's AttnFuncWithCPAndQKVOA2A): CP rank
// j computes heads [j a/cp, (j+1) a/cp) (and KV heads [j kv/cp, (j+1) kv/cp)) over the whole
// sequence. An all-to-all sends every rank's two chunks of head group j to rank j, which lays
// the 2cp chunks out in sequence order (rank i holds chunks i and 2cp-1-i) and runs plain causal
// attention over them: the fused kernel, as without CP. A second all-to-all sends each rank's
// chunks of the output back. The other ranks' Q/K/V head groups are autograd leaves
// (OpCtx::cp_kv by CP rank, this rank's own through the graph); the graph ends in the head
// group's output (OpCtx::cp_root), whose gradient cp_output_grad() gathers by the reverse
// all-to-all before backward_inputs, and cp_backward() returns the leaves' gradients.
at::Tensor TorchModel::a2a_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     int rank, const CpComm& comm, OpCtx& c) const {
  const int cp = ctx_par_;
  const int64_t b = q.size(0), a = q.size(1), kvh = k.size(1), len = q.size(2), d = q.size(3);
  const int64_t ag = a / cp, kg = kvh / cp, half = len / 2;
  // Row j: head group j of this rank's chunks, [cp, b, ag + 2 kg, len, d].
  const at::Tensor send = at::cat({q.reshape({b, cp, ag, len, d}), k.reshape({b, cp, kg, len, d}),
                                   v.reshape({b, cp, kg, len, d})},
                                  2)
                              .transpose(0, 1);
  std::vector<at::Tensor> parts = comm.all_to_all(send.detach());
  take_received(parts, send.select(0, rank), rank, c);
  const at::Tensor full = in_sequence_order(parts, 2);  // [b, ag + 2 kg, s, d]
  c.cp_root = causal_attention(full.narrow(1, 0, ag), full.narrow(1, ag, kg),
                               full.narrow(1, ag + kg, kg));  // [b, ag, s, d]
  // Row i: the output at CP rank i's chunks; what arrives from rank j is head group j.
  const at::Tensor o = c.cp_root.detach();
  std::vector<at::Tensor> rows;
  for (int i = 0; i < cp; ++i)
    rows.push_back(
        at::cat({o.narrow(2, i * half, half), o.narrow(2, (2 * cp - 1 - i) * half, half)}, 2));
  const std::vector<at::Tensor> back = comm.all_to_all(at::stack(rows));
  return at::stack(back, 1).reshape({b, a, len, d});
}

at::Tensor cp_output_grad(const OpCtx& ctx, const at::Tensor& dy, const CpComm& comm) {
  const at::Tensor& root = ctx.cp_root;  // [b, ag, s, d]
  const int cp = static_cast<int>(ctx.cp_kv.size()) + 1;
  const int64_t b = root.size(0), ag = root.size(1), s = root.size(2), d = root.size(3);
  const int64_t len = s / cp;
  // dy [b len, a d] -> row j: head group j at this rank's chunks, [cp, b, ag, len, d].
  const at::Tensor rows =
      dy.reshape({b, len, cp, ag, d}).permute({2, 0, 3, 1, 4}).to(root.scalar_type());
  return in_sequence_order(comm.all_to_all(rows), 2);  // by CP rank: its chunks
}

void cp_backward(OpCtx& ctx, std::vector<at::Tensor>& dx, const CpComm& comm, int64_t query_cols) {
  const size_t others = ctx.cp_dkv.size();  // cp - 1
  if (others == 0) return;
  if (dx.empty() || !dx[0].defined())
    throw std::runtime_error("internal: context-parallel attention without its input gradient");
  const int cp = static_cast<int>(others) + 1;
  at::Tensor acc;
  if (ctx.cp_root.defined()) {
    // a2a: the gradient of every rank's head group of this rank's Q/K/V goes back to it; row
    // j of what arrives is head group j's [b, ag + 2 kg, len, d] (this rank's own: zeros, its
    // gradient is in dx[0] through the graph).
    std::vector<at::Tensor> rows;
    for (size_t j = 0, o = 0; j < static_cast<size_t>(cp); ++j)
      rows.push_back(static_cast<int>(j) == ctx.cp_rank ? at::zeros_like(ctx.cp_dkv[0])
                                                        : ctx.cp_dkv[o++]);
    const at::Tensor got = at::stack(comm.all_to_all(at::stack(rows)));  // [cp, b, ag+2kg, len, d]
    const int64_t b = got.size(1), len = got.size(3), d = got.size(4);
    const int64_t ag = query_cols / (cp * d), kg = (got.size(2) - ag) / 2;
    // Heads j ag + h of this rank's [b len, heads d] columns: [cp, b, n, len, d] -> [b len, cp n
    // d].
    auto cols = [&](int64_t from, int64_t n) {
      return got.narrow(2, from, n).permute({1, 3, 0, 2, 4}).reshape({b * len, cp * n * d});
    };
    at::Tensor& g = dx[0];
    g = g + at::cat({cols(0, ag), cols(ag, kg), cols(ag + kg, kg)}, 1).to(g.scalar_type());
    ctx.cp_kv.clear();
    ctx.cp_dkv.clear();
    ctx.cp_root = at::Tensor();
    return;
  }
  if (ctx.cp_rank >= 0) {
    // all_gather: every rank's gradients of the gathered K/V by owner, summed over the group;
    // this rank keeps its own (the reduce-scatter's result).
    std::vector<at::Tensor> rows;
    for (size_t j = 0, o = 0; j < static_cast<size_t>(cp); ++j)
      rows.push_back(static_cast<int>(j) == ctx.cp_rank ? at::zeros_like(ctx.cp_dkv[0])
                                                         : ctx.cp_dkv[o++]);
    at::Tensor all = at::stack(rows).contiguous();
    comm.all_reduce(all);
    acc = all.select(0, ctx.cp_rank);
  } else {
    // p2p: the gradient of the chunk received at step 1 (rank r-1's) starts at this rank;
    // after hop t the one arriving is the gradient of rank r-1-t's chunk, which this rank held
    // at step t+1.
    acc = ctx.cp_dkv[0];
    for (size_t t = 0; t < others; ++t) {
      at::Tensor got = comm.ring(acc.contiguous(), cp + static_cast<int>(t))();
      acc = t + 1 < others ? got + ctx.cp_dkv[t + 1] : got;
    }
  }
  // acc: the other ranks' gradient of this rank's own K/V [2, b, kv heads, len, d].
  const int64_t b = acc.size(1), kvh = acc.size(2), len = acc.size(3), d = acc.size(4);
  auto cols = [&](const at::Tensor& t) { return t.transpose(1, 2).reshape({b * len, kvh * d}); };
  at::Tensor& g = dx[0];
  g = g + at::cat({at::zeros({b * len, query_cols}, acc.options()), cols(acc.select(0, 0)),
                   cols(acc.select(0, 1))},
                  1)
              .to(g.scalar_type());
  ctx.cp_kv.clear();
  ctx.cp_dkv.clear();
}

}  // namespace stretto::backend::detail
