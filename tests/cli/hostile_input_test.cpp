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

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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
      sh("build-schedule --schedule 1f1b --ranks 4 --microbatches 100000 --max-memory 100M");
  expect_refusal(r3, "needs ~");
  // Whatever the memory budget (1 TB here): a directive list no command could read back
  // (~763 MiB of JSON; it peaked at 5.6 GiB to print it) is refused before it is built, under
  // a 1 GB address space.
  const Result r3b = sh("build-schedule --schedule 1f1b --ranks 4 --microbatches 1000000",
                        "STRETTO_MAX_MEMORY=1T", "", 1000000);
  expect_refusal(r3b, "--microbatches: error: 4 ranks x 1 stage per rank x 1000000 microbatches "
                      "make a directive list of ~763 MiB, more than a plan file may hold");
  EXPECT_NE(r3b.err.find("use at most 335544 microbatches"), std::string::npos) << r3b.err;
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
  // sweep merge, and replay where the LibTorch backend is built
  const std::string full_db = (tmpdir() / "stdout_full_source.db").string();
  ASSERT_EQ(sh("sweep " + small + " --db " + full_db + " --format json", "", ">/dev/null").code, 0);
  std::vector<std::string> more = {"sweep merge " + (tmpdir() / "stdout_full_merged.db").string() +
                                   " " + full_db + " --format json"};
  if (fs::exists(fs::path(binary()).parent_path() / "stretto-backend"))
    more.push_back("replay " + std::string(STRETTO_TEST_DATA) +
                   "/backend/pp2_1f1b.json --iterations 1 --warmup 0 --format json");
  for (const std::string& args : more) {
    SCOPED_TRACE(args);
    const Result r = sh(args, "", ">/dev/full", 8000000);
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
  // --devices 1000000 exhausted memory: now no layout of that many devices fits the model and
  // its global batch of 32, said at once (under the 4 GB address space of every test here)
  expect_refusal(sh("search " + plan + " --devices 1000000 --budget 1"),
                 "no layout of 1000000 devices fits this model and global batch 32");
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

// Sweep specs, points and databases (issue 28): a constraint's division by zero said
// "<input>"; a layout of 2^42 devices passed the device check (the product wrapped in int) and
// said "devices_per_node = 0"; a pointer axis /schedule/99999999 padded the list with 10^8
// nulls; memory_cap_GiB 1e10 overflowed the byte cap; shard numbers wrapped or read "abc" as 0.
TEST(Hostile, SweepSpecsAndShardsAreCheckedWhereTheyStand) {
  const fs::path dir = tmpdir() / "sweep_spec_where";
  fs::create_directories(dir);
  const std::string base = example("gpt_pp4_dp2_1f1b.json");
  auto spec = [&](const std::string& name, nlohmann::json j) {
    j["base"] = base;
    return write_plan("sweep_spec_where/" + name, j).string();
  };
  const std::string db = " --db " + (dir / "s.db").string();
  const Result div = sh("sweep " +
                        spec("div.json", {{"axes", {{"microbatches", {4, 8}}}},
                                          {"constraints", {"devices == 8", "microbatches / 0 > 1"}}}) +
                        db);
  expect_refusal(div, "div.json (/constraints/1)");
  EXPECT_NE(div.err.find("division by zero"), std::string::npos) << div.err;
  EXPECT_EQ(div.err.find("<input>"), std::string::npos) << div.err;

  expect_refusal(sh("sweep " + spec("cap.json", {{"axes", {{"microbatches", {4}}}},
                                                  {"memory_cap_GiB", 1e10}}) + db),
                 "(/memory_cap_GiB)");

  // Points: each is an invalid point with what is wrong, the sweep goes on.
  const Result pts =
      sh("sweep " +
             spec("points.json",
                  {{"axes",
                    {{"layout", {{{"tp", 1024}, {"pp", 4096}, {"dp", 1048576}}}},
                     {"/schedule/99999999", {1}}}}}) +
             " --db " + (dir / "points.db").string() + " --format json",
         "", "", 4000000);
  ASSERT_EQ(pts.code, 0) << pts.err.substr(0, 2000);
  const auto j = nlohmann::json::parse(pts.out);
  ASSERT_EQ(j["results"].size(), 1u) << pts.out.substr(0, 2000);
  const std::string why = j["results"][0]["diagnostic"].get<std::string>();
  EXPECT_NE(why.find("index 99999999 is past the end of a list of 13"), std::string::npos) << why;
  const Result big = sh("sweep " +
                            spec("big.json", {{"axes",
                                               {{"layout", {{{"tp", 1024}, {"pp", 4096}, {"dp", 1048576}}}}}}}) +
                            " --db " + (dir / "big.db").string() + " --format json",
                        "", "", 4000000);
  ASSERT_EQ(big.code, 0) << big.err.substr(0, 2000);
  const std::string bwhy =
      nlohmann::json::parse(big.out)["results"][0]["diagnostic"].get<std::string>();
  EXPECT_NE(bwhy.find("the layout uses 4398046511104 devices, more than 2^20"), std::string::npos)
      << bwhy;

  const std::string small = std::string(STRETTO_TEST_DATA) + "/explore/small.json";
  expect_refusal(sh("sweep " + small + db + " --shard 0/99999999999"), "--shard '0/99999999999'");
  expect_refusal(sh("sweep " + small + db + " --shard 4294967296/4294967297"), "--shard");
  expect_refusal(sh("sweep " + small + db, "SLURM_ARRAY_TASK_ID=abc SLURM_ARRAY_TASK_COUNT=4"),
                 "SLURM_ARRAY_TASK_ID=abc");
  expect_refusal(sh("sweep " + small + db, "SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=4294967297"),
                 "each must be a whole number from 0 to 1000000");
  EXPECT_FALSE(fs::exists(dir / "s.db"));
}

// Results databases (issue 28): a damaged file reported "8 resumed" then listed 0 points with
// exit 0; a foreign SQLite file got the sweep's tables and WAL before being refused; --db
// /dev/null left /dev/null-journal; a database reached through a symbolic link got its own lock.
TEST(Hostile, SweepDatabasesAreCheckedBeforeTheyAreWritten) {
  const fs::path dir = tmpdir() / "sweep_db";
  fs::create_directories(dir);
  const std::string small = std::string(STRETTO_TEST_DATA) + "/explore/small.json";
  const fs::path good = dir / "good.db";
  ASSERT_EQ(sh("sweep " + small + " --db " + good.string() + " --format json", "", ">/dev/null").code, 0);
  ASSERT_FALSE(fs::exists(good.string() + "-wal"));  // checkpointed at close

  // Damage every leaf page of the points table (the hash index stays readable).
  std::string bytes = slurp(good);
  const size_t page = (static_cast<unsigned char>(bytes[16]) << 8) | static_cast<unsigned char>(bytes[17]);
  ASSERT_GE(page, 512u);
  size_t damaged = 0;
  for (size_t p = 2; p < bytes.size() / page; ++p)  // page 1 is the schema, page 2 the meta table
    if (static_cast<unsigned char>(bytes[p * page]) == 0x0d) {
      for (size_t i = p * page + 8; i < (p + 1) * page; ++i) bytes[i] = 0x55;
      ++damaged;
    }
  ASSERT_GT(damaged, 0u);
  const fs::path bad = dir / "bad.db";
  put(bad, bytes);
  const Result r = sh("sweep " + small + " --db " + bad.string() + " --format table");
  expect_refusal(r, "bad.db: error: cannot read the results database");
  EXPECT_NE(r.err.find("malformed"), std::string::npos) << r.err;
  expect_refusal(sh("sweep merge " + (dir / "m.db").string() + " " + bad.string()),
                 "cannot read the results database");

  // Another program's SQLite file: refused, byte for byte unchanged, no WAL started.
  const fs::path foreign = dir / "foreign.sqlite";
  fs::copy_file(std::string(STRETTO_TEST_DATA) + "/explore/foreign.sqlite", foreign);
  const std::string before = slurp(foreign);
  expect_refusal(sh("sweep " + small + " --db " + foreign.string()),
                 "not a sweep results database: its tables are users");
  EXPECT_TRUE(slurp(foreign) == before) << "the foreign database was modified";
  EXPECT_FALSE(fs::exists(foreign.string() + "-wal"));
  EXPECT_FALSE(fs::exists(foreign.string() + "-journal"));

  const bool journal_before = fs::exists("/dev/null-journal");  // (left by an older build)
  expect_refusal(sh("sweep " + small + " --db /dev/null"), "not a regular file");
  if (!journal_before) {
    EXPECT_FALSE(fs::exists("/dev/null-journal"));
  }
  expect_refusal(sh("sweep " + small + " --db " + dir.string()), "is a directory");

  // One lock per file: through a link, the lock is the target's.
  fs::create_symlink(good, dir / "link.db");
  ASSERT_EQ(sh("sweep " + small + " --db " + (dir / "link.db").string() + " --format json", "",
               ">/dev/null")
                .code,
            0);
  EXPECT_TRUE(fs::exists(good.string() + ".lock"));
  EXPECT_FALSE(fs::exists((dir / "link.db").string() + ".lock"));
}

// The full listing put the infeasible points in hash order: now the feasible fastest first,
// then the over-capacity points fastest first, then the invalid ones.
TEST(Hostile, SweepListsInfeasiblePointsFastestFirst) {
  const fs::path dir = tmpdir() / "sweep_order";
  fs::create_directories(dir);
  auto j = nlohmann::json::parse(slurp(std::string(STRETTO_TEST_DATA) + "/explore/small.json"));
  j["base"] = example("gpt_pp4_dp2_1f1b.json");
  j["memory_cap_GiB"] = 0.001;  // every point over capacity
  const std::string spec = write_plan("sweep_order/cap.json", j).string();
  const Result r = sh("sweep " + spec + " --db " + (dir / "o.db").string() + " --format json");
  ASSERT_EQ(r.code, 0) << r.err.substr(0, 2000);
  const auto out = nlohmann::json::parse(r.out);
  ASSERT_EQ(out["ok"].get<int>(), 0);
  ASSERT_GE(out["over_capacity"].get<int>(), 10);
  double last = -1;
  bool seen_invalid = false;
  for (const auto& p : out["results"]) {
    if (p["status"] == "invalid") {
      seen_invalid = true;
      continue;
    }
    EXPECT_FALSE(seen_invalid) << "an over-capacity point after an invalid one";
    const double t = p["metrics"]["step_time_ms"].get<double>();
    EXPECT_GE(t, last) << p.dump().substr(0, 300);
    last = t;
  }
}

// Kineto traces (issue 28): a negative `Input Dims` size was found only in the tool's own
// table (exit 1, "<imported table>"); a small .gz holding one 64 MiB name or an event with
// 150,000 args was held whole (a 2 GiB name reached 5-6 GiB); names with terminal escapes were
// printed raw, in the table and in diagnostics.
TEST(Hostile, KinetoTracesAreBoundedLocatedAndPrintedSafely) {
  const fs::path dir = tmpdir() / "kineto_hostile";
  fs::create_directories(dir);
  const auto base = nlohmann::json::parse(slurp(std::string(STRETTO_TEST_DATA) + "/traces/kineto_rank0.json"));
  auto edited = [&](const std::string& name, auto edit) {
    auto j = base;
    edit(j["traceEvents"]);
    const fs::path p = dir / name;
    put(p, j.dump(1));
    return p.string();
  };
  const std::string neg = edited("neg.json", [](nlohmann::json& ev) {
    for (auto& e : ev)
      if (e.value("name", "") == "aten::mm") {
        e["args"]["Input Dims"] = {{1024, -2048}, {2048, 4096}};
        break;
      }
  });
  const Result r = sh("import kineto " + neg + " --format json", "", ">/dev/null");
  expect_refusal(r, "neg.json:");
  EXPECT_NE(r.err.find("(/traceEvents/6/args/Input Dims)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("has size -2048 in input 0"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("<imported table>"), std::string::npos) << r.err;

  const std::string many = edited("many.json", [](nlohmann::json& ev) {
    for (auto& e : ev)
      if (e.value("cat", "") == "kernel") {
        for (int i = 0; i < 150000; ++i) e["args"]["a" + std::to_string(i)] = i;
        break;
      }
  });
  expect_refusal(sh("import kineto " + many, "", ">/dev/null", 1000000),
                 "an event with more than 100000 values");

  // 64 MiB of name in ~64 KB of gzip, under a 1 GB address-space limit.
  const fs::path plain = dir / "bomb.json", bomb = dir / "bomb.json.gz";
  put(plain, "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"" + std::string(64 << 20, 'x') + "\"}]}");
  ASSERT_EQ(std::system(("gzip -1 -f " + plain.string()).c_str()), 0);
  ASSERT_LT(fs::file_size(bomb), 1u << 20);
  const Result b = sh("import kineto " + bomb.string(), "", ">/dev/null", 1000000);
  expect_refusal(b, "a string or number longer than 16 MiB");
  EXPECT_NE(b.err.find("bomb.json.gz:1:38"), std::string::npos) << b.err.substr(0, 600);
  EXPECT_LT(b.err.size(), 4000u);

  const std::string esc = edited("esc.json", [](nlohmann::json& ev) {
    for (auto& e : ev)
      if (e.contains("name")) e["name"] = e["name"].get<std::string>() + "\x1b]0;owned\x07\x1b[31m";
  });
  const Result t = sh("import kineto " + esc + " --format table");
  ASSERT_EQ(t.code, 0) << t.err.substr(0, 2000);
  EXPECT_NE(t.out.find("\\x1b[31m"), std::string::npos) << t.out.substr(0, 3000);
  EXPECT_EQ(t.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(t.out.find('\x07'), std::string::npos);
  const std::string esc_bad = edited("esc_bad.json", [](nlohmann::json& ev) {
    for (auto& e : ev)
      if (e.value("cat", "") == "cpu_op") {
        e["name"] = "aten::mm\x1b[2J";
        e["dur"] = -5;
        break;
      }
  });
  const Result d = sh("import kineto " + esc_bad);
  expect_refusal(d, "negative duration");
  EXPECT_EQ(d.err.find('\x1b'), std::string::npos) << d.err;
  EXPECT_NE(d.err.find("aten::mm\\x1b[2J"), std::string::npos) << d.err;
}

// compare (issue 28): a result whose device id is a string was "internal error: type must be
// number"; its device table printed MiB (everything else prints GiB) and one row per replica.
TEST(Hostile, CompareChecksResultsAndMergesEqualDeviceRows) {
  const fs::path dir = tmpdir() / "compare_hostile";
  fs::create_directories(dir);
  const std::string plan = example("gpt_pp4_dp2_1f1b.json");
  const Result sim = sh("simulate " + plan + " --format json");
  ASSERT_EQ(sim.code, 0);
  auto j = nlohmann::json::parse(sim.out);
  put(dir / "good.json", j.dump(1));
  j["devices"][1]["id"] = "one";
  put(dir / "bad.json", j.dump(1));
  const Result r = sh("compare " + (dir / "good.json").string() + " " + (dir / "bad.json").string());
  expect_refusal(r, "bad.json:");
  EXPECT_NE(r.err.find("(/devices/1/id)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("found \"one\""), std::string::npos) << r.err;

  const std::string llama = example("layout_llama7b_pp4_dp4_interleaved.json");
  const Result t = sh("compare " + llama + " " + llama + " --format table");
  ASSERT_EQ(t.code, 0) << t.err.substr(0, 2000);
  EXPECT_NE(t.out.find("peak GiB A / B"), std::string::npos) << t.out.substr(0, 2000);
  EXPECT_EQ(t.out.find("MiB"), std::string::npos) << t.out.substr(0, 2000);
  // PP4 x DP4: four rows of four identical replicas.
  EXPECT_NE(t.out.find("      0-3 "), std::string::npos) << t.out.substr(0, 2000);
  EXPECT_NE(t.out.find("    12-15 "), std::string::npos) << t.out.substr(0, 2000);
}

// GUI inputs (issue 28): `gui /dev/zero` and a script's `open /dev/zero` read 4 GiB and then
// blamed the plan ("use --fold-replicas", an option gui does not have); a 2 MB unknown action
// was echoed whole; --size 16384x16384 took 5.2 GiB for a screenshot.
TEST(Hostile, GuiFilesSizesAndLongLinesAreBounded) {
  const fs::path dir = tmpdir() / "gui_files";
  fs::create_directories(dir);
  expect_refusal(sh("gui /dev/zero --frames 1", "", "", 1000000), "not a regular file");
  expect_refusal(sh("gui " + dir.string() + " --frames 1"), "directory");
  put(dir / "verb.script", std::string(2000000, 'x') + "\n");
  const Result v = sh("gui --script " + (dir / "verb.script").string());
  expect_refusal(v, "verb.script:1:");
  EXPECT_LT(v.err.size(), 2000u);
  EXPECT_NE(v.err.find(" bytes in all)"), std::string::npos) << v.err.substr(0, 1000);
  const Result s = sh("gui --size 16384x16384 --frames 1 --screenshot " + (dir / "s.png").string());
  expect_refusal(s, "--size '16384x16384'");
  EXPECT_NE(s.err.find("7680x4320"), std::string::npos) << s.err;
  expect_refusal(sh("gui --size 99999999999x900 --frames 1"), "--size");
  if (std::system("command -v xvfb-run >/dev/null 2>&1") != 0) GTEST_SKIP() << "no xvfb-run";
  put(dir / "open.script", "open /dev/zero\n");
  const std::string cmd = "ulimit -v 3000000; " + std::string(STRETTO_UNDER_XVFB) + " " + binary() + " gui --script " +
                          (dir / "open.script").string() + " --frames 2 2>" +
                          (dir / "open.err").string();
  const int rc = std::system(("/bin/bash -c '" + cmd + "'").c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  const std::string err = slurp(dir / "open.err");
  EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;
  EXPECT_EQ(err.find("--fold-replicas"), std::string::npos) << err;
}

// Hints named options the command does not have: --fold-replicas and --max-memory in search,
// gui and compare; --timeline-width 1000000000 ran out of memory and blamed the plan.
TEST(Hostile, HintsNameOnlyOptionsTheCommandHas) {
  const std::string plan = example("layout_llama7b_pp4_dp4_interleaved.json");
  const Result c = sh("compare " + plan + " " + plan, "STRETTO_MAX_MEMORY=1M");
  expect_refusal(c, "raise --max-memory");
  EXPECT_EQ(c.err.find("use --fold-replicas"), std::string::npos) << c.err;
  // ... and the options they name exist there now.
  EXPECT_EQ(sh("compare " + plan + " " + plan + " --max-memory 1M").code, 2);
  for (const std::string cmd : {"sweep", "search", "gui", "compare"}) {
    const Result h = sh(cmd + " --help");
    EXPECT_NE(h.out.find("--max-memory"), std::string::npos) << cmd;
  }
  expect_refusal(sh("simulate " + example("gpt_pp4_dp2_1f1b.json") +
                    " --timeline --timeline-width 1000000000"),
                 "--timeline-width");
}

// replay took its options as given: --timeout 1e-9 (0 ms), nan or 1e300 made Gloo enforce-fail
// or the launcher wait "-9223372036854770 s"; --lr 1e308 overflowed fp32 in every rank;
// --threads 100000 hung; a taken or out-of-range --master port failed in LibTorch's store. All
// exit 1 after starting ranks; now each is a located refusal (exit 2) before anything starts.
TEST(Hostile, ReplayOptionsAreBoundedBeforeAnythingStarts) {
  if (!fs::exists(fs::path(binary()).parent_path() / "stretto-backend"))
    GTEST_SKIP() << "built without the LibTorch backend";
  const std::string plan = std::string(STRETTO_TEST_DATA) + "/backend/pp2_1f1b.json ";
  const std::string rank0 = " --rank 0 --world-size 2";
  struct Case {
    std::string args, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"--timeout 1e-9", "--timeout: error: 1e-09 is outside [0.1, 86400] seconds"},
           {"--timeout 1e300", "--timeout: error: 1e+300 is outside"},
           {"--timeout nan", "--timeout"},
           {"--lr 1e308", "--lr: error: 1e+308 is outside [0, 10]"},
           {"--lr nan", "--lr: error"},
           {"--threads 100000", "--threads: error: 100000 is outside [1, 1024]"},
           {"--master 127.0.0.1:70000" + rank0, "--master: error: '127.0.0.1:70000' is not"},
           {"--master 127.0.0.1:abc" + rank0, "port from 1 to 65535"},
           {"--master 127.0.0.1:29500", "--master: error: only used with --rank"}}) {
    SCOPED_TRACE(c.args);
    const Result r = sh("replay " + plan + c.args, "", "", 8000000);
    expect_refusal(r, c.needle);
    EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("rank 0"), std::string::npos) << r.err;  // no rank was started
  }
  expect_refusal(sh("replay " + plan, "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=99999",
                    "", 8000000),
                 "MASTER_PORT: error: '127.0.0.1:99999' is not ADDR:PORT");
  // A port another process listens on: refused by rank 0, which would host the store there.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  const Result taken = sh("replay " + plan + "--master 127.0.0.1:" + std::to_string(port) + rank0,
                          "", "", 8000000);
  ::close(fd);
  expect_refusal(taken, "--master: error: port " + std::to_string(port) + " is in use on this host");
}

// The largest layout a sweep takes, dp = 1,048,576, was estimated at 4 GiB (the declared
// devices only), passed under a 6 GB address space and ran out of memory, and under 4 GB its
// refusal blamed the microbatches. The estimate counts what each used device costs (links,
// streams, engine state, metrics: 6.4 KiB measured), so it is refused before anything is
// allocated, naming the devices.
TEST(Hostile, AMillionDevicePointIsRefusedByItsEstimateNamingTheDevices) {
  const fs::path dir = tmpdir() / "dp_million";
  fs::create_directories(dir);
  const std::string spec =
      write_plan("dp_million/spec.json",
                 {{"base", example("gpt_pp4_dp2_1f1b.json")},
                  {"axes", {{"layout", {{{"tp", 1}, {"pp", 1}, {"dp", 1048576}}}}}}})
          .string();
  const Result r =
      sh("sweep " + spec + " --db " + (dir / "s.db").string() + " --format json", "", "", 6000000);
  ASSERT_EQ(r.code, 0) << r.err.substr(0, 2000);
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_EQ(j["results"][0]["status"], "invalid");
  const std::string why = j["results"][0]["diagnostic"].get<std::string>();
  EXPECT_NE(why.find("this plan needs ~6.50 GiB"), std::string::npos) << why;
  EXPECT_NE(why.find("(1048576 devices, "), std::string::npos) << why;
  EXPECT_NE(why.find("most of it is per device: 1048576 devices at ~6.5 KiB each"),
            std::string::npos)
      << why;
  EXPECT_EQ(why.find("fewer microbatches"), std::string::npos) << why;
}

// The outputs of the backend commands and of a GUI script never replace an input: replay
// --trace PLAN, profile -o PLAN, validate --trace PLAN and --save-profile PLAN are refused
// before anything runs; a script's export-trace PLAN (which wrote the trace over the plan) and
// export-torch-csv PLAN fail at their line. The plan is unchanged.
TEST(Hostile, BackendAndGuiScriptOutputsNeverReplaceTheirInput) {
  const fs::path dir = tmpdir() / "outputs_backend_gui";
  fs::create_directories(dir);
  const fs::path plan = dir / "plan.json";
  put(plan, slurp(std::string(STRETTO_TEST_DATA) + "/backend/pp2_1f1b.json"));
  const std::string before = slurp(plan);
  const std::string p = plan.string();
  if (fs::exists(fs::path(binary()).parent_path() / "stretto-backend")) {
    for (const std::string& args :
         {"replay " + p + " --trace " + p, "profile " + p + " -o " + p,
          "validate " + p + " --trace " + p,
          "validate " + p + " --profile-from " + p + " --save-profile " + p}) {
      SCOPED_TRACE(args);
      expect_refusal(sh(args, "", "", 8000000), "refusing to overwrite the input file");
    }
  }
  EXPECT_EQ(slurp(plan), before);
  if (std::system("command -v xvfb-run >/dev/null 2>&1") != 0) GTEST_SKIP() << "no xvfb-run";
  for (const std::string verb : {"export-trace", "export-torch-csv"}) {
    SCOPED_TRACE(verb);
    put(dir / "export.script", "wait\n" + verb + " " + p + "\n");
    const std::string cmd = std::string(STRETTO_UNDER_XVFB) + " " + binary() + " gui " + p + " --script " +
                            (dir / "export.script").string() + " --frames 2 2>" +
                            (dir / "export.err").string();
    const int rc = std::system(("/bin/bash -c '" + cmd + "'").c_str());
    ASSERT_TRUE(WIFEXITED(rc));
    EXPECT_EQ(WEXITSTATUS(rc), 2);
    const std::string err = slurp(dir / "export.err");
    EXPECT_NE(err.find("script line 2: refusing to overwrite the input file"), std::string::npos)
        << err;
    EXPECT_EQ(slurp(plan), before);
  }
}
