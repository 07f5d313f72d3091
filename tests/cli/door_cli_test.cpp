// One plan, one answer, through the real binaries (docs/semantics.md "Doors"): what `search`
// prints is what `simulate` gives for the plan it emits; the GUI's --dump-state `parameters` are
// `describe --format json`'s resolved values; `replay` and `compare` report a step under
// `simulate --format json`'s field names and units (ms, bytes), exposed communication per
// device included. tests/explore/door_consistency_test.cpp checks the library side.
#include <gtest/gtest.h>

#include "run_stretto.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

using namespace stretto_test;  // Result, run_shell, slurp, tmpdir, example, write_file

Result sh(const std::string& args) {
  const fs::path err = tmpdir() / "door_stderr.txt";
  return run_shell(std::string(STRETTO_BINARY) + " " + args + " 2>" + err.string(),
                                 err);
}

Json json_of(const std::string& args) {
  const Result r = sh(args);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
  return r.code == 0 ? Json::parse(r.out) : Json::object();
}


// describe --format json's resolved values: {field: value}.
Json described_values(const std::string& plan) {
  const Json d = json_of("describe " + plan + " --format json");
  Json v = Json::object();
  for (const auto& [k, f] : d["fields"].items()) v[k] = f["value"];
  return v;
}

// Layout plans small enough to search in a test: the Llama example (PP4 x DP4 on 16 devices) and
// the same model shrunk to TP2 x PP2 x DP2 with sequence parallelism on 8.
std::vector<fs::path> layout_plans() {
  std::vector<fs::path> out = {example("layout_llama7b_pp4_dp4_interleaved.json")};
  Json p = Json::parse(slurp(out[0]));
  p["model"]["layers"] = 8;
  p["model"]["pp_regions"] = 2;
  p["cluster"]["nodes"] = 1;
  p["schedule"] = {{"builder", "1f1b"},
                   {"microbatches", 8},
                   {"layout", {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"sequence_parallel", true}}}};
  out.push_back(write_file("door_layout_tp2_pp2_dp2_sp.json", p.dump(2)));
  return out;
}

// `simulate --format json`'s fields that depend on how the step was run, not on the plan: the
// plan's name, wall-clock time, events and replica folding (search simulates folded), and
// search's memory cap.
Json without_run_fields(Json j) {
  for (const char* k : {"plan", "sim_wall_ms", "events", "folded_replicas", "memory_cap_GiB"})
    j.erase(k);
  return j;
}

}  // namespace

// search's best plan, as printed (table and JSON), is what `simulate` gives for the plan
// `--emit` writes, field for field; and that plan trains the base's global batch.
TEST(DoorCli, SearchPrintsWhatItsEmittedPlanSimulatesTo) {
  for (const fs::path& base : layout_plans()) {
    SCOPED_TRACE(base.string());
    const int devices = described_values(base.string())["cluster_devices"].get<int>();
    const fs::path emitted = tmpdir() / ("door_emit_" + base.filename().string());
    const std::string args = "search " + base.string() + " --devices " +
                             std::to_string(devices) + " --budget 30 -j 1";
    const Json s = json_of(args + " --emit " + emitted.string() + " --format json");
    ASSERT_TRUE(s.contains("best") && s["best"].is_object()) << s.dump().substr(0, 400);
    const Json sim = json_of("simulate " + emitted.string() + " --format json");
    EXPECT_EQ(without_run_fields(s["best"]["metrics"]), without_run_fields(sim));
    // The table says the same step time and peak memory.
    const Result table = sh(args + " --format table");
    ASSERT_EQ(table.code, 0) << table.err;
    const std::smatch m = [&] {
      std::smatch mm;
      std::regex_search(table.out, mm, std::regex(R"(step time ([0-9.]+) ms, peak memory ([0-9.]+) GiB)"));
      return mm;
    }();
    ASSERT_EQ(m.size(), 3u) << table.out;
    char want[64];
    std::snprintf(want, sizeof want, "%.3f", sim["step_time_ms"].get<double>());
    EXPECT_EQ(m[1].str(), want);
    std::snprintf(want, sizeof want, "%.2f",
                  static_cast<double>(sim["peak_memory_bytes"].get<int64_t>()) / (1 << 30));
    EXPECT_EQ(m[2].str(), want);
    // The same batch: search's, the base's and the emitted plan's global batch agree.
    const int64_t gbs = described_values(base.string())["global_batch"].get<int64_t>();
    EXPECT_EQ(s["global_batch"].get<int64_t>(), gbs);
    EXPECT_EQ(described_values(emitted.string())["global_batch"].get<int64_t>(), gbs);
  }
}

// What the GUI's editor shows (--dump-state's `parameters`, keyed by plan field name) is
// describe's resolved values, for a layout plan as opened and after an edit through the UI.
TEST(DoorCli, GuiParametersAreDescribesResolvedValues) {
  if (std::system("command -v xvfb-run >/dev/null 2>&1") != 0) GTEST_SKIP() << "no xvfb-run";
  const fs::path plan = layout_plans()[1], edited = tmpdir() / "door_gui_edited.json";
  const fs::path script = tmpdir() / "door_gui.script", state = tmpdir() / "door_gui_state.json",
                 state_edited = tmpdir() / "door_gui_state_edited.json";
  auto gui = [&](const std::string& script_text, const fs::path& dump) {
    std::ofstream(script) << script_text;
    const std::string cmd = std::string(STRETTO_UNDER_XVFB) + " --screen 1280x800x24 " +
                            std::string(STRETTO_BINARY) + " gui " + plan.string() + " --script " +
                            script.string() + " --frames 2 --size 1280x800 --dump-state " +
                            dump.string();
    const Result r =
        run_shell(cmd + " 2>" + (tmpdir() / "gui_err.txt").string(), tmpdir() / "gui_err.txt");
    if (r.code == 0) return true;
    ADD_FAILURE() << r.err;
    return false;
  };
  ASSERT_TRUE(gui("wait\nframes 2\n", state));
  const Json st = Json::parse(slurp(state));
  ASSERT_FALSE(st["failed"].get<bool>()) << st["diagnostics"].dump();
  EXPECT_EQ(st["parameters"], described_values(plan.string()));
  EXPECT_EQ(st["parameters"]["tp"], 2);
  ASSERT_TRUE(gui("wait\nset /schedule/microbatches 4\nwait\nframes 2\nsave " + edited.string() +
                      "\n",
                  state_edited));
  const Json se = Json::parse(slurp(state_edited));
  EXPECT_EQ(se["parameters"]["microbatches"], 4);
  EXPECT_EQ(se["parameters"], described_values(edited.string()));
}

// The warnings `simulate` prints on stderr are the ones the GUI's Diagnostics tab lists
// (--dump-state), message and hint, with the library's code (sim/warnings.h), the one Python's
// StrettoWarning carries (tests/python/test_warnings.py compares them with stretto.simulate's).
TEST(DoorCli, SimulateAndTheGuiShowTheSameWarnings) {
  if (std::system("command -v xvfb-run >/dev/null 2>&1") != 0) GTEST_SKIP() << "no xvfb-run";
  const std::string data = STRETTO_TEST_DATA;
  const std::vector<std::pair<std::string, std::vector<std::string>>> plans = {
      {data + "/warnings/unused_devices.json", {"unused-devices", "compute-imbalance"}},
      {data + "/traces/options/plan.json", {"low-table-coverage"}},
      {example("layout_llama7b_pp4_dp4_interleaved.json"), {}}};
  for (const auto& [plan, codes] : plans) {
    SCOPED_TRACE(plan);
    const Result cli = sh("simulate " + plan + " --format json");
    ASSERT_EQ(cli.code, 0) << cli.err;
    std::vector<std::pair<std::string, std::string>> printed, shown;
    const std::regex warning(R"(warning: (.*)\n  hint: (.*)\n)");
    for (auto it = std::sregex_iterator(cli.err.begin(), cli.err.end(), warning);
         it != std::sregex_iterator(); ++it)
      printed.emplace_back((*it)[1].str(), (*it)[2].str());
    const fs::path script = tmpdir() / "door_warn.script", state = tmpdir() / "door_warn.json";
    std::ofstream(script) << "wait\nclick tab diagnostics\nframes 2\n";
    const fs::path err = tmpdir() / "door_warn_err.txt";
    const Result gui = run_shell(std::string(STRETTO_UNDER_XVFB) + " --screen 1280x800x24 " +
                                     std::string(STRETTO_BINARY) + " gui " + plan + " --script " +
                                     script.string() + " --frames 2 --size 1280x800 --dump-state " +
                                     state.string() + " 2>" + err.string(),
                                 err);
    ASSERT_EQ(gui.code, 0) << gui.err;
    const Json st = Json::parse(slurp(state));
    ASSERT_FALSE(st["failed"].get<bool>()) << st["diagnostics"].dump();
    std::vector<std::string> shown_codes;
    for (const Json& d : st["diagnostics"])
      if (d["severity"] == "warning") {
        shown.emplace_back(d["message"], d["hint"]);
        shown_codes.push_back(d.value("code", ""));
      }
    EXPECT_EQ(shown, printed);
    EXPECT_EQ(shown_codes, codes);
    // ... and its Numbers > Summary shows simulate's exposed communication per device (ms).
    EXPECT_EQ(st["exposed_comm_ms_per_device"], Json::parse(cli.out)["exposed_comm_ms_per_device"]);
    EXPECT_EQ(printed.empty(), plan.find("layout_llama") != std::string::npos) << cli.err;
  }
}

// A GUI edit the plan cannot take (a typed microbatches of 0, a layout ZeRO level of 7) is
// refused with the parser's located diagnostic, the words `simulate` gives for that plan,
// and the plan keeps what was typed (it is not clamped into range behind the user's back).
TEST(DoorCli, AGuiEditThePlanCannotTakeIsRefusedWithSimulatesWords) {
  if (std::system("command -v xvfb-run >/dev/null 2>&1") != 0) GTEST_SKIP() << "no xvfb-run";
  const fs::path base = example("layout_llama7b_pp4_dp4_interleaved.json");
  struct Edit {
    std::string action, pointer;
    Json value;
  };
  for (const Edit& e : std::vector<Edit>{{"type microbatches 0", "/schedule/microbatches", 0},
                                         {"set /schedule/layout/zero 7", "/schedule/layout/zero", 7}}) {
    SCOPED_TRACE(e.action);
    Json p = Json::parse(slurp(base));
    p[Json::json_pointer(e.pointer)] = e.value;
    const fs::path edited = write_file("door_gui_refused.json", p.dump(2));
    const Result cli = sh("simulate " + edited.string());
    ASSERT_EQ(cli.code, 2);
    const fs::path script = tmpdir() / "door_refuse.script", state = tmpdir() / "door_refuse.json";
    std::ofstream(script) << "wait\n" << e.action << "\nwait\nframes 2\n";
    const fs::path err = tmpdir() / "door_refuse_err.txt";
    const Result gui = run_shell(std::string(STRETTO_UNDER_XVFB) + " --screen 1280x800x24 " +
                                     std::string(STRETTO_BINARY) + " gui " + base.string() +
                                     " --script " + script.string() +
                                     " --frames 2 --size 1280x800 --dump-state " + state.string() +
                                     " 2>" + err.string(),
                                 err);
    ASSERT_EQ(gui.code, 0) << gui.err;
    const Json st = Json::parse(slurp(state));
    EXPECT_TRUE(st["failed"].get<bool>()) << st["diagnostics"].dump();
    ASSERT_FALSE(st["diagnostics"].empty());
    const Json& d = st["diagnostics"][0];
    const std::string message = d["message"], location = d["location"];
    EXPECT_NE(cli.err.find("error: " + message), std::string::npos) << cli.err << "\n" << message;
    EXPECT_NE(location.find("(" + e.pointer + ")"), std::string::npos) << location;
  }
}

// replay --format json has simulate's field names, in simulate's units: per step and per device
// (exposed communication per device included), and its `predicted` parts are simulate's values.
TEST(DoorCli, ReplayReportsAStepUnderSimulatesNamesAndUnits) {
  if (!fs::exists(fs::path(STRETTO_BINARY).parent_path() / "stretto-backend"))
    GTEST_SKIP() << "built without the LibTorch backend";
  const std::string plan = std::string(STRETTO_TEST_DATA) + "/loop/dp2_tiny.json";
  const Json sim = json_of("simulate " + plan + " --format json");
  const Result rr = sh("replay " + plan + " --device cpu --iterations 2 --warmup 1 --format json");
  ASSERT_EQ(rr.code, 0) << rr.err;
  const Json rep = Json::parse(rr.out);
  for (const char* k : {"plan", "step_time_ms", "bubble_ratio", "exposed_comm_ms",
                        "exposed_comm_ms_per_device", "devices"}) {
    ASSERT_TRUE(rep.contains(k)) << k;
    EXPECT_EQ(rep[k].type(), sim[k].type()) << k;
  }
  ASSERT_EQ(rep["devices"].size(), sim["devices"].size());
  const double step = rep["step_time_ms"].get<double>();
  double exposed = 0;
  for (size_t i = 0; i < rep["devices"].size(); ++i) {
    const Json& d = rep["devices"][i];
    const Json& s = sim["devices"][i];
    for (const char* k : {"id", "busy_ms", "bubble_ms", "bubble_ratio", "exposed_comm_ms",
                          "comm_ms", "peak_memory_bytes", "memory_breakdown"}) {
      ASSERT_TRUE(d.contains(k)) << k;
      EXPECT_EQ(d[k].type() == Json::value_t::number_unsigned ? Json::value_t::number_integer
                                                               : d[k].type(),
                s[k].type() == Json::value_t::number_unsigned ? Json::value_t::number_integer
                                                               : s[k].type())
          << k;
    }
    std::vector<std::string> cats, sim_cats;
    for (const auto& [c, v] : d["memory_breakdown"].items()) cats.push_back(c);
    for (const auto& [c, v] : s["memory_breakdown"].items()) sim_cats.push_back(c);
    EXPECT_EQ(cats, sim_cats);
    // Units as simulate's: ms that add up to the step (busy + bubble = step, as simulate
    // defines bubble), exposed communication within the device's communication time.
    EXPECT_NEAR(d["busy_ms"].get<double>() + d["bubble_ms"].get<double>(), step, 1e-3 * step);
    EXPECT_LE(d["exposed_comm_ms"].get<double>(), d["comm_ms"].get<double>() + 1e-9);
    EXPECT_LE(d["exposed_comm_ms"].get<double>(), step);
    exposed += d["exposed_comm_ms"].get<double>();
    // The prediction shown next to it is simulate's, under the same names.
    for (const char* k : {"busy_ms", "bubble_ms", "bubble_ratio", "exposed_comm_ms",
                          "peak_memory_bytes"})
      EXPECT_EQ(d["predicted"][k], s[k]) << k;
  }
  EXPECT_NEAR(rep["exposed_comm_ms"].get<double>(), exposed, 1e-6);
  EXPECT_NEAR(rep["exposed_comm_ms_per_device"].get<double>(),
              exposed / static_cast<double>(rep["devices"].size()), 1e-6);
  for (const char* k : {"step_time_ms", "bubble_ratio", "exposed_comm_ms",
                        "exposed_comm_ms_per_device"})
    EXPECT_EQ(rep["predicted"][k], sim[k]) << k;
}

// compare's JSON reports each side under simulate's names and units: per step (exposed
// communication summed and per device) and per device, equal to simulate's for a plan.
TEST(DoorCli, CompareReportsSimulatesPerDeviceExposedCommunication) {
  const std::string a = example("cpu_gpt_pp2_1f1b.json"), b = example("cpu_gpt_pp2_dp2_zero1.json");
  const Json c = json_of("compare " + a + " " + b + " --format json");
  for (const auto& [side, plan] : {std::pair{"a", a}, std::pair{"b", b}}) {
    SCOPED_TRACE(side);
    const Json sim = json_of("simulate " + plan + " --format json");
    for (const char* k : {"step_time_ms", "bubble_ratio", "exposed_comm_ms",
                          "exposed_comm_ms_per_device"})
      EXPECT_NEAR(c[side][k].get<double>(), sim[k].get<double>(), 1e-9) << k;
    size_t n = 0;
    for (const Json& d : c["devices"]) {
      if (!d.contains(side)) continue;
      const Json& s = sim["devices"][d["id"].get<size_t>()];
      for (const char* k : {"busy_ms", "bubble_ms", "exposed_comm_ms"})
        EXPECT_NEAR(d[side][k].get<double>(), s[k].get<double>(), 1e-9) << k;
      EXPECT_EQ(d[side]["peak_memory_bytes"], s["peak_memory_bytes"]);
      ++n;
    }
    EXPECT_EQ(n, sim["devices"].size());
  }
}

namespace {

// describe's text shows a resolved value as: numbers `{:g}`, strings bare ("-" when empty), the
// rest as compact JSON.
std::string described_text_value(const Json& v) {
  if (v.is_string()) return v.get<std::string>().empty() ? "-" : v.get<std::string>();
  if (v.is_number_float()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v.get<double>());
    return buf;
  }
  return v.dump();
}

// The "resolved values" section of describe's text: {name: {source, value text}}.
std::map<std::string, std::pair<std::string, std::string>> described_text_fields(
    const std::string& text) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  const size_t begin = text.find("\nresolved values");
  const size_t end = text.find("\nnot modelled");
  EXPECT_NE(begin, std::string::npos);
  EXPECT_NE(end, std::string::npos);
  if (begin == std::string::npos || end == std::string::npos) return out;
  std::istringstream in(text.substr(begin, end - begin));
  std::string line, source;
  std::getline(in, line);  // (empty)
  std::getline(in, line);  // the heading
  while (std::getline(in, line)) {
    if (line.size() < 14) continue;
    const std::string label = line.substr(2, 12);
    if (label.find_first_not_of(' ') != std::string::npos)
      source = label.substr(0, label.find(' '));
    std::string rest = line.substr(14);
    if (!rest.empty() && rest.back() == ',') rest.pop_back();
    size_t pos = 0;
    while (pos < rest.size()) {  // "name value, name value"; no value holds ", "
      size_t next = rest.find(", ", pos);
      if (next == std::string::npos) next = rest.size();
      const std::string item = rest.substr(pos, next - pos);
      const size_t sp = item.find(' ');
      if (sp != std::string::npos) out[item.substr(0, sp)] = {source, item.substr(sp + 1)};
      pos = next + 2;
    }
  }
  return out;
}

}  // namespace

// describe's text shows every resolved value of `describe --format json`, with the same value
// and source, and its parallelism and batch lines agree with them: on every example plan and the
// small layout plans (TP2 x PP2 x DP2 with sequence parallelism among them).
TEST(DoorCli, DescribeTextShowsTheResolvedValuesOfItsJson) {
  std::vector<fs::path> plans = layout_plans();
  for (const auto& e : fs::directory_iterator(fs::path(STRETTO_EXAMPLES)))
    if (e.path().extension() == ".json") plans.push_back(e.path());
  std::sort(plans.begin(), plans.end());
  ASSERT_GT(plans.size(), 10u);
  for (const fs::path& plan : plans) {
    SCOPED_TRACE(plan.string());
    const Result text = sh("describe " + plan.string());
    const Json json = json_of("describe " + plan.string() + " --format json");
    ASSERT_EQ(text.code, 0) << text.err;
    const auto shown = described_text_fields(text.out);
    ASSERT_EQ(shown.size(), json["fields"].size());
    for (const auto& [name, f] : json["fields"].items()) {
      ASSERT_TRUE(shown.count(name)) << name;
      EXPECT_EQ(shown.at(name).first, f["source"].get<std::string>()) << name;
      EXPECT_EQ(shown.at(name).second, described_text_value(f["value"])) << name;
    }
    const Json& v = json["fields"];
    const std::string parallelism = "tp " + v["tp"]["value"].dump() + " x pp " +
                                    v["stages"]["value"].dump() + " (" +
                                    v["ranks"]["value"].dump() + " rank";
    EXPECT_NE(text.out.find(parallelism), std::string::npos) << parallelism;
    const std::string batch = "x dp " + v["dp"]["value"].dump() + " = global batch " +
                              v["global_batch"]["value"].dump() + "; recompute " +
                              v["recompute"]["value"].get<std::string>();
    EXPECT_NE(text.out.find(batch), std::string::npos) << batch;
  }
}
