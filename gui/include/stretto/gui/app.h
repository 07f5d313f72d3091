#pragma once
// The explorer's state and its frame function. Everything here is backend-free: draw_app()
// only calls ImGui, so tests drive it headless (ImGui without a window) with injected input,
// and the GLFW window (window.h) is a thin loop around it.
//
// Panels: Plan (open/save, builder and parameters, directives, order grid, JSON text,
// diagnostics), Timeline, Memory, Numbers (metrics, devices, selection statistics, compare),
// Help. Every simulation goes through sim::Session on the worker thread.

#include <imgui.h>

#include <array>
#include <cfloat>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "stretto/gui/document.h"
#include "stretto/gui/search.h"
#include "stretto/gui/timeline.h"
#include "stretto/gui/worker.h"
#include "stretto/sim/inspect.h"



namespace stretto::gui {

struct Rect {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  float cx() const { return (x0 + x1) * 0.5f; }
  float cy() const { return (y0 + y1) * 0.5f; }
};

/// One scripted UI action (script.h parses them from text).
struct Action {
  std::string verb;               // open, set, click, type, zoom, fit, pin, wait, frames, ...
  std::vector<std::string> args;  // verb's arguments
  int line = 0;                   // in the script file, for messages
};

/// (PP, MB, PASS) -> first start, last end of a logical op's compute ops (over every device).
using Spans = std::map<std::tuple<int, int, int>, std::pair<SimTime, SimTime>>;
/// The same per device: (device, PP, MB, PASS) -> first start, last end on that device.
using DeviceSpans = std::map<std::tuple<int, int, int, int>, std::pair<SimTime, SimTime>>;
/// Spans over every device: each logical op's first start and last end among its devices.
Spans merge_devices(const DeviceSpans& d);

/// A measured (or exported) Chrome trace opened against the prediction.
struct Measured {
  std::string path;
  Timeline timeline;  // lanes per (process = device, thread = stream); Op::task = slice index
  /// (process, PP, MB, PASS) -> first start, last end of its compute slices (from args.tags),
  /// and the same over every process.
  DeviceSpans device_spans;
  Spans spans;
  SimTime begin = 0, end = 0;  // first slice start in the file; last slice end (shown times)
  size_t skipped = 0;
};
/// Builds lanes and logical spans from a trace file (traces::read_chrome_trace). Profilers'
/// clocks start anywhere: the trace's first slice is placed at `first_start` (the prediction's
/// first op start), so a trace `stretto export chrome` wrote keeps its times.
Expected<Measured> load_measured(const std::string& path, SimTime first_start = 0);
/// (device, PP, MB, PASS) -> first start, last end of a simulated step's compute ops.
DeviceSpans device_spans(const Snapshot& s);
/// (PP, MB, PASS) -> the same over every device.
Spans logical_spans(const Snapshot& s);

/// One row of the Compare table: a logical op (PP, MB, PASS) in the baseline (s0, e0) and now
/// (s1, e1); -1 where it is absent.
struct CompareRow {
  int pp, mb, pass;
  SimTime s0, e0, s1, e1;
  bool both() const { return e0 >= 0 && e1 >= 0; }
  SimTime delta() const { return both() ? e1 - e0 : 0; }
};
/// Rows aligned by (PP, MB, PASS): the ops in both first, by |end delta| (largest first),
/// then the new and the gone ones.
std::vector<CompareRow> compare_rows(const Spans& now, const Spans& base);

/// How one device's logical ops differ between the reference (pinned baseline or measured
/// trace) and now, for its difference lane: its rows (compare_rows of that device's spans) and
/// how many start later or earlier, run longer or shorter (end - start), are only in the
/// reference (gone) or only now (added).
struct DeviceDiff {
  int device = 0;
  std::vector<CompareRow> rows;
  size_t later = 0, earlier = 0, longer = 0, shorter = 0, gone = 0, added = 0;
  SimTime max_end_delta = 0;  // the end delta of the largest magnitude, signed
  bool same() const { return later + earlier + longer + shorter + gone + added == 0; }
};
/// One entry per device that has logical ops in either run, by device id.
std::vector<DeviceDiff> device_diffs(const DeviceSpans& now, const DeviceSpans& ref);

/// One row of the Compare tab's metric table (Numbers > Compare with a pinned baseline): the
/// texts shown. `baseline` and `delta` are empty without a baseline.
struct MetricRow {
  std::string metric, now, baseline, delta;
};
/// The metric table of `now` against `base` (null: no baseline): step time, bubble, exposed
/// communication per device and summed, MFU, tokens/s, peak memory, devices, events,
/// simulation wall.
std::vector<MetricRow> metric_rows(const Snapshot& now, const Snapshot* base);

/// The search field and what it matches in the current result (App::update_search); the
/// matching runs on the search worker's thread (search.h).
struct SearchState {
  std::string query;
  std::string for_query;                   // the query `tasks` was computed for
  std::weak_ptr<const Snapshot> for_snap;  // and the result
  std::string asked_query;                 // the query the worker was last given
  std::weak_ptr<const Snapshot> asked_snap;  // and the result
  SearchWorker worker;
  std::vector<uint32_t> tasks;                     // matching drawn ops, by start time
  std::vector<std::vector<uint32_t>> lane_prefix;  // per lane: matching ops among [0, i)
  bool active() const { return !for_query.empty(); }
  /// The worker has not answered the query in the field yet.
  bool pending() const { return worker.busy(); }
  /// Matches among ops [first, last] of lane `lane`.
  uint32_t in_lane(uint32_t lane, uint32_t first, uint32_t last) const {
    const auto& p = lane_prefix[lane];
    return p[last + 1] - p[first];
  }
};

struct TimelineState {
  double t0 = 0, ns_per_px = 0;  // ns_per_px 0: fit on the next frame
  bool fitted = true;            // showing the whole step: a new result re-fits
  float width = 0;
  std::vector<char> collapsed;  // per device
  double cursor = -1;           // time under the mouse (ns), -1 none; shared with Memory
  double range_t0 = -1, range_t1 = -1;  // selected time range (drag with the right button)
  bool dragging_range = false;
  int lane = -1;  // selected lane (click its name): statistics of that lane only
  bool show_bubbles = true, show_critical = false, show_flows = true, show_baseline = true;
  bool one_lane_per_device = false;  // collapse: each device one row (its compute lane's passes)
  int boxes_drawn = 0;  // last frame, for tests and the benchmark
  int lanes_drawn = 0;
  std::vector<std::string> labels;  // text labels drawn last frame (tests read them)
  int devices_drawn = 0;            // device rows (headers) on screen last frame
  int reference_rows_drawn = 0;     // baseline (or measured) rows under current lanes
  bool show_diff = true;            // a difference lane under each device (with a reference)
  int diff_lanes_drawn = 0;         // difference lanes on screen last frame
  std::string diff_tooltip;         // the first line of a difference lane's tooltip last frame
};

struct Selection {
  uint32_t task = UINT32_MAX;
  bool valid() const { return task != UINT32_MAX; }
};

struct App {
  App();
  ~App();

  // ---- the document and its simulation
  Document doc;
  SimWorker worker;
  uint64_t submitted = 0;                  // generation of the latest submission
  uint64_t submitted_rev = UINT64_MAX;     // document revision it was made from
  // What the engine runs as one task (the toolbar's "Pass granularity" box, the script's
  // `granularity op|pass`; `simulate --granularity`); a change re-simulates
  sim::Granularity granularity = sim::Granularity::kOp;
  sim::Granularity submitted_granularity = sim::Granularity::kOp;
  std::shared_ptr<const Snapshot> current;  // last good result
  std::shared_ptr<const Snapshot> baseline;  // pinned for comparison
  std::shared_ptr<const Measured> measured;   // a trace opened against the prediction
  Diagnostics diags;        // of the latest finished simulation (errors when it failed)
  /// diags[i]'s stable code (sim/warnings.h: "unused-devices", ...), "" when it has none; the
  /// code `simulate` and the Python module give the same warning.
  std::vector<std::string> diag_codes;
  bool last_failed = false;
  uint64_t shown_generation = 0;
  double last_edit_to_result_ms = 0;
  std::string status;       // one line: saved, exported, cannot read ...
  std::string plan_status;  // the Plan panel's result line, as drawn last frame

  // ---- UI state
  std::string path_field;
  std::deque<std::string> recent;
  TimelineState tl;
  SearchState search;
  Selection sel;
  int memory_device = 0;
  bool memory_to_peak = false;  // scale the memory plot to the peak instead of the capacity
  std::string json_edit;            // the JSON editor's buffer
  uint64_t json_edit_rev = UINT64_MAX;
  bool show_help = false, show_demo = false;
  float font_scale = 1.0f;
  int frame = 0;
  std::map<std::string, Rect> hooks;  // widget name -> rect, recorded each frame
  bool tooltip_shown = false;         // a tooltip was drawn last frame
  std::vector<std::string> dropped;   // paths dropped onto the window this frame
  std::string screenshot_request;     // set by the UI or a script; the window writes it
  std::string critical_for;           // text of the snapshot critical_ was computed for
  std::vector<char> critical;         // per task: on the critical path
  std::vector<sim::CriticalStep> critical_steps;
  /// A device's category curve of one snapshot, cached with its peak (memory_curve).
  struct MemoryCurve {
    std::weak_ptr<const Snapshot> snap;
    int device = -1;
    std::vector<sim::CategorySample> samples;
    size_t peak = 0;  // index of the sample with the largest total (valid when samples are)
  };
  mutable MemoryCurve mem_cache, base_mem_cache;
  /// What the Memory panel drew last frame, per run (0 the current result, 1 the baseline):
  /// the device shown, and the categories that filled at least one pixel column.
  struct MemoryDrawn {
    int device = -1;
    bool baseline = false;  // the baseline's plot was drawn
    std::array<std::array<bool, sim::kMemCategories>, 2> categories{};
    std::array<bool, 2> reserved_line{};  // each run's reserved-bytes line was drawn
  };
  MemoryDrawn memory_drawn;
  /// The Memory panel's hover tooltip last frame (shown false when none was): the device, the
  /// time under the cursor, each category's bytes at that time in the current run and in the
  /// baseline (with one pinned), and the tooltip's text: a title, then a table of rows (the
  /// total, then each category) with the current run's bytes and the baseline's.
  struct MemoryTooltip {
    bool shown = false, baseline = false;
    int device = -1;
    double t = 0;
    std::array<std::array<int64_t, sim::kMemCategories>, 2> bytes{};  // [0] now, [1] baseline
    std::string title;
    std::vector<std::array<std::string, 3>> rows;  // name, now, baseline ("" without one)
  };
  MemoryTooltip memory_tooltip;

  /// Panel state and caches derived from a snapshot (panels_view.cpp).
  struct PanelCache;
  std::shared_ptr<PanelCache> panel_cache;

  // ---- frame costs measured by the window (ms): UI build (NewFrame..Render) and GPU (draw +
  // glFinish, only in --frames runs)
  std::vector<float> frame_ui_ms, frame_gl_ms;

  // ---- automation
  std::deque<Action> script;
  int script_wait_frames = 0;
  int click_phase = 0;
  /// Automation (--frames): the real mouse is ignored and the scripted one leaves the window
  /// after each action, so that screenshots carry no tooltip or hover; `hover` holds it.
  bool no_hover = false;
  bool hover_hold = false;
  ImVec2 script_mouse{-FLT_MAX, -FLT_MAX};  // where the script's mouse is
  std::string script_error;
  bool quit = false;

  /// Opens a plan file (recent list updated); a file that cannot be read leaves the current
  /// one and sets `status`.
  bool open(const std::string& path);
  /// Starts an untitled plan from text.
  void open_text(std::string text, std::string name = {});
  /// Submits the document if it changed since the last submission; takes a finished result.
  void pump();
  /// True when the result shown is older than the document (an edit is being simulated or
  /// failed).
  bool stale() const;
  /// Opens a Chrome trace (measured, or exported) to compare with the prediction; on error
  /// `status` and `diags` say why and the previous one stays.
  bool open_trace(const std::string& path);
  /// Pins the current result as the comparison baseline (or clears it).
  void pin_baseline(bool on = true);
  /// Zooms the timeline to [t0, t1) ns.
  void zoom(double t0, double t1);
  void fit() {
    tl.ns_per_px = 0;
    tl.fitted = true;
  }
  /// Writes a Chrome trace of the current result.
  bool export_trace(const std::string& path, std::string* error) const;
  /// Writes the current plan's pipeline schedule as torch's CSV action table (place + split +
  /// order directives read back by schedule_from_directives); error when it is not one.
  bool export_torch_csv(const std::string& path, std::string* error) const;
  /// What the UI shows, as JSON (--dump-state).
  std::string state_json() const;
  /// Records the last item's rect under `name` (for scripts and tests).
  void hook(const std::string& name);
  /// Category curve of a device of the current result (cached, with its peak).
  const MemoryCurve& memory_curve_of(int device) const;
  const std::vector<sim::CategorySample>& memory_curve(int device) const { return memory_curve_of(device).samples; }
  /// The same of the pinned baseline (empty without one, or when it is the current result).
  const MemoryCurve& baseline_memory_curve_of(int device) const;
  const std::vector<sim::CategorySample>& baseline_memory_curve(int device) const {
    return baseline_memory_curve_of(device).samples;
  }
  /// Asks the search worker for the matches when the query or the result changed, and takes
  /// its answer when it has one (never waits). Matches are only kept for the current result.
  void update_search();
  /// Critical path flags of the current result (computed on first use).
  void ensure_critical();
};

/// Builds one frame of the whole UI (between ImGui::NewFrame and ImGui::Render).
void draw_app(App& app);
/// Applies scripted actions due this frame, writing injected input into `io` (call after the
/// platform backend's NewFrame and before ImGui::NewFrame). Returns false when the script
/// failed (app.script_error says why).
bool step_script(App& app, ImGuiIO& io);
/// Keyboard shortcuts (Ctrl+O/S/Z/Y, F fit, +/- zoom, arrows pan, P pin, F1 help).
void handle_shortcuts(App& app);

// Panels (app.cpp, panels_*.cpp).
void draw_plan_panel(App& app);
void draw_timeline_panel(App& app);
void draw_memory_panel(App& app);
void draw_numbers_panel(App& app);
void draw_help_window(App& app);

/// Count, total and longest duration of the ops of each kind (OpClass) that overlap [a, b),
/// over every lane or only lane `lane` (>= 0).
struct KindStat {
  size_t count = 0;
  SimTime total = 0, max = 0;
};
std::array<KindStat, static_cast<size_t>(OpClass::kCount)> kind_stats(const Timeline& tl, double a,
                                                                      double b, int lane = -1);

/// Time with a unit that fits its size: "850 ns", "12.4 us", "3.21 ms", "1.502 s".
std::string format_time(double ns);
std::string format_bytes(double bytes);
/// A ruler tick at `ns` for ticks `step` ns apart: one unit chosen by the larger of the two
/// ("0", "20 ms", "100.25 ms"), with the decimals the step needs.
std::string format_tick(double ns, double step);

}  // namespace stretto::gui
