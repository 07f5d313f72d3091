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

#include <string>

#include "stretto/schedules/compiler.h"
#include "stretto/sim/result.h"

namespace stretto::traces {

struct ChromeTraceOptions {
  bool flows = true;
  bool memory_counters = true;
};

/// The whole trace as a JSON string.
std::string chrome_trace(const CompiledPlan& cp, const sim::Result& r,
                         const ChromeTraceOptions& opt = {});

/// Short user-facing slice name of a DAG node: "F mb3 PP1", "send act mb3 PP0→PP1", ...
std::string slice_name(const CompiledPlan& cp, uint32_t node);

}  // namespace stretto::traces
