// App state, layout, shortcuts and the --dump-state view (see app.h).
#include "stretto/gui/app.h"

#include <fmt/format.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "stretto/gui/torch_export.h"
#include "stretto/traces/chrome_reader.h"
#include "stretto/traces/chrome_trace.h"

namespace stretto::gui {

using plan::Pass;

App::App() = default;
App::~App() = default;

std::string format_time(double ns) {
  const double a = std::fabs(ns);
  if (a < 1e3) return fmt::format("{:.0f} ns", ns);
  if (a < 1e6) return fmt::format("{:.3g} us", ns / 1e3);
  if (a < 1e9) return fmt::format("{:.4g} ms", ns / 1e6);
  return fmt::format("{:.4g} s", ns / 1e9);
}

std::string format_tick(double ns, double step) {
  if (ns == 0) return "0";
  const double a = std::max(std::fabs(ns), step);
  const double unit = a < 1e3 ? 1 : a < 1e6 ? 1e3 : a < 1e9 ? 1e6 : 1e9;
  const char* name = unit == 1 ? "ns" : unit == 1e3 ? "us" : unit == 1e6 ? "ms" : "s";
  // Enough decimals that consecutive ticks differ.
  const int dec = std::clamp(static_cast<int>(std::ceil(-std::log10(step / unit) - 1e-9)), 0, 6);
  return fmt::format("{:.{}f} {}", ns / unit, dec, name);
}

std::string format_bytes(double b) {
  const double a = std::fabs(b);
  if (a < 1024) return fmt::format("{:.0f} B", b);
  if (a < 1024.0 * 1024) return fmt::format("{:.1f} KiB", b / 1024);
  if (a < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", b / 1024 / 1024);
  return fmt::format("{:.2f} GiB", b / 1024 / 1024 / 1024);
}

bool App::open(const std::string& path) {
  std::string err;
  if (!doc.load(path, &err)) {
    status = err;
    return false;
  }
  path_field = path;
  std::erase(recent, path);
  recent.push_front(path);
  if (recent.size() > 10) recent.pop_back();
  sel = {};
  tl.range_t0 = tl.range_t1 = -1;
  fit();
  status = "opened " + path;
  pump();
  return true;
}

void App::open_text(std::string text, std::string name) {
  doc.reset(std::move(text), std::move(name));
  sel = {};
  fit();
  pump();
}

void App::pump() {
  if (submitted_rev != doc.revision() || submitted_granularity != granularity) {
    submitted_rev = doc.revision();
    submitted_granularity = granularity;
    submitted = worker.submit(doc.text(), doc.display_name(), doc.base_dir(), granularity);
  }
  if (auto o = worker.take()) {
    shown_generation = o->generation;
    if (o->snapshot) {
      const bool first = !current;
      current = std::move(o->snapshot);
      last_failed = false;
      if (sel.valid() && sel.task >= current->result.program.tasks.size()) sel = {};
      if (first || tl.fitted) fit();
    } else {
      last_failed = true;
    }
    diags = std::move(o->diags);
    diag_codes = std::move(o->diag_codes);
    diag_codes.resize(diags.size());
    last_edit_to_result_ms = o->wall_ms;
  }
}

bool App::stale() const {
  return submitted_rev != doc.revision() || submitted_granularity != granularity ||
         shown_generation != submitted || last_failed;
}

Expected<Measured> load_measured(const std::string& path, SimTime first_start) {
  auto t = traces::read_chrome_trace(path);
  if (!t) return fail(t.error());
  Measured m;
  m.path = path;
  m.skipped = t->skipped;
  std::map<std::pair<int64_t, int64_t>, uint32_t> lane_of;
  std::map<int64_t, std::vector<uint32_t>> by_pid;
  m.begin = t->slices.empty() ? 0 : t->slices.front().start_ns;
  for (const auto& sl : t->slices) m.begin = std::min(m.begin, sl.start_ns);
  auto classify = [](const traces::TraceSlice& sl, Pass pass) {
    if (sl.cat != "comm") {
      switch (pass) {
        case Pass::kF: return OpClass::kF;
        case Pass::kB: return OpClass::kB;
        case Pass::kBI: return OpClass::kBI;
        case Pass::kBW: return OpClass::kBW;
        default: return OpClass::kCompute;
      }
    }
    auto has = [&](const char* a, const char* b) {
      return sl.name.find(a) != std::string::npos || sl.name.find(b) != std::string::npos;
    };
    if (has("reduce-scatter", "reduce_scatter")) return OpClass::kReduceScatter;
    if (has("all-gather", "all_gather")) return OpClass::kAllGather;
    if (has("all-to-all", "all_to_all")) return OpClass::kAllToAll;
    if (has("all-reduce", "all_reduce")) return OpClass::kAllReduce;
    return OpClass::kSendRecv;
  };
  for (uint32_t i = 0; i < t->slices.size(); ++i) {
    const auto& sl = t->slices[i];
    // Tags: "PP1 MB3 F".
    int pp = plan::kAbsent, mb = plan::kAbsent;
    Pass pass = Pass::kNone;
    std::istringstream ts(sl.tags);
    for (std::string tok; ts >> tok;) {
      if (tok.rfind("PP", 0) == 0) pp = std::atoi(tok.c_str() + 2);
      else if (tok.rfind("MB", 0) == 0) mb = std::atoi(tok.c_str() + 2);
      else if (auto p = plan::parse_pass(tok))
        pass = *p;
    }
    auto [it, fresh] = lane_of.try_emplace({sl.pid, sl.tid}, 0);
    if (fresh) {
      it->second = static_cast<uint32_t>(m.timeline.lanes.size());
      Lane l;
      l.device = static_cast<int>(sl.pid);
      l.stream = static_cast<uint16_t>(sl.tid);
      auto tn = t->thread_names.find({sl.pid, sl.tid});
      l.name = tn != t->thread_names.end() ? tn->second : "tid " + std::to_string(sl.tid);
      m.timeline.lanes.push_back(std::move(l));
      by_pid[sl.pid].push_back(it->second);
    }
    const SimTime s0 = sl.start_ns - m.begin + first_start, e0 = sl.end_ns - m.begin + first_start;
    m.timeline.lanes[it->second].ops.push_back({s0, e0, i, classify(sl, pass)});
    m.end = std::max(m.end, e0);
    if (sl.cat != "comm" && pass != Pass::kNone) {
      auto [sp, nw] = m.device_spans.try_emplace(
          std::make_tuple(static_cast<int>(sl.pid), pp, mb, static_cast<int>(pass)), s0, e0);
      if (!nw) sp->second = {std::min(sp->second.first, s0), std::max(sp->second.second, e0)};
    }
  }
  m.spans = merge_devices(m.device_spans);
  for (auto& l : m.timeline.lanes) {
    std::stable_sort(l.ops.begin(), l.ops.end(), [](const Op& a, const Op& b) { return a.start < b.start; });
    m.timeline.ops += l.ops.size();
  }
  m.timeline.end = m.end;
  for (auto& [pid, lanes] : by_pid) m.timeline.by_device.push_back(lanes);
  return m;
}

DeviceSpans device_spans(const Snapshot& s) {
  DeviceSpans m;
  const auto& cp = s.session->compiled();
  const auto& r = s.result;
  for (uint32_t t = 0; t < r.program.tasks.size(); ++t) {
    if (r.program.tasks[t].kind != engine::TaskKind::kCompute) continue;
    const uint32_t n = r.node_of(t);
    if (n >= cp.dag.nodes.size()) continue;
    const plan::Tags& tg = cp.dag.nodes[n].tags;
    if (tg.pass == Pass::kNone) continue;
    auto key = std::make_tuple(r.device_of(t), tg.pp(), tg.mb(), static_cast<int>(tg.pass));
    auto [it, fresh] = m.try_emplace(key, r.timing[t].start, r.timing[t].end);
    if (!fresh) {
      it->second.first = std::min(it->second.first, r.timing[t].start);
      it->second.second = std::max(it->second.second, r.timing[t].end);
    }
  }
  return m;
}

Spans merge_devices(const DeviceSpans& d) {
  Spans m;
  for (const auto& [k, v] : d) {
    auto [it, fresh] = m.try_emplace(std::make_tuple(std::get<1>(k), std::get<2>(k), std::get<3>(k)), v);
    if (!fresh) it->second = {std::min(it->second.first, v.first), std::max(it->second.second, v.second)};
  }
  return m;
}

Spans logical_spans(const Snapshot& s) { return merge_devices(device_spans(s)); }

std::vector<CompareRow> compare_rows(const Spans& now, const Spans& base) {
  std::vector<CompareRow> rows;
  for (const auto& [k, v] : now) {
    CompareRow r{std::get<0>(k), std::get<1>(k), std::get<2>(k), -1, -1, v.first, v.second};
    if (auto it = base.find(k); it != base.end()) r.s0 = it->second.first, r.e0 = it->second.second;
    rows.push_back(r);
  }
  for (const auto& [k, v] : base)
    if (!now.count(k)) rows.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), v.first, v.second, -1, -1});
  std::stable_sort(rows.begin(), rows.end(), [](const CompareRow& a, const CompareRow& b) {
    if (a.both() != b.both()) return a.both();
    return std::llabs(a.delta()) > std::llabs(b.delta());
  });
  return rows;
}

std::vector<DeviceDiff> device_diffs(const DeviceSpans& now, const DeviceSpans& ref) {
  std::map<int, std::pair<Spans, Spans>> by_device;  // device -> (now, reference)
  for (const auto& [k, v] : now)
    by_device[std::get<0>(k)].first.emplace(std::make_tuple(std::get<1>(k), std::get<2>(k), std::get<3>(k)), v);
  for (const auto& [k, v] : ref)
    by_device[std::get<0>(k)].second.emplace(std::make_tuple(std::get<1>(k), std::get<2>(k), std::get<3>(k)), v);
  std::vector<DeviceDiff> out;
  for (const auto& [device, spans] : by_device) {
    DeviceDiff d;
    d.device = device;
    d.rows = compare_rows(spans.first, spans.second);
    for (const CompareRow& r : d.rows) {
      if (!r.both()) {
        ++(r.e1 < 0 ? d.gone : d.added);
        continue;
      }
      const SimTime start = r.s1 - r.s0, duration = (r.e1 - r.s1) - (r.e0 - r.s0);
      d.later += start > 0;
      d.earlier += start < 0;
      d.longer += duration > 0;
      d.shorter += duration < 0;
      if (std::llabs(r.delta()) > std::llabs(d.max_end_delta)) d.max_end_delta = r.delta();
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<MetricRow> metric_rows(const Snapshot& now, const Snapshot* base) {
  const sim::Result& r = now.result;
  const sim::Result* b = base ? &base->result : nullptr;
  std::vector<MetricRow> rows;
  auto row = [&](const char* name, std::string now, std::string base, std::string delta) {
    rows.push_back({name, std::move(now), b ? std::move(base) : "", b ? std::move(delta) : ""});
  };
  auto pct = [](double now, double base) { return fmt::format("{:+.2f}%", base != 0 ? (now - base) / base * 100 : 0); };
  auto peak_of = [](const sim::Result& x) {
    int64_t p = 0;
    for (const auto& d : x.devices) p = std::max(p, d.peak_memory);
    return p;
  };
  const sim::Result& o = b ? *b : r;  // the baseline's columns are dropped without one
  const auto st = static_cast<double>(r.step_time), bst = static_cast<double>(o.step_time);
  row("step time", format_time(st), format_time(bst), pct(st, bst));
  row("bubble", fmt::format("{:.2f}%", r.bubble_ratio * 100), fmt::format("{:.2f}%", o.bubble_ratio * 100),
      fmt::format("{:+.2f} pt", (r.bubble_ratio - o.bubble_ratio) * 100));
  const auto ex = static_cast<double>(r.exposed_comm), bex = static_cast<double>(o.exposed_comm);
  // Per device, as simulate's table and JSON (exposed_comm_ms_per_device), then the sum.
  const double pd = now.pipeline.exposed_comm_ms_per_device * 1e6;
  const double bpd = (base ? *base : now).pipeline.exposed_comm_ms_per_device * 1e6;
  row("exposed comm per device", format_time(pd), format_time(bpd), pct(pd, bpd));
  row("exposed comm (sum)", format_time(ex), format_time(bex), pct(ex, bex));
  row("MFU", fmt::format("{:.2f}%", r.mfu * 100), fmt::format("{:.2f}%", o.mfu * 100),
      fmt::format("{:+.2f} pt", (r.mfu - o.mfu) * 100));
  row("tokens/s", fmt::format("{:.0f}", r.tokens_per_s), fmt::format("{:.0f}", o.tokens_per_s),
      fmt::format("{:+.0f}", r.tokens_per_s - o.tokens_per_s));
  const int64_t peak = peak_of(r), bpeak = peak_of(o);
  row("peak memory (max)", format_bytes(static_cast<double>(peak)), format_bytes(static_cast<double>(bpeak)),
      format_bytes(static_cast<double>(peak - bpeak)));
  row("devices", fmt::format("{}", r.devices.size()), fmt::format("{}", o.devices.size()), "");
  row("events", fmt::format("{}", r.events), fmt::format("{}", o.events), "");
  row("simulation wall", fmt::format("{:.1f} ms", r.sim_wall_ms), fmt::format("{:.1f} ms", o.sim_wall_ms), "");
  return rows;
}

void App::update_search() {
  SearchState& s = search;
  auto forget = [&] {
    s.for_query.clear();
    s.tasks.clear();
    s.lane_prefix.clear();
    s.for_snap.reset();
  };
  if (!current || s.query.find_first_not_of(" \t") == std::string::npos) {
    forget();
    s.asked_query.clear();
    s.asked_snap.reset();
    return;
  }
  if (s.asked_query != s.query || s.asked_snap.lock() != current) {
    s.asked_query = s.query;
    s.asked_snap = current;
    s.worker.start(current, s.query);
  }
  if (auto m = s.worker.take(); m && m->snap.lock() == current) {
    s.for_query = std::move(m->query);
    s.for_snap = m->snap;
    s.tasks = std::move(m->tasks);
    s.lane_prefix = std::move(m->lane_prefix);
  }
  // Matches of an older result index other lanes and tasks: dropped until the new ones come.
  if (s.for_snap.lock() != current) forget();
}

bool App::open_trace(const std::string& path) {
  SimTime first = 0;
  if (current && !current->result.timing.empty()) {
    first = INT64_MAX;
    for (const auto& l : current->timeline.lanes)
      if (!l.ops.empty()) first = std::min(first, l.ops.front().start);
    if (first == INT64_MAX) first = 0;
  }
  auto m = load_measured(path, first);
  if (!m) {
    status = m.error().front().message;
    return false;
  }
  measured = std::make_shared<const Measured>(std::move(*m));
  status = fmt::format("opened trace {} ({} slices)", path, measured->timeline.ops);
  return true;
}

void App::pin_baseline(bool on) {
  baseline = on ? current : nullptr;
}

void App::zoom(double t0, double t1) {
  if (t1 <= t0) return;
  tl.fitted = false;
  tl.t0 = t0;
  const float w = tl.width > 0 ? tl.width : 800.0f;
  tl.ns_per_px = (t1 - t0) / static_cast<double>(w);
}

namespace {

// An export never replaces the plan it was made from, or the trace opened against it (a
// script's `export-trace PLAN` wrote the trace over the plan).
bool replaces_input(const App& app, const std::string& path, std::string* error) {
  namespace fs = std::filesystem;
  for (const std::string& in : {app.doc.path(), app.measured ? app.measured->path : std::string()}) {
    if (in.empty()) continue;
    std::error_code e1, e2, e3, e4;
    const bool same_file = fs::exists(path, e1) && fs::exists(in, e1) && fs::equivalent(path, in, e2);
    const fs::path a = fs::weakly_canonical(path, e3), b = fs::weakly_canonical(in, e4);
    if (same_file || (!e3 && !e4 && a == b)) {
      if (error) *error = "refusing to overwrite the input file '" + in + "': write the export to another file";
      return true;
    }
  }
  return false;
}

}  // namespace

bool App::export_trace(const std::string& path, std::string* error) const {
  if (!current) {
    if (error) *error = "nothing simulated yet";
    return false;
  }
  if (replaces_input(*this, path, error)) return false;
  std::ofstream f(path, std::ios::binary);
  if (!f || !(f << traces::chrome_trace(current->session->compiled(), current->result))) {
    if (error) *error = "cannot write '" + path + "'";
    return false;
  }
  return true;
}

bool App::export_torch_csv(const std::string& path, std::string* error) const {
  if (!current) {
    if (error) *error = "nothing simulated yet";
    return false;
  }
  if (replaces_input(*this, path, error)) return false;
  auto csv = torch_csv_of(current->session->compiled().plan.schedule);
  if (!csv) {
    if (error) *error = "not a pipeline schedule torch can run: " + csv.error().front().message;
    return false;
  }
  std::ofstream f(path, std::ios::binary);
  if (!f || !(f << *csv)) {
    if (error) *error = "cannot write '" + path + "'";
    return false;
  }
  return true;
}

void App::hook(const std::string& name) {
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  hooks[name] = {a.x, a.y, b.x, b.y};
}

namespace {

const App::MemoryCurve& cached_curve(const std::shared_ptr<const Snapshot>& snap, int device, App::MemoryCurve& c) {
  if (c.snap.lock() != snap || c.device != device) {
    c.snap = snap;
    c.device = device;
    c.samples.clear();
    c.peak = 0;
    if (snap) {
      const auto& r = snap->result;
      int d = device;
      if (d >= 0 && static_cast<size_t>(d) < r.devices.size() && r.devices[d].folded)
        d = r.devices[d].representative;
      if (d >= 0 && static_cast<size_t>(d) < r.devices.size())
        c.samples = sim::memory_by_category(snap->session->compiled(), r, d);
    }
    for (size_t k = 1; k < c.samples.size(); ++k)
      if (c.samples[k].total() > c.samples[c.peak].total()) c.peak = k;
  }
  return c;
}

}  // namespace

const App::MemoryCurve& App::memory_curve_of(int device) const { return cached_curve(current, device, mem_cache); }

const App::MemoryCurve& App::baseline_memory_curve_of(int device) const {
  const auto b = baseline && baseline != current ? baseline : nullptr;
  return cached_curve(b, device, base_mem_cache);
}

void App::ensure_critical() {
  if (!current) return;
  if (critical_for == current->text && critical.size() == current->result.program.tasks.size())
    return;
  critical_for = current->text;
  critical.assign(current->result.program.tasks.size(), 0);
  critical_steps = sim::critical_path(current->session->compiled(), current->result);
  for (const auto& s : critical_steps)
    if (s.task < critical.size()) critical[s.task] = 1;
}

std::string App::state_json() const {
  nlohmann::ordered_json j;
  j["plan_file"] = doc.path();
  j["dirty"] = doc.dirty();
  j["stale"] = stale();
  j["simulating"] = worker.busy();
  const SimWorker::Counts wc = worker.counts();
  j["worker"] = {{"submitted", wc.submitted}, {"superseded", wc.superseded}, {"run", wc.run}};
  j["failed"] = last_failed;
  j["granularity"] = std::string(sim::granularity_name(granularity));
  j["plan_status"] = plan_status;
  nlohmann::ordered_json ds = nlohmann::ordered_json::array();
  for (size_t i = 0; i < diags.size(); ++i) {
    const Diagnostic& d = diags[i];
    ds.push_back({{"severity", d.severity == Severity::kError ? "error" : "warning"},
                  {"code", i < diag_codes.size() ? diag_codes[i] : std::string()},
                  {"location", d.loc.str()},
                  {"message", d.message},
                  {"hint", d.hint}});
  }
  j["diagnostics"] = ds;
  if (current) {
    const auto& r = current->result;
    j["step_time_ns"] = r.step_time;
    j["step_time_ms"] = static_cast<double>(r.step_time) / 1e6;
    j["step_time_shown"] = format_time(static_cast<double>(r.step_time));
    j["bubble_ratio"] = r.bubble_ratio;
    j["exposed_comm_ms_per_device"] = current->pipeline.exposed_comm_ms_per_device;
    j["mfu"] = r.mfu;
    j["devices"] = r.devices.size();
    j["lanes"] = current->timeline.lanes.size();
    j["ops"] = current->timeline.ops;
    j["engine_tasks"] = r.engine_tasks;  // fewer than the program's tasks at pass granularity
    j["microbatches"] = current->session->compiled().num_microbatches;
    // What the Parameters tab shows, keyed by field name: describe --format json's values.
    j["parameters"] =
        nlohmann::ordered_json::parse(sim::resolve_plan(current->session->compiled()).values().dump());
  }
  if (baseline) j["baseline_step_time_ns"] = baseline->result.step_time;
  if (current && (baseline || measured)) {
    // The Compare table's rows, in its order (the first 20).
    const auto rows = compare_rows(logical_spans(*current), measured ? measured->spans : logical_spans(*baseline));
    nlohmann::ordered_json c = nlohmann::ordered_json::array();
    for (size_t i = 0; i < rows.size() && i < 20; ++i) {
      const CompareRow& r = rows[i];
      nlohmann::ordered_json row;
      row["op"] =
          fmt::format("PP{} MB{} {}", r.pp, r.mb, plan::pass_name(static_cast<Pass>(r.pass)));
      if (r.both())
        row["end_delta_ns"] = r.delta();
      else
        row["end_delta_ns"] = r.e0 < 0 ? "new" : "gone";
      row["end_ns"] = r.e1;  // -1: absent (as in the table's "-")
      row["reference_end_ns"] = r.e0;
      c.push_back(row);
    }
    j["compare"] = {{"rows", rows.size()}, {"first", c}};
    // The difference lanes: per device, what they draw.
    nlohmann::ordered_json dd = nlohmann::ordered_json::array();
    for (const DeviceDiff& d : device_diffs(device_spans(*current), measured ? measured->device_spans : device_spans(*baseline)))
      dd.push_back({{"device", d.device}, {"later", d.later}, {"earlier", d.earlier}, {"longer", d.longer},
                    {"shorter", d.shorter}, {"gone", d.gone}, {"new", d.added}, {"max_end_delta_ns", d.max_end_delta}});
    j["differences"] = dd;
  }
  if (current && baseline && !measured) {
    // The Compare tab's metric table, the texts shown.
    nlohmann::ordered_json m = nlohmann::ordered_json::array();
    for (const MetricRow& r : metric_rows(*current, baseline.get()))
      m.push_back({{"metric", r.metric}, {"now", r.now}, {"baseline", r.baseline}, {"delta", r.delta}});
    j["compare_metrics"] = m;
  }
  if (current) {
    // The Memory panel: the device shown, each run's peak and the categories drawn; and each
    // run's peak per device, from the curves it draws (baseline null without one).
    auto peak_of = [](const MemoryCurve& c) -> nlohmann::ordered_json {
      if (c.samples.empty()) return nullptr;
      const sim::CategorySample& p = c.samples[c.peak];
      return {{"peak_bytes", p.total()}, {"peak_time_ns", p.t}, {"peak_shown", format_bytes(static_cast<double>(p.total()))}};
    };
    // A run's peak of reserved bytes on device d (simulate's peak_reserved_bytes); null without
    // the run.
    auto reserved_of = [](const std::shared_ptr<const Snapshot>& s, size_t d) -> nlohmann::ordered_json {
      if (!s || d >= s->result.devices.size()) return nullptr;
      return s->result.devices[d].peak_reserved;
    };
    nlohmann::ordered_json m;
    m["device"] = memory_drawn.device;
    for (int run = 0; run < 2; ++run) {
      if (run == 1 && !memory_drawn.baseline) continue;
      std::vector<std::string> cats;
      for (size_t k = 0; k < sim::kMemCategories; ++k)
        if (memory_drawn.categories[static_cast<size_t>(run)][k]) cats.emplace_back(sim::memory_category_name(k));
      const int d = std::max(memory_drawn.device, 0);
      nlohmann::ordered_json e = peak_of(run == 0 ? memory_curve_of(d) : baseline_memory_curve_of(d));
      e["peak_reserved_bytes"] = reserved_of(run == 0 ? current : baseline, static_cast<size_t>(d));
      {
        const auto& run_s = run == 0 ? current : baseline;
        e["peak_device_bytes"] = run_s && static_cast<size_t>(d) < run_s->result.devices.size()
                                     ? nlohmann::ordered_json(run_s->result.devices[static_cast<size_t>(d)].peak_device())
                                     : nlohmann::ordered_json();
      }
      e["reserved_line_drawn"] = memory_drawn.reserved_line[static_cast<size_t>(run)];
      e["categories_drawn"] = cats;
      m[run == 0 ? "now" : "baseline"] = e;
    }
    nlohmann::ordered_json per = nlohmann::ordered_json::array();
    for (size_t d = 0; d < current->result.devices.size(); ++d) {
      const auto now = peak_of(memory_curve_of(static_cast<int>(d)));
      const auto base = peak_of(baseline_memory_curve_of(static_cast<int>(d)));
      per.push_back({{"device", d},
                     {"now_bytes", now.is_null() ? nlohmann::ordered_json() : now["peak_bytes"]},
                     {"baseline_bytes", base.is_null() ? nlohmann::ordered_json() : base["peak_bytes"]},
                     {"now_reserved_bytes", reserved_of(current, d)},
                     {"baseline_reserved_bytes", reserved_of(baseline, d)}});
    }
    m["peak_per_device"] = per;
    if (memory_tooltip.shown) {  // the hover tooltip: each category's bytes of both runs
      const MemoryTooltip& tip = memory_tooltip;
      nlohmann::ordered_json t;
      t["device"] = tip.device;
      t["t_ns"] = tip.t;
      for (int run = 0; run < (tip.baseline ? 2 : 1); ++run) {
        nlohmann::ordered_json cats;
        for (size_t k = 0; k < sim::kMemCategories; ++k)
          cats[std::string(sim::memory_category_name(k))] = tip.bytes[static_cast<size_t>(run)][k];
        t[run == 0 ? "now_bytes" : "baseline_bytes"] = cats;
      }
      t["title"] = tip.title;
      t["rows"] = tip.rows;
      m["tooltip"] = t;
    }
    j["memory"] = m;
  }
  if (search.active() && current) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    const auto& cp = current->session->compiled();
    for (size_t i = 0; i < search.tasks.size() && i < 50; ++i)
      list.push_back(cp.dag.node_name(current->result.node_of(search.tasks[i]), cp.model));
    j["search"] = {{"query", search.for_query}, {"matches", search.tasks.size()}, {"first", list},
                   {"pending", search.pending()}};
  }
  if (measured) j["measured"] = {{"path", measured->path}, {"slices", measured->timeline.ops}, {"end_ns", measured->end}};
  nlohmann::ordered_json v;
  v["t0_ns"] = tl.t0;
  v["t1_ns"] = tl.t0 + tl.ns_per_px * tl.width;
  v["boxes_drawn"] = tl.boxes_drawn;
  v["lanes_drawn"] = tl.lanes_drawn;
  v["devices_drawn"] = tl.devices_drawn;
  v["reference_rows_drawn"] = tl.reference_rows_drawn;
  v["diff_lanes_drawn"] = tl.diff_lanes_drawn;
  v["tooltip_shown"] = tooltip_shown;
  v["diff_tooltip"] = tl.diff_tooltip;
  v["one_lane_per_device"] = tl.one_lane_per_device;
  v["labels"] = tl.labels.size() > 400 ? std::vector<std::string>(tl.labels.begin(), tl.labels.begin() + 400) : tl.labels;
  j["view"] = v;
  if (sel.valid() && current && sel.task < current->result.program.tasks.size()) {
    const auto& r = current->result;
    j["selection"] = {{"task", sel.task},
                      {"name", current->session->compiled().dag.node_name(
                                   r.node_of(sel.task), current->session->compiled().model)},
                      {"device", r.device_of(sel.task)},
                      {"start_ns", r.timing[sel.task].start},
                      {"end_ns", r.timing[sel.task].end}};
  } else {
    j["selection"] = nullptr;
  }
  j["frames"] = frame;
  auto median = [](std::vector<float> v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return static_cast<double>(v[v.size() / 2]);
  };
  if (!frame_ui_ms.empty())
    j["frame_ms"] = {{"ui_median", median(frame_ui_ms)}, {"gl_median", median(frame_gl_ms)},
                     {"frames", frame_ui_ms.size()}};
  nlohmann::ordered_json w;
  for (const char* name : {"timeline", "memory", "status", "microbatches", "minimap", "minimap viewport", "search",
                           "pin", "granularity", "devices table", "ruler first label", "memory axis", "diff table",
                           "summary", "memory now title", "memory baseline title", "memory baseline axis"})
    if (auto it = hooks.find(name); it != hooks.end())
      w[name] = {it->second.x0, it->second.y0, it->second.x1, it->second.y1};
  for (const auto& [name, r] : hooks)
    if (name.rfind("device ", 0) == 0 || name.rfind("order ", 0) == 0 || name.rfind("diff ", 0) == 0)
      w[name] = {r.x0, r.y0, r.x1, r.y1};
  j["widgets"] = w;
  if (!script_error.empty()) j["script_error"] = script_error;
  return j.dump(2) + "\n";
}

void handle_shortcuts(App& app) {
  ImGuiIO& io = ImGui::GetIO();
  const bool ctrl = io.KeyCtrl;
  auto pressed = [&](int key) { return key >= 0 && ImGui::IsKeyPressed(key, false); };
  // Native key indices are GLFW's (letters are their upper-case ASCII codes); the headless
  // test harness uses the same convention.
  auto key_of = [](char c) { return static_cast<int>(c); };
  constexpr int kKeyF1 = 290;  // GLFW_KEY_F1
  if (ctrl && pressed(key_of('Z'))) {
    if (io.KeyShift)
      app.doc.redo();
    else
      app.doc.undo();
  }
  if (ctrl && pressed(key_of('Y'))) app.doc.redo();
  if (ctrl && pressed(key_of('S'))) {
    std::string err;
    app.status = app.doc.save({}, &err) ? "saved " + app.doc.path() : err;
  }
  if (io.WantTextInput) return;  // plain keys belong to the text field being edited
  if (!ctrl && pressed(key_of('F'))) {
    // With a selection, F shows that op (Perfetto's F); again, or without one: the whole step.
    if (app.sel.valid() && app.current && app.sel.task < app.current->result.timing.size()) {
      const auto& tm = app.current->result.timing[app.sel.task];
      const double len = static_cast<double>(std::max<SimTime>(tm.end - tm.start, 1));
      const double a = static_cast<double>(tm.start) - len * 0.25, b = static_cast<double>(tm.end) + len * 0.25;
      if (std::abs(app.tl.t0 - a) < 1 && std::abs(app.tl.ns_per_px * app.tl.width - (b - a)) < 1)
        app.fit();
      else
        app.zoom(a, b);
    } else {
      app.fit();
    }
  }
  // '.' / ',' : the next / previous op on the selected op's lane (Perfetto).
  const int step = pressed(key_of('.')) ? 1 : pressed(key_of(',')) ? -1 : 0;
  if (step && app.sel.valid() && app.current && app.sel.task < app.current->timeline.where.size()) {
    const auto [li, oi] = app.current->timeline.where[app.sel.task];
    if (li != UINT32_MAX) {
      const auto& ops = app.current->timeline.lanes[li].ops;
      const long ni = static_cast<long>(oi) + step;
      if (ni >= 0 && ni < static_cast<long>(ops.size())) app.sel.task = ops[static_cast<size_t>(ni)].task;
    }
  }
  if (!ctrl && pressed(key_of('P'))) app.pin_baseline(!app.baseline);
  if (!ctrl && pressed(key_of('R')) && app.tl.range_t0 >= 0 && app.tl.range_t1 != app.tl.range_t0)
    app.zoom(std::min(app.tl.range_t0, app.tl.range_t1), std::max(app.tl.range_t0, app.tl.range_t1));
  if (!ctrl && pressed(key_of('C'))) app.tl.show_critical = !app.tl.show_critical;
  if (!ctrl && pressed(key_of('L'))) app.tl.one_lane_per_device = !app.tl.one_lane_per_device;
  if ((!ctrl && pressed(key_of('H'))) || pressed(kKeyF1)) app.show_help = !app.show_help;
  const double w = app.tl.ns_per_px * app.tl.width;
  if (!ctrl && pressed(key_of('W'))) app.zoom(app.tl.t0 + w * 0.25, app.tl.t0 + w * 0.75);
  if (!ctrl && pressed(key_of('S'))) app.zoom(app.tl.t0 - w * 0.5, app.tl.t0 + w * 1.5);
  if ((!ctrl && pressed(key_of('A'))) || pressed(io.KeyMap[ImGuiKey_LeftArrow]))
    app.zoom(app.tl.t0 - w * 0.2, app.tl.t0 + w * 0.8);
  if ((!ctrl && pressed(key_of('D'))) || pressed(io.KeyMap[ImGuiKey_RightArrow]))
    app.zoom(app.tl.t0 + w * 0.2, app.tl.t0 + w * 1.2);
  if (pressed(io.KeyMap[ImGuiKey_Escape])) app.sel = {};
}

void draw_app(App& app) {
  ++app.frame;
  app.hooks.clear();
  app.tl.labels.clear();
  for (const auto& p : app.dropped) app.open(p);
  app.dropped.clear();
  app.pump();
  handle_shortcuts(app);

  const ImVec2 vs = ImGui::GetIO().DisplaySize;
  const float left = std::min(430.0f * app.font_scale, vs.x * 0.4f);
  const float top_h = vs.y * 0.58f;
  const ImGuiWindowFlags fixed =
      ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse;
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImVec2(left, vs.y));
  if (ImGui::Begin("Plan", nullptr, fixed | ImGuiWindowFlags_MenuBar)) draw_plan_panel(app);
  ImGui::End();
  ImGui::SetNextWindowPos(ImVec2(left, 0));
  ImGui::SetNextWindowSize(ImVec2(vs.x - left, top_h));
  if (ImGui::Begin("Timeline", nullptr,
                   fixed | ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse))
    draw_timeline_panel(app);
  ImGui::End();
  const float mem_w = (vs.x - left) * 0.45f;
  ImGui::SetNextWindowPos(ImVec2(left, top_h));
  ImGui::SetNextWindowSize(ImVec2(mem_w, vs.y - top_h));
  if (ImGui::Begin("Memory", nullptr, fixed)) draw_memory_panel(app);
  ImGui::End();
  ImGui::SetNextWindowPos(ImVec2(left + mem_w, top_h));
  ImGui::SetNextWindowSize(ImVec2(vs.x - left - mem_w, vs.y - top_h));
  if (ImGui::Begin("Numbers", nullptr, fixed)) draw_numbers_panel(app);
  ImGui::End();
  if (app.show_help) draw_help_window(app);
  const ImGuiWindow* tip = ImGui::FindWindowByName("##Tooltip_00");
  app.tooltip_shown = tip && tip->Active;
}

void draw_help_window(App& app) {
  ImGui::SetNextWindowSize(ImVec2(520, 420), ImGuiCond_FirstUseEver);
  ImGui::SetNextWindowPos(ImVec2(200, 120), ImGuiCond_FirstUseEver);
  if (ImGui::Begin("Help", &app.show_help)) {
    static constexpr const char* kKeys[][2] = {
        {"Ctrl+O", "focus the path field (type a path, Enter opens)"},
        {"Ctrl+S", "save the plan"},
        {"Ctrl+Z / Ctrl+Y", "undo / redo (Ctrl+Shift+Z also redoes)"},
        {"F", "show the selected op (again: the whole step); without a selection: fit"},
        {". / ,", "select the next / previous op of the selected op's lane"},
        {"W / S", "zoom in / out around the centre"},
        {"A / D, Left / Right", "pan"},
        {"mouse wheel", "zoom at the mouse; Shift+wheel pans"},
        {"left drag", "pan the timeline"},
        {"right drag", "select a time range (statistics in Numbers > Selection)"},
        {"R", "zoom to the selected range"},
        {"click", "select an op (details, flow arrows)"},
        {"Esc", "clear the selection"},
        {"P", "pin / unpin the current result as the baseline"},
        {"C", "highlight the critical path"},
        {"L", "one lane per device (its compute lane's passes) / every lane"},
        {"search field", "ops whose name has every word: PP3 MB5, layer19.mlp, all-gather"},
        {"H / F1", "this window"},
    };
    if (ImGui::BeginTable("keys", 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders)) {
      for (const auto& k : kKeys) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(k[0]);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(k[1]);
      }
      ImGui::EndTable();
    }
    ImGui::TextWrapped(
        "Every edit (a widget, a directive, the JSON text) re-simulates on a worker thread; "
        "the newest edit wins. A result older than the plan is marked STALE; a failing edit "
        "keeps the last good result and lists its errors under Diagnostics.");
  }
  ImGui::End();
}

}  // namespace stretto::gui
