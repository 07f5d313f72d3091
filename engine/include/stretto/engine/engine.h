#pragma once
// The discrete-event engine: simulates one Program (program.h is the semantic contract) and
// returns per-task start/end times (slowdown() derives how much interference stretched each).
//
// Usage: `Engine engine; RunResult r = engine.run(program);` (validate(program) first when the
// program may be malformed). Keep the Engine to re-simulate cheaply: its buffers are reused, and
// rerun_checked reuses its preparation of a program whose values alone changed.
//
// Model, in the terms of program.h:
//  - Time is an integer count of ns. A task starts at the first instant where all of its
//    dependencies have ended, every participant (device, stream) has it at the head of its FIFO
//    (a stream's order is its device's dispatch order), and every participant device has
//    issued it (entry k of a dispatch list is issued at (k+1) * dispatch_ns). The host threads
//    never block: issue times are fixed by the dispatch lists.
//  - Compute tasks (exactly one participant) on a device share its capacity equally (processor
//    sharing). While at least one comm task of the device is in its latency or bytes phase, each
//    compute task's rate is also multiplied by (1 - comm_sm_share), or by (1 - comm_hbm_share)
//    when mem_bound.
//  - A comm task (any number of participants, possibly several streams of one device) spends
//    latency_ns, then moves `work` bytes. With links (and work > 0) its bytes are a flow of the
//    max-min solver (maxmin.h), capped by rate_cap when rate_cap > 0; rate_cap == 0 means "no
//    own cap" there, the links alone limit it; a link listed twice carries the flow twice.
//    Without links the bytes take work / rate_cap ns (rate_cap == 0: instantaneous).
//  - Barriers (no participants) and zero-duration tasks end at the instant they start.
//  - Rates change only when a task starts or ends. All changes of one instant are applied
//    together after the last event of that instant (no zero-length intermediate states).
//  - slowdown() = (end - start) / (duration alone): compute `work`; a flow's latency + bytes at
//    min(rate_cap, its slowest link); 1 for fixed-duration comm, barriers and zero-duration
//    tasks. Derived from the timing and the program, so the engine does not store it.
//  - Occupancy per device (RunResult::occupancy): time with at least one compute task running
//    (busy), with at least one of its comm tasks in its latency or bytes phase (comm), and comm
//    without compute (exposed), accumulated in O(1) at every change of those counts.
//  - Counters (program.h, e.g. memory by category): applied at task starts and ends, sampled
//    per device at the end of each instant in which they changed; the peak of their total with
//    the counters at that moment. RunOptions::counter_curves = false keeps only the peak.
//
// Rounding (the only non-integer arithmetic): a running task keeps its remaining work as a
// double, decreased by rate * elapsed ns whenever its rate changes. Its completion time is
// `now + ceil(remaining / rate)`, rounded up to a whole ns, with a tolerance of
// 1e-6 ns + 1e-13 relative so that float noise on an exact result never adds a nanosecond.
// When the completion event fires the task is done; the (< 1 ns of) work that rounding up
// "over-served" is dropped. The operation order is fixed, so results are bit-identical across
// runs, engines and threads (IEEE doubles, no fast-math).
//
// Determinism: events are ordered by (time, sequence number); sequence numbers follow push
// order; all containers are vectors indexed by ids, iterated in index or insertion order.
//
// Deadlock: when no event is left but tasks are unfinished, the result has stalled = true and up
// to 8 blocked task ids (the first unfinished task of each stream that has one, in (device,
// stream) order; else the first unfinished tasks). Unfinished tasks keep start = end = -1.
// Never a hang, never an abort.
//
// Cost: per event O(participants + successors) plus the re-timing of the tasks whose rate changed
// (the compute tasks of a touched device; the flows of the re-solved max-min component). Events
// are 24-byte PODs in a radix heap (event times never decrease). Each running job has at most one
// valid completion event: when its completion moves earlier, a new event is pushed and the old one
// is invalidated lazily by a per-job version; when it moves later, the queued event is kept and,
// when it pops early, pushed again at the new time. Task state is a 16-byte record per task plus
// a 16-byte entry that holds its issue time and work until it starts and its timing once it ends
// (that array becomes RunResult::timing: a run holds 32 bytes per task, the timing included);
// streams are linked lists threaded through the records, and through an entry per participant
// of each comm task. A comm task's start and end also read its Task and CommSpec. No allocation
// per event: all state lives in vectors sized at the start of run() and kept by the Engine between
// runs, so re-running a same-sized program allocates nothing but the result (nothing at all with
// run(program, out) and a reused `out`, from the third run on: the engine and `out` swap the
// timing array's buffer).

#include <memory>
#include <string>
#include <vector>

#include "stretto/engine/maxmin.h"
#include "stretto/engine/program.h"

namespace stretto::engine {

/// Checks the structural contract of program.h: ids and ranges in bounds (stream ids below
/// stream_names.size()), dep_begin never decreasing, deps pointing backwards, a comm spec for
/// each comm task and none for other tasks, a compute task with exactly one participant, a
/// barrier with none, no (device, stream) twice in a task, no participant
/// entry shared by two tasks, every device's dispatch list naming exactly the tasks it takes
/// part in, once each; non-negative work, latency, rate_cap and dispatch_ns; shares in [0, 1];
/// positive finite link capacities. Returns human-readable errors ("task 12: ...", at most ~50
/// plus a count); empty = valid. Deadlocks are not structural errors: run() reports them as a
/// stall. O(size of the program); it runs the same pass that run() starts with.
std::vector<std::string> validate(const Program& program);

/// How much interference stretched task t: (end - start) / its duration alone (see above);
/// 1 for a task that never ran. `timing` is t's entry of a run of `program`.
float slowdown(const Program& program, uint32_t t, const TaskTiming& timing);

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
  RunResult run(const Program& program, const RunOptions& options = {});

  /// Same, writing into `out` so its vectors keep their capacity across runs.
  void run(const Program& program, RunResult& out, const RunOptions& options = {});

  /// Validates and, when valid, simulates in one pass (cheaper than validate() + run()): returns
  /// validate()'s errors; `out` is filled only when the list is empty.
  std::vector<std::string> run_checked(const Program& program, RunResult& out,
                                       const RunOptions& options = {});

  /// run_checked() for a program with the structure of the one this engine last prepared (the
  /// last run or run_checked that found no errors): equal to it in everything but these values,
  /// which may differ (a cost-model edit: sim::recost_program) — Task::work, mem_bound and
  /// overlapped; CommSpec::latency_ns and rate_cap; Link::capacity; DeviceProgram::dispatch_ns,
  /// comm_sm_share and comm_hbm_share; host_cores and host_share_efficiency; CounterEffect::delta.
  /// The derived structure (successor lists, stream order, collective indexes) is kept, and only
  /// the values are checked (validate()'s checks of them) and each task's state set again: one
  /// sequential pass over the tasks and the dispatch lists, instead of prepare's random accesses.
  /// The same RunResult as run_checked, bit for bit. Precondition (STRETTO_ASSERT): prepared(),
  /// and the program's sizes are the prepared one's; the rest of the structure is the caller's
  /// promise (it is not compared: that would cost what it saves).
  std::vector<std::string> rerun_checked(const Program& program, RunResult& out,
                                         const RunOptions& options = {});
  /// Whether the engine holds a prepared structure for rerun_checked (a run found no errors since
  /// the engine was made or copied, and no later run_checked found errors).
  bool prepared() const;

  /// Completion events of the last run that were popped after being superseded by an earlier
  /// completion (lazily invalidated by the job's version).
  uint64_t stale_events() const;
  /// Completion events of the last run that popped before their job was done, because its rate
  /// dropped after they were pushed, and were pushed again at the new completion time.
  uint64_t requeued_events() const;
  /// Largest number of pending events during the last run.
  uint64_t max_queue() const;
  /// Wall time of the last run's setup (validation and derived structure, or rerun_checked's
  /// re-arming), included in
  /// RunResult::stats.wall_ms.
  double prepare_ms() const;
  /// Work of the max-min solver in the last run (solves, component sizes, rate changes).
  const MaxMin::Stats& maxmin_stats() const;

 private:
  friend std::vector<std::string> validate(const Program& program);
  std::vector<std::string> run_impl(const Program& program, RunResult& out,
                                    const RunOptions& options, bool rearm);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace stretto::engine
