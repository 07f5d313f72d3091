// GUI speed (issue: "as fluid as Tracy"): the cost of one frame's UI build (draw_app + ImGui
// Render, i.e. everything but the GPU) at ~50 k and ~500 k ops, zoomed in and fully out, and
// the latency from an edit to the redrawn result for 64 and 1,024 devices. The GPU part of a
// frame is measured in the real window (`stretto gui --frames N --dump-state`, frame_ms).
#include <benchmark/benchmark.h>

#include <chrono>
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
      return stretto::bench::moe_plan(4, 4, 2, 32, true);
    case 1:  // ~500 k ops
      return stretto::bench::moe_plan(8, 8, 4, 96, true);
    case 64:
      return stretto::bench::moe_plan(8, 8, 4, 32, true);
    default:  // 1,024 devices
      return stretto::bench::moe_plan(16, 64, 1, 16, true);
  }
}

void wait_current(App& app, Headless& h) {
  while (!app.current || app.stale()) {
    h.frame(app);
    if (app.last_failed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Arg 0: plan (0 ~50 k ops, 1 ~500 k ops); arg 1: 0 fully out (fit), 1 zoomed in (1/2000 of
// the step).
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
  const double end = static_cast<double>(app.current->result.step_time);
  if (state.range(1)) app.zoom(end * 0.5, end * 0.5 + end / 2000);
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

// Edit (the dispatch cost slider) -> worker re-simulates -> the next frame shows it.
void BM_EditToRedraw(benchmark::State& state) {
  Headless h(1600, 900);
  App app;
  app.open_text(plan_for(static_cast<int>(state.range(0))).dump(), "bench.json");
  wait_current(app, h);
  if (!app.current) {
    state.SkipWithError("plan failed");
    return;
  }
  int k = 0;
  for (auto _ : state) {
    app.doc.set("/costmodel/dispatch_us", 5 + (++k % 2));
    h.frame(app);  // submits
    wait_current(app, h);
    h.frame(app);  // draws the new result
  }
  state.counters["devices"] = static_cast<double>(app.current->result.devices.size());
  state.counters["ops"] = static_cast<double>(app.current->timeline.ops);
  state.counters["sim_ms"] = app.current->result.sim_wall_ms;
}
BENCHMARK(BM_EditToRedraw)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
