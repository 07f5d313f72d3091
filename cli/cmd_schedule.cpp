// `stretto build-schedule`, `stretto import torch-csv`, `stretto export torch-csv`
// (DESIGN.md §4): thin wrappers over schedules/builders.h and schedules/torch_csv.h.
#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "output.h"
#include "usage.h"
#include "stretto/plan/estimate.h"
#include "stretto/pipelines/builders.h"
#include "stretto/pipelines/layout_base.h"
#include "stretto/plan/json_source.h"
#include "stretto/plan/plan.h"
#include "stretto/pipelines/torch_csv.h"

namespace stretto::cli {

using pipelines::build_schedule;
using plan::Json;
using plan::JsonSource;

namespace {

// Points diagnostics that carry only a JSON pointer into `src` at their file:line:col, and
// names `fallback` as the file of the others (command-line problems).
Diagnostics located(Diagnostics ds, const JsonSource* src, const std::string& fallback) {
  for (Diagnostic& d : ds) {
    if (d.loc.known() || !d.loc.file.empty()) continue;
    if (src && !d.loc.json_pointer.empty()) {
      SourceLoc l = src->loc(d.loc.json_pointer);
      d.loc = l;
      d.source_line = src->line_text(l.line);
    } else {
      d.loc.file = fallback;
    }
  }
  return ds;
}

// A --base file: a JSON list of directives, or an object (e.g. a plan) whose "schedule" is one.
struct Base {
  std::unique_ptr<JsonSource> src;
  std::vector<plan::Directive> directives;
};

Expected<Base> load_base(const std::string& path) {
  auto src = JsonSource::load(path);
  if (!src) return fail(std::move(src.error()));
  Base b;
  b.src = std::make_unique<JsonSource>(std::move(*src));
  const Json& root = b.src->root();
  if (root.is_array() || plan::is_plan_document(root)) {
    // The plan parser's reading of a schedule (plan.h): a directive list is a base.
    auto s = plan::parse_schedule(*b.src, root.is_array() ? "" : "/schedule");
    if (!s) return fail(std::move(s.error()));
    if (!s->builder) {
      b.directives = std::move(s->directives);
      return b;
    }
  }
  return fail(b.src->error_at("", "a base must be a list of directives",
                              "e.g. [{\"op\":\"place\",\"filter\":{\"PP\":0},\"devices\":[0,2]}], "
                              "or a plan whose \"schedule\" is such a list"));
}

std::string directives_text(const std::vector<plan::Directive>& ds) {
  return plan::directives_to_json(ds).dump(2) + "\n";
}

// The schedule of a plan file for export: its directive list, or its builder call built with
// torch's grid padding (so that the CSV is cell-for-cell what torch would dump).
Expected<pipelines::PipelineSchedule> schedule_of_plan(const std::string& path) {
  auto src = JsonSource::load(path);
  if (!src) return fail(std::move(src.error()));
  std::string ptr;
  if (src->root().is_array()) {
    ptr = "";
  } else if (plan::is_plan_document(src->root())) {
    ptr = "/schedule";
  } else {
    return fail(src->error_at("", "expected a plan with a \"schedule\" (or a directive list)"));
  }
  // The plan parser's own reading of the schedule (plan.h), not a second one.
  auto parsed = plan::parse_schedule(*src, ptr);
  if (!parsed) return fail(std::move(parsed.error()));
  if (parsed->builder) {
    const plan::BuilderCall& call = *parsed->builder;
    // Check the whole call (ranks inferred from the base, base consistency) as the compiler
    // would, then rebuild with torch's padding for the CSV.
    auto ds = pipelines::expand_builder(call);
    if (!ds) return fail(located(std::move(ds.error()), &*src, path));
    auto from = pipelines::schedule_from_directives(*ds);
    if (!from) return from;
    pipelines::BuildOptions opt;
    opt.torch_padding = true;
    return build_schedule(call.builder, from->ranks, from->stages_per_rank, call.microbatches,
                          opt);
  }
  auto s = pipelines::schedule_from_directives(parsed->directives);
  if (!s) return fail(located(std::move(s.error()), &*src, path));
  return s;
}

// --layout "tp=2,pp=4,dp=2" or '{"tp": 2, "pp": 4}' -> a Layout (the plan's parser checks it).
Expected<plan::Layout> parse_layout_option(const std::string& text) {
  std::string json = text;
  if (json.find('{') == std::string::npos) {
    Json o = Json::object();
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find(',', pos);
      if (end == std::string::npos) end = text.size();
      const std::string item = text.substr(pos, end - pos);
      const size_t eq = item.find('=');
      if (eq == std::string::npos) {
        Diagnostic d;
        d.loc.file = "--layout";
        d.message = fmt::format("'{}' is not key=value", item);
        d.hint = "e.g. --layout tp=2,pp=4,dp=2";
        return fail(std::move(d));
      }
      const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
      if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() < 10)
        o[k] = std::stoi(v);
      else if (v == "true" || v == "false")
        o[k] = v == "true";
      else
        o[k] = v;
      pos = end + 1;
    }
    json = o.dump();
  }
  auto src = JsonSource::parse(json, "--layout");
  if (!src) return fail(std::move(src.error()));
  Diagnostics errs;
  auto l = plan::parse_layout(*src, "", errs);
  if (!l) {
    for (Diagnostic& d : errs) d.source_line.clear();
    return fail(std::move(errs));
  }
  return *l;
}

// What the cells of show_grid mean.
std::string grid_legend(const pipelines::PipelineSchedule& s) {
  const bool with_stage = s.stages_per_rank > 1 || s.bidirectional || s.stages != s.ranks;
  std::string o = "legend: ";
  o += with_stage ? "<stage><op><microbatch>, e.g. 2F3 = stage 2's forward of microbatch 3; "
                  : "<op><microbatch>, e.g. F3 = forward of microbatch 3; ";
  o += "F forward, B backward (input + weight gradient), I backward for inputs (BI), W backward "
       "for weights (BW); a|b = a and b overlapped in one slot; . = idle\n";
  o += "        rows r0..r" + std::to_string(s.ranks - 1) +
       " are pipeline ranks; time runs left to right, one slot per column\n";
  return o;
}

struct BuildArgs {
  std::string layout;
  std::string schedule;
  int ranks = 0;
  int stages_per_rank = 0;
  int microbatches = 0;
  std::string base;
  std::string output;
  bool show = false;
};

int run_build(const BuildArgs& a) {
  Base base;
  if (!a.base.empty()) {
    auto b = load_base(a.base);
    if (!b) return report(b.error());
    base = std::move(*b);
  }
  std::optional<plan::Layout> layout;
  int ranks = a.ranks;
  if (!a.layout.empty()) {
    if (!a.base.empty()) {
      Diagnostic d;
      d.loc.file = "build-schedule";
      d.message = "--layout and --base both describe the placement; give one";
      d.hint = "--layout pp=4,dp=2 generates the base";
      return report({d});
    }
    auto l = parse_layout_option(a.layout);
    if (!l) return report(l.error());
    layout = *l;
    if (ranks > 0 && ranks != layout->pp) {
      Diagnostic d;
      d.loc.file = "build-schedule";
      d.message = fmt::format("--ranks {} disagrees with the layout's pp = {}", ranks, layout->pp);
      d.hint = "drop --ranks; the layout's pp is the number of pipeline ranks";
      return report({d});
    }
    ranks = layout->pp;
  }
  if (ranks <= 0) {
    Diagnostic d;
    d.loc.file = "build-schedule";
    d.message = "--ranks P (or --layout pp=P,...) is required";
    d.hint = "e.g. --ranks 4";
    return report({d});
  }
  if (auto big = plan::check_schedule_budget(ranks, a.stages_per_rank, a.microbatches);
      !big.empty())
    return report(big);
  auto sched = build_schedule(a.schedule, ranks, a.stages_per_rank, a.microbatches);
  if (!sched) return report(located(std::move(sched.error()), nullptr, "build-schedule"));
  if (layout) {
    auto gen =
        pipelines::layout_base(*layout, sched->stage_to_rank, sched->bidirectional, sched->family);
    if (!gen) return report(located(std::move(gen.error()), nullptr, "--layout"));
    base.directives = std::move(*gen);
  }
  auto ds = pipelines::schedule_to_directives(*sched, base.directives);
  if (!ds) return report(located(std::move(ds.error()), base.src.get(), "build-schedule"));
  if (a.show) {
    pipelines::BuildOptions opt;
    opt.torch_padding = true;  // lines the grid up like torch's own printout
    auto padded = build_schedule(a.schedule, ranks, a.stages_per_rank, a.microbatches, opt);
    const std::string grid = pipelines::show_grid(padded ? *padded : *sched) + grid_legend(*sched);
    if (a.output.empty() || a.output == "-") return write_output("", grid) ? 0 : 2;
    std::fputs(grid.c_str(), stderr);
  }
  return write_output(a.output, directives_text(*ds)) ? 0 : 2;
}

struct ImportArgs {
  std::string file;
  std::string base;
  std::string output;
};

int run_import(const ImportArgs& a) {
  Base base;
  if (!a.base.empty()) {
    auto b = load_base(a.base);
    if (!b) return report(b.error());
    base = std::move(*b);
  }
  auto sched = pipelines::load_torch_csv(a.file);
  if (!sched) return report(sched.error());
  auto ds = pipelines::schedule_to_directives(*sched, base.directives);
  if (!ds) return report(located(std::move(ds.error()), base.src.get(), a.file));
  // A whole plan as the base: write the whole plan with the imported schedule, ready for
  // `stretto simulate` (--timeline, --trace).
  if (base.src && plan::is_whole_plan(base.src->root())) {
    Json plan = base.src->root();
    plan["schedule"] = plan::directives_to_json(*ds);
    return write_output(a.output, plan.dump(2) + "\n") ? 0 : 2;
  }
  return write_output(a.output, directives_text(*ds)) ? 0 : 2;
}

struct ExportArgs {
  std::string plan;
  std::string output;
  bool with_comms = false;
};

int run_export(const ExportArgs& a) {
  auto sched = schedule_of_plan(a.plan);
  if (!sched) return report(sched.error());
  std::string text;
  if (a.with_comms) {
    auto t = pipelines::write_torch_csv_with_comms(*sched);
    if (!t) return report(t.error());
    text = std::move(*t);
  } else {
    text = pipelines::write_torch_csv(*sched);
  }
  return write_output(a.output, text) ? 0 : 2;
}

}  // namespace

void add_schedule_commands(CLI::App& app, CLI::App& import_app, CLI::App& export_app,
                           Commands& out) {
  // The option values live as long as the process (main() keeps the Commands until it exits).
  auto build = std::make_shared<BuildArgs>();
  std::string families;
  for (const std::string& n : pipelines::schedule_family_names())
    families += (families.empty() ? "" : ", ") + n;
  CLI::App* b = app.add_subcommand(
      "build-schedule", "Emit the directives of a pipeline schedule family (" + families + ")");
  b->add_option("--schedule", build->schedule,
                "Family (case-insensitive; torch class names such as ScheduleDualPipeV work too)")
      ->required();
  b->add_option("--ranks", build->ranks, "Pipeline ranks P (or --layout pp=P)");
  b->add_option("--layout", build->layout,
                "Parallel layout instead of --base: tp=2,pp=4,dp=2[,ep=,order=tp-dp-pp,zero=1] "
                "or the JSON object of a plan's \"layout\"");
  b->add_option("--stages-per-rank", build->stages_per_rank,
                "Stages per rank V (default: the family's: 2 for interleaved-1f1b, looped-bfs, "
                "zb-v, dualpipe, dualpipev; 1 otherwise)");
  b->add_option("--microbatches", build->microbatches, "Microbatches M")->required();
  b->add_option("--base", build->base,
                "Directive list (or plan) with placement/parallelism to keep; split and orders "
                "are appended");
  b->add_option("-o,--output", build->output, "Write the directive list here (default: stdout)");
  b->add_flag("--show", build->show,
              "Print the per-rank grid (to stdout instead of the JSON, or to stderr with -o)");
  add_limit_options(b);
  out.push_back({b, [build] {
                   note_input(build->base);
                   return run_build(*build);
                 }});

  auto imp = std::make_shared<ImportArgs>();
  CLI::App* i = import_app.add_subcommand(
      "torch-csv", "torch.distributed.pipelining per-rank action CSV -> directive list");
  i->add_option("file", imp->file, "CSV file, one row per rank")->required();
  i->add_option("--base", imp->base,
                "Directive list (or plan) with placement to keep; with a plan, the output is the "
                "whole plan with the imported schedule");
  i->add_option("-o,--output", imp->output, "Write the directive list here (default: stdout)");
  add_limit_options(i);
  out.push_back({i, [imp] {
                   note_input(imp->file);
                   note_input(imp->base);
                   return run_import(*imp);
                 }});

  auto exp = std::make_shared<ExportArgs>();
  CLI::App* e = export_app.add_subcommand(
      "torch-csv", "A plan's pipeline schedule -> torch.distributed.pipelining CSV");
  e->add_option("plan", exp->plan,
                "Plan JSON whose \"schedule\" is a directive list or a {\"builder\": ...} call")
      ->required();
  e->add_option("-o,--output", exp->output, "Write the CSV here (default: stdout)");
  e->add_flag("--with-comms", exp->with_comms,
              "Add SEND_F/RECV_F/SEND_B/RECV_B cells (torch's _add_send_recv lowering)");
  add_limit_options(e);
  out.push_back({e, [exp] {
                   note_input(exp->plan);
                   return run_export(*exp);
                 }});
}

}  // namespace stretto::cli
