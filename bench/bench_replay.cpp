// Replay overhead (issue: <= 5 % of the step on a 4-process CPU plan): the host time the
// replay spends outside the model's kernels and outside waiting for communication -- posting
// ops, applying received data, bookkeeping, recording times -- measured per rank.
//
//   overhead_cpu_pct  = overhead CPU time / (overhead + kernel CPU time) on the host thread
//                       (thread CPU clocks: immune to the rank being descheduled on a busy host)
//   overhead_wall_pct = overhead wall time / step time (inflated when the host is oversubscribed)
//   pack_cpu_ms       = CPU time copying gradients into buckets and ZeRO shards and back (the
//                       copies DDP and ZeRO make as well), reported apart from the overhead
// Each is the worst rank's. Runs `stretto replay`'s library entry point on
// examples/cpu_gpt_pp2_dp2_zero1.json (PP2 x DP2, ZeRO-1, 4 processes).
#include <benchmark/benchmark.h>
#include <cstdlib>

#include "stretto/backend/replay.h"
#include "stretto/compiler/compiler.h"

namespace {

void BM_ReplayOverhead(benchmark::State& state, const char* plan) {
  ::setenv("OPENBLAS_NUM_THREADS", "1", 0);
  ::setenv("OMP_NUM_THREADS", "1", 0);
  const std::string path = std::string(STRETTO_EXAMPLES) + "/" + plan;
  auto cp = stretto::compiler::compile_file(path);
  if (!cp) {
    state.SkipWithError("plan does not compile");
    return;
  }
  stretto::backend::ReplayOptions opt;
  opt.iterations = static_cast<int>(state.range(0));
  opt.warmup = 2;
  opt.device = stretto::backend::DeviceKind::kCpu;
  stretto::backend::LaunchOptions lo;
  lo.exe = STRETTO_BINARY;
  lo.quiet = true;
  lo.args = {"replay", path, "--iterations", std::to_string(opt.iterations), "--warmup", "2",
             "--device", "cpu"};
  double step_ms = 0, cpu_pct = 0, wall_pct = 0, overhead_cpu_ms = 0, kernel_cpu_ms = 0,
         pack_cpu_ms = 0;
  for (auto _ : state) {
    auto r = stretto::backend::launch_local(*cp, opt, lo);
    if (!r) {
      state.SkipWithError("replay failed");
      return;
    }
    step_ms = r->step_mean_ms;
    for (const auto& d : r->devices) {
      const double c = static_cast<double>(d.overhead_cpu_ns) /
                       std::max<double>(1, static_cast<double>(d.overhead_cpu_ns + d.compute_cpu_ns));
      const double w = static_cast<double>(d.overhead_ns) / std::max<double>(1, static_cast<double>(d.step_ns));
      if (c * 100 > cpu_pct) {
        cpu_pct = c * 100;
        overhead_cpu_ms = static_cast<double>(d.overhead_cpu_ns) / 1e6;
        kernel_cpu_ms = static_cast<double>(d.compute_cpu_ns) / 1e6;
        pack_cpu_ms = static_cast<double>(d.pack_cpu_ns) / 1e6;
      }
      wall_pct = std::max(wall_pct, w * 100);
    }
  }
  state.counters["step_ms"] = step_ms;
  state.counters["overhead_cpu_pct"] = cpu_pct;
  state.counters["overhead_cpu_ms"] = overhead_cpu_ms;
  state.counters["kernel_cpu_ms"] = kernel_cpu_ms;
  state.counters["pack_cpu_ms"] = pack_cpu_ms;
  state.counters["overhead_wall_pct"] = wall_pct;
}

BENCHMARK_CAPTURE(BM_ReplayOverhead, pp2_dp2_zero1_4proc, "cpu_gpt_pp2_dp2_zero1.json")
    ->Arg(10)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReplayOverhead, synthetic_pp4_zbh1_4proc, "cpu_synthetic_pp4_zbh1.json")
    ->Arg(10)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
