// `stretto simulate PLAN [--trace FILE] [--format table|json] [--critical-path[=full]] [--fold-replicas]
//   [--granularity op|pass]`
// `stretto export chrome PLAN [-o FILE]`
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "commands.h"
#include "output.h"
#include "timeline.h"
#include "usage.h"
#include "warnings.h"
#include "stretto/sim/coverage.h"
#include "stretto/sim/critical_path.h"
#include "stretto/sim/metrics_json.h"
#include "stretto/sim/pipeline_metrics.h"
#include "stretto/sim/session.h"
#include "stretto/traces/chrome_trace.h"

namespace stretto::cli {

namespace {

double ms(engine::SimTime ns) {
  return static_cast<double>(ns) / 1e6;
}
std::string gib(int64_t b) {
  return fmt::format("{:.2f}", static_cast<double>(b) / (1 << 30));
}

std::string result_table(const compiler::CompiledPlan& cp, const sim::Result& r, bool color,
                         const sim::PipelineMetrics& pm) {
  std::string o;
  const char* bold = color ? "\033[1m" : "";
  const char* red = color ? "\033[1;31m" : "";
  const char* off = color ? "\033[0m" : "";
  o += fmt::format("plan           {}\n", cp.plan.file);
  o += fmt::format("{}step time      {:.3f} ms{}\n", bold, ms(r.step_time), off);
  o += fmt::format(
      "bubble ratio   {:.2f} %   (time devices do no compute / (devices x step time))\n",
      100 * r.bubble_ratio);
  o += fmt::format(
      "pipeline bubble {:.2f} %  (waiting for the pipeline between each computing device's "
      "first and last op / those spans)\n",
      100 * pm.pipeline_bubble_ratio);
  o += fmt::format(
      "exposed comm   {:.3f} ms per device  (communication no compute hides; {:.3f} ms summed "
      "over devices), of which TP/EP/DP collectives {:.3f} ms\n",
      pm.exposed_comm_ms_per_device, ms(r.exposed_comm), pm.exposed_collectives_ms_per_device);
  o += fmt::format(
      "MFU            {:.1f} %   ({:.3g} model FLOPs, peak {:.0f} TFLOP/s x {} devices)\n",
      100 * r.mfu, r.model_flops,
      cp.plan.cluster.device.peak_tflops * cost::dtype_peak_factor(cp.model.dtype),
      r.devices.size());
  o += fmt::format("throughput     {:.0f} tokens/s\n", r.tokens_per_s);
  o += fmt::format(
      "simulated      {} events in {:.1f} ms (build {:.1f}, prepare {:.1f}, run {:.1f}, metrics "
      "{:.1f}){}\n\n",
      r.events, r.sim_wall_ms, r.phases.build_ms, r.phases.prepare_ms, r.phases.run_ms,
      r.phases.metrics_ms, r.folded ? " (identical replicas folded)" : "");
  if (const auto missing = compiler::unmodelled_effects(cp); !missing.empty()) {
    o.pop_back();  // the effects close the header block
    for (size_t i = 0; i < missing.size(); ++i)
      o += fmt::format("{}{}\n", i ? "               " : "not modelled   ", missing[i]);
    o += "\n";
  }
  // worst device: largest bubble (only when some device has one), then largest peak memory
  size_t worst = 0, worst_mem = 0, worst_reserved = 0;
  for (size_t i = 0; i < r.devices.size(); ++i) {
    if (r.devices[i].bubble > r.devices[worst].bubble) worst = i;
    if (r.devices[i].peak_memory > r.devices[worst_mem].peak_memory) worst_mem = i;
    if (r.devices[i].peak_reserved > r.devices[worst_reserved].peak_reserved) worst_reserved = i;
  }
  if (!r.devices.empty()) {
    const auto& d = r.devices[worst_reserved];
    o += fmt::format(
        "reserved       {:.2f} GiB on device {}  (held by the CUDA caching allocator: its "
        "allocated peak {:.2f} GiB, rounding and cached blocks {:.2f} GiB)\n",
        static_cast<double>(d.peak_reserved) / (1 << 30), d.id,
        static_cast<double>(d.peak_memory) / (1 << 30),
        static_cast<double>(d.peak_reserved - d.peak_memory) / (1 << 30));
    size_t fullest = 0;
    for (size_t i = 0; i < r.devices.size(); ++i)
      if (r.devices[i].peak_device() > r.devices[fullest].peak_device()) fullest = i;
    const auto& f = r.devices[fullest];
    o += fmt::format(
        "device total   {:.2f} GiB on device {}  (as nvidia-smi shows it: reserved {:.2f} GiB, "
        "CUDA context {:.2f} GiB, NCCL buffers {:.2f} GiB; capacity is judged on it)\n\n",
        static_cast<double>(f.peak_device()) / (1 << 30), f.id,
        static_cast<double>(f.peak_reserved) / (1 << 30),
        static_cast<double>(f.cuda_context) / (1 << 30),
        static_cast<double>(f.nccl_buffers) / (1 << 30));
  }
  if (r.devices.empty() || r.devices[worst].bubble <= 0) worst = SIZE_MAX;
  o += fmt::format("{:>9}  {:>10}  {:>10}  {:>7}  {:>10}  {:>9}  {:>7} {:>7} {:>7} {:>7} {:>7}\n",
                   "device", "busy ms", "bubble ms", "bubble", "exp.comm", "peak GiB", "params",
                   "grads", "optim", "activ", "other");
  o += fmt::format(
      "{:>9}  {:>10}  {:>10}  {:>7}  {:>10}  {:>9}  {}\n", "", "(compute)", "(idle)",
      "of step", "(unhidden)", "", "at the peak: weights, gradients, optimizer, activations");
  for (size_t i = 0; i < r.devices.size();) {
    const auto& d = r.devices[i];
    size_t j = i + 1;
    auto same = [&](const sim::DeviceMetrics& e) {
      return e.busy == d.busy && e.exposed_comm == d.exposed_comm &&
             e.peak_memory == d.peak_memory && e.breakdown == d.breakdown;
    };
    while (j < r.devices.size() && same(r.devices[j]) && j != worst && j != worst_mem) ++j;
    // (worst == SIZE_MAX: no device idles, no mark)
    if (i == worst || i == worst_mem) j = i + 1;
    std::string id =
        j - i > 1 ? fmt::format("{}-{}", d.id, r.devices[j - 1].id) : std::to_string(d.id);
    int64_t other = d.breakdown[4] + d.breakdown[5] + d.breakdown[6];
    std::string mark;
    if (i == worst) mark += " \u25c0 largest bubble";
    if (i == worst_mem) mark += " \u25c0 peak memory";
    if (d.over_capacity)
      mark += fmt::format(" \u26a0 exceeds {:.0f} GiB", cp.plan.cluster.device.memory_GiB);
    const char* c = (i == worst || d.over_capacity) ? red : "";
    o += fmt::format(
        "{}{:>9}  {:>10.3f}  {:>10.3f}  {:>6.1f}%  {:>10.3f}  {:>9}  {:>7} {:>7} {:>7} {:>7} "
        "{:>7}{}{}\n",
        c, id, ms(d.busy), ms(d.bubble), 100 * d.bubble_ratio, ms(d.exposed_comm),
        gib(d.peak_memory), gib(d.breakdown[0]), gib(d.breakdown[1]), gib(d.breakdown[2]),
        gib(d.breakdown[3]), gib(other), mark, *c ? off : "");
    i = j;
  }
  return o;
}

// A trace larger than this gets the hints to write less.
constexpr uint64_t kLargeTraceBytes = uint64_t{100} << 20;

bool ends_with_gz(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

std::string human_bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (uint64_t{1} << 20)) return fmt::format("{:.0f} MiB", static_cast<double>(b) / (1 << 20));
  return fmt::format("{:.0f} KiB", static_cast<double>(b) / 1024);
}

// "0-7,64" -> a mask of num_devices entries; a diagnostic on a malformed list or an id out of
// range.
Expected<std::vector<char>> parse_device_list(const std::string& text, int num_devices) {
  std::vector<char> mask(static_cast<size_t>(std::max(0, num_devices)), 0);
  auto bad = [&](std::string why) {
    Diagnostic d;
    d.loc.file = "--trace-devices";
    d.message = fmt::format("invalid device list '{}': {}", text, why);
    d.hint = fmt::format("e.g. 0-7,64 (devices 0 to {})", num_devices - 1);
    return fail(std::move(d));
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t dash = item.find('-');
    long long lo = 0, hi = 0;
    try {
      size_t used = 0;
      lo = std::stoll(item.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? item.size() : dash)) return bad("not a number");
      hi = lo;
      if (dash != std::string::npos) {
        hi = std::stoll(item.substr(dash + 1), &used);
        if (used != item.size() - dash - 1) return bad("not a number");
      }
    } catch (const std::exception&) {
      return bad(fmt::format("'{}' is not a device or a range", item));
    }
    if (lo < 0 || hi < lo || hi >= num_devices)
      return bad(fmt::format("'{}' is outside devices 0-{}", item, num_devices - 1));
    for (long long d = lo; d <= hi; ++d) mask[static_cast<size_t>(d)] = 1;
    pos = end + 1;
  }
  return mask;
}

// "START:END" in ms ("10:", ":50" open-ended) -> [begin_ns, end_ns).
bool parse_window(const std::string& text, engine::SimTime& begin, engine::SimTime& end) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return false;
  try {
    const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
    begin = a.empty() ? 0 : static_cast<engine::SimTime>(std::stod(a) * 1e6);
    end = b.empty() ? -1 : static_cast<engine::SimTime>(std::stod(b) * 1e6);
  } catch (const std::exception&) {
    return false;
  }
  return begin >= 0 && (end < 0 || end > begin);
}

}  // namespace

void add_simulate_commands(CLI::App& app, CLI::App& export_app, Commands& out) {
  struct Opts {
    std::string plan, trace, format, output, trace_devices, trace_window, critical;
    std::string granularity = "op";
    bool fold = false, timeline = false, timeline_streams = false;
    bool fail_over_capacity = false;
    int timeline_width = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("simulate", "Simulate one training step of a plan");
  cmd->add_option("PLAN", o->plan, "Plan file (JSON); - reads it from standard input")->required();
  cmd->add_option("--trace", o->trace,
                  "Write a Chrome/Perfetto trace to FILE (gzip-compressed when FILE ends in .gz)");
  cmd->add_option("--trace-devices", o->trace_devices,
                  "Only these devices in the trace and the timeline, e.g. 0-7,64");
  cmd->add_option("--trace-window", o->trace_window,
                  "Only slices overlapping START:END (ms) in the trace, e.g. 0:50 or 120:");
  cmd->add_option("--format", o->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_flag("--critical-path{summary}", o->critical,
                "Report what sets the step time: a summary (time by stage x pass x kind, the "
                "20 longest segments, what the path waited on); --critical-path=full lists "
                "every op")
      ->check(CLI::IsMember({"summary", "full"}));
  cmd->add_flag("--fold-replicas", o->fold,
                "Simulate one of each group of identical data-parallel replicas");
  cmd->add_option("--granularity", o->granularity,
                  "op (default: every op is an engine task) or pass (a region pass's "
                  "consecutive ops are one task: equal under fixed costs, faster, approximate "
                  "under interference; docs/semantics.md)")
      ->check(CLI::IsMember({"op", "pass"}));
  cmd->add_flag("--timeline", o->timeline,
                "Draw the step in the terminal: a row per device, time left to right");
  cmd->add_flag("--timeline-streams", o->timeline_streams,
                "With --timeline: a row per device and stream");
  cmd->add_option("--timeline-width", o->timeline_width,
                  "Columns of the timeline (default: the terminal's width)")
      ->check(CLI::Range(10, 10000));
  cmd->add_flag("--fail-over-capacity", o->fail_over_capacity,
                "Exit with code 3 when a device's memory peak exceeds its capacity");
  add_limit_options(cmd);
  out.push_back(
      {cmd, [o] {
         const bool tty_err = isatty(STDERR_FILENO) != 0;
         // Outputs first: an unwritable --trace is reported before any simulation.
         std::optional<OutputFile> trace_out;
         if (!o->trace.empty()) {
           auto f = OutputFile::open(o->trace, {o->plan});
           if (!f) return report(f.error());
           trace_out.emplace(std::move(*f));
         }
         traces::ChromeTraceOptions topt;
         if (!o->trace_window.empty() &&
             !parse_window(o->trace_window, topt.begin_ns, topt.end_ns)) {
           Diagnostic d;
           d.loc.file = "--trace-window";
           d.message = fmt::format("invalid time window '{}'", o->trace_window);
           d.hint = "START:END in ms, e.g. 0:50, 120: (to the end) or :10";
           return report({d});
         }
         if (tty_err) std::fprintf(stderr, "compiling %s ...\r", o->plan.c_str());
         auto s = sim::Session::open(o->plan);
         if (tty_err) std::fprintf(stderr, "%*s\r", 70, "");
         if (!s) return report(s.error());
         if (!o->trace_devices.empty()) {
           auto mask = parse_device_list(o->trace_devices, s->compiled().num_devices);
           if (!mask) return report(mask.error());
           topt.devices = std::move(*mask);
         }
         sim::SimOptions so;
         so.fold_replicas = o->fold;
         so.granularity = *sim::parse_granularity(o->granularity);  // (checked by the option)
         if (tty_err) {
           // one status line, rewritten in place when the phase or the whole percent changes
           so.progress = [plan = o->plan, last = std::string()](std::string_view phase,
                                                                double fraction) mutable {
             std::string line = phase == "simulating" ? fmt::format("simulating {} ... {:3.0f}%",
                                                                    plan, 100.0 * fraction)
                                                      : fmt::format("{} {} ...", phase, plan);
             if (line == last) return;
             std::fprintf(stderr, "%-*s\r", 70, line.c_str());
             last = std::move(line);
           };
         }
         so.memory_curves = !o->trace.empty();  // only a trace shows them
         auto r = s->simulate(so);
         if (tty_err) std::fprintf(stderr, "%*s\r", 70, "");
         if (!r) return report(r.error());
         print_warnings(s->compiled(), *r, o->fold);
         std::vector<sim::CriticalStep> path;
         const bool critical = !o->critical.empty(), full_path = o->critical == "full";
         if (critical) path = sim::critical_path(s->compiled(), *r);
         if (trace_out) {
           // Say how big the trace will be before writing it, and how to make it smaller.
           const traces::ChromeTraceSize z = traces::estimate_chrome_trace(s->compiled(), *r, topt);
           const bool gz = ends_with_gz(o->trace);
           std::string note = fmt::format("trace {}: {} events, about {}{}", o->trace, z.events(),
                                          human_bytes(z.approx_bytes),
                                          gz ? " before gzip compression" : "");
           if (z.approx_bytes >= kLargeTraceBytes)
             note += fmt::format(
                 "; --trace-devices 0-7 (some devices) or --trace-window START:END (ms) write "
                 "less{}",
                 gz ? "" : ", and a path ending in .json.gz compresses it (Perfetto opens it)");
           std::fprintf(stderr, "%s\n", note.c_str());
           if (!traces::write_chrome_trace(trace_out->file(), s->compiled(), *r, topt, gz)) {
             trace_out->write("");  // marks nothing; commit() reports the failed write
           }
           if (!trace_out->commit()) return 2;
         }
         const sim::PipelineMetrics pm = sim::pipeline_metrics(s->compiled(), *r);
         const std::string f = o->format.empty() ? (stdout_is_tty() ? "table" : "json") : o->format;
         std::string text;
         if (f == "json") {
           text = sim::simulate_json(s->compiled(), *r, pm, critical ? &path : nullptr, full_path)
                      .dump(2) +
                  "\n";
         } else {
           text = result_table(s->compiled(), *r, stdout_is_tty(), pm);
           if (const auto coverage = sim::profiled_coverage(s->compiled()))
             text += "\n" + sim::coverage_text(*coverage, "");
           if (full_path)
             text += sim::critical_path_full_text(path);
           else if (critical)
             text += sim::critical_path_summary_text(
                 sim::summarize_critical_path(s->compiled(), *r, path));
           if (!o->trace.empty())
             text += fmt::format("\ntrace written to {} (open it in https://ui.perfetto.dev)\n",
                                 o->trace);
         }
         if (o->timeline) {
           TimelineOptions t;
           t.per_stream = o->timeline_streams;
           t.devices = topt.devices;
           t.width = o->timeline_width > 0 ? o->timeline_width : terminal_width() - 14;
           t.scale_to_passes = o->timeline_width <= 0;
           // With JSON on stdout the drawing goes to stderr (people read it, machines the JSON).
           if (f == "json") {
             t.color = isatty(STDERR_FILENO) != 0;
             std::fputs(timeline(s->compiled(), *r, t).c_str(), stderr);
           } else {
             t.color = stdout_is_tty();
             text += "\n" + timeline(s->compiled(), *r, t);
           }
         }
         if (!write_output("", text)) return 2;
         if (o->fail_over_capacity)
           for (const auto& d : r->devices)
             if (d.over_capacity) {
               std::fprintf(stderr,
                            "error: device %d's memory peak (%.2f GiB with the allocator's "
                            "cache, the CUDA context and NCCL's buffers) exceeds its %.0f GiB "
                            "(--fail-over-capacity)\n",
                            d.id, static_cast<double>(d.peak_device()) / (1 << 30),
                            s->compiled().plan.cluster.device.memory_GiB);
               return 3;
             }
         return 0;
       }});
  auto* ex =
      export_app.add_subcommand("chrome", "Simulate and write only the Chrome/Perfetto trace");
  ex->add_option("PLAN", o->plan, "Plan file (JSON); - reads it from standard input")->required();
  ex->add_option("-o,--output", o->output, "Output file (default: stdout)");
  add_limit_options(ex);
  out.push_back({ex, [o] {
                   auto f = OutputFile::open(o->output, {o->plan});
                   if (!f) return report(f.error());
                   auto s = sim::Session::open(o->plan);
                   if (!s) return report(s.error());
                   auto r = s->simulate();
                   if (!r) return report(r.error());
                   if (!traces::write_chrome_trace(f->file(), s->compiled(), *r, {},
                                                   ends_with_gz(o->output)))
                     f->write("");  // commit() reports the failed write
                   return f->commit() ? 0 : 2;
                 }});
}

}  // namespace stretto::cli
