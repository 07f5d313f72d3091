#pragma once
// Scripted UI actions (stretto gui --script FILE): one action per line, '#' starts a comment.
//
//   open PATH               open a plan file (as the path field + Open button do)
//   open-trace PATH         open a Chrome trace (measured, or exported) against the prediction
//   set POINTER VALUE       set a plan field (JSON pointer, JSON value; a bare word is a string)
//   click WIDGET            click a named widget (mouse moved there, pressed, released)
//   rclick WIDGET           the same with the right button (splits an order grid group)
//   hover WIDGET            move the mouse over a widget (opens a submenu, shows a tooltip)
//   key [ctrl+][shift+]K    press a key: one character (F, ., z, ...) or Esc, Enter, Left,
//                           Right, F1 (the help window lists the shortcuts)
//   type WIDGET TEXT        click a text/number field, select all, type TEXT, press Enter
//                           (WIDGET is one word: microbatches, memory_device, json, ...)
//   wheel WIDGET N          turn the mouse wheel N notches over a widget (timeline: zoom)
//   drag FROM -> TO         drag one widget onto another (order grid cells); "-> shift"
//                           holds Shift while dropping (groups the cells)
//   zoom T0 T1              show [T0, T1) milliseconds on the timeline
//   range T0 T1             select [T0, T1) milliseconds (as a right-drag does)
//   fit                     show the whole step
//   pin | unpin             pin the current result as the comparison baseline / clear it
//   granularity op|pass     what the engine runs as one task (simulate --granularity)
//   wait                    wait until the latest edit is simulated (its result or its error)
//   frames N                render N more frames
//   undo | redo             one edit back / forward
//   save PATH               write the plan (Save as)
//   export-trace PATH       write a Chrome trace of the current result
//   export-torch-csv PATH   write the schedule as torch's CSV action table
//   screenshot FILE.png     write a PNG of the window after this frame (window mode only)
//   quit                    stop here
// Widget names are those app.hooks records: "path", "open", "microbatches", "microbatches+",
// "microbatches-", "timeline", "memory", "fit", "pin", "tab json", "tab devices", ...

#include <cstdint>
#include <string>
#include <vector>

#include "stretto/gui/app.h"
#include "stretto/support/diag.h"

namespace stretto::gui {

/// The most frames a `frames N` action renders (as `stretto gui --frames`).
inline constexpr long long kMaxScriptFrames = 10000000;
/// The largest script file read (a script is a text of UI actions).
inline constexpr uintmax_t kMaxScriptBytes = uintmax_t{16} << 20;

/// Parses a script; unknown actions and missing arguments are diagnostics (file:line).
Expected<std::vector<Action>> parse_script(const std::string& text, const std::string& file);
Expected<std::vector<Action>> load_script(const std::string& path);

/// ImGui without a window (tests, benchmarks): a context with a built font atlas, a fixed
/// display size and GLFW's key numbering.
class Headless {
 public:
  explicit Headless(float width = 1600, float height = 900);
  ~Headless();
  Headless(const Headless&) = delete;
  Headless& operator=(const Headless&) = delete;
  /// One frame: scripted input, NewFrame, draw_app, Render. Returns the script's status.
  bool frame(App& app);
  /// Runs frames until the script is done (or failed, or `max_frames`); false on failure.
  bool run_script(App& app, int max_frames = 100000);
  ImGuiIO& io();
};

}  // namespace stretto::gui
