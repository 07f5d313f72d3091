#pragma once
// The metrics of one simulated step as JSON: the fields of `stretto simulate --format json`
// (README "What the numbers mean", docs/semantics.md), without the critical path. One function
// so that `simulate` and any other caller report the same fields. Sweeps write the same object
// directly as text (explore::result_json_text, for speed): a field added here goes there too,
// and tests/explore Points.MetricsTextIsTheResultJson (and fuzz/sweep_fuzz) fail until it does.
#include <nlohmann/json.hpp>

#include "stretto/schedules/compiler.h"
#include "stretto/sim/pipeline_metrics.h"
#include "stretto/sim/result.h"

namespace stretto::sim {

/// Top level: plan, step_time_ms, bubble_ratio, pipeline_bubble_ratio, exposed_comm_ms,
/// exposed_comm_ms_per_device, mfu, tokens_per_s, model_flops, events, sim_wall_ms,
/// folded_replicas, not_modelled, costmodel, peak_memory_bytes and peak_memory_time_ms (of the
/// device with the largest peak), over_capacity (any device over its memory), and `devices`.
nlohmann::json metrics_json(const CompiledPlan& cp, const Result& r, const PipelineMetrics& pm);

}  // namespace stretto::sim
