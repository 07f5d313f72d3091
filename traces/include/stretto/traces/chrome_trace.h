#pragma once
// Chrome Trace Event JSON (opens in Perfetto and chrome://tracing), DESIGN.md §5.
//
// One process per device ("device 3 · node 0"), one thread per stream of that device
// (compute, dp, pp:1 = send/recv stream with device 1, ...). Every task instance is an "X"
// slice named like "F mb3 PP1" (compute) or "send act mb3 PP0→PP1" / "all-reduce grad-reduce
// PP0" (communication), with args: op, tags, directive index, cost inputs and the slowdown
// from interference. Transfers get a flow arrow from the sender's slice to the receiver's.
// Each device has a counter track "allocated memory" (bytes). Timestamps are microseconds
// with nanosecond precision; lanes never overlap because streams are FIFOs.

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "stretto/compiler/compiler.h"
#include "stretto/sim/result.h"

namespace stretto::traces {

struct ChromeTraceOptions {
  bool flows = true;
  bool memory_counters = true;
  /// Devices to include (indexed by device id; empty = all). A transfer with one end outside
  /// keeps its slice on the included end and loses its flow arrow.
  std::vector<char> devices;
  /// Time window [begin_ns, end_ns): slices overlapping it are kept (end_ns < 0 = no end).
  engine::SimTime begin_ns = 0;
  engine::SimTime end_ns = -1;
  /// One enclosing slice per (stage, microbatch, pass) on a device's stream ("F mb3 PP1"),
  /// with that pass's ops nested under it, so a viewer shows the schedule zoomed out and the
  /// ops zoomed in. A region pass whose span overlaps another's on the same stream (an overlap
  /// group) gets none: its ops would not nest.
  bool region_slices = true;
};

/// What a trace will hold, counted before writing it: its events and about how many bytes
/// (from the mean size of each kind of event), so that a caller can say so first.
struct ChromeTraceSize {
  uint64_t slices = 0, flows = 0, counters = 0, metadata = 0;
  uint64_t events() const { return slices + flows + counters + metadata; }
  uint64_t approx_bytes = 0;
};
ChromeTraceSize estimate_chrome_trace(const compiler::CompiledPlan& cp, const sim::Result& r,
                                      const ChromeTraceOptions& opt = {});

/// Streams the trace to `write` in chunks of about 64 KiB (memory bounded by the chunk size
/// and one name per DAG node, not by the trace). `write` returns false to stop (a failed
/// write); chrome_trace_stream then returns false.
bool chrome_trace_stream(const compiler::CompiledPlan& cp, const sim::Result& r,
                         const ChromeTraceOptions& opt,
                         const std::function<bool(std::string_view)>& write);

/// Streams the trace to an open file; false on a write error (errno set). `gzip`: compressed
/// (a .json.gz that Perfetto opens as it is).
bool write_chrome_trace(std::FILE* f, const compiler::CompiledPlan& cp, const sim::Result& r,
                        const ChromeTraceOptions& opt = {}, bool gzip = false);

/// The whole trace as a JSON string (small plans, tests).
std::string chrome_trace(const compiler::CompiledPlan& cp, const sim::Result& r,
                         const ChromeTraceOptions& opt = {});

/// Short user-facing slice name of a DAG node: "F mb3 PP1", "send act mb3 PP0→PP1", ...
std::string slice_name(const compiler::CompiledPlan& cp, uint32_t node);

}  // namespace stretto::traces
