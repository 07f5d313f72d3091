// Simulator benchmarks (DESIGN.md §7, simulator issue):
//  - Reference: 1,024 devices = PP16 x DP64, DualPipeV, MoE with experts sharded over the DP
//    group, 256 microbatches, ZeRO-1 — full per-device simulation and with replica folding.
//  - Compile + folded simulation end to end (what a sweep point costs): PP16 x DP64 (1,024
//    devices) and PP16 x DP4 (64 devices), DualPipeV, 8 MoE layers per rank (4 per stage, 2
//    stages per rank: 128 layers, the compile benchmark's model), EP over DP, 256 microbatches,
//    side by side; the time should not depend on the DP degree.
//  - Re-simulation after one directive edit of a 64-device plan (PP8 x DP8, 1F1B).
// Counters: events, events/s (engine events over whole simulate() wall time), tasks, peak RSS;
// the reference also engine_events_per_s (over the engine's prepare + run), heap_events_per_s
// (a bare binary heap, bare_heap_rate below), their ratio engine_vs_heap and minor_faults (of
// simulate(): pages touched fresh); the compile + simulate benchmark also reports its floor
// (floor_of below).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <queue>
#include <random>

#include "event_queue.h"
#include "plans.h"
#include "stretto/sim/session.h"

namespace {

// A floor under compile + simulate at a given task count, measured in the same process: (a) the
// engine's own event queue handling `events` events and nothing else (a hold model with 1,024
// pending: pop the earliest, push one an exponential ~1 us later), and (b) writing, once, the
// state every task needs at this design in freshly allocated memory (its 64-byte DAG node,
// 32-byte program task, 32-byte engine record and 16-byte timing: 144 bytes), which first
// touch of the pages dominates (the kernel zeroes and maps each page). Any implementation that
// materialises the tasks pays (b); any event-driven one pays (a) per event.
struct Floor {
  double queue_ms = 0, touch_ms = 0;
};
Floor floor_of(size_t tasks, uint64_t events) {
  using Clock = std::chrono::steady_clock;
  using stretto::engine::detail::Event;
  Floor f;
  std::mt19937_64 rng(42);
  std::exponential_distribution<double> exp(1.0 / 1000.0);
  std::vector<stretto::engine::SimTime> inc(1 << 16);
  for (auto& x : inc) x = static_cast<stretto::engine::SimTime>(exp(rng)) + 1;
  stretto::engine::detail::RadixEventQueue q;
  q.reserve(1025);
  uint64_t seq = 0;
  for (uint32_t i = 0; i < 1024; ++i) q.push(Event{inc[i], (seq++) << 2, i, 0});
  auto t0 = Clock::now();
  for (uint64_t k = 0; k < events; ++k) {
    if (!q.has_now()) q.advance();
    const Event e = q.pop_now();
    q.push(Event{e.time + inc[k & 0xffff], (seq++) << 2, e.id, e.version});
  }
  benchmark::DoNotOptimize(q.size());
  f.queue_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const size_t bytes = tasks * 144;
  t0 = Clock::now();
  std::unique_ptr<char[]> mem(new char[bytes]);
  std::memset(mem.get(), 1, bytes);
  benchmark::DoNotOptimize(mem.get());
  f.touch_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return f;
}

// The ceiling the engine's event rate is compared with (bench_engine's BM_HeapHold, here in
// the same process and run): a bare binary heap (std::priority_queue of the engine's events)
// handling `events` events in a hold model with 1,024 pending; events per second.
double bare_heap_rate(uint64_t events) {
  using stretto::engine::detail::Event;
  struct After {
    bool operator()(const Event& a, const Event& b) const {
      return a.time > b.time || (a.time == b.time && a.key > b.key);
    }
  };
  std::mt19937_64 rng(42);
  std::exponential_distribution<double> exp(1.0 / 1000.0);
  std::vector<stretto::engine::SimTime> inc(1 << 16);
  for (auto& x : inc) x = static_cast<stretto::engine::SimTime>(exp(rng)) + 1;
  std::priority_queue<Event, std::vector<Event>, After> q;
  uint64_t seq = 0;
  for (uint32_t i = 0; i < 1024; ++i) q.push(Event{inc[i], (seq++) << 2, i, 0});
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t k = 0; k < events; ++k) {
    const Event e = q.top();
    q.pop();
    q.push(Event{e.time + inc[k & 0xffff], (seq++) << 2, e.id, e.version});
  }
  benchmark::DoNotOptimize(q.top());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(events) / s;
}

// Minor page faults of this process so far (first touches of fresh memory).
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

std::optional<stretto::sim::Session> open(const nlohmann::json& plan, benchmark::State& state) {
  auto src = stretto::plan::JsonSource::parse(plan.dump(), "bench.json");
  auto p = stretto::plan::parse_plan(*src);
  if (!p) {
    state.SkipWithError(stretto::render_all(p.error()).c_str());
    return std::nullopt;
  }
  auto s = stretto::sim::Session::from_plan(std::move(*p));
  if (!s) {
    state.SkipWithError(stretto::render_all(s.error()).c_str());
    return std::nullopt;
  }
  return std::move(*s);
}

void BM_Reference(benchmark::State& state) {
  const int pp = static_cast<int>(state.range(0)), dp = static_cast<int>(state.range(1));
  const int mbs = static_cast<int>(state.range(2));
  const bool fold = state.range(3) != 0;
  const bool curves = state.range(4) != 0;
  const bool pass = state.range(5) != 0;
  auto s = open(stretto::bench::reference_plan(pp, dp, mbs), state);
  if (!s) return;
  stretto::sim::SimOptions opt;
  opt.fold_replicas = fold;
  opt.memory_curves = curves;
  opt.granularity = pass ? stretto::sim::Granularity::kPass : stretto::sim::Granularity::kOp;
  size_t engine_tasks = 0;
  uint64_t events = 0;
  size_t tasks = 0;
  double step_ms = 0, wall = 0;
  stretto::sim::Result::Phases phases;
  long faults = 0;
  for (auto _ : state) {
    const long f0 = minor_faults();
    auto r = s->simulate(opt);
    faults = minor_faults() - f0;
    if (!r) {
      state.SkipWithError(stretto::render_all(r.error()).c_str());
      return;
    }
    events = r->events;
    tasks = r->program.tasks.size();
    engine_tasks = r->engine_tasks;
    state.counters["participants"] = static_cast<double>(r->program.participants.size());
    state.counters["deps"] = static_cast<double>(r->program.deps.size());
    state.counters["task_links"] = static_cast<double>(r->program.task_links.size());
    step_ms = static_cast<double>(r->step_time) / 1e6;
    wall = r->sim_wall_ms;
    phases = r->phases;
  }
  state.counters["build_ms"] = phases.build_ms;
  state.counters["prepare_ms"] = phases.prepare_ms;
  state.counters["run_ms"] = phases.run_ms;
  state.counters["metrics_ms"] = phases.metrics_ms;
  state.counters["events"] = static_cast<double>(events);
  state.counters["tasks"] = static_cast<double>(tasks);
  state.counters["engine_tasks"] = static_cast<double>(engine_tasks);
  state.counters["events_per_s"] = events / (wall / 1e3);
  // The engine alone (prepare + run) against a bare binary heap's rate, measured right after
  // in this process: the ratio is what the engine's speed target is stated in.
  const double engine_rate = events / ((phases.prepare_ms + phases.run_ms) / 1e3);
  const double heap_rate = bare_heap_rate(events);
  state.counters["engine_events_per_s"] = engine_rate;
  state.counters["heap_events_per_s"] = heap_rate;
  state.counters["engine_vs_heap"] = engine_rate / heap_rate;
  state.counters["minor_faults"] = static_cast<double>(faults);
  state.counters["step_ms"] = step_ms;
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}
// pp, dp, microbatches, fold, memory curves (`stretto simulate` keeps them only with --trace),
// pass granularity
BENCHMARK(BM_Reference)
    ->Args({4, 8, 16, 0, 1, 0})
    ->Args({16, 64, 256, 1, 0, 0})
    ->Args({16, 64, 256, 0, 0, 0})
    ->Args({16, 64, 256, 0, 1, 0})
    ->Args({16, 64, 256, 1, 0, 1})
    ->Args({16, 64, 256, 0, 0, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// Plan (parsed) -> compiled session -> folded simulation without memory curves, as a sweep
// point runs it. Counters are per iteration: compile_ms (Session::from_plan: compile + cost
// model), then the simulation's phases.
void BM_CompileSimulateFolded(benchmark::State& state) {
  const int pp = static_cast<int>(state.range(0)), dp = static_cast<int>(state.range(1));
  const int mbs = static_cast<int>(state.range(2));
  const int layers = static_cast<int>(state.range(3));
  const bool pass = state.range(4) != 0;
  auto src = stretto::plan::JsonSource::parse(
      stretto::bench::reference_plan(pp, dp, mbs, layers).dump(), "bench.json");
  auto plan = stretto::plan::parse_plan(*src);
  if (!plan) {
    state.SkipWithError(stretto::render_all(plan.error()).c_str());
    return;
  }
  using Clock = std::chrono::steady_clock;
  double compile_ms = 0, build_ms = 0, prepare_ms = 0, run_ms = 0, metrics_ms = 0;
  size_t nodes = 0, tasks = 0, edges = 0, temporal = 0, engine_tasks = 0;
  uint64_t events = 0;
  double step_ms = 0;
  bool folded = false;
  stretto::compiler::CompileOptions copt;
  copt.class_programs = false;  // as `stretto sweep` compiles (the simulation does not read them)
  for (auto _ : state) {
    const auto t0 = Clock::now();
    auto s = stretto::sim::Session::from_plan(*plan, ".", copt);
    if (!s) {
      state.SkipWithError(stretto::render_all(s.error()).c_str());
      return;
    }
    compile_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    stretto::sim::SimOptions opt;
    opt.fold_replicas = true;
    opt.memory_curves = false;
    opt.granularity = pass ? stretto::sim::Granularity::kPass : stretto::sim::Granularity::kOp;
    auto r = s->simulate(opt);
    if (!r) {
      state.SkipWithError(stretto::render_all(r.error()).c_str());
      return;
    }
    engine_tasks = r->engine_tasks;
    build_ms += r->phases.build_ms;
    prepare_ms += r->phases.prepare_ms;
    run_ms += r->phases.run_ms;
    metrics_ms += r->phases.metrics_ms;
    nodes = s->compiled().dag.nodes.size();
    edges = s->compiled().dag.edges.size();
    temporal = static_cast<size_t>(
        std::count_if(s->compiled().dag.edges.begin(), s->compiled().dag.edges.end(),
                      [](const stretto::compiler::Edge& e) {
                        return e.kind == stretto::compiler::EdgeKind::kTemporal;
                      }));
    tasks = r->program.tasks.size();
    events = r->events;
    step_ms = static_cast<double>(r->step_time) / 1e6;
    folded = r->folded;
  }
  const Floor fl = floor_of(tasks, events);
  if (!folded) state.SkipWithError("the plan did not fold");
  using C = benchmark::Counter;
  state.counters["compile_ms"] = C(compile_ms, C::kAvgIterations);
  state.counters["build_ms"] = C(build_ms, C::kAvgIterations);
  state.counters["prepare_ms"] = C(prepare_ms, C::kAvgIterations);
  state.counters["run_ms"] = C(run_ms, C::kAvgIterations);
  state.counters["metrics_ms"] = C(metrics_ms, C::kAvgIterations);
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["edges"] = static_cast<double>(edges);
  state.counters["temporal_edges"] = static_cast<double>(temporal);
  state.counters["tasks"] = static_cast<double>(tasks);
  state.counters["engine_tasks"] = static_cast<double>(engine_tasks);
  state.counters["events"] = static_cast<double>(events);
  state.counters["floor_queue_ms"] = fl.queue_ms;
  state.counters["floor_touch_ms"] = fl.touch_ms;
  state.counters["step_ms"] = step_ms;
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}
// pp, dp, microbatches, MoE layers per stage (2 stages per rank), pass granularity; the last
// is 65,536 devices (PP16 x DP4096, 64 microbatches)
BENCHMARK(BM_CompileSimulateFolded)
    ->Args({16, 64, 256, 4, 0})
    ->Args({16, 4, 256, 4, 0})
    ->Args({16, 64, 256, 4, 1})
    ->Args({16, 4, 256, 4, 1})
    ->Args({16, 4096, 64, 4, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

void BM_ResimulateAfterEdit(benchmark::State& state) {
  auto s = open(stretto::bench::moe_plan(8, 8, 4, 32, true), state);
  if (!s) return;
  // The edit: rank 0's order switches between 1F1B and the same order with two adjacent
  // forwards swapped back and forth (a real recompile + re-simulation each time).
  size_t idx = 0;
  for (size_t i = 0; i < s->plan().schedule.size(); ++i)
    if (s->plan().schedule[i].op == stretto::plan::DirectiveOp::kOrder) {
      idx = i;
      break;
    }
  stretto::plan::Directive a = s->plan().schedule[idx], b = a;
  std::swap(b.groups[1], b.groups[2]);
  stretto::sim::SimOptions opt;
  opt.fold_replicas = state.range(0) != 0;
  bool flip = false;
  for (auto _ : state) {
    flip = !flip;
    auto e = s->set_directive(idx, flip ? b : a);
    if (!e) {
      state.SkipWithError(stretto::render_all(e.error()).c_str());
      return;
    }
    auto r = s->simulate(opt);
    if (!r) {
      state.SkipWithError(stretto::render_all(r.error()).c_str());
      return;
    }
    benchmark::DoNotOptimize(r->step_time);
  }
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}
BENCHMARK(BM_ResimulateAfterEdit)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
