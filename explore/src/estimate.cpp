// The analytic step-time and memory estimate (estimate.h).
#include "stretto/explore/estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "stretto/costmodel/cp_attention.h"
#include "stretto/costmodel/tp_overlap.h"
#include "stretto/sim/outside_allocator.h"

namespace stretto::explore {

using compiler::CommKind;
using compiler::OpKind;
using compiler::TpSplit;
using plan::Pass;

namespace {

Diagnostic plain(std::string msg) {
  Diagnostic d;
  d.message = std::move(msg);
  return d;
}

// Whether the gradient norm's all-reduce spans every device, as the compiler builds Megatron-
// Core's grad_stats_parallel_group (Compiler::grad_norm_groups): with the distributed optimizer
// (ZeRO >= 1) or with expert parallelism (an expert op's shards are one copy, which joins the
// replicas' groups); else the group is one replica's TP x PP devices.
bool norm_over_every_device(const Resolved& r) { return r.zero >= 1 || r.ep > 1; }

}  // namespace

Expected<Estimator> Estimator::make(const plan::Plan& plan, const std::string& base_dir) {
  auto cm = cost::make_cost_model(plan.costmodel, plan.cluster, base_dir);
  if (!cm) return fail(std::move(cm).error());
  Estimator e;
  e.plan_ = plan;
  e.cm_ = std::shared_ptr<const cost::CostModel>(std::move(*cm));
  return e;
}

double Estimator::comm_ns(CommKind k, int64_t bytes, int group, int nodes) {
  if (group <= 1 || bytes <= 0) return 0;
  cost::CommQuery q;
  q.kind = k;
  q.bytes = bytes;
  q.group_size = group;
  q.nodes_spanned = std::max(1, nodes);
  q.dtype = plan_.model.dtype;
  return static_cast<double>(cm_->comm(q).time_ns);
}

const Estimator::LayerCosts& Estimator::costs(int64_t mbs, int tp, int ep, bool sp, int cp,
                                               plan::CpCommType cp_comm) {
  auto key = std::make_tuple(mbs, tp, ep, sp, cp, cp_comm);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  LayerCosts& c = cache_[key];
  plan::ModelSpec ms = plan_.model;
  ms.microbatch_size = mbs;
  ms.pp_regions = 1;
  // Megatron-LM's vocabulary padding, as the compiler pads it (Compiler::pad_vocab).
  ms.vocab = plan::padded_vocab(ms, tp);
  // With context parallelism the ops of one CP rank, on its s/cp tokens (as the compiler),
  // where the compiler takes it (else empty: the point's own compile reports why).
  if (cp > 1 && (ms.family != plan::ModelSpec::Family::kTransformer ||
                 ms.attention != plan::AttentionImpl::kFlash || ms.seq_len % (2 * cp) != 0))
    return c;
  auto g = compiler::expand_model(ms, nullptr, cp, cp_comm,
                                 plan::eager_kernel_style(plan_.costmodel));
  if (!g) return c;  // empty: the point's own compile reports the problem
  const int L = g->layers;
  for (auto* v : {&c.f, &c.bi, &c.bw, &c.tp_f, &c.tp_b, &c.tp_b_async, &c.a2a, &c.attn_f, &c.saved, &c.boundary,
                  &c.params, &c.expert_params, &c.layer_param_bytes})
    v->assign(std::max(1, L), 0.0);
  const int dpn = std::max(1, plan_.cluster.devices_per_node);
  const int tp_nodes = (tp + dpn - 1) / dpn;
  const int ep_nodes = std::max(1, (tp * ep + dpn - 1) / dpn);
  const int cp_nodes = std::max(1, (tp * cp + dpn - 1) / dpn);  // a CP group: cp ranks tp apart
  for (const compiler::ModelOp& op : g->ops) {
    const bool split = op.tp != TpSplit::kReplicated && op.tp != TpSplit::kNone;
    const int t = split ? tp : 1;
    // Sequence parallelism: an unsplit op (norm, dropout, residual) works on this rank's 1/tp
    // of the tokens, its parameters whole (sim::CostQueries::compute).
    const bool seq = sp && tp > 1 && !split;
    const int work_t = seq ? tp : t;
    auto query = [&](Pass pass, double flops, int64_t bytes, int64_t bw_bytes = 0) {
      cost::ComputeQuery q;
      q.kind = op.kind;
      q.pass = pass;
      q.dtype = g->dtype;
      q.tp = tp;
      compiler::GemmShape gs = op.gemm;
      if (seq) gs.m = std::max<int64_t>(1, gs.m / tp);
      if (tp > 1 && split) {
        if (op.tp == TpSplit::kColumn) gs.n = std::max<int64_t>(1, gs.n / tp);
        else if (op.tp == TpSplit::kRow) gs.k = std::max<int64_t>(1, gs.k / tp);
        else if (op.tp == TpSplit::kHeads) gs.batch = std::max<int64_t>(1, gs.batch / tp);
      }
      q.gemm = gs;
      q.flops = flops / work_t;
      q.bytes = bytes / work_t;
      q.bw_bytes = bw_bytes / work_t;
      q.param_bytes = op.param_bytes / t;
      if (pass == Pass::kB || pass == Pass::kBI)
        q.split_grad_bytes = op.split_input_bytes / work_t;
      return q;
    };
    auto time = [&](Pass pass, double flops, int64_t bytes, int64_t bw_bytes = 0) {
      return static_cast<double>(cm_->compute(query(pass, flops, bytes, bw_bytes)).ns);
    };
    double f = time(Pass::kF, op.fwd_flops, op.fwd_bytes);
    double bi = time(Pass::kBI, op.bi_flops, op.bi_bytes);
    // The weight-gradient share of the whole backward (B), as the simulator prices an unsplit
    // backward: a fused kernel (a norm's) may do both gradients in one sweep.
    const double b = time(Pass::kB, op.bi_flops + op.bw_flops, op.bi_bytes + op.bw_bytes,
                          op.bw_bytes);
    const double bw = std::max(0.0, b - bi);
    // Context parallelism's attention (docs/costmodel.md, as the simulator prices it): p2p,
    // the ring's closed forms over the attention's steps; all_gather and a2a, their
    // collectives over the CP group before and after it (cp_f, cp_b).
    double cp_f = 0, cp_b = 0;
    if (cp > 1 && op.kind == OpKind::kAttention) {
      const int64_t dt = plan::dtype_bytes(g->dtype), hd = ms.attention_head_dim();
      const int64_t kv = 2 * g->tokens_per_microbatch * (ms.kv_heads / tp) * hd * dt;
      const int64_t qb = g->tokens_per_microbatch * (ms.heads / tp) * hd * dt;
      auto cp_comm_ns = [&](CommKind k, int64_t bytes) { return comm_ns(k, bytes, cp, cp_nodes); };
      if (cp_comm == plan::CpCommType::kP2P) {
        cost::CommQuery cq;
        cq.kind = CommKind::kSendRecv;
        cq.bytes = kv;
        cq.group_size = cp;
        cq.nodes_spanned = cp_nodes;
        cq.dtype = ms.dtype;
        const int64_t p1 = cost::cp_step_ns(*cm_, cq, 1), p2 = cost::cp_step_ns(*cm_, cq, 2);
        const double share = cm_->interference().comm_sm_share;
        auto steps = [&](Pass pass, double flops, int64_t bytes, double alone) {
          return cost::cp_attention_steps(*cm_, query(pass, flops, bytes),
                                          static_cast<int64_t>(alone), cp);
        };
        f = static_cast<double>(cost::cp_attention_fwd_ns(
            cp, steps(Pass::kF, op.fwd_flops, op.fwd_bytes, f), p1, share));
        bi = static_cast<double>(cost::cp_attention_bwd_ns(
            cp, steps(Pass::kBI, op.bi_flops, op.bi_bytes, bi), p1, p2, share));
      } else if (cp_comm == plan::CpCommType::kAllGather) {
        const double ag = cp_comm_ns(CommKind::kAllGather, cp * kv / 2);
        cp_f = 2 * ag;
        cp_b = 2 * ag + 2 * cp_comm_ns(CommKind::kReduceScatter, cp * kv / 2);
      } else {
        const double a2a_q = cp_comm_ns(CommKind::kAllToAll, qb);
        const double a2a_kv = cp_comm_ns(CommKind::kAllToAll, kv / 2);
        cp_f = cp_b = 2 * a2a_q + 2 * a2a_kv;
      }
    }
    // TP collectives as the compiler emits them (Compiler::emit_forward, forward_outputs,
    // emit_backward, backward_regather, backward_outputs), each on its NCCL bytes
    // (docs/costmodel.md: an all-gather's are the gathered output, a reduce-scatter's its
    // input). Without sequence parallelism: a row-parallel op's output (the embedding's too)
    // all-reduced in the forward, a column-parallel op's input gradient in the backward. With
    // it, each all-reduce is a reduce-scatter + all-gather pair: a column-parallel op
    // all-gathers its input in the forward and reduce-scatters its input gradient, re-gathers
    // its input for the weight gradient beside the backward (it saved only its 1/tp shard); a
    // row-parallel op reduce-scatters its output in the forward and all-gathers its output
    // gradient before the backward. The vocab-parallel loss all-reduces three fp32 per token.
    // tp_b_async: the part of tp_b hidden when the backward is one B node (below).
    double tp_f = cp_f, tp_b = cp_b, tp_b_async = 0;
    if (tp > 1) {
      auto tp_ns = [&](CommKind k, int64_t bytes) { return comm_ns(k, bytes, tp, tp_nodes); };
      const double share = cm_->interference().comm_sm_share;
      // what a collective of `comm` ns beside a kernel of `x` ns adds to it: the engine slows
      // the kernel by the collective's SM share (cost::async_pair_ns)
      auto beside = [&](double x, double comm) {
        return static_cast<double>(cost::async_pair_ns(std::llround(x), std::llround(comm), share)) - x;
      };
      if (op.tp == TpSplit::kRow) {
        tp_f += tp_ns(sp ? CommKind::kReduceScatter : CommKind::kAllReduce, op.out_bytes);
        if (sp) tp_b += tp_ns(CommKind::kAllGather, op.out_bytes);
      }
      if (op.kind == OpKind::kLoss)
        tp_f += 3 * tp_ns(CommKind::kAllReduce, g->tokens_per_microbatch * 4);
      if (op.tp == TpSplit::kColumn && op.kind != OpKind::kMlpAct && op.kind != OpKind::kLoss) {
        if (sp) tp_f += tp_ns(CommKind::kAllGather, op.saved_input_bytes);
        const double red =
            tp_ns(sp ? CommKind::kReduceScatter : CommKind::kAllReduce, op.saved_input_bytes);
        // SP's re-gather of the input, launched with the backward beside its compute on the TP
        // stream, which it slows by its SM share; the input gradient's reduction follows it on
        // that stream, so the op's next TP collective waits for both.
        const double ag =
            sp && op.has_weight_grad() ? tp_ns(CommKind::kAllGather, op.saved_input_bytes) : 0;
        // Split BI/BW: the reduction after BI and the re-gather.
        const double split_path = (ag > 0 ? beside(bi, ag) : 0) + red;
        tp_b += split_path;
        // One B node: asynchronous (async_tp_grad_reduce; not after an EP-sharded op's
        // dispatch all-to-all) the reduction runs beside the weight gradient and costs the node
        // max(C, BW + s·C) − BW (cost::async_pair_ns, as the simulator prices it), and the
        // next collective waits for the re-gather and the reduction; else the reduction
        // follows the node and the re-gather.
        double one_node = 0;  // what the op's backward adds to b
        if (plan_.model.async_tp_grad_reduce && !(op.kind == OpKind::kExperts && ep > 1)) {
          const double node = b + beside(bw, red);
          one_node = std::max(node + (ag > 0 ? beside(node, ag) : 0), ag + red) - b;
        } else {
          one_node = (ag > 0 ? beside(b, ag) : 0) + red;
        }
        tp_b_async += split_path - one_node;
      }
    }
    const double saved = static_cast<double>(op.saved_bytes) / ((split || sp) ? tp : 1);
    const double params = static_cast<double>(op.param_count) / t;
    const int layer = op.tags.layer();
    const bool outside = layer == plan::kAbsent || layer < 0 || layer >= L;
    if (outside) {
      const bool pre = op.kind == OpKind::kEmbedding;
      if (pre) c.embedding_params += params;
      (pre ? c.pre_f : c.post_f) += f + tp_f;
      (pre ? c.pre_b : c.post_b) += bi + bw + tp_b;
      (pre ? c.pre_b_async : c.post_b_async) += tp_b_async;
      (pre ? c.pre_params : c.post_params) += params;
      if (pre) c.embedding_bytes += static_cast<double>(op.param_bytes) / t;
      (pre ? c.pre_saved : c.post_saved) += saved;
      continue;
    }
    c.f[layer] += f;
    c.bi[layer] += bi;
    c.bw[layer] += bw;
    c.saved[layer] += saved;
    c.boundary[layer] = static_cast<double>(op.out_bytes) / tp;
    // ZeRO-3 gathers every op's parameters over its replicas but an EP-sharded expert op's,
    // whose shards are distinct parameters (Compiler::add_zero3_gather)
    if (op.kind != OpKind::kExperts || ep <= 1)
      c.layer_param_bytes[layer] += static_cast<double>(op.param_bytes) / t;
    if (op.kind == OpKind::kAttention) c.attn_f[layer] += f + cp_f;
    c.tp_f[layer] += tp_f;
    c.tp_b[layer] += tp_b;
    c.tp_b_async[layer] += tp_b_async;
    if (op.kind == OpKind::kExperts) {
      c.expert_params[layer] += params / std::max(1, ep);
      // every token's top-k slots, hidden-wide, sized by the busiest expert's share
      // (MoeSpec::load_factor: imbalance or capacity), as Compiler::add_all_to_all sizes it
      const int64_t bytes = std::llround(
          static_cast<double>(g->tokens_per_microbatch * (ms.moe ? ms.moe->top_k : 1) *
                              ms.hidden * plan::dtype_bytes(g->dtype) / tp) *
          (ms.moe ? ms.moe->load_factor() : 1.0));
      c.a2a[layer] = comm_ns(CommKind::kAllToAll, bytes, ep, ep_nodes);
      c.a2a_bytes = bytes;
    } else {
      c.params[layer] += params;
    }
    c.out_bytes = static_cast<double>(op.out_bytes) / tp;
  }
  return c;
}

Expected<Estimate> Estimator::operator()(const Resolved& r) {
  // With context parallelism (cp > 1) every rank's ops run on s/cp tokens with the CP
  // attention (costs()), and the gradients reduce over dp × cp ranks, which ZeRO shards over:
  // `dp` below is that group.
  const int cp = std::max(1, r.cp);
  const int p = std::max(1, r.pp), tp = std::max(1, r.tp), dp = std::max(1, r.dp) * cp;
  const int m = std::max(1, r.microbatches);
  const std::string& fam = r.family.empty() ? std::string("1f1b") : r.family;
  const compiler::StaticBytesPerParam bpp =
      compiler::static_bytes_per_param(plan_.model.dtype, plan_.optimizer);
  int v = r.stages_per_rank;
  const bool two_chunk = fam == "zb-v" || fam == "dualpipev" || fam == "dualpipe";
  if (v <= 0 || (two_chunk && v == 1))
    v = (fam == "interleaved-1f1b" || fam == "looped-bfs" || two_chunk) ? 2 : 1;
  const int chunks = fam == "dualpipe" ? p : p * v;  // PP regions
  // Families whose backward is split into BI + BW (the TP collective then follows BI).
  const bool split_bwd = fam.rfind("zb", 0) == 0 || fam.rfind("dualpipe", 0) == 0;
  plan::CpCommType cp_comm = plan::CpCommType::kP2P;
  for (auto t : {plan::CpCommType::kAllGather, plan::CpCommType::kA2A})
    if (r.cp_comm_type == plan::cp_comm_type_name(t)) cp_comm = t;
  const LayerCosts& c = costs(r.microbatch_size, tp, r.ep, r.sequence_parallel, cp, cp_comm);
  const int L = static_cast<int>(c.f.size());
  if (L == 0 || chunks > L) return fail(plain("the model cannot be cut into that many stages"));
  // The rank of each chunk, per pipeline direction (DualPipe's second runs the stages back).
  std::vector<std::vector<int>> rank_of(fam == "dualpipe" ? 2 : 1, std::vector<int>(chunks));
  for (int s = 0; s < chunks; ++s) {
    if (fam == "dualpipe") {  // two copies of every stage; half the microbatches flow each way
      rank_of[0][s] = s;
      rank_of[1][s] = p - 1 - s;
    } else if (fam == "zb-v" || fam == "dualpipev") {
      rank_of[0][s] = s < p ? s : 2 * p - 1 - s;
    } else {
      rank_of[0][s] = s % p;
    }
  }
  // Tied embeddings with the first and last chunks on different ranks: the head's rank holds a
  // copy of the word embedding (the compiler's tie_embeddings), in its static memory, its
  // optimizer step and its gradient reduction; in each pipeline direction
  // (DualPipe's second runs the stages back, so its head's copy is on the first rank).
  const bool tied_copy =
      plan_.model.tie_embeddings && rank_of.front().front() != rank_of.front().back();
  // Per-chunk sums.
  std::vector<double> F(chunks), BI(chunks), W(chunks), P(chunks), S(chunks), E(chunks);
  std::vector<char> experts(static_cast<size_t>(chunks), 0);  // chunks with MoE layers
  double max_params = 0, max_bytes = 0;
  for (int s = 0; s < chunks; ++s) {
    const int lo = static_cast<int>(static_cast<int64_t>(s) * L / chunks);
    const int hi = static_cast<int>(static_cast<int64_t>(s + 1) * L / chunks);
    double f = 0, bi = 0, bw = 0, params = 0, expert = 0, saved = 0, pbytes = 0, gather = 0;
    for (int l = lo; l < hi; ++l) {
      f += c.f[l] + c.tp_f[l] + 2 * c.a2a[l];
      bi += c.bi[l] + c.tp_b[l] - (split_bwd ? 0 : c.tp_b_async[l]) + 2 * c.a2a[l];
      bw += c.bw[l];
      params += c.params[l] + c.expert_params[l];
      expert += c.expert_params[l];
      if (c.expert_params[l] > 0) experts[static_cast<size_t>(s)] = 1;
      pbytes += c.layer_param_bytes[l];
      if (r.recompute == "full") {
        saved += c.boundary[l];
        bi += c.f[l] + c.tp_f[l] + 2 * c.a2a[l];
      } else if (r.recompute == "selective") {
        saved += c.saved[l] * 0.6;  // attention scores/softmax dropped (Korthikanti et al.)
        bi += c.attn_f[l];
      } else {
        saved += c.saved[l];
      }
    }
    // (ZeRO-3's gathers of the embedding and the output layer are left out: with the layers'
    // gathers all exposed, adding them moved the dense sample's mean error from 6.3 to 7.7 %)
    if (s == 0) f += c.pre_f, bi += c.pre_b, params += c.pre_params, saved += c.pre_saved;
    if (s == chunks - 1)
      f += c.post_f, bi += c.post_b, params += c.post_params, saved += c.post_saved;
    if (!split_bwd) bi -= (s == 0 ? c.pre_b_async : 0) + (s == chunks - 1 ? c.post_b_async : 0);
    if (r.zero >= 3 && dp > 1)  // gathers hide behind compute only when faster
      gather = comm_ns(CommKind::kAllGather, static_cast<int64_t>(pbytes), dp,
                       (tp * dp + plan_.cluster.devices_per_node - 1) /
                           std::max(1, plan_.cluster.devices_per_node));
    // ZeRO-3 gathers run per op on the DP stream just before the op; the simulator shows them
    // mostly exposed, so they add up (one in the forward, one in the backward).
    F[s] = f + gather;
    BI[s] = bi + gather;
    W[s] = bw;
    P[s] = params;
    E[s] = expert;
    S[s] = saved;
    // the gradients the chunk reduces over its replicas: an EP-sharded expert op's are not
    // (Compiler::add_gradient_reductions; its group, dp x cp / ep, is one device, as the
    // layout has ep = 1 or dp, and no EP with CP); with ep = 1 they join the dense buckets
    max_params = std::max(max_params, r.ep > 1 ? params - expert : params);
    max_bytes = std::max(max_bytes, pbytes);
  }
  // Steady state: the busiest rank's work for every microbatch (chunk -> rank as the family
  // places it: one per rank, looped, V, or DualPipe's two directions).
  std::vector<double> rank_work(p, 0), rank_params(p, 0), rank_saved(p, 0), rank_chunks(p, 0);
  std::vector<double> rank_experts(p, 0);  // the expert parameters of rank_params
  auto add = [&](int rank, int s, double share) {
    rank_work[rank] += share * (F[s] + BI[s] + W[s]);
    rank_params[rank] += P[s];
    rank_experts[rank] += E[s];
    rank_saved[rank] += S[s];
    rank_chunks[rank] += 1;
  };
  // (DualPipe: two copies of every stage; half the microbatches flow each way)
  for (const auto& ranks : rank_of)
    for (int s = 0; s < chunks; ++s) add(ranks[s], s, 1.0 / static_cast<double>(rank_of.size()));
  if (tied_copy) {
    for (const auto& ranks : rank_of) rank_params[ranks.back()] += c.embedding_params;
    max_params = std::max(max_params, P[chunks - 1] - (r.ep > 1 ? E[chunks - 1] : 0) +
                                          c.embedding_params);
  }
  // DualPipe: a rank holds stages s and p-1-s, and every op has a copy in each direction, so
  // its gradients reduce over 2 dp x cp copies (dp x cp x 2 with dp = 1 too) of both stages.
  const int copies = fam == "dualpipe" ? 2 * dp : dp;
  if (fam == "dualpipe")
    for (int k = 0; k < p; ++k)
      max_params = std::max(max_params, rank_params[k] - (r.ep > 1 ? rank_experts[k] : 0));
  const double busiest = *std::max_element(rank_work.begin(), rank_work.end());
  // Fill and drain: the family's closed form over the mean chunk.
  double cF = 0, cBI = 0, cW = 0;
  for (int s = 0; s < chunks; ++s) cF += F[s], cBI += BI[s], cW += W[s];
  cF /= chunks, cBI /= chunks, cW /= chunks;
  const double cB = cBI + cW;
  const double step = m * busiest;
  double bubble = 0;
  const double pm1 = p - 1;
  // Fewer microbatches than ranks (no steady state): checked against the simulator under
  // fixed per-pass costs (F, BI, W per chunk; F + BI > W), p = 2..5, every m the builder takes.
  const double short_m = std::max(0.0, static_cast<double>(p - m));
  if (fam == "gpipe" || fam == "1f1b") {
    bubble = pm1 * (cF + cB);  // (m + p - 1)(F + B) for every m
  } else if (fam == "interleaved-1f1b" || fam == "looped-bfs") {
    // v·m + p - 1 chunk passes for m >= p; v·p + m - 1 for m < p (the first chunk's
    // microbatches all pass before the second chunk starts)
    bubble = pm1 * (cF + cB) + (v - 1) * short_m * (cF + cB);
  } else if (fam == "zb-h1") {
    // m >= p: (p-1)(F + BI - W); m < p: no W fills the drain but the last one, which ends
    // the step: (m + p - 1)(F + BI) + W
    bubble = pm1 * std::max(0.0, cF + cBI - cW) + short_m * cW;
  } else if (fam == "zb-h2") {
    bubble = pm1 * std::max(0.0, cF + cBI - 2 * cW);
  } else if (fam == "zb-v") {
    // m >= 2p - 1: 2m(F + BI + W) + (p-1) max(F, BI, 2(BI - W)). Fewer microbatches (the
    // builder schedules 2p - 1 and drops the rest): 2 max(m,p) F + 2(p+m-1) BI + 2 min(m,p) W.
    // Against the simulator under fixed costs (tests/explore Estimate.ZbVClosedFormOverACostGrid):
    // within 3 % where BI is the largest pass, within 20 % elsewhere.
    if (m >= 2 * p - 1)
      bubble = pm1 * std::max({cF, cBI, 2 * (cBI - cW)});
    else
      bubble = 2 * std::max(m, p) * cF + 2.0 * (p + m - 1) * cBI + 2 * std::min(m, p) * cW -
               2.0 * m * (cF + cBI + cW);
  } else if (fam == "dualpipev") {
    bubble = pm1 * std::max(0.0, cF + 2 * cB - 3 * cW);
  } else if (fam == "dualpipe") {
    bubble = std::max(0.0, p / 2.0 - 1) * std::max(0.0, cF + 2 * cB - 3 * cW);
  } else {
    return fail(plain(fmt::format("no closed form for family '{}'", fam)));
  }
  // Stage-boundary transfers on the fill/drain path.
  const int dpn = std::max(1, plan_.cluster.devices_per_node);
  const int pp_nodes = tp * dp >= dpn ? 2 : 1;
  if (p > 1)
    bubble += 2 * pm1 * comm_ns(CommKind::kSendRecv, static_cast<int64_t>(c.out_bytes), 2, pp_nodes);
  // The nodes the first group of devices spans, as the simulator counts a collective's:
  // `devices`, in the layout's rank order (tp-cp-dp-pp: stage k from k tp dp on).
  const int stride = tp * dp;  // dp here is dp x cp: the devices of one stage
  auto nodes_of = [&](const std::vector<int>& devices) {
    std::set<int> nodes;
    for (int d : devices) nodes.insert(d / dpn);
    return static_cast<int>(nodes.size());
  };
  // Data-parallel gradient reduction: hidden behind the last backward except one bucket.
  double dp_exposed = 0;
  if (copies > 1) {
    std::vector<int> first;  // the first group: TP rank 0 of each copy
    for (int k = 0; k < dp; ++k) {
      first.push_back(k * tp);
      if (fam == "dualpipe") first.push_back((p - 1) * stride + k * tp);
    }
    const int dp_nodes = nodes_of(first);
    const auto grad_bytes = static_cast<int64_t>(max_params * static_cast<double>(bpp.grads));
    // (ZeRO-1 too: the distributed optimizer reduce-scatters, as the compiler does)
    const CommKind red = r.zero >= 1 ? CommKind::kReduceScatter : CommKind::kAllReduce;
    const double total = comm_ns(red, grad_bytes, copies, dp_nodes);
    const double bucket =
        comm_ns(red, std::min<int64_t>(grad_bytes, static_cast<int64_t>(r.bucket_size_MB * 1e6)),
                copies, dp_nodes);
    // Buckets are reduced as the last microbatch's backward produces them; the simulator
    // hides little of it behind that backward (measured: bench_explore BM_Agreement).
    dp_exposed = std::max(bucket, total - 0.25 * cB * v);
    if (r.zero == 1 || r.zero == 2)
      dp_exposed +=
          comm_ns(CommKind::kAllGather,
                  static_cast<int64_t>(max_params * static_cast<double>(bpp.params)), copies,
                  dp_nodes);
  }
  // Tied embeddings: the two copies' gradients all-reduced in pairs (the i-th device of the
  // embedding's holders with the i-th of the head's: Megatron's _allreduce_embedding_grads),
  // the embedding's bytes after the TP split, on the DP stream once both copies' gradients are
  // final (Compiler::add_optimizer). The first stage's backward ends the step (every family
  // that places the head on another rank), so it is exposed; priced with the first pair's nodes.
  double tied_grad = 0;
  if (tied_copy)
    tied_grad = comm_ns(CommKind::kAllReduce, static_cast<int64_t>(c.embedding_bytes), 2,
                        nodes_of({rank_of.front().front() * stride, rank_of.front().back() * stride}));
  // Gradient clipping: the norm's one fp32 all-reduced over its group (norm_over_every_device)
  // once every gradient of the group is final, before the optimizer step: exposed, as the
  // simulator runs it. Its price is the simulator's: the group's size and the nodes its first
  // group spans (devices in the layout's rank order tp-cp-dp-pp, d / devices_per_node).
  double grad_norm = 0;
  const plan::OptimizerSpec& opt = plan_.optimizer;
  if (opt.given && opt.kind != plan::OptimizerSpec::Kind::kNone && opt.grad_clip) {
    std::vector<int> group;
    for (int k = 0; k < p; ++k)
      for (int d = 0; d < (norm_over_every_device(r) ? stride : tp); ++d)
        group.push_back(k * stride + d);
    grad_norm = comm_ns(CommKind::kAllReduce, 4, static_cast<int>(group.size()), nodes_of(group));
  }
  // The optimizer step, after the norm (or the last gradient) and before ZeRO-1/2's parameter
  // all-gather: memory-bound, the HBM bytes of the compiler's step node (each device's share of
  // its rank's parameters, sharded over dp x cp with ZeRO >= 1, x the optimizer's step bytes per
  // parameter), priced by the cost model as the simulator prices that node; the slowest rank's.
  // A rank's parameters over ZeRO's shards: the dense ones over dp x cp, the experts' over
  // their replicas, dp x cp / ep (an expert op's EP shards are one copy: the compiler shards
  // the optimizer state of each op over its own replication).
  // (DualPipe: an op's copies in both directions are its replicas, 2 dp x cp of them.)
  const double expert_dp =
      r.ep > 1 ? std::max(1.0, static_cast<double>(dp) / r.ep) : static_cast<double>(copies);
  auto sharded = [&](double params, double experts, bool shard) {
    return shard ? (params - experts) / copies + experts / expert_dp : params;
  };
  double opt_step = 0;
  if (opt.given && opt.kind != plan::OptimizerSpec::Kind::kNone) {
    cost::ComputeQuery q;
    q.kind = OpKind::kOptimizer;
    q.pass = Pass::kNone;
    q.dtype = plan_.model.dtype;
    for (int k = 0; k < p; ++k) {
      const auto n = static_cast<int64_t>(sharded(rank_params[k], rank_experts[k], r.zero >= 1));
      q.bytes = n * opt.step_bytes_per_param(static_cast<int>(bpp.params));
      q.unfused_step_bytes = n * opt.unfused_step_bytes_per_param(static_cast<int>(bpp.params));
      opt_step = std::max(opt_step, static_cast<double>(cm_->compute(q).ns));
    }
  }
  // Memory: per rank, static state by ZeRO level + the activations of the chunk-microbatches
  // it holds at its peak (rank r of 1F1B holds p - r; Megatron's interleaved warm-up holds
  // 2(p-r-1) + (v-1)p + 1); the largest rank is the peak.
  // (bytes per parameter: the compiler's rule, static_bytes_per_param; ZeRO's shards: sharded)
  const std::vector<int64_t> nccl = nccl_per_rank(r, rank_of, experts, cp_comm);
  double mem = 0, device = 0;
  for (int k = 0; k < p; ++k) {
    double in_flight = 0;  // chunk-microbatches
    if (fam == "gpipe") in_flight = m;
    else if (fam == "1f1b" || fam == "zb-h1") in_flight = std::min(m, p - k);
    else if (fam == "zb-h2") in_flight = std::min(m, 2 * (p - k) - 1);
    else if (fam == "looped-bfs") in_flight = static_cast<double>(m) * v;
    else if (fam == "interleaved-1f1b")
      in_flight = std::min<double>(static_cast<double>(m) * v, 2.0 * (p - k - 1) + (v - 1) * p + 1);
    else in_flight = std::min<double>(2.0 * m, 2.0 * p + 1);
    const double mean_saved = rank_chunks[k] > 0 ? rank_saved[k] / rank_chunks[k] : 0;
    const double rp = rank_params[k], re = rank_experts[k];
    const double allocated = static_cast<double>(bpp.params) * sharded(rp, re, r.zero >= 3) +
                             static_cast<double>(bpp.grads) * sharded(rp, re, r.zero >= 2) +
                             static_cast<double>(bpp.optimizer) * sharded(rp, re, r.zero >= 1) +
                             in_flight * mean_saved;
    mem = std::max(mem, allocated);
    device = std::max(device, allocated + static_cast<double>(nccl[static_cast<size_t>(k)]));
  }
  if (r.zero >= 3) mem += max_bytes, device += max_bytes;  // one chunk's gathered parameters
  Estimate e;
  e.chunk_f_ms = cF / 1e6;
  e.chunk_b_ms = cB / 1e6;
  e.bubble_ms = bubble / 1e6;
  e.dp_exposed_ms = dp_exposed / 1e6;
  e.grad_norm_ms = grad_norm / 1e6;
  e.optimizer_step_ms = opt_step / 1e6;
  e.tied_grad_ms = tied_grad / 1e6;
  e.grad_reduce_group = copies > 1 ? copies : 0;
  // (a rank's every chunk: the exposure above counts one chunk's, the last backward's)
  double reduced = 0;
  for (int k = 0; k < p; ++k)
    reduced = std::max(reduced, rank_params[k] - (r.ep > 1 ? rank_experts[k] : 0));
  e.grad_reduce_bytes =
      copies > 1 ? static_cast<int64_t>(reduced * static_cast<double>(bpp.grads)) : 0;
  e.ep_all_to_all_bytes = r.ep > 1 ? c.a2a_bytes : 0;
  e.zero3_gather_bytes = r.zero >= 3 && dp > 1 ? static_cast<int64_t>(max_bytes) : 0;
  e.step_ms = (step + bubble + dp_exposed + tied_grad + grad_norm + opt_step) / 1e6;
  e.peak_memory_bytes = static_cast<int64_t>(mem);
  e.cuda_context_bytes = sim::cuda_context_bytes(plan_.cluster.device);
  e.nccl_buffer_bytes = *std::max_element(nccl.begin(), nccl.end());
  e.peak_device_bytes = static_cast<int64_t>(device) + e.cuda_context_bytes;
  return e;
}

std::vector<int64_t> Estimator::nccl_per_rank(const Resolved& r,
                                              const std::vector<std::vector<int>>& rank_of,
                                              const std::vector<char>& experts,
                                              plan::CpCommType cp_comm) const {
  // NCCL's buffers of a device of each pipeline rank, counted as the simulator counts them on
  // the compiled plan (sim::outside_allocator): one ring communicator per distinct group of
  // devices a collective runs over, one peer per device it receives send/recv or all-to-all
  // data from. A group is named by the layout's dimensions its members differ in (TP, CP, DP,
  // PP rank), less those of degree 1, so groups with the same members are counted once (the
  // model-parallel group is the TP group when pp = 1, the DP x CP group is the CP group when
  // dp = 1, ...).
  const int tp = std::max(1, r.tp), cp = std::max(1, r.cp), dp = std::max(1, r.dp);
  const int p = std::max(1, r.pp), ep = std::max(1, r.ep);
  enum : unsigned { kT = 1, kC = 2, kD = 4, kR = 8, kEnds = 16 };  // kEnds: first + last rank
  auto members = [&](unsigned dims) {
    if (tp == 1) dims &= ~kT;
    if (cp == 1) dims &= ~kC;
    if (dp == 1) dims &= ~kD;
    if (p == 1) dims &= ~kR;
    return dims;
  };
  std::set<unsigned> all_ranks;  // the groups every rank is in
  auto use = [&](std::set<unsigned>& s, unsigned dims) {
    if (const unsigned m = members(dims)) s.insert(m);
  };
  use(all_ranks, kT);                                        // TP, SP, vocab-parallel loss
  use(all_ranks, kC | kD);                                   // the gradient reduction, ZeRO
  if (cp_comm != plan::CpCommType::kA2A) use(all_ranks, kC);  // the CP ring or all-gathers
  const plan::OptimizerSpec& opt = plan_.optimizer;
  if (opt.given && opt.kind != plan::OptimizerSpec::Kind::kNone && opt.grad_clip)
    // the gradient norm (docs/semantics.md): TP x PP, every device with the distributed
    // optimizer or with expert parallelism
    use(all_ranks, norm_over_every_device(r) ? kT | kC | kD | kR : kT | kR);
  const int chunks = static_cast<int>(rank_of.front().size());
  std::vector<std::set<int>> senders(static_cast<size_t>(p));  // pipeline ranks sending to each
  std::vector<char> moe(static_cast<size_t>(p), 0);
  for (const auto& ranks : rank_of)
    for (int s = 0; s < chunks; ++s) {
      const int k = ranks[static_cast<size_t>(s)];
      if (experts[static_cast<size_t>(s)]) moe[static_cast<size_t>(k)] = 1;
      for (int n : {s - 1, s + 1})
        if (n >= 0 && n < chunks && ranks[static_cast<size_t>(n)] != k)
          senders[static_cast<size_t>(k)].insert(ranks[static_cast<size_t>(n)]);
    }
  // Tied embeddings: the word embedding's gradient all-reduced between the first chunk's and
  // the last chunk's devices, when they differ.
  const int first = rank_of.front().front(), last = rank_of.front().back();
  const bool tied = plan_.model.tie_embeddings && first != last;
  std::vector<int64_t> out(static_cast<size_t>(p), 0);
  for (int k = 0; k < p; ++k) {
    std::set<unsigned> groups = all_ranks;
    if (tied && (k == first || k == last)) use(groups, p == 2 ? kR : kEnds);
    int64_t peers = static_cast<int64_t>(senders[static_cast<size_t>(k)].size());
    if (ep > 1 && moe[static_cast<size_t>(k)]) peers += ep - 1;  // the EP all-to-alls
    if (cp_comm == plan::CpCommType::kA2A) peers += cp - 1;      // CP's all-to-alls
    out[static_cast<size_t>(k)] = sim::nccl_buffer_bytes(
        plan_.cluster.device, static_cast<int64_t>(groups.size()), peers);
  }
  return out;
}

bool estimated_to_fit(const Estimate& e, double cap_bytes) {
  return static_cast<double>(e.peak_device_bytes) <= 1.1 * cap_bytes;
}

Expected<Estimate> estimate(const plan::Plan& plan, const Resolved& r) {
  auto e = Estimator::make(plan);
  if (!e) return fail(std::move(e).error());
  return (*e)(r);
}

}  // namespace stretto::explore
