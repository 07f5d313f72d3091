#pragma once
// Derived step metrics with plain definitions (docs/semantics.md, "The numbers"):
//
// Per device, over the step (every one from the task timings of the engine):
// - compute: the union of the device's compute op intervals; its span runs from its first
//   compute op's start to its last compute op's end.
// - exposed collectives: the time a collective of the device (TP, SP, EP, DP and ZeRO, the
//   tied-embedding and gradient-norm all-reduces: every communication but the pipeline's
//   send/recv) runs while none of its compute ops runs. It is the part of the engine's exposed
//   communication (DeviceMetrics::exposed_comm: any communication op, no compute) that is not
//   pipeline traffic.
// - pipeline bubble: the time in the span when the device neither computes nor runs an exposed
//   collective: waiting for the pipeline (its neighbours' activations and gradients, their
//   send/recv, the schedule's warm-up and cool-down inside the span).
//   span = compute + exposed collectives in the span + pipeline bubble, exactly.
// Over the step:
// - pipeline bubble ratio: Σ pipeline bubble / Σ span over the devices that compute: the
//   "bubble" of pipeline papers ((p−1)/(v·m) for an ideal interleaved 1F1B), without the
//   ramp-up before a late stage starts, the tail after an early stage ends, and without the
//   exposed TP/EP/DP communication (its own field).
// - exposed comm per device and exposed collectives per device: means over the devices.
//
// Folded results (replica folding) use each folded device's representative.

#include <vector>

#include "stretto/compiler/compiler.h"
#include "stretto/sim/result.h"

namespace stretto::sim {

struct DevicePipeline {
  bool computes = false;  // runs at least one compute op
  engine::SimTime first_start = 0, last_end = 0;
  engine::SimTime compute = 0;  // union of the compute op intervals
  /// Collectives running while no compute runs: over the step, and inside the compute span.
  engine::SimTime exposed_collectives = 0, exposed_collectives_in_span = 0;
  /// Pipeline bubble: the span's time with neither compute nor an exposed collective.
  engine::SimTime idle() const {
    return (last_end - first_start) - compute - exposed_collectives_in_span;
  }
};

struct PipelineMetrics {
  double pipeline_bubble_ratio = 0;
  double exposed_comm_ms_per_device = 0;
  double exposed_collectives_ms_per_device = 0;
  std::vector<DevicePipeline> devices;  // by device id
  /// Index of the device with the largest pipeline idle time, -1 when no device is idle.
  int largest_bubble_device = -1;
};

/// Each device's ops are those of its dispatch list in `r.program` (a simulate result's).
/// The devices are measured on up to `threads` threads (the caller's included; contiguous
/// device ranges of about equal dispatch lengths): the same metrics for any count.
PipelineMetrics pipeline_metrics(const compiler::CompiledPlan& cp, const Result& r,
                                 int threads = 1);

}  // namespace stretto::sim
