#pragma once
// Limits that keep hostile or mistaken input from crashing or exhausting the machine
// (issue 14): bounded file reads, bounded JSON nesting, a cap on the number of diagnostics
// and on the length of the echoed source line, and checked arithmetic on user sizes.
//
// Every limit is a refusal with a located, actionable diagnostic (exit code 2 in the CLI),
// issued before any large allocation.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stretto/support/diag.h"

namespace stretto {

/// Deepest JSON nesting accepted (objects and arrays). Plans nest about 6 deep.
inline constexpr int kMaxJsonDepth = 256;
/// Diagnostics shown (and kept) per input; the rest are counted ("... and 9,950 more").
inline constexpr size_t kMaxDiagnostics = 50;
/// Longest echoed source line; longer lines are shown as a window around the column.
inline constexpr size_t kMaxEchoedLine = 320;
/// Default largest input file (plan, profile table, torch CSV): 256 MiB.
inline constexpr uint64_t kDefaultMaxInputBytes = uint64_t{256} << 20;

/// The largest input file read: the STRETTO_MAX_INPUT_BYTES environment variable (bytes, with
/// an optional K/M/G suffix) or set_max_input_bytes(), else kDefaultMaxInputBytes.
uint64_t max_input_bytes();
/// Overrides max_input_bytes() for this process (the CLI's --max-input-size).
void set_max_input_bytes(uint64_t bytes);

/// Reads a whole input file: "-" reads standard input. Refuses (with a diagnostic naming
/// `what`, e.g. "plan", "cost table") what is not a regular file (a FIFO, a device such as
/// /dev/zero, a directory) and anything larger than max_input_bytes(), without reading more
/// than the limit.
Expected<std::string> read_input_file(const std::string& path, std::string_view what);

/// Keeps the first `cap` diagnostics and, when there were more, appends one note
/// "... and N more errors (not shown)".
Diagnostics cap_diagnostics(Diagnostics ds, size_t cap = kMaxDiagnostics);

/// `s` safe to print on a terminal: control characters (ESC, CR, BEL... and the C1 controls
/// in UTF-8) as \xNN escapes, so that a name read from a file cannot move the cursor, recolour
/// or retitle the terminal. Newlines and tabs are kept when `keep_layout`.
std::string printable(std::string_view s, bool keep_layout = false);

/// A window of at most kMaxEchoedLine bytes of `line` around 1-based column `col`, with "..."
/// where it was cut; `col` is updated to the caret's column in the window. Lines no longer
/// than the limit come back unchanged.
std::string window_line(std::string_view line, uint32_t& col);

/// True when `text` starts (after whitespace) with '{' or '[': only such files have their
/// lines echoed in diagnostics (a cost table path that names /etc/passwd must not print it).
bool looks_like_json(std::string_view text);

/// Byte offset of the first bracket that opens nesting level `max_depth` + 1 in JSON text
/// (strings skipped), or nullopt. Run before parsing: deep nesting would exhaust the stack.
std::optional<size_t> find_excess_nesting(std::string_view text, int max_depth = kMaxJsonDepth);

/// Parses "1.5G", "512M", "64K", "1000" (bytes). nullopt on a malformed value.
std::optional<uint64_t> parse_byte_size(std::string_view s);

/// "1.23 GiB", "456 MiB", "12 KiB", "17 B".
std::string human_bytes(double bytes);

/// Checked arithmetic on user sizes: nullopt on overflow of int64.
std::optional<int64_t> checked_mul(int64_t a, int64_t b);
std::optional<int64_t> checked_add(int64_t a, int64_t b);

}  // namespace stretto
