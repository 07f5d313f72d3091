// Compiler tests: filter semantics, each directive's DAG rewrite, communication insertion
// counts (derived by hand in the comments), ZeRO levels, tensor parallelism, deadlocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <fstream>
#include <sstream>

#include "stretto/compiler/compiler.h"

using namespace stretto;
using namespace stretto::plan;
using namespace stretto::compiler;
using nlohmann::json;

namespace {

json synthetic(int layers, int regions) {
  return {{"family", "synthetic"},
          {"layers", layers},
          {"pp_regions", regions},
          {"activation_bytes", 1 << 20},
          {"param_bytes", 4 << 20},
          {"boundary_bytes", 1 << 16},
          {"flops", 1e9}};
}
json cluster(int n) {
  return {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", n}};
}
json fpass(int pp, int mb, const char* p) {
  return {{"PP", pp}, {"MB", mb}, {"PASS", p}};
}

Expected<CompiledPlan> compile_json(const json& plan) {
  auto src = JsonSource::parse(plan.dump(1), "test.json");
  if (!src) return fail(src.error());
  auto p = parse_plan(*src);
  if (!p) return fail(p.error());
  return compile(*p, &*src);
}

struct Counts {
  size_t compute = 0, transfer = 0, barrier = 0;
  std::map<CommKind, size_t> coll;
  std::map<CommPurpose, size_t> purpose;
};
Counts count(const CompiledPlan& cp) {
  Counts c;
  for (const auto& n : cp.dag.nodes) {
    if (n.kind == NodeKind::kCompute) ++c.compute;
    if (n.kind == NodeKind::kTransfer) ++c.transfer;
    if (n.kind == NodeKind::kBarrier) ++c.barrier;
    if (n.kind == NodeKind::kCollective) ++c.coll[n.comm];
    if (n.kind != NodeKind::kCompute && n.kind != NodeKind::kBarrier) ++c.purpose[n.purpose];
  }
  return c;
}

// `model` on one device, split into `mbs` microbatches, then `order`.
json one_device(json model, json order, int mbs) {
  return {{"model", std::move(model)},
          {"cluster", cluster(1)},
          {"schedule",
           {{{"op", "place"}, {"filter", json::object()}, {"devices", {0}}},
            {{"op", "split"}, {"filter", json::object()}, {"num_microbatches", mbs}},
            std::move(order)}}};
}

std::string errors(const Expected<CompiledPlan>& r) {
  return r ? "" : render_all(r.error());
}

}  // namespace

TEST(Filter, Semantics) {
  Tags t;
  t.set(TagKey::kPP, 1);
  t.set(TagKey::kMB, 3);
  t.pass = Pass::kF;
  Filter all;
  EXPECT_TRUE(all.matches(t));
  Filter f;
  f.cond[0] = {TagCond::kEquals, 1};
  EXPECT_TRUE(f.matches(t));
  f.cond[0] = {TagCond::kEquals, 0};
  EXPECT_FALSE(f.matches(t));
  Filter star;
  star.cond[1] = {TagCond::kPresent, 0};  // EP "*": absent here
  EXPECT_FALSE(star.matches(t));
  Filter dash;
  dash.cond[1] = {TagCond::kAbsentOnly, 0};  // EP "-"
  EXPECT_TRUE(dash.matches(t));
  Filter pass;
  pass.pass = Pass::kB;
  EXPECT_FALSE(pass.matches(t));
  pass.pass = Pass::kF;
  EXPECT_TRUE(pass.matches(t));
  EXPECT_EQ(star.str(), "{\"EP\":\"*\"}");
}

TEST(Compiler, PlaceAndSplitRewrite) {
  // 4 layers in 2 regions on 2 devices, 3 microbatches, default (GPipe-like) order.
  // compute: 4 ops x 3 MB x (F + B) = 24. transfers: 1 boundary x 3 MB x (activation +
  // gradient) = 6. No replication: no collectives.
  json plan = {{"model", synthetic(4, 2)},
               {"cluster", cluster(2)},
               {"schedule",
                {{{"op", "place"}, {"filter", {{"PP", 0}}}, {"devices", {0}}},
                 {{"op", "place"}, {"filter", {{"PP", 1}}}, {"devices", {1}}},
                 {{"op", "split"}, {"filter", json::object()}, {"num_microbatches", 3}}}}};
  auto cp = compile_json(plan);
  ASSERT_TRUE(cp) << errors(cp);
  auto c = count(*cp);
  EXPECT_EQ(c.compute, 24u);
  EXPECT_EQ(c.transfer, 6u);
  EXPECT_TRUE(c.coll.empty());
  EXPECT_EQ(c.purpose[CommPurpose::kActivation], 3u);
  EXPECT_EQ(c.purpose[CommPurpose::kGradient], 3u);
  EXPECT_EQ(cp->num_microbatches, 3);
  // Every compute node carries MB; region bookkeeping: 2 ops per (PP, MB, PASS) region pass.
  for (const auto& n : cp->dag.nodes)
    if (n.kind == NodeKind::kCompute) {
      EXPECT_NE(n.tags.mb(), kAbsent);
      EXPECT_EQ(n.region_n, 2);
    }
  // Two device classes, each program: 12 compute + 6 transfers.
  ASSERT_EQ(cp->classes.size(), 2u);
  EXPECT_EQ(cp->classes[0].program.size(), 18u);
  // Default order on device 0 is GPipe-like: all forwards before any backward.
  bool seen_b = false;
  for (uint32_t i : cp->classes[0].program) {
    const Node& n = cp->dag.nodes[i];
    if (n.kind != NodeKind::kCompute) continue;
    if (n.tags.pass == Pass::kB)
      seen_b = true;
    else {
      EXPECT_FALSE(seen_b) << "forward after a backward in the default order";
    }
  }
}

TEST(Compiler, ReplicateInsertsBucketedReductions) {
  // 2 regions x 2 layers of 4 MiB params, DP2 per stage. bucket 6 MiB: per stage the reverse
  // walk adds layer1 (4 MiB, < 6), then layer0 (8 MiB >= 6) -> flush: 1 bucket per stage.
  // bucket 3 MiB: every layer flushes alone -> 2 per stage. ZeRO-0: all-reduce.
  for (auto [bucket, per_stage] : {std::pair{6.0, 1}, std::pair{3.0, 2}}) {
    json plan = {{"model", synthetic(4, 2)},
                 {"cluster", cluster(4)},
                 {"schedule",
                  {{{"op", "place"}, {"filter", {{"PP", 0}}}, {"devices", {0, 2}}},
                   {{"op", "place"}, {"filter", {{"PP", 1}}}, {"devices", {1, 3}}},
                   {{"op", "replicate"},
                    {"filter", {{"PP", 0}}},
                    {"devices", {0, 2}},
                    {"bucket_size", bucket}},
                   {{"op", "replicate"},
                    {"filter", {{"PP", 1}}},
                    {"devices", {1, 3}},
                    {"bucket_size", bucket}},
                   {{"op", "split"}, {"filter", json::object()}, {"num_microbatches", 2}}}}};
    auto cp = compile_json(plan);
    ASSERT_TRUE(cp) << errors(cp);
    auto c = count(*cp);
    EXPECT_EQ(c.coll[CommKind::kAllReduce], static_cast<size_t>(2 * per_stage)) << bucket;
    EXPECT_EQ(c.transfer, 4u);  // sharded over DP: one node per (boundary, MB, direction)
    // Each reduction waits for the last backward of every microbatch of its ops.
    for (uint32_t i = 0; i < cp->dag.nodes.size(); ++i) {
      const Node& n = cp->dag.nodes[i];
      if (n.kind != NodeKind::kCollective) continue;
      size_t preds = cp->dag.pred_begin[i + 1] - cp->dag.pred_begin[i];
      EXPECT_EQ(preds, static_cast<size_t>(2 * (2 / per_stage)));
      EXPECT_EQ(cp->dag.device_sets[n.devs].group_size, 2);
    }
    EXPECT_EQ(cp->classes.size(), 2u);  // the two replicas of a stage share one program
  }
}

TEST(Compiler, ZeroLevelsChangeStaticMemoryExactly) {
  // One region of 2 layers x 4 MiB params (2 Mi bf16 params each) on DP4.
  // ZeRO-0: params 8 MiB, grads 8 MiB, optimizer 12 B x 4 Mi = 48 MiB.
  // ZeRO-1: optimizer / 4; ZeRO-2: grads / 4 too; ZeRO-3: params / 4 too.
  struct Z {
    json flags;
    int64_t p, g, o;
    int level;
  };
  const int64_t MiB = 1 << 20;
  std::vector<Z> zs = {
      {json::object(), 8 * MiB, 8 * MiB, 48 * MiB, 0},
      {{{"shard_optimizer", true}}, 8 * MiB, 8 * MiB, 12 * MiB, 1},
      {{{"shard_grads", true}}, 8 * MiB, 2 * MiB, 12 * MiB, 2},
      {{{"shard_grads", true}, {"shard_params", true}}, 2 * MiB, 2 * MiB, 12 * MiB, 3}};
  for (const auto& z : zs) {
    json rep = {{"op", "replicate"}, {"filter", json::object()}, {"devices", {0, 1, 2, 3}}};
    rep.update(z.flags);
    json plan = {{"model", synthetic(2, 1)},
                 {"cluster", cluster(4)},
                 {"schedule",
                  {{{"op", "place"}, {"filter", json::object()}, {"devices", {0, 1, 2, 3}}}, rep}}};
    auto cp = compile_json(plan);
    ASSERT_TRUE(cp) << errors(cp);
    EXPECT_EQ(cp->zero_level, z.level);
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(cp->static_mem[d].params, z.p) << z.level;
      EXPECT_EQ(cp->static_mem[d].grads, z.g) << z.level;
      EXPECT_EQ(cp->static_mem[d].optimizer, z.o) << z.level;
    }
    auto c = count(*cp);
    if (z.level == 0) {
      EXPECT_EQ(c.coll[CommKind::kAllReduce], 1u);
    }
    if (z.level >= 1) {
      EXPECT_EQ(c.coll[CommKind::kReduceScatter], 1u);
    }
    // ZeRO-1/2 all-gather updated params once per bucket; ZeRO-3 gathers per op, per pass.
    if (z.level == 1 || z.level == 2) {
      EXPECT_EQ(c.coll[CommKind::kAllGather], 1u);
    }
    // ZeRO-3: 2 ops x (F, B) x 1 MB; no final all-gather.
    if (z.level == 3) {
      EXPECT_EQ(c.coll[CommKind::kAllGather], 2u * 2u);
    }
  }
}

TEST(Compiler, ExpertShardInsertsAllToAll) {
  // The Piper walkthrough: 4 layers, all MoE, 2 per stage; 2 microbatches. Per (MoE layer,
  // MB): dispatch + combine in forward, and the two mirrored in backward = 4 all-to-alls.
  // 4 layers x 2 MB x 4 = 32 all-to-alls.
  auto cp = compile_file(std::string(STRETTO_EXAMPLES) + "/piper_qwen3_moe_pp2_dp2_ep2.json");
  ASSERT_TRUE(cp) << errors(cp);
  auto c = count(*cp);
  EXPECT_EQ(c.coll[CommKind::kAllToAll], 32u);
  EXPECT_EQ(c.purpose[CommPurpose::kDispatch], 16u);
  EXPECT_EQ(c.purpose[CommPurpose::kCombine], 16u);
  // Transfers: 1 boundary x 2 MB x 2 directions.
  EXPECT_EQ(c.transfer, 4u);
  // Expert parameters are not DP-reduced: no reduction names an experts op.
  for (const auto& n : cp->dag.nodes)
    if (n.purpose == CommPurpose::kGradReduce) {
      EXPECT_NE(cp->model.ops[n.op].kind, OpKind::kExperts);
    }
  // The overlap group: PP1's F of MB1 and B of MB0 are not ordered by a temporal edge, in
  // either direction, directly or through a barrier; other ops of PP1 are (so the check is not
  // vacuous).
  auto is = [](const Node& n, int mb, Pass pass) {
    return n.tags.pp() == 1 && n.tags.mb() == mb && n.tags.pass == pass &&
           n.kind == NodeKind::kCompute;
  };
  // Temporal orderings x -> y between compute nodes: direct, or x -> barrier -> y.
  std::map<uint32_t, std::vector<uint32_t>> into, out_of;
  std::vector<std::pair<uint32_t, uint32_t>> orders;
  for (const auto& e : cp->dag.edges) {
    if (e.kind != EdgeKind::kTemporal) continue;
    const bool from_bar = cp->dag.nodes[e.from].kind == NodeKind::kBarrier;
    const bool to_bar = cp->dag.nodes[e.to].kind == NodeKind::kBarrier;
    if (to_bar && !from_bar) into[e.to].push_back(e.from);
    if (from_bar && !to_bar) out_of[e.from].push_back(e.to);
    if (!from_bar && !to_bar) orders.push_back({e.from, e.to});
  }
  for (const auto& [bar, ins] : into)
    for (uint32_t x : ins)
      for (uint32_t y : out_of[bar]) orders.push_back({x, y});
  size_t pp1_orders = 0;
  for (const auto& [x, y] : orders) {
    const Node& a = cp->dag.nodes[x];
    const Node& b = cp->dag.nodes[y];
    EXPECT_FALSE(is(a, 1, Pass::kF) && is(b, 0, Pass::kB)) << x << " -> " << y;
    EXPECT_FALSE(is(a, 0, Pass::kB) && is(b, 1, Pass::kF)) << x << " -> " << y;
    pp1_orders += a.kind == NodeKind::kCompute && b.kind == NodeKind::kCompute &&
                  a.tags.pp() == 1 && b.tags.pp() == 1 && a.tags.mb() != b.tags.mb();
  }
  EXPECT_GT(pp1_orders, 0u);
}

TEST(Compiler, TensorParallelInsertion) {
  // Megatron TP8 x PP2 x DP2, SP on. Per dense layer and microbatch, forward: all-gather
  // before qkv and before mlp.up, reduce-scatter after out_proj and mlp.down (4); backward
  // mirrors them (4) and all-gathers the inputs of qkv and mlp.up again for their weight
  // gradients (2, Megatron-Core keeps only the sequence shard). Embedding (vocab-parallel,
  // row-like): reduce-scatter forward and the mirrored all-gather backward (2); head (column):
  // all-gather forward, reduce-scatter backward and the re-gather (3). 40 layers x 8 MB x 10 +
  // 8 MB x 5 = 3240 TP collectives, and the vocab-parallel loss's 3 all-reduces per microbatch.
  auto cp = compile_file(std::string(STRETTO_EXAMPLES) + "/megatron_gpt13b_tp8_pp2_dp2.json");
  ASSERT_TRUE(cp) << errors(cp);
  auto c = count(*cp);
  EXPECT_EQ(c.purpose[CommPurpose::kTensorPar], 40u * 8 * 10 + 8 * 5);
  EXPECT_EQ(c.purpose[CommPurpose::kLossReduce], 8u * 3);
  // TP groups are the 8 devices of a node; compute nodes run on 16 devices each.
  for (const auto& n : cp->dag.nodes) {
    if (n.purpose == CommPurpose::kTensorPar) {
      EXPECT_EQ(cp->dag.device_sets[n.devs].group_size, 8);
    }
    if (n.kind == NodeKind::kCompute) {
      EXPECT_EQ(n.tp, 8);
      EXPECT_EQ(cp->dag.device_sets[n.devs].devices.size(), 16u);
    }
  }
  // DP reduction groups pair the same TP rank across replicas: groups of 2.
  for (const auto& n : cp->dag.nodes)
    if (n.purpose == CommPurpose::kGradReduce) {
      EXPECT_EQ(cp->dag.device_sets[n.devs].group_size, 2);
    }
}

TEST(Compiler, SplitBackwardWhereOrderNamesBIorBW) {
  json order = {{"op", "order"},
                {"filters", {{fpass(0, 0, "F")}, {fpass(0, 0, "BI")}, {fpass(0, 0, "BW")}}}};
  auto cp = compile_json(one_device(synthetic(2, 1), order, 2));
  ASSERT_TRUE(cp) << errors(cp);
  size_t bi = 0, bw = 0, b = 0;
  for (const auto& n : cp->dag.nodes) {
    if (n.kind != NodeKind::kCompute) continue;
    if (n.tags.pass == Pass::kBI) {
      ++bi;
      EXPECT_EQ(n.tags.mb(), 0);
    }
    if (n.tags.pass == Pass::kBW) ++bw;
    if (n.tags.pass == Pass::kB) {
      ++b;
      EXPECT_EQ(n.tags.mb(), 1);
    }
  }
  EXPECT_EQ(bi, 2u);
  EXPECT_EQ(bw, 2u);
  EXPECT_EQ(b, 2u);
}

// An op without a weight gradient (attention core, activation, loss) gets no BW node where
// the backward is split: its BI is its whole backward and frees all its saved activations.
// Every op with parameters keeps one BW per microbatch. A BW filter that names only such ops
// is not an error (its BI matches), but a BW filter naming nothing at all still is.
TEST(Compiler, SplitBackwardGivesBWOnlyToOpsWithWeightGradients) {
  json model = {{"family", "transformer"}, {"layers", 2},  {"hidden", 64},
                {"heads", 4},              {"ffn_hidden", 128}, {"vocab", 256},
                {"seq_len", 32},           {"microbatch_size", 1}};
  json order = {{"op", "order"},
                {"filters",
                 {{fpass(0, 0, "F")}, {fpass(0, 1, "F")}, {fpass(0, 0, "BI")},
                  {fpass(0, 1, "BI")}, {fpass(0, 0, "BW")}, {fpass(0, 1, "BW")}}}};
  const json plan = one_device(model, order, 2);
  auto cp = compile_json(plan);
  ASSERT_TRUE(cp) << errors(cp);
  const auto& ops = cp->model.ops;
  size_t with = 0, without = 0;
  for (const auto& op : ops) (op.has_weight_grad() ? with : without)++;
  ASSERT_GT(with, 0u);
  ASSERT_GT(without, 0u);  // the attention core, the MLP activation, the loss
  std::map<uint32_t, int> bw_of, bi_of;
  for (uint32_t i = 0; i < cp->dag.nodes.size(); ++i) {
    const Node& n = cp->dag.nodes[i];
    if (n.kind != NodeKind::kCompute) continue;
    if (n.tags.pass == Pass::kBW) ++bw_of[n.op];
    if (n.tags.pass == Pass::kBI) ++bi_of[n.op];
    EXPECT_NE(n.tags.pass, Pass::kB) << cp->dag.node_name(i, cp->model);
  }
  for (uint32_t o = 0; o < ops.size(); ++o) {
    EXPECT_EQ(bi_of[o], 2) << ops[o].name;
    EXPECT_EQ(bw_of[o], ops[o].has_weight_grad() ? 2 : 0) << ops[o].name;
  }
  // Activations: every byte saved by a forward is freed by the same op's BI or BW, and an op
  // without BW frees all of its at BI.
  std::map<std::pair<uint32_t, int>, int64_t> live;  // (op, mb) -> saved bytes outstanding
  for (const MemEffect& m : cp->dag.mem) {
    if (m.cat != MemCategory::kActivations) continue;
    const Node& n = cp->dag.nodes[m.node];
    if (n.kind != NodeKind::kCompute) continue;
    live[{n.op, n.tags.mb()}] += m.bytes;
  }
  for (const auto& [key, bytes] : live) EXPECT_EQ(bytes, 0) << ops[key.first].name;
  for (const MemEffect& m : cp->dag.mem) {
    const Node& n = cp->dag.nodes[m.node];
    if (m.cat == MemCategory::kActivations && n.tags.pass == Pass::kBI &&
        !ops[n.op].has_weight_grad()) {
      EXPECT_LT(m.bytes, 0);
    }
  }

  // A BW group naming only ops without a weight gradient (filters select by PP, LAYER and
  // EP, so here a model whose ops have none: synthetic, no parameters, no work) is empty, and
  // that is fine.
  json none = synthetic(2, 1);
  for (const char* k : {"activation_bytes", "param_bytes", "boundary_bytes", "flops"}) none[k] = 0;
  auto empty_bw = compile_json(one_device(none, order, 2));
  ASSERT_TRUE(empty_bw) << errors(empty_bw);
  for (const Node& n : empty_bw->dag.nodes) EXPECT_NE(n.tags.pass, Pass::kBW);
  // ... but BW of a microbatch that does not exist still matches nothing.
  json plan3 = plan;
  plan3["schedule"][2]["filters"][4] = {fpass(0, 7, "BW")};
  auto bad = compile_json(plan3);
  ASSERT_FALSE(bad);
  EXPECT_NE(errors(bad).find("matches nothing"), std::string::npos) << errors(bad);
}

TEST(Compiler, DeadlocksAreErrorsNamingTheCycle) {
  // Five distinct deadlocking orders (the golden files hold the full text).
  const char* files[] = {"deadlock_backward_before_forward",
                         "deadlock_cross_device_inversion",
                         "deadlock_overlap_group",
                         "deadlock_bw_before_bi",
                         "deadlock_stage_order_on_one_device",
                         "deadlock_three_devices"};
  for (const char* f : files) {
    auto cp = compile_file(std::string(STRETTO_TEST_DATA) + "/schedules/bad/" + f + ".json");
    ASSERT_FALSE(cp) << f;
    const std::string text = render_all(cp.error());
    EXPECT_TRUE(text.find("deadlock") != std::string::npos ||
                text.find("contradicts dataflow") != std::string::npos)
        << text;
    EXPECT_NE(text.find("[directive"), std::string::npos) << text;
    EXPECT_NE(text.find("must finish before (order directive"), std::string::npos) << text;
  }
}

// `order`: every op of group k+1 waits for every op of group k, so an op named by two
// consecutive groups waits for itself. The error's cycle is that op alone, ordered before itself
// by the directive: the compiler keeps every pair of two groups that share a member instead of
// joining only the first group's last ops to the second's first ones. Joined by their ends
// only, the cycle ran through a data edge (layer1 "must finish before" layer0, which layer0
// feeds) and named an op the plan did not order twice.
TEST(Order, AnOpInTwoConsecutiveGroupsIsReportedOrderedBeforeItself) {
  const json f0 = fpass(0, 0, "F"), f1 = fpass(0, 1, "F");
  const std::vector<json> cases = {json::array({json::array({f0}), json::array({f0})}),
                                   json::array({json::array({f0}), json::array({f1, f0})}),
                                   json::array({json::array({f0, f1}), json::array({f0})})};
  for (const json& groups : cases) {
    SCOPED_TRACE(groups.dump());
    // 4 layers in one region: each region pass is a chain of 4 ops.
    auto cp = compile_json(
        one_device(synthetic(4, 1), {{"op", "order"}, {"filters", groups}}, 2));
    ASSERT_FALSE(cp);
    const std::string text = errors(cp);
    EXPECT_NE(text.find("order contradicts dataflow"), std::string::npos) << text;
    EXPECT_NE(text.find("PP0 LAYER0 MB0 F (layer0) on device 0\n"
                        "      must finish before (order directive 2)\n"
                        "    (the first op again)"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("data dependency"), std::string::npos) << text;
  }
  // A region pass of one op (2 layers in 2 regions): [[F0], [F0]] orders that op before itself
  // with no other op in the cycle. It compiled (the self-edge was skipped); now refused alike.
  auto cp = compile_json(one_device(
      synthetic(2, 2), {{"op", "order"}, {"filters", cases[0]}}, 2));
  ASSERT_FALSE(cp);
  EXPECT_NE(errors(cp).find("PP0 LAYER0 MB0 F (layer0) on device 0\n"
                            "      must finish before (order directive 2)\n"
                            "    (the first op again)"),
            std::string::npos)
      << errors(cp);
}

namespace {
void check_group_spanning_devices(const json& groups) {
  json plan = {{"model", synthetic(4, 2)},
               {"cluster", cluster(2)},
               {"schedule",
                {{{"op", "place"}, {"filter", {{"PP", 0}}}, {"devices", {0}}},
                 {{"op", "place"}, {"filter", {{"PP", 1}}}, {"devices", {1}}},
                 {{"op", "split"}, {"filter", json::object()}, {"num_microbatches", 2}},
                 {{"op", "order"}, {"filters", groups}}}}};
  auto cp = compile_json(plan);
  ASSERT_TRUE(cp) << errors(cp);
  const TrainingDag& dag = cp->dag;
  auto devices_of = [&](const Node& n) {
    std::vector<int32_t> d = dag.device_sets[n.devs].devices;
    if (n.devs2 != kNone)
      for (int32_t x : dag.device_sets[n.devs2].devices) d.push_back(x);
    return d;
  };
  size_t temporal = 0;
  for (const Edge& e : dag.edges) {
    if (e.kind != EdgeKind::kTemporal) continue;
    ++temporal;
    const auto a = devices_of(dag.nodes[e.from]), b = devices_of(dag.nodes[e.to]);
    bool common = false;
    for (int32_t x : a) common = common || std::find(b.begin(), b.end(), x) != b.end();
    EXPECT_TRUE(common) << dag.node_name(e.from, cp->model) << " -> "
                        << dag.node_name(e.to, cp->model);
  }
  EXPECT_GE(temporal, 2u);  // F0 -> F1 on each device
  // What waits for what: nodes reachable from device 1's F0, and from device 0's F0.
  auto reach = [&](int pp, int mb) {
    std::vector<char> seen(dag.nodes.size(), 0);
    std::vector<uint32_t> stack;
    for (uint32_t i = 0; i < dag.nodes.size(); ++i) {
      const Node& n = dag.nodes[i];
      if (n.kind == NodeKind::kCompute && n.tags.pp() == pp && n.tags.mb() == mb &&
          n.tags.pass == Pass::kF) {
        seen[i] = 1;
        stack.push_back(i);
      }
    }
    while (!stack.empty()) {
      const uint32_t i = stack.back();
      stack.pop_back();
      for (uint32_t k = dag.succ_begin[i]; k < dag.succ_begin[i + 1]; ++k)
        if (!seen[dag.succ[k]]) {
          seen[dag.succ[k]] = 1;
          stack.push_back(dag.succ[k]);
        }
    }
    return seen;
  };
  const auto after_dev1_f0 = reach(1, 0), after_dev0_f0 = reach(0, 0);
  size_t f1_dev0 = 0, f1_dev1 = 0;
  for (uint32_t i = 0; i < dag.nodes.size(); ++i) {
    const Node& n = dag.nodes[i];
    if (n.kind != NodeKind::kCompute || n.tags.mb() != 1 || n.tags.pass != Pass::kF) continue;
    if (n.tags.pp() == 0) {
      ++f1_dev0;
      EXPECT_FALSE(after_dev1_f0[i]) << dag.node_name(i, cp->model) << " waits for device 1's F0";
      EXPECT_TRUE(after_dev0_f0[i]) << dag.node_name(i, cp->model);
    } else {
      ++f1_dev1;
      EXPECT_TRUE(after_dev1_f0[i]) << dag.node_name(i, cp->model) << " is not after device 1's F0";
    }
  }
  EXPECT_GT(f1_dev0, 0u);
  EXPECT_GT(f1_dev1, 0u);
}
}  // namespace

// `order` applies per device: a group that names ops of two devices is, on each device, the
// ops that run there. With stage 0 on device 0 and stage 1 on device 1, ordering the forwards
// of microbatch 0 before those of microbatch 1 puts F1 after F0 on each device and nothing
// between them: device 0's F1 does not wait for device 1's F0 (its forward needs nothing from
// there), and every temporal edge joins ops that share a device. Checked with one filter per
// group (any PP) and with an overlap group of one filter per stage. Projecting each group whole
// onto the class of its first member (device 0's), without each member's device set, made
// device 0's F1 wait through a barrier for device 1's F0 (one filter) or refused the plan as a
// contradiction (the overlap group's feeding send ordered before the forward it sends).
TEST(Order, AGroupSpanningDevicesIsOrderedOnEachDeviceByItsOwnOps) {
  const json f0 = {{"MB", 0}, {"PASS", "F"}}, f1 = {{"MB", 1}, {"PASS", "F"}};
  const std::vector<json> cases = {
      json::array({json::array({f0}), json::array({f1})}),
      json::array({json::array({fpass(0, 0, "F"), fpass(1, 0, "F")}),
                   json::array({fpass(0, 1, "F"), fpass(1, 1, "F")})})};
  for (const json& groups : cases) {
    SCOPED_TRACE(groups.dump());
    check_group_spanning_devices(groups);
  }
}

TEST(Compiler, LoweringOrdersSharedTransfersConsistently) {
  // Every pair of classes sees the transfers they share in the same relative order.
  auto cp = compile_file(std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json");
  ASSERT_TRUE(cp) << errors(cp);
  std::vector<std::vector<int64_t>> pos(cp->classes.size(),
                                        std::vector<int64_t>(cp->dag.nodes.size(), -1));
  for (size_t c = 0; c < cp->classes.size(); ++c)
    for (size_t k = 0; k < cp->classes[c].program.size(); ++k)
      pos[c][cp->classes[c].program[k]] = static_cast<int64_t>(k);
  for (size_t a = 0; a < cp->classes.size(); ++a)
    for (size_t b = a + 1; b < cp->classes.size(); ++b) {
      std::vector<uint32_t> shared;
      for (uint32_t i : cp->classes[a].program)
        if (pos[b][i] >= 0) shared.push_back(i);
      for (size_t k = 1; k < shared.size(); ++k)
        EXPECT_LT(pos[b][shared[k - 1]], pos[b][shared[k]]);
    }
  // And each class program respects every edge between its own nodes.
  for (size_t c = 0; c < cp->classes.size(); ++c)
    for (const auto& e : cp->dag.edges)
      if (pos[c][e.from] >= 0 && pos[c][e.to] >= 0) {
        EXPECT_LT(pos[c][e.from], pos[c][e.to]);
      }
}

// Gradient clipping's norm is all-reduced over Megatron-Core's grad_stats_parallel_group
// (docs/semantics.md "Gradient-norm all-reduce"): without the distributed optimizer, the
// model-parallel group (TP x PP, one replica: DP and CP ranks hold gradients already reduced);
// with it (ZeRO-1/2/3), every device. Devices by hand from the layout's rank order
// (tp-cp-dp-pp: device t + tp·(c + cp·(d + dp·r))). Before, every plan reduced over all its
// devices: each case but ZeRO-1's fails that way.
TEST(GradNorm, ReducesOverMegatronCoresGroup) {
  struct Case {
    const char* what;
    json layout;
    int devices;
    bool moe;
    std::vector<std::vector<int32_t>> groups;  // empty: no all-reduce (one device's norm)
  };
  const std::vector<Case> cases = {
      {"tp2 pp2 dp2", {{"tp", 2}, {"pp", 2}, {"dp", 2}}, 8, false,
       {{0, 1, 4, 5}, {2, 3, 6, 7}}},
      {"tp2 pp2 dp2 zero1", {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"zero", 1}}, 8, false,
       {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {"tp2 dp4: the TP groups", {{"tp", 2}, {"dp", 4}}, 8, false,
       {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
      {"dp4: each device alone", {{"dp", 4}}, 4, false, {}},
      {"tp2 cp2 pp2: CP ranks are replicas", {{"tp", 2}, {"cp", 2}, {"pp", 2}}, 8, false,
       {{0, 1, 4, 5}, {2, 3, 6, 7}}},
      {"dp2 ep2: the experts' shards join the replicas", {{"dp", 2}, {"ep", 2}}, 2, true,
       {{0, 1}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    json model = {{"family", "transformer"}, {"layers", 4},   {"hidden", 64},
                  {"heads", 4},              {"ffn_hidden", 128}, {"vocab", 256},
                  {"seq_len", 32},           {"microbatch_size", 1},
                  {"pp_regions", c.layout.value("pp", 1)}};
    if (c.moe) model["moe"] = {{"experts", 4}, {"top_k", 2}, {"expert_ffn_hidden", 64}};
    const json plan = {{"model", model},
                       {"cluster", cluster(c.devices)},
                       {"optimizer", {{"kind", "adam"}, {"grad_clip", true}}},
                       {"schedule", {{"builder", "1f1b"}, {"microbatches", 4}, {"layout", c.layout}}}};
    auto cp = compile_json(plan);
    ASSERT_TRUE(cp) << errors(cp);
    std::vector<std::vector<int32_t>> groups;
    for (const auto& n : cp->dag.nodes) {
      if (n.purpose != CommPurpose::kGradNorm) continue;
      EXPECT_EQ(n.comm, CommKind::kAllReduce);
      EXPECT_EQ(n.bytes, 4);
      const DeviceSet& s = cp->dag.device_sets[n.devs];
      for (size_t b = 0; b < s.devices.size(); b += static_cast<size_t>(s.group_size)) {
        std::vector<int32_t> g(s.devices.begin() + static_cast<std::ptrdiff_t>(b),
                               s.devices.begin() + static_cast<std::ptrdiff_t>(b + s.group_size));
        std::sort(g.begin(), g.end());
        groups.push_back(g);
      }
    }
    std::sort(groups.begin(), groups.end());
    EXPECT_EQ(groups, c.groups);
  }
}
