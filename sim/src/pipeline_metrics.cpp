#include "stretto/sim/pipeline_metrics.h"

#include <algorithm>

namespace stretto::sim {

PipelineMetrics pipeline_metrics(const CompiledPlan& cp, const Result& r) {
  (void)cp;
  PipelineMetrics m;
  const size_t D = r.devices.size();
  m.devices.assign(D, {});
  const Program& p = r.program;
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const Task& tk = p.tasks[t];
    if (tk.kind != TaskKind::kCompute || tk.part_count == 0) continue;
    const uint32_t d = p.participants[tk.part_begin].device;
    if (d >= D) continue;
    const TaskTiming& tm = r.timing[t];
    DevicePipeline& dp = m.devices[d];
    if (!dp.computes) {
      dp.computes = true;
      dp.first_start = tm.start;
      dp.last_end = tm.end;
    } else {
      dp.first_start = std::min(dp.first_start, tm.start);
      dp.last_end = std::max(dp.last_end, tm.end);
    }
    dp.compute += tm.end - tm.start;
  }
  for (size_t d = 0; d < D; ++d) {
    const int rep = r.devices[d].representative;
    if (r.devices[d].folded && rep >= 0 && static_cast<size_t>(rep) < D)
      m.devices[d] = m.devices[static_cast<size_t>(rep)];
    DevicePipeline& dp = m.devices[d];
    dp.compute = std::min(dp.compute, dp.last_end - dp.first_start);
  }
  double idle = 0, span = 0;
  SimTime worst = 0;
  for (size_t d = 0; d < D; ++d) {
    const DevicePipeline& dp = m.devices[d];
    if (!dp.computes) continue;
    idle += static_cast<double>(dp.idle());
    span += static_cast<double>(dp.last_end - dp.first_start);
    if (dp.idle() > worst) {
      worst = dp.idle();
      m.largest_bubble_device = static_cast<int>(d);
    }
  }
  m.pipeline_bubble_ratio = span > 0 ? idle / span : 0;
  m.exposed_comm_ms_per_device =
      D ? static_cast<double>(r.exposed_comm) / 1e6 / static_cast<double>(D) : 0;
  return m;
}

}  // namespace stretto::sim
