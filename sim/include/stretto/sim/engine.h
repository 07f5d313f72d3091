#pragma once
// The discrete-event engine: simulates one Program (program.h is the semantic contract) and
// returns per-task start/end times.
//
// Model, in the terms of program.h:
//  - Time is an integer count of ns. A task starts at the first instant where all of its
//    dependencies have ended, every participant (device, stream) has it at the head of its FIFO
//    (the stream's order is the device's dispatch order), and every participant device has
//    issued it (entry k of a dispatch list is issued at (k+1) * dispatch_ns).
//  - Compute tasks on a device share its capacity equally (processor sharing). While at least one
//    comm task of the device is in its latency or bytes phase, each compute task's rate is also
//    multiplied by (1 - comm_sm_share), or (1 - comm_hbm_share) when mem_bound.
//  - A comm task spends latency_ns, then moves `work` bytes. With links, its bytes are a flow of
//    the max-min solver (maxmin.h), capped by rate_cap when rate_cap > 0 (rate_cap == 0 means
//    "no own cap": the links alone limit it). Without links, the bytes take work / rate_cap
//    (rate_cap == 0: instantaneous). Barriers take no time.
//  - Rates change only when a task starts or ends. All such changes at one instant are applied
//    together after the last event of that instant (no zero-length intermediate states).
//
// Rounding (the only non-integer arithmetic): a running task keeps its remaining work as a
// double, decreased by rate * elapsed ns whenever its rate changes. Its completion time is
// `now + ceil(remaining / rate)`, rounded up to a whole ns, with a tolerance of
// 1e-6 ns + 1e-13 relative so that float noise on an exact result never adds a nanosecond.
// When the completion event fires the task is done; the (< 1 ns of) work that rounding up
// "over-served" is dropped. The operation order is fixed, so results are bit-identical across
// runs, machines with IEEE doubles, and threads.
//
// Determinism: events are ordered by (time, sequence number); sequence numbers follow push
// order; all containers are vectors indexed by ids, iterated in index or insertion order.
//
// Deadlock: when no event is left but tasks are unfinished, the result has stalled = true and a
// few blocked task ids (tasks at the head of a stream that never started). Never a hang.
//
// Cost: per event O(participants + successors) plus the re-timing of the tasks whose rate changed
// (the compute tasks of a touched device; the flows of the re-solved max-min component). Events
// are 24-byte PODs in a binary heap; completions are invalidated lazily by a per-job version.
// No allocation per event: all state lives in vectors sized at the start of run() and kept by
// the Engine between runs, so re-running a same-sized program allocates nothing but the result.

#include <memory>
#include <string>
#include <vector>

#include "stretto/sim/program.h"

namespace stretto::sim {

/// Checks the structural contract of program.h (ids in range, deps pointing backwards, kinds
/// with the right participants, dispatch lists listing exactly the tasks of their device once,
/// sane capacities and shares). Returns human-readable errors (at most ~50); empty = valid.
/// Deadlocks are not structural errors: run() reports them as a stall. O(size of the program).
std::vector<std::string> validate(const Program& program);

/// A reusable simulator. An Engine is a value that owns only scratch state (no globals), so many
/// engines can run on parallel threads; copying one gives an engine with empty scratch.
/// run() may be called repeatedly with different programs; buffers are reused.
class Engine {
 public:
  Engine();
  ~Engine();
  Engine(const Engine&);
  Engine& operator=(const Engine&);
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  /// Simulates `program`. Precondition: validate(program) is empty (checked; a violation is a
  /// bug in whoever built the program and fails STRETTO_ASSERT with the first error).
  /// stats.events counts the events handled: completions, latency ends and issue releases popped
  /// from the queue (stale ones excluded) plus zero-duration tasks completed inline.
  RunResult run(const Program& program);

  /// Same, writing into `out` so its vectors keep their capacity across runs.
  void run(const Program& program, RunResult& out);

  /// Heap events popped whose completion had been re-timed since they were pushed (last run).
  uint64_t stale_events() const;
  /// Largest number of pending events during the last run.
  uint64_t max_queue() const;

 private:
  friend std::vector<std::string> validate(const Program& program);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace stretto::sim
