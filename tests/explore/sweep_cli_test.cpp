// `stretto sweep`, `stretto sweep merge` and `stretto search` as a user runs them, including a
// real `kill -9` in the middle of a sweep.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "stretto/explore/store.h"

namespace fs = std::filesystem;
using stretto::explore::Store;
using stretto::plan::Json;

namespace {

struct CliRun {
  int code;
  std::string out, err;
};

CliRun sh(const std::string& args, const fs::path& dir) {
  const fs::path err = dir / "stderr.txt";
  std::string cmd = "cd '" + dir.string() + "' && " + std::string(STRETTO_BINARY) + " " + args +
                    " 2>'" + err.string() + "'";
  FILE* f = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  int status = pclose(f);
  std::ifstream e(err);
  std::string etext((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  return {WEXITSTATUS(status), out, etext};
}

std::string data(const char* name) {
  return std::string(STRETTO_TEST_DATA) + "/explore/" + name;
}

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("stretto_sweep_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// The rows a sweep has committed, read as a pure reader: a read-only connection that writes
// nothing (Store::open_existing sets WAL and creates the schema, which would contend with a
// running sweep creating its database); 0 while the table does not exist yet.
size_t rows_in(const std::string& db) {
  if (!fs::exists(db)) return 0;
  sqlite3* h = nullptr;
  size_t n = 0;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(h, 1000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, "SELECT COUNT(*) FROM points", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      n = static_cast<size_t>(sqlite3_column_int64(st, 0));
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return n;
}

std::string text_of(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Starts `stretto sweep SPEC --db DB -j 1` (stderr to `err`) and returns its pid once two points
// are committed. If the sweep ends first (or has not committed two points in 600 s) the test
// fails with how it ended and what it said, and -1 is returned.
pid_t start_sweep_until_two_rows(const std::string& spec, const std::string& db,
                                 const std::string& err) {
  const pid_t pid = fork();
  if (pid == 0) {
    freopen("/dev/null", "w", stdout);
    freopen(err.c_str(), "w", stderr);
    execl(STRETTO_BINARY, STRETTO_BINARY, "sweep", spec.c_str(), "--db", db.c_str(), "-j", "1",
          "--format", "json", static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid < 0) return pid;
  const auto t0 = std::chrono::steady_clock::now();
  while (rows_in(db) < 2) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      ADD_FAILURE() << "the sweep ended before two points were committed ("
                    << (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                          : "signal " + std::to_string(WTERMSIG(status)))
                    << ", " << rows_in(db) << " rows): " << text_of(err);
      return -1;
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(600)) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "no two points committed in 600 s: " << text_of(err);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pid;
}

}  // namespace

TEST(SweepCli, KillNineThenResumeLosesNothingAndRunsNothingTwice) {
  const fs::path dir = scratch("kill");
  const std::string db = (dir / "r.db").string();
  const std::string spec = data("resume.json");
  const pid_t pid = start_sweep_until_two_rows(spec, db, "/dev/null");
  ASSERT_GE(pid, 0);
  // Kill it once a few points are committed.
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the sweep finished before it could be killed";
  std::map<std::string, double> before;
  {
    auto s = Store::open_existing(db);
    ASSERT_TRUE(s);
    const auto rows = *s->rows();
    for (const auto& r : rows) before[r.hash] = r.wall_ms;
  }
  ASSERT_GE(before.size(), 2u);
  // The same command again: resumes.
  CliRun r = sh("sweep '" + spec + "' --db '" + db + "' -j 2 --format json", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  stretto::plan::Json j = stretto::plan::Json::parse(r.out);
  const size_t total = j["points"].get<size_t>();
  EXPECT_EQ(total, 3u * 2 * 15);
  EXPECT_NE(r.err.find(std::to_string(before.size()) + " resumed, " +
                       std::to_string(total - before.size()) + " run"),
            std::string::npos)
      << r.err;
  auto s = Store::open_existing(db);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->count(), total);
  for (const auto& [h, wall] : before) {
    auto row = s->row(h);
    ASSERT_TRUE(row);
    EXPECT_EQ(row->wall_ms, wall) << h;  // committed before the kill, never rerun
  }
  // A third run has nothing to do.
  CliRun again = sh("sweep '" + spec + "' --db '" + db + "' --format json", dir);
  EXPECT_EQ(again.code, 0);
  EXPECT_NE(again.err.find(std::to_string(total) + " resumed, 0 run"), std::string::npos)
      << again.err;
  fs::remove_all(dir);
}

// Ctrl-C ended a sweep silently: now the points running finish and are committed, and the
// sweep says how many points are saved and how to resume (exit 130).
TEST(SweepCli, InterruptSaysWhatIsSavedAndHowToResume) {
  const fs::path dir = scratch("sigint");
  const std::string db = (dir / "r.db").string();
  const std::string spec = data("resume.json");
  const fs::path err = dir / "stderr.txt";
  const pid_t pid = start_sweep_until_two_rows(spec, db, err.string());
  ASSERT_GE(pid, 0);
  ASSERT_EQ(kill(pid, SIGINT), 0);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 130);
  std::ifstream e(err);
  const std::string text((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  const size_t saved = rows_in(db);
  EXPECT_GE(saved, 2u);
  EXPECT_NE(text.find("sweep interrupted: " + std::to_string(saved) + " of 90 points"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("run the same command again to resume"), std::string::npos) << text;
  fs::remove_all(dir);
}

// `--plot FILE.svg`: one dot per simulated point, filled within the memory cap and hollow over
// it (the cap here is the points' median peak, so both kinds are drawn), the Pareto front's
// points marked and joined, each dot at its point's step time and peak as the database holds
// them; coloured by the schedule family. The chart may not replace the spec.
TEST(SweepCli, PlotDrawsEveryPointAndTheParetoFront) {
  const fs::path dir = scratch("plot");
  Json spec = Json::parse(std::ifstream(data("small.json")));
  spec["base"] = fs::canonical(fs::path(data("small.json")).parent_path() / spec["base"].get<std::string>()).string();
  std::ofstream(dir / "spec.json") << spec.dump(1);
  CliRun first = sh("sweep spec.json --db first.db --format json -j 2", dir);
  ASSERT_EQ(first.code, 0) << first.err;
  std::vector<double> peaks;
  const Json first_json = Json::parse(first.out);
  for (const auto& r : first_json["results"])
    if (r["status"] == "ok") peaks.push_back(r["metrics"]["peak_memory_bytes"].get<double>() / (1 << 30));
  ASSERT_GE(peaks.size(), 4u);
  std::sort(peaks.begin(), peaks.end());
  spec["memory_cap_GiB"] = peaks[peaks.size() / 2];
  std::ofstream(dir / "spec.json") << spec.dump(1);
  CliRun r = sh("sweep spec.json --db capped.db --format json -j 2 --plot chart.svg", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("written to chart.svg"), std::string::npos) << r.err;
  const Json all = Json::parse(r.out);
  ASSERT_GT(all["over_capacity"].get<int>(), 0);
  ASSERT_GT(all["ok"].get<int>(), 0);
  std::map<std::string, Json> by_hash;
  for (const auto& p : all["results"]) by_hash[p["hash"].get<std::string>()] = p;
  std::ifstream f(dir / "chart.svg");
  const std::string svg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(svg.rfind("<svg ", 0), 0u);
  std::map<std::string, int> dots;
  std::set<std::string> front, drawn;
  static const std::regex circle(
      R"re(<circle class="([^"]+)" cx="[^"]+" cy="[^"]+" r="[^"]+" fill="([^"]+)"[^>]*data-hash="([^"]+)" data-step-ms="([^"]+)" data-peak-gib="([^"]+)")re");
  for (std::sregex_iterator it(svg.begin(), svg.end(), circle), end; it != end; ++it) {
    const std::string cls = (*it)[1], fill = (*it)[2], hash = (*it)[3];
    SCOPED_TRACE(hash);
    ++dots[cls];
    EXPECT_TRUE(drawn.insert(hash).second) << "drawn twice";
    ASSERT_TRUE(by_hash.count(hash));
    const Json& p = by_hash[hash];
    EXPECT_EQ(cls == "over", p["status"] == "over_capacity") << cls;
    EXPECT_EQ(fill == "none", cls == "over");
    EXPECT_NEAR(std::stod((*it)[4]), p["metrics"]["step_time_ms"].get<double>(), 5e-4);
    EXPECT_NEAR(std::stod((*it)[5]), p["metrics"]["peak_memory_bytes"].get<double>() / (1 << 30), 5e-4);
    if (cls == "ok front") front.insert(hash);
  }
  EXPECT_EQ(dots["ok"] + dots["ok front"], all["ok"].get<int>());
  EXPECT_EQ(dots["over"], all["over_capacity"].get<int>());
  CliRun p = sh("sweep spec.json --db capped.db --format json --pareto", dir);
  ASSERT_EQ(p.code, 0) << p.err;
  std::set<std::string> want;
  const Json pareto = Json::parse(p.out);
  for (const auto& q : pareto["pareto"]) want.insert(q["hash"].get<std::string>());
  EXPECT_EQ(front, want);
  EXPECT_NE(svg.find("<polyline class=\"front\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"cap\""), std::string::npos);
  EXPECT_NE(svg.find(">family</text>"), std::string::npos) << "the legend names the colour key";
  // Never over an input.
  const CliRun over = sh("sweep spec.json --db capped.db --plot spec.json", dir);
  EXPECT_EQ(over.code, 2) << over.err;
  EXPECT_NE(over.err.find("spec.json"), std::string::npos) << over.err;
  EXPECT_EQ(Json::parse(std::ifstream(dir / "spec.json")), spec);
  fs::remove_all(dir);
}

TEST(SweepCli, FormatsParetoTopEmitBestAndMerge) {
  const fs::path dir = scratch("formats");
  const std::string spec = data("small.json");
  CliRun j = sh("sweep '" + spec + "' --format json -j 2", dir);
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_TRUE(fs::exists(dir / "small.db"));  // default database name
  stretto::plan::Json all = stretto::plan::Json::parse(j.out);
  EXPECT_GT(all["invalid"].get<int>(), 0);
  bool saw_diag = false;
  for (const auto& r : all["results"])
    if (r["status"] == "invalid") saw_diag = saw_diag || !r["diagnostic"].get<std::string>().empty();
  EXPECT_TRUE(saw_diag);

  CliRun top = sh("sweep '" + spec + "' --top 3 --format json --emit-best best.json", dir);
  ASSERT_EQ(top.code, 0) << top.err;
  stretto::plan::Json t = stretto::plan::Json::parse(top.out);
  ASSERT_EQ(t["top"].size(), 3u);
  const double best = t["top"][0]["metrics"]["step_time_ms"];
  EXPECT_LE(best, t["top"][1]["metrics"]["step_time_ms"].get<double>());
  // The emitted plan is runnable and predicts the same step time.
  CliRun sim = sh("simulate best.json --format json", dir);
  ASSERT_EQ(sim.code, 0) << sim.err;
  EXPECT_EQ(stretto::plan::Json::parse(sim.out)["step_time_ms"].get<double>(), best);

  CliRun p = sh("sweep '" + spec + "' --pareto --format json", dir);
  ASSERT_EQ(p.code, 0);
  stretto::plan::Json front = stretto::plan::Json::parse(p.out)["pareto"];
  ASSERT_FALSE(front.empty());
  for (size_t i = 1; i < front.size(); ++i) {  // faster first, memory strictly decreasing
    EXPECT_GE(front[i]["metrics"]["step_time_ms"].get<double>(),
              front[i - 1]["metrics"]["step_time_ms"].get<double>());
    EXPECT_LT(front[i]["metrics"]["peak_memory_bytes"].get<int64_t>(),
              front[i - 1]["metrics"]["peak_memory_bytes"].get<int64_t>());
  }
  CliRun csv = sh("sweep '" + spec + "' --format csv", dir);
  ASSERT_EQ(csv.code, 0);
  EXPECT_EQ(csv.out.rfind("hash,dp,ep,family,microbatches,pp,tp,zero,status,step_time_ms", 0), 0u)
      << csv.out.substr(0, 200);
  CliRun table = sh("sweep '" + spec + "' --pareto --format table", dir);
  EXPECT_NE(table.out.find("Pareto front, step time vs peak memory"), std::string::npos);

  // Two shards through the CLI, merged, equal the unsharded database.
  for (int i = 0; i < 2; ++i) {
    CliRun s = sh("sweep '" + spec + "' --shard " + std::to_string(i) + "/2 --format json", dir);
    ASSERT_EQ(s.code, 0) << s.err;
    EXPECT_TRUE(fs::exists(dir / ("small.shard" + std::to_string(i) + "of2.db")));
  }
  CliRun m = sh("sweep merge merged.db small.shard0of2.db small.shard1of2.db --format json", dir);
  ASSERT_EQ(m.code, 0) << m.err;
  stretto::plan::Json mj = stretto::plan::Json::parse(m.out);
  EXPECT_EQ(mj["points"], all["points"]);
  auto strip = [](stretto::plan::Json rows) {
    for (auto& r : rows) {
      r.erase("wall_ms");
      if (r.contains("metrics")) r["metrics"].erase("sim_wall_ms");
    }
    return rows;
  };
  EXPECT_EQ(strip(mj["results"]), strip(all["results"]));
  // Bad input: exit 2 with a message.
  CliRun bad = sh("sweep '" + spec + "' --shard 3/2", dir);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("expected I/N"), std::string::npos);
  CliRun missing = sh("sweep merge out.db nosuch.db", dir);
  EXPECT_EQ(missing.code, 2);
  CliRun nospec = sh("sweep nosuch.json", dir);
  EXPECT_EQ(nospec.code, 2);
  EXPECT_NE(nospec.err.find("nosuch.json"), std::string::npos) << nospec.err;
  std::ofstream(dir / "typo.json") << R"({"base": ")" << STRETTO_EXAMPLES
                                   << R"(/gpt_pp4_dp2_1f1b.json", "axes": {"microbatchs": [4]}})";
  CliRun typo = sh("sweep typo.json", dir);
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.err.find("typo.json:1:"), std::string::npos) << typo.err;
  EXPECT_NE(typo.err.find("did you mean 'microbatches'?"), std::string::npos) << typo.err;
  fs::remove_all(dir);
}

// Exposed communication per device, under simulate's name and unit (ms): the database row, the
// CSV and the table of a sweep give what `simulate --format json` gives for the point's plan.
TEST(SweepCli, ExposedCommPerDeviceIsSimulatesInEveryFormat) {
  const fs::path dir = scratch("exposed");
  const std::string spec = std::string(STRETTO_EXAMPLES) + "/sweeps/interconnect.json";
  CliRun top = sh("sweep '" + spec + "' --db ic.db -j 1 --top 1 --format json --emit-best best.json",
                  dir);
  ASSERT_EQ(top.code, 0) << top.err;
  const std::string hash = stretto::plan::Json::parse(top.out)["top"][0]["hash"];
  CliRun sim = sh("simulate best.json --format json", dir);
  ASSERT_EQ(sim.code, 0) << sim.err;
  const stretto::plan::Json simulated = stretto::plan::Json::parse(sim.out);
  const double per_device = simulated["exposed_comm_ms_per_device"];
  ASSERT_GT(per_device, 0);
  EXPECT_NEAR(per_device, simulated["exposed_comm_ms"].get<double>() / simulated["devices"].size(),
              1e-9);
  // The database row.
  auto store = Store::open_existing((dir / "ic.db").string());
  ASSERT_TRUE(store);
  const auto row = store->row(hash);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->exposed_comm_ms_per_device, per_device);
  EXPECT_EQ(stretto::plan::Json::parse(row->metrics)["exposed_comm_ms_per_device"].get<double>(),
            per_device);
  // CSV: the column, by name.
  CliRun csv = sh("sweep '" + spec + "' --db ic.db --top 1 --format csv", dir);
  ASSERT_EQ(csv.code, 0) << csv.err;
  const std::string header = csv.out.substr(0, csv.out.find('\n'));
  const std::string line = csv.out.substr(header.size() + 1, csv.out.find('\n', header.size() + 1) -
                                                                   header.size() - 1);
  auto cells = [](const std::string& s) {
    std::vector<std::string> out(1);
    for (char c : s) {
      if (c == ',') out.emplace_back();
      else out.back().push_back(c);
    }
    return out;
  };
  const auto names = cells(header), values = cells(line);
  const auto at = std::find(names.begin(), names.end(), "exposed_comm_ms_per_device");
  ASSERT_NE(at, names.end()) << header;
  ASSERT_EQ(values.size(), names.size()) << line;
  EXPECT_NEAR(std::stod(values[static_cast<size_t>(at - names.begin())]), per_device, 1e-9);
  // The table: its column, in ms.
  CliRun table = sh("sweep '" + spec + "' --db ic.db --top 1 --format table", dir);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("exposed ms/dev"), std::string::npos) << table.out;
  const size_t row_at = table.out.find(hash);
  ASSERT_NE(row_at, std::string::npos) << table.out;
  EXPECT_NE(table.out.substr(row_at, table.out.find('\n', row_at) - row_at)
                .find(fmt::format("  {:.3f}  ok", per_device)),
            std::string::npos)
      << table.out;
  fs::remove_all(dir);
}

TEST(SweepCli, SearchBeatsOrMatchesTheMegatronDefaultAndEmitsARunnablePlan) {
  const fs::path dir = scratch("search");
  CliRun r = sh(std::string("search '") + STRETTO_EXAMPLES +
                 "/gpt_pp4_dp2_1f1b.json' --devices 8 --budget 60 -j 2 --format json --emit "
                 "found.json",
             dir);
  ASSERT_EQ(r.code, 0) << r.err;
  stretto::plan::Json j = stretto::plan::Json::parse(r.out);
  ASSERT_FALSE(j["best"].is_null());
  ASSERT_FALSE(j["megatron_default"].is_null());
  EXPECT_GE(j["speedup_vs_megatron_default"].get<double>(), 1.0);
  EXPECT_GT(j["space"].get<int>(), j["simulated"].get<int>());
  CliRun sim = sh("simulate found.json --format json", dir);
  ASSERT_EQ(sim.code, 0) << sim.err;
  EXPECT_EQ(stretto::plan::Json::parse(sim.out)["step_time_ms"],
            j["best"]["metrics"]["step_time_ms"]);
  fs::remove_all(dir);
}
