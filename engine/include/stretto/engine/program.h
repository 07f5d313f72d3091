#pragma once
// The engine's input: a flat, instance-level program (no knowledge of plans or models).
//
// A Task is one unit of work that one or more devices take part in:
//  - kCompute:   runs on one device's compute resource; `work` = ns at full capacity alone.
//                Concurrent compute tasks on a device share its capacity (processor sharing);
//                while any comm task is active on the device, capacity is multiplied by
//                (1 - comm_sm_share) (by (1 - comm_hbm_share) for mem_bound tasks).
//                Comm tasks marked `overlapped` do not slow compute (their cost is in it).
//  - kComm:      a transfer or collective instance; `work` = wire bytes; its CommSpec
//                (Task::comm) holds the fixed part `latency_ns`, `rate_cap` bytes/ns alone and
//                the `links` its bytes flow over, sharing each link's capacity max-min fairly
//                with other active comm tasks. Starts only when every participant (device,
//                stream) has it at the head of its stream (rendezvous), all dependencies are
//                done, and every participant has issued it.
//  - kBarrier:   zero-time join (temporal-edge junction); no participants, no stream.
// Host cores (optional): devices whose compute runs on a host CPU (one process per device)
// and that share `Program::host_cores[h]` cores with the other devices of host h
// (DeviceProgram::host) get, while a of that host's devices compute at once, at most
// min(1, cores / a) of their capacity: the operating system time-shares the cores between
// the processes (processor sharing). Devices with no host (kNoHost) are not limited.
// Each device has a host thread that issues its `dispatch` list in order, `dispatch_ns`
// apart (the k-th entry, 0-based, is issued at (k+1) * dispatch_ns). Each (device, stream)
// is a FIFO: a task starts only after the previous task of that stream ended.
// Tasks are listed in a topological order of their dependencies (deps point backwards).
// Dependencies are one CSR array: task t's are deps[tasks[t].dep_begin, dep_end(t)), where
// dep_end(t) is the next task's dep_begin (deps.size() for the last task).
//
// Counters (optional): `num_counters` per-device levels, e.g. allocated bytes by category. The
// effects of a task are those of its `node`: effects[effect_begin[node], effect_begin[node+1]).
// Each effect adds `delta` to its counter on every device the task takes part in (once per
// device), when the task starts (its latency phase, for comm) or when it ends. The engine
// reports each device's curve of the counters' total, sampled at the end of every instant in
// which it changed, and the peak of that total with the counters at the peak. Within one
// instant only the end state counts (a buffer freed as the next is taken is no peak).
//
// Size: a Task is 32 bytes (the reference plan has 19 M of them); what only comm tasks need
// lives in Program::comms.

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace stretto::engine {

using SimTime = int64_t;  // nanoseconds

enum class TaskKind : uint8_t { kCompute, kComm, kBarrier };

struct Participant {
  uint32_t device;
  uint16_t stream;  // global stream id (Program::stream_names)
};

inline constexpr uint32_t kNoComm = UINT32_MAX;

/// What a comm task moves and how; Program::comms, by Task::comm.
struct CommSpec {
  int64_t latency_ns = 0;
  double rate_cap = 0;  // bytes per ns when alone (0 = instantaneous bytes, or links only)
  uint32_t link_begin = 0, link_count = 0;  // into Program::task_links
};

struct Task {
  TaskKind kind = TaskKind::kCompute;
  bool mem_bound = false;
  // comm only: its SM cost is priced into the compute task it overlaps (a tensor-parallel
  // collective under tp_comm_overlap), so it does not slow the device's compute
  bool overlapped = false;
  uint32_t node = UINT32_MAX;               // originating DAG node (for reports)
  int64_t work = 0;                         // compute: ns at full capacity; comm: wire bytes
  uint32_t part_begin = 0, part_count = 0;  // into Program::participants
  uint32_t dep_begin = 0;                   // into Program::deps, up to Program::dep_end()
  uint32_t comm = kNoComm;                  // kComm: into Program::comms; else kNoComm
};
static_assert(sizeof(Task) == 32);

inline constexpr size_t kMaxCounters = 8;

struct CounterEffect {
  uint8_t counter = 0;  // < Program::num_counters
  bool at_end = false;  // applied when the task ends; otherwise when it starts
  int64_t delta = 0;
};

struct Link {
  double capacity = 0;  // bytes per ns (= GB/s)
  std::string name;     // "dev3.intra.out", for reports (empty on links no simulated device uses)
};

inline constexpr uint32_t kNoHost = UINT32_MAX;

struct DeviceProgram {
  std::vector<uint32_t> dispatch;  // task ids in issue order (each task this device takes part in)
  int64_t dispatch_ns = 0;
  double comm_sm_share = 0;
  double comm_hbm_share = 0;
  uint32_t host = kNoHost;  // into Program::host_cores; kNoHost: no shared host cores
};

struct Program {
  std::vector<std::string> stream_names;
  std::vector<Task> tasks;
  std::vector<CommSpec> comms;
  std::vector<Participant> participants;
  std::vector<uint32_t> deps;
  std::vector<uint32_t> task_links;
  std::vector<Link> links;
  std::vector<DeviceProgram> devices;
  std::vector<double> host_cores;  // by host: cores its devices share (> 0)
  // (0, 1]: the share of a host's cores that its computing devices get while they outnumber
  // the cores (context switches, caches refilled by each other): each of `a` > cores computing
  // devices runs at host_share_efficiency * cores / a (cost::Interference::host_share_efficiency)
  double host_share_efficiency = 1.0;
  // counters (empty effect_begin: none)
  uint32_t num_counters = 0;           // <= kMaxCounters
  std::vector<uint32_t> effect_begin;  // by Task::node, plus one end entry
  std::vector<CounterEffect> effects;

  /// End of task t's dependency range in `deps`.
  uint32_t dep_end(uint32_t t) const {
    return t + 1 < tasks.size() ? tasks[t + 1].dep_begin : static_cast<uint32_t>(deps.size());
  }
  /// Task t's dependencies (predecessor task ids). Precondition: the ranges are valid.
  std::span<const uint32_t> deps_of(uint32_t t) const {
    return {deps.data() + tasks[t].dep_begin, deps.data() + dep_end(t)};
  }
  /// Task t's links (empty unless it is a comm task).
  std::span<const uint32_t> links_of(uint32_t t) const {
    if (tasks[t].comm == kNoComm) return {};
    const CommSpec& c = comms[tasks[t].comm];
    return {task_links.data() + c.link_begin, c.link_count};
  }
};

/// Per-task outcome (slowdown() in engine.h derives how much interference stretched it).
struct TaskTiming {
  SimTime start = -1, end = -1;
};

struct EngineStats {
  uint64_t events = 0;
  double wall_ms = 0;
};

/// A deadlock found while simulating (tasks that never started); never a hang.
struct Stall {
  std::vector<uint32_t> blocked_tasks;  // a few tasks that could not start, for the message
};

/// Time a device spent in each state during the run (exact, accumulated by the engine).
struct DeviceOccupancy {
  SimTime busy = 0;          // at least one compute task running (union of compute intervals)
  SimTime comm = 0;          // at least one of its comm tasks in its latency or bytes phase
  SimTime exposed_comm = 0;  // comm without compute
};

struct CounterSample {
  SimTime t = 0;
  int64_t total = 0;  // sum of the device's counters after the changes at t
};

/// A device's counters over the run: the curve of their total (starting with {0, 0}; only that
/// sample unless RunOptions::counter_curves), the first time the total reached its maximum,
/// and each counter then.
struct DeviceCounters {
  std::vector<CounterSample> curve;
  int64_t peak = 0;
  SimTime peak_time = 0;
  std::array<int64_t, kMaxCounters> at_peak{};
};

/// What a run records besides task timings.
struct RunOptions {
  bool counter_curves = true;  // DeviceCounters::curve (else only the peak is tracked)
  /// Called with (tasks finished, tasks in all) when the event loop starts, then at the end of
  /// the first instant after every `progress_every` events, and when it ends; on the run's
  /// thread. Empty: no calls (nothing is checked per event either way).
  std::function<void(uint64_t finished, uint64_t total)> progress;
  uint64_t progress_every = uint64_t{1} << 16;
};

struct RunResult {
  std::vector<TaskTiming> timing;          // by task id
  std::vector<DeviceOccupancy> occupancy;  // by device
  std::vector<DeviceCounters> counters;    // by device; empty without counters
  SimTime makespan = 0;
  EngineStats stats;
  bool stalled = false;
  Stall stall;
};

}  // namespace stretto::engine
