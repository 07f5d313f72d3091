// Simulation of compiled plans end to end: closed forms under fixed costs, memory model,
// determinism, replica folding, re-simulation after edits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <span>

#include "plans.h"
#include "stretto/engine/engine.h"

using namespace stretto;
using namespace stretto::plan;
using namespace stretto::compiler;
using namespace stretto::testing;

namespace {
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kAct = 1 << 20;

constexpr const char* kExamples[] = {"gpt_pp4_dp2_1f1b", "piper_qwen3_moe_pp2_dp2_ep2",
                                     "piper_qwen3_moe_zero3", "megatron_gpt13b_tp8_pp2_dp2"};

// An example plan's session and simulation (empty, with a test failure, when either fails).
struct ExampleRun {
  std::optional<sim::Session> s;
  std::optional<sim::Result> r;
};
ExampleRun simulate_example(const char* name) {
  ExampleRun x;
  auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/" + name + ".json");
  EXPECT_TRUE(s) << name << (s ? "" : render_all(s.error()));
  if (!s) return x;
  auto r = s->simulate();
  EXPECT_TRUE(r) << name << (r ? "" : render_all(r.error()));
  if (!r) return x;
  x.s.emplace(std::move(*s));
  x.r.emplace(std::move(*r));
  return x;
}

sim::Result run(const json& plan, sim::SimOptions opt = {}) {
  auto s = session_of(plan);
  EXPECT_TRUE(s) << (s ? "" : render_all(s.error()));
  if (!s) return {};
  auto r = s->simulate(opt);
  EXPECT_TRUE(r) << (r ? "" : render_all(r.error()));
  return r ? std::move(*r) : sim::Result{};
}
}  // namespace

TEST(Simulate, OneFOneBAndGPipeClosedForms) {
  // (m + p - 1)(F + B) with F = 1 ms, B = 2 ms; bubble ratio (p-1)/(m+p-1).
  for (int p : {2, 3, 4, 6}) {
    for (int m : {p, 2 * p, 8}) {
      auto r1 = run(pipeline_plan(p, m, kAct, [&](int r) { return order_1f1b(p, m, r); }));
      EXPECT_EQ(r1.step_time, (m + p - 1) * 3 * kMs) << "1f1b p=" << p << " m=" << m;
      EXPECT_NEAR(r1.bubble_ratio, double(p - 1) / (m + p - 1), 1e-12);
      auto rg = run(pipeline_plan(p, m, kAct, [&](int r) { return order_gpipe(m, r); }));
      EXPECT_EQ(rg.step_time, (m + p - 1) * 3 * kMs) << "gpipe p=" << p << " m=" << m;
    }
  }
}

// The critical path is a chain of real op timings from the step's start to its end, and its
// breakdown adds up to the step time; under fixed costs (no dispatch, free communication) the
// 1F1B path is all compute.
TEST(Simulate, CriticalPathIsAChainToTheStepEnd) {
  auto check = [](const std::string& what, const CompiledPlan& cp,
                  const sim::Result& r) -> sim::CriticalPathBreakdown {
    const auto path = sim::critical_path(cp, r);
    if (path.empty()) {
      ADD_FAILURE() << what << ": empty critical path";
      return {};
    }
    EXPECT_EQ(path.back().end, r.step_time) << what;
    EXPECT_GE(path.front().start, 0) << what;
    for (size_t i = 0; i < path.size(); ++i) {
      const auto& st = path[i];
      EXPECT_EQ(st.start, r.timing[st.task].start) << what << " step " << i;
      EXPECT_EQ(st.end, r.timing[st.task].end) << what << " step " << i;
      EXPECT_EQ(st.kind, r.program.tasks[st.task].kind) << what << " step " << i;
      EXPECT_FALSE(st.waited_for.empty()) << what << " step " << i;
      if (i > 0) {
        EXPECT_GE(st.start, path[i - 1].end) << what << " step " << i;
      }
    }
    const auto b = sim::breakdown(path);
    EXPECT_EQ(b.compute + b.comm + b.wait, r.step_time) << what;
    EXPECT_GT(b.compute, 0) << what;
    return b;
  };
  for (const char* e : kExamples) {
    const auto [s, r] = simulate_example(e);
    ASSERT_TRUE(s && r) << e;
    check(e, s->compiled(), *r);
  }
  const int p = 4, m = 8;
  auto s = session_of(pipeline_plan(p, m, kAct, [&](int r) { return order_1f1b(p, m, r); }));
  ASSERT_TRUE(s);
  auto r = s->simulate();
  ASSERT_TRUE(r);
  const auto b = check("1f1b fixed", s->compiled(), *r);
  EXPECT_EQ(b.compute, (m + p - 1) * 3 * kMs);
  EXPECT_EQ(b.comm + b.wait, 0);
}

TEST(Simulate, ActivationPeaksGPipeHoldsMOneFOneBHoldsP) {
  const int p = 4, m = 8;
  auto rg = run(pipeline_plan(p, m, kAct, [&](int r) { return order_gpipe(m, r); }));
  auto r1 = run(pipeline_plan(p, m, kAct, [&](int r) { return order_1f1b(p, m, r); }));
  ASSERT_EQ(rg.devices.size(), 4u);
  EXPECT_EQ(rg.devices[0].peak_memory, m * kAct);
  EXPECT_EQ(rg.devices[0].breakdown[3], m * kAct);
  for (int r = 0; r < p; ++r) EXPECT_EQ(r1.devices[r].peak_memory, (p - r) * kAct) << r;
}

TEST(Simulate, SplitBackwardHoldsWeightGradientPartUntilBW) {
  // One stage, one microbatch: F, BI, (gap while another op runs), BW. The synthetic region
  // keeps half of its activations for BW.
  json plan = pipeline_plan(1, 2, kAct, [&](int) {
    return json{{"op", "order"},
                {"filters",
                 {{fp(0, 0, "F")},
                  {fp(0, 1, "F")},
                  {fp(0, 0, "BI")},
                  {fp(0, 1, "BI")},
                  {fp(0, 0, "BW")},
                  {fp(0, 1, "BW")}}}};
  });
  auto r = run(plan);
  // timeline (ms): F0 0-1, F1 1-2, BI0 2-3, BI1 3-4, BW0 4-5, BW1 5-6
  EXPECT_EQ(r.step_time, 6 * kMs);
  auto at = [&](int64_t t) {
    int64_t v = 0;
    for (const auto& s : r.devices[0].memory)
      if (s.t <= t) v = s.total;
    return v;
  };
  EXPECT_EQ(at(2 * kMs), 2 * kAct);
  EXPECT_EQ(at(3 * kMs), kAct + kAct / 2);  // BI0 freed the BI-only half of MB0
  EXPECT_EQ(at(4 * kMs), kAct);             // both BW halves still held
  EXPECT_EQ(at(5 * kMs), kAct / 2);         // BW0 freed MB0's remainder
  EXPECT_EQ(at(6 * kMs), 0);
  EXPECT_EQ(r.devices[0].peak_memory, 2 * kAct);
}

TEST(Simulate, DeterministicAndFoldingExact) {
  auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json");
  ASSERT_TRUE(s) << render_all(s.error());
  auto a = s->simulate();
  auto b = s->simulate();
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->timing.size(), b->timing.size());
  for (size_t i = 0; i < a->timing.size(); ++i) {
    EXPECT_EQ(a->timing[i].start, b->timing[i].start);
    EXPECT_EQ(a->timing[i].end, b->timing[i].end);
  }
  sim::SimOptions fold;
  fold.fold_replicas = true;
  auto f = s->simulate(fold);
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->folded);
  EXPECT_LT(f->program.tasks.size(), a->program.tasks.size());
  EXPECT_EQ(f->step_time, a->step_time);
  for (size_t d = 0; d < a->devices.size(); ++d) {
    EXPECT_EQ(f->devices[d].busy, a->devices[d].busy) << d;
    EXPECT_EQ(f->devices[d].peak_memory, a->devices[d].peak_memory) << d;
    EXPECT_EQ(f->devices[d].exposed_comm, a->devices[d].exposed_comm) << d;
  }
}

TEST(Simulate, ResimulateAfterEdits) {
  const int p = 2, m = 4;
  auto s = session_of(pipeline_plan(p, m, kAct, [&](int r) { return order_1f1b(p, m, r); }));
  ASSERT_TRUE(s);
  auto r1 = s->simulate();
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->step_time, (m + p - 1) * 3 * kMs);
  // Cost edit without recompiling: F = 2, B = 4 doubles the step.
  CostModelSpec cm = s->plan().costmodel;
  cm.f_ns *= 2, cm.b_ns *= 2, cm.bi_ns *= 2, cm.bw_ns *= 2;
  ASSERT_TRUE(s->set_costmodel(cm));
  EXPECT_EQ(s->simulate()->step_time, 2 * (m + p - 1) * 3 * kMs);
  // Directive edit: GPipe order on rank 0 keeps the makespan but raises rank 0's peak to m.
  auto src = JsonSource::from_json(json::array({order_gpipe(m, 0)}));
  auto ds = parse_directives(src, "");
  ASSERT_TRUE(ds);
  size_t idx = 0;
  for (size_t i = 0; i < s->plan().schedule.size(); ++i)
    if (s->plan().schedule[i].op == DirectiveOp::kOrder) {
      idx = i;
      break;
    }
  ASSERT_TRUE(s->set_directive(idx, (*ds)[0]));
  auto r3 = s->simulate();
  ASSERT_TRUE(r3);
  EXPECT_EQ(r3->devices[0].peak_memory, m * kAct);
  // A bad edit leaves the session unchanged.
  Directive bad = (*ds)[0];
  bad.groups[0][0].cond[0] = {TagCond::kEquals, 9};
  EXPECT_FALSE(s->set_directive(idx, bad));
  EXPECT_EQ(s->simulate()->devices[0].peak_memory, m * kAct);
}

// build_program leaves out the dependencies a stream FIFO implies: none on the task's own
// lane, at most one per lane of a compute/collective predecessor; and every DAG edge is still
// enforced, by a kept dependency or by the lane order (checked on the timings).
TEST(Simulate, ProgramKeepsOnlyDependenciesNoFifoImplies) {
  for (const char* e : kExamples) {
    const auto [s, r] = simulate_example(e);
    ASSERT_TRUE(s && r) << e;
    const engine::Program& p = r->program;
    const auto& dag = s->compiled().dag;
    auto lanes = [&](uint32_t t) {  // (device, stream) of a compute or collective task
      std::vector<std::pair<uint32_t, uint16_t>> v;
      const engine::Task& k = p.tasks[t];
      const NodeKind kind = dag.nodes[k.node].kind;
      if (kind != NodeKind::kCompute && kind != NodeKind::kCollective) return v;
      for (uint32_t i = 0; i < k.part_count; ++i)
        v.push_back(
            {p.participants[k.part_begin + i].device, p.participants[k.part_begin + i].stream});
      return v;
    };
    size_t deps = 0;
    for (uint32_t t = 0; t < p.tasks.size(); ++t) {
      const auto own = lanes(t);
      std::vector<std::pair<uint32_t, uint16_t>> seen;
      for (const uint32_t d : p.deps_of(t)) {
        ++deps;
        for (const auto& lane : lanes(d)) {
          if (std::find(own.begin(), own.end(), lane) != own.end())
            ADD_FAILURE() << e << ": task " << t << " depends on task " << d << " of its own lane";
        }
        const engine::Task& dk = p.tasks[d];
        if (dag.nodes[dk.node].kind == NodeKind::kCompute) {
          const auto l = lanes(d).front();
          EXPECT_EQ(std::count(seen.begin(), seen.end(), l), 0) << e << " task " << t;
          seen.push_back(l);
        }
      }
    }
    EXPECT_GT(deps, 0u) << e;
    // (c) A compute task shares no dependency with the compute task before it on its lane
    // (which ended first, after them) when that one has at most 4 (the builder remembers the
    // last 4 per lane).
    size_t checked = 0;
    std::map<std::pair<uint32_t, uint16_t>, uint32_t> last_on_lane;
    for (uint32_t dev = 0; dev < p.devices.size(); ++dev) {
      for (const uint32_t t : p.devices[dev].dispatch) {
        for (const auto& lane : lanes(t)) {
          if (lane.first != dev) continue;
          const auto it = last_on_lane.find(lane);
          if (it != last_on_lane.end() && p.tasks[t].kind == engine::TaskKind::kCompute &&
              p.tasks[it->second].kind == engine::TaskKind::kCompute &&
              p.deps_of(it->second).size() <= 4) {
            const auto before = p.deps_of(it->second);
            for (const uint32_t d : p.deps_of(t)) {
              ++checked;
              EXPECT_EQ(std::count(before.begin(), before.end(), d), 0)
                  << e << ": task " << t << " and task " << it->second
                  << " before it on its lane both depend on task " << d;
            }
          }
          last_on_lane[lane] = t;
        }
      }
    }
    EXPECT_GT(checked, 0u) << e;
    // Timings respect every DAG edge between instances on one device (the pruned ones too).
    std::vector<std::vector<uint32_t>> tasks_of_node(dag.nodes.size());
    for (uint32_t t = 0; t < p.tasks.size(); ++t) tasks_of_node[p.tasks[t].node].push_back(t);
    for (uint32_t t = 0; t < p.tasks.size(); ++t) {
      if (p.tasks[t].kind != engine::TaskKind::kCompute) continue;
      const int dev = r->device_of(t);
      const uint32_t n = p.tasks[t].node;
      for (uint32_t q = dag.pred_begin[n]; q < dag.pred_begin[n + 1]; ++q) {
        for (uint32_t pt : tasks_of_node[dag.edges[dag.pred[q]].from]) {
          if (p.tasks[pt].kind != engine::TaskKind::kCompute || r->device_of(pt) != dev) continue;
          EXPECT_LE(r->timing[pt].end, r->timing[t].start) << e << " task " << t;
        }
      }
    }
  }
}

TEST(Simulate, ReportsProgressByPhase) {
  auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json");
  ASSERT_TRUE(s);
  std::vector<std::pair<std::string, double>> calls;
  sim::SimOptions opt;
  opt.progress = [&](std::string_view phase, double f) { calls.emplace_back(phase, f); };
  ASSERT_TRUE(s->simulate(opt));
  ASSERT_GE(calls.size(), 4u);
  EXPECT_EQ(calls.front(), (std::pair<std::string, double>{"building", 0.0}));
  EXPECT_EQ(calls.back(), (std::pair<std::string, double>{"metrics", 0.0}));
  const auto& done = calls[calls.size() - 2];
  EXPECT_EQ(done, (std::pair<std::string, double>{"simulating", 1.0}));
  for (size_t i = 1; i + 1 < calls.size(); ++i) {
    EXPECT_EQ(calls[i].first, "simulating");
    EXPECT_GE(calls[i].second, calls[i - 1].first == "simulating" ? calls[i - 1].second : 0.0);
  }
}

TEST(Simulate, ExamplesGiveBelievablePredictions) {
  for (const char* e : kExamples) {
    const auto [s, r] = simulate_example(e);
    ASSERT_TRUE(s && r) << e;
    EXPECT_GT(r->step_time, 0) << e;
    EXPECT_GT(r->mfu, 0.05) << e;
    EXPECT_LT(r->mfu, 0.8) << e;
    EXPECT_GE(r->bubble_ratio, 0.0) << e;
    EXPECT_LT(r->bubble_ratio, 1.0) << e;
    for (const auto& d : r->devices) {
      EXPECT_LE(d.busy, r->step_time);
      EXPECT_GT(d.peak_memory, 0);
    }
  }
}

TEST(Simulate, ReportScriptPlansCompileAndSimulate) {
  // The plans scripts/fidelity_report.sh and scripts/gpu_check.sh replay live in bench/, where
  // no other test reads them; a contract change that breaks one shows here, not on the next
  // lent GPU.
  namespace fs = std::filesystem;
  const fs::path bench = fs::path(STRETTO_EXAMPLES).parent_path() / "bench";
  for (auto [dir, plans] : {std::pair{"fidelity/plans", 5}, {"gpu/plans", 5}}) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(bench / dir)) {
      if (e.path().extension() != ".json") continue;
      auto s = sim::Session::open(e.path().string());
      ASSERT_TRUE(s) << e.path() << (s ? "" : render_all(s.error()));
      auto r = s->simulate();
      ASSERT_TRUE(r) << e.path() << (r ? "" : render_all(r.error()));
      EXPECT_GT(r->step_time, 0) << e.path();
      ++n;
    }
    EXPECT_GE(n, plans) << dir;
  }
}

namespace {
// A small dense transformer on the `cpu` preset (one Gloo process per device): `devices`
// data-parallel replicas with ZeRO-3, or (pp2) two pipeline stages on devices {0,2} and {1,3}
// replicated twice with ZeRO-1. The fidelity report's plans (bench/fidelity/make_plans.py).
json cpu_plan(bool pp2, json options = json::object()) {
  json model = {{"family", "transformer"}, {"hidden", 256},  {"heads", 4},
                {"ffn_hidden", 1024},      {"vocab", 1024},  {"seq_len", 64},
                {"microbatch_size", 2},    {"dtype", "fp32"}, {"layers", 4}};
  json schedule;
  if (pp2) {
    model["pp_regions"] = 2;
    auto rep = [](int pp, int a, int b) {
      return json{{"op", "replicate"},  {"filter", {{"PP", pp}}},  {"devices", {a, b}},
                  {"bucket_size", 1.0}, {"shard_optimizer", true}};
    };
    auto place = [](int pp, int a, int b) {
      return json{{"op", "place"}, {"filter", {{"PP", pp}}}, {"devices", {a, b}}};
    };
    schedule = {{"builder", "1f1b"},
                {"microbatches", 4},
                {"base", {place(0, 0, 2), place(1, 1, 3), rep(0, 0, 2), rep(1, 1, 3)}}};
  } else {
    schedule = json::array(
        {{{"op", "place"}, {"filter", json::object()}, {"devices", {0, 1}}},
         {{"op", "replicate"}, {"filter", json::object()}, {"devices", {0, 1}}, {"bucket_size", 1.0},
          {"shard_params", true}, {"shard_grads", true}, {"shard_optimizer", true}},
         {{"op", "split"}, {"filter", json::object()}, {"dim_name", "MB"}, {"num_microbatches", 2}}});
  }
  options["kind"] = "analytic";
  return {{"model", model},
          {"cluster", {{"preset", "cpu"}, {"nodes", 1}, {"devices_per_node", pp2 ? 4 : 2}}},
          {"costmodel", options},
          {"optimizer", {{"kind", "sgd"}}},
          {"schedule", schedule}};
}

// Tasks of device d's dispatch list that started before the compute task before them in that
// list had ended (what a host thread that runs its compute cannot do).
int issued_past_running_compute(const sim::Result& r) {
  int n = 0;
  for (const auto& dp : r.program.devices) {
    int64_t compute_end = -1;
    for (uint32_t t : dp.dispatch) {
      if (r.timing[t].start < compute_end) ++n;
      if (r.program.tasks[t].kind == engine::TaskKind::kCompute)
        compute_end = std::max(compute_end, r.timing[t].end);
    }
  }
  return n;
}
}  // namespace

TEST(Simulate, HostComputeIssuesNothingPastARunningComputeOp) {
  // On the cpu preset compute runs on the issuing thread (host_compute defaults to true), so
  // no ZeRO-3 gather, send or collective starts before the compute op before it in its
  // device's program has ended. Queued compute (false, as on a GPU) prefetches the gathers
  // while compute runs, which makes the step shorter.
  const sim::Result host = run(cpu_plan(false));
  const sim::Result queued = run(cpu_plan(false, {{"host_compute", false}}));
  ASSERT_GT(host.step_time, 0);
  ASSERT_GT(queued.step_time, 0);
  EXPECT_EQ(issued_past_running_compute(host), 0);
  EXPECT_GT(issued_past_running_compute(queued), 0);
  EXPECT_GT(host.step_time, queued.step_time);
}

TEST(Simulate, HostOpTimeDelaysTheNextComputeOp) {
  // host_op_us: each op a CPU device issues costs its host thread that long before the
  // device's next compute op: a compute task's work grows by host_op_ns times (1 + the
  // communication tasks the device issued since its previous compute task).
  const sim::Result base = run(cpu_plan(false));
  const sim::Result slow = run(cpu_plan(false, {{"host_op_us", 100}}));
  ASSERT_EQ(base.program.tasks.size(), slow.program.tasks.size());
  int64_t expected_total = 0, total = 0;
  for (const auto& dp : slow.program.devices) {
    int64_t since = 0;
    for (uint32_t t : dp.dispatch) {
      const engine::Task& task = slow.program.tasks[t];
      if (task.kind == engine::TaskKind::kComm) ++since;
      if (task.kind != engine::TaskKind::kCompute) continue;
      const int64_t diff = task.work - base.program.tasks[t].work;
      EXPECT_EQ(diff, 100'000 * (1 + since)) << "task " << t;
      expected_total += 100'000 * (1 + since);
      total += diff;
      since = 0;
    }
  }
  EXPECT_GT(expected_total, 0);
  EXPECT_EQ(total, expected_total);
  EXPECT_GT(slow.step_time, base.step_time);
  // a GPU (host_compute false) ignores it
  const sim::Result queued = run(cpu_plan(false, {{"host_compute", false}}));
  const sim::Result queued_op = run(cpu_plan(false, {{"host_compute", false}, {"host_op_us", 100}}));
  EXPECT_EQ(queued_op.step_time, queued.step_time);
}

TEST(Simulate, ComputeAfterHostCommunicationRunsCold) {
  // host_cold_factor: a compute task of a CPU device whose device issued communication since
  // its previous compute task takes the factor of the last such task's kind times its time;
  // the others keep theirs. The ZeRO-3 plan gathers each op's parameters (all_gather) right
  // before its compute.
  const sim::Result base = run(cpu_plan(false));
  const json factors = {{"all_gather", 1.5}, {"reduce_scatter", 2.0}};
  const json plan = cpu_plan(false, {{"host_cold_factor", factors}});
  auto s = session_of(plan);
  ASSERT_TRUE(s) << render_all(s.error());
  auto cold = s->simulate({});
  ASSERT_TRUE(cold) << render_all(cold.error());
  const auto& dag = s->compiled().dag;
  ASSERT_EQ(base.program.tasks.size(), cold->program.tasks.size());
  int after_gather = 0, warm = 0;
  for (const auto& dp : cold->program.devices) {
    CommKind last = CommKind::kNone;
    for (uint32_t t : dp.dispatch) {
      const engine::Task& task = cold->program.tasks[t];
      if (task.kind == engine::TaskKind::kComm) last = dag.nodes[task.node].comm;
      if (task.kind != engine::TaskKind::kCompute) continue;
      const double f = last == CommKind::kAllGather       ? 1.5
                       : last == CommKind::kReduceScatter ? 2.0
                                                          : 1.0;
      const int64_t w = base.program.tasks[t].work;
      EXPECT_EQ(task.work, static_cast<int64_t>(std::ceil(static_cast<double>(w) * f)))
          << "task " << t;
      if (last == CommKind::kAllGather) ++after_gather;
      if (last == CommKind::kNone) ++warm;
      last = CommKind::kNone;
    }
  }
  EXPECT_GT(after_gather, 0);
  EXPECT_GT(warm, 0);
  EXPECT_GT(cold->step_time, base.step_time);
  // one number applies to every kind; a GPU (host_compute false) ignores it
  const sim::Result all = run(cpu_plan(false, {{"host_cold_factor", 1.5}}));
  EXPECT_GT(all.step_time, base.step_time);
  const sim::Result queued = run(cpu_plan(false, {{"host_compute", false}}));
  const sim::Result queued_cold =
      run(cpu_plan(false, {{"host_compute", false}, {"host_cold_factor", factors}}));
  EXPECT_EQ(queued_cold.step_time, queued.step_time);
}

TEST(Simulate, BackwardOnStaleActivationsRunsSlower) {
  // host_reuse_factor: on a CPU device, a backward task whose microbatch's forward was
  // followed by k other microbatches' forwards takes the factor at distance k times its time.
  // GPipe runs every forward before every backward on each stage: with M microbatches,
  // microbatch i's backward ops are at distance M - 1 - i. Forwards and the optimizer keep
  // their time. [1.5, 3] gives distance 1 the factor 1.5 and distance 2 and more 3 (6
  // microbatches: distances up to 5, beyond the 3 the rule tells apart).
  const std::string gpipe = std::string(STRETTO_TEST_DATA) + "/loop/pp2_gpipe_tiny.json";
  for (int m : {2, 4, 6}) {
    SCOPED_TRACE(m);
    auto plan = json::parse(std::ifstream(gpipe));
    plan["schedule"]["microbatches"] = m;
    const sim::Result base = run(plan);
    plan["costmodel"]["host_reuse_factor"] = {1.5, 3.0};
    auto s = session_of(plan);
    ASSERT_TRUE(s) << render_all(s.error());
    auto slow = s->simulate({});
    ASSERT_TRUE(slow) << render_all(slow.error());
    const auto& cp = s->compiled();
    ASSERT_EQ(base.program.tasks.size(), slow->program.tasks.size());
    std::map<int, int> at_distance;
    for (size_t t = 0; t < slow->program.tasks.size(); ++t) {
      const engine::Task& task = slow->program.tasks[t];
      if (task.kind != engine::TaskKind::kCompute) continue;
      const Node& nd = cp.dag.nodes[task.node];
      const bool backward =
          nd.tags.pass == Pass::kB && cp.model.ops[nd.op].kind != OpKind::kOptimizer;
      const int k = backward ? m - 1 - nd.tags.mb() : 0;
      const double f = k == 0 ? 1.0 : k == 1 ? 1.5 : 3.0;
      const int64_t w = base.program.tasks[t].work;
      EXPECT_EQ(task.work, static_cast<int64_t>(std::ceil(static_cast<double>(w) * f))) << t;
      if (backward) ++at_distance[k];
    }
    EXPECT_EQ(static_cast<int>(at_distance.size()), m);  // every distance 0 .. m - 1 seen
    EXPECT_GT(slow->step_time, base.step_time);
    // a GPU (host_compute false) ignores it
    plan["costmodel"]["host_compute"] = false;
    const sim::Result queued_slow = run(plan);
    plan["costmodel"].erase("host_reuse_factor");
    EXPECT_EQ(queued_slow.step_time, run(plan).step_time);
  }
}

TEST(Simulate, DevicesBeyondTheHostCoresTakeTurns) {
  // Four CPU processes on a host of 2 cores (host_cores): while more than two compute at once
  // each runs slower, so the step is longer than with unlimited cores, and no compute op runs
  // faster than alone; with 4 cores nothing changes. Such plans are not replica-folded.
  sim::SimOptions fold;
  fold.fold_replicas = true;
  const sim::Result free = run(cpu_plan(true), fold);
  const sim::Result four = run(cpu_plan(true, {{"host_cores", 4}}), fold);
  const sim::Result two = run(cpu_plan(true, {{"host_cores", 2}}), fold);
  ASSERT_GT(free.step_time, 0);
  EXPECT_TRUE(free.folded);
  EXPECT_EQ(four.step_time, free.step_time);
  EXPECT_FALSE(two.folded);
  EXPECT_GT(two.step_time, free.step_time * 5 / 4);
  // processes that outnumber the cores lose part of them (host_share_efficiency): slower yet
  const sim::Result lossy =
      run(cpu_plan(true, {{"host_cores", 2}, {"host_share_efficiency", 0.8}}), fold);
  EXPECT_GT(lossy.step_time, two.step_time);
  const sim::Result lossy_four =
      run(cpu_plan(true, {{"host_cores", 4}, {"host_share_efficiency", 0.8}}), fold);
  EXPECT_EQ(lossy_four.step_time, free.step_time);  // never oversubscribed: no effect
  int slowed = 0;
  for (uint32_t t = 0; t < two.program.tasks.size(); ++t) {
    if (two.program.tasks[t].kind != engine::TaskKind::kCompute) continue;
    const float s = engine::slowdown(two.program, t, two.timing[t]);
    EXPECT_GE(s, 1.0f - 1e-6f);
    if (s > 1.5f) ++slowed;
  }
  EXPECT_GT(slowed, 0);
}

// `order` semantics, checked on the simulated timings rather than on the DAG (the compiler joins
// consecutive groups through their dataflow ends only, and relies on transitivity for the rest):
// on every device, every compute op of a group starts after every compute op of the previous
// non-empty group of the same directive has ended, and every op of an overlap group starts after
// every transfer feeding any compute op of that group on that device has ended.
TEST(Simulate, OrderGroupsFollowOneAnotherOnEveryDevice) {
  std::vector<std::string> plans;
  for (const char* e : kExamples) plans.push_back(std::string(STRETTO_EXAMPLES) + "/" + e + ".json");
  for (const char* b : {"1f1b", "dualpipe", "dualpipev", "interleaved-1f1b", "zb-h1", "zb-v"})
    plans.push_back(std::string(STRETTO_EXAMPLES) + "/builders/" + b + ".json");
  for (const auto& path : plans) {
    SCOPED_TRACE(path);
    auto s = sim::Session::open(path);
    ASSERT_TRUE(s) << render_all(s.error());
    auto r = s->simulate();
    ASSERT_TRUE(r) << render_all(r.error());
    const auto& cp = s->compiled();
    const auto& dag = cp.dag;
    const engine::Program& p = r->program;
    // compute tasks by device, and the transfers feeding each compute node
    std::vector<std::vector<uint32_t>> on_device(p.devices.size());
    std::vector<std::vector<uint32_t>> tasks_of_node(dag.nodes.size());
    for (uint32_t t = 0; t < p.tasks.size(); ++t) {
      tasks_of_node[p.tasks[t].node].push_back(t);
      if (p.tasks[t].kind == engine::TaskKind::kCompute)
        on_device[static_cast<size_t>(r->device_of(t))].push_back(t);
    }
    size_t pairs = 0, feeds = 0;
    for (const Directive& d : cp.plan.schedule) {
      if (d.op != DirectiveOp::kOrder) continue;
      for (size_t dev = 0; dev < on_device.size(); ++dev) {
        engine::SimTime prev_end = -1;  // latest end in the previous non-empty group on this device
        for (const auto& group : d.groups) {
          std::vector<uint32_t> members;
          for (uint32_t t : on_device[dev])
            for (const Filter& f : group)
              if (f.matches(dag.nodes[p.tasks[t].node].tags)) {
                members.push_back(t);
                break;
              }
          if (members.empty()) continue;
          engine::SimTime first_start = std::numeric_limits<engine::SimTime>::max(), last_end = -1;
          for (uint32_t t : members) {
            first_start = std::min(first_start, r->timing[t].start);
            last_end = std::max(last_end, r->timing[t].end);
          }
          if (prev_end >= 0) {
            EXPECT_LE(prev_end, first_start) << "directive " << d.index << " device " << dev;
            ++pairs;
          }
          if (group.size() > 1) {  // overlap group: its feeds arrive first
            engine::SimTime fed = -1;
            for (uint32_t t : members) {
              const uint32_t n = p.tasks[t].node;
              for (uint32_t q = dag.pred_begin[n]; q < dag.pred_begin[n + 1]; ++q) {
                const uint32_t from = dag.edges[dag.pred[q]].from;
                if (dag.nodes[from].kind != NodeKind::kTransfer) continue;
                for (uint32_t x : tasks_of_node[from]) {
                  const auto parts = std::span(p.participants).subspan(p.tasks[x].part_begin,
                                                                       p.tasks[x].part_count);
                  if (std::any_of(parts.begin(), parts.end(), [&](const engine::Participant& pa) {
                        return pa.device == dev;
                      })) {
                    fed = std::max(fed, r->timing[x].end);
                    ++feeds;
                  }
                }
              }
            }
            EXPECT_LE(fed, first_start) << "overlap group of directive " << d.index << " device "
                                        << dev;
          }
          prev_end = last_end;
        }
      }
    }
    EXPECT_GT(pairs, 0u);
    if (path.find("dualpipe") != std::string::npos) {
      EXPECT_GT(feeds, 0u);
    }
  }
}
