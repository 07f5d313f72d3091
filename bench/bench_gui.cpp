// GUI speed (issue: "as fluid as Tracy"): the cost of one frame's UI build (draw_app + ImGui
// Render, i.e. everything but the GPU) at ~50 k and ~500 k ops, zoomed in and fully out; the
// same at ~1 M ops with a search active (target: <= 16 ms a frame); and the latency from an
// edit to the redrawn result for 64 devices (target: <= 50 ms) and 1,024. The GPU part of a
// frame is measured in the real window (`stretto gui --frames N --dump-state`, frame_ms).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "plans.h"
#include "stretto/gui/app.h"
#include "stretto/gui/script.h"

namespace {

using stretto::gui::App;
using stretto::gui::Headless;

// Plans by size: (pp, dp, layers per stage, microbatches).
nlohmann::json plan_for(int which) {
  switch (which) {
    case 0:  // ~50 k ops
      return stretto::bench::moe_plan(4, 4, 2, 70, true);
    case 1:  // ~500 k ops
      return stretto::bench::moe_plan(8, 8, 4, 96, true);
    case 2:  // ~1 M ops (the "ops" counter says how many)
      return stretto::bench::moe_plan(8, 8, 8, 96, true);
    case 64:
      return stretto::bench::moe_plan(8, 8, 4, 32, true);
    default:  // 1,024 devices
      return stretto::bench::moe_plan(16, 64, 1, 16, true);
  }
}

// Minor page faults of this process so far, every thread (first touches of fresh memory: about
// 0.6-1 s per GB on the CI machine, docs/performance.md; a count that does not depend on load).
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

void wait_current(App& app, Headless& h) {
  while (!app.current || app.stale()) {
    h.frame(app);
    if (app.last_failed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Arg 0: plan (0 ~50 k ops, 1 ~500 k ops); arg 1: 0 fully out (fit), 1 zoomed in (40 ops
// of the first lane across the window). The lanes drawn are those that fit the window's
// height (the others are culled, as are off-screen ops).
void BM_Frame(benchmark::State& state) {
  Headless h(1600, 900);
  App app;
  app.open_text(plan_for(static_cast<int>(state.range(0))).dump(), "bench.json");
  wait_current(app, h);
  if (!app.current) {
    state.SkipWithError("plan failed");
    return;
  }
  h.frame(app);
  // Zoomed in: 40 ops of the middle of the first lane across the window.
  const auto& ops = app.current->timeline.lanes[0].ops;
  const size_t k = ops.size() / 2;
  if (state.range(1)) app.zoom(static_cast<double>(ops[k].start), static_cast<double>(ops[k + 40].end));
  h.frame(app);
  for (auto _ : state) h.frame(app);
  state.counters["ops"] = static_cast<double>(app.current->timeline.ops);
  state.counters["lanes"] = static_cast<double>(app.current->timeline.lanes.size());
  state.counters["boxes"] = app.tl.boxes_drawn;
  state.counters["lanes_drawn"] = app.tl.lanes_drawn;
}
BENCHMARK(BM_Frame)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"plan", "zoomed_in"})
    ->Unit(benchmark::kMillisecond);

// ~1 M ops with the search `MB5` active (matches outlined, the rest dimmed, ticks on the
// overview): one frame's UI build, fully out and zoomed in. Target: <= 16 ms a frame. The
// search's index (one text per DAG node, built once per result, on the search worker's
// thread) and the matching are done before the timed loop; their cost is `index_ms`.
void BM_FrameSearch(benchmark::State& state) {
  Headless h(1600, 900);
  App app;
  app.open_text(plan_for(2).dump(), "bench.json");
  wait_current(app, h);
  if (!app.current) {
    state.SkipWithError("plan failed");
    return;
  }
  h.frame(app);
  const auto t0 = std::chrono::steady_clock::now();
  app.search.query = "MB5";
  app.update_search();  // starts the search worker (search.h)
  app.search.worker.wait_idle();
  app.update_search();  // takes its matches
  const double index_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const auto& ops = app.current->timeline.lanes[0].ops;
  const size_t k = ops.size() / 2;
  if (state.range(0)) app.zoom(static_cast<double>(ops[k].start), static_cast<double>(ops[k + 40].end));
  h.frame(app);
  for (auto _ : state) h.frame(app);
  state.counters["ops"] = static_cast<double>(app.current->timeline.ops);
  state.counters["matches"] = static_cast<double>(app.search.tasks.size());
  state.counters["index_ms"] = index_ms;
  state.counters["boxes"] = app.tl.boxes_drawn;
  state.counters["target_ms"] = 16;
}
BENCHMARK(BM_FrameSearch)->Arg(0)->Arg(1)->ArgName("zoomed_in")->Unit(benchmark::kMillisecond);

// Edit -> worker re-simulates -> the next frame shows it. `gemm` false: the dispatch cost
// slider (5 <-> 6 us: every op shifts alike, so each device's memory effects keep their order
// and the Resimulator keeps its reserved bytes); true: the GEMM efficiency (0.711 <-> 0.6:
// GEMMs slow against the rest, the effects reorder, every device is sorted and replayed
// again; counter replayed_devices; allocator_replays says how many replays they took, devices
// whose effects come in the same sequence sharing one).
void edit_to_redraw(benchmark::State& state, bool gemm) {
  Headless h(1600, 900);
  App app;
  app.open_text(plan_for(static_cast<int>(state.range(0))).dump(), "bench.json");
  wait_current(app, h);
  if (!app.current) {
    state.SkipWithError("plan failed");
    return;
  }
  int k = 0;
  const long faults0 = minor_faults();
  for (auto _ : state) {
    if (gemm)
      app.doc.set("/costmodel/gemm_efficiency", (++k % 2) ? 0.6 : 0.711);
    else
      app.doc.set("/costmodel/dispatch_us", 5 + (++k % 2));
    h.frame(app);  // submits
    wait_current(app, h);
    h.frame(app);  // draws the new result
  }
  state.counters["faults_per_edit"] = static_cast<double>(minor_faults() - faults0) /
                                      static_cast<double>(state.iterations());
  state.counters["devices"] = static_cast<double>(app.current->result.devices.size());
  state.counters["ops"] = static_cast<double>(app.current->timeline.ops);
  state.counters["sim_ms"] = app.current->result.sim_wall_ms;
  state.counters["recompiled"] = app.current->recompiled;
  state.counters["lanes_retimed"] = app.current->lanes_retimed;
  state.counters["engine_rerun"] = app.current->engine_rerun;
  state.counters["replayed_devices"] = app.current->replayed_devices;
  state.counters["allocator_replays"] = app.current->allocator_replays;
  state.counters["sorted_devices"] = app.current->sorted_devices;
  state.counters["worker_ms"] = app.current->wall_ms;  // parse + (re)compile + simulate + lanes
  state.counters["prepare_ms"] = app.current->prepare_ms;
  state.counters["lanes_ms"] = app.current->lanes_ms;
  if (state.range(0) == 64) state.counters["target_ms"] = 50;  // edit -> redraw at 64 devices
}
void BM_EditToRedraw(benchmark::State& state) { edit_to_redraw(state, false); }
BENCHMARK(BM_EditToRedraw)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_EditToRedrawGemm(benchmark::State& state) { edit_to_redraw(state, true); }
BENCHMARK(BM_EditToRedrawGemm)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

// `bench_gui --write-plans DIR` writes the plans (gui_50k.json, gui_500k.json, gui_1m.json,
// gui_64dev.json, gui_1024dev.json) for measuring the GPU side of a frame in the real window.
int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-plans") {
    const std::pair<int, const char*> plans[] = {
        {0, "gui_50k.json"}, {1, "gui_500k.json"}, {2, "gui_1m.json"}, {64, "gui_64dev.json"}, {1024, "gui_1024dev.json"}};
    for (const auto& [which, name] : plans)
      std::ofstream(std::string(argv[2]) + "/" + name) << plan_for(which).dump() << "\n";
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
