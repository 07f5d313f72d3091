// The real window under Xvfb: `stretto gui` opens an example, a script edits the microbatch
// count through the UI (the "+" button and typing into the field), waits for the
// re-simulation and takes screenshots. The step time the UI shows must be the one
// `stretto simulate` prints for the edited plan, and the screenshot must show drawn lanes and
// memory curves.
#include <gtest/gtest.h>
#include <stb_image.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sys/wait.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "stretto/gui/app.h"
#include "stretto/gui/timeline.h"
#include "stretto/sim/session.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

bool have_xvfb() {
  return std::system("command -v xvfb-run > /dev/null 2>&1") == 0;
}

struct Image {
  int w = 0, h = 0;
  std::vector<unsigned char> px;
  explicit Image(const std::string& path) {
    int n = 0;
    unsigned char* d = stbi_load(path.c_str(), &w, &h, &n, 4);
    if (d) px.assign(d, d + static_cast<size_t>(w) * static_cast<size_t>(h) * 4);
    stbi_image_free(d);
  }
  // Pixels in [x0,x1)x[y0,y1) within `tol` of an RGB colour.
  size_t count(const json& r, int cr, int cg, int cb, int tol = 12) const {
    size_t c = 0;
    const int x0 = std::max(0, r[0].get<int>()), y0 = std::max(0, r[1].get<int>());
    const int x1 = std::min(w, r[2].get<int>()), y1 = std::min(h, r[3].get<int>());
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        const unsigned char* p = &px[(static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)) * 4];
        if (std::abs(p[0] - cr) <= tol && std::abs(p[1] - cg) <= tol && std::abs(p[2] - cb) <= tol) ++c;
      }
    return c;
  }
};

TEST(GuiWindow, EditMicrobatchesThroughTheUiUnderXvfb) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path dir = STRETTO_GUI_SHOTS;
  fs::create_directories(dir);
  const fs::path script = dir / "edit_microbatches.script", edited = dir / "edited_plan.json",
                 before = dir / "before_edit.png", after = dir / "after_edit.png",
                 state = dir / "state.json";
  std::ofstream(script) << "# open (on the command line), edit microbatches through the UI\n"
                           "wait\n"
                           "frames 2\n"
                           "screenshot " << before.string() << "\n"
                           "pin\n"
                           "click microbatches+\n"
                           "wait\n"
                           "type microbatches 12\n"
                           "wait\n"
                           "click tab compare\n"
                           "key L\n"
                           "frames 3\n"
                           "save " << edited.string() << "\n";
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b_builder.json";
  const std::string cmd = std::string(STRETTO_UNDER_XVFB) + " --screen 1600x900x24 " + std::string(STRETTO_BINARY) +
                          " gui " + plan + " --script " + script.string() + " --frames 2 --screenshot " +
                          after.string() + " --dump-state " + state.string();
  int rc = 0;
  const std::string out = run(cmd, &rc);
  ASSERT_EQ(rc, 0) << out;

  const json st = json::parse(std::ifstream(state));
  EXPECT_FALSE(st["stale"].get<bool>());
  EXPECT_FALSE(st["failed"].get<bool>());
  EXPECT_EQ(st["microbatches"].get<int>(), 12);
  EXPECT_TRUE(st.contains("baseline_step_time_ns"));
  // The step time shown equals `stretto simulate`'s for the edited plan.
  const std::string sim = run(std::string(STRETTO_BINARY) + " simulate " + edited.string() + " --format json", &rc);
  ASSERT_EQ(rc, 0) << sim;
  const json sj = json::parse(sim.substr(sim.find('{')));
  EXPECT_EQ(st["step_time_ms"].get<double>(), sj["step_time_ms"].get<double>());
  EXPECT_NE(st["baseline_step_time_ns"].get<int64_t>(), st["step_time_ns"].get<int64_t>());
  // The Memory panel's reserved bytes are `simulate`'s, device by device.
  const json& mem_state = st["memory"];
  ASSERT_EQ(mem_state["peak_per_device"].size(), sj["devices"].size());
  for (size_t d = 0; d < sj["devices"].size(); ++d)
    EXPECT_EQ(mem_state["peak_per_device"][d]["now_reserved_bytes"].get<int64_t>(),
              sj["devices"][d]["peak_reserved_bytes"].get<int64_t>()) << "device " << d;
  const size_t shown = mem_state["device"].get<size_t>();
  EXPECT_EQ(mem_state["now"]["peak_reserved_bytes"].get<int64_t>(),
            sj["devices"][shown]["peak_reserved_bytes"].get<int64_t>());
  EXPECT_GT(sj["devices"][shown]["peak_reserved_bytes"].get<int64_t>(),
            sj["devices"][shown]["peak_memory_bytes"].get<int64_t>());
  EXPECT_TRUE(mem_state["now"]["reserved_line_drawn"].get<bool>());

  // Pixels: forward (66,133,244) and backward (230,126,34) boxes in the timeline; optimizer
  // state and activations stacked in the memory plot, and its capacity line.
  for (const fs::path& png : {before, after}) {
    SCOPED_TRACE(png.string());
    Image img(png.string());
    ASSERT_EQ(img.w, 1600);
    ASSERT_EQ(img.h, 900);
    const json& tl = st["widgets"]["timeline"];
    const json& mem = st["widgets"]["memory"];
    EXPECT_GT(img.count(tl, 66, 133, 244), 300u);
    EXPECT_GT(img.count(tl, 230, 126, 34), 2000u);
    EXPECT_GT(img.count(mem, 142, 68, 173), 2000u);  // optimizer state (the compute colour)
    EXPECT_GT(img.count(mem, 230, 126, 34), 2000u);  // activations (the backward colour)
    EXPECT_GT(img.count(mem, 255, 80, 80, 30), 100u);  // the capacity line
    EXPECT_GT(img.count(mem, 255, 150, 230, 20), 100u);  // the reserved peak's line
  }
}

TEST(GuiWindow, ABadPlanOpensWithItsDiagnosticsAndExitsCleanly) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path dir = STRETTO_GUI_SHOTS;
  fs::create_directories(dir);
  const fs::path bad = dir / "bad_plan.json", state = dir / "bad_state.json", shot = dir / "bad_plan.png";
  std::ofstream(bad) << "{\"model\": {\"family\": \"transformer\", \"layers\": \"many\"}}\n";
  std::ofstream(dir / "bad.script") << "wait\nclick tab diagnostics\nframes 2\n";
  int rc = 0;
  const std::string out = run(std::string(STRETTO_UNDER_XVFB) + " --screen 1280x800x24 " + std::string(STRETTO_BINARY) + " gui " +
                                  bad.string() + " --script " + (dir / "bad.script").string() +
                                  " --frames 2 --size 1280x800 --screenshot " + shot.string() +
                                  " --dump-state " + state.string(),
                              &rc);
  ASSERT_EQ(rc, 0) << out;
  const json st = json::parse(std::ifstream(state));
  EXPECT_TRUE(st["failed"].get<bool>());
  ASSERT_FALSE(st["diagnostics"].empty());
  EXPECT_NE(st["diagnostics"][0]["location"].get<std::string>().find("bad_plan.json:1:"), std::string::npos)
      << st.dump(2);
  EXPECT_FALSE(st.contains("step_time_ns"));
}

TEST(GuiCli, NoDisplayBadScriptAndBadArgumentsAreClearErrors) {
  const std::string bin = STRETTO_BINARY;
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json";
  int rc = 0;
  std::string out = run("env -u DISPLAY -u WAYLAND_DISPLAY " + bin + " gui " + plan + " --frames 1", &rc);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
  EXPECT_NE(out.find("xvfb-run"), std::string::npos) << out;
  const fs::path script = fs::temp_directory_path() / ("stretto_bad_" + std::to_string(::getpid()) + ".script");
  std::ofstream(script) << "wait\nzom 1 2\n";
  out = run(bin + " gui " + plan + " --script " + script.string(), &rc);
  EXPECT_EQ(WEXITSTATUS(rc), 2) << out;
  EXPECT_NE(out.find(script.string() + ":2:1: error: unknown script action 'zom'"), std::string::npos) << out;
  EXPECT_NE(out.find("did you mean 'zoom'?"), std::string::npos) << out;
  std::ofstream(script) << "wait\ngranularity layer\n";
  out = run(bin + " gui " + plan + " --script " + script.string(), &rc);
  EXPECT_EQ(WEXITSTATUS(rc), 2) << out;
  EXPECT_NE(out.find(script.string() + ":2:1: error: 'granularity layer': op or pass is due"),
            std::string::npos)
      << out;
  out = run(bin + " gui " + plan + " --size 10x10", &rc);
  EXPECT_EQ(WEXITSTATUS(rc), 2) << out;
  out = run(bin + " gui " + plan + " --screenshot x.png", &rc);
  EXPECT_EQ(WEXITSTATUS(rc), 2) << out;
  EXPECT_NE(out.find("--frames"), std::string::npos) << out;
}

}  // namespace

namespace {

// Runs `stretto gui PLAN --script S --frames 2 --screenshot SHOT --dump-state STATE` under Xvfb
// at 1600x900; returns the state.
json run_gui(const std::string& plan, const std::string& script_text, const fs::path& shot, const std::string& tag) {
  const fs::path dir = STRETTO_GUI_SHOTS;
  fs::create_directories(dir);
  const fs::path script = dir / (tag + ".script"), state = dir / (tag + "_state.json");
  std::ofstream(script) << script_text;
  const std::string cmd = std::string(STRETTO_UNDER_XVFB) + " --screen 1600x900x24 " + std::string(STRETTO_BINARY) + " gui " + plan +
                          " --script " + script.string() + " --frames 2 --screenshot " + shot.string() +
                          " --dump-state " + state.string();
  int rc = 0;
  const std::string out = run(cmd, &rc);
  EXPECT_EQ(rc, 0) << out;
  return rc == 0 ? json::parse(std::ifstream(state)) : json::object();
}

json rect_of(const json& st, const std::string& widget) {
  return st["widgets"].contains(widget) ? st["widgets"][widget] : json::array({0, 0, 0, 0});
}

}  // namespace

// Search `PP1 MB5`: the count is every op of stage 1's microbatch 5 (the DAG's tags, counted
// here apart from the GUI's text search: compute and collectives tagged PP1 MB5, and sends
// from or to it), the listed names carry both words, matches are outlined in cyan and the
// rest dimmed in the screenshot.
TEST(GuiWindow, SearchHighlightsAndListsTheMatchingOps) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path dir = STRETTO_GUI_SHOTS;
  const fs::path plain = dir / "search_off.png", shot = dir / "search_pp1_mb5.png",
                 listed = dir / "search_list.png";
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json";
  const json st = run_gui(plan,
                          "wait\nframes 2\nscreenshot " + plain.string() + "\nsearch PP1 MB5\nframes 2\nscreenshot " +
                              shot.string() + "\nclick tab search\nframes 2\nclick match 2\nframes 2\n",
                          listed, "search");
  ASSERT_TRUE(st.contains("search")) << st.dump(2);
  auto s = stretto::sim::Session::open(plan);
  ASSERT_TRUE(s);
  auto r = s->simulate();
  ASSERT_TRUE(r);
  const auto& dag = s->compiled().dag;
  const auto tl = stretto::gui::build_timeline(*r, s->compiled());
  size_t want = 0;
  for (uint32_t t = 0; t < r->program.tasks.size(); ++t) {
    if (tl.where[t].first == UINT32_MAX) continue;
    const auto& n = dag.nodes[r->node_of(t)];
    const auto& a = n.tags;
    if (n.kind == stretto::compiler::NodeKind::kTransfer) {
      const auto b = dag.consumer_tags_of(n);
      want += (a.pp() == 1 || b.pp() == 1) && (a.mb() == 5 || b.mb() == 5);
    } else {
      want += a.pp() == 1 && a.mb() == 5;
    }
  }
  EXPECT_GT(want, 10u);
  EXPECT_EQ(st["search"]["matches"].get<size_t>(), want);
  EXPECT_EQ(st["search"]["query"], "PP1 MB5");
  ASSERT_FALSE(st["search"]["first"].empty());
  for (const auto& name : st["search"]["first"]) {
    const std::string n = name.get<std::string>();
    EXPECT_NE(n.find("PP1"), std::string::npos) << n;
    EXPECT_NE(n.find("MB5"), std::string::npos) << n;
  }
  // The Search tab lists them; a click on the third selects it and shows it.
  ASSERT_FALSE(st["selection"].is_null());
  EXPECT_EQ(st["selection"]["name"], st["search"]["first"][2]);
  EXPECT_LE(st["view"]["t0_ns"].get<double>(), st["selection"]["start_ns"].get<double>());
  EXPECT_GE(st["view"]["t1_ns"].get<double>(), st["selection"]["end_ns"].get<double>());
  EXPECT_LT(st["view"]["t1_ns"].get<double>() - st["view"]["t0_ns"].get<double>(), 20e6);
  const json& tlr = st["widgets"]["timeline"];
  Image off(plain.string()), on(shot.string());
  EXPECT_EQ(off.count(tlr, 0, 255, 255, 20), 0u);
  EXPECT_GT(on.count(tlr, 0, 255, 255, 20), 300u);  // the matches' outlines
  // The other ops are dimmed: far fewer full-colour backward pixels.
  EXPECT_LT(on.count(tlr, 230, 126, 34), off.count(tlr, 230, 126, 34) / 2);
}

// Nested slices name the pass once and the layer ops under it; one lane per device shows all
// 8 devices (5 fit with their lanes); the minimap frames the viewport, and a click on it
// centres the view there.
TEST(GuiWindow, OneLanePerDeviceAndTheMinimapFramesTheView) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path dir = STRETTO_GUI_SHOTS;
  const fs::path zoomed = dir / "minimap_50_60ms.png", shot = dir / "one_lane_per_device.png";
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json";
  const json st = run_gui(plan,
                          "wait\nframes 2\nzoom 50 60\nframes 2\nscreenshot " + zoomed.string() +
                              "\nclick minimap\nframes 2\nkey L\nframes 2\n",
                          shot, "onelane");
  ASSERT_TRUE(st.contains("view")) << st.dump(2);
  const double step = st["step_time_ns"].get<double>();
  // One row per device: all 8 on screen, each with drawn passes.
  EXPECT_TRUE(st["view"]["one_lane_per_device"].get<bool>());
  EXPECT_EQ(st["view"]["devices_drawn"].get<int>(), 8);
  Image img(shot.string());
  const json& tlr = st["widgets"]["timeline"];
  for (int d = 0; d < 8; ++d) {
    const json dev = rect_of(st, "device " + std::to_string(d));
    ASSERT_GT(dev[3].get<double>(), dev[1].get<double>()) << d;
    const json row = {dev[2].get<int>(), dev[1].get<int>(), tlr[2].get<int>(), dev[3].get<int>()};
    EXPECT_GT(img.count(row, 66, 133, 244) + img.count(row, 230, 126, 34), 500u) << "device " << d;
  }
  // The click at the minimap's middle centred the 10 ms view on the step's middle.
  const double t0 = st["view"]["t0_ns"].get<double>(), t1 = st["view"]["t1_ns"].get<double>();
  EXPECT_NEAR(t1 - t0, 10e6, 1e4);
  EXPECT_NEAR((t0 + t1) / 2, step / 2, step * 0.01);
  // In the zoomed screenshot the viewport's white frame spans 50..60 ms of the minimap.
  const json mm = rect_of(st, "minimap");
  const double x0 = mm[0].get<double>(), w = mm[2].get<double>() - x0;
  const int fx0 = static_cast<int>(std::lround(x0 + 50e6 / step * w)), fx1 = static_cast<int>(std::lround(x0 + 60e6 / step * w));
  Image z(zoomed.string());
  const int my0 = mm[1].get<int>(), my1 = mm[3].get<int>();
  EXPECT_GT(z.count(json::array({fx0 - 1, my0, fx0 + 2, my1}), 255, 255, 255, 40), 10u);
  EXPECT_GT(z.count(json::array({fx1 - 1, my0, fx1 + 2, my1}), 255, 255, 255, 40), 10u);
  EXPECT_EQ(z.count(json::array({(fx0 + fx1) / 2 - 1, my0 + 3, (fx0 + fx1) / 2 + 2, my1 - 3}), 255, 255, 255, 20), 0u);
}

// Compare: rows present in both come first, by |end delta|, then the new microbatches; the
// baseline's rows are drawn under the current lanes and its memory total over the current
// stack.
TEST(GuiWindow, CompareSortsByDeltaAndDrawsTheBaselineAndItsMemory) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path dir = STRETTO_GUI_SHOTS;
  const fs::path shot = dir / "compare_baseline.png";
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b_builder.json";
  const json st = run_gui(plan, "wait\npin\ntype microbatches 12\nwait\nclick tab compare\nframes 2\n", shot, "compare");
  ASSERT_TRUE(st.contains("compare")) << st.dump(2);
  const auto& rows = st["compare"]["first"];
  ASSERT_EQ(rows.size(), 20u);
  int64_t last = INT64_MAX;
  for (const auto& row : rows) {
    ASSERT_TRUE(row["end_delta_ns"].is_number()) << row.dump() << ": a new op before an op in both";
    const int64_t d = std::llabs(row["end_delta_ns"].get<int64_t>());
    EXPECT_LE(d, last);
    last = d;
  }
  EXPECT_GT(std::llabs(rows[0]["end_delta_ns"].get<int64_t>()), 0);
  EXPECT_GT(st["view"]["reference_rows_drawn"].get<int>(), 4);
  Image img(shot.string());
  EXPECT_GT(img.count(st["widgets"]["memory"], 170, 230, 255, 10), 150u);  // the baseline's total
  // The baseline's own stack, between its title and its time axis under the current one's:
  // activations (orange) and optimizer state (purple) fill pixels there.
  const json mem = rect_of(st, "memory"), title = rect_of(st, "memory baseline title"),
             axis = rect_of(st, "memory baseline axis"), now_title = rect_of(st, "memory now title");
  EXPECT_LT(now_title[3].get<double>(), title[1].get<double>());
  const json band = {mem[0], title[3], mem[2], axis[1]};
  EXPECT_GT(img.count(band, 230, 126, 34, 10), 500u) << "baseline activations";
  EXPECT_GT(img.count(band, 142, 68, 173, 10), 500u) << "baseline optimizer";
}

// Screenshots carry no tooltip (automation ignores the real mouse and parks the scripted one
// after each action); the ruler starts at "0" and names one unit ("20 ms"), not "0 ns"; the
// Plan panel's buttons are whole; the memory plot has a time axis and its legend stays inside.
TEST(GuiWindow, ScreenshotsHaveNoHoverAndReadableAxesAndButtons) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path dir = STRETTO_GUI_SHOTS;
  const fs::path shot = dir / "no_hover.png";
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json";
  const json st = run_gui(plan, "wait\nframes 2\nclick lane 0\nframes 3\n", shot, "nohover");
  ASSERT_TRUE(st.contains("view")) << st.dump(2);
  EXPECT_FALSE(st["view"]["tooltip_shown"].get<bool>());
  EXPECT_FALSE(st["selection"].is_null()) << "the click selected an op";
  std::vector<std::string> ruler;
  for (const auto& l : st["view"]["labels"])
    if (l.get<std::string>().rfind("ruler: ", 0) == 0) ruler.push_back(l.get<std::string>().substr(7));
  ASSERT_GE(ruler.size(), 3u);
  EXPECT_EQ(ruler[0], "0");
  for (size_t i = 1; i < ruler.size(); ++i) EXPECT_NE(ruler[i].find(" ms"), std::string::npos) << ruler[i];
  const json pin = rect_of(st, "pin"), timeline = rect_of(st, "timeline"), mem = rect_of(st, "memory"),
             axis = rect_of(st, "memory axis");
  EXPECT_LT(pin[2].get<double>(), timeline[0].get<double>() - 4) << "the Pin baseline button is cut";
  EXPECT_GT(axis[1].get<double>(), mem[1].get<double>());
  EXPECT_LE(axis[3].get<double>(), mem[3].get<double>() + 1);
}

// The toolbar's "Pass granularity" box re-simulates with the CLI's --granularity pass: the
// step shown is `simulate --granularity pass`'s, on a plan where it differs from op
// granularity, with fewer engine tasks; the script's `granularity op` goes back.
TEST(GuiWindow, PassGranularityBoxSimulatesAsTheCliOption) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json";
  auto cli_step = [&](const std::string& granularity) {
    int rc = 0;
    const std::string out = run(std::string(STRETTO_BINARY) + " simulate " + plan +
                                    " --format json --granularity " + granularity,
                                &rc);
    EXPECT_EQ(rc, 0) << out;
    return json::parse(out.substr(out.find('{')))["step_time_ms"].get<double>();
  };
  const double op = cli_step("op"), pass = cli_step("pass");
  ASSERT_NE(op, pass);
  const fs::path dir = STRETTO_GUI_SHOTS;
  const json st = run_gui(plan, "wait\nclick granularity\nwait\nframes 2\n", dir / "granularity.png",
                          "granularity");
  ASSERT_TRUE(st.contains("granularity")) << st.dump(2);
  EXPECT_EQ(st["granularity"], "pass");
  EXPECT_FALSE(st["stale"].get<bool>());
  EXPECT_FALSE(st["failed"].get<bool>());
  EXPECT_EQ(st["step_time_ms"].get<double>(), pass);
  const json back = run_gui(plan, "wait\ngranularity pass\nwait\ngranularity op\nwait\nframes 2\n",
                            dir / "granularity_op.png", "granularity_op");
  ASSERT_TRUE(back.contains("granularity")) << back.dump(2);
  EXPECT_EQ(back["granularity"], "op");
  EXPECT_EQ(back["step_time_ms"].get<double>(), op);
  EXPECT_LT(st["engine_tasks"].get<size_t>(), back["engine_tasks"].get<size_t>());
}

namespace {

// Microbatches of TheLatestEditWins's plan.
constexpr int kLatestMicrobatches = 512;

// A plan file's step time, simulated in this process (the library the CLI's simulate uses).
int64_t simulated_step(const fs::path& plan) {
  auto s = stretto::sim::Session::open(plan.string());
  EXPECT_TRUE(s) << plan;
  if (!s) return -1;
  auto r = s->simulate();
  EXPECT_TRUE(r) << plan;
  return r ? r->step_time : -1;
}

// (PP, MB, PASS) -> first start and last end of that logical op's compute tasks, from a plan
// simulated here (what the Compare tab aligns, computed apart from the GUI's code); with
// `per_device`, per device ("D3 PP1 MB2 B": what a difference lane aligns).
std::map<std::string, std::pair<int64_t, int64_t>> spans_of(const fs::path& plan, stretto::sim::Result* out,
                                                           bool per_device = false) {
  std::map<std::string, std::pair<int64_t, int64_t>> m;
  auto s = stretto::sim::Session::open(plan.string());
  EXPECT_TRUE(s) << plan;
  if (!s) return m;
  auto r = s->simulate();
  EXPECT_TRUE(r) << plan;
  if (!r) return m;
  const auto& dag = s->compiled().dag;
  for (uint32_t t = 0; t < r->program.tasks.size(); ++t) {
    if (r->program.tasks[t].kind != stretto::engine::TaskKind::kCompute) continue;
    const auto& tg = dag.nodes[r->node_of(t)].tags;
    if (tg.pass == stretto::plan::Pass::kNone) continue;
    const std::string key = (per_device ? "D" + std::to_string(r->device_of(t)) + " " : std::string()) + "PP" +
                            std::to_string(tg.pp()) + " MB" + std::to_string(tg.mb()) + " " +
                            std::string(stretto::plan::pass_name(tg.pass));
    auto [it, fresh] = m.try_emplace(key, r->timing[t].start, r->timing[t].end);
    if (!fresh) {
      it->second.first = std::min(it->second.first, r->timing[t].start);
      it->second.second = std::max(it->second.second, r->timing[t].end);
    }
  }
  if (out) *out = std::move(*r);
  return m;
}

json filters_of(const fs::path& plan, int directive) {
  const json p = json::parse(std::ifstream(plan));
  return p["schedule"][directive]["filters"];
}

}  // namespace

// The order grid: a Shift-drop groups two cells (one group of two filters, run overlapped), a
// right-click on the group splits it back into one cell per filter, in the group's order, the
// other cells untouched; the plan re-simulates to what `simulate` gives for the saved file, and
// the screenshots show one cell fewer while grouped.
TEST(GuiWindow, RightClickSplitsAnOrderGroup) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path dir = STRETTO_GUI_SHOTS;
  const fs::path orig = dir / "split_orig.json", grouped = dir / "split_grouped.json",
                 split = dir / "split_split.json", grouped_png = dir / "split_grouped.png",
                 split_png = dir / "split_split.png";
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json";
  const json st = run_gui(plan,
                          "wait\nclick tab order\nframes 2\nsave " + orig.string() +
                              "\ndrag order 9 0 -> order 9 1 -> shift\nwait\nframes 2\nsave " + grouped.string() +
                              "\nscreenshot " + grouped_png.string() + "\nrclick order 9 0\nwait\nframes 2\nsave " +
                              split.string() + "\n",
                          split_png, "split");
  ASSERT_TRUE(st.contains("step_time_ns")) << st.dump(2);
  EXPECT_FALSE(st["failed"].get<bool>()) << st["diagnostics"].dump(2);
  EXPECT_FALSE(st["stale"].get<bool>());
  const json f0 = filters_of(orig, 9), f1 = filters_of(grouped, 9), f2 = filters_of(split, 9);
  ASSERT_EQ(f0.size(), 16u);
  for (const auto& g : f0) ASSERT_EQ(g.size(), 1u) << g.dump();
  // Grouped: cell 1's filter joined cell 0's group (Shift-drop of cell 0 onto cell 1).
  ASSERT_EQ(f1.size(), 15u) << f1.dump();
  ASSERT_EQ(f1[0].size(), 2u) << f1[0].dump();
  EXPECT_EQ(f1[0], json::array({f0[1][0], f0[0][0]}));
  // Split: one cell per filter, in the group's order, then the untouched rest.
  ASSERT_EQ(f2.size(), 16u) << f2.dump();
  EXPECT_EQ(f2[0], json::array({f1[0][0]}));
  EXPECT_EQ(f2[1], json::array({f1[0][1]}));
  for (size_t g = 2; g < 16; ++g) EXPECT_EQ(f2[g], f0[g]) << "cell " << g;
  // Everything else in the plan is the original.
  json p0 = json::parse(std::ifstream(orig)), p2 = json::parse(std::ifstream(split));
  p0["schedule"][9].erase("filters");
  p2["schedule"][9].erase("filters");
  EXPECT_EQ(p0, p2);
  // The result shown is the split plan's.
  EXPECT_EQ(st["step_time_ns"].get<int64_t>(), simulated_step(split));
  // Pixels: the 16th cell's place holds a button after the split and nothing while grouped
  // (cells are blue for forwards, orange for backwards: ImGui button colours).
  const json last = rect_of(st, "order 9 15");
  ASSERT_GT(last[2].get<double>(), last[0].get<double>()) << st["widgets"].dump();
  Image g(grouped_png.string()), s(split_png.string());
  auto cell_px = [&](const Image& img) { return img.count(last, 51, 115, 204, 10) + img.count(last, 191, 102, 38, 10); };
  EXPECT_GT(cell_px(s), 100u);
  EXPECT_LT(cell_px(g), 10u);
}

// Pin a result, edit a cost, compare: the Compare tab's metric table shows both results and
// their differences, and its logical-op table the baseline's and the current end of each op
// with their difference, largest first. All of it is checked against the two saved plans
// simulated here; the deltas (all positive: every op ends later) are drawn in red.
TEST(GuiWindow, CompareShowsTheBaselineDeltas) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path dir = STRETTO_GUI_SHOTS;
  const fs::path base = dir / "deltas_base.json", now = dir / "deltas_now.json", shot = dir / "deltas.png";
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b_builder.json";
  const json st = run_gui(plan,
                          "wait\nsave " + base.string() + "\npin\nset /costmodel/dispatch_us 40\nwait\nsave " +
                              now.string() + "\nclick tab compare\nframes 2\n",
                          shot, "deltas");
  ASSERT_TRUE(st.contains("compare") && st.contains("compare_metrics")) << st.dump(2);
  stretto::sim::Result rb, rn;
  const auto sb = spans_of(base, &rb), sn = spans_of(now, &rn);
  ASSERT_FALSE(sb.empty());
  ASSERT_EQ(sb.size(), sn.size());
  EXPECT_EQ(st["baseline_step_time_ns"].get<int64_t>(), rb.step_time);
  EXPECT_EQ(st["step_time_ns"].get<int64_t>(), rn.step_time);
  ASSERT_GT(rn.step_time, rb.step_time);
  // Metric rows: now, baseline, delta, as shown.
  std::map<std::string, json> metric;
  for (const auto& m : st["compare_metrics"]) metric[m["metric"].get<std::string>()] = m;
  using stretto::gui::format_bytes;
  using stretto::gui::format_time;
  const json& step = metric["step time"];
  EXPECT_EQ(step["now"], format_time(static_cast<double>(rn.step_time)));
  EXPECT_EQ(step["baseline"], format_time(static_cast<double>(rb.step_time)));
  const double pct = (static_cast<double>(rn.step_time) - static_cast<double>(rb.step_time)) /
                     static_cast<double>(rb.step_time) * 100;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.2f%%", pct);
  EXPECT_EQ(step["delta"], buf);
  std::snprintf(buf, sizeof buf, "%+.2f pt", (rn.bubble_ratio - rb.bubble_ratio) * 100);
  EXPECT_EQ(metric["bubble"]["delta"], buf);
  std::snprintf(buf, sizeof buf, "%+.2f pt", (rn.mfu - rb.mfu) * 100);
  EXPECT_EQ(metric["MFU"]["delta"], buf);
  int64_t pn = 0, pb = 0;
  for (const auto& d : rn.devices) pn = std::max(pn, d.peak_memory);
  for (const auto& d : rb.devices) pb = std::max(pb, d.peak_memory);
  EXPECT_EQ(metric["peak memory (max)"]["delta"], format_bytes(static_cast<double>(pn - pb)));
  // Logical-op rows: every op is in both; the first 20 are the largest |end delta|s, each the
  // two simulations' difference.
  EXPECT_EQ(st["compare"]["rows"].get<size_t>(), sn.size());
  std::vector<int64_t> deltas;
  for (const auto& [k, v] : sn) deltas.push_back(std::llabs(v.second - sb.at(k).second));
  std::sort(deltas.rbegin(), deltas.rend());
  const auto& rows = st["compare"]["first"];
  ASSERT_EQ(rows.size(), 20u);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string op = rows[i]["op"].get<std::string>();
    SCOPED_TRACE(op);
    ASSERT_TRUE(sn.count(op) && sb.count(op));
    EXPECT_EQ(rows[i]["end_ns"].get<int64_t>(), sn.at(op).second);
    EXPECT_EQ(rows[i]["reference_end_ns"].get<int64_t>(), sb.at(op).second);
    EXPECT_EQ(rows[i]["end_delta_ns"].get<int64_t>(), sn.at(op).second - sb.at(op).second);
    EXPECT_EQ(std::llabs(rows[i]["end_delta_ns"].get<int64_t>()), deltas[i]);
    EXPECT_GT(rows[i]["end_delta_ns"].get<int64_t>(), 0);
  }
  // The end-delta column is red (later), none green (earlier).
  Image img(shot.string());
  const json table = rect_of(st, "diff table");
  ASSERT_GT(table[2].get<double>(), table[0].get<double>()) << st["widgets"].dump();
  const json below = {table[0].get<int>(), table[1].get<int>(), table[2].get<int>(), 900};
  // kRed text: a few glyphs' worth (94 pixels at 1600x900 with today's font and rows), not
  // tied to the exact layout above the table.
  EXPECT_GT(img.count(below, 255, 107, 97, 20), 30u);
  EXPECT_EQ(img.count(below, 115, 230, 128, 20), 0u);   // kGreen text
}

// A burst of edits while the worker is still simulating the first: the edits that were queued
// behind it are superseded (never run), and what the UI shows in the end is the last edit's
// result: `simulate` of the saved plan, which differs from every earlier edit's.
TEST(GuiWindow, TheLatestEditWins) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path dir = STRETTO_GUI_SHOTS;
  fs::create_directories(dir);
  // Large enough that one simulation outlasts the frames of the burst (the 1F1B builder
  // plan with many microbatches: seconds on a loaded machine, against a few ms per frame).
  const fs::path big = dir / "latest_big.json", saved = dir / "latest_saved.json", shot = dir / "latest.png";
  json p = json::parse(std::ifstream(std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b_builder.json"));
  p["schedule"]["microbatches"] = kLatestMicrobatches;
  p.erase("name");
  std::ofstream(big) << p.dump(1);
  const int kEdits = 6;
  std::string script = "wait\n";
  for (int k = 1; k <= kEdits; ++k) script += "set /costmodel/dispatch_us " + std::to_string(10 * k) + "\nframes 1\n";
  script += "wait\nframes 2\nsave " + saved.string() + "\n";
  const json st = run_gui(big.string(), script, shot, "latest");
  ASSERT_TRUE(st.contains("step_time_ns")) << st.dump(2);
  EXPECT_FALSE(st["stale"].get<bool>());
  EXPECT_FALSE(st["failed"].get<bool>());
  // The burst raced the worker: some edits were replaced in the queue before they ran.
  EXPECT_EQ(st["worker"]["submitted"].get<int>(), kEdits + 1);
  EXPECT_GE(st["worker"]["superseded"].get<int>(), 1) << st["worker"].dump();
  EXPECT_LT(st["worker"]["run"].get<int>(), kEdits + 1);
  // The saved plan is the last edit, and the result shown is its simulation, not an earlier one's.
  EXPECT_EQ(json::parse(std::ifstream(saved))["costmodel"]["dispatch_us"].get<int>(), 10 * kEdits);
  const int64_t shown = st["step_time_ns"].get<int64_t>();
  EXPECT_EQ(shown, simulated_step(saved));
  for (int k = 0; k < kEdits; ++k) {
    json q = p;
    if (k > 0) q["costmodel"]["dispatch_us"] = 10 * k;
    const fs::path earlier = dir / ("latest_edit" + std::to_string(k) + ".json");
    std::ofstream(earlier) << q.dump(1);
    EXPECT_NE(shown, simulated_step(earlier)) << "the result of edit " << k << " is shown";
  }
}

namespace {

// Per device, how many logical ops of `now` start later or earlier than in `base`, run longer
// or shorter, are gone or new: counted from the two plans simulated here, apart from the GUI.
std::map<int, json> expected_differences(const fs::path& base, const fs::path& now) {
  const auto b = spans_of(base, nullptr, true), n = spans_of(now, nullptr, true);
  std::map<int, json> out;
  auto entry = [&](const std::string& key) -> json& {
    const int d = std::stoi(key.substr(1, key.find(' ') - 1));
    json& e = out[d];
    if (e.is_null())
      e = {{"later", 0}, {"earlier", 0}, {"longer", 0}, {"shorter", 0}, {"gone", 0}, {"new", 0}};
    return e;
  };
  auto bump = [](json& e, const char* k) { e[k] = e[k].get<int>() + 1; };
  for (const auto& [k, v] : n) {
    json& e = entry(k);
    auto it = b.find(k);
    if (it == b.end()) {
      bump(e, "new");
      continue;
    }
    const int64_t start = v.first - it->second.first;
    const int64_t duration = (v.second - v.first) - (it->second.second - it->second.first);
    if (start > 0) bump(e, "later");
    if (start < 0) bump(e, "earlier");
    if (duration > 0) bump(e, "longer");
    if (duration < 0) bump(e, "shorter");
  }
  for (const auto& [k, v] : b)
    if (!n.count(k)) bump(entry(k), "gone");
  return out;
}

// The difference lanes on screen: (device, its lane's rectangle clipped to the timeline).
std::vector<std::pair<int, json>> diff_lanes(const json& st) {
  std::vector<std::pair<int, json>> out;
  const json tl = rect_of(st, "timeline");
  for (int d = 0; d < 64; ++d) {
    const std::string w = "diff " + std::to_string(d);
    if (!st["widgets"].contains(w)) continue;
    json r = st["widgets"][w];
    const int y0 = std::max(r[1].get<int>(), tl[1].get<int>()), y1 = std::min(r[3].get<int>(), tl[3].get<int>());
    if (y1 - y0 >= 8) out.emplace_back(d, json::array({r[0].get<int>(), y0, r[2].get<int>(), y1}));
  }
  return out;
}

}  // namespace

// Difference lanes. Pinned, then every op made dearer (dispatch 5 -> 40 us) and two of the
// eight microbatches dropped: under each device, its lane counts the ops that start later or
// earlier, run longer or shorter, are gone or new, as the two saved plans simulated here give
// them, and draws them red (later, longer) and magenta (gone) in the screenshot. Edited and
// undone back to the pinned plan, the lanes are drawn and empty: "no difference", no red,
// green or magenta pixel in them.
TEST(GuiWindow, DifferenceLanesShowWhereTheRunsDiffer) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path dir = STRETTO_GUI_SHOTS;
  fs::create_directories(dir);
  const fs::path base = dir / "difflanes_base.json", now = dir / "difflanes_now.json",
                 shot = dir / "difflanes.png", same_shot = dir / "difflanes_same.png";
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b_builder.json";
  auto coloured = [](const Image& img, const json& r) {
    return std::array<size_t, 3>{img.count(r, 240, 60, 60, 8), img.count(r, 60, 200, 90, 8), img.count(r, 210, 80, 230, 8)};
  };

  // The control: the pinned plan again (an edit undone).
  const json same = run_gui(plan, "wait\npin\nset /costmodel/dispatch_us 40\nwait\nundo\nwait\nkey L\nframes 2\n",
                            same_shot, "difflanes_same");
  ASSERT_TRUE(same.contains("differences")) << same.dump(2);
  ASSERT_EQ(same["differences"].size(), 8u);
  for (const auto& d : same["differences"]) {
    for (const char* k : {"later", "earlier", "longer", "shorter", "gone", "new"}) EXPECT_EQ(d[k].get<int>(), 0) << d.dump();
  }
  const auto same_lanes = diff_lanes(same);
  ASSERT_GE(same_lanes.size(), 4u) << same["widgets"].dump();
  EXPECT_GE(same["view"]["diff_lanes_drawn"].get<size_t>(), same_lanes.size());  // some partly on screen
  EXPECT_EQ(std::count(same["view"]["labels"].begin(), same["view"]["labels"].end(), json("no difference")),
            same["view"]["diff_lanes_drawn"].get<long>());
  Image si(same_shot.string());
  for (const auto& [d, r] : same_lanes) {
    SCOPED_TRACE("device " + std::to_string(d) + " (unchanged)");
    EXPECT_GT(si.count(r, 46, 34, 56, 4), 1000u);  // the lane's background: it is drawn
    EXPECT_EQ(coloured(si, r), (std::array<size_t, 3>{0, 0, 0}));
  }

  // The edit.
  const json st = run_gui(plan,
                          "wait\nsave " + base.string() + "\npin\nset /costmodel/dispatch_us 40\nwait\n"
                          "set /schedule/microbatches 6\nwait\nsave " + now.string() + "\nkey L\nframes 2\n",
                          shot, "difflanes");
  ASSERT_TRUE(st.contains("differences")) << st.dump(2);
  const auto want = expected_differences(base, now);
  ASSERT_EQ(want.size(), 8u);
  ASSERT_EQ(st["differences"].size(), 8u);
  for (const auto& d : st["differences"]) {
    const int dev = d["device"].get<int>();
    SCOPED_TRACE("device " + std::to_string(dev));
    ASSERT_TRUE(want.count(dev));
    for (const char* k : {"later", "earlier", "longer", "shorter", "gone", "new"})
      EXPECT_EQ(d[k].get<int>(), want.at(dev)[k].get<int>()) << k;
    EXPECT_EQ(d["gone"].get<int>(), 4) << "MB6 and MB7, forward and backward";
    EXPECT_GT(d["later"].get<int>() + d["longer"].get<int>(), 0);
  }
  const auto lanes = diff_lanes(st);
  ASSERT_GE(lanes.size(), 4u) << st["widgets"].dump();
  EXPECT_GE(st["view"]["diff_lanes_drawn"].get<size_t>(), lanes.size());
  Image img(shot.string());
  for (const auto& [d, r] : lanes) {
    SCOPED_TRACE("device " + std::to_string(d));
    const json& w = want.at(d);
    const auto c = coloured(img, r);
    EXPECT_GT(c[0], 50u) << "red: later starts, longer runs";
    EXPECT_GT(c[2], 50u) << "magenta: the gone microbatches";
    if (w["earlier"].get<int>() + w["shorter"].get<int>() == 0) {
      EXPECT_EQ(c[1], 0u) << "green with nothing earlier or shorter";
    }
  }
}

// Every picture README.md shows is one scripts/readme_images.sh draws, and the script still
// runs: it writes each of them (the window's PNGs under Xvfb, the sweep's SVG chart) into a
// folder of the build, and nothing else. What the pictures show is checked by the tests above
// (the same GUI scripts) and SweepCli.PlotDrawsEveryPointAndTheParetoFront, not pixel by
// pixel against the committed files.
TEST(ReadmePictures, TheScriptRedrawsEveryPictureTheReadmeShows) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not installed";
  const fs::path src = STRETTO_SOURCE_DIR;
  std::ifstream rf(src / "README.md");
  const std::string readme((std::istreambuf_iterator<char>(rf)), std::istreambuf_iterator<char>());
  std::set<std::string> shown;
  static const std::regex image(R"re(!\[[^\]]*\]\(docs/images/([^)\s]+)\))re");
  for (std::sregex_iterator it(readme.begin(), readme.end(), image), end; it != end; ++it) shown.insert((*it)[1]);
  ASSERT_GE(shown.size(), 3u) << "one picture per use: the GUI, sweeps, validation";
  const fs::path out = fs::path(STRETTO_GUI_SHOTS) / "readme_images";
  fs::remove_all(out);
  int rc = 0;
  const std::string log =
      run("bash " + (src / "scripts" / "readme_images.sh").string() + " " + STRETTO_BINARY + " " + out.string(), &rc);
  ASSERT_EQ(rc, 0) << log;
  std::set<std::string> written;
  for (const auto& e : fs::directory_iterator(out)) written.insert(e.path().filename().string());
  EXPECT_EQ(written, shown) << log;
  for (const std::string& name : shown) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(fs::exists(src / "docs" / "images" / name)) << "not committed";
    const fs::path p = out / name;
    if (p.extension() == ".png") {
      Image img(p.string());
      EXPECT_EQ(img.w, 1600);
      EXPECT_EQ(img.h, 900);
    } else {
      std::ifstream f(p);
      const std::string svg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
      size_t dots = 0;
      for (size_t at = svg.find("<circle class=\""); at != std::string::npos; at = svg.find("<circle class=\"", at + 1)) ++dots;
      EXPECT_GT(dots, 100u);
    }
  }
}
