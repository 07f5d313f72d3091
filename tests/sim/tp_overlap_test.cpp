// Tensor-parallel communication overlap (`tp_comm_overlap`: Megatron-Core --tp-comm-overlap on
// Transformer Engine's userbuffers; compiler/dag.h TpOverlap, costmodel/tp_overlap.h).
//
//  * Pairs: every overlapped collective is priced as its chunks, by an α–β hand computation
//    on the test cluster of collective_bytes_test.cpp (links of 360 GB/s and 1 µs, NCCL forced
//    to ring/Simple), and every GEMM it overlaps takes the closed form written out here, with
//    TE's 16 communication SMs held back from the pipeline and bulk GEMMs (132 → 116 SMs);
//  * Step: a one-layer TP2 plan under the fixed cost model (no interference, comm = latency)
//    simulates to the step computed by hand below, with and without the overlap;
//  * Exposed TP communication drops on an analytic plan;
//  * Refusals: no sequence parallelism, no TP, TP groups across nodes, located.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "stretto/sim/pipeline_metrics.h"
#include "stretto/sim/session.h"
#include "refusals.h"

namespace stretto::sim {
namespace {

using compiler::CompiledPlan;
using compiler::Node;
using compiler::OverlapPart;
using compiler::TpOverlap;
using compiler::TpOverlapPair;
using engine::CommSpec;
using engine::Program;
using engine::Task;
using nlohmann::json;
using plan::Pass;

constexpr double kLinkGBps = 360;
constexpr double kLinkLatencyUs = 1;
constexpr double kRingBaseUs = 8.4;   // NCCL 2.28 tuning.cc baseLat[Ring][Simple]
constexpr double kNvlinkHopUs = 3.4;  // NCCL 2.28 tuning.cc hwLat[NVLink][Ring][Simple]
constexpr int kSms = 132;             // h100-sxm
constexpr int kTeSms = 16;            // TE initialize_ub: num_sm 16 for pipeline and bulk

json tiny_plan(json layout, json costmodel, int layers = 2, int devices_per_node = 32) {
  return {{"model",
           {{"family", "transformer"},
            {"layers", layers},
            {"hidden", 1024},
            {"heads", 16},
            {"ffn_hidden", 4096},
            {"vocab", 16384},
            {"seq_len", 1024},
            {"microbatch_size", 2}}},
          {"cluster",
           {{"preset", "h100-sxm"},
            {"nodes", 1},
            {"devices_per_node", devices_per_node},
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
json overlap_layout(int tp, bool on = true) {
  return {{"tp", tp}, {"sequence_parallel", true}, {"tp_comm_overlap", on}};
}

int64_t us(double x) { return std::llround(x * 1000); }
int64_t wire_ns(double bytes) { return static_cast<int64_t>(std::ceil(bytes / kLinkGBps)); }

TEST(TpOverlap, PairsArePricedAsTheirChunksAndTheGemmLosesTeCommSms) {
  for (int t : {2, 4, 8}) {
    SCOPED_TRACE("tp " + std::to_string(t));
    auto s = Session::from_text(tiny_plan(overlap_layout(t), analytic()).dump(), "ovl.json");
    ASSERT_TRUE(s) << render_all(s.error());
    const CompiledPlan& cp = s->compiled();
    const Program p = build_program(cp, s->cost_model());
    std::map<uint32_t, uint32_t> task_of;  // node -> its first task
    for (uint32_t i = 0; i < p.tasks.size(); ++i) task_of.try_emplace(p.tasks[i].node, i);
    const int64_t B = int64_t{1024} * 2 * 1024 * 2;  // b·s·h in bf16: every TP collective here
    // The chunks, by hand (α–β on the test cluster).
    const int64_t ring =  // t − 1 send/recv steps of B/t over one link
        (t - 1) * us(kLinkLatencyUs + kNvlinkHopUs) + wire_ns(double((t - 1) * (B / t)));
    const int64_t pipeline =  // 4 ring reduce-scatters of B/4
        4 * us(kRingBaseUs + (t - 1) * kNvlinkHopUs) + wire_ns(4.0 * (B / 4) * (t - 1) / t);
    const int64_t bulk = us(kRingBaseUs + (t - 1) * kNvlinkHopUs) + wire_ns(double(B) * (t - 1) / t);
    std::map<TpOverlap, int> pairs;
    CostQueries queries(cp);
    auto gemm_ns = [&](const Node& nd, Pass pass) {
      Node x = nd;
      x.tags.pass = pass;
      return s->cost_model().compute(queries.compute(x)).ns;
    };
    const double margin = double(kSms) / (kSms - kTeSms);  // 132 / 116
    const double share = s->cost_model().interference().comm_sm_share;
    std::map<uint32_t, std::map<OverlapPart, const TpOverlapPair*>> by_gemm;
    for (const TpOverlapPair& pr : cp.dag.tp_overlaps) {
      ++pairs[pr.method];
      by_gemm[pr.compute][pr.part] = &pr;
      const Node& comm = cp.dag.nodes[pr.comm];
      ASSERT_EQ(comm.bytes, B);
      const Task& ct = p.tasks[task_of.at(pr.comm)];
      EXPECT_TRUE(ct.overlapped);
      const CommSpec& cs = p.comms[ct.comm];
      const int64_t c = cs.latency_ns + cost::transfer_ns(ct.work, cs.rate_cap);
      const int64_t want_c = pr.method == TpOverlap::kRing       ? ring
                             : pr.method == TpOverlap::kPipeline ? pipeline
                                                                 : bulk;  // (kAsync: NCCL's)
      EXPECT_NEAR(static_cast<double>(c), static_cast<double>(want_c), 8.0)
          << compiler::tp_overlap_name(pr.method);
    }
    // Each overlapped GEMM's task: the pair's closed form; a B node sums its input-gradient
    // and weight-gradient GEMMs, each with its pair or alone.
    auto pair_ns = [&](const TpOverlapPair& pr, double g) {
      const double c = double(pr.method == TpOverlap::kRing       ? ring
                              : pr.method == TpOverlap::kPipeline ? pipeline
                                                                  : bulk);
      double x = 0;
      if (pr.method == TpOverlap::kRing) x = std::max(g, c + g / t);
      if (pr.method == TpOverlap::kPipeline)
        x = std::max(g * margin + c / 4, g * margin / 4 + c);
      if (pr.method == TpOverlap::kBulk) x = std::max(g * margin, c);
      if (pr.method == TpOverlap::kAsync) x = std::max(c, g + share * c);
      return std::ceil(x - 1e-6);
    };
    for (const auto& [n, parts] : by_gemm) {
      const Node& gemm = cp.dag.nodes[n];
      double want = 0;
      if (parts.count(OverlapPart::kWhole)) {
        want = pair_ns(*parts.at(OverlapPart::kWhole), double(gemm_ns(gemm, gemm.tags.pass)));
      } else {
        for (auto [part, pass] : {std::pair{OverlapPart::kInputGrad, Pass::kBI},
                                  std::pair{OverlapPart::kWeightGrad, Pass::kBW}}) {
          const double g = double(gemm_ns(gemm, pass));
          want += parts.count(part) ? pair_ns(*parts.at(part), g) : g;
        }
      }
      EXPECT_NEAR(double(p.tasks[task_of.at(n)].work), want, 8.0)
          << cp.dag.node_name(n, cp.model);
    }
    // Per layer and microbatch (2 layers, 4 microbatches, of which the compiler stamps 2 from
    // a template, one B per op): QKV and MLP up
    // forward, output projection and MLP down input gradients (ring); output projection and
    // MLP down forward (pipeline); QKV and MLP up re-gather and reduce-scatter (bulk).
    EXPECT_EQ(pairs[TpOverlap::kRing], 4 * 2 * 4);
    EXPECT_EQ(pairs[TpOverlap::kPipeline], 2 * 2 * 4);
    EXPECT_EQ(pairs[TpOverlap::kBulk], 4 * 2 * 4);
    // The output layer is not a TE module: its input gradient's reduce-scatter is Megatron's
    // asynchronous one, beside its weight gradient (one per microbatch).
    EXPECT_EQ(pairs[TpOverlap::kAsync], 4);
    EXPECT_GT(cp.microbatches_stamped, 0);
  }
}

// One transformer layer on TP 2 with sequence parallelism, one microbatch, the fixed cost
// model: the region pass F = 14 f and B = 14 b over its 14 ops (each op f, b; BI = BW = b/2),
// every communication c (a chunk too). Nothing interferes, so the step is a sum along the one
// compute chain plus the communication it waits for (c < b, c < f):
//  - without overlap, and 2021 Megatron-LM's synchronous input-gradient all-reduce
//    (async_tp_grad_reduce false): forward 14 f + 9 c (embedding reduce-scatter, QKV and MLP-up
//    all-gathers, out-projection and MLP-down reduce-scatters, the head's all-gather, three
//    loss all-reduces); backward 14 b + 6 c (the head's and each column GEMM's reduce-scatter
//    after B, each row op's all-gather before it; the re-gathers hide behind B);
//  - without overlap, asynchronous (the default): the three column GEMMs' reduce-scatters run
//    beside their weight gradients, max(c, b/2 + 0·c) = b/2 (the fixed model has no SM
//    interference): backward 14 b + 3 c;
//  - with overlap: the QKV and MLP-up forwards take ring(f) = max(f, c + f/2), the
//    out-projection and MLP-down forwards pipe(f) = max(f' + c, f'/4 + 4c) with f' = f·132/116;
//    their backwards ring(b/2) + b/2 (row) and bulk(b/2) + bulk(b/2) (column, bulk(x) =
//    max(x·132/116, c)); what stays exposed: the embedding's (not a TE layer; the head's
//    reduce-scatter is the asynchronous one).
TEST(TpOverlap, OneLayerStepMatchesTheHandComputationUnderTheFixedModel) {
  const int64_t f = 116'000, b = 232'000, c = 30'000;  // ns
  const json fixed = {{"kind", "fixed"}, {"F", 14 * f}, {"B", 14 * b}, {"comm", c}, {"unit", "ns"}};
  auto step = [&](bool on, bool async = true) {
    json plan = tiny_plan(overlap_layout(2, on), fixed, 1);
    plan["model"]["pp_regions"] = 1;
    plan["model"]["async_tp_grad_reduce"] = async;
    plan["schedule"]["microbatches"] = 1;
    auto s = Session::from_text(plan.dump(), "fixed.json");
    EXPECT_TRUE(s) << render_all(s.error());
    auto r = s->simulate();
    EXPECT_TRUE(r) << render_all(r.error());
    return r->step_time;
  };
  auto ceil_ns = [](double x) { return static_cast<int64_t>(std::ceil(x - 1e-6)); };
  const double m = 132.0 / 116.0;
  const int64_t ring_f = std::max(f, c + f / 2);
  const int64_t pipe_f = ceil_ns(std::max(f * m + c, f * m / 4 + 4 * c));
  const int64_t ring_b = std::max(b / 2, c + b / 4) + b / 2;
  const int64_t bulk_b = 2 * ceil_ns(std::max(b / 2 * m, double(c)));
  const int64_t sync = 14 * f + 9 * c + 14 * b + 6 * c;
  const int64_t off = 14 * f + 9 * c + 14 * b + 3 * c;
  const int64_t on = 10 * f + 2 * ring_f + 2 * pipe_f + 5 * c + 10 * b + 2 * ring_b + 2 * bulk_b +
                     c;
  EXPECT_EQ(step(false, false), sync);
  EXPECT_EQ(step(false), off);
  EXPECT_EQ(step(true), on);
}

TEST(TpOverlap, ExposedTensorParallelCommunicationDrops) {
  auto exposed = [&](bool on) {
    auto s = Session::from_text(tiny_plan(overlap_layout(8, on), analytic()).dump(), "ovl.json");
    EXPECT_TRUE(s) << render_all(s.error());
    auto r = s->simulate();
    EXPECT_TRUE(r) << render_all(r.error());
    return pipeline_metrics(s->compiled(), *r).exposed_collectives_ms_per_device;
  };
  const double off = exposed(false), on = exposed(true);
  EXPECT_GT(off, 0);
  EXPECT_LT(on, 0.5 * off) << off << " ms without the overlap, " << on << " with";
}

// Megatron-LM's asynchronous input-gradient all-reduce (model async_tp_grad_reduce, on by
// default; not tp_comm_overlap): on TP 4 with and without sequence parallelism, every
// column-parallel linear's B node (QKV, MLP up, the output layer) is paired with its input
// gradient's all-reduce (reduce-scatter with SP), which starts with the B node (its
// predecessors, not after it) and costs NCCL's collective; the B node takes its input-gradient
// GEMM plus max(C, BW + s·C), s the analytic model's comm_sm_share, written out here. The step
// and the exposed collectives drop against the 2021 behaviour (the collective after B).
TEST(TpOverlap, AsyncInputGradientReduceRunsBesideTheWeightGradient) {
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sequence parallel" : "no sequence parallelism");
    json layout = {{"tp", 4}, {"sequence_parallel", sp}};
    auto run = [&](bool async) {
      json plan = tiny_plan(layout, analytic());
      plan["model"]["async_tp_grad_reduce"] = async;
      auto s = Session::from_text(plan.dump(), "async.json");
      EXPECT_TRUE(s) << render_all(s.error());
      return s;
    };
    auto s = run(true);
    ASSERT_TRUE(s);
    const CompiledPlan& cp = s->compiled();
    const Program p = build_program(cp, s->cost_model());
    std::map<uint32_t, uint32_t> task_of;
    for (uint32_t i = 0; i < p.tasks.size(); ++i) task_of.try_emplace(p.tasks[i].node, i);
    CostQueries queries(cp);
    auto gemm_ns = [&](const Node& nd, Pass pass) {
      Node x = nd;
      x.tags.pass = pass;
      return double(s->cost_model().compute(queries.compute(x)).ns);
    };
    const double share = s->cost_model().interference().comm_sm_share;
    ASSERT_GT(share, 0);
    const int64_t B = int64_t{1024} * 2 * 1024 * 2;  // b·s·h in bf16
    const int64_t rs_by_hand = us(kRingBaseUs + 3 * kNvlinkHopUs) + wire_ns(double(B) * 3 / 4);
    std::map<compiler::OpKind, int> pairs;
    for (const TpOverlapPair& pr : cp.dag.tp_overlaps) {
      ASSERT_EQ(pr.method, TpOverlap::kAsync);
      ASSERT_EQ(pr.part, OverlapPart::kWeightGrad);
      const Node& gemm = cp.dag.nodes[pr.compute];
      const Node& comm = cp.dag.nodes[pr.comm];
      ++pairs[cp.model.ops[gemm.op].kind];
      EXPECT_EQ(gemm.tags.pass, Pass::kB);
      EXPECT_EQ(comm.comm, sp ? compiler::CommKind::kReduceScatter : compiler::CommKind::kAllReduce);
      EXPECT_EQ(comm.bytes, B);
      // It starts with the B node: not after it.
      for (uint32_t k = cp.dag.pred_begin[pr.comm]; k < cp.dag.pred_begin[pr.comm + 1]; ++k)
        EXPECT_NE(cp.dag.edges[cp.dag.pred[k]].from, pr.compute);
      const Task& ct = p.tasks[task_of.at(pr.comm)];
      EXPECT_TRUE(ct.overlapped);
      const CommSpec& cs = p.comms[ct.comm];
      const double c = double(cs.latency_ns + cost::transfer_ns(ct.work, cs.rate_cap));
      EXPECT_EQ(int64_t(c), s->cost_model().comm(queries.comm(comm)).time_ns);
      if (sp) {
        EXPECT_NEAR(c, double(rs_by_hand), 8.0);
      }
      const double want = gemm_ns(gemm, Pass::kBI) +
                          std::ceil(std::max(c, gemm_ns(gemm, Pass::kBW) + share * c) - 1e-6);
      EXPECT_NEAR(double(p.tasks[task_of.at(pr.compute)].work), want, 2.0)
          << cp.dag.node_name(pr.compute, cp.model);
    }
    // 2 layers x 4 microbatches of QKV and MLP up; the output layer once per microbatch.
    EXPECT_EQ(pairs[compiler::OpKind::kQKV], 2 * 4);
    EXPECT_EQ(pairs[compiler::OpKind::kMlpUp], 2 * 4);
    EXPECT_EQ(pairs[compiler::OpKind::kHead], 4);
    EXPECT_EQ(pairs.size(), 3u);
    auto sync = run(false);
    ASSERT_TRUE(sync);
    EXPECT_TRUE(sync->compiled().dag.tp_overlaps.empty());
    auto r = s->simulate();
    auto rs = sync->simulate();
    ASSERT_TRUE(r && rs);
    EXPECT_LT(r->step_time, rs->step_time);
    EXPECT_LT(pipeline_metrics(cp, *r).exposed_collectives_ms_per_device,
              pipeline_metrics(sync->compiled(), *rs).exposed_collectives_ms_per_device);
  }
}

// On a device whose host thread runs the compute (a CPU process: Interference::host_compute),
// every task waits for the thread's previous compute op; the asynchronous all-reduce is
// launched inside its B node, so it waits for the op before it, not for the B node (whose
// price already holds it). With comm_sm_share 1 (a CPU's) nothing hides and the step is the
// synchronous order's to the nanosecond; after the B node it would run a second time on the
// TP stream and end the step late.
TEST(TpOverlap, AsyncReduceOnAHostComputeDeviceIsNeverSlowerThanTheSynchronousOrder) {
  std::ifstream in(std::string(STRETTO_EXAMPLES) + "/cpu_gpt_tp2.json");
  const json base = json::parse(in);
  auto run = [&](bool async) {
    json plan = base;
    plan["model"]["async_tp_grad_reduce"] = async;
    auto s = Session::from_text(plan.dump(), "cpu_async.json");
    EXPECT_TRUE(s) << render_all(s.error());
    return s;
  };
  auto s = run(true);
  auto sync = run(false);
  ASSERT_TRUE(s && sync);
  ASSERT_TRUE(s->cost_model().interference().host_compute);
  ASSERT_EQ(s->cost_model().interference().comm_sm_share, 1.0);
  const CompiledPlan& cp = s->compiled();
  ASSERT_FALSE(cp.dag.tp_overlaps.empty());
  const Program p = build_program(cp, s->cost_model());
  std::map<uint32_t, std::vector<uint32_t>> tasks_of;
  for (uint32_t i = 0; i < p.tasks.size(); ++i) tasks_of[p.tasks[i].node].push_back(i);
  size_t checked = 0;
  for (const TpOverlapPair& pr : cp.dag.tp_overlaps) {
    ASSERT_EQ(pr.method, TpOverlap::kAsync);
    for (uint32_t ct : tasks_of.at(pr.comm)) {
      const uint32_t end = ct + 1 < p.tasks.size() ? p.tasks[ct + 1].dep_begin
                                                   : static_cast<uint32_t>(p.deps.size());
      for (uint32_t k = p.tasks[ct].dep_begin; k < end; ++k)
        EXPECT_NE(p.tasks[p.deps[k]].node, pr.compute) << cp.dag.node_name(pr.comm, cp.model);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 9u * 4);  // (4 layers x 2 + the head) x 4 microbatches, one task each
  auto r = s->simulate();
  auto rs = sync->simulate();
  ASSERT_TRUE(r && rs);
  EXPECT_EQ(r->step_time, rs->step_time);
}

using testing::Refusal;

TEST(TpOverlap, RefusedWhereMegatronAndTransformerEngineRefuseIt) {
  json no_sp = tiny_plan({{"tp", 2}, {"tp_comm_overlap", true}}, analytic());
  json no_tp = tiny_plan({{"tp", 1}, {"sequence_parallel", true}, {"tp_comm_overlap", true}},
                         analytic());
  json across = tiny_plan(overlap_layout(8), analytic(), 2, 4);
  across["cluster"]["nodes"] = 2;
  json directive = tiny_plan(json::object(), analytic(), 1);
  directive["model"]["pp_regions"] = 1;
  directive["schedule"] = {{"builder", "gpipe"},
                           {"microbatches", 1},
                           {"base",
                            {{{"op", "place"}, {"filter", {{"PP", 0}}}, {"devices", {0}}},
                             {{"op", "shard_tensor"},
                              {"filter", json::object()},
                              {"devices", {{0, 1}}},
                              {"tp_comm_overlap", true}}}}};
  const Refusal cases[] = {
      {"layout without sequence parallelism", no_sp, "/schedule/layout/tp_comm_overlap",
       "needs 'sequence_parallel'"},
      {"layout without TP", no_tp, "/schedule/layout/tp_comm_overlap", "tp = 1"},
      {"TP group across nodes", across, "", "across nodes"},
      {"shard_tensor without sequence parallelism", directive,
       "/schedule/base/1/tp_comm_overlap", "needs 'sequence_parallel'"},
  };
  testing::expect_refused(cases);
}

}  // namespace
}  // namespace stretto::sim
