// Issue 14, the newcomer path: the layout shorthand (equal to the hand-written plan), builder
// errors at the builder call, DualPipe with data parallelism refused, did-you-mean for
// commands, plans on stdin, --help examples, describe, --timeline, warnings,
// --fail-over-capacity, the new output fields, build-schedule --layout and --show's legend,
// and a torch CSV imported into a whole plan and simulated.
#include <gtest/gtest.h>

#include "run_stretto.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

using stretto_test::Result;
using stretto_test::slurp;
using stretto_test::tmpdir;

Result sh(const std::string& args, const std::string& redirect = "") {
  const fs::path err = tmpdir() / "stderr.txt";
  const std::string cmd =
      std::string(STRETTO_BINARY) + " " + args + " 2>" + err.string() + " " + redirect;
  return stretto_test::run_shell(cmd, err);
}

using stretto_test::example;

fs::path write(const std::string& name, const Json& j) {
  return stretto_test::write_file(name, j.dump(2));
}

Json sim_json(const std::string& plan) {
  const Result r = sh("simulate " + plan + " --format json");
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? Json::parse(r.out) : Json::object();
}

}  // namespace

TEST(Newcomer, EveryBuilderExampleSimulates) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(example("builders"))) {
    SCOPED_TRACE(e.path().string());
    const Json r = sim_json(e.path().string());
    EXPECT_GT(r.value("step_time_ms", 0.0), 0.0);
    ++n;
  }
  EXPECT_EQ(n, 9u);  // one per family
}

TEST(Newcomer, LayoutEqualsTheHandWrittenMegatronPlan) {
  // TP8 x PP2 x DP2, 1F1B, ZeRO-1, SP: the layout shorthand and the plan written by hand
  // (places, replicates, shard_tensor groups and orders) simulate to the same step.
  const Json a = sim_json(example("layout_gpt13b_tp8_pp2_dp2_1f1b.json"));
  const Json b = sim_json(example("megatron_gpt13b_tp8_pp2_dp2.json"));
  ASSERT_TRUE(a.contains("step_time_ms") && b.contains("step_time_ms"));
  EXPECT_EQ(a["step_time_ms"], b["step_time_ms"]);
  EXPECT_EQ(a["devices"].size(), b["devices"].size());
  for (size_t d = 0; d < a["devices"].size(); ++d)
    EXPECT_EQ(a["devices"][d]["peak_memory_bytes"], b["devices"][d]["peak_memory_bytes"]) << d;
}

TEST(Newcomer, SixteenGpuInterleavedPlanFromTheReadme) {
  const Json r = sim_json(example("layout_llama7b_pp4_dp4_interleaved.json"));
  ASSERT_EQ(r["devices"].size(), 16u);
  for (const auto& d : r["devices"]) EXPECT_GT(d["busy_ms"].get<double>(), 0.0);
  EXPECT_GT(r["pipeline_bubble_ratio"].get<double>(), 0.0);
  EXPECT_LE(r["pipeline_bubble_ratio"].get<double>(), r["bubble_ratio"].get<double>());
  EXPECT_NEAR(r["exposed_comm_ms_per_device"].get<double>(),
              r["exposed_comm_ms"].get<double>() / 16, 1e-9);
}

TEST(Newcomer, BuilderErrorsNameTheCauseAtTheCall) {
  Json plan = Json::parse(slurp(example("layout_llama7b_pp4_dp4_interleaved.json")));
  plan["model"]["pp_regions"] = 4;
  const fs::path p = write("regions.json", plan);
  const Result r = sh("compile " + p.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("interleaved-1f1b with 4 ranks x 2 stages per rank needs pp_regions = 8; "
                       "the model has 4"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("regions.json:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(/schedule)"), std::string::npos) << r.err;

  plan = Json::parse(slurp(example("builders/dualpipe.json")));
  plan["schedule"]["layout"]["dp"] = 2;
  plan["cluster"]["devices_per_node"] = 8;
  const Result d = sh("compile " + write("dualpipe_dp.json", plan).string());
  EXPECT_EQ(d.code, 2);
  EXPECT_NE(d.err.find("dualpipe with data parallelism (dp = 2) is not supported"),
            std::string::npos)
      << d.err;
  EXPECT_NE(d.err.find("use dualpipev"), std::string::npos);

  plan["schedule"]["layout"] = {{"pp", 4}, {"dp", 8}};
  const Result big = sh("compile " + write("too_few.json", plan).string());
  EXPECT_NE(big.err.find("needs 32 devices; the cluster has 8"), std::string::npos) << big.err;
  plan["schedule"]["layout"] = {{"pp", 4}, {"zeros", 1}};
  const Result typo = sh("compile " + write("typo.json", plan).string());
  EXPECT_NE(typo.err.find("did you mean 'zero'?"), std::string::npos) << typo.err;
}

TEST(Newcomer, CommandLineHelpers) {
  const Result typo = sh("simulat plan.json");
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.err.find("did you mean 'simulate'?"), std::string::npos) << typo.err;
  const Result sub = sh("import torch-cvs x.csv");
  EXPECT_NE(sub.err.find("did you mean 'import torch-csv'?"), std::string::npos) << sub.err;
  EXPECT_NE(sh("--help").out.find("Examples:"), std::string::npos);
  EXPECT_NE(sh("simulate --help").out.find("--timeline"), std::string::npos);
  const Result in = sh("compile - --format json", "< " + example("gpt_pp4_dp2_1f1b.json"));
  EXPECT_EQ(in.code, 0) << in.err;
  const Result d = sh("describe " + example("gpt_pp4_dp2_1f1b.json"));
  EXPECT_EQ(d.code, 0) << d.err;
  for (const char* s : {"intra-node link", "450 GB/s", "989.4 TFLOP/s", "80 GiB", "not modelled",
                        "GEMM", "estimate"})
    EXPECT_NE(d.out.find(s), std::string::npos) << s << "\n" << d.out;
}

TEST(Newcomer, TimelineWarningsAndCapacity) {
  const Result t =
      sh("simulate " + example("gpt_pp4_dp2_1f1b.json") +
         " --format table --timeline --timeline-width 60");
  EXPECT_EQ(t.code, 0) << t.err;
  for (int d = 0; d < 8; ++d)
    EXPECT_NE(t.out.find("device " + std::to_string(d) + " |"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("legend:"), std::string::npos);
  EXPECT_NE(t.out.find("F forward"), std::string::npos);
  EXPECT_NE(t.out.find("ms"), std::string::npos);

  Json plan = Json::parse(slurp(example("gpt_pp4_dp2_1f1b.json")));
  plan["cluster"]["devices_per_node"] = 12;
  const Result w = sh("simulate " + write("unused.json", plan).string() + " --format json");
  EXPECT_EQ(w.code, 0);
  EXPECT_NE(w.err.find("never uses 4 of the cluster's 12 devices (8-11)"), std::string::npos)
      << w.err;
  EXPECT_NE(w.err.find("imbalanced"), std::string::npos) << w.err;  // embedding / head stages

  plan["cluster"]["memory_GiB"] = 1;
  const fs::path small = write("small_mem.json", plan);
  EXPECT_EQ(sh("simulate " + small.string() + " --format json").code, 0);
  const Result cap = sh("simulate " + small.string() + " --format json --fail-over-capacity");
  EXPECT_EQ(cap.code, 3) << cap.err;
  EXPECT_NE(cap.err.find("exceeds its 1 GiB"), std::string::npos) << cap.err;
}

TEST(Newcomer, LargestBubbleMarkOnlyWhereThereIsOne) {
  // One device, fixed costs (no dispatch): it never idles, so no device is marked.
  const Json plan = Json::parse(R"({
    "model": {"family": "synthetic", "layers": 2, "flops": 1e9},
    "cluster": {"preset": "h100-sxm", "nodes": 1, "devices_per_node": 1},
    "costmodel": {"kind": "fixed", "F": 1, "B": 2},
    "schedule": [{"op": "place", "filter": {}, "devices": [0]},
                 {"op": "split", "filter": {}, "dim_name": "MB", "num_microbatches": 2}]})");
  const Result r = sh("simulate " + write("one.json", plan).string() + " --format table");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("largest bubble"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pipeline bubble"), std::string::npos) << r.out;
  const Result two = sh("simulate " + example("gpt_pp4_dp2_1f1b.json") + " --format table");
  EXPECT_NE(two.out.find("\u25c0 largest bubble"), std::string::npos) << two.out;
}

TEST(Newcomer, BuildScheduleLayoutShowAndCsvToPlan) {
  const Result show = sh("build-schedule --schedule zb-h1 --ranks 4 --microbatches 8 --show");
  EXPECT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("legend:"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("W backward for weights"), std::string::npos);
  const Result l2 = sh("build-schedule --schedule interleaved-1f1b --layout pp=4,dp=2,tp=2 "
                    "--microbatches 8");
  ASSERT_EQ(l2.code, 0) << l2.err;
  const Json ds = Json::parse(l2.out);
  // Stage 4 is the second chunk of rank 0: device 0 and its DP peer 2 (tp 2: 0 + 2 * dp).
  bool found = false;
  for (const auto& d : ds)
    if (d["op"] == "place" && d["filter"] == Json{{"PP", 4}}) {
      EXPECT_EQ(d["devices"], Json::array({0, 2}));
      found = true;
    }
  EXPECT_TRUE(found) << l2.out;

  // torch CSV -> whole plan -> simulate --timeline.
  const fs::path plan = write("base_plan.json", Json::parse(slurp(example("builders/1f1b.json"))));
  const fs::path csv = tmpdir() / "s.csv";
  ASSERT_EQ(sh("export torch-csv " + plan.string() + " -o " + csv.string()).code, 0);
  Json base = Json::parse(slurp(plan));
  base["schedule"] = Json::parse(
      sh("build-schedule --schedule 1f1b --layout pp=4,dp=2 --microbatches 8").out);
  Json placement = Json::array();
  for (const auto& d : base["schedule"])
    if (d["op"] == "place" || d["op"] == "replicate") placement.push_back(d);
  base["schedule"] = placement;
  const fs::path bp = write("placed.json", base);
  const fs::path imported = tmpdir() / "imported.json";
  const Result imp = sh("import torch-csv " + csv.string() + " --base " + bp.string() + " -o " +
                     imported.string());
  ASSERT_EQ(imp.code, 0) << imp.err;
  // With JSON on stdout the drawing goes to stderr.
  const Result t = sh("simulate " + imported.string() + " --timeline --timeline-width 50");
  EXPECT_TRUE(Json::accept(t.out)) << t.out;
  EXPECT_NE(t.err.find("device 7 |"), std::string::npos) << t.err;
  EXPECT_EQ(t.code, 0) << t.err;
}

// Outputs sized for people: the critical path as a summary (every op only with =full), the
// trace's size said first and a .gz path compressed, the optimizer step drawn apart.
TEST(Newcomer, OutputsSizedForPeople) {
  const std::string plan = example("layout_llama7b_pp4_dp4_interleaved.json");
  const Result sum = sh("simulate " + plan + " --format table --critical-path");
  ASSERT_EQ(sum.code, 0) << sum.err;
  const auto lines = [](const std::string& s) { return std::count(s.begin(), s.end(), '\n'); };
  const Result full = sh("simulate " + plan + " --format table --critical-path=full");
  ASSERT_EQ(full.code, 0) << full.err;
  EXPECT_LT(lines(sum.out), 110) << sum.out;
  EXPECT_GT(lines(full.out), 10 * lines(sum.out));
  for (const char* s : {"what it waited on", "time by stage x pass x kind", "20 longest segments",
                        "--critical-path=full"})
    EXPECT_NE(sum.out.find(s), std::string::npos) << s << "\n" << sum.out;
  EXPECT_EQ(sh("simulate " + plan + " --critical-path=most").code, 2);
  const Result js = sh("simulate " + plan + " --format json --critical-path");
  const Json j = Json::parse(js.out);
  EXPECT_TRUE(j.contains("critical_path_summary"));
  EXPECT_FALSE(j.contains("critical_path"));

  // The trace: its size on stderr first; gzip when the path ends in .gz.
  const fs::path plain = tmpdir() / "t.json", gz = tmpdir() / "t.json.gz";
  const Result tp = sh("simulate " + plan + " --format json --trace " + plain.string());
  ASSERT_EQ(tp.code, 0) << tp.err;
  EXPECT_NE(tp.err.find("events, about"), std::string::npos) << tp.err;
  const Result tg = sh("simulate " + plan + " --format json --trace " + gz.string());
  ASSERT_EQ(tg.code, 0) << tg.err;
  EXPECT_NE(tg.err.find("before gzip compression"), std::string::npos) << tg.err;
  const std::string head = slurp(gz).substr(0, 2);
  EXPECT_EQ(head, std::string("\x1f\x8b"));  // the gzip magic
  EXPECT_LT(fs::file_size(gz) * 5, fs::file_size(plain));
  const Result unz = sh("--version", "; gzip -dc " + gz.string() + " | cmp - " + plain.string() +
                                         " && echo SAME");
  EXPECT_NE(unz.out.find("SAME"), std::string::npos) << unz.out << unz.err;

  // The optimizer step is drawn as O and named in the legend.
  Json opt = Json::parse(slurp(example("gpt_pp4_dp2_1f1b.json")));
  opt["optimizer"] = {{"kind", "adam"}};
  const Result t = sh("simulate " + write("with_adam.json", opt).string() +
                      " --format table --timeline");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("O optimizer step"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("|"), std::string::npos);
  bool drawn = false;  // an O inside a device row (the step ends with it: the last band)
  std::istringstream rows(t.out);
  for (std::string l; std::getline(rows, l);)
    if (l.find("device ") != std::string::npos && l.find(" |") != std::string::npos &&
        l.substr(l.find(" |")).find('O') != std::string::npos)
      drawn = true;
  EXPECT_TRUE(drawn) << t.out;
  EXPECT_NE(t.out.find("half the median pass"), std::string::npos) << t.out;
}

// A trace over 100 MiB is announced with its size and the ways to write less (--trace-devices,
// --trace-window) before it is written; a small one gets its size only.
TEST(Newcomer, ALargeTraceIsAnnouncedWithTheWaysToWriteLess) {
  Json big = Json::parse(slurp(example("gpt_pp4_dp2_1f1b_builder.json")));
  big["schedule"]["microbatches"] = 400;  // ~750,000 events, ~109 MiB of JSON
  const fs::path gz = tmpdir() / "big.json.gz";
  const Result r = sh("simulate " + write("mb400.json", big).string() + " --format json --trace " +
                      gz.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("before gzip compression; --trace-devices 0-7 (some devices) or "
                       "--trace-window START:END (ms) write less"),
            std::string::npos)
      << r.err;
  EXPECT_LT(fs::file_size(gz), 30u << 20);
  fs::remove(gz);
  const fs::path small = tmpdir() / "small.json";
  const Result s = sh("simulate " + example("gpt_pp4_dp2_1f1b.json") + " --format json --trace " +
                      small.string());
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.err.find("events, about"), std::string::npos) << s.err;
  EXPECT_EQ(s.err.find("write less"), std::string::npos) << s.err;
}
