// Issue 14: inputs that crashed or exhausted Stretto. Each test runs the `stretto` binary as a
// user would, under a 4 GB address-space limit and a 120 s timeout, so that a regression fails
// the test instead of taking the machine down. STRETTO_TEST_BINARY=path runs them against
// another build (e.g. the release before the fixes, where each of them failed).
#include <gtest/gtest.h>

#include "run_stretto.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <set>
#include <string>

namespace fs = std::filesystem;

namespace {

using stretto_test::Result;
using stretto_test::slurp;
using stretto_test::tmpdir;

void put(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::string binary() {
  if (const char* b = std::getenv("STRETTO_TEST_BINARY")) return b;
  return STRETTO_BINARY;
}

// Runs `stretto ARGS` (ARGS are shell words); stderr is captured to a file.
Result sh(const std::string& args, const std::string& env = "", const std::string& redirect = "",
       int vmem_kb = 4000000) {
  const fs::path err = tmpdir() / "stderr.txt";
  const std::string cmd = "ulimit -v " + std::to_string(vmem_kb) + "; " + env + " timeout 120 " +
                          binary() + " " + args + " 2>" + err.string() + " " + redirect;
  return stretto_test::run_shell("/bin/bash -c '" + cmd + "'", err);
}

std::string example(const char* name) {
  return std::string(STRETTO_EXAMPLES) + "/" + name;
}

nlohmann::json example_json(const char* name) {
  return nlohmann::json::parse(slurp(example(name)));
}

// A small valid plan (PP2 synthetic, GPipe order) to mutate.
nlohmann::json small_plan() {
  return nlohmann::json::parse(R"({
    "model": {"family": "synthetic", "layers": 4, "activation_bytes": 1000000,
              "param_bytes": 1000000, "boundary_bytes": 1000, "flops": 1e9, "pp_regions": 2},
    "cluster": {"preset": "h100-sxm", "nodes": 1, "devices_per_node": 2},
    "schedule": [
      {"op": "place", "filter": {"PP": 0}, "devices": [0]},
      {"op": "place", "filter": {"PP": 1}, "devices": [1]},
      {"op": "split", "filter": {}, "dim_name": "MB", "num_microbatches": 4}
    ]})");
}

fs::path write_plan(const std::string& name, const nlohmann::json& j) {
  const fs::path p = tmpdir() / name;
  put(p, j.dump());
  return p;
}

void expect_refusal(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.code, 2) << r.err.substr(0, 2000);
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err.substr(0, 2000);
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err.substr(0, 2000);
}

}  // namespace

// A document nested 40,000 deep (80 KB) overflowed the stack in the position index.
TEST(Hostile, DeepNestingIsRefusedNotACrash) {
  const fs::path p = tmpdir() / "deep.json";
  put(p, std::string(40000, '[') + std::string(40000, ']'));
  const Result r = sh("compile " + p.string());
  expect_refusal(r, "nested more than 256 levels");
  EXPECT_NE(r.err.find("deep.json:1:257"), std::string::npos) << r.err;
  EXPECT_LT(r.err.size(), 2000u);
  // Objects, 20,000 deep (took 1 GB in the pointer-keyed index).
  std::string obj;
  for (int i = 0; i < 20000; ++i) obj += "{\"a\":";
  obj += "1" + std::string(20000, '}');
  put(p, obj);
  expect_refusal(sh("simulate " + p.string()), "nested more than 256 levels");
}

// 10,000 bad directives on one 344 KB line: each diagnostic copied the whole line (8 GB).
TEST(Hostile, DiagnosticsAreCappedAndLongLinesWindowed) {
  nlohmann::json plan = small_plan();
  for (int i = 0; i < 10000; ++i)
    plan["schedule"].push_back({{"op", "place"}, {"filter", {{"PP", 0}}}, {"devics", {0}}});
  const fs::path p = write_plan("many_bad.json", plan);  // dump(): one line
  ASSERT_GT(fs::file_size(p), 300000u);
  const Result r = sh("compile " + p.string());
  expect_refusal(r, "unknown key 'devics'");
  // Two diagnostics per bad directive (the unknown key, the missing "devices"): 20,000.
  EXPECT_NE(r.err.find("... and 19,950 more"), std::string::npos) << r.err.substr(0, 500);
  EXPECT_LT(r.err.size(), 64u * 1024) << "stderr not capped";
  // Every echoed line is a window of the 344 KB line, with the caret under the column.
  std::istringstream lines(r.err);
  std::string line;
  while (std::getline(lines, line)) EXPECT_LT(line.size(), 400u);
}

// One syntax error at the end of a long one-line file printed the whole line (419 MB for 200 MB).
TEST(Hostile, SyntaxErrorAtEndOfLongLineIsWindowed) {
  std::string text = "{\"name\": \"" + std::string(20 << 20, 'x') + "\", \"model\": }";
  const fs::path p = tmpdir() / "long_line.json";
  put(p, text);
  const Result r = sh("compile " + p.string());
  expect_refusal(r, "invalid JSON");
  EXPECT_LT(r.err.size(), 2000u);
  EXPECT_NE(r.err.find("...xxxx"), std::string::npos) << r.err;
  // The column is the real one, the caret sits under the offending token in the window.
  EXPECT_NE(r.err.find(":1:" + std::to_string(text.size())), std::string::npos) << r.err;
}

// An 8-byte CSV gave 99,999 errors ("stage N has no actions" for every missing stage).
TEST(Hostile, CsvDiagnosticsAreBounded) {
  const fs::path p = tmpdir() / "bad.csv";
  put(p, "99999F0");
  const Result r = sh("import torch-csv " + p.string());
  expect_refusal(r, "stages 0-99998 have no actions");
  EXPECT_LT(r.err.size(), 2000u);
  // Too many invalid cells: the first 50 and a count.
  std::string row;
  for (int i = 0; i < 5000; ++i) row += "x1,";
  put(p, row + "\n");
  const Result r2 = sh("import torch-csv " + p.string());
  expect_refusal(r2, "more invalid cells");
  EXPECT_LT(r2.err.size(), 64u * 1024);
  // Huge stage x microbatch products are refused before the validation allocates.
  std::string big;
  for (int s = 0; s < 1000; ++s) big += std::to_string(s) + "F9999999,";
  put(p, big + "\n");
  expect_refusal(sh("import torch-csv " + p.string()), "at most");
}

// "profile": "/dev/zero" and `simulate /dev/urandom` grew past 6 GB; a profile naming
// /etc/passwd printed its first line.
TEST(Hostile, NonRegularAndOversizedFilesAreRefused) {
  expect_refusal(sh("simulate /dev/urandom"), "not a regular file");
  expect_refusal(sh("compile /dev/zero"), "not a regular file");
  expect_refusal(sh("import torch-csv /dev/zero"), "not a regular file");
  expect_refusal(sh("compile " + tmpdir().string()), "a directory");

  nlohmann::json plan = small_plan();
  plan["costmodel"] = {{"kind", "profiled"}, {"profile", "/dev/zero"}};
  expect_refusal(sh("simulate " + write_plan("profile_zero.json", plan).string()),
                 "not a regular file");
  const fs::path passwd = tmpdir() / "passwd";
  put(passwd, "root:x:0:0:root:/root:/bin/bash\n");
  plan["costmodel"]["profile"] = passwd.string();
  const Result r = sh("simulate " + write_plan("profile_passwd.json", plan).string());
  expect_refusal(r, "not JSON");
  EXPECT_EQ(r.err.find("root:x"), std::string::npos) << r.err;

  // The size limit: configurable, checked before reading.
  const fs::path ex = example("gpt_pp4_dp2_1f1b.json");
  expect_refusal(sh("compile " + ex.string(), "STRETTO_MAX_INPUT_BYTES=1000"),
                 "larger than the input limit");
  expect_refusal(sh("compile --max-input-size 1K " + ex.string()), "larger than the input limit");
  EXPECT_EQ(sh("compile --max-input-size 1M " + ex.string() + " --format json").code, 0);
  // Standard input is bounded too.
  expect_refusal(sh("compile --max-input-size 1K -", "", "< " + ex.string()),
                 "larger than the limit");
}

// hidden 1e7, vocab 1e8, seq_len 1e8, microbatch 1e7 (each in range) gave "internal error: the
// engine program is malformed: task 2: negative work".
TEST(Hostile, SizeProductsThatOverflowAreLocated) {
  nlohmann::json plan = example_json("gpt_pp4_dp2_1f1b.json");
  plan["model"]["hidden"] = 10000000;
  plan["model"]["heads"] = 10;
  plan["model"]["vocab"] = 100000000;
  plan["model"]["seq_len"] = 100000000;
  plan["model"]["microbatch_size"] = 10000000;
  const fs::path p = tmpdir() / "huge_sizes.json";
  put(p, plan.dump(2));
  const Result r = sh("simulate " + p.string());
  expect_refusal(r, "beyond what Stretto can count");
  EXPECT_NE(r.err.find("huge_sizes.json:"), std::string::npos);
  EXPECT_NE(r.err.find("(/model/hidden)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("negative"), std::string::npos);
  // A cluster whose device count overflows int.
  plan = small_plan();
  plan["cluster"]["nodes"] = 1000000;
  plan["cluster"]["devices_per_node"] = 10000;
  expect_refusal(sh("compile " + write_plan("devices_overflow.json", plan).string()),
                 "at most 2^31 - 1");
}

// 1,000,000 microbatches, a 10^7-device cluster of which 8 are used, build-schedule with
// 1,000,000 microbatches: estimated and refused before allocating.
TEST(Hostile, PlansLargerThanMemoryAreRefusedWithTheEstimate) {
  nlohmann::json plan = small_plan();
  plan["schedule"][2]["num_microbatches"] = 1000000;
  const Result r = sh("simulate --max-memory 2G " + write_plan("mb1e6.json", plan).string());
  expect_refusal(r, "this plan needs ~");
  EXPECT_NE(r.err.find("fewer microbatches"), std::string::npos) << r.err;

  plan = small_plan();
  plan["cluster"]["nodes"] = 1000000;
  plan["cluster"]["devices_per_node"] = 10;
  const Result r2 = sh("simulate --max-memory 2G " + write_plan("cluster1e7.json", plan).string());
  expect_refusal(r2, "this plan needs ~");
  EXPECT_NE(r2.err.find("uses 2"), std::string::npos) << r2.err;

  const Result r3 =
      sh("build-schedule --schedule 1f1b --ranks 4 --microbatches 1000000 --max-memory 1G");
  expect_refusal(r3, "needs ~");
  // DP replicas: the way out is --fold-replicas, and it works.
  nlohmann::json llama = example_json("layout_llama7b_pp4_dp4_interleaved.json");
  llama["schedule"]["microbatches"] = 200;
  const std::string lp = write_plan("llama200.json", llama).string();
  const Result r4 = sh("simulate --max-memory 80M " + lp + " --format json");
  expect_refusal(r4, "--fold-replicas");
  EXPECT_EQ(sh("simulate --max-memory 80M --fold-replicas " + lp + " --format json").code, 0);
  // bad_alloc is never an "internal error".
  const Result r5 = sh("simulate " + write_plan("mb1e6b.json", plan).string(),
                    "STRETTO_MAX_MEMORY=1T", "", 300000);
  EXPECT_NE(r5.code, 1) << r5.err;
  EXPECT_EQ(r5.err.find("internal error"), std::string::npos) << r5.err;
}

// --trace was checked after the simulation, built as one string, and overwrote anything.
TEST(Hostile, OutputsAreCheckedFirstAndWrittenAtomically) {
  const std::string deadlock =
      std::string(STRETTO_TEST_DATA) + "/schedules/bad/deadlock_cross_device_inversion.json";
  // The unwritable trace is reported, not the plan's (later) problem: outputs open first.
  const Result r = sh("simulate " + deadlock + " --trace /nonexistent/dir/t.json");
  expect_refusal(r, "cannot write '/nonexistent/dir/t.json'");
  EXPECT_EQ(r.err.find("deadlock"), std::string::npos) << r.err;

  // Never over the input plan.
  const fs::path plan = write_plan("keep.json", small_plan());
  const std::string before = slurp(plan);
  expect_refusal(sh("simulate " + plan.string() + " --trace " + plan.string()),
                 "refusing to overwrite the input file");
  EXPECT_EQ(slurp(plan), before);
  const fs::path basef = tmpdir() / "base.json";
  put(basef, slurp(std::string(STRETTO_TEST_DATA) + "/builders/base_pp2_dp2.json"));
  const std::string base_before = slurp(basef);
  expect_refusal(sh("build-schedule --schedule 1f1b --ranks 2 --microbatches 4 --base " +
                    basef.string() +
                    " -o " + basef.string()),
                 "refusing to overwrite the input file");
  EXPECT_EQ(slurp(basef), base_before);

  // A failed write to stdout is an error.
  const Result full = sh("simulate " + plan.string() + " --format json", "", ">/dev/full");
  EXPECT_NE(full.code, 0);
  EXPECT_NE(full.err.find("standard output"), std::string::npos) << full.err;

  // Trace subsets: devices and a time window; no temporary file is left behind.
  const fs::path trace = tmpdir() / "t.json";
  const std::string ex = example("gpt_pp4_dp2_1f1b.json");
  ASSERT_EQ(sh("simulate " + ex + " --format json --trace " + trace.string() +
               " --trace-devices 0-1,5")
                .code,
            0);
  const auto j = nlohmann::json::parse(slurp(trace));
  std::set<int> pids;
  for (const auto& e : j["traceEvents"]) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1, 5}));
  ASSERT_EQ(sh("simulate " + ex + " --format json --trace " + trace.string() +
               " --trace-window 10:20")
                .code,
            0);
  const auto w = nlohmann::json::parse(slurp(trace));
  size_t slices = 0;
  for (const auto& e : w["traceEvents"])
    if (e["ph"] == "X") {
      ++slices;
      const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
      EXPECT_LT(ts, 20000.0);  // microseconds
      EXPECT_GE(ts + dur, 10000.0);
    }
  EXPECT_GT(slices, 0u);
  for (const auto& f : fs::directory_iterator(tmpdir()))
    EXPECT_EQ(f.path().filename().string().find(".tmp."), std::string::npos) << f.path();
  expect_refusal(sh("simulate " + ex + " --trace " + trace.string() + " --trace-devices 0-99"),
                 "outside devices 0-7");
}

// Sweep specs whose grid was materialised whole: 7,000 x 7,000 ranges (49 M points, ~25 GB of
// points held before the first ran), a factorisation over 30 copies of "tp" (~10^17 layouts)
// and a sample of 10^12 points. Each is now refused at once, at the spec's field.
TEST(Hostile, SweepSpecsThatWouldExhaustTheMachineAreRefused) {
  const fs::path dir = tmpdir();
  const std::string base = example("gpt_pp4_dp2_1f1b.json");
  auto spec = [&](const std::string& name, nlohmann::json axes, nlohmann::json extra = {}) {
    nlohmann::json j = {{"base", base}, {"axes", std::move(axes)}};
    if (!extra.is_null()) j.update(extra);
    return write_plan(name, j).string();
  };
  auto range = [](int to) { return nlohmann::json{{"from", 1}, {"to", to}}; };
  const Result grid = sh("sweep " +
                         spec("grid.json", {{"microbatches", range(7000)},
                                            {"/cluster/inter_node/bandwidth_GBps", range(7000)}}) +
                         " --db " + (dir / "grid.db").string());
  expect_refusal(grid, "the grid has 49000000 points");
  EXPECT_NE(grid.err.find("(/axes)"), std::string::npos) << grid.err;
  nlohmann::json dims = nlohmann::json::array();
  for (int i = 0; i < 30; ++i) dims.push_back("tp");
  const Result fact =
      sh("sweep " + spec("fact.json", {{"layout", {{"factorize", 1 << 20}, {"dims", dims}}}}) +
         " --db " + (dir / "fact.db").string());
  expect_refusal(fact, "'tp' is listed twice");
  const Result sample =
      sh("sweep " +
         spec("sample.json",
              {{"microbatches", range(100000)}, {"/cluster/inter_node/bandwidth_GBps", range(100000)}},
              {{"sample", {{"n", 1000000000000LL}, {"seed", 1}}}}) +
         " --db " + (dir / "sample.db").string());
  expect_refusal(sample, "a sample has at most 1000000 points");
  // 100,000 worker threads were started for a sweep of as many points; a bad option after the
  // spec was reported as "unknown command 'sweep SPEC'".
  const std::string small = std::string(STRETTO_TEST_DATA) + "/explore/small.json";
  const std::string db = " --db " + (dir / "small.db").string();
  expect_refusal(sh("sweep " + small + db + " -j 100000"), "--jobs: Value 100000 not in range");
  expect_refusal(sh("sweep " + small + db + " --top -3"), "--top: Value -3 not in range");
  const Result typo = sh("sweep " + small + db + " --nosuch");
  expect_refusal(typo, "--nosuch");
  EXPECT_EQ(typo.err.find("unknown command"), std::string::npos) << typo.err;
  expect_refusal(sh("search " + base + " --devices 8 --memory-cap -1"), "--memory-cap");
  expect_refusal(sh("search " + base + " --devices 8 --budget nan"), "finite");
  // A NaN link speed passed CLI::Range and turned the importer's physics check off.
  const std::string rank0_trace = std::string(STRETTO_TEST_DATA) + "/traces/kineto_rank0.json";
  expect_refusal(sh("import kineto " + rank0_trace + " --link-GBps nan"), "finite");
  // Merging shards of two specs committed the first input's points before refusing the second.
  const std::string resume = std::string(STRETTO_TEST_DATA) + "/explore/resume.json";
  const std::string other = (dir / "other.db").string(), out = (dir / "merged.db").string();
  ASSERT_EQ(sh("sweep " + small + db + " --limit 2").code, 0);
  ASSERT_EQ(sh("sweep " + resume + " --db " + other + " --limit 2").code, 0);
  expect_refusal(sh("sweep merge " + out + " " + (dir / "small.db").string() + " " + other),
                 "nothing was merged");
  EXPECT_FALSE(fs::exists(out));
}

// Outputs that named an input replaced it with exit 0: the sweep's spec and its database (the
// emitted plan renamed over the open database: rows lost), search's plan, a Kineto trace, and
// the GUI's plan. Each is refused, with exit 2, before any work, and the input is unchanged.
TEST(Hostile, OutputsThatWouldReplaceAnInputAreRefusedBeforeTheWork) {
  const fs::path dir = tmpdir() / "over_inputs";
  fs::create_directories(dir);
  const fs::path spec = dir / "spec.json", plan = dir / "plan.json", db = dir / "spec.db";
  put(plan, slurp(example("gpt_pp4_dp2_1f1b.json")));
  put(spec, slurp(std::string(STRETTO_TEST_DATA) + "/explore/small.json"));
  // small.json names its base relative to tests/data/explore: use an absolute base.
  auto sj = nlohmann::json::parse(slurp(spec));
  sj["base"] = plan.string();
  put(spec, sj.dump());
  const std::string spec_before = slurp(spec), plan_before = slurp(plan);

  expect_refusal(sh("sweep " + spec.string() + " --db " + db.string() + " --emit-best " +
                    spec.string()),
                 "refusing to overwrite the input file");
  EXPECT_EQ(slurp(spec), spec_before);
  EXPECT_FALSE(fs::exists(db)) << "the sweep ran before its output was checked";
  // The database, before it exists and once it holds rows.
  expect_refusal(sh("sweep " + spec.string() + " --db " + db.string() + " --emit-best " +
                    db.string()),
                 "refusing to overwrite the input file");
  EXPECT_FALSE(fs::exists(db));
  ASSERT_EQ(sh("sweep " + spec.string() + " --db " + db.string() + " --limit 2 --format json",
               "", ">/dev/null")
                .code,
            0);
  const std::string db_before = slurp(db);
  expect_refusal(sh("sweep " + spec.string() + " --db " + db.string() + " --emit-best " +
                    db.string()),
                 "refusing to overwrite the input file");
  EXPECT_EQ(slurp(db), db_before);
  expect_refusal(sh("sweep " + spec.string() + " --db " + db.string() + " --emit-best " +
                    plan.string()),
                 "refusing to overwrite the input file");  // the spec's base plan
  EXPECT_EQ(slurp(plan), plan_before);
  const fs::path merged = dir / "merged.db";
  expect_refusal(sh("sweep merge " + merged.string() + " " + db.string() + " --emit-best " +
                    db.string()),
                 "refusing to overwrite the input file");
  EXPECT_EQ(slurp(db), db_before);
  EXPECT_FALSE(fs::exists(merged));

  expect_refusal(sh("search " + plan.string() + " --devices 8 --budget 1 --emit " + plan.string()),
                 "refusing to overwrite the input file");
  EXPECT_EQ(slurp(plan), plan_before);

  const fs::path trace = dir / "rank0.json";
  put(trace, slurp(std::string(STRETTO_TEST_DATA) + "/traces/kineto_rank0.json"));
  const std::string trace_before = slurp(trace);
  expect_refusal(sh("import kineto " + trace.string() + " -o " + trace.string()),
                 "refusing to overwrite the input file");
  EXPECT_EQ(slurp(trace), trace_before);

  // The GUI refuses before it opens a window (no display is needed to see it).
  expect_refusal(sh("gui " + plan.string() + " --frames 1 --screenshot " + plan.string()),
                 "refusing to overwrite the input file");
  expect_refusal(sh("gui " + plan.string() + " --frames 1 --dump-state " + plan.string()),
                 "refusing to overwrite the input file");
  EXPECT_EQ(slurp(plan), plan_before);
}

// A failed write to standard output is exit 2 (README), not 1, in every command that prints.
TEST(Hostile, AFailedWriteToStandardOutputIsExit2) {
  const std::string plan = example("gpt_pp4_dp2_1f1b.json");
  const std::string small = std::string(STRETTO_TEST_DATA) + "/explore/small.json";
  const std::string db = (tmpdir() / "stdout_full.db").string();
  const std::string rank0 = std::string(STRETTO_TEST_DATA) + "/traces/kineto_rank0.json";
  for (const std::string& args :
       {"simulate " + plan + " --format json", "compile " + plan + " --format json",
        "sweep " + small + " --db " + db + " --format json",
        "search " + plan + " --devices 8 --budget 1 --format json",
        "import kineto " + rank0 + " --format json", "compare " + plan + " " + plan + " --format json"}) {
    SCOPED_TRACE(args);
    const Result r = sh(args, "", ">/dev/full");
    EXPECT_EQ(r.code, 2) << r.err.substr(0, 2000);
    EXPECT_NE(r.err.find("standard output"), std::string::npos) << r.err.substr(0, 2000);
  }
}

// `search --devices 2147483647` died of SIGFPE (an int overflow in the divisor loop, after 20 s):
// refused at once above the largest device count a sweep factorises.
TEST(Hostile, SearchRefusesMoreDevicesThanItPlansFor) {
  const std::string plan = example("gpt_pp4_dp2_1f1b.json");
  expect_refusal(sh("search " + plan + " --devices 2147483647 --budget 1"),
                 "--devices 2147483647 is more than a search plans for (1048576)");
  expect_refusal(sh("search " + plan + " --devices 1048577 --budget 1"), "more than a search plans for");
}

// A profiled table with a huge `ns` aborted the engine ("event in the past") or said "internal
// error: negative work": one bad row killed a whole sweep. Table values above 1,000 s are
// refused where they stand; what a table extrapolates saturates at 1,000 s per op.
TEST(Hostile, ProfiledTablesWithHugeTimesAreBoundedAndLocated) {
  const fs::path dir = tmpdir() / "huge_ns";
  fs::create_directories(dir);
  auto plan_with = [&](const std::string& ns) {
    put(dir / "table.json",
        "{\"version\": 1, \"device\": \"h100-sxm\", \"kernels\": [\n"
        "  {\"op\": \"norm\", \"pass\": \"F\", \"dtype\": \"bf16\", \"bytes\": 1, \"ns\": " +
            ns + "}]}\n");
    auto p = example_json("gpt_pp4_dp2_1f1b.json");
    p["costmodel"] = {{"kind", "profiled"}, {"profile", "table.json"}};
    return write_plan("huge_ns/plan.json", p).string();
  };
  for (const std::string ns : {"1e15", "9e18", "1e308", "9223372036854775807"}) {
    SCOPED_TRACE(ns);
    const Result r = sh("simulate " + plan_with(ns) + " --format json");
    expect_refusal(r, "(/kernels/0/ns)");
    EXPECT_NE(r.err.find("must be at most 1e+12"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("table.json:2:"), std::string::npos) << r.err;
  }
  // 1e11 ns for one byte, extrapolated to a norm's megabytes: saturated, simulated.
  const Result ok = sh("simulate " + plan_with("1e11") + " --format json");
  ASSERT_EQ(ok.code, 0) << ok.err.substr(0, 2000);
  const auto j = nlohmann::json::parse(ok.out);
  EXPECT_GE(j["step_time_ms"].get<double>(), 1e6);  // at least one op of 1,000 s
  EXPECT_LT(j["step_time_ms"].get<double>(), 1e12);
}

// GUI scripts: `frames 99999999999` said "internal error: stoi", `set` with 50,000 nested
// brackets overflowed the stack, `--script /dev/zero` read 4 GiB and a folder ran as an empty
// script, a 2 MB line was echoed whole. Each is a located refusal before any window opens.
TEST(Hostile, GuiScriptsAreBoundedBeforeAnyWindowOpens) {
  const fs::path dir = tmpdir() / "gui_scripts";
  fs::create_directories(dir);
  auto script = [&](const std::string& name, const std::string& text) {
    put(dir / name, text);
    return (dir / name).string();
  };
  const Result frames = sh("gui --script " + script("frames.script", "wait\nframes 99999999999\n"));
  expect_refusal(frames, "frames.script:2:");
  EXPECT_NE(frames.err.find("a whole number of frames from 1 to 10000000"), std::string::npos)
      << frames.err;
  const Result deep = sh("gui --script " + script("deep.script", "set /model/layers " +
                                                                     std::string(50000, '[') + "\n"));
  expect_refusal(deep, "deep.script:1:");
  EXPECT_NE(deep.err.find("nests deeper than 256 levels"), std::string::npos) << deep.err;
  EXPECT_LT(deep.err.size(), 4000u);  // the 50 KB line is windowed, not echoed whole
  expect_refusal(sh("gui --script /dev/zero"), "is not a regular file");
  expect_refusal(sh("gui --script " + dir.string()), "is not a regular file");
}
