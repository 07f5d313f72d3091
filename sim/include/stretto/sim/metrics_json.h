#pragma once
// The metrics of one simulated step as JSON: the fields of `stretto simulate --format json`
// (README "What the numbers mean", docs/semantics.md), without the critical path. One field
// list (step_fields, device_fields) behind two writers: metrics_json builds a Json object for
// `simulate` and every other caller, and sweeps write the same fields straight into text
// (explore::result_json_text, for speed).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "stretto/compiler/compiler.h"
#include "stretto/sim/pipeline_metrics.h"
#include "stretto/sim/result.h"

namespace stretto::sim {

/// Top level: plan, step_time_ms, bubble_ratio, pipeline_bubble_ratio, exposed_comm_ms,
/// exposed_comm_ms_per_device, exposed_collectives_ms_per_device, mfu, tokens_per_s, model_flops, events, sim_wall_ms,
/// folded_replicas, not_modelled, costmodel, peak_memory_bytes and peak_memory_time_ms (of the
/// device with the largest peak), peak_reserved_bytes (the largest of the devices' bytes the
/// CUDA caching allocator reserves), peak_device_bytes (the largest of the devices' reserved
/// bytes plus their CUDA context and NCCL buffers), over_capacity (any device's
/// peak_device_bytes over its memory), and `devices`.
nlohmann::json metrics_json(const compiler::CompiledPlan& cp, const Result& r,
                            const PipelineMetrics& pm);

/// The whole object `stretto simulate --format json` prints (the CLI and the Python module):
/// metrics_json, `table_coverage` for a plan under a profiled cost model (coverage.h), and with
/// a critical path (`--critical-path`) the fields of critical_path_json (critical_path.h): the
/// summary, or every op with `full_path` (`--critical-path=full`).
nlohmann::json simulate_json(const compiler::CompiledPlan& cp, const Result& r,
                             const PipelineMetrics& pm, const std::vector<CriticalStep>* path,
                             bool full_path = false);

/// The device with the largest memory peak (the first of them); null without devices.
inline const DeviceMetrics* largest_peak(const Result& r) {
  const DeviceMetrics* worst = nullptr;
  for (const auto& d : r.devices)
    if (!worst || d.peak_memory > worst->peak_memory) worst = &d;
  return worst;
}

/// The top-level fields but `devices`, written through `w`. A writer has number(key, double),
/// integer(key, integral), boolean(key, bool), string(key, std::string_view),
/// strings(key, const std::vector<std::string>&) and object(key, f), which calls f with a
/// writer for the nested object. `over_capacity`: whether any device is over its capacity
/// (callers judge it against different caps).
template <typename W>
void step_fields(W& w, const compiler::CompiledPlan& cp, const Result& r, const PipelineMetrics& pm,
                 bool over_capacity) {
  auto ms = [](engine::SimTime ns) { return static_cast<double>(ns) / 1e6; };
  w.string("plan", cp.plan.file);
  w.number("step_time_ms", ms(r.step_time));
  w.number("bubble_ratio", r.bubble_ratio);
  w.number("pipeline_bubble_ratio", pm.pipeline_bubble_ratio);
  w.number("exposed_comm_ms", ms(r.exposed_comm));
  w.number("exposed_comm_ms_per_device", pm.exposed_comm_ms_per_device);
  w.number("exposed_collectives_ms_per_device", pm.exposed_collectives_ms_per_device);
  w.number("mfu", r.mfu);
  w.number("tokens_per_s", r.tokens_per_s);
  w.number("model_flops", r.model_flops);
  w.integer("events", r.events);
  w.number("sim_wall_ms", r.sim_wall_ms);
  w.boolean("folded_replicas", r.folded);
  w.strings("not_modelled", compiler::unmodelled_effects(cp));
  w.string("costmodel", cp.plan.costmodel.kind == plan::CostModelSpec::Kind::kFixed ? "fixed"
                        : cp.plan.costmodel.kind == plan::CostModelSpec::Kind::kProfiled
                            ? "profiled"
                            : "analytic");
  const DeviceMetrics* worst = largest_peak(r);
  w.integer("peak_memory_bytes", worst ? worst->peak_memory : int64_t{0});
  w.number("peak_memory_time_ms", worst ? ms(worst->peak_time) : 0.0);
  int64_t reserved = 0, device = 0;
  for (const auto& d : r.devices) {
    reserved = std::max(reserved, d.peak_reserved);
    device = std::max(device, d.peak_device());
  }
  w.integer("peak_reserved_bytes", reserved);
  w.integer("peak_device_bytes", device);
  w.boolean("over_capacity", over_capacity);
}

/// One element of `devices`, written through `w` (as step_fields).
template <typename W>
void device_fields(W& w, const DeviceMetrics& d, const DevicePipeline& dp, bool over_capacity) {
  auto ms = [](engine::SimTime ns) { return static_cast<double>(ns) / 1e6; };
  w.integer("id", d.id);
  w.number("busy_ms", ms(d.busy));
  w.number("bubble_ms", ms(d.bubble));
  w.number("bubble_ratio", d.bubble_ratio);
  w.number("pipeline_bubble_ms", dp.computes ? ms(dp.idle()) : 0.0);
  w.number("exposed_comm_ms", ms(d.exposed_comm));
  w.number("exposed_collectives_ms", ms(dp.exposed_collectives));
  w.number("comm_ms", ms(d.comm));
  w.integer("peak_memory_bytes", d.peak_memory);
  w.number("peak_memory_time_ms", ms(d.peak_time));
  w.integer("peak_reserved_bytes", d.peak_reserved);
  w.integer("cuda_context_bytes", d.cuda_context);
  w.integer("nccl_buffer_bytes", d.nccl_buffers);
  w.integer("peak_device_bytes", d.peak_device());
  w.object("memory_breakdown", [&](auto& b) {
    for (size_t k = 0; k < kMemCategories; ++k) b.integer(memory_category_name(k), d.breakdown[k]);
  });
  w.boolean("over_capacity", over_capacity);
}

/// Whether two devices' fields differ only in `id` (replicas, folded or not): what
/// device_fields writes, compared. A field added there is compared here too.
inline bool same_fields_but_id(const DeviceMetrics& a, const DevicePipeline& pa,
                               const DeviceMetrics& b, const DevicePipeline& pb) {
  return a.busy == b.busy && a.bubble == b.bubble && a.bubble_ratio == b.bubble_ratio &&
         a.exposed_comm == b.exposed_comm && a.comm == b.comm &&
         a.peak_memory == b.peak_memory && a.peak_time == b.peak_time &&
         a.peak_reserved == b.peak_reserved && a.cuda_context == b.cuda_context &&
         a.nccl_buffers == b.nccl_buffers &&
         a.breakdown == b.breakdown && pa.computes == pb.computes &&
         pa.exposed_collectives == pb.exposed_collectives &&
         (!pa.computes || pa.idle() == pb.idle());
}

}  // namespace stretto::sim
