// The sizes docs/performance.md quotes for the benchmarks' plans (bench/plans.h): nodes, edges,
// tasks and events, exact. Unlike the benchmarks' times they do not depend on the machine, so a
// change of the compiler or the engine that moves them updates the doc in the same commit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "../../bench/plans.h"
#include "stretto/compiler/compiler.h"
#include "stretto/plan/json_source.h"
#include "stretto/plan/plan.h"
#include "stretto/sim/session.h"

using namespace stretto;

namespace {

struct Sizes {
  size_t nodes = 0, edges = 0, temporal_edges = 0, tasks = 0;
  uint64_t events = 0;
};

// bench_simulate's BM_CompileSimulateFolded: the reference plan (PP16, DualPipeV, MoE with EP
// over DP, ZeRO-1) with 4 MoE layers per stage and 256 microbatches at DP `dp`, compiled as a
// sweep compiles it and simulated folded, without memory curves.
Sizes compile_simulate_folded(int dp) {
  Sizes out;
  auto src = plan::JsonSource::parse(bench::reference_plan(16, dp, 256, 4).dump(), "bench.json");
  EXPECT_TRUE(src);
  if (!src) return out;
  auto p = plan::parse_plan(*src);
  EXPECT_TRUE(p) << render_all(p.error());
  if (!p) return out;
  compiler::CompileOptions copt;
  copt.class_programs = false;
  auto s = sim::Session::from_plan(std::move(*p), ".", copt);
  EXPECT_TRUE(s) << render_all(s.error());
  if (!s) return out;
  sim::SimOptions opt;
  opt.fold_replicas = true;
  opt.memory_curves = false;
  auto r = s->simulate(opt);
  EXPECT_TRUE(r) << render_all(r.error());
  if (!r) return out;
  EXPECT_TRUE(r->folded);
  const auto& edges = s->compiled().dag.edges;
  out.nodes = s->compiled().dag.nodes.size();
  out.edges = edges.size();
  out.temporal_edges = static_cast<size_t>(std::count_if(
      edges.begin(), edges.end(),
      [](const compiler::Edge& e) { return e.kind == compiler::EdgeKind::kTemporal; }));
  out.tasks = r->program.tasks.size();
  out.events = r->events;
  std::printf("DP%d: %zu nodes, %zu edges (%zu temporal), %zu tasks, %llu events\n", dp,
              out.nodes, out.edges, out.temporal_edges, out.tasks,
              static_cast<unsigned long long>(out.events));
  return out;
}

}  // namespace

// bench_compile's 1,024-device plan: PP16 x DP64, 8 MoE layers per stage with EP over the DP
// group, 256 microbatches, explicit 1F1B orders.
TEST(BenchPlans, CompilePlanHasTheQuotedSize) {
  auto src = plan::JsonSource::parse(bench::moe_plan(16, 64, 8, 256, false).dump(), "bench.json");
  ASSERT_TRUE(src);
  auto p = plan::parse_plan(*src);
  ASSERT_TRUE(p) << render_all(p.error());
  auto cp = compiler::compile(*p, &*src);
  ASSERT_TRUE(cp) << render_all(cp.error());
  std::printf("%zu nodes, %zu edges\n", cp->dag.nodes.size(), cp->dag.edges.size());
  EXPECT_EQ(cp->dag.nodes.size(), 804'737u);
  EXPECT_EQ(cp->dag.edges.size(), 1'534'688u);
}

// One node per op and microbatch for all replicas, folded to one device per class: the same
// sizes at DP4 (64 devices) and DP64 (1,024).
TEST(BenchPlans, CompileSimulateFoldedIsTheSameSizeAtEveryDp) {
  for (int dp : {4, 64}) {
    SCOPED_TRACE(dp);
    const Sizes s = compile_simulate_folded(dp);
    EXPECT_EQ(s.nodes, 824'433u);
    EXPECT_EQ(s.edges, 1'604'646u);
    EXPECT_EQ(s.temporal_edges, 67'639u);
    EXPECT_EQ(s.tasks, 824'433u);
    EXPECT_EQ(s.events, 971'700u);
  }
}
