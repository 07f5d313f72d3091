// Compiler benchmark: the 1,024-device plan of the foundation issue (PP16 x DP64, 8 MoE
// layers per stage with EP across the DP group, 256 microbatches, explicit 1F1B orders).
// Reports wall time per compile and the process's peak RSS (counter "peak_rss_MiB").
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include "plans.h"
#include "stretto/compiler/compiler.h"

namespace {

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

void BM_Compile(benchmark::State& state) {
  const int pp = static_cast<int>(state.range(0)), dp = static_cast<int>(state.range(1));
  const int mbs = static_cast<int>(state.range(2));
  auto text = stretto::bench::moe_plan(pp, dp, 8, mbs, false).dump();
  auto src = stretto::plan::JsonSource::parse(text, "bench.json");
  auto plan = stretto::plan::parse_plan(*src);
  if (!plan) {
    state.SkipWithError(stretto::render_all(plan.error()).c_str());
    return;
  }
  size_t nodes = 0, edges = 0;
  for (auto _ : state) {
    auto cp = stretto::compiler::compile(*plan, &*src);
    if (!cp) {
      state.SkipWithError(stretto::render_all(cp.error()).c_str());
      return;
    }
    nodes = cp->dag.nodes.size();
    edges = cp->dag.edges.size();
    benchmark::DoNotOptimize(cp->classes.data());
  }
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["edges"] = static_cast<double>(edges);
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}
BENCHMARK(BM_Compile)
    ->Args({4, 8, 32})
    ->Args({16, 64, 256})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
