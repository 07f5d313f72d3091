#pragma once
// What one simulated training step predicts (DESIGN.md §3, §4).
//
// Times are integer nanoseconds. Per device: busy = union of compute intervals; bubble =
// step_time - busy; exposed_comm = time a comm op of this device runs while none of its
// compute ops runs; memory = static (params, grads, optimizer by ZeRO level) + dynamic
// (activations, comm buffers, grad buckets, gathered params) over time; its peak with the
// breakdown at the moment of the peak.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stretto/compiler/dag.h"
#include "stretto/engine/program.h"

namespace stretto::sim {

inline constexpr size_t kMemCategories = 7;  // params, grads, optimizer + dag.h's 4 dynamic ones
std::string_view memory_category_name(size_t i);

/// A point of a device's allocated-memory curve: `total` bytes after the changes at `t`.
using MemorySample = engine::CounterSample;

struct DeviceMetrics {
  int id = 0;
  engine::SimTime busy = 0, bubble = 0, exposed_comm = 0, comm = 0;
  double bubble_ratio = 0;
  int64_t peak_memory = 0;  // allocated bytes (tensors), at their peak
  engine::SimTime peak_time = 0;
  // The bytes the CUDA caching allocator holds in segments at the end of the step, its peak
  // (caching_allocator.h); >= peak_memory. A "cpu" device's is its peak_memory.
  int64_t peak_reserved = 0;
  // Outside the allocator (outside_allocator.h): the CUDA context and NCCL's buffers, held all
  // step. 0 on a "cpu" device.
  int64_t cuda_context = 0, nccl_buffers = 0;
  /// What nvidia-smi shows for the process at the peak: reserved + context + NCCL buffers.
  /// over_capacity compares it with the device's memory.
  int64_t peak_device() const { return peak_reserved + cuda_context + nccl_buffers; }
  std::array<int64_t, kMemCategories> breakdown{};  // at the peak
  std::vector<MemorySample> memory;                 // the allocated-bytes curve (empty when folded)
  bool folded = false;      // metrics copied from an identical replica (replica folding)
  int representative = -1;  // folded: the simulated replica whose `memory` curve this one shares
  bool over_capacity = false;  // peak_device() > the device's memory_GiB
};

/// What a critical-path step waited for last (the dependency that set its start): the output of
/// a compute op (data), data arriving over a link (a transfer or collective), an order
/// directive's edge, the previous op of its stream, or nothing but its host thread (dispatch;
/// also the path's first op).
enum class PathWait : uint8_t { kStart, kData, kLink, kOrder, kStream, kDispatch };
inline constexpr size_t kPathWaits = 6;

/// One link of the critical path: an op, when it ran, and what it waited for.
struct CriticalStep {
  uint32_t task = 0;
  std::string what;  // user-facing name of the op
  engine::TaskKind kind = engine::TaskKind::kCompute;
  int device = -1;
  engine::SimTime start = 0, end = 0;
  std::string waited_for;  // "data from ...", "stream order", "rendezvous with device 3", ...
  PathWait wait = PathWait::kStart;
};

struct Result {
  engine::SimTime step_time = 0;
  double bubble_ratio = 0;
  engine::SimTime exposed_comm = 0;  // sum over devices
  double mfu = 0;
  double tokens_per_s = 0;
  double model_flops = 0;
  std::vector<DeviceMetrics> devices;
  uint64_t events = 0;
  size_t engine_tasks = 0;  // tasks the engine ran (fewer than the program's at pass granularity)
  double sim_wall_ms = 0;
  /// Where sim_wall_ms went: program construction, engine setup (validation and derived
  /// structure), the event loop, and metrics (busy, exposed comm, memory curves, FLOPs).
  struct Phases {
    double build_ms = 0, prepare_ms = 0, run_ms = 0, metrics_ms = 0;
  } phases;
  bool folded = false;
  /// The program's tasks wait for their device's previous compute task
  /// (cost::Interference::host_compute): part of its structure, for recost_program.
  bool host_compute = false;
  // Engine-level detail, for traces, the GUI and the critical path.
  engine::Program program;
  /// Names the Resimulator run that gave this result (session.h: a Resimulator keeps what it
  /// may reuse for its last result only); null from sim::simulate. Copies share it.
  std::shared_ptr<const void> resimulation;
  std::vector<engine::TaskTiming> timing;  // by task id

  /// DAG node of a task.
  uint32_t node_of(uint32_t task) const { return program.tasks[task].node; }
  /// Primary device of a task (compute: its device; comm: its first simulated member); -1 for
  /// a barrier.
  int device_of(uint32_t task) const {
    const engine::Task& t = program.tasks[task];
    return t.part_count > 0 ? static_cast<int>(program.participants[t.part_begin].device) : -1;
  }
};

}  // namespace stretto::sim
