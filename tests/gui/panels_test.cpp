// The explorer's panels, driven headless (ImGui without a window) with injected input through
// the same script actions `stretto gui --script` replays.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <imgui.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "stretto/gui/app.h"
#include "stretto/gui/script.h"
#include "stretto/sim/metrics_json.h"
#include "stretto/sim/pipeline_metrics.h"
#include "stretto/sim/session.h"
#include "timeline_compare.h"

namespace stretto::gui {

using plan::ValueSource;

namespace {

namespace fs = std::filesystem;
const std::string kEx = STRETTO_EXAMPLES;
const std::string k1f1b = kEx + "/gpt_pp4_dp2_1f1b.json";
const std::string kBuilder = kEx + "/gpt_pp4_dp2_1f1b_builder.json";

class Panels : public ::testing::Test {
 protected:
  Headless h;
  App app;
  // Runs a script (lines) to its end; fails the test on a script error.
  void run(const std::string& text) {
    auto s = parse_script(text, "test");
    ASSERT_TRUE(s) << render_all(s.error());
    app.script.insert(app.script.end(), s->begin(), s->end());
    ASSERT_TRUE(h.run_script(app, 5000)) << app.script_error;
  }
  engine::SimTime simulate_text(const std::string& text,
                                const std::string& base = STRETTO_EXAMPLES) {
    auto s = sim::Session::from_text(text, "x.json", base);
    EXPECT_TRUE(s) << render_all(s.error());
    auto r = s->simulate();
    EXPECT_TRUE(r);
    return r->step_time;
  }
  // Each device's metrics of a fresh simulation of a snapshot's plan.
  static std::vector<sim::DeviceMetrics> simulated_devices(const Snapshot& snap) {
    auto s = sim::Session::from_text(snap.text, "x.json", STRETTO_EXAMPLES);
    EXPECT_TRUE(s) << render_all(s.error());
    auto r = s->simulate();
    EXPECT_TRUE(r);
    return r->devices;
  }
  fs::path tmp(const std::string& name) {
    fs::path d = fs::temp_directory_path() / ("stretto_gui_test_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d / name;
  }
};

TEST_F(Panels, OpeningAnExampleDrawsLanesBoxesAndTheMemoryCurve) {
  run("open " + k1f1b + "\nwait\nframes 2\n");
  ASSERT_TRUE(app.current);
  EXPECT_FALSE(app.stale());
  EXPECT_GT(app.tl.lanes_drawn, 8);
  EXPECT_GT(app.tl.boxes_drawn, 16);
  EXPECT_TRUE(app.hooks.count("timeline") && app.hooks.count("memory"));
  auto st = nlohmann::json::parse(app.state_json());
  auto s = sim::Session::open(k1f1b);
  ASSERT_TRUE(s);
  EXPECT_EQ(st["step_time_ns"].get<int64_t>(), s->simulate()->step_time);
  EXPECT_FALSE(st["stale"].get<bool>());
  EXPECT_EQ(st["devices"].get<int>(), 8);
}

// The Parameters tab shows what the plan resolves to, the values describe --format json
// prints: a layout plan's ranks and stages per rank, the h100-sxm preset's fitted GEMM and
// attention efficiencies (not AnalyticParams' generic 0.80 / 0.40).
TEST_F(Panels, ParametersAreTheResolvedPlanDescribePrints) {
  const std::string plan = kEx + "/layout_llama7b_pp4_dp4_interleaved.json";
  run("open " + plan + "\nwait\nclick tab parameters\nframes 2\n");
  ASSERT_TRUE(app.current);
  const auto st = nlohmann::json::parse(app.state_json());
  ASSERT_TRUE(st.contains("parameters"));
  const auto& p = st["parameters"];
  EXPECT_EQ(p["ranks"], 4);
  EXPECT_EQ(p["stages_per_rank"], 2);
  EXPECT_EQ(p["dp"], 4);
  EXPECT_EQ(p["zero"], 1);
  EXPECT_EQ(p["global_batch"], 64);
  EXPECT_DOUBLE_EQ(p["gemm_efficiency"].get<double>(), 0.711);
  EXPECT_DOUBLE_EQ(p["attention_efficiency"].get<double>(), 0.711);
  // describe --format json's values, field by field.
  auto cp = compiler::compile_file(plan);
  ASSERT_TRUE(cp);
  const plan::ResolvedPlan rp = sim::resolve_plan(*cp);
  ASSERT_EQ(p.size(), rp.fields.size());
  for (const plan::ResolvedField& f : rp.fields)
    EXPECT_EQ(p[f.name].dump(), f.value.dump()) << f.name;
  EXPECT_EQ(rp.field("gemm_efficiency")->source, ValueSource::kPreset);
  EXPECT_EQ(rp.field("stages_per_rank")->source, ValueSource::kBuilder);
  EXPECT_EQ(rp.field("dp")->source, ValueSource::kPlan);
  EXPECT_EQ(rp.field("tp")->source, ValueSource::kDefault);
  // The editor's rows are there (hooks named by field), and +1 on ranks edits the layout's pp.
  EXPECT_TRUE(app.hooks.count("ranks") && app.hooks.count("stages_per_rank") &&
              app.hooks.count("gemm_efficiency"));
  run("click ranks+\nframes 1\n");
  EXPECT_EQ((*app.doc.json())["schedule"]["layout"]["pp"].get<int>(), 5);
  EXPECT_FALSE((*app.doc.json())["schedule"].contains("ranks"));
}

// Every row of the Parameters tab, its label included (a row's hook is its whole item, label
// and all), ends inside the tab at the default 1600x900 layout: none is clipped. The bucket-size
// slider's label once read "bucket size (MB, all replicate)" and ran past the edge.
TEST_F(Panels, ParametersRowsAndTheirLabelsFitTheTab) {
  run("open " + k1f1b + "\nwait\nclick tab parameters\nframes 2\n");
  ASSERT_TRUE(app.current);
  ASSERT_TRUE(app.hooks.count("parameters width") && app.hooks.count("bucket_size"));
  const float right = app.hooks["parameters width"].x1;
  int rows = 0;
  std::vector<std::string> names{"bucket_size"};
  for (const plan::ResolvedField& f : sim::resolve_plan(app.current->session->compiled()).fields) {
    names.push_back(f.name);
    names.push_back(f.name + "+");
  }
  for (const std::string& name : names) {
    auto it = app.hooks.find(name);
    if (it == app.hooks.end()) continue;
    ++rows;
    EXPECT_LE(it->second.x1, right) << name << " ends at " << it->second.x1 << ", the tab at " << right;
  }
  EXPECT_GT(rows, 10);
  // Scripts still reach the slider by its hook, not its label: hovering says what it sets, and
  // a click moves every replicate directive's bucket size alike (from 25 MB).
  run("hover bucket_size\nframes 2\n");
  EXPECT_TRUE(app.tooltip_shown);
  run("click bucket_size\nframes 2\n");
  const auto& sched = (*app.doc.json())["schedule"];
  const double b = sched[4]["bucket_size"].get<double>();
  EXPECT_NE(b, 25);
  for (int i = 5; i < 8; ++i) EXPECT_EQ(sched[i]["bucket_size"].get<double>(), b) << i;
}

// The Parameters tab's structural booleans are editable rows like the integers: on a TP8 layout
// plan, a click on tp_comm_overlap writes it into the layout, and the re-simulated plan resolves
// it (the step gets shorter: TP collectives overlap their GEMMs).
TEST_F(Panels, TpCommOverlapIsAParametersRow) {
  run("open " + kEx + "/layout_gpt13b_tp8_pp2_dp2_1f1b.json\nwait\nclick tab parameters\nframes 2\n");
  ASSERT_TRUE(app.current);
  const auto before = nlohmann::json::parse(app.state_json());
  EXPECT_EQ(before["parameters"]["tp_comm_overlap"], false);
  ASSERT_TRUE(app.hooks.count("tp_comm_overlap") && app.hooks.count("sequence_parallel"));
  run("click tp_comm_overlap\nwait\nframes 2\n");
  ASSERT_TRUE(app.script_error.empty()) << app.script_error;
  EXPECT_EQ((*app.doc.json())["schedule"]["layout"]["tp_comm_overlap"], true);
  const auto after = nlohmann::json::parse(app.state_json());
  EXPECT_EQ(after["parameters"]["tp_comm_overlap"], true);
  EXPECT_LT(after["step_time_ns"].get<int64_t>(), before["step_time_ns"].get<int64_t>());
}

TEST_F(Panels, ZoomingInShowsLabelsZoomingOutMergesOps) {
  run("open " + k1f1b + "\nwait\nframes 2\n");
  const int boxes_fit = app.tl.boxes_drawn;
  const auto& op = app.current->timeline.lanes[0].ops[0];
  run("zoom 0 " + std::to_string(static_cast<double>(op.end) * 4 / 1e6) + "\nframes 2\n");
  EXPECT_FALSE(app.tl.labels.empty());  // wide ops carry their names
  EXPECT_NE(std::find(app.tl.labels.begin(), app.tl.labels.end(), "F mb0 PP0"), app.tl.labels.end())
      << (app.tl.labels.empty() ? "" : app.tl.labels[0]);
  EXPECT_LT(app.tl.boxes_drawn, boxes_fit);
  // The mouse wheel zooms out around the mouse.
  const double before = app.tl.ns_per_px;
  run("wheel timeline -3\nframes 1\n");
  EXPECT_GT(app.tl.ns_per_px, before);
  run("fit\nframes 2\n");
  EXPECT_EQ(app.tl.boxes_drawn, boxes_fit);
}

TEST_F(Panels, MicrobatchButtonAndTypingResimulateToTheLibrarysStepTime) {
  run("open " + kBuilder + "\nwait\nframes 1\n");
  ASSERT_TRUE(app.current);
  const auto before = app.current->result.step_time;
  EXPECT_EQ(app.current->session->compiled().num_microbatches, 8);
  run("click microbatches+\nwait\nframes 1\n");
  EXPECT_EQ(app.current->session->compiled().num_microbatches, 9);
  EXPECT_EQ((*app.doc.json())["schedule"]["microbatches"].get<int>(), 9);
  EXPECT_NE(app.current->result.step_time, before);
  EXPECT_EQ(app.current->result.step_time, simulate_text(app.doc.text()));
  run("type microbatches 12\nwait\nframes 1\n");
  EXPECT_EQ(app.current->session->compiled().num_microbatches, 12);
  EXPECT_EQ(app.current->result.step_time, simulate_text(app.doc.text()));
  EXPECT_FALSE(app.stale());
  // Undo and redo through the buttons.
  run("click undo\nwait\nframes 1\n");
  EXPECT_EQ(app.current->session->compiled().num_microbatches, 9);
  run("click redo\nwait\nframes 1\n");
  EXPECT_EQ(app.current->session->compiled().num_microbatches, 12);
}

TEST_F(Panels, ABadFileShowsItsDiagnosticsAndTheGuiKeepsRunning) {
  const fs::path bad = tmp("bad.json");
  std::ofstream(bad) << "{\n  \"model\": {\"family\": \"transformer\",\n  \"layers\": 2,,\n}\n";
  run("open " + bad.string() + "\nwait\nframes 3\n");
  EXPECT_FALSE(app.current);
  EXPECT_TRUE(app.last_failed);
  ASSERT_FALSE(app.diags.empty());
  EXPECT_EQ(app.diags[0].loc.line, 3u) << app.diags[0].render();
  EXPECT_NE(app.diags[0].loc.file.find("bad.json"), std::string::npos);
  // It says there is no result, not "showing the last good result" (there is none).
  EXPECT_NE(app.plan_status.find("nothing simulated yet"), std::string::npos) << app.plan_status;
  EXPECT_EQ(nlohmann::json::parse(app.state_json())["plan_status"], app.plan_status);
  // Still responsive: open a good plan afterwards.
  run("open " + k1f1b + "\nwait\nframes 1\n");
  EXPECT_TRUE(app.current);
  EXPECT_FALSE(app.last_failed);
  EXPECT_TRUE(app.diags.empty() || app.diags[0].severity != Severity::kError);
  // A file that cannot be read at all: a status line, the current plan stays.
  EXPECT_FALSE(app.open(tmp("missing.json").string()));
  EXPECT_NE(app.status.find("cannot read"), std::string::npos);
  EXPECT_TRUE(app.current);
}

TEST_F(Panels, AFailingEditKeepsTheLastGoodResultMarkedStale) {
  run("open " + kBuilder + "\nwait\nframes 1\n");
  auto good = app.current;
  run("set /schedule/microbatches 0\nwait\nframes 2\n");
  EXPECT_TRUE(app.last_failed);
  EXPECT_EQ(app.current, good);  // the last good result stays on screen
  EXPECT_TRUE(app.stale());
  ASSERT_FALSE(app.diags.empty());
  EXPECT_NE(app.diags[0].loc.json_pointer.find("/schedule"), std::string::npos) << app.diags[0].render();
  auto st = nlohmann::json::parse(app.state_json());
  EXPECT_TRUE(st["stale"].get<bool>());
  EXPECT_TRUE(st["failed"].get<bool>());
  EXPECT_NE(app.plan_status.find("showing the last good result"), std::string::npos) << app.plan_status;
  run("undo\nwait\nframes 1\n");
  EXPECT_FALSE(app.last_failed);
  EXPECT_FALSE(app.stale());
}

// The worker re-costs (no recompile) exactly when the edited plan's JSON equals the previous
// one outside "costmodel": a cost model changed, added or removed re-costs; any other member
// changed, added or removed (or a text that is no object) recompiles.
TEST(Worker, OnlyTheCostModelMayDifferForARecost) {
  const nlohmann::json base = {{"model", {{"layers", 4}}},
                               {"cluster", {{"preset", "h100-sxm"}}},
                               {"costmodel", {{"dispatch_us", 5}}},
                               {"schedule", nlohmann::json::array()}};
  nlohmann::json other_cost = base;
  other_cost["costmodel"]["dispatch_us"] = 6;
  nlohmann::json no_cost = base;
  no_cost.erase("costmodel");
  EXPECT_TRUE(plan::same_but_costmodel(base, base));
  EXPECT_TRUE(plan::same_but_costmodel(base, other_cost));
  EXPECT_TRUE(plan::same_but_costmodel(base, no_cost));
  EXPECT_TRUE(plan::same_but_costmodel(no_cost, base));
  nlohmann::json layers = base;
  layers["model"]["layers"] = 5;
  nlohmann::json extra = base;
  extra["optimizer"] = {{"kind", "sgd"}};
  nlohmann::json fewer = base;
  fewer.erase("schedule");
  for (const nlohmann::json* j : {&layers, &extra, &fewer}) {
    EXPECT_FALSE(plan::same_but_costmodel(base, *j)) << j->dump();
    EXPECT_FALSE(plan::same_but_costmodel(*j, base)) << j->dump();
  }
  // a member renamed to "costmodel" is not a cost-model edit
  nlohmann::json renamed = no_cost;
  renamed["costmodel"] = renamed["schedule"];
  renamed.erase("schedule");
  EXPECT_FALSE(plan::same_but_costmodel(base, renamed));
  EXPECT_FALSE(plan::same_but_costmodel(nlohmann::json::array(), nlohmann::json::array()));
}

// A cost-model edit makes its compiled plan, re-costs and retimes into the storage of a
// snapshot no one holds any more (SpareStorage), when it has the structure of the previous
// snapshot's (the same compile; the program's and lanes' lineages), instead of into copies of
// the previous snapshot's; the outcome is a fresh simulation's. A recompiled plan starts new
// lineages.
TEST(Worker, ACostModelEditReusesTheStorageOfASnapshotNoOneHolds) {
  std::ifstream f(k1f1b);
  nlohmann::json plan = nlohmann::json::parse(f);
  auto text = [&](int dispatch_us) {
    plan["costmodel"]["dispatch_us"] = dispatch_us;
    return plan.dump();
  };
  sim::Resimulator resim;
  auto spares = std::make_shared<SpareStorage>();
  sim::SimOptions opt;
  opt.memory_curves = false;  // as the worker's
  auto run = [&](const std::string& t, const Snapshot* prev) {
    Outcome o = SimWorker::run(t, "plan.json", kEx, 1, opt, prev, &resim, spares);
    EXPECT_TRUE(o.snapshot) << render_all(o.diags);
    return o.snapshot;
  };
  auto s0 = run(text(5), nullptr);
  auto s1 = run(text(6), s0.get());
  ASSERT_TRUE(s0 && s1);
  EXPECT_FALSE(s1->recompiled);
  EXPECT_TRUE(s1->lanes_retimed);
  EXPECT_EQ(s1->program_lineage, s0->program_lineage);
  EXPECT_EQ(s1->lanes_lineage, s0->lanes_lineage);
  const compiler::CompiledPlan* cp0 = &s0->session->compiled();
  const engine::Task* tasks0 = s0->result.program.tasks.data();
  const Op* ops0 = s0->timeline.lanes[0].ops.data();
  s0.reset();  // no one holds it: its session, program and lanes go to `spares`
  auto s2 = run(text(7), s1.get());
  ASSERT_TRUE(s2);
  EXPECT_EQ(&s2->session->compiled(), cp0) << "a copy of the compiled plan, not the spare";
  EXPECT_EQ(s2->result.program.tasks.data(), tasks0) << "re-costed into a copy, not the spare";
  EXPECT_EQ(s2->timeline.lanes[0].ops.data(), ops0) << "retimed a copy, not the spare";
  EXPECT_EQ(s2->program_lineage, s1->program_lineage);
  {  // a fresh simulation's timings and lanes
    auto s = sim::Session::from_text(text(7), "plan.json", kEx);
    ASSERT_TRUE(s);
    auto r = s->simulate(opt);
    ASSERT_TRUE(r);
    ASSERT_NE(r->step_time, s1->result.step_time);
    EXPECT_EQ(s2->result.step_time, r->step_time);
    ASSERT_EQ(s2->result.timing.size(), r->timing.size());
    for (size_t t = 0; t < r->timing.size(); ++t) {
      ASSERT_EQ(s2->result.timing[t].start, r->timing[t].start) << t;
      ASSERT_EQ(s2->result.timing[t].end, r->timing[t].end) << t;
    }
    expect_same_timeline(s2->timeline, build_timeline(*r, s->compiled()));
  }
  // Another plan is compiled and laid out anew: new lineages (the spare, of the old ones,
  // is not used).
  s1.reset();
  plan["model"]["layers"] = plan["model"]["layers"].get<int>() + 4;
  auto s3 = run(text(7), s2.get());
  ASSERT_TRUE(s3);
  EXPECT_TRUE(s3->recompiled);
  EXPECT_NE(s3->program_lineage, s2->program_lineage);
  EXPECT_NE(s3->lanes_lineage, s2->lanes_lineage);
}

TEST_F(Panels, TheLatestEditWins) {
  run("open " + kBuilder + "\nwait\nframes 1\n");
  for (int i = 1; i <= 20; ++i) {
    ASSERT_TRUE(app.doc.set("/costmodel/dispatch_us", i));
    app.pump();  // submits each edit as a frame would
  }
  run("wait\nframes 1\n");
  EXPECT_EQ(app.current->text, app.doc.text());
  EXPECT_EQ(app.current->result.step_time, simulate_text(app.doc.text()));
  EXPECT_FALSE(app.current->recompiled);  // a cost-model edit reuses the compiled plan
  EXPECT_TRUE(app.current->lanes_retimed);  // and the lanes of the result before it
  {  // the same answer as `simulate`: every op's timing, the lanes built from them, the metrics
    auto s = sim::Session::from_text(app.doc.text(), "x.json", STRETTO_EXAMPLES);
    ASSERT_TRUE(s);
    auto r = s->simulate();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->timing.size(), app.current->result.timing.size());
    for (size_t t = 0; t < r->timing.size(); ++t) {
      ASSERT_EQ(r->timing[t].start, app.current->result.timing[t].start) << t;
      ASSERT_EQ(r->timing[t].end, app.current->result.timing[t].end) << t;
    }
    expect_same_timeline(app.current->timeline, build_timeline(*r, s->compiled()));
    const auto pm = sim::pipeline_metrics(s->compiled(), *r);
    EXPECT_EQ(app.current->pipeline.pipeline_bubble_ratio, pm.pipeline_bubble_ratio);
    EXPECT_EQ(app.current->pipeline.exposed_collectives_ms_per_device, pm.exposed_collectives_ms_per_device);
  }
  run("set /schedule/microbatches 5\nwait\n");
  EXPECT_TRUE(app.current->recompiled);
  EXPECT_EQ(app.current->result.step_time, simulate_text(app.doc.text()));
}

TEST_F(Panels, ClickingAnOpSelectsItAndShowsItsDetails) {
  run("open " + k1f1b + "\nwait\nframes 1\n");
  const Lane& lane = app.current->timeline.lanes[0];
  const Op op = lane.ops[3];
  // Show exactly that op across the timeline, then click the lane's middle.
  run("zoom " + std::to_string(static_cast<double>(op.start) / 1e6) + " " +
      std::to_string(static_cast<double>(op.end) / 1e6) + "\nframes 2\nclick lane 0\nframes 1\n");
  ASSERT_TRUE(app.sel.valid());
  EXPECT_EQ(app.sel.task, op.task);
  auto st = nlohmann::json::parse(app.state_json());
  EXPECT_EQ(st["selection"]["task"].get<uint32_t>(), op.task);
  EXPECT_EQ(st["selection"]["start_ns"].get<int64_t>(), op.start);
  run("click tab selection\nframes 2\n");
  // Keys: '.' selects the lane's next op, ',' goes back; F shows the selected op, F again fits.
  run("key .\nframes 1\n");
  EXPECT_EQ(app.sel.task, lane.ops[4].task);
  run("key ,\nframes 1\nkey F\nframes 1\n");
  EXPECT_EQ(app.sel.task, op.task);
  const double len = static_cast<double>(op.end - op.start);
  EXPECT_NEAR(app.tl.t0, static_cast<double>(op.start) - len * 0.25, 1);
  run("key F\nframes 2\n");
  EXPECT_TRUE(app.tl.fitted);
  run("key Esc\nframes 1\nkey ctrl+z\nframes 1\n");
  EXPECT_FALSE(app.sel.valid());
}

TEST_F(Panels, DeviceGroupsCollapse) {
  run("open " + k1f1b + "\nwait\nframes 2\n");
  const int devices = app.tl.devices_drawn;
  EXPECT_TRUE(app.hooks.count("lane 0"));
  run("click device 0\nframes 2\n");
  ASSERT_EQ(app.tl.collapsed.size(), 8u);
  EXPECT_TRUE(app.tl.collapsed[0]);
  EXPECT_FALSE(app.hooks.count("lane 0")) << "device 0's lanes are hidden";
  EXPECT_GT(app.tl.devices_drawn, devices) << "and the next devices move up";
}

// Pin keeps a result as the baseline until unpin (the Compare tab's deltas against it:
// GuiWindow.CompareShowsTheBaselineDeltas).
TEST_F(Panels, PinKeepsTheBaselineUntilUnpin) {
  run("open " + kBuilder + "\nwait\npin\nset /schedule/microbatches 4\nwait\nclick tab compare\nframes 2\n");
  ASSERT_TRUE(app.baseline && app.current);
  EXPECT_NE(app.baseline->result.step_time, app.current->result.step_time);
  auto st = nlohmann::json::parse(app.state_json());
  EXPECT_EQ(st["baseline_step_time_ns"].get<int64_t>(), app.baseline->result.step_time);
  run("unpin\nframes 1\n");
  EXPECT_FALSE(app.baseline);
}

// `stretto simulate --format json` of a snapshot's plan text, simulated afresh.
nlohmann::json simulate_json_of(const Snapshot& snap) {
  auto s = sim::Session::from_text(snap.text, "x.json", STRETTO_EXAMPLES);
  EXPECT_TRUE(s) << render_all(s.error());
  auto r = s->simulate();
  EXPECT_TRUE(r);
  return sim::simulate_json(s->compiled(), *r, sim::pipeline_metrics(s->compiled(), *r), nullptr);
}

// With a pinned baseline the Memory panel draws both runs' category stacks on one scale, each
// with its peak: every device's peak of either run is the one `simulate` prints for its plan.
TEST_F(Panels, MemoryDrawsTheBaselinesCategoriesAndBothPeaks) {
  run("open " + kBuilder + "\nwait\npin\nset /schedule/microbatches 2\nwait\ntype memory_device 0\nframes 2\n");
  ASSERT_TRUE(app.baseline && app.current);
  const auto now = simulate_json_of(*app.current), base = simulate_json_of(*app.baseline);
  const auto st = nlohmann::json::parse(app.state_json());
  const auto& m = st["memory"];
  ASSERT_EQ(m["peak_per_device"].size(), now["devices"].size());
  int differ = 0;
  for (size_t d = 0; d < now["devices"].size(); ++d) {
    const auto& row = m["peak_per_device"][d];
    EXPECT_EQ(row["now_bytes"], now["devices"][d]["peak_memory_bytes"]) << "device " << d;
    EXPECT_EQ(row["baseline_bytes"], base["devices"][d]["peak_memory_bytes"]) << "device " << d;
    differ += row["now_bytes"] != row["baseline_bytes"];
  }
  EXPECT_GT(differ, 0) << "the edit should change some device's memory";
  // The device shown: each run's peak labelled in GiB, and every category that holds memory at
  // the run's peak drawn in its plot.
  EXPECT_EQ(m["device"], 0);
  for (const auto& [run, sim_json] : {std::pair{"now", &now}, std::pair{"baseline", &base}}) {
    SCOPED_TRACE(run);
    const auto& dev = (*sim_json)["devices"][0];
    ASSERT_TRUE(m.contains(run));
    EXPECT_EQ(m[run]["peak_bytes"], dev["peak_memory_bytes"]);
    EXPECT_EQ(m[run]["peak_shown"], format_bytes(dev["peak_memory_bytes"].get<double>()));
    EXPECT_NE(m[run]["peak_shown"].get<std::string>().find("GiB"), std::string::npos);
    const auto drawn = m[run]["categories_drawn"].get<std::vector<std::string>>();
    int held = 0;
    for (const auto& [cat, bytes] : dev["memory_breakdown"].items())
      if (bytes.get<int64_t>() > 0) {
        ++held;
        EXPECT_NE(std::find(drawn.begin(), drawn.end(), cat), drawn.end()) << cat << " not drawn";
      }
    EXPECT_GE(held, 4);
  }
  EXPECT_TRUE(app.hooks.count("memory baseline title") && app.hooks.count("memory baseline axis"));
  EXPECT_LT(app.hooks["memory now title"].y1, app.hooks["memory baseline title"].y0);
  run("unpin\nframes 1\n");
  const auto after = nlohmann::json::parse(app.state_json());
  EXPECT_FALSE(after["memory"].contains("baseline"));
  EXPECT_TRUE(after["memory"]["peak_per_device"][0]["baseline_bytes"].is_null());
}

// Hovering the Memory panel gives, at the time under the cursor, each memory category's bytes of
// the current run and of the pinned baseline. With the cursor put at a run's peak, that run's
// bytes are the breakdown `simulate` reports at the device's peak (the engine's counters there).
TEST_F(Panels, MemoryShowsEachRunsReservedPeakNextToTheAllocatedOne) {
  // A pinned baseline, then an edit that moves memory; device 1 shown.
  run("open " + kBuilder + "\nwait\npin\nset /schedule/microbatches 2\nwait\ntype memory_device 1\nframes 2\n");
  ASSERT_TRUE(app.baseline && app.current);
  const std::vector<sim::DeviceMetrics> now = simulated_devices(*app.current), base = simulated_devices(*app.baseline);
  const nlohmann::json m = nlohmann::json::parse(app.state_json())["memory"];
  ASSERT_EQ(m["device"], 1);
  // The caching allocator's bytes are more than the tensors' here, and the edit moves them.
  ASSERT_GT(now[1].peak_reserved, now[1].peak_memory);
  ASSERT_NE(now[1].peak_reserved, base[1].peak_reserved);
  EXPECT_EQ(m["now"]["peak_reserved_bytes"].get<int64_t>(), now[1].peak_reserved);
  EXPECT_EQ(m["baseline"]["peak_reserved_bytes"].get<int64_t>(), base[1].peak_reserved);
  // The device total capacity is judged on: reserved + CUDA context + NCCL buffers.
  ASSERT_GT(now[1].peak_device(), now[1].peak_reserved);
  EXPECT_EQ(m["now"]["peak_device_bytes"].get<int64_t>(), now[1].peak_device());
  EXPECT_EQ(m["baseline"]["peak_device_bytes"].get<int64_t>(), base[1].peak_device());
  EXPECT_TRUE(m["now"]["reserved_line_drawn"].get<bool>());
  EXPECT_TRUE(m["baseline"]["reserved_line_drawn"].get<bool>());
  ASSERT_EQ(m["peak_per_device"].size(), now.size());
  for (size_t d = 0; d < now.size(); ++d) {
    EXPECT_EQ(m["peak_per_device"][d]["now_reserved_bytes"].get<int64_t>(), now[d].peak_reserved) << d;
    EXPECT_EQ(m["peak_per_device"][d]["baseline_reserved_bytes"].get<int64_t>(), base[d].peak_reserved) << d;
  }
  // Unpinned: the current run's only.
  run("unpin\nframes 1\n");
  const nlohmann::json alone = nlohmann::json::parse(app.state_json())["memory"];
  EXPECT_FALSE(alone.contains("baseline"));
  EXPECT_TRUE(alone["peak_per_device"][0]["baseline_reserved_bytes"].is_null());
  EXPECT_EQ(alone["now"]["peak_reserved_bytes"].get<int64_t>(), now[1].peak_reserved);
}

TEST_F(Panels, MemoryTooltipGivesEachCategoryOfBothRunsAtTheCursor) {
  run("open " + kBuilder + "\nwait\npin\nset /schedule/microbatches 2\nwait\ntype memory_device 0\nframes 2\n");
  ASSERT_TRUE(app.baseline && app.current);
  const sim::DeviceMetrics now = simulated_devices(*app.current).at(0), base = simulated_devices(*app.baseline).at(0);
  ASSERT_NE(now.peak_time, base.peak_time);
  // Hovers the plot's middle with the view 64 ns wide and moved until the cursor is at t + 1/4 ns
  // (the samples are whole nanoseconds: the one shown is the state after every change at t).
  auto hover_at = [&](double t) {
    double t0 = t - 32;
    nlohmann::json tip;
    for (int i = 0; i < 2; ++i) {
      app.zoom(t0, t0 + 64);
      run("hover memory\nframes 2\n");
      tip = nlohmann::json::parse(app.state_json())["memory"]["tooltip"];
      if (tip.is_null()) break;
      t0 += t + 0.25 - tip["t_ns"].get<double>();
    }
    EXPECT_NEAR(tip["t_ns"].get<double>(), t + 0.25, 0.05);
    return tip;
  };
  for (int run_at = 0; run_at < 2; ++run_at) {
    const sim::DeviceMetrics& at = run_at == 0 ? now : base;
    SCOPED_TRACE(run_at == 0 ? "at the current run's peak" : "at the baseline's peak");
    const nlohmann::json tip = hover_at(static_cast<double>(at.peak_time));
    ASSERT_TRUE(tip.is_object()) << "no tooltip";
    EXPECT_TRUE(app.tooltip_shown);
    EXPECT_EQ(tip["device"], 0);
    ASSERT_TRUE(tip.contains("now_bytes") && tip.contains("baseline_bytes"));
    const nlohmann::json& bytes = tip[run_at == 0 ? "now_bytes" : "baseline_bytes"];
    const nlohmann::json& other = tip[run_at == 0 ? "baseline_bytes" : "now_bytes"];
    int64_t sum = 0, other_sum = 0;
    for (size_t k = 0; k < sim::kMemCategories; ++k) {
      const std::string cat(sim::memory_category_name(k));
      EXPECT_EQ(bytes[cat].get<int64_t>(), at.breakdown[k]) << cat;
      sum += bytes[cat].get<int64_t>();
      other_sum += other[cat].get<int64_t>();
      // As shown: the category's row gives both runs' bytes.
      const auto row = tip["rows"][1 + k].get<std::vector<std::string>>();
      EXPECT_EQ(row, (std::vector<std::string>{cat, format_bytes(tip["now_bytes"][cat].get<double>()),
                                               format_bytes(tip["baseline_bytes"][cat].get<double>())}));
    }
    EXPECT_EQ(sum, at.peak_memory);
    EXPECT_LT(other_sum, run_at == 0 ? base.peak_memory + 1 : now.peak_memory + 1);
    const int64_t now_total = run_at == 0 ? sum : other_sum, base_total = run_at == 0 ? other_sum : sum;
    EXPECT_EQ(tip["rows"][0].get<std::vector<std::string>>(),
              (std::vector<std::string>{"total", format_bytes(static_cast<double>(now_total)),
                                        format_bytes(static_cast<double>(base_total))}));
  }
  run("unpin\nframes 1\n");
  const auto tip = nlohmann::json::parse(app.state_json())["memory"]["tooltip"];
  ASSERT_TRUE(tip.is_object());
  EXPECT_FALSE(tip.contains("baseline_bytes"));
  EXPECT_EQ(tip["rows"][0][2], "") << "no baseline column";
}

// Hovering a difference lane's mark gives that op's changes: an op of the baseline only (a
// microbatch the edit removed), zoomed so that it fills the middle of the lane.
TEST_F(Panels, HoveringADifferenceMarkNamesItsOp) {
  run("open " + kBuilder + "\nwait\npin\nset /schedule/microbatches 4\nwait\nframes 2\n");
  ASSERT_TRUE(app.baseline && app.current);
  const auto diffs = device_diffs(device_spans(*app.current), device_spans(*app.baseline));
  ASSERT_FALSE(diffs.empty());
  ASSERT_EQ(diffs[0].device, 0);
  const CompareRow* gone = nullptr;
  for (const CompareRow& r : diffs[0].rows)
    if (r.e1 < 0) gone = gone ? gone : &r;
  ASSERT_NE(gone, nullptr);
  const double s0 = static_cast<double>(gone->s0) / 1e6, e0 = static_cast<double>(gone->e0) / 1e6;
  const std::string name = fmt::format("PP{} MB{} {} on device 0", gone->pp, gone->mb,
                                       plan::pass_name(static_cast<plan::Pass>(gone->pass)));
  run(fmt::format("zoom {} {}\nframes 2\nhover diff 0\nframes 2\n", s0 - 0.1 * (e0 - s0), e0 + 0.1 * (e0 - s0)));
  EXPECT_TRUE(app.tooltip_shown);
  EXPECT_EQ(app.tl.diff_tooltip, name);
  EXPECT_EQ(nlohmann::json::parse(app.state_json())["view"]["diff_tooltip"], name);
}

TEST_F(Panels, DirectiveListRemovesADirective) {
  run("open " + k1f1b + "\nwait\nclick tab directives\nframes 2\n");
  const size_t n = (*app.doc.json())["schedule"].size();
  run("click directive 12 remove\nframes 1\n");
  EXPECT_EQ((*app.doc.json())["schedule"].size(), n - 1);
  EXPECT_TRUE(app.doc.dirty());
}

TEST_F(Panels, JsonEditorTextEditsTheDocumentAndShowsItsErrors) {
  run("open " + kBuilder + "\nwait\nclick tab json\nframes 2\n");
  run("type json {\"model\": 3}\nwait\nframes 2\n");
  EXPECT_NE(app.doc.text().find("\"model\": 3"), std::string::npos) << app.doc.text();
  EXPECT_TRUE(app.last_failed);
  EXPECT_FALSE(app.diags.empty());
}

TEST_F(Panels, CriticalPathAndExport) {
  run("open " + k1f1b + "\nwait\nclick critical\nclick tab critical\nframes 2\n");
  EXPECT_TRUE(app.tl.show_critical);
  EXPECT_FALSE(app.critical_steps.empty());
  EXPECT_EQ(app.critical_steps.back().end, app.current->result.step_time);
  const fs::path trace = tmp("t.json"), plan = tmp("p.json");
  run("export-trace " + trace.string() + "\nsave " + plan.string() + "\n");
  auto tj = nlohmann::json::parse(std::ifstream(trace));
  EXPECT_TRUE(tj.contains("traceEvents"));
  std::ifstream pf(plan);
  const std::string saved((std::istreambuf_iterator<char>(pf)), std::istreambuf_iterator<char>());
  EXPECT_EQ(simulate_text(saved), app.current->result.step_time);
}

TEST_F(Panels, OrderGridDragMovesAndShiftDropGroups) {
  run("open " + k1f1b + "\nwait\nclick tab order\nframes 2\n");
  auto groups = [&] { return (*app.doc.json())["schedule"][9]["filters"]; };
  const auto g0 = groups();
  ASSERT_EQ(g0.size(), 16u);
  // Drag the first cell (F0) onto the fourth (F3): it lands there, the others shift left.
  run("drag order 9 0 -> order 9 3\nframes 2\n");
  auto g1 = groups();
  ASSERT_EQ(g1.size(), 16u);
  EXPECT_EQ(g1[3], g0[0]);
  EXPECT_EQ(g1[0], g0[1]);
  run("wait\n");
  EXPECT_FALSE(app.last_failed) << (app.diags.empty() ? "" : app.diags[0].render());
  // Shift-drop groups F1 (now cell 0) with cell 1: one group of two filters (overlapped).
  run("drag order 9 0 -> order 9 1 -> shift\nframes 2\n");
  auto g2 = groups();
  ASSERT_EQ(g2.size(), 15u);
  EXPECT_EQ(g2[0].size(), 2u);
  // Right-click splits it again: one cell per filter, in the group's order.
  run("wait\nrclick order 9 0\nframes 2\n");
  auto g3 = groups();
  ASSERT_EQ(g3.size(), 16u);
  EXPECT_EQ(g3[0], OJson::array({g2[0][0]}));
  EXPECT_EQ(g3[1], OJson::array({g2[0][1]}));
  for (size_t k = 2; k < 16; ++k) EXPECT_EQ(g3[k], g1[k]) << k;
}

TEST_F(Panels, MemoryPanelShowsTheChosenDevicesCategories) {
  run("open " + k1f1b + "\nwait\nframes 1\ntype memory_device 3\nframes 2\n");
  EXPECT_EQ(app.memory_device, 3);
  const auto& curve = app.memory_curve(3);
  ASSERT_FALSE(curve.empty());
  int64_t peak = 0;
  for (const auto& c : curve) peak = std::max(peak, c.total());
  EXPECT_EQ(peak, app.current->result.devices[3].peak_memory);
}

TEST_F(Panels, RangeAndLaneStatisticsCountTheOpsOfEachKind) {
  run("open " + k1f1b + "\nwait\nclick tab selection\nframes 2\n");
  const Timeline& T = app.current->timeline;
  // The whole step, all lanes: every op once.
  auto all = kind_stats(T, 0, static_cast<double>(app.current->result.step_time));
  size_t n = 0;
  for (const auto& k : all) n += k.count;
  EXPECT_EQ(n, T.ops);
  EXPECT_EQ(all[static_cast<size_t>(OpClass::kF)].count, 3904u);  // 8 devices x 488 forward ops
  // Click lane 0's name: only its ops; the F total is that lane's forward time.
  run("click lane 0 name\nframes 2\n");
  EXPECT_EQ(app.tl.lane, 0);
  auto lane0 = kind_stats(T, 0, 1e18, 0);
  SimTime f = 0;
  for (const Op& o : T.lanes[0].ops)
    if (o.cls == OpClass::kF) f += o.end - o.start;
  EXPECT_EQ(lane0[static_cast<size_t>(OpClass::kF)].total, f);
  // A range: ops overlapping [10 ms, 20 ms).
  run("range 10 20\nframes 1\n");
  EXPECT_DOUBLE_EQ(app.tl.range_t0, 10e6);
  auto r = kind_stats(T, 10e6, 20e6, 0);
  size_t in = 0;
  for (const Op& o : T.lanes[0].ops) in += o.end > 10e6 && o.start < 20e6;
  size_t counted = 0;
  for (const auto& k : r) counted += k.count;
  EXPECT_EQ(counted, in);
  run("click lane 0 name\nframes 1\n");
  EXPECT_EQ(app.tl.lane, -1);
  // Zoom to the range: the view starts at 10 ms and is 10 ms wide.
  run("click zoom to range\nframes 1\n");
  EXPECT_NEAR(app.tl.t0, 10e6, 1);
  EXPECT_NEAR(app.tl.ns_per_px * app.tl.width, 10e6, 10);
  EXPECT_FALSE(app.tl.fitted);
}

TEST_F(Panels, AnExportedTraceOpenedAsMeasuredMatchesThePrediction) {
  const fs::path trace = tmp("measured.json");
  run("open " + k1f1b + "\nwait\nexport-trace " + trace.string() + "\nopen-trace " + trace.string() +
      "\nclick tab compare\nframes 2\n");
  ASSERT_TRUE(app.measured);
  const Measured& m = *app.measured;
  EXPECT_EQ(m.end, app.current->result.step_time);
  EXPECT_EQ(m.timeline.ops, app.current->timeline.ops);  // one slice per op and lane
  EXPECT_EQ(m.timeline.lanes.size(), app.current->timeline.lanes.size());
  const auto now = logical_spans(*app.current);
  ASSERT_FALSE(now.empty());
  EXPECT_EQ(m.spans, now);  // aligned by (PP, MB, PASS): no differences
  // Per-kind totals agree (compute passes and communication kinds classified alike).
  auto a = kind_stats(m.timeline, 0, 1e18), b = kind_stats(app.current->timeline, 0, 1e18);
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].total, b[k].total) << op_class_name(static_cast<OpClass>(k));
  EXPECT_TRUE(app.hooks.count("diff table"));
  // A file that is not a trace: a status line, the measured trace stays.
  EXPECT_FALSE(app.open_trace(k1f1b));
  EXPECT_NE(app.status.find("traceEvents"), std::string::npos) << app.status;
  EXPECT_TRUE(app.measured);
}

TEST_F(Panels, FileBrowseListsPlansNextToThePathAndOpensOne) {
  app.path_field = kEx + "/";
  run("frames 1\nclick menu file\nframes 2\n");
  ASSERT_TRUE(app.hooks.count("menu browse")) << app.script_error;
  run("hover menu browse\nframes 3\n");
  ASSERT_TRUE(app.hooks.count("browse gpt_pp4_dp2_1f1b.json")) << app.script_error;
  run("click browse gpt_pp4_dp2_1f1b.json\nwait\nframes 1\n");
  EXPECT_EQ(app.doc.path(), kEx + "/gpt_pp4_dp2_1f1b.json");
  ASSERT_TRUE(app.current);
  EXPECT_EQ(app.recent.front(), kEx + "/gpt_pp4_dp2_1f1b.json");
}

TEST_F(Panels, TorchCsvExportIsTheBuildersSchedule) {
  const fs::path csv = tmp("sched.csv");
  run("open " + kBuilder + "\nwait\nexport-torch-csv " + csv.string() + "\n");
  // One row per rank, 8 forwards and 8 backwards each; rank 0 starts with stage 0's F of mb 0.
  std::ifstream in(csv);
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(line);
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& r : rows) EXPECT_EQ(std::count(r.begin(), r.end(), ',') + 1, 16) << r;
  EXPECT_EQ(rows[0].substr(0, 4), "0F0,");
  EXPECT_NE(rows[3].find("3B7"), std::string::npos) << rows[3];
  // Nothing simulated: an error, no file.
  App fresh;
  std::string err;
  EXPECT_FALSE(fresh.export_torch_csv(tmp("x.csv").string(), &err));
  EXPECT_FALSE(err.empty());
  EXPECT_FALSE(fs::exists(tmp("x.csv")));
}

TEST(Script, UnknownActionsAndMissingArgumentsAreDiagnosed) {
  auto s = parse_script("open a.json\nzom 1 2\nclick\nframes x\n", "s.txt");
  ASSERT_FALSE(s);
  ASSERT_EQ(s.error().size(), 3u);
  EXPECT_EQ(s.error()[0].loc.line, 2u);
  EXPECT_NE(s.error()[0].hint.find("zoom"), std::string::npos);
  EXPECT_EQ(s.error()[1].loc.line, 3u);
  EXPECT_EQ(s.error()[2].loc.line, 4u);
  auto ok = parse_script("# comment\nset /model/name my model # kept\ntype json {\"a\": 1}\ndrag order 9 0 -> order 9 1 -> shift\n", "s.txt");
  ASSERT_TRUE(ok) << render_all(ok.error());
  ASSERT_EQ(ok->size(), 3u);
  EXPECT_EQ((*ok)[2].args, (std::vector<std::string>{"order 9 0", "order 9 1", "shift"}));
  EXPECT_EQ((*ok)[0].args[1], "my model # kept");
  EXPECT_EQ((*ok)[1].args[1], "{\"a\": 1}");
}

TEST(Document, UndoRedoCoalescingAndFormatting) {
  Document d;
  d.reset("{\"a\": 1, \"schedule\": [{\"op\": \"split\"}, {\"op\": \"order\"}]}");
  ASSERT_TRUE(d.set("/a", 2, true));
  ASSERT_TRUE(d.set("/a", 3, true));  // a drag: one undo step
  d.seal();
  ASSERT_TRUE(d.set("/b", "x"));
  EXPECT_EQ((*d.json())["a"], 3);
  EXPECT_NE(d.text().find("    {\"op\":\"order\"}\n"), std::string::npos) << d.text();
  EXPECT_TRUE(d.dirty());
  d.undo();
  EXPECT_FALSE(d.json()->contains("b"));
  d.undo();
  EXPECT_EQ((*d.json())["a"], 1);
  EXPECT_FALSE(d.can_undo());
  EXPECT_FALSE(d.dirty());  // back to the loaded text
  d.redo();
  EXPECT_EQ((*d.json())["a"], 3);
  EXPECT_TRUE(d.erase("/schedule/0"));
  EXPECT_EQ((*d.json())["schedule"].size(), 1u);
  d.set_text("not json");
  EXPECT_FALSE(d.json());
  EXPECT_FALSE(d.set("/a", 1));
}

// The Plan panel's tabs read the plan as plain JSON every frame: converted once per revision
// (the same object while the text is unchanged), and following every edit, undo and bad text.
TEST(Document, PlainJsonIsConvertedOncePerRevision) {
  Document d;
  d.reset("{\"b\": 1, \"a\": [2]}");
  const nlohmann::json* first = &d.plain_json();
  EXPECT_EQ(d.plain_json(), nlohmann::json::parse("{\"a\": [2], \"b\": 1}"));
  const uint64_t rev = d.revision();
  (void)d.plain_json();
  EXPECT_EQ(d.revision(), rev);
  EXPECT_EQ(&d.plain_json(), first);
  ASSERT_TRUE(d.set("/b", 5));
  EXPECT_EQ(d.plain_json()["b"], 5);
  d.undo();
  EXPECT_EQ(d.plain_json()["b"], 1);
  d.set_text("not json");
  EXPECT_TRUE(d.plain_json().is_null());
}

TEST(Format, TimesAndBytesCarryUnits) {
  EXPECT_EQ(format_time(850), "850 ns");
  EXPECT_EQ(format_time(12400), "12.4 us");
  EXPECT_EQ(format_time(3.21e6), "3.21 ms");
  EXPECT_EQ(format_time(1.5e9), "1.5 s");
  EXPECT_EQ(format_bytes(2.0 * 1024 * 1024 * 1024), "2.00 GiB");
}


// Zoomed in, an op is named by its model op ("layer1.mlp.down") under slices naming the pass
// ("B mb0 PP0") and the layer ("layer 1"), so the pass's name is drawn once per slice, not on
// every op.
TEST_F(Panels, ZoomedInOpsAreNamedByTheirLayerOpUnderThePass) {
  run("open " + k1f1b + "\nwait\nzoom 60 62\nframes 2\n");
  ASSERT_TRUE(app.current);
  size_t layer_ops = 0, pass_labels = 0, layer_labels = 0;
  for (const std::string& l : app.tl.labels) {
    if (l.rfind("layer", 0) == 0 && l.find('.') != std::string::npos) ++layer_ops;
    if (l.rfind("layer ", 0) == 0) ++layer_labels;
    if (l.size() > 4 && (l[0] == 'F' || l[0] == 'B') && l.find(" mb") == 1) ++pass_labels;
  }
  EXPECT_GE(layer_ops, 8u);
  EXPECT_GE(layer_labels, 2u);
  EXPECT_GE(pass_labels, 1u);
  EXPECT_LE(pass_labels, static_cast<size_t>(app.tl.lanes_drawn)) << "the pass named on every op";
}


// The Diagnostics tab echoes the source line unwrapped (one line, though wider than the panel)
// and puts the caret right under the column's measured x, not under a count of spaces that a
// proportional font and word wrap would misplace.
TEST_F(Panels, DiagnosticCaretSitsUnderItsColumn) {
  const fs::path bad = tmp("caret.json");
  const std::string line =
      R"({"model": {"family": "transformer", "name": "gpt", "layers": "many", "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 50304, "seq_len": 2048}})";
  std::ofstream(bad) << line << "\n";
  run("open " + bad.string() + "\nwait\nclick tab diagnostics\nframes 2\n");
  ASSERT_FALSE(app.current);
  size_t k = app.diags.size();
  for (size_t i = 0; i < app.diags.size(); ++i)
    if (app.diags[i].message.find("'layers'") != std::string::npos) k = i;
  ASSERT_LT(k, app.diags.size());
  const uint32_t col = app.diags[k].caret_col ? app.diags[k].caret_col : app.diags[k].loc.col;
  EXPECT_EQ(line.substr(col - 1, 6), "\"many\"");
  ASSERT_TRUE(app.hooks.count(fmt::format("diagnostic {} source", k)));
  const Rect src = app.hooks[fmt::format("diagnostic {} source", k)];
  const Rect caret = app.hooks[fmt::format("diagnostic {} caret", k)];
  const float line_h = ImGui::GetTextLineHeight();
  EXPECT_NEAR(src.y1 - src.y0, line_h, 1.0f) << "the source line was wrapped";
  EXPECT_NEAR(caret.y0, src.y1, ImGui::GetStyle().ItemSpacing.y + 1) << "the caret is not under the line";
  const float want = src.x0 + ImGui::CalcTextSize(line.substr(0, col - 1).c_str()).x;
  EXPECT_NEAR(caret.cx(), want, 2.0f);
  EXPECT_GT(want, src.x0 + 200) << "column 62 is far right of the line's start";
}

}  // namespace
}  // namespace stretto::gui

namespace stretto::gui {
namespace {

// The search runs on the search worker's thread (search.h): the UI thread only starts it and
// takes its answer. Its matches equal the matching done on the calling thread; a newer query
// cancels the one running; a cancelled job answers nothing; matches of an older result are
// never kept for a newer one (their lanes and tasks differ).
TEST_F(Panels, SearchRunsOffTheUiThreadAndAnswersTheLatestQuery) {
  run("open " + k1f1b + "\nwait\nframes 1\n");
  ASSERT_TRUE(app.current);
  SearchIndex index;
  std::atomic<bool> no{false}, yes{true};
  auto direct = match_search(app.current, "PP1 MB5", index, no);
  ASSERT_TRUE(direct);
  EXPECT_GT(direct->tasks.size(), 10u);
  SearchIndex fresh;
  EXPECT_FALSE(match_search(app.current, "PP1 MB5", fresh, yes));  // cancelled: no answer

  app.search.query = "PP1 MB5";
  app.update_search();  // starts the worker, does not wait for it
  EXPECT_TRUE(app.search.pending() || app.search.active());
  app.search.query = "all-gather";
  app.update_search();  // cancels "PP1 MB5"
  app.search.worker.wait_idle();
  app.update_search();
  EXPECT_FALSE(app.search.pending());
  ASSERT_TRUE(app.search.active());
  EXPECT_EQ(app.search.for_query, "all-gather");
  auto gathers = match_search(app.current, "all-gather", index, no);
  ASSERT_TRUE(gathers);
  EXPECT_EQ(app.search.tasks, gathers->tasks);
  EXPECT_EQ(app.search.lane_prefix, gathers->lane_prefix);

  // a new result: the old matches are dropped at once, the new ones come from the worker
  const auto before = app.current;
  run("set /schedule/4/bucket_size 50\nwait\nframes 1\n");
  ASSERT_NE(app.current, before);
  app.update_search();
  if (app.search.active()) {
    EXPECT_EQ(app.search.for_snap.lock(), app.current);
  }
  app.search.worker.wait_idle();
  app.update_search();
  ASSERT_TRUE(app.search.active());
  EXPECT_EQ(app.search.for_snap.lock(), app.current);
  EXPECT_EQ(app.search.lane_prefix.size(), app.current->timeline.lanes.size());
}

}  // namespace
}  // namespace stretto::gui
