#pragma once
// Derived step metrics with plain definitions (docs/semantics.md):
//
// - pipeline bubble ratio: over the devices that run compute, the idle time between each
//   device's first compute op start and its last compute op end, divided by the sum of those
//   spans. Unlike Result::bubble_ratio (idle compute over devices x step time), it does not
//   count the warm-up before a late stage starts or the tail after an early stage finishes
//   its last backward; it is the "bubble" of pipeline papers.
// - exposed communication per device: Result::exposed_comm / number of devices.
//
// Folded results (replica folding) use each folded device's representative.

#include <vector>

#include "stretto/compiler/compiler.h"
#include "stretto/sim/result.h"

namespace stretto::sim {

struct DevicePipeline {
  bool computes = false;  // runs at least one compute op
  SimTime first_start = 0, last_end = 0;
  SimTime compute = 0;  // sum of compute op durations (clamped to the span)
  SimTime idle() const { return (last_end - first_start) - compute; }
};

struct PipelineMetrics {
  double pipeline_bubble_ratio = 0;
  double exposed_comm_ms_per_device = 0;
  std::vector<DevicePipeline> devices;  // by device id
  /// Index of the device with the largest pipeline idle time, -1 when no device is idle.
  int largest_bubble_device = -1;
};

PipelineMetrics pipeline_metrics(const CompiledPlan& cp, const Result& r);

}  // namespace stretto::sim
