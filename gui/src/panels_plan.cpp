// The Plan panel: open/save/export, builder and parameter widgets, the directive list, the
// order grid, the JSON text with inline diagnostics, and the diagnostics list.
#include <fmt/format.h>
#include <imgui.h>
#include <imgui_internal.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "stretto/gui/app.h"
#include "stretto/support/limits.h"
#include "stretto/pipelines/builders.h"
#include "stretto/plan/schema.h"
#include "stretto/sim/session.h"

namespace stretto::gui {

using plan::Json;
using plan::KeyType;
using plan::PlanKey;
using plan::ResolvedField;
using plan::ResolvedPlan;
using plan::section_at;

namespace {

namespace fs = std::filesystem;

const ImVec4 kRed(1.0f, 0.42f, 0.38f, 1.0f), kYellow(1.0f, 0.85f, 0.3f, 1.0f),
    kGreen(0.45f, 0.9f, 0.5f, 1.0f), kGrey(0.65f, 0.65f, 0.65f, 1.0f);

void section(const char* title) {
  ImGui::Spacing();
  ImGui::TextColored(ImVec4(0.55f, 0.75f, 1.0f, 1.0f), "%s", title);
  ImGui::Separator();
}

const OJson* at(const App& app, const std::string& pointer) {
  const auto& j = app.doc.json();
  if (!j) return nullptr;
  OJson::json_pointer p(pointer);
  if (!j->contains(p)) return nullptr;
  return &(*j)[p];
}

// The document as the plan library's JSON type (for plan_key_at: plan/schema.h). Dumped and
// parsed again every frame, it was most of the Plan panel's cost (callgrind of bench_gui's
// EditToRedraw/64: 4.4 M instructions a frame); now once per document revision.
const Json& plan_json(const App& app) {
  return app.doc.plain_json();
}

// An integer field of the plan: the value at `pointer`, or `fallback` (the resolved value,
// e.g. from a cluster preset) when the plan does not set it. Buttons "-" and "+" step it
// within the schema table's range of the key; a typed value goes into the plan as typed, so
// one the plan cannot take is refused with the parser's diagnostic (the words `simulate`
// gives), never silently changed.
void edit_int(App& app, const char* label, const std::string& pointer, int64_t fallback,
              const PlanKey& key, const std::string& hook_name = {}) {
  const OJson* v = at(app, pointer);
  int64_t x = v && v->is_number() ? v->get<int64_t>() : fallback;
  ImGui::PushID(pointer.c_str());
  const float bw = ImGui::GetFrameHeight();
  ImGui::SetNextItemWidth(std::max(60.0f, ImGui::CalcItemWidth() - 2 * (bw + 4)));
  int64_t nx = x;
  ImGui::InputScalar("##v", ImGuiDataType_S64, &nx);
  if (!hook_name.empty()) app.hook(hook_name);
  if (ImGui::IsItemDeactivatedAfterEdit()) app.doc.seal();
  bool stepped = false;  // a button press is an undo step of its own
  ImGui::SameLine(0, 4);
  if (ImGui::Button("-", ImVec2(bw, bw))) nx = x - 1, stepped = true;
  if (!hook_name.empty()) app.hook(hook_name + "-");
  ImGui::SameLine(0, 4);
  if (ImGui::Button("+", ImVec2(bw, bw))) nx = x + 1, stepped = true;
  if (!hook_name.empty()) app.hook(hook_name + "+");
  ImGui::SameLine();
  ImGui::TextUnformatted(label);
  ImGui::PopID();
  if (stepped && nx != x) nx = static_cast<int64_t>(key.clamp(static_cast<double>(nx)));
  if (nx != x) {
    if (stepped) app.doc.seal();
    app.doc.set(pointer, nx, !stepped);
  }
}

// A number field: a slider over [view_lo, view_hi] (a range to drag over, inside the key's
// range in the schema table). A value typed with Ctrl+click goes into the plan as typed
// (rounded to 3 significant digits), so one the parser refuses shows its diagnostic.
void edit_float(App& app, const char* label, const std::string& pointer, double fallback,
                const PlanKey& key, double view_lo, double view_hi, const char* fmt = "%.3g",
                bool log = false) {
  const OJson* v = at(app, pointer);
  float x = static_cast<float>(v && v->is_number() ? v->get<double>() : fallback);
  const float old = x;
  const double lo = key.clamp(view_lo), hi = key.clamp(view_hi);
  ImGui::PushID(pointer.c_str());
  ImGui::SliderFloat(label, &x, static_cast<float>(lo), static_cast<float>(hi), fmt,
                     log ? ImGuiSliderFlags_Logarithmic : 0);
  if (ImGui::IsItemDeactivatedAfterEdit()) app.doc.seal();
  if (ImGui::IsItemHovered() && !v)
    ImGui::SetTooltip("not set in the plan: %s is the resolved value", fmt::format("{:g}", fallback).c_str());
  ImGui::PopID();
  if (x != old) {
    // Keep round numbers round: 3 significant digits (inside the key's range when dragged
    // over the slider's; a typed value outside it stays as typed).
    const double rounded = std::stod(fmt::format("{:.3g}", x)), v = x;
    const double r = v >= lo && v <= hi ? key.clamp(rounded) : rounded;
    app.doc.set(pointer, r, true);
  }
}

void edit_bool(App& app, const char* label, const std::string& pointer, bool fallback) {
  const OJson* v = at(app, pointer);
  bool x = v && v->is_boolean() ? v->get<bool>() : fallback;
  ImGui::PushID(pointer.c_str());
  if (ImGui::Checkbox(label, &x)) app.doc.set(pointer, x);
  ImGui::PopID();
}

// A resolved value (plan/resolved.h) as an editor row: it shows what the plan resolves to,
// edits it at the plan path that holds it, and marks a value the plan does not write with
// where it comes from (default, preset, layout, builder). Values no plan key holds are shown,
// not edited.
void source_mark(const ResolvedField& f) {
  if (f.source == plan::ValueSource::kPlan) return;
  ImGui::SameLine();
  ImGui::TextColored(kGrey, "(%s)", std::string(plan::value_source_name(f.source)).c_str());
}

void field_int(App& app, const Json& doc, const ResolvedPlan& rp, const char* name) {
  const ResolvedField* f = rp.field(name);
  if (!f) return;
  const PlanKey* k = f->path.empty() ? nullptr : plan::plan_key_at(doc, f->path);
  if (!k || !f->value.is_number()) {
    ImGui::TextUnformatted(fmt::format("{} {}", f->value.dump(), name).c_str());
  } else {
    edit_int(app, name, f->path, f->value.get<int64_t>(), *k, name);
  }
  source_mark(*f);
}

void field_float(App& app, const Json& doc, const ResolvedPlan& rp, const char* name,
                 double view_lo, double view_hi, const char* format = "%.3f", bool log = false) {
  const ResolvedField* f = rp.field(name);
  if (!f || !f->value.is_number()) return;
  const PlanKey* k = f->path.empty() ? nullptr : plan::plan_key_at(doc, f->path);
  if (!k) {
    ImGui::TextUnformatted(fmt::format("{} {}", f->value.dump(), name).c_str());
    source_mark(*f);
    return;
  }
  edit_float(app, name, f->path, f->value.get<double>(), *k, view_lo, view_hi, format, log);
  app.hook(name);
  source_mark(*f);
}

void field_bool(App& app, const ResolvedPlan& rp, const char* name) {
  const ResolvedField* f = rp.field(name);
  if (!f || !f->value.is_boolean()) return;
  if (f->path.empty()) ImGui::TextUnformatted(fmt::format("{} {}", f->value.dump(), name).c_str());
  else edit_bool(app, name, f->path, f->value.get<bool>());
  app.hook(name);
  source_mark(*f);
}

// An enum value (the schema table's choices) as a combo, or as text where no plan key holds it.
void field_enum(App& app, const Json& doc, const ResolvedPlan& rp, const char* name) {
  const ResolvedField* f = rp.field(name);
  if (!f || !f->value.is_string()) return;
  const PlanKey* k = f->path.empty() ? nullptr : plan::plan_key_at(doc, f->path);
  const std::string v = f->value.get<std::string>();
  if (!k || k->type != KeyType::kEnum) {
    ImGui::TextUnformatted(fmt::format("{} {}", v, name).c_str());
  } else if (ImGui::BeginCombo(name, v.c_str())) {
    for (std::string_view c : k->choices)
      if (ImGui::Selectable(std::string(c).c_str(), c == v)) app.doc.set(f->path, std::string(c));
    ImGui::EndCombo();
  }
  app.hook(name);
  source_mark(*f);
}

void edit_string(App& app, const char* label, const std::string& pointer) {
  const OJson* v = at(app, pointer);
  std::string s = v && v->is_string() ? v->get<std::string>() : "";
  ImGui::PushID(pointer.c_str());
  if (ImGui::InputText(label, &s, ImGuiInputTextFlags_EnterReturnsTrue)) app.doc.set(pointer, s);
  ImGui::PopID();
}

// A JSON-valued field (filter, devices): edited as compact JSON text, applied on Enter when
// it parses.
void edit_json_value(App& app, const char* label, const std::string& pointer) {
  const OJson* v = at(app, pointer);
  std::string s = v ? v->dump() : "";
  ImGui::PushID(pointer.c_str());
  if (ImGui::InputText(label, &s, ImGuiInputTextFlags_EnterReturnsTrue)) {
    OJson j = OJson::parse(s, nullptr, false);
    if (j.is_discarded())
      app.status = fmt::format("{}: not valid JSON", pointer);
    else
      app.doc.set(pointer, j);
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("JSON; Enter applies");
  ImGui::PopID();
}

std::string filter_label(const OJson& f) {
  std::string s;
  if (!f.is_object()) return f.dump();
  for (auto it = f.begin(); it != f.end(); ++it) {
    if (it.key() == "PASS") continue;
    s += it.key() + (it->is_string() ? it->get<std::string>() : it->dump()) + " ";
  }
  if (f.contains("PASS") && f["PASS"].is_string()) s += f["PASS"].get<std::string>();
  if (!s.empty() && s.back() == ' ') s.pop_back();
  return s.empty() ? "{}" : s;
}

void menu_bar(App& app) {
  if (!ImGui::BeginMenuBar()) return;
  const bool file_menu = ImGui::BeginMenu("File");
  app.hook("menu file");
  if (file_menu) {
    if (ImGui::BeginMenu("Open recent", !app.recent.empty())) {
      for (const auto& r : std::vector<std::string>(app.recent.begin(), app.recent.end()))
        if (ImGui::MenuItem(r.c_str())) app.open(r);
      ImGui::EndMenu();
    }
    // A small file browser: the .json files and folders next to the path field's file.
    const bool browse = ImGui::BeginMenu("Browse");
    app.hook("menu browse");
    if (browse) {
      std::error_code ec;
      fs::path dir = app.path_field.empty() ? fs::path(".") : fs::path(app.path_field);
      if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
      if (dir.empty()) dir = ".";
      ImGui::TextDisabled("%s", dir.string().c_str());
      if (ImGui::MenuItem("..")) app.path_field = (dir / "..").lexically_normal().string() + "/";
      std::vector<fs::directory_entry> entries;
      for (const auto& e : fs::directory_iterator(dir, ec)) {
        if (entries.size() >= 500) break;
        if (e.is_directory(ec) || e.path().extension() == ".json") entries.push_back(e);
      }
      std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.path() < b.path(); });
      for (const auto& e : entries) {
        const bool is_dir = e.is_directory(ec);
        const std::string label = e.path().filename().string() + (is_dir ? "/" : "");
        const bool chosen = ImGui::MenuItem(label.c_str());
        app.hook("browse " + label);
        if (chosen) {
          if (is_dir)
            app.path_field = e.path().string() + "/";
          else
            app.open(e.path().string());
        }
      }
      ImGui::EndMenu();
    }
    if (ImGui::MenuItem("Save", "Ctrl+S")) {
      std::string err;
      app.status = app.doc.save({}, &err) ? "saved " + app.doc.path() : err;
    }
    if (ImGui::MenuItem("Quit")) app.quit = true;
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Edit")) {
    if (ImGui::MenuItem("Undo", "Ctrl+Z", false, app.doc.can_undo())) app.doc.undo();
    if (ImGui::MenuItem("Redo", "Ctrl+Y", false, app.doc.can_redo())) app.doc.redo();
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("View")) {
    if (ImGui::MenuItem("Fit", "F")) app.fit();
    ImGui::MenuItem("Bubbles with causes", nullptr, &app.tl.show_bubbles);
    ImGui::MenuItem("Critical path", "C", &app.tl.show_critical);
    ImGui::MenuItem("Flow arrows of the selection", nullptr, &app.tl.show_flows);
    ImGui::MenuItem("Baseline lanes", nullptr, &app.tl.show_baseline);
    ImGui::MenuItem("Help", "H", &app.show_help);
    ImGui::EndMenu();
  }
  ImGui::EndMenuBar();
}

// SameLine when a button labelled `label` fits the rest of the row, else a new row (a button
// is never cut at the panel's edge).
void same_line_if_fits(const char* label) {
  const float w = ImGui::CalcTextSize(label).x + ImGui::GetStyle().FramePadding.x * 2;
  ImGui::SameLine();
  if (ImGui::GetContentRegionAvail().x < w) ImGui::NewLine();
}

void file_row(App& app) {
  ImGuiIO& io = ImGui::GetIO();
  if (io.KeyCtrl && ImGui::IsKeyPressed('O', false)) ImGui::SetKeyboardFocusHere();
  ImGui::SetNextItemWidth(-ImGui::CalcTextSize("Open Open trace Save as").x - 40);
  const bool enter = ImGui::InputTextWithHint("##path", "plan.json path (Ctrl+O)", &app.path_field,
                                              ImGuiInputTextFlags_EnterReturnsTrue);
  app.hook("path");
  ImGui::SameLine();
  if (ImGui::Button("Open") || enter) app.open(app.path_field);
  app.hook("open");
  ImGui::SameLine();
  if (ImGui::Button("Open trace")) app.open_trace(app.path_field);  // status says how it went
  app.hook("open trace");
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Open the path as a Chrome trace to compare with the prediction");
  ImGui::SameLine();
  if (ImGui::Button("Save as")) {
    std::string err;
    app.status = app.doc.save(app.path_field, &err) ? "saved " + app.path_field : err;
  }
  app.hook("save as");
  if (ImGui::Button("Undo")) app.doc.undo();
  app.hook("undo");
  same_line_if_fits("Redo");
  if (ImGui::Button("Redo")) app.doc.redo();
  app.hook("redo");
  same_line_if_fits("Save");
  if (ImGui::Button("Save")) {
    std::string err;
    app.status = app.doc.save({}, &err) ? "saved " + app.doc.path() : err;
  }
  app.hook("save");
  same_line_if_fits("Export trace");
  if (ImGui::Button("Export trace")) {
    const std::string p = (app.doc.path().empty() ? std::string("plan") : app.doc.path()) + ".trace.json";
    std::string err;
    app.status = app.export_trace(p, &err) ? "wrote " + p : err;
  }
  app.hook("export trace");
  same_line_if_fits("torch CSV");
  if (ImGui::Button("torch CSV")) {
    const std::string p = (app.doc.path().empty() ? std::string("plan") : app.doc.path()) + ".csv";
    std::string err;
    app.status = app.export_torch_csv(p, &err) ? "wrote " + p : err;
  }
  app.hook("torch csv");
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("torch.distributed.pipelining's CSV action table of this schedule");
  same_line_if_fits("PNG");
  if (ImGui::Button("PNG")) {
    app.screenshot_request =
        (app.doc.path().empty() ? std::string("plan") : app.doc.path()) + ".png";
    app.status = "wrote " + app.screenshot_request;
  }
  app.hook("png");
  same_line_if_fits(app.baseline ? "Unpin" : "Pin baseline");
  if (ImGui::Button(app.baseline ? "Unpin" : "Pin baseline")) app.pin_baseline(!app.baseline);
  app.hook("pin");
  same_line_if_fits("Pass granularity");
  bool pass = app.granularity == sim::Granularity::kPass;
  if (ImGui::Checkbox("Pass granularity", &pass))
    app.granularity = pass ? sim::Granularity::kPass : sim::Granularity::kOp;
  app.hook("granularity");
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Run each region pass's consecutive ops as one engine task (simulate "
                      "--granularity pass): fewer events, equal under fixed costs, an "
                      "approximation under interference (docs/semantics.md)");

  // Status: what is shown and whether it is current.
  const std::string name = app.doc.display_name() + (app.doc.dirty() ? " *" : "");
  ImGui::TextColored(kGrey, "%s", name.c_str());
  if (app.worker.busy()) {
    auto [phase, f] = app.worker.progress();
    app.plan_status = fmt::format("STALE - simulating ({} {:.0f}%)", phase, f * 100);
    ImGui::TextColored(kYellow, "%s", app.plan_status.c_str());
  } else if (app.last_failed) {
    app.plan_status = fmt::format("ERROR - {} diagnostic(s); {}", app.diags.size(),
                                  app.current ? "showing the last good result"
                                              : "nothing simulated yet (see Diagnostics)");
    ImGui::TextColored(kRed, "%s", app.plan_status.c_str());
  } else if (app.current) {
    app.plan_status = fmt::format("up to date - step {}, simulated in {:.1f} ms",
                                  format_time(static_cast<double>(app.current->result.step_time)),
                                  app.last_edit_to_result_ms);
    ImGui::TextColored(kGreen, "%s", app.plan_status.c_str());
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s %.1f ms, simulation %.1f ms, lanes %.1f ms",
                        app.current->recompiled ? "parse + compile" : "parse + cost model (no recompile)",
                        app.current->prepare_ms, app.current->result.sim_wall_ms, app.current->lanes_ms);
  }
  app.hook("status");
  if (!app.status.empty()) ImGui::TextColored(kGrey, "%s", app.status.c_str());
}

void parameters_tab(App& app) {
  const auto& j = app.doc.json();
  if (!j || !j->is_object()) {
    ImGui::TextColored(kRed, "The plan is not valid JSON: fix it in the JSON tab.");
    return;
  }
  if (!app.current) {
    ImGui::TextColored(kGrey, "No simulated plan yet: its resolved values show here.");
    return;
  }
  // What the plan resolves to (describe --format json shows the same values).
  const ResolvedPlan rp = sim::resolve_plan(app.current->session->compiled());
  ImGui::PushItemWidth(ImGui::GetContentRegionAvail().x * 0.55f);
  // Keys, paths and bounds are the schema table's (plan/schema.h), the parser's.
  const Json& doc = plan_json(app);
  const ResolvedField* family = rp.field("family");
  if (!rp.family.empty() && family && !family->path.empty()) {
    section("Builder");
    const auto& fams = pipelines::schedule_family_names();
    const std::string canon = pipelines::canonical_family(rp.family).value_or(rp.family);
    if (ImGui::BeginCombo("family", canon.c_str())) {
      for (const auto& f : fams)
        if (ImGui::Selectable(f.c_str(), f == canon)) app.doc.set(family->path, f);
      ImGui::EndCombo();
    }
    app.hook("family");
  } else {
    section("Schedule");
  }
  field_int(app, doc, rp, "ranks");
  field_int(app, doc, rp, "stages_per_rank");
  field_int(app, doc, rp, "microbatches");
  field_int(app, doc, rp, "tp");
  field_int(app, doc, rp, "dp");
  field_int(app, doc, rp, "ep");
  field_int(app, doc, rp, "cp");
  if (rp.cp > 1) field_enum(app, doc, rp, "cp_comm_type");
  field_int(app, doc, rp, "zero");
  field_bool(app, rp, "sequence_parallel");
  field_bool(app, rp, "tp_comm_overlap");
  ImGui::TextWrapped("%s", fmt::format("recompute {}, streams {}, global batch {} sequences",
                                       rp.recompute, rp.streams, rp.global_batch())
                               .c_str());
  // One slider for every replicate directive's bucket size (a hand-written directive list).
  const OJson* sched = at(app, "/schedule");
  std::vector<std::string> reps;
  for (size_t i = 0; sched && sched->is_array() && i < sched->size(); ++i)
    if (section_at(doc, fmt::format("/schedule/{}", i)) == "replicate")
      reps.push_back(fmt::format("/schedule/{}/bucket_size", i));
  if (!reps.empty()) {
    const PlanKey& bucket = plan::schema_key("replicate", "bucket_size");
    float b = static_cast<float>(rp.bucket_size_MB);
    // The visible label is the key's name, as on the other rows (a longer one was clipped at
    // the default layout); the tooltip says that it sets every replicate directive's. Scripts
    // address the row by its hook, "bucket_size", not by this label.
    if (ImGui::SliderFloat("bucket_size (MB)", &b,
                           static_cast<float>(bucket.clamp(1)),
                           static_cast<float>(bucket.clamp(1000)), "%.0f",
                           ImGuiSliderFlags_Logarithmic)) {
      OJson nj = *j;
      for (const std::string& ptr : reps)
        nj[OJson::json_pointer(ptr)] = bucket.clamp(std::round(b));
      app.doc.set_json(nj, true);
    }
    if (ImGui::IsItemDeactivatedAfterEdit()) app.doc.seal();
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s", fmt::format("the bucket_size of every replicate directive ({} of them)",
                                          reps.size())
                                  .c_str());
    app.hook("bucket_size");
  }
  // ---- model
  section("Model");
  field_int(app, doc, rp, "layers");
  if (rp.field("hidden")) field_int(app, doc, rp, "hidden");
  if (rp.field("seq_len")) field_int(app, doc, rp, "seq_len");
  field_int(app, doc, rp, "microbatch_size");
  field_int(app, doc, rp, "pp_regions");
  // The transformer's switches that change the step (absent from a synthetic model's fields).
  field_bool(app, rp, "tie_embeddings");
  field_bool(app, rp, "async_tp_grad_reduce");
  field_float(app, doc, rp, "dropout", 0, 0.5, "%.2f");
  // ---- cluster
  section("Cluster");
  field_int(app, doc, rp, "nodes");
  field_int(app, doc, rp, "devices_per_node");
  field_float(app, doc, rp, "intra_node_GBps", 1, 2000, "%.0f", true);
  field_float(app, doc, rp, "inter_node_GBps", 1, 2000, "%.0f", true);
  field_float(app, doc, rp, "memory_GiB", 1, 1024, "%.0f");
  // ---- cost model
  section("Cost model");
  const ResolvedField* kind = rp.field("costmodel");
  if (kind && kind->value == "fixed") {
    for (const char* key : {"F", "B", "BI", "BW", "comm"})
      edit_float(app, key, std::string("/costmodel/") + key, 0, plan::schema_key("costmodel", key),
                 0, 100, "%.3g");
  } else {
    // Sliders over a useful part of each option's range; values are clamped to the range.
    field_float(app, doc, rp, "dispatch_us", 0, 100, "%.3g");
    field_float(app, doc, rp, "comm_sm_share", 0, 1);
    field_float(app, doc, rp, "comm_hbm_share", 0, 1);
    field_float(app, doc, rp, "gemm_efficiency", 0.01, 1);
    field_float(app, doc, rp, "attention_efficiency", 0.01, 1);
    field_float(app, doc, rp, "memory_efficiency", 0.01, 1);
  }
  ImGui::PopItemWidth();
  // The tab's visible width: a row whose hook ends beyond it has its label clipped.
  const ImVec2 wp = ImGui::GetWindowPos();
  app.hooks["parameters width"] = {wp.x + ImGui::GetWindowContentRegionMin().x, wp.y,
                                   wp.x + ImGui::GetWindowContentRegionMax().x, wp.y + ImGui::GetWindowHeight()};
}

void directives_tab(App& app) {
  const auto& j = app.doc.json();
  const OJson* sched = at(app, "/schedule");
  if (!sched || !sched->is_array()) {
    ImGui::TextColored(kGrey, "No directive list (a builder call, or the JSON is invalid).");
    if (sched && sched->is_object() && ImGui::Button("Expand the builder into directives") &&
        app.current) {
      OJson nj = *j;
      nj[OJson::json_pointer("/schedule")] = OJson::parse(
          plan::directives_to_json(app.current->session->compiled().plan.schedule).dump());
      app.doc.set_json(nj);
    }
    return;
  }
  const Json& doc = plan_json(app);
  int move_from = -1, move_to = -1, remove = -1;
  for (size_t i = 0; i < sched->size(); ++i) {
    const std::string at_i = fmt::format("/schedule/{}", i);
    std::string op = section_at(doc, at_i);  // the directive's op (schema.h), "" if none
    if (op.empty()) op = "?";
    std::string summary = op;
    if (const OJson* f = at(app, at_i + "/filter")) summary += " " + filter_label(*f);
    const OJson* groups = at(app, at_i + "/filters");
    if (op == "order" && groups && groups->is_array())
      summary += fmt::format(" ({} groups)", groups->size());
    bool has_error = false;
    for (const auto& dg : app.diags)
      if (dg.directive == static_cast<int>(i) && dg.severity == Severity::kError) has_error = true;
    ImGui::PushID(static_cast<int>(i));
    if (has_error) ImGui::PushStyleColor(ImGuiCol_Text, kRed);
    const bool open = ImGui::TreeNode("d", "#%zu %s", i, summary.c_str());
    if (has_error) ImGui::PopStyleColor();
    ImGui::SameLine(ImGui::GetContentRegionAvail().x - 70 + ImGui::GetCursorPosX() -
                    ImGui::GetCursorPosX());
    if (ImGui::SmallButton("^") && i > 0) move_from = static_cast<int>(i), move_to = static_cast<int>(i) - 1;
    ImGui::SameLine();
    if (ImGui::SmallButton("v") && i + 1 < sched->size())
      move_from = static_cast<int>(i), move_to = static_cast<int>(i) + 1;
    ImGui::SameLine();
    if (ImGui::SmallButton("x")) remove = static_cast<int>(i);
    app.hook(fmt::format("directive {} remove", i));
    if (open) {
      // The op's keys, types, bounds and defaults: the schema table's (plan/schema.h).
      for (const PlanKey& k : plan::plan_schema()) {
        if (k.section != op || k.key == "op" || k.key == "comment") continue;
        const std::string key(k.key);
        const std::string ptr = fmt::format("/schedule/{}/{}", i, key);
        const Json def = k.default_value();
        switch (k.type) {
          case KeyType::kObject:
          case KeyType::kOther:
            edit_json_value(app, key.c_str(), ptr);
            break;
          case KeyType::kString:
          case KeyType::kEnum:
            edit_string(app, key.c_str(), ptr);
            break;
          case KeyType::kInteger:
            edit_int(app, key.c_str(), ptr, def.is_number() ? def.get<int64_t>() : 0, k,
                     fmt::format("directive {} {}", i, key));
            break;
          case KeyType::kNumber:
            edit_float(app, key.c_str(), ptr, def.is_number() ? def.get<double>() : 0, k, k.min,
                       k.max, "%.3g", true);
            break;
          case KeyType::kBoolean:
            edit_bool(app, key.c_str(), ptr, def.is_boolean() && def.get<bool>());
            break;
        }
      }
      for (const auto& dg : app.diags)
        if (dg.directive == static_cast<int>(i))
          ImGui::TextColored(dg.severity == Severity::kError ? kRed : kYellow, "%s",
                             dg.message.c_str());
      ImGui::TreePop();
    }
    ImGui::PopID();
  }
  static int add_op = 0;
  std::vector<const char*> ops;
  for (std::string_view op : plan::directive_ops()) ops.push_back(op.data());  // literals: 0-ended
  ImGui::SetNextItemWidth(140);
  ImGui::Combo("##addop", &add_op, ops.data(), static_cast<int>(ops.size()));
  ImGui::SameLine();
  if (ImGui::Button("Add directive")) {
    OJson nj = *j;
    nj[OJson::json_pointer("/schedule/-")] =
        OJson::parse(plan::directive_template(ops[static_cast<size_t>(add_op)]).dump());
    app.doc.set_json(nj);
  }
  app.hook("add directive");
  if (remove >= 0) app.doc.erase(fmt::format("/schedule/{}", remove));
  if (move_from >= 0) {
    OJson nj = *j;
    std::swap(nj[OJson::json_pointer(fmt::format("/schedule/{}", move_from))],
              nj[OJson::json_pointer(fmt::format("/schedule/{}", move_to))]);
    app.doc.set_json(nj);
  }
}

struct CellRef {
  int directive, group;
};

void order_tab(App& app) {
  const OJson* sched = at(app, "/schedule");
  if (!sched || !sched->is_array()) {
    ImGui::TextColored(kGrey, "No order directives (a builder call, or the JSON is invalid).");
    return;
  }
  const auto& j = app.doc.json();
  const Json& doc = plan_json(app);
  ImGui::TextWrapped("Drag a cell onto another to move it there; hold Shift when dropping to "
                     "group them (run overlapped). Right-click a group to split it.");
  std::optional<std::pair<CellRef, CellRef>> move;
  bool group = false;
  std::optional<CellRef> split;
  const float cell = ImGui::CalcTextSize("F00|B00").x + 8;
  auto filters_at = [](int directive) {
    return OJson::json_pointer(fmt::format("/schedule/{}/filters", directive));
  };
  for (size_t i = 0; i < sched->size(); ++i) {
    const OJson* groups = at(app, fmt::format("/schedule/{}/filters", i));
    if (section_at(doc, fmt::format("/schedule/{}", i)) != "order" || !groups ||
        !groups->is_array())
      continue;
    ImGui::PushID(static_cast<int>(i));
    ImGui::TextColored(kGrey, "#%zu", i);
    const OJson& gs = *groups;
    for (size_t g = 0; g < gs.size(); ++g) {
      std::string label;
      OJson::json_pointer dummy;
      const OJson& grp = gs[g];
      if (grp.is_array())
        for (size_t k = 0; k < grp.size(); ++k) {
          const OJson& f = grp[k];
          std::string pass = f.is_object() && f.contains("PASS") && f["PASS"].is_string()
                                 ? f["PASS"].get<std::string>()
                                 : "";
          std::string mb = f.is_object() && f.contains("MB") ? f["MB"].dump() : "";
          label += (k ? "|" : "") + pass + mb;
        }
      ImGui::SameLine();
      if (ImGui::GetCursorPosX() + cell > ImGui::GetWindowContentRegionMax().x) ImGui::NewLine();
      ImGui::PushID(static_cast<int>(g));
      const bool is_f = !label.empty() && label[0] == 'F';
      ImGui::PushStyleColor(ImGuiCol_Button, is_f ? ImVec4(0.2f, 0.45f, 0.8f, 1) : ImVec4(0.75f, 0.4f, 0.15f, 1));
      ImGui::Button(label.c_str(), ImVec2(cell, 0));
      ImGui::PopStyleColor();
      app.hook(fmt::format("order {} {}", i, g));
      if (ImGui::BeginDragDropSource()) {
        CellRef r{static_cast<int>(i), static_cast<int>(g)};
        ImGui::SetDragDropPayload("ORDER_CELL", &r, sizeof r);
        ImGui::TextUnformatted(label.c_str());
        ImGui::EndDragDropSource();
      }
      if (ImGui::BeginDragDropTarget()) {
        if (const ImGuiPayload* p = ImGui::AcceptDragDropPayload("ORDER_CELL")) {
          CellRef from;
          std::memcpy(&from, p->Data, sizeof from);
          move = {{from, CellRef{static_cast<int>(i), static_cast<int>(g)}}};
          group = ImGui::GetIO().KeyShift;
        }
        ImGui::EndDragDropTarget();
      }
      if (ImGui::IsItemClicked(ImGuiMouseButton_Right) && grp.is_array() && grp.size() > 1)
        split = CellRef{static_cast<int>(i), static_cast<int>(g)};
      ImGui::PopID();
    }
    ImGui::PopID();
  }
  if (move && move->first.directive == move->second.directive &&
      move->first.group != move->second.group) {
    OJson nj = *j;
    OJson& gs = nj[filters_at(move->first.directive)];
    OJson cellv = gs[static_cast<size_t>(move->first.group)];
    int to = move->second.group;
    gs.erase(static_cast<size_t>(move->first.group));
    if (move->first.group < to && !group) {
      // moving right: land after the target
    } else if (move->first.group < to) {
      --to;
    }
    if (group) {
      for (auto& f : cellv) gs[static_cast<size_t>(to)].push_back(f);
    } else {
      gs.insert(gs.begin() + to, cellv);
    }
    app.doc.set_json(nj);
  }
  if (split) {
    OJson nj = *j;
    OJson& gs = nj[filters_at(split->directive)];
    OJson grp = gs[static_cast<size_t>(split->group)];
    gs.erase(static_cast<size_t>(split->group));
    for (size_t k = 0; k < grp.size(); ++k)
      gs.insert(gs.begin() + split->group + static_cast<long>(k), OJson::array({grp[k]}));
    app.doc.set_json(nj);
  }
}

void json_tab(App& app) {
  if (app.json_edit_rev != app.doc.revision()) {
    app.json_edit = app.doc.text();
    app.json_edit_rev = app.doc.revision();
  }
  // Diagnostics are listed under the editor (up to 4) and marked at their line in it.
  std::vector<const Diagnostic*> located;
  for (const auto& d : app.diags)
    if (d.loc.line > 0) located.push_back(&d);
  const size_t listed = std::min<size_t>(located.size(), 4);
  const float lh = ImGui::GetTextLineHeightWithSpacing();
  const ImVec2 size(-1, ImGui::GetContentRegionAvail().y - 4 - static_cast<float>(listed) * lh * 2);
  if (ImGui::InputTextMultiline("##json", &app.json_edit, size, ImGuiInputTextFlags_AllowTabInput)) {
    app.doc.set_text(app.json_edit, true);
    app.json_edit_rev = app.doc.revision();
  }
  if (ImGui::IsItemDeactivated()) app.doc.seal();
  app.hook("json");
  // The marker: a bar in the left margin and an underline of the line; hovering the line
  // shows the message (the editor's scroll is its child window's).
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  ImGuiWindow* parent = ImGui::GetCurrentWindow();
  float scroll = 0;
  if (!parent->DC.ChildWindows.empty()) scroll = parent->DC.ChildWindows.back()->Scroll.y;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->PushClipRect(a, b, true);
  const float th = ImGui::GetTextLineHeight();
  const float pad = ImGui::GetStyle().FramePadding.y;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  for (const Diagnostic* d : located) {
    const float y = a.y + pad + static_cast<float>(d->loc.line - 1) * th - scroll;
    const ImU32 col = d->severity == Severity::kError ? IM_COL32(255, 90, 80, 255) : IM_COL32(255, 210, 60, 255);
    dl->AddRectFilled(ImVec2(a.x, y), ImVec2(a.x + 4, y + th), col);
    dl->AddLine(ImVec2(a.x, y + th), ImVec2(b.x, y + th), col, 1.5f);
    if (mouse.x >= a.x && mouse.x < b.x && mouse.y >= y && mouse.y < y + th)
      ImGui::SetTooltip("%s", d->render().c_str());
  }
  dl->PopClipRect();
  for (size_t i = 0; i < listed; ++i) {
    const Diagnostic& d = *located[i];
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(d.severity == Severity::kError ? kRed : kYellow, "line %u:%u: %s%s%s", d.loc.line,
                       d.loc.col, d.message.c_str(), d.hint.empty() ? "" : " - ", d.hint.c_str());
    ImGui::PopTextWrapPos();
  }
}

// A diagnostic as Diagnostic::render() prints it, but for a proportional font and word wrap:
// the message, hint and notes wrap; the echoed source line does not, and the caret is drawn
// under the column's measured x (spaces would not line up with proportional glyphs).
void diagnostic_text(App& app, size_t index, const Diagnostic& d, const ImVec4& color,
                     const std::string& code = "") {
  Diagnostic head = d;
  head.source_line.clear();
  head.hint.clear();
  head.notes.clear();
  std::string h = head.render();
  while (!h.empty() && h.back() == '\n') h.pop_back();
  if (!code.empty()) h += fmt::format(" [{}]", code);  // the warning's stable code
  ImGui::PushTextWrapPos(0);
  ImGui::TextColored(color, "%s", h.c_str());
  ImGui::PopTextWrapPos();
  if (!d.source_line.empty() && d.loc.col > 0) {
    uint32_t caret = d.caret_col ? d.caret_col : d.loc.col;
    const std::string shown = d.caret_col || d.source_line.size() <= kMaxEchoedLine ? d.source_line
                                                                                    : window_line(d.source_line, caret);
    const std::string before = shown.substr(0, std::min<size_t>(caret - 1, shown.size()));
    ImGui::Indent();
    const float x = ImGui::GetCursorScreenPos().x;
    ImGui::TextUnformatted(shown.c_str());
    if (index < 8) app.hook(fmt::format("diagnostic {} source", index));
    const float cx = x + ImGui::CalcTextSize(before.c_str()).x;
    ImGui::SetCursorScreenPos(ImVec2(cx - ImGui::CalcTextSize("^").x * 0.5f, ImGui::GetCursorScreenPos().y));
    ImGui::TextColored(color, "^");
    if (index < 8) app.hook(fmt::format("diagnostic {} caret", index));
    ImGui::Unindent();
  }
  ImGui::PushTextWrapPos(0);
  if (!d.hint.empty()) ImGui::TextColored(color, "  hint: %s", d.hint.c_str());
  for (const auto& n : d.notes) ImGui::TextColored(color, "  note: %s: %s", n.loc.str().c_str(), n.message.c_str());
  ImGui::PopTextWrapPos();
}

void diagnostics_tab(App& app) {
  if (app.diags.empty()) {
    ImGui::TextColored(kGreen, "No problems.");
    return;
  }
  for (size_t i = 0; i < app.diags.size(); ++i) {
    const Diagnostic& d = app.diags[i];
    diagnostic_text(app, i, d, d.severity == Severity::kError ? kRed : kYellow,
                    i < app.diag_codes.size() ? app.diag_codes[i] : std::string());
    ImGui::Separator();
  }
}

}  // namespace

void draw_plan_panel(App& app) {
  menu_bar(app);
  file_row(app);
  ImGui::Separator();
  if (ImGui::BeginTabBar("plan_tabs")) {
    auto tab = [&](const char* label, const char* hook_name, auto&& body, bool child = true) {
      const bool open = ImGui::BeginTabItem(label);
      app.hook(hook_name);
      if (!open) return;
      if (child) ImGui::BeginChild(hook_name);
      body();
      if (child) ImGui::EndChild();
      ImGui::EndTabItem();
    };
    tab("Parameters", "tab parameters", [&] { parameters_tab(app); });
    tab("Directives", "tab directives", [&] { directives_tab(app); });
    tab("Order", "tab order", [&] { order_tab(app); });
    tab("JSON", "tab json", [&] { json_tab(app); }, false);
    const std::string dl = fmt::format("Diagnostics ({})###diags", app.diags.size());
    tab(dl.c_str(), "tab diagnostics", [&] { diagnostics_tab(app); });
    ImGui::EndTabBar();
  }
}

}  // namespace stretto::gui
