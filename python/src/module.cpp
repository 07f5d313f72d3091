// `_stretto`: the native half of the `stretto` Python package (python/stretto/__init__.py).
//
// A thin layer over the library the CLI uses: plans open as sim::Session (the same parser,
// compiler and cost model), results are sim::Result with the JSON of sim::metrics_json (the
// fields of `stretto simulate --format json`), sweeps and search are explore/'s. Nothing here
// computes a metric; it converts. User-input errors come back as Diagnostics and are raised as
// stretto.PlanError (built by the Python package from the dicts made here) with the CLI's text.
//
// Threads: compiling and simulating release the GIL, so Python threads run plans in parallel
// (a Session is immutable once built and simulate() is const).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stretto/explore/search.h"
#include "stretto/explore/sweep.h"
#include "stretto/pipelines/builders.h"
#include "stretto/plan/json_source.h"
#include "stretto/plan/layout.h"
#include "stretto/plan/plan.h"
#include "stretto/sim/inspect.h"
#include "stretto/sim/metrics_json.h"
#include "stretto/sim/pipeline_metrics.h"
#include "stretto/sim/session.h"
#include "stretto/sim/warnings.h"
#include "stretto/traces/chrome_trace.h"

namespace py = pybind11;

namespace stretto::python {

using plan::Json;
using plan::JsonSource;

namespace {

// ---- errors -------------------------------------------------------------------------------

/// Carries diagnostics from C++ to the translator, which raises stretto.PlanError.
struct DiagnosticsError {
  Diagnostics diags;
};

py::dict loc_dict(const SourceLoc& l) {
  py::dict d;
  d["file"] = l.file;
  d["line"] = l.line;
  d["column"] = l.col;
  d["json_pointer"] = l.json_pointer;
  return d;
}

py::dict diagnostic_dict(const Diagnostic& d) {
  py::dict o = loc_dict(d.loc);
  o["severity"] = d.severity == Severity::kError     ? "error"
                  : d.severity == Severity::kWarning ? "warning"
                                                     : "note";
  o["message"] = d.message;
  o["directive"] = d.directive;
  o["hint"] = d.hint;
  o["source_line"] = d.source_line;
  py::list notes;
  for (const DiagNote& n : d.notes) {
    py::dict nd = loc_dict(n.loc);
    nd["message"] = n.message;
    notes.append(nd);
  }
  o["notes"] = notes;
  o["text"] = d.render();
  return o;
}

template <typename T>
T take(Expected<T>&& e) {
  if (!e) throw DiagnosticsError{std::move(e.error())};
  return std::move(*e);
}

/// int64 values as the bytes of a native array (the package turns them into a NumPy array or a
/// list): a memory curve can hold millions of samples.
py::bytes int64_bytes(const std::vector<int64_t>& v) {
  return py::bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
}

// ---- plans and results --------------------------------------------------------------------

/// A compiled plan: the Session the CLI would open for the same text.
struct NativePlan {
  std::shared_ptr<const sim::Session> session;
  std::string text, file, base_dir;
};

/// As `stretto simulate PATH` opens it (Session::open), and its text for Plan.to_dict().
NativePlan open_plan(const std::string& path) {
  NativePlan p;
  p.file = path;
  p.base_dir = std::filesystem::path(path).parent_path().string();
  py::gil_scoped_release nogil;
  p.text = take(JsonSource::load(path)).text();
  p.session = std::make_shared<const sim::Session>(take(sim::Session::open(path)));
  return p;
}

NativePlan plan_from_text(std::string text, std::string file, std::string base_dir) {
  NativePlan p;
  p.text = text;
  p.file = file;
  p.base_dir = base_dir;
  py::gil_scoped_release nogil;
  p.session = std::make_shared<const sim::Session>(
      take(sim::Session::from_text(std::move(text), std::move(file), std::move(base_dir))));
  return p;
}

/// One simulated step: the result and the session it came from (its compiled plan names ops).
struct NativeResult {
  std::shared_ptr<const sim::Session> session;
  sim::Result result;
  sim::PipelineMetrics pm;
  std::vector<sim::CriticalStep> critical;
  bool has_critical = false;
  bool full_critical = false;  // every op (--critical-path=full), not the summary
  sim::Warnings warnings;      // sim::result_warnings: what `simulate` prints on stderr
};

NativeResult simulate(const NativePlan& p, bool fold_replicas, bool memory_curves,
                      bool critical_path, bool full_critical_path, const std::string& granularity) {
  // (the Python layer names the accepted values; this is the CLI's parser of them)
  const std::optional<sim::Granularity> g = sim::parse_granularity(granularity);
  if (!g) throw py::value_error("granularity takes 'op' or 'pass', not '" + granularity + "'");
  NativeResult r;
  r.session = p.session;
  r.full_critical = full_critical_path;
  {
    py::gil_scoped_release nogil;
    sim::SimOptions so;
    so.fold_replicas = fold_replicas;
    so.memory_curves = memory_curves;
    so.granularity = *g;
    r.result = take(p.session->simulate(so));
    r.pm = sim::pipeline_metrics(p.session->compiled(), r.result);
    if (critical_path || full_critical_path) {
      r.critical = sim::critical_path(p.session->compiled(), r.result);
      r.has_critical = true;
    }
    r.warnings = sim::result_warnings(p.session->compiled(), r.result, fold_replicas);
  }
  return r;
}

/// The JSON text `stretto describe PATH --format json` prints: the resolved plan, every value
/// with its source (sim::resolve_plan, as the CLI).
std::string resolved_json(const NativePlan& p) {
  nlohmann::json j = p.session->resolved().to_json();
  j["plan"] = p.file;
  return j.dump();
}

/// The JSON text `stretto simulate --format json` prints for this result.
std::string result_json(const NativeResult& r) {
  const compiler::CompiledPlan& cp = r.session->compiled();
  return sim::simulate_json(cp, r.result, r.pm, r.has_critical ? &r.critical : nullptr,
                           r.full_critical)
      .dump();
}

const sim::DeviceMetrics& device_metrics(const NativeResult& r, int device) {
  if (device < 0 || static_cast<size_t>(device) >= r.result.devices.size())
    throw py::index_error("no device " + std::to_string(device) + " (the plan has " +
                          std::to_string(r.result.devices.size()) + ")");
  return r.result.devices[device];
}

/// Columns t_ns, total and one per memory category, as int64 bytes (sim::memory_by_category:
/// from the program's memory effects and the timings; a folded replica's are its
/// representative's).
py::dict memory_curve(const NativeResult& r, int device) {
  const sim::DeviceMetrics& d = device_metrics(r, device);
  const int simulated = d.folded ? d.representative : device;
  std::vector<sim::CategorySample> samples;
  {
    py::gil_scoped_release nogil;
    samples = sim::memory_by_category(r.session->compiled(), r.result, simulated);
  }
  std::vector<int64_t> t(samples.size()), total(samples.size());
  std::vector<std::vector<int64_t>> cat(sim::kMemCategories, std::vector<int64_t>(samples.size()));
  for (size_t i = 0; i < samples.size(); ++i) {
    t[i] = samples[i].t;
    total[i] = samples[i].total();
    for (size_t k = 0; k < sim::kMemCategories; ++k) cat[k][i] = samples[i].bytes[k];
  }
  py::dict o;
  o["t_ns"] = int64_bytes(t);
  o["total"] = int64_bytes(total);
  for (size_t k = 0; k < sim::kMemCategories; ++k)
    o[py::str(std::string(sim::memory_category_name(k)))] = int64_bytes(cat[k]);
  return o;
}

/// For each device, the device simulated for it: itself, or a folded replica's representative
/// (whose ops and memory curve stand for it).
std::vector<int> representatives(const NativeResult& r) {
  std::vector<int> out;
  for (const sim::DeviceMetrics& d : r.result.devices)
    out.push_back(d.folded ? d.representative : d.id);
  return out;
}

/// Every (task, participant device) the step ran: the op slices of its Chrome trace, named as
/// they are. Folded replicas were not simulated: only their representatives' ops are listed,
/// as in the trace.
py::dict ops(const NativeResult& r) {
  const compiler::CompiledPlan& cp = r.session->compiled();
  const engine::Program& prog = r.result.program;
  std::vector<int64_t> task, device, start, end;
  py::list name, stream, kind;
  std::vector<std::string> names_by_node(cp.dag.nodes.size());
  for (uint32_t t = 0; t < prog.tasks.size(); ++t) {
    const engine::Task& tk = prog.tasks[t];
    const engine::TaskTiming& tt = r.result.timing[t];
    if (tk.kind == engine::TaskKind::kBarrier || tt.start < 0) continue;
    std::string& nm = names_by_node[tk.node];
    if (nm.empty()) nm = traces::slice_name(cp, tk.node);
    for (uint32_t p = 0; p < tk.part_count; ++p) {
      const engine::Participant& pa = prog.participants[tk.part_begin + p];
      task.push_back(t);
      device.push_back(pa.device);
      start.push_back(tt.start);
      end.push_back(tt.end);
      name.append(nm);
      stream.append(prog.stream_names[pa.stream]);
      kind.append(tk.kind == engine::TaskKind::kCompute ? "compute" : "comm");
    }
  }
  py::dict o;
  o["task"] = int64_bytes(task);
  o["device"] = int64_bytes(device);
  o["start_ns"] = int64_bytes(start);
  o["end_ns"] = int64_bytes(end);
  o["name"] = name;
  o["stream"] = stream;
  o["kind"] = kind;
  return o;
}

/// The result's warnings as diagnostic dicts (the package raises them as StrettoWarning).
py::list result_warnings(const NativeResult& r) {
  py::list out;
  for (const sim::Warning& w : r.warnings) {
    py::dict d = diagnostic_dict(w.diag);
    d["code"] = w.code;
    out.append(d);
  }
  return out;
}

void write_trace(const NativeResult& r, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    Diagnostic d;
    d.loc.file = path;
    d.message = std::string("cannot write the trace: ") + std::strerror(errno);
    throw DiagnosticsError{{d}};
  }
  bool ok = false;
  {
    py::gil_scoped_release nogil;
    ok = traces::write_chrome_trace(f, r.session->compiled(), r.result);
  }
  const int err = ok ? 0 : errno;
  if (std::fclose(f) != 0 || !ok) {
    Diagnostic d;
    d.loc.file = path;
    d.message = std::string("cannot write the trace: ") + std::strerror(err ? err : errno);
    throw DiagnosticsError{{d}};
  }
}


// ---- builders -----------------------------------------------------------------------------

/// Fills in the line, column and source line of diagnostics that carry only a pointer into
/// `src` (what expand_builder and parse_directives leave for generated input).
void locate(Diagnostics& ds, const JsonSource& src) {
  for (Diagnostic& d : ds) {
    if (d.loc.known() || d.loc.json_pointer.empty()) continue;
    const std::string ptr = d.loc.json_pointer;
    d.loc = src.loc(ptr);
    d.loc.json_pointer = ptr;
    if (d.loc.known()) d.source_line = src.line_text(d.loc.line);
  }
}

/// A builder call as a plan's `"schedule": {"builder": ...}` is expanded (pipelines'
/// expand_builder): `call_text` is the call object ({"builder", "ranks", "stages_per_rank",
/// "microbatches", "base", "layout"}) and `where` names it in diagnostics. Returns the
/// generated directives as JSON text (the plan's form).
std::string build_directives(std::string call_text, std::string where) {
  py::gil_scoped_release nogil;
  auto src = take(JsonSource::parse(std::move(call_text), std::move(where)));
  // The plan parser's reading of a builder call (plan.h), as `simulate` reads one.
  auto parsed = plan::parse_builder_call(src, "");
  if (!parsed) throw DiagnosticsError{std::move(parsed.error())};
  const plan::BuilderCall& call = *parsed;
  auto ds = pipelines::expand_builder(call);
  if (!ds) {
    locate(ds.error(), src);
    throw DiagnosticsError{std::move(ds.error())};
  }
  return plan::directives_to_json(*ds).dump();
}

// ---- sweeps and search --------------------------------------------------------------------

/// Runs a sweep spec (a file's path, or spec JSON text whose base resolves from `spec_dir`)
/// into `db`, as `stretto sweep SPEC --db DB -j JOBS [--limit N]`.
py::dict run_sweep(std::string spec_arg, bool is_file, const std::string& spec_dir,
                   const std::string& db, int jobs, size_t limit) {
  explore::Progress pr;
  explore::Grid grid;
  {
    py::gil_scoped_release nogil;
    explore::SweepSpec spec =
        is_file ? take(explore::load_spec(spec_arg))
                : take(explore::parse_spec(take(JsonSource::parse(std::move(spec_arg), "<spec>")),
                                           spec_dir));
    grid = take(explore::enumerate(spec));
    auto store = take(explore::Store::open(db, spec.canonical, spec.hash, "0/1"));
    explore::SweepOptions so;
    so.jobs = jobs;
    so.limit = limit;
    pr = take(explore::run_sweep(spec, grid, store, so));
  }
  py::dict o;
  o["database"] = db;
  o["points"] = pr.total;
  o["grid_size"] = grid.grid_size;
  o["pruned"] = grid.pruned;
  o["resumed"] = pr.resumed;
  o["run"] = pr.done - pr.resumed;
  o["ok"] = pr.ok;
  o["over_capacity"] = pr.over_capacity;
  o["invalid"] = pr.invalid;
  o["elapsed_s"] = pr.elapsed_s;
  return o;
}

/// The rows of a sweep database as `stretto sweep --format json` lists them (JSON text).
std::string sweep_rows(const std::string& db) {
  py::gil_scoped_release nogil;
  auto store = take(explore::Store::open_existing(db));
  Json out = Json::array();
  for (const auto& r : take(store.rows())) out.push_back(explore::point_json(r));
  return out.dump();
}

/// `stretto search` over the plan text `base_text` (JSON of `search --format json`, plus
/// `best_plan`).
std::string search(std::string base_text, const std::string& base_dir, int devices,
                   double memory_cap_GiB, double budget_s, int jobs) {
  py::gil_scoped_release nogil;
  auto src = take(JsonSource::parse(std::move(base_text), "<plan>"));
  explore::SearchOptions so;
  so.devices = devices;
  so.memory_cap_GiB = memory_cap_GiB;
  so.budget_s = budget_s;
  so.jobs = jobs;
  auto r = take(explore::search(src.root(), base_dir, so));
  Json out = explore::search_json(r, devices);
  out["best_plan"] = r.best ? r.best_plan : Json();
  return out.dump();
}

}  // namespace
}  // namespace stretto::python

PYBIND11_MODULE(_stretto, m) {
  using namespace stretto;
  using namespace stretto::python;
  m.doc() = "Native half of the stretto package (use `import stretto`).";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const DiagnosticsError& e) {
      py::list ds;
      for (const Diagnostic& d : e.diags) ds.append(diagnostic_dict(d));
      py::object err =
          py::module_::import("stretto.errors").attr("_from_native")(render_all(e.diags), ds);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
    }
  });

  py::class_<NativePlan>(m, "NativePlan")
      .def_readonly("text", &NativePlan::text)
      .def_readonly("file", &NativePlan::file)
      .def_readonly("base_dir", &NativePlan::base_dir);
  py::class_<NativeResult>(m, "NativeResult");

  m.def("open_plan", &open_plan, py::arg("path"));
  m.def("plan_from_text", &plan_from_text, py::arg("text"), py::arg("file"),
        py::arg("base_dir"));
  m.def("simulate", &simulate, py::arg("plan"), py::arg("fold_replicas"),
        py::arg("memory_curves"), py::arg("critical_path"), py::arg("full_critical_path"), py::arg("granularity"));
  m.def("result_json", &result_json);
  m.def("resolved_json", &resolved_json);
  m.def("memory_curve", &memory_curve);
  m.def("ops", &ops);
  m.def("result_warnings", &result_warnings);
  m.def("representatives", &representatives);
  m.def("write_trace", &write_trace);
  m.def("build_directives", &build_directives, py::arg("call"), py::arg("where"));
  m.def("family_names", [] { return pipelines::schedule_family_names(); });
  m.def("run_sweep", &run_sweep, py::arg("spec"), py::arg("is_file"), py::arg("spec_dir"),
        py::arg("db"),
        py::arg("jobs"), py::arg("limit"));
  m.def("sweep_rows", &sweep_rows, py::arg("db"));
  m.def("search", &search, py::arg("base"), py::arg("base_dir"), py::arg("devices"),
        py::arg("memory_cap_GiB"), py::arg("budget_s"), py::arg("jobs"));
}
