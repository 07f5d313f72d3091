#pragma once
// A streaming reader of Chrome Trace Event JSON files: PyTorch profiler (Kineto) traces and the
// traces Stretto writes, plain or gzip-compressed.
//
// The file is never held in memory: a SAX parser (nlohmann::json's) reads it through zlib in
// 256 KiB chunks and hands each element of `traceEvents` (or of a bare top-level array) to a
// callback as a small JSON value, then forgets it. Memory is bounded by the largest single
// event, plus the top-level metadata objects that are kept (`distributedInfo`,
// `deviceProperties`, `otherData`, `baseTimeNanoseconds`, `displayTimeUnit`, `schemaVersion`,
// `traceName`); any other top-level member is parsed and dropped. Both are bounded, so that a
// small .gz cannot expand into gigabytes: a string or number longer than 16 MiB, or an event
// (or kept member) of more than 100,000 values, is refused where it stands.
//
// Timestamps: `ts` and `dur` are microseconds, often with three decimals (nanoseconds). The
// reader converts their decimal text to integer nanoseconds exactly (no binary rounding), so
// `RawEvent::ts_ns` is exact for `int.fff` values.
//
// Errors are located: a syntax error or a truncated file names the file, the line:column and
// byte offset (of the decompressed text for .gz), and the offending line with a caret; an event
// the callback rejects names its JSON pointer (`/traceEvents/1234/ts`) and position. Positions
// are found by re-reading the file up to the error, so the common path pays nothing for them.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "stretto/support/diag.h"
#include "stretto/plan/json_source.h"

namespace stretto::traces {

/// One trace event as read.
struct RawEvent {
  const plan::Json* json = nullptr;  // the event object (all its members)
  size_t index = 0;            // position in traceEvents
  int64_t ts_ns = 0, dur_ns = 0;
  bool has_ts = false, has_dur = false;
  std::string_view ph, name, cat;  // "" when absent or not strings
};

/// A problem with one event, reported by the callback: the member at fault ("" = the whole
/// event, "args/Group size" = a nested member) and what is wrong.
struct EventError {
  std::string member;
  std::string message;
  std::string hint;
};

/// What the reader keeps besides the events.
struct TraceHeader {
  plan::Json metadata = plan::Json::object();  // the kept top-level members (see above)
  size_t events = 0;
  uint64_t bytes = 0;  // decompressed bytes read
  bool gzip = false;
  bool bare_array = false;  // the file is `[ ... ]` rather than `{"traceEvents": [...]}`
};

struct TraceReadOptions {
  /// Stop after this many event errors (each becomes a diagnostic).
  size_t max_errors = 20;
};

using EventCallback = std::function<std::optional<EventError>(const RawEvent&)>;

/// Reads `path` (plain or .gz; detected from the content), calling `on_event` for every event.
/// Returns the header, or the located diagnostics (unreadable file, bad or truncated JSON,
/// events the callback rejected, a file with no `traceEvents`).
Expected<TraceHeader> read_trace(const std::string& path, const EventCallback& on_event,
                                 const TraceReadOptions& opt = {});

/// Exact nanoseconds of a decimal microsecond text ("12.345" -> 12345, "7" -> 7000, "1e3"
/// -> 1000000). nullopt if it is not a number.
std::optional<int64_t> us_text_to_ns(std::string_view text);

}  // namespace stretto::traces
