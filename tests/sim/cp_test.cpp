// Context parallelism (layout `cp`, replicate's `context_parallel`: Megatron-Core
// --context-parallel-size with Transformer Engine's p2p ring attention; compiler/dag.h
// TpOverlap::kCpRing, costmodel/cp_attention.h).
//
//  * Layout: Megatron-Core's rank order tp-cp-dp-pp, the CP rings over the right devices, the
//    gradient reduction over dp × cp;
//  * Ops on s/cp tokens: the model's tokens and FLOPs per CP rank, the step's model FLOPs
//    and tokens unchanged against the same batch without CP;
//  * Pairs: every ring exchange priced as its steps by an α–β hand computation (links of
//    360 GB/s and 1 µs), every attention node as the ring's closed form;
//  * Step: under the fixed cost model, CP 2 against DP 2 differs by the closed forms' excess;
//  * Memory: the activations per device halve at cp 2;
//  * Refusals: 2·cp not dividing seq_len (layout and directive), cp not dividing the devices,
//    unfused attention, located.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "stretto/sim/inspect.h"
#include "stretto/sim/session.h"
#include "refusals.h"

namespace stretto::sim {
namespace {

using compiler::CommKind;
using compiler::CommPurpose;
using compiler::CompiledPlan;
using compiler::Node;
using compiler::NodeKind;
using compiler::OpKind;
using compiler::TpOverlap;
using engine::Program;
using nlohmann::json;
using plan::Pass;

constexpr double kLinkGBps = 360;
constexpr double kLinkLatencyUs = 1;
constexpr double kNvlinkHopUs = 3.4;  // NCCL 2.28 tuning.cc hwLat[NVLink][Ring][Simple]

json tiny_plan(json layout, json costmodel, int layers = 2) {
  return {{"model",
           {{"family", "transformer"},
            {"layers", layers},
            {"hidden", 1024},
            {"heads", 16},
            {"kv_heads", 8},
            {"ffn_hidden", 4096},
            {"vocab", 16384},
            {"seq_len", 1024},
            {"microbatch_size", 2}}},
          {"cluster",
           {{"preset", "h100-sxm"},
            {"nodes", 1},
            {"devices_per_node", 32},
            {"intra_node", {{"bandwidth_GBps", kLinkGBps}, {"latency_us", kLinkLatencyUs}}}}},
          {"costmodel", costmodel},
          {"schedule", {{"builder", "1f1b"}, {"microbatches", 4}, {"layout", layout}}}};
}
json analytic() {
  return {{"kind", "analytic"},
          {"nccl_algo", "ring"},
          {"nccl_proto", "simple"},
          {"nccl_intra_GBps", kLinkGBps}};
}
int64_t us(double x) { return std::llround(x * 1000); }
int64_t wire_ns(double bytes) { return static_cast<int64_t>(std::ceil(bytes / kLinkGBps)); }

Session open(const json& plan) {
  auto s = Session::from_text(plan.dump(), "cp.json");
  EXPECT_TRUE(s) << render_all(s.error());
  return std::move(*s);
}

// TP 2 x CP 2 x DP 2: device = tp + 2 (cp + 2 dp). Each ring joins the CP ranks of one TP rank
// and DP replica; the gradients of a TP rank reduce over its 4 = dp × cp copies.
TEST(ContextParallel, RanksFollowMegatronOrderAndGradientsReduceOverDpTimesCp) {
  Session s = open(tiny_plan({{"tp", 2}, {"cp", 2}, {"dp", 2}}, analytic()));
  const CompiledPlan& cp = s.compiled();
  EXPECT_EQ(cp.resolved.cp, 2);
  EXPECT_EQ(cp.resolved.dp, 2);
  EXPECT_EQ(cp.resolved.global_batch(), 2 * 4 * 2);  // microbatch size x microbatches x dp
  EXPECT_EQ(cp.resolved.placement.at(0), (std::vector<int>{0, 2, 4, 6}));
  int rings_f = 0, rings_b = 0, reductions = 0;
  for (const Node& n : cp.dag.nodes) {
    if (n.purpose == CommPurpose::kContextPar) {
      ASSERT_EQ(n.kind, NodeKind::kCollective);
      EXPECT_EQ(n.comm, CommKind::kSendRecv);
      EXPECT_EQ(cp.model.ops[n.op].kind, OpKind::kAttention);
      const auto& ds = cp.dag.device_sets[n.devs];
      EXPECT_EQ(ds.group_size, 2);
      EXPECT_EQ(ds.devices, (std::vector<int32_t>{0, 2, 1, 3, 4, 6, 5, 7}));
      EXPECT_EQ(cp.dag.streams[n.stream], "cp");
      // one K/V chunk: K and V of 2 x 512 tokens, 8 / 2 KV heads of 64, bf16
      EXPECT_EQ(n.bytes, 2 * 2 * 512 * 4 * 64 * 2);
      (n.tags.pass == Pass::kF ? rings_f : rings_b) += 1;
    }
    if (n.purpose == CommPurpose::kGradReduce) {
      ++reductions;
      EXPECT_EQ(cp.dag.device_sets[n.devs].group_size, 4);
    }
  }
  EXPECT_EQ(rings_f, 2 * 4);  // layers x microbatches
  EXPECT_EQ(rings_b, 2 * 4);
  EXPECT_GT(reductions, 0);
  size_t pairs = 0;
  for (const auto& pr : cp.dag.tp_overlaps) pairs += pr.method == TpOverlap::kCpRing;
  EXPECT_EQ(pairs, 16u);
}

// Every op of a CP rank works on its s/cp tokens; its attention is 1/cp of the whole
// sequence's ([s/cp, d] x [d, s] per head). The step's model FLOPs and tokens are the same as
// without CP for the same global batch, so MFU compares.
TEST(ContextParallel, OpsRunOnTheRanksTokensAndModelFlopsAreUnchanged) {
  Session one = open(tiny_plan({{"dp", 1}}, analytic()));
  Session two = open(tiny_plan({{"cp", 2}}, analytic()));
  const auto& m1 = one.compiled().model;
  const auto& m2 = two.compiled().model;
  EXPECT_EQ(m1.tokens_per_microbatch, 2 * 1024);
  EXPECT_EQ(m2.tokens_per_microbatch, 2 * 512);
  ASSERT_EQ(m1.ops.size(), m2.ops.size());
  for (size_t i = 0; i < m1.ops.size(); ++i) {
    SCOPED_TRACE(m1.ops[i].name);
    EXPECT_DOUBLE_EQ(m2.ops[i].fwd_flops * 2, m1.ops[i].fwd_flops);
    EXPECT_EQ(m2.ops[i].saved_bytes * 2, m1.ops[i].saved_bytes);
    if (m1.ops[i].kind == OpKind::kAttention) {
      EXPECT_DOUBLE_EQ(m2.ops[i].fwd_flops, 2.0 * 2 * 512 * 1024 * 1024);  // 2·b·(s/cp)·s·h
    }
  }
  EXPECT_DOUBLE_EQ(m2.model_flops_per_microbatch * 2, m1.model_flops_per_microbatch);
  auto r1 = one.simulate();
  auto r2 = two.simulate();
  ASSERT_TRUE(r1 && r2);
  EXPECT_NEAR(r2->model_flops, r1->model_flops, 1e-9 * r1->model_flops);
  EXPECT_NEAR(r2->tokens_per_s * r2->step_time, r1->tokens_per_s * r1->step_time,
              1e-6 * r1->tokens_per_s * r1->step_time);
}

// Analytic model, one node: every ring step is a send/recv of one K/V chunk (two in the
// backward's middle steps) over one NVLink hop, α–β by hand; the attention node takes
// T_f = a + (cp − 1) max(a, p) and T_b = 2 max(a_b, p) + (cp − 2) max(a_b, p2).
TEST(ContextParallel, RingAndAttentionArePricedAsTheClosedForms) {
  for (int c : {2, 4}) {
    SCOPED_TRACE("cp " + std::to_string(c));
    Session s = open(tiny_plan({{"cp", c}}, analytic()));
    const CompiledPlan& cp = s.compiled();
    const Program p = build_program(cp, s.cost_model());
    std::map<uint32_t, uint32_t> task_of;
    for (uint32_t i = 0; i < p.tasks.size(); ++i) task_of.try_emplace(p.tasks[i].node, i);
    const int64_t chunk = 2 * 2 * (1024 / c) * 8 * 64 * 2;
    const int64_t p1 = us(kLinkLatencyUs + kNvlinkHopUs) + wire_ns(double(chunk));
    const int64_t p2 = us(kLinkLatencyUs + kNvlinkHopUs) + wire_ns(double(2 * chunk));
    CostQueries queries(cp);
    int seen = 0;
    for (const auto& pr : cp.dag.tp_overlaps) {
      ASSERT_EQ(pr.method, TpOverlap::kCpRing);
      const Node& ring = cp.dag.nodes[pr.comm];
      const Node& att = cp.dag.nodes[pr.compute];
      ASSERT_EQ(ring.bytes, chunk);
      const bool fwd = ring.tags.pass == Pass::kF;
      const engine::Task& rt = p.tasks[task_of.at(pr.comm)];
      EXPECT_TRUE(rt.overlapped);
      const engine::CommSpec& cs = p.comms[rt.comm];
      const int64_t ring_ns = cs.latency_ns + cost::transfer_ns(rt.work, cs.rate_cap);
      const int64_t want_ring = fwd ? (c - 1) * p1 : 2 * p1 + (c - 2) * p2;
      EXPECT_NEAR(double(ring_ns), double(want_ring), 4.0);
      // each step its own kernel, the whole attention's work at the step's shape: the
      // diagonal [s/cp, s/cp], the others [s/(2cp), s/cp] (fewer query blocks: fewer SMs
      // filled); a step beside a transfer on H100's 132 − 20 SMs (comm_sm_share)
      const cost::ComputeQuery whole = queries.compute(att);
      const double alone = double(s.cost_model().compute(whole).ns);
      auto step = [&](int64_t m, int64_t n) {
        cost::ComputeQuery q = whole;
        q.gemm.m = m;
        q.gemm.n = n;
        return int64_t(std::ceil(double(s.cost_model().compute(q).ns) / c - 1e-6));
      };
      const int64_t local = 1024 / c;
      const int64_t d = step(local, local), o = step(local / 2, local);
      EXPECT_GT(o, d);  // the smaller kernel fills fewer SMs
      EXPECT_GT(o, int64_t(alone / c) + 1);
      // a step beside a transfer of p: 20 of the 132 SMs lost while it runs
      auto beside = [](int64_t x, int64_t p) {
        return std::max(p, x + int64_t(std::ceil(double(p) * 20 / 132 - 1e-6)));
      };
      const int64_t want = fwd ? beside(d, p1) + (c - 2) * beside(o, p1) + o
                               : beside(d, p1) + (c - 2) * beside(o, p2) + beside(o, p1);
      EXPECT_NEAR(double(p.tasks[task_of.at(pr.compute)].work), double(want), 4.0)
          << cp.dag.node_name(pr.compute, cp.model);
      ++seen;
    }
    EXPECT_EQ(seen, 2 * 2 * 4);
  }
}

// The `cpu` preset's one SM gives comm_sm_share = min(1, 20 / 1) = 1: the ring's steps and
// transfers serialise (costmodel/cp_attention.h), where x / (1 − share) asserted.
TEST(ContextParallel, ARingOnADeviceOfOneSmSimulates) {
  json plan = tiny_plan({{"cp", 2}}, {{"kind", "analytic"}});
  plan["cluster"] = {{"preset", "cpu"}, {"nodes", 1}, {"devices_per_node", 2}};
  Session s = open(plan);
  auto r = s.simulate();
  ASSERT_TRUE(r) << render_all(r.error());
  EXPECT_GT(r->step_time, 0);
}

// The fixed cost model of the step tests: each of a one-layer region's 14 ops kFixedF forward
// and kFixedB backward, every communication kFixedComm (ns).
constexpr int64_t kFixedF = 116'000, kFixedB = 232'000, kFixedComm = 150'000;
json fixed_model() {
  return {{"kind", "fixed"}, {"F", 14 * kFixedF}, {"B", 14 * kFixedB}, {"comm", kFixedComm},
          {"unit", "ns"}};
}
// The step of a one-layer, one-microbatch plan of `layout` under the fixed model.
int64_t fixed_one_layer_step(json layout) {
  json plan = tiny_plan(std::move(layout), fixed_model(), 1);
  plan["model"]["pp_regions"] = 1;
  plan["schedule"]["microbatches"] = 1;
  Session s = open(plan);
  auto r = s.simulate();
  EXPECT_TRUE(r) << render_all(r.error());
  return r ? r->step_time : 0;
}

// One layer, one microbatch, the fixed cost model (each of the region's 14 ops f forward and b
// backward, every communication c): CP 2 and DP 2 replicate over the same two devices and
// reduce the same buckets, and differ only in the attention: CP's forward takes
// f/2 + max(f/2, c) and its backward 2 max(b/2, c), against f and b.
TEST(ContextParallel, OneLayerStepMatchesTheHandComputationUnderTheFixedModel) {
  const int64_t f = kFixedF, b = kFixedB, c = kFixedComm;
  auto step = [](json layout) { return fixed_one_layer_step(std::move(layout)); };
  const int64_t cp_f = f / 2 + std::max(f / 2, c);
  const int64_t cp_b = 2 * std::max(b / 2, c);
  EXPECT_EQ(step({{"cp", 2}}) - step({{"dp", 2}}), (cp_f - f) + (cp_b - b));
}

int64_t peak_activations(const json& plan) {
  Session s = open(plan);
  auto r = s.simulate();
  EXPECT_TRUE(r) << render_all(r.error());
  int64_t peak = 0;
  for (const CategorySample& x : memory_by_category(s.compiled(), *r, 0))
    peak = std::max(peak, x.bytes[3]);  // activations
  return peak;
}

TEST(ContextParallel, ActivationsPerDeviceAreDividedByCp) {
  const int64_t one = peak_activations(tiny_plan({{"tp", 2}}, analytic()));
  const int64_t two = peak_activations(tiny_plan({{"tp", 2}, {"cp", 2}}, analytic()));
  EXPECT_GT(one, 0);
  EXPECT_EQ(two * 2, one);
}

// cp_comm_type all_gather and a2a (Transformer Engine's AttnFuncWithCPAndKVAllGather and
// AttnFuncWithCPAndQKVOA2A): the communication of each attention pass, kind by kind and
// tensor by tensor, with its bytes by hand; no ring pairs; a2a's attention kernels span the
// whole sequence over a/cp heads with the same FLOPs.
struct CpComm {
  CommKind kind;
  int64_t bytes;
};
std::map<std::pair<int, int>, std::vector<CpComm>> cp_comms_of_first_layer(const CompiledPlan& cp) {
  // (pass: 0 forward / 1 backward, which side of the attention: 0 before / 1 after)
  std::map<std::pair<int, int>, std::vector<CpComm>> out;
  uint32_t att = 0;
  while (cp.model.ops[att].kind != OpKind::kAttention) ++att;
  for (uint32_t i = 0; i < cp.dag.nodes.size(); ++i) {
    const Node& n = cp.dag.nodes[i];
    if (n.purpose != CommPurpose::kContextPar || n.op != att || n.tags.mb() != 0) continue;
    // before the attention's compute node of the same pass, or after it: the node's position
    // relative to that compute node in the DAG's (topological) order
    uint32_t c = 0;
    for (uint32_t j = 0; j < cp.dag.nodes.size(); ++j) {
      const Node& m = cp.dag.nodes[j];
      if (m.kind == NodeKind::kCompute && m.op == att && m.tags.mb() == 0 &&
          (m.tags.pass == Pass::kF) == (n.tags.pass == Pass::kF))
        c = j;
    }
    out[{n.tags.pass == Pass::kF ? 0 : 1, i < c ? 0 : 1}].push_back({n.comm, n.bytes});
  }
  return out;
}

TEST(ContextParallel, AllGatherAndA2aEmitTransformerEnginesCollectives) {
  const int64_t tok = 2 * 512;                 // b · s/cp at cp 2
  const int64_t kv = 2 * tok * 4 * 64 * 2;     // K and V: 8/2 KV heads of 64, bf16
  const int64_t q = tok * 8 * 64 * 2;          // Q (or the output): 16/2 heads
  {
    SCOPED_TRACE("all_gather");
    json p = tiny_plan({{"tp", 2}, {"cp", 2}, {"cp_comm_type", "all_gather"}}, analytic());
    // The CP collectives are paired with no TP collective. The asynchronous input-gradient
    // reduce (on by default) pairs TP all-reduces with their B nodes, so it is off here.
    p["model"]["async_tp_grad_reduce"] = false;
    Session s = open(p);
    const CompiledPlan& cp = s.compiled();
    EXPECT_TRUE(cp.dag.tp_overlaps.empty());
    const auto c = cp_comms_of_first_layer(cp);
    const int64_t half = 2 * kv / 2;  // K (or V) of the whole sequence: cp · chunk / 2
    auto expect = [&](std::pair<int, int> at, std::vector<CpComm> want) {
      ASSERT_EQ(c.count(at), 1u) << at.first << at.second;
      ASSERT_EQ(c.at(at).size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(c.at(at)[i].kind, want[i].kind);
        EXPECT_EQ(c.at(at)[i].bytes, want[i].bytes);
      }
    };
    expect({0, 0}, {{CommKind::kAllGather, half}, {CommKind::kAllGather, half}});
    EXPECT_EQ(c.count({0, 1}), 0u);
    expect({1, 0}, {{CommKind::kAllGather, half}, {CommKind::kAllGather, half}});
    expect({1, 1}, {{CommKind::kReduceScatter, half}, {CommKind::kReduceScatter, half}});
  }
  {
    SCOPED_TRACE("a2a");
    json p = tiny_plan({{"tp", 2}, {"cp", 2}, {"cp_comm_type", "a2a"}}, analytic());
    // The CP collectives are paired with no TP collective. The asynchronous input-gradient
    // reduce (on by default) pairs TP all-reduces with their B nodes, so it is off here.
    p["model"]["async_tp_grad_reduce"] = false;
    Session s = open(p);
    const CompiledPlan& cp = s.compiled();
    EXPECT_TRUE(cp.dag.tp_overlaps.empty());
    const auto c = cp_comms_of_first_layer(cp);
    auto expect = [&](std::pair<int, int> at, std::vector<int64_t> want) {
      ASSERT_EQ(c.count(at), 1u) << at.first << at.second;
      ASSERT_EQ(c.at(at).size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(c.at(at)[i].kind, CommKind::kAllToAll);
        EXPECT_EQ(c.at(at)[i].bytes, want[i]);
      }
    };
    expect({0, 0}, {q, kv / 2, kv / 2});  // Q, K, V
    expect({0, 1}, {q});                  // the output
    expect({1, 0}, {q});                  // the output gradient
    expect({1, 1}, {q, kv / 2, kv / 2});  // dQ, dK, dV
    Session p2p = open(tiny_plan({{"tp", 2}, {"cp", 2}}, analytic()));
    for (size_t i = 0; i < cp.model.ops.size(); ++i) {
      const auto& a = cp.model.ops[i];
      const auto& b = p2p.compiled().model.ops[i];
      EXPECT_DOUBLE_EQ(a.fwd_flops, b.fwd_flops) << a.name;
      if (a.kind != OpKind::kAttention) continue;
      EXPECT_EQ(a.gemm.m, 1024);  // every query of the sequence
      EXPECT_EQ(a.gemm.n, 1024);
      EXPECT_EQ(a.gemm.batch, 2 * 16 / 2);  // b · heads / cp (TP divides it further)
      EXPECT_EQ(b.gemm.m, 512);
    }
  }
}

// The communication buffers of one attention's CP communication, against Transformer Engine's
// context_parallel.py by hand (cp 2, TP 2: a chunk's K and V kv bytes, Q or the output q):
//  * all_gather (AttnFuncWithCPAndKVAllGather): gather_along_first_dim of K and V gives the
//    whole sequence's, G = cp·kv, held until the attention ends (its forward saves the local
//    K and V, and the backward gathers them again); the backward's dK and dV are zeros of
//    the whole sequence (G) from the attention's start until reduce_scatter_along_first_dim
//    returns the rank's chunk.
//  * a2a (AttnFuncWithCPAndQKVOA2A): flash_attn_a2a_communicate allocates every output
//    (torch.empty_like) and returns them together, so Q, K and V received before the forward
//    (q + kv) are held until the attention ends, as the output gradient (q) before the
//    backward; after the attention the output's (q) or dQ, dK and dV's (q + kv) buffers are
//    held until the last all-to-all ends. Before this test each all-to-all held only its own
//    buffer while it ran (peak max(q, kv/2) instead of q + kv); it failed on every a2a pass.
TEST(ContextParallel, AllGatherAndA2aBuffersMatchTheHandComputation) {
  const int64_t tok = 2 * 512;              // b · s/cp at cp 2
  const int64_t kv = 2 * tok * 4 * 64 * 2;  // K and V: 8/2 KV heads of 64, bf16
  const int64_t q = tok * 8 * 64 * 2;       // Q (or the output): 16/2 heads
  const int64_t G = 2 * kv;                 // K and V of the whole sequence
  using Effects = std::vector<std::pair<std::string, int64_t>>;
  // The first attention's communication-buffer effects, microbatch 0, one pass, in node order
  // (a node's start before its end), and the largest running sum.
  auto effects = [](const CompiledPlan& cp, bool fwd, int64_t* peak) {
    uint32_t att = 0;
    while (cp.model.ops[att].kind != OpKind::kAttention) ++att;
    std::vector<std::tuple<uint32_t, bool, std::string, int64_t>> all;
    for (const compiler::MemEffect& e : cp.dag.mem) {
      const Node& n = cp.dag.nodes[e.node];
      if (e.cat != compiler::MemCategory::kCommBuffers || n.op != att || n.tags.mb() != 0 ||
          (n.tags.pass == Pass::kF) != fwd || n.recompute)
        continue;
      const char* who = n.kind == NodeKind::kCompute         ? "attention"
                        : n.comm == CommKind::kAllGather     ? "all-gather"
                        : n.comm == CommKind::kReduceScatter ? "reduce-scatter"
                        : n.comm == CommKind::kAllToAll      ? "all-to-all"
                                                             : "other";
      all.emplace_back(e.node, e.at_end, std::string(who) + (e.at_end ? " end" : " start"), e.bytes);
    }
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
    });
    Effects out;
    int64_t live = 0;
    *peak = 0;
    for (const auto& [node, end, what, bytes] : all) {
      out.emplace_back(what, bytes);
      live += bytes;
      *peak = std::max(*peak, live);
    }
    EXPECT_EQ(live, 0) << "every buffer is freed within its pass";
    return out;
  };
  int64_t peak = 0;
  {
    SCOPED_TRACE("all_gather");
    Session s = open(tiny_plan({{"tp", 2}, {"cp", 2}, {"cp_comm_type", "all_gather"}}, analytic()));
    EXPECT_EQ(effects(s.compiled(), true, &peak),
              (Effects{{"all-gather start", G}, {"attention end", -G}}));
    EXPECT_EQ(peak, G);
    EXPECT_EQ(effects(s.compiled(), false, &peak),
              (Effects{{"all-gather start", G},
                       {"attention start", G},
                       {"attention end", -G},
                       {"reduce-scatter end", -G}}));
    EXPECT_EQ(peak, 2 * G);
  }
  {
    SCOPED_TRACE("a2a");
    Session s = open(tiny_plan({{"tp", 2}, {"cp", 2}, {"cp_comm_type", "a2a"}}, analytic()));
    EXPECT_EQ(effects(s.compiled(), true, &peak),
              (Effects{{"all-to-all start", q},
                       {"all-to-all start", kv / 2},
                       {"all-to-all start", kv / 2},
                       {"attention end", -(q + kv)},
                       {"all-to-all start", q},
                       {"all-to-all end", -q}}));
    EXPECT_EQ(peak, q + kv);
    EXPECT_EQ(effects(s.compiled(), false, &peak),
              (Effects{{"all-to-all start", q},
                       {"attention end", -q},
                       {"all-to-all start", q},
                       {"all-to-all start", kv / 2},
                       {"all-to-all start", kv / 2},
                       {"all-to-all end", -(q + kv)}}));
    EXPECT_EQ(peak, q + kv);
  }
}

// One layer, one microbatch, the fixed cost model (every op f forward and b backward, every
// communication c), CP 2 against DP 2 over the same two devices: all_gather waits for two
// all-gathers before the attention's forward and backward and two reduce-scatters after the
// backward, unoverlapped (6c); a2a for three all-to-alls before the forward and one after,
// one before the backward and three after (8c). The attention runs whole (f, b) in both.
TEST(ContextParallel, AllGatherAndA2aStepsMatchTheHandComputationUnderTheFixedModel) {
  const int64_t c = kFixedComm;
  auto step = [](json layout) { return fixed_one_layer_step(std::move(layout)); };
  const int64_t dp2 = step({{"dp", 2}});
  EXPECT_EQ(step({{"cp", 2}, {"cp_comm_type", "all_gather"}}) - dp2, 6 * c);
  EXPECT_EQ(step({{"cp", 2}, {"cp_comm_type", "a2a"}}) - dp2, 8 * c);
}

// Recompute with context parallelism (Megatron-Core --recompute-granularity with
// --context-parallel-size): a CP rank checkpoints its own s/cp tokens, and the recomputed
// forward runs the attention's ring again as a forward (TE's AttnFuncWithCPAndKVP2P.forward
// re-run under the checkpoint: cp − 1 K/V transfers), not as a backward.
json recompute_plan(int cpd, const char* mode, json fixed = json()) {
  json p = tiny_plan(json::object(), fixed.is_null() ? analytic() : fixed, 1);
  p["model"]["pp_regions"] = 1;
  json devs = json::array();
  for (int i = 0; i < std::max(1, cpd); ++i) devs.push_back(i);
  json base = {{{"op", "place"}, {"filter", {{"PP", 0}}}, {"devices", devs}}};
  if (cpd > 1)
    base.push_back({{"op", "replicate"},
                    {"filter", {{"PP", 0}}},
                    {"devices", devs},
                    {"context_parallel", cpd}});
  if (mode)
    base.push_back({{"op", "recompute"}, {"filter", {{"LAYER", "*"}}}, {"mode", mode}});
  p["schedule"] = {{"builder", "gpipe"}, {"microbatches", 1}, {"base", base}};
  return p;
}

// Memory: full recompute keeps each layer's input, b·(s/cp)·h in bf16 on a CP rank (2·(s/cp)·b·h
// bytes, Korthikanti's 2sbh with s/cp tokens); selective keeps what it keeps without CP,
// halved at cp 2 (every saved tensor is the rank's s/cp tokens').
TEST(ContextParallel, RecomputeKeepsTheRanksShareOfTheCheckpoint) {
  auto act = [](const json& plan) {
    Session s = open(plan);
    return compiler::summarize(s.compiled()).devices[0].activation_bytes_per_mb;
  };
  const int64_t b = 2, s = 1024, h = 1024;
  const int64_t full1 = act(recompute_plan(1, "full")), full2 = act(recompute_plan(2, "full"));
  const int64_t none2 = act(recompute_plan(2, nullptr));
  const int64_t sel1 = act(recompute_plan(1, "selective")), sel2 = act(recompute_plan(2, "selective"));
  // one layer; the embedding, final norm, head and loss are not recomputed: their share is
  // what no recompute keeps minus the layer's
  EXPECT_EQ(full1, 2 * full2);
  EXPECT_EQ(sel1, 2 * sel2);
  EXPECT_LT(full2, sel2);
  EXPECT_LT(sel2, none2);
  const int64_t layer_input = 2 * b * (s / 2) * h;  // bf16, the rank's tokens
  Session n2 = open(recompute_plan(2, nullptr));
  int64_t outside = 0;  // saved by ops outside the layer, per CP rank
  for (const auto& op : n2.compiled().model.ops)
    if (op.tags.layer() == plan::kAbsent) outside += op.saved_bytes;
  EXPECT_EQ(full2, outside + layer_input);
}

// Time: selective and full recompute re-run the attention's forward with its ring before the
// backward; the recomputed pair is priced as the forward's (cp − 1 K/V transfers, the forward
// closed form), not as the backward's (its node carries the backward's pass tag).
TEST(ContextParallel, RecomputedForwardRunsTheRingAsAForward) {
  for (const char* mode : {"selective", "full"}) {
    SCOPED_TRACE(mode);
    Session s = open(recompute_plan(2, mode));
    const CompiledPlan& cp = s.compiled();
    const Program p = build_program(cp, s.cost_model());
    std::map<uint32_t, uint32_t> task_of;
    for (uint32_t i = 0; i < p.tasks.size(); ++i) task_of.try_emplace(p.tasks[i].node, i);
    auto ring_ns = [&](uint32_t n) {
      const engine::Task& t = p.tasks[task_of.at(n)];
      const engine::CommSpec& cs = p.comms[t.comm];
      return cs.latency_ns + cost::transfer_ns(t.work, cs.rate_cap);
    };
    int64_t fwd_att = -1, fwd_ring = -1, rc_att = -1, rc_ring = -1;
    for (const auto& pr : cp.dag.tp_overlaps) {
      const Node& att = cp.dag.nodes[pr.compute];
      if (att.tags.pass == Pass::kF) {
        fwd_att = p.tasks[task_of.at(pr.compute)].work;
        fwd_ring = ring_ns(pr.comm);
      } else if (att.recompute) {
        rc_att = p.tasks[task_of.at(pr.compute)].work;
        rc_ring = ring_ns(pr.comm);
      }
    }
    ASSERT_GT(fwd_att, 0);
    ASSERT_GT(rc_att, 0) << "no recomputed attention pair";
    EXPECT_EQ(rc_att, fwd_att);
    EXPECT_EQ(rc_ring, fwd_ring);
  }
}

using testing::Refusal;

TEST(ContextParallel, RefusedWhereMegatronCoreRefusesIt) {
  // 1026 tokens divide into 2 CP ranks, but not into 2·cp = 4 load-balanced chunks
  json layout2 = tiny_plan({{"cp", 2}}, analytic());
  layout2["model"]["seq_len"] = 1026;
  auto base = [&](int devices, int cpd) {
    json p = tiny_plan(json::object(), analytic(), 1);
    p["model"]["pp_regions"] = 1;
    json devs = json::array();
    for (int i = 0; i < devices; ++i) devs.push_back(i);
    p["schedule"] = {{"builder", "gpipe"},
                     {"microbatches", 1},
                     {"base",
                      {{{"op", "place"}, {"filter", {{"PP", 0}}}, {"devices", devs}},
                       {{"op", "replicate"},
                        {"filter", {{"PP", 0}}},
                        {"devices", devs},
                        {"context_parallel", cpd}}}}};
    return p;
  };
  json directive2 = base(2, 2);
  directive2["model"]["seq_len"] = 1026;
  json unfused = tiny_plan({{"cp", 2}}, analytic());
  unfused["model"]["attention"] = "unfused";
  const Refusal cases[] = {
      {"layout: 2·cp does not divide seq_len", layout2, "/schedule/layout/cp",
       "2·cp = 4 chunks"},
      {"directive: 2·cp does not divide seq_len", directive2,
       "/schedule/base/1/context_parallel", "2·cp = 4 chunks"},
      {"directive: cp does not divide the devices", base(3, 2),
       "/schedule/base/1/context_parallel", "does not divide the 3 devices"},
      {"unfused attention", unfused, "", "flash"},
  };
  testing::expect_refused(cases);
}

TEST(ContextParallel, CpCommTypeRefusedWhereTransformerEngineRefusesIt) {
  // 16 heads, 8 KV heads: at TP 2 each TP rank has 4 KV heads, which cp 8 does not divide
  json heads = tiny_plan({{"tp", 2}, {"cp", 8}, {"cp_comm_type", "a2a"}}, analytic());
  json no_cp = tiny_plan({{"dp", 2}, {"cp_comm_type", "a2a"}}, analytic());
  json unknown = tiny_plan({{"cp", 2}, {"cp_comm_type", "ring"}}, analytic());
  json directive = tiny_plan(json::object(), analytic(), 1);
  directive["model"]["pp_regions"] = 1;
  directive["schedule"] = {{"builder", "gpipe"},
                           {"microbatches", 1},
                           {"base",
                            {{{"op", "place"}, {"filter", {{"PP", 0}}}, {"devices", {0, 1}}},
                             {{"op", "replicate"},
                              {"filter", {{"PP", 0}}},
                              {"devices", {0, 1}},
                              {"cp_comm_type", "all_gather"}}}}};
  const Refusal cases[] = {
      {"a2a: cp does not divide the heads", heads, "/schedule/layout/cp_comm_type",
       "4 KV heads"},
      {"layout: cp_comm_type without cp", no_cp, "/schedule/layout/cp_comm_type", "cp = 1"},
      {"layout: unknown cp_comm_type", unknown, "/schedule/layout/cp_comm_type", "must be one of"},
      {"directive: cp_comm_type without context_parallel", directive,
       "/schedule/base/1/cp_comm_type", "without context parallelism"},
  };
  testing::expect_refused(cases);
}

}  // namespace
}  // namespace stretto::sim
