// The step metrics mean what their names say (docs/semantics.md, "The numbers"): the pipeline
// bubble counts only pipeline idle time, exposed TP/EP/DP collectives are their own field, MFU
// is against the peak of the GEMMs' dtype, and MoE MFU counts a balanced router's FLOPs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <string>

#include "../../bench/plans.h"
#include "stretto/sim/metrics_json.h"
#include "stretto/sim/session.h"

namespace stretto::sim {
namespace {

using nlohmann::json;

json transformer(int layers) {
  return {{"family", "transformer"}, {"layers", layers},      {"hidden", 1024},
          {"heads", 16},             {"ffn_hidden", 4096},    {"vocab", 32768},
          {"seq_len", 1024},         {"microbatch_size", 1}};
}
json fixed(double comm_ms) {
  return {{"kind", "fixed"}, {"F", 1}, {"B", 2}, {"comm", comm_ms}, {"unit", "ms"}};
}
json plan(json model, json costmodel, json layout, int devices, int microbatches = 1) {
  return {{"model", std::move(model)},
          {"cluster", {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", devices}}},
          {"costmodel", std::move(costmodel)},
          {"schedule",
           {{"builder", "1f1b"}, {"microbatches", microbatches}, {"layout", std::move(layout)}}}};
}

struct Simulated {
  Result r;
  PipelineMetrics pm;
  json j;
};
Simulated run(const json& p) {
  auto s = Session::from_text(p.dump(), "metrics.json");
  if (!s) {
    ADD_FAILURE() << render_all(s.error());
    return {};
  }
  auto r = s->simulate();
  if (!r) {
    ADD_FAILURE() << render_all(r.error());
    return {};
  }
  Simulated out{std::move(*r), {}, {}};
  out.pm = pipeline_metrics(s->compiled(), out.r);
  out.j = metrics_json(s->compiled(), out.r, out.pm);
  return out;
}

TEST(PipelineBubble, ExposedTensorParallelCollectivesAreNotPipelineIdle) {
  // One stage (no pipeline), TP 2, fixed costs: the forward's ops share F = 1 ms, the
  // backward's B = 2 ms, every collective takes 1 ms and runs alone (its inputs come from the
  // compute before it, its output feeds the compute after it). One layer without sequence
  // parallelism has six TP all-reduces per microbatch: forward after the embedding, the
  // attention output projection and the MLP down projection; backward before the QKV, the MLP
  // up projection and the head's input gradients; and the vocab-parallel loss's three (max,
  // target logit, sum of exponentials) between the loss's forward and its backward. Each device
  // computes 3 ms and waits 9 ms for its collectives inside its compute span: no pipeline
  // bubble (the old definition called 9 / 12 of the span "pipeline bubble").
  // The synchronous order (async_tp_grad_reduce false): the hand count above has the backward's
  // TP all-reduces after their B nodes; the asynchronous order has its own tests (tp_overlap).
  json model = transformer(1);
  model["async_tp_grad_reduce"] = false;
  const Simulated x = run(plan(model, fixed(1), {{"tp", 2}}, 2));
  EXPECT_DOUBLE_EQ(x.j["step_time_ms"].get<double>(), 12.0);
  EXPECT_DOUBLE_EQ(x.j["pipeline_bubble_ratio"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(x.j["exposed_collectives_ms_per_device"].get<double>(), 9.0);
  EXPECT_DOUBLE_EQ(x.j["exposed_comm_ms_per_device"].get<double>(), 9.0);
  for (const auto& d : x.j["devices"]) {
    EXPECT_DOUBLE_EQ(d["pipeline_bubble_ms"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(d["exposed_collectives_ms"].get<double>(), 9.0);
  }
}

TEST(PipelineBubble, PipelineIdleStaysAndSendRecvIsPartOfIt) {
  // Two stages, TP 2, 1F1B with m = 4, fixed costs, 1 ms per communication. Each device's span
  // = its compute + its exposed TP collectives + its pipeline bubble, exactly; the pipeline
  // bubble is positive (warm-up and cool-down of stage 0 inside its span, send/recv waits) and
  // the exposed TP collectives are not in it.
  json m = transformer(2);
  m["pp_regions"] = 2;
  const Simulated x = run(plan(m, fixed(1), {{"tp", 2}, {"pp", 2}}, 4, 4));
  ASSERT_EQ(x.pm.devices.size(), 4u);
  double bubble = 0;
  for (size_t d = 0; d < x.pm.devices.size(); ++d) {
    const DevicePipeline& dp = x.pm.devices[d];
    ASSERT_TRUE(dp.computes);
    EXPECT_EQ(dp.last_end - dp.first_start,
              dp.compute + dp.exposed_collectives_in_span + dp.idle());
    EXPECT_GT(dp.exposed_collectives_in_span, 0);
    EXPECT_GE(dp.idle(), 0);
    bubble += static_cast<double>(dp.idle());
  }
  EXPECT_GT(bubble, 0);
}

// Each device's compute in the pipeline metrics is that of the tasks it takes part in: its
// busy time is the engine's (the union of its compute intervals), its span runs from its first
// compute task's start to its last one's end (found here from the tasks' participants). On the
// DualPipeV reference at PP4 x DP2, whose ranks compute different amounts.
TEST(PipelineBubble, EachDevicesComputeIsThatOfItsOwnTasks) {
  auto s = Session::from_text(bench::reference_plan(4, 2, 16).dump(), "ref.json");
  ASSERT_TRUE(s) << render_all(s.error());
  auto r = s->simulate();
  ASSERT_TRUE(r) << render_all(r.error());
  const PipelineMetrics pm = pipeline_metrics(s->compiled(), *r);
  const engine::Program& p = r->program;
  ASSERT_EQ(pm.devices.size(), 8u);
  std::vector<engine::SimTime> first(8, INT64_MAX), last(8, 0);
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    const engine::Task& k = p.tasks[t];
    if (k.kind != engine::TaskKind::kCompute) continue;
    const uint32_t d = p.participants[k.part_begin].device;
    first[d] = std::min(first[d], r->timing[t].start);
    last[d] = std::max(last[d], r->timing[t].end);
  }
  for (size_t d = 0; d < 8; ++d) {
    const DevicePipeline& dp = pm.devices[d];
    EXPECT_TRUE(dp.computes) << d;
    EXPECT_EQ(dp.compute, r->devices[d].busy) << d;
    EXPECT_EQ(dp.first_start, first[d]) << d;
    EXPECT_EQ(dp.last_end, last[d]) << d;
  }
  EXPECT_NE(pm.devices[0].compute, pm.devices[2].compute);
}

// The pipeline metrics measured on several threads (the GUI's worker uses 2) equal those of
// one thread, device by device, folded or not; every device that runs a compute op is
// measured (so that a device left out of every thread's range fails too).
TEST(PipelineBubble, TheSameMetricsOnAnyNumberOfThreads) {
  auto s = Session::from_text(bench::moe_plan(2, 4, 2, 8, true).dump(), "moe.json");
  ASSERT_TRUE(s) << render_all(s.error());
  for (const bool fold : {false, true}) {
    SimOptions opt;
    opt.fold_replicas = fold;
    auto r = s->simulate(opt);
    ASSERT_TRUE(r);
    const PipelineMetrics one = pipeline_metrics(s->compiled(), *r);
    ASSERT_EQ(one.devices.size(), 8u);
    for (size_t d = 0; d < one.devices.size(); ++d) {
      EXPECT_TRUE(one.devices[d].computes) << d;
      EXPECT_GT(one.devices[d].compute, 0) << d;
      EXPECT_GT(one.devices[d].exposed_collectives, 0) << d;
    }
    for (const int threads : {2, 3, 13}) {
      SCOPED_TRACE(std::to_string(threads) + (fold ? " folded" : ""));
      const PipelineMetrics many = pipeline_metrics(s->compiled(), *r, threads);
      EXPECT_EQ(many.pipeline_bubble_ratio, one.pipeline_bubble_ratio);
      EXPECT_EQ(many.exposed_comm_ms_per_device, one.exposed_comm_ms_per_device);
      EXPECT_EQ(many.exposed_collectives_ms_per_device, one.exposed_collectives_ms_per_device);
      EXPECT_EQ(many.largest_bubble_device, one.largest_bubble_device);
      ASSERT_EQ(many.devices.size(), one.devices.size());
      for (size_t d = 0; d < one.devices.size(); ++d) {
        const DevicePipeline &a = one.devices[d], &b = many.devices[d];
        EXPECT_EQ(a.computes, b.computes) << d;
        EXPECT_EQ(a.first_start, b.first_start) << d;
        EXPECT_EQ(a.last_end, b.last_end) << d;
        EXPECT_EQ(a.compute, b.compute) << d;
        EXPECT_EQ(a.exposed_collectives, b.exposed_collectives) << d;
        EXPECT_EQ(a.exposed_collectives_in_span, b.exposed_collectives_in_span) << d;
      }
    }
  }
}

TEST(Mfu, AgainstThePeakOfTheGemmDtype) {
  // Fixed costs: the fp8 and bf16 plans take the same time and count the same model FLOPs;
  // fp8 GEMMs peak at twice the bf16 rate (H100: 1979 against 989 dense TFLOP/s), so the fp8
  // plan's MFU is half the bf16 plan's.
  json bf16 = transformer(1), fp8 = transformer(1);
  fp8["dtype"] = "fp8";
  const Simulated a = run(plan(bf16, fixed(0), json::object(), 1));
  const Simulated b = run(plan(fp8, fixed(0), json::object(), 1));
  ASSERT_EQ(a.r.step_time, b.r.step_time);
  ASSERT_DOUBLE_EQ(a.r.model_flops, b.r.model_flops);
  EXPECT_DOUBLE_EQ(b.r.mfu, a.r.mfu / 2);
  EXPECT_DOUBLE_EQ(a.r.mfu, a.r.model_flops / (static_cast<double>(a.r.step_time) * 1e-9 *
                                               989.4e12));
}

TEST(Mfu, MoeCountsABalancedRoutersFlops) {
  // Two experts' worth of imbalance (the busiest expert gets twice the mean) or a capacity
  // factor of 2 make the grouped GEMMs and the all-to-alls longer, not the model bigger: the
  // model FLOPs equal the balanced router's (top_k experts per token) and MFU falls.
  auto moe_plan = [](json routing) {
    json m = transformer(2);
    m["moe"] = {{"experts", 8}, {"top_k", 2}, {"expert_ffn_hidden", 1024}};
    for (auto& [k, v] : routing.items()) m["moe"][k] = v;
    return plan(m, {{"kind", "analytic"}}, {{"dp", 2}, {"ep", 2}}, 2);
  };
  const Simulated balanced = run(moe_plan(json::object()));
  for (const json& routing : {json{{"imbalance", 2}}, json{{"capacity_factor", 2}}}) {
    SCOPED_TRACE(routing.dump());
    const Simulated skewed = run(moe_plan(routing));
    EXPECT_NEAR(skewed.r.model_flops / balanced.r.model_flops, 1.0, 1e-12);
    EXPECT_GT(skewed.r.step_time, balanced.r.step_time);
    EXPECT_LT(skewed.r.mfu, balanced.r.mfu);
  }
}

}  // namespace
}  // namespace stretto::sim
