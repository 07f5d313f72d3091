#pragma once
// The engine's input: a flat, instance-level program (no knowledge of plans or models).
//
// A Task is one unit of work that one or more devices take part in:
//  - kCompute:   runs on one device's compute resource; `work` = ns at full capacity alone.
//                Concurrent compute tasks on a device share its capacity (processor sharing);
//                while any comm task is active on the device, capacity is multiplied by
//                (1 - comm_sm_share) (by (1 - comm_hbm_share) for mem_bound tasks).
//  - kComm:      a transfer or collective instance; `work` = wire bytes, `latency_ns` fixed
//                part, `rate_cap` bytes/ns alone; its bytes flow over `links` and share each
//                link's capacity max-min fairly with other active comm tasks. Starts only when
//                every participant (device, stream) has it at the head of its stream
//                (rendezvous), all dependencies are done, and every participant has issued it.
//  - kBarrier:   zero-time join (temporal-edge junction); no participants, no stream.
// Each device has a host thread that issues its `dispatch` list in order, `dispatch_ns`
// apart (the k-th entry, 0-based, is issued at (k+1) * dispatch_ns). Each (device, stream)
// is a FIFO: a task starts only after the previous task of that stream ended.
// Tasks are listed in a topological order of their dependencies (deps point backwards).

#include <cstdint>
#include <string>
#include <vector>

namespace stretto::sim {

using SimTime = int64_t;  // nanoseconds

enum class TaskKind : uint8_t { kCompute, kComm, kBarrier };

struct Participant {
  uint32_t device;
  uint16_t stream;  // global stream id (Program::stream_names)
};

struct Task {
  TaskKind kind = TaskKind::kCompute;
  bool mem_bound = false;
  uint32_t node = UINT32_MAX;  // originating DAG node (for reports)
  int64_t work = 0;            // compute: ns at full capacity; comm: wire bytes
  int64_t latency_ns = 0;      // comm only
  double rate_cap = 0;         // comm only: bytes per ns when alone (0 = instantaneous bytes)
  uint32_t part_begin = 0, part_count = 0;  // into Program::participants
  uint32_t link_begin = 0, link_count = 0;  // into Program::task_links
  uint32_t dep_begin = 0, dep_count = 0;    // into Program::deps (predecessor task ids)
};

struct Link {
  double capacity = 0;  // bytes per ns (= GB/s)
  std::string name;     // "node0.nvlink.dev3.out", for reports
};

struct DeviceProgram {
  std::vector<uint32_t> dispatch;  // task ids in issue order (each task this device takes part in)
  int64_t dispatch_ns = 0;
  double comm_sm_share = 0;
  double comm_hbm_share = 0;
};

struct Program {
  std::vector<std::string> stream_names;
  std::vector<Task> tasks;
  std::vector<Participant> participants;
  std::vector<uint32_t> deps;
  std::vector<uint32_t> task_links;
  std::vector<Link> links;
  std::vector<DeviceProgram> devices;
};

/// Per-task outcome. `slowdown` = actual duration / duration alone (1.0 = no interference).
struct TaskTiming {
  SimTime start = -1, end = -1;
  float slowdown = 1.0f;
};

struct EngineStats {
  uint64_t events = 0;
  double wall_ms = 0;
};

/// A deadlock found while simulating (tasks that never started); never a hang.
struct Stall {
  std::vector<uint32_t> blocked_tasks;  // a few tasks that could not start, for the message
};

struct RunResult {
  std::vector<TaskTiming> timing;  // by task id
  SimTime makespan = 0;
  EngineStats stats;
  bool stalled = false;
  Stall stall;
};

}  // namespace stretto::sim
