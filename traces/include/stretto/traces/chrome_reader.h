#pragma once
// Reading a Chrome Trace Event file back (a measured run's, or one `stretto export chrome`
// wrote), to compare it with a prediction: its complete ("X") slices with their process,
// thread, times and Stretto's tags, and the process / thread names.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stretto/support/diag.h"

namespace stretto::traces {

struct TraceSlice {
  int64_t pid = 0, tid = 0;
  int64_t start_ns = 0, end_ns = 0;  // ts and ts + dur, microseconds in the file
  std::string name, cat;
  std::string tags;  // args.tags ("PP1 MB3 F"), empty when absent
};

struct ChromeTrace {
  std::vector<TraceSlice> slices;  // in file order
  std::map<int64_t, std::string> process_names;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  size_t skipped = 0;  // events that were not complete slices (counters, flows, ...)
};

/// Reads a trace file: a JSON object with "traceEvents" or a bare JSON array of events.
/// Not JSON, or no event list: a diagnostic naming the file. A slice without ts or dur is
/// skipped (and counted), never fatal.
Expected<ChromeTrace> read_chrome_trace(const std::string& path);

}  // namespace stretto::traces
