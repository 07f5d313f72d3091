// `stretto profile` and `stretto validate` end to end: real two-process replays over Gloo.
// No timing assertions: these check what is measured, filed and aligned, not how fast.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "stretto/backend/validate.h"
#include "stretto/costmodel/profile_table.h"
#include "stretto/sim/session.h"
#include "stretto/plan/json_source.h"
#include "../traces/run_cli.h"

using namespace stretto;
using namespace stretto::plan;
using namespace stretto::compiler;

namespace {

const std::string kData = std::string(STRETTO_TEST_DATA) + "/loop/";

// One stderr file per test process: ctest runs these tests in parallel processes, and a shared
// path let one test read another's stderr.
std::string err_path() {
  return ::testing::TempDir() + "stretto_loop_test_err." + std::to_string(::getpid());
}

std::pair<int, std::string> cli(const std::string& args) { return run_stretto(args, err_path()); }

std::string stderr_text() {
  std::ifstream f(err_path());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST(Loop, RankingReversalsAreWeighedAgainstTheMeasuredNoise) {
  // Three plans: b and c are predicted in the wrong order. a-vs-c is measured far apart
  // (resolved); b-vs-c lies within twice the standard error of the difference (not resolved).
  auto plan = [](const char* name, double pred_ms, double mean, double std, int n) {
    backend::PlanValidation p;
    p.plan = name;
    p.predicted_ns = static_cast<int64_t>(pred_ms * 1e6);
    p.measured_mean_ms = mean;
    p.measured_std_ms = std;
    p.measured_steps = n;
    return p;
  };
  // a: predicted 100 vs measured 100; b: 200 vs 150; c: 140 vs 152 (std 10, 25 steps: se 2.83)
  std::vector<backend::PlanValidation> v = {plan("a", 100, 100, 10, 25), plan("b", 200, 150, 10, 25),
                                            plan("c", 140, 152, 10, 25)};
  Json j = backend::validation_json(v);
  ASSERT_EQ(j["ranking_reversals"].size(), 1u) << j["ranking_reversals"].dump();
  EXPECT_EQ(j["ranking_reversals"][0]["faster"], "b");
  EXPECT_EQ(j["ranking_reversals"][0]["slower"], "c");
  EXPECT_NEAR(j["ranking_reversals"][0]["measured_diff_ms"].get<double>(), 2.0, 1e-9);
  EXPECT_NEAR(j["ranking_reversals"][0]["measured_diff_se_ms"].get<double>(), std::sqrt(8.0), 1e-9);
  EXPECT_FALSE(j["ranking_reversals"][0]["resolved"].get<bool>());
  EXPECT_EQ(j["ranking_reversals_resolved"], 0);
  // measured 20 ms apart instead: the same reversal is now resolved
  v[2].measured_mean_ms = 170;
  j = backend::validation_json(v);
  ASSERT_EQ(j["ranking_reversals"].size(), 1u);
  EXPECT_TRUE(j["ranking_reversals"][0]["resolved"].get<bool>());
  EXPECT_EQ(j["ranking_reversals_resolved"], 1);
  const std::string t = backend::validation_table(v);
  EXPECT_NE(t.find("1 pair(s) ranked the other way round; 1 of them"), std::string::npos) << t;
}

TEST(Loop, ValidateReportsTableCoverageAndWarnsUnderNinetyPercent) {
  backend::PlanValidation p;
  p.plan = "a";
  p.predicted_ns = 100000000;
  p.measured_mean_ms = 100;
  sim::TableCoverage c;
  c.ops = 10;
  c.ops_measured = 8;
  c.collectives = 2;
  c.collectives_measured = 2;
  c.ops_fell_back = {"attention BW"};
  p.coverage = c;  // 10 of 12: 83.3 %
  Json j = backend::validation_json({p});
  ASSERT_TRUE(j["plans"][0].contains("table_coverage")) << j.dump();
  EXPECT_NEAR(j["plans"][0]["table_coverage"]["percent"].get<double>(), 100.0 * 10 / 12, 1e-9);
  EXPECT_EQ(j["plans"][0]["table_coverage"]["ops_fell_back"][0], "attention BW");
  EXPECT_TRUE(j["plans"][0]["table_coverage_low"].get<bool>());
  std::string t = backend::validation_table({p});
  EXPECT_NE(t.find("table covers    83.3 %: 8 of 10 ops, 2 of 2 collectives"), std::string::npos) << t;
  EXPECT_NE(t.find("analytic ops    attention BW"), std::string::npos) << t;
  EXPECT_NE(t.find("warning: the table covers under 90 %"), std::string::npos) << t;
  // at 11 of 12 (91.7 %) no warning
  p.coverage->ops_measured = 9;
  t = backend::validation_table({p});
  EXPECT_EQ(t.find("warning"), std::string::npos) << t;
  EXPECT_FALSE(backend::validation_json({p})["plans"][0]["table_coverage_low"].get<bool>());
}

TEST(Loop, ValidateReportsTheMeasuredNoiseNextToTheError) {
  const int64_t ms = 1000000;
  // a drift between the two halves (rounds) dominates: half means 10 and 20, mean 15
  EXPECT_NEAR(backend::measured_noise_pct({10 * ms, 10 * ms, 10 * ms, 10 * ms, 20 * ms, 20 * ms,
                                           20 * ms, 20 * ms}),
              100.0 * 10 / 15, 1e-9);
  // alternating steps, no drift: twice the standard error of the mean, 2 sqrt(200/7/8) / 15
  EXPECT_NEAR(backend::measured_noise_pct({10 * ms, 20 * ms, 10 * ms, 20 * ms, 10 * ms, 20 * ms,
                                           10 * ms, 20 * ms}),
              100.0 * 2 * std::sqrt(200.0 / 7 / 8) / 15, 1e-9);
  EXPECT_TRUE(std::isnan(backend::measured_noise_pct({10 * ms, 20 * ms, 10 * ms})));
  // in the report: per plan, and how many errors lie within their noise
  backend::PlanValidation a, b;
  a.plan = "a";
  a.predicted_ns = 103 * ms;
  a.measured_mean_ms = 100;
  a.step_err = 0.03;
  a.noise_pct = 5;
  b = a;
  b.plan = "b";
  b.predicted_ns = 240 * ms;
  b.measured_mean_ms = 200;
  b.step_err = 0.2;
  b.noise_pct = 4;
  const Json j = backend::validation_json({a, b});
  EXPECT_EQ(j["plans"][0]["noise_pct"], 5.0);
  EXPECT_TRUE(j["plans"][0]["error_within_noise"].get<bool>());
  EXPECT_FALSE(j["plans"][1]["error_within_noise"].get<bool>());
  EXPECT_EQ(j["mean_noise_pct"], 4.5);
  EXPECT_EQ(j["errors_within_noise"], 1);
  const std::string t = backend::validation_table({a, b});
  EXPECT_NE(t.find("error +3.0% (measured noise ±5.0%: within it, not told from noise)"),
            std::string::npos) << t;
  EXPECT_NE(t.find("error +20.0% (measured noise ±4.0%)"), std::string::npos) << t;
  EXPECT_NE(t.find("measured noise: mean ±4.5%; 1 of 2 plans' errors within their noise"),
            std::string::npos) << t;
}

// validate's step error on these tiny plans, with a table profiled seconds before on the same
// host: -3.5 % and +6.6 % on an idle machine, but anywhere from -76 % to +749 % on a shared
// 2-core machine at load average 11-13 (the replays' wall time, mostly waits for the peer,
// follows the neighbours, and the table profiled seconds before may have been timed under
// another load; a tighter bound would be a timed test). So this is a sanity bound, predicted /
// measured within a factor of 20 either way, not an accuracy target: it catches a table read in
// the wrong unit or not at all (ProfileThenValidate's control).
constexpr double kStepRatioSanity = 20;

TEST(Loop, ProfileThenValidate) {
  const std::string table = ::testing::TempDir() + "stretto_loop_profile.json";
  auto [rc, out] = cli("profile " + kData + "pp2_1f1b_tiny.json --iterations 2 --format json -o " +
                       table);
  ASSERT_EQ(rc, 0) << stderr_text();
  Json stats = Json::parse(out);
  EXPECT_GT(stats["op_instances"].get<int>(), 0);
  // every compute op kind of the model was measured, and the pipeline's send/recv
  std::set<std::string> ops;
  for (const auto& k : stats["profile"]["kernels"]) ops.insert(k["op"].get<std::string>());
  for (const char* op : {"embedding", "norm", "qkv", "attention", "out_proj", "mlp_up", "mlp_act",
                         "mlp_down", "head", "loss"})
    EXPECT_TRUE(ops.count(op)) << op;
  bool p2p = false;
  for (const auto& c : stats["profile"]["collectives"]) p2p |= c["kind"] == "send_recv";
  EXPECT_TRUE(p2p);
  // the host's cores go into the table as the simulator's host_cores (the two processes fit
  // unless the host has one core, when the plan is replayed but not filed)
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(stats["profile"]["options"]["host_cores"].get<int>(), cores);
  EXPECT_EQ(stats["plans_not_filed_oversubscribed"].get<int>(), cores < 2 ? 1 : 0);
  // the host thread's per-op bookkeeping, measured (the simulator's host_op_us)
  if (cores >= 2) {
    EXPECT_GT(stats["profile"]["options"]["host_op_us"].get<double>(), 0.0);
  }
  // each entry is its series' mean, which lies between the series' min and max
  int means_checked = 0;
  for (const auto& c : stats["collectives"]) {
    if (c["kind"] != "send_recv") continue;
    for (const auto& e : stats["profile"]["collectives"]) {
      if (e["kind"] != "send_recv") continue;
      for (const auto& b : c["by_bytes"]) {
        if (b["size"] != e["bytes"]) continue;
        EXPECT_EQ(e["ns"], b["mean_ns"]);
        ++means_checked;
        EXPECT_GE(b["mean_ns"].get<int64_t>(), b["min_ns"].get<int64_t>());
        EXPECT_LE(b["mean_ns"].get<int64_t>(), b["max_ns"].get<int64_t>());
      }
    }
  }
  EXPECT_GT(means_checked, 0);
  // the table reads back as a profiled cost table
  auto t = cost::load_profile_table(table);
  ASSERT_TRUE(t) << render_all(t.error());

  // validate two plans with it: every op aligned, the step predicted within the sanity bound,
  // a ranking
  auto [rc2, out2] = cli("validate " + kData + "pp2_1f1b_tiny.json " + kData +
                         "pp2_gpipe_tiny.json --iterations 2 --format json --profile " + table);
  ASSERT_EQ(rc2, 0) << stderr_text();
  Json v = Json::parse(out2);
  ASSERT_EQ(v["plans"].size(), 2u);
  for (const auto& p : v["plans"]) {
    EXPECT_GT(p["matched_ops"].get<int>(), 0);
    EXPECT_EQ(p["only_in_a"]["count"], 0) << p["only_in_a"].dump();
    EXPECT_EQ(p["only_in_b"]["count"], 0) << p["only_in_b"].dump();
    const double err = p["step_err_pct"].get<double>();
    std::printf("%s: step error %+.1f %% with the table just measured\n",
                p["plan"].get<std::string>().c_str(), err);
    const double ratio = 1 + err / 100;
    EXPECT_LE(ratio, kStepRatioSanity) << p["plan"];
    EXPECT_GE(ratio, 1 / kStepRatioSanity) << p["plan"];
    EXPECT_GT(p["measured_step_ms"].get<double>(), 0);
    std::set<std::string> classes;
    for (const auto& c : p["op_classes"]) classes.insert(c["class"].get<std::string>());
    for (const char* c : {"F", "B", "send", "recv"}) EXPECT_TRUE(classes.count(c)) << c;
  }
  EXPECT_TRUE(v.contains("kendall_tau"));

  // The control, against the same measurements: validate's prediction is the simulator's with
  // the table (checked), so the prediction with a broken table (every kernel and collective
  // 1000x: ns read as us) is simulated here. It is more than kStepRatioSanity^2 times the right
  // table's prediction, so whenever the right table is within the bound this one is not; and
  // against the measured step it is out.
  Json wrong = Json::parse(std::ifstream(table));
  for (const char* section : {"kernels", "collectives"})
    for (auto& k : wrong[section]) k["ns"] = 1000 * k["ns"].get<int64_t>();
  const std::string wrong_table = ::testing::TempDir() + "stretto_loop_profile_1000x.json";
  std::ofstream(wrong_table) << wrong.dump();
  auto predicted_ms = [&](const std::string& plan, const std::string& profile) {
    auto s = sim::Session::open(plan);
    EXPECT_TRUE(s) << render_all(s.error());
    CostModelSpec spec = s->plan().costmodel;
    spec.kind = CostModelSpec::Kind::kProfiled;
    spec.profile = profile;
    auto e = s->set_costmodel(spec);
    EXPECT_TRUE(e) << render_all(e.error());
    auto r = s->simulate();
    EXPECT_TRUE(r) << render_all(r.error());
    return r ? static_cast<double>(r->step_time) / 1e6 : -1.0;
  };
  for (const auto& p : v["plans"]) {
    const std::string plan = p["plan"];
    const double right = predicted_ms(plan, table), broken = predicted_ms(plan, wrong_table);
    EXPECT_NEAR(right, p["predicted_step_ms"].get<double>(), 1e-6) << plan;
    EXPECT_GT(broken / right, kStepRatioSanity * kStepRatioSanity) << plan;
    const double ratio = broken / p["measured_step_ms"].get<double>();
    std::printf("%s: predicted / measured %.1f with the table 1000x slow\n", plan.c_str(), ratio);
    EXPECT_GT(ratio, kStepRatioSanity) << plan;
  }
  std::remove(table.c_str());
  std::remove(wrong_table.c_str());
}

TEST(Loop, ProfileMeasuresComputeAfterCommunicationCold) {
  // The same model replicated over two processes, with and without ZeRO-3: under ZeRO-3 each
  // op computes right after its parameters' all-gather, without it after the previous compute
  // op, so the two plans time the same series in both contexts and the table carries the
  // measured all_gather factor (host_cold_factor), which the profiled model reads back.
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 cores (2 processes)";
  const std::string table = ::testing::TempDir() + "stretto_loop_cold_profile.json";
  auto [rc, out] = cli("profile " + kData + "dp2_tiny.json " + kData +
                       "dp2_zero3_tiny.json --iterations 2 --format json -o " + table);
  ASSERT_EQ(rc, 0) << stderr_text();
  Json stats = Json::parse(out);
  ASSERT_TRUE(stats["profile"]["options"].contains("host_cold_factor")) << stats["profile"]["options"].dump();
  const Json& f = stats["profile"]["options"]["host_cold_factor"];
  ASSERT_TRUE(f.contains("all_gather")) << f.dump();
  EXPECT_GE(f["all_gather"].get<double>(), 0.25);
  EXPECT_LE(f["all_gather"].get<double>(), 4.0);
  auto t = cost::load_profile_table(table);
  ASSERT_TRUE(t) << render_all(t.error());
  EXPECT_EQ(t->options["host_cold_factor"], f);
  std::remove(table.c_str());
}

// Files every compute op of dp2_tiny.json at 1000 ns, after compute, over 3 steps, into
// `samples` (host of 2 cores): warm table times for the arithmetic tests below.
static void file_warm_dp2(backend::ProfileSamples& samples) {
  auto dp2 = sim::Session::open(kData + "dp2_tiny.json");
  ASSERT_TRUE(dp2) << render_all(dp2.error());
  samples.set_host_cores(2);
  backend::ReplayResult warm;
  warm.world_size = 2;
  for (int it = 0; it < 3; ++it)
    for (uint32_t n = 0; n < dp2->compiled().dag.nodes.size(); ++n)
      if (dp2->compiled().dag.nodes[n].kind == NodeKind::kCompute)
        warm.ops.push_back({0, "compute", "", n, it, 0, 1000, 0});
  EXPECT_GT(samples.add(dp2->compiled(), warm), 0u);
}

// Every kernel time of a profiled table is `ns` (and it has some).
static void expect_every_kernel_ns(const Json& t, int64_t ns) {
  ASSERT_FALSE(t["kernels"].empty());
  for (const auto& k : t["kernels"]) EXPECT_EQ(k["ns"].get<int64_t>(), ns) << k.dump();
}

TEST(Loop, ColdFactorIsTheTimeWeightedRatioAndTheTableIsWarm) {
  // The arithmetic of cold_factors on records with known times (no replay): one plan files
  // every compute op at 1000 ns after compute; the ZeRO-3 plan files each right after an
  // all-gather at 1250 ns. The all_gather factor is 1.25 and the table's kernel times are the
  // warm 1000 ns (cold samples divided by the factor).
  backend::ProfileSamples samples;
  ASSERT_NO_FATAL_FAILURE(file_warm_dp2(samples));
  auto z3 = sim::Session::open(kData + "dp2_zero3_tiny.json");
  ASSERT_TRUE(z3) << render_all(z3.error());
  backend::ReplayResult cold;
  cold.world_size = 2;
  const auto& zn = z3->compiled().dag.nodes;
  uint32_t gather = UINT32_MAX;
  for (uint32_t n = 0; n < zn.size() && gather == UINT32_MAX; ++n)
    if (zn[n].kind == NodeKind::kCollective && zn[n].comm == CommKind::kAllGather) gather = n;
  ASSERT_NE(gather, UINT32_MAX);
  for (int it = 0; it < 3; ++it)
    for (uint32_t n = 0; n < zn.size(); ++n)
      if (zn[n].kind == NodeKind::kCompute) {
        cold.ops.push_back({0, "dp", "", gather, it, 0, 500, 0});
        cold.ops.push_back({0, "compute", "", n, it, 500, 1750, 0});
      }
  ASSERT_GT(samples.add(z3->compiled(), cold), 0u);
  const auto f = samples.cold_factors();
  EXPECT_NEAR(f[static_cast<size_t>(CommKind::kAllGather)], 1.25, 1e-12);
  EXPECT_TRUE(std::isnan(f[static_cast<size_t>(CommKind::kAllToAll)]));  // never measured
  const Json t = samples.table("cpu");
  EXPECT_EQ(t["options"]["host_cold_factor"], Json({{"all_gather", 1.25}}));
  expect_every_kernel_ns(t, 1000);
}

TEST(Loop, ReuseFactorIsTheStaleOverFreshRatioAndTheTableIsFresh) {
  // The arithmetic of reuse_factors on records with known times (no replay): a GPipe step of 2
  // microbatches on 2 stages runs both forwards before both backwards on each device, so the
  // backward ops of microbatch 0 reuse activations at distance 1 (microbatch 1's forward ran
  // since theirs) and those of microbatch 1 fresh ones. Filed at 1500 ns and 1000 ns (every
  // other op 1000 ns, each device's ops back to back in dispatch order), the distance-1 factor
  // is 1.5, longer distances are not measured, and the table's kernel times are the fresh
  // 1000 ns.
  backend::ProfileSamples samples;
  samples.set_host_cores(2);
  auto gp = sim::Session::open(kData + "pp2_gpipe_tiny.json");
  ASSERT_TRUE(gp) << render_all(gp.error());
  const CompiledPlan& cp = gp->compiled();
  backend::ReplayResult r;
  r.world_size = 2;
  int stale = 0, fresh = 0;
  for (int it = 0; it < 3; ++it)
    for (int d = 0; d < 2; ++d) {
      int64_t t = 0;
      for (uint32_t n : cp.topo_order) {
        const Node& nd = cp.dag.nodes[n];
        if (nd.kind != NodeKind::kCompute || cp.dag.device_sets[nd.devs].devices[0] != d) continue;
        const bool backward = nd.tags.pass == Pass::kB && !nd.recompute &&
                              cp.model.ops[nd.op].kind != OpKind::kOptimizer;
        const int64_t dur = backward && nd.tags.mb() == 0 ? 1500 : 1000;
        if (backward) ++(nd.tags.mb() == 0 ? stale : fresh);
        r.ops.push_back({d, "compute", "", n, it, t, t + dur, 0});
        t += dur;
      }
    }
  ASSERT_GT(stale, 0);
  ASSERT_GT(fresh, 0);
  EXPECT_TRUE(std::isnan(samples.reuse_factors()[1]));  // nothing filed yet
  ASSERT_GT(samples.add(cp, r), 0u);
  const auto f = samples.reuse_factors();
  EXPECT_EQ(f[0], 1.0);
  EXPECT_NEAR(f[1], 1.5, 1e-12);
  EXPECT_TRUE(std::isnan(f[2]));
  EXPECT_TRUE(std::isnan(f[3]));
  const Json t = samples.table("cpu");
  EXPECT_EQ(t["options"]["host_reuse_factor"], Json::array({1.5}));
  expect_every_kernel_ns(t, 1000);
}

TEST(Loop, ShareEfficiencySolvesTheMeasuredConcurrency) {
  // The arithmetic of share_efficiency on records with known times (no replay): the
  // two-process plan files every compute op at 1000 ns (warm table times); the four-process
  // plan, on a host of 2 cores, runs four forward ops per step: three over [0, 4000) and one
  // over [0, 6000). While all four run (a = 4 > 2 cores) each gets 2/4 of a core: 2000 ns of
  // share each; the long op then runs alone for 2000 ns (a = 1 <= 2). Per step: W = 4 x 1000,
  // under = 2000, shared = 4 x 2000, so efficiency = (4000 - 2000) / 8000 = 0.25.
  backend::ProfileSamples samples;
  ASSERT_NO_FATAL_FAILURE(file_warm_dp2(samples));
  auto pp2dp2 = sim::Session::open(kData + "pp2_dp2_tiny.json");
  ASSERT_TRUE(pp2dp2) << render_all(pp2dp2.error());
  EXPECT_FALSE(samples.share_efficiency());  // nothing oversubscribed yet
  std::vector<uint32_t> fwd;  // four forward ops of the model's layers
  const auto& nodes = pp2dp2->compiled().dag.nodes;
  for (uint32_t n = 0; n < nodes.size() && fwd.size() < 4; ++n)
    if (nodes[n].kind == NodeKind::kCompute && nodes[n].tags.pass == Pass::kF &&
        pp2dp2->compiled().model.ops[nodes[n].op].kind != OpKind::kOptimizer)
      fwd.push_back(n);
  ASSERT_EQ(fwd.size(), 4u);
  backend::ReplayResult shared;
  shared.world_size = 4;
  for (int it = 0; it < 5; ++it)
    for (int d = 0; d < 4; ++d)
      shared.ops.push_back({d, "compute", "", fwd[static_cast<size_t>(d)], it, 0, d == 0 ? 6000 : 4000, 0});
  EXPECT_EQ(samples.add(pp2dp2->compiled(), shared), 0u);  // oversubscribed: not filed
  EXPECT_EQ(samples.skipped(), 1u);
  EXPECT_EQ(samples.share_ops(), 20u);
  ASSERT_TRUE(samples.share_efficiency());
  EXPECT_NEAR(*samples.share_efficiency(), 0.25, 1e-9);
  EXPECT_EQ(samples.table("cpu")["options"]["host_share_efficiency"].get<double>(), 0.25);
}

TEST(Loop, ProfileMeasuresTheShareOfOversubscribedCores) {
  // Four processes (PP2 x DP2) on a host with fewer than four cores are replayed but not filed;
  // their compute ops, against the same model's table times from the two-process plan, give
  // the share of the cores the processes got while they outnumbered them.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores < 2 || cores >= 4)
    GTEST_SKIP() << "needs a host of 2 or 3 cores (4 processes oversubscribe it; the 2-process "
                    "plan fits); this one has "
                 << cores;
  const std::string table = ::testing::TempDir() + "stretto_loop_share_profile.json";
  auto [rc, out] = cli("profile " + kData + "dp2_tiny.json " + kData +
                       "pp2_dp2_tiny.json --iterations 16 --format json -o " + table);
  ASSERT_EQ(rc, 0) << stderr_text();
  Json stats = Json::parse(out);
  EXPECT_EQ(stats["plans_not_filed_oversubscribed"].get<int>(), 1);
  // Which ops overlap is up to the operating system: with four processes computing most of
  // each step on two cores, some compute ops always run while three or four do (and have a
  // table time from the two-process plan); the efficiency needs 20 of them.
  ASSERT_TRUE(stats.contains("host_share_ops")) << stats.dump();
  const int ops = stats["host_share_ops"].get<int>();
  EXPECT_GT(ops, 0);
  if (ops < 20) GTEST_SKIP() << "only " << ops << " oversubscribed compute ops this time";
  ASSERT_TRUE(stats["profile"]["options"].contains("host_share_efficiency"))
      << stats["profile"]["options"].dump();
  const double e = stats["profile"]["options"]["host_share_efficiency"].get<double>();
  EXPECT_GE(e, 0.05);
  EXPECT_LE(e, 1.0);
  auto t = cost::load_profile_table(table);
  ASSERT_TRUE(t) << render_all(t.error());
  std::remove(table.c_str());
}

TEST(Loop, ProfileThatMeasuredNothingFailsUnlessForced) {
  // Four processes on a host of fewer cores: replayed, nothing filed. Writing that empty table
  // would make every later simulation fall back to the analytic model without a word.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores < 1 || cores >= 4)
    GTEST_SKIP() << "needs a host of fewer than 4 cores (4 processes oversubscribe it); this one has "
                 << cores;
  const std::string table = ::testing::TempDir() + "stretto_loop_nothing_profile.json";
  std::remove(table.c_str());
  auto [rc, out] = cli("profile " + kData + "pp2_dp2_tiny.json --iterations 1 --warmup 0 --format json -o " +
                       table);
  EXPECT_EQ(rc, 2);
  const std::string err = stderr_text();
  EXPECT_NE(err.find("profile: measured nothing: 1 plan(s) need more processes than this host's"),
            std::string::npos) << err;
  EXPECT_NE(err.find("--force"), std::string::npos) << err;
  EXPECT_FALSE(std::ifstream(table).good()) << "no table is written";
  // --force files them all the same
  auto [rc2, out2] = cli("profile " + kData + "pp2_dp2_tiny.json --iterations 1 --warmup 0 --force "
                         "--format json -o " + table);
  ASSERT_EQ(rc2, 0) << stderr_text();
  Json stats = Json::parse(out2);
  EXPECT_EQ(stats["plans_filed_oversubscribed"].get<int>(), 1);
  EXPECT_GT(stats["op_instances"].get<int>(), 0);
  EXPECT_FALSE(stats["profile"]["kernels"].empty());
  std::remove(table.c_str());
}

TEST(Loop, ValidateProfilesInlineOverRounds) {
  // the table measured from one plan, interleaved with the validated plan over two rounds
  const std::string table = ::testing::TempDir() + "stretto_loop_inline_profile.json";
  auto [rc, out] = cli("validate " + kData + "pp2_gpipe_tiny.json --profile-from " + kData +
                       "pp2_1f1b_tiny.json --save-profile " + table +
                       " --rounds 2 --iterations 1 --warmup 0 --format json");
  ASSERT_EQ(rc, 0) << stderr_text();
  Json v = Json::parse(out);
  ASSERT_EQ(v["plans"].size(), 1u);
  const Json& p = v["plans"][0];
  EXPECT_EQ(p["measured_steps"], 2);  // one step from each round, pooled
  EXPECT_GT(p["matched_ops"].get<int>(), 0);
  EXPECT_EQ(p["only_in_a"]["count"], 0) << p["only_in_a"].dump();
  EXPECT_TRUE(std::isfinite(p["step_err_pct"].get<double>()));
  // the saved table reads back, with the profiled plan's ops (every op kind of the model)
  auto t = cost::load_profile_table(table);
  ASSERT_TRUE(t) << render_all(t.error());
  EXPECT_FALSE(t->shape_kernels.empty());
  EXPECT_FALSE(t->collectives.empty());
  std::remove(table.c_str());

  // --save-profile needs --profile-from; --profile and --profile-from exclude each other; more
  // pooled steps than one replay may measure are refused before anything runs
  const auto over = cli("validate " + kData + "pp2_gpipe_tiny.json --rounds 1000 --iterations 1000");
  EXPECT_EQ(over.first, 2);
  EXPECT_NE(stderr_text().find("measured steps per plan"), std::string::npos);
  EXPECT_EQ(cli("profile " + kData + "pp2_gpipe_tiny.json --rounds 2 --iterations 60000").first, 2);
  EXPECT_EQ(cli("validate " + kData + "pp2_gpipe_tiny.json --save-profile " + table).first, 2);
  EXPECT_EQ(cli("validate " + kData + "pp2_gpipe_tiny.json --profile x.json --profile-from " + kData +
                "pp2_1f1b_tiny.json")
                .first,
            2);
}

// The noise band comes from the plan's own measured steps in a real `validate` run: at least
// twice the standard error of the mean that the same JSON reports (std, steps, mean), next to
// the error, with the verdict and the summary following from it; with fewer than 4 measured
// steps there is none. Fails when validate stops filling in the noise (no `noise_pct`).
TEST(Loop, ValidateNoiseBandComesFromTheMeasuredSteps) {
  auto [rc, out] = cli("validate " + kData + "pp2_gpipe_tiny.json --iterations 2 --warmup 1 "
                       "--rounds 2 --format json");
  ASSERT_EQ(rc, 0) << stderr_text();
  const Json v = Json::parse(out);
  ASSERT_EQ(v["plans"].size(), 1u);
  const Json& p = v["plans"][0];
  ASSERT_EQ(p["measured_steps"], 4);
  ASSERT_TRUE(p.contains("noise_pct")) << p.dump();
  const double noise = p["noise_pct"].get<double>(), mean = p["measured_step_ms"].get<double>();
  const double se2 = 100.0 * 2 * p["measured_step_std_ms"].get<double>() / std::sqrt(4.0) / mean;
  EXPECT_GT(noise, 0.0);
  EXPECT_GE(noise, se2 - 1e-9);
  EXPECT_EQ(p["error_within_noise"].get<bool>(),
            std::fabs(p["step_err_pct"].get<double>()) <= noise);
  EXPECT_DOUBLE_EQ(v["mean_noise_pct"].get<double>(), noise);
  EXPECT_EQ(v["errors_within_noise"].get<int>(), p["error_within_noise"].get<bool>() ? 1 : 0);
  // three measured steps: no estimate, and the table says nothing of noise
  auto [rc3, out3] = cli("validate " + kData + "pp2_gpipe_tiny.json --iterations 3 --warmup 1 "
                         "--format json");
  ASSERT_EQ(rc3, 0) << stderr_text();
  const Json v3 = Json::parse(out3);
  EXPECT_EQ(v3["plans"][0]["measured_steps"], 3);
  EXPECT_FALSE(v3["plans"][0].contains("noise_pct"));
  EXPECT_FALSE(v3.contains("mean_noise_pct"));
}

TEST(Loop, ProfileRoundsPoolTheirSamples) {
  auto [rc, out] = cli("profile " + kData + "pp2_gpipe_tiny.json --rounds 2 --iterations 1 --warmup 0 "
                       "--format json");
  ASSERT_EQ(rc, 0) << stderr_text();
  Json stats = Json::parse(out);
  EXPECT_EQ(stats["rounds"], 2);
  // each compute op key was measured once per microbatch and round: an even count in every
  // series, and at least two samples
  int series = 0;
  for (const auto& k : stats["kernels"])
    for (const auto& b : k.contains("by_m") ? k["by_m"] : k["by_bytes"]) {
      EXPECT_EQ(b["count"].get<int>() % 2, 0) << k.dump();
      EXPECT_GE(b["count"].get<int>(), 2);
      ++series;
    }
  EXPECT_GT(series, 0);
}

TEST(Loop, ValidateGoesOnPastAPlanThatFails) {
  auto [rc, out] = cli("validate " + kData + "pp2_gpipe_tiny.json " + kData +
                       "missing.json --iterations 1 --format json");
  EXPECT_EQ(rc, 2);
  Json v = Json::parse(out);
  EXPECT_EQ(v["plans"].size(), 1u);
  EXPECT_NE(stderr_text().find("missing.json"), std::string::npos);
}

TEST(Loop, ValidateTraceHasBothTimelines) {
  const std::string trace = ::testing::TempDir() + "stretto_loop_validate.trace.json";
  auto [rc, out] = cli("validate " + kData + "pp2_gpipe_tiny.json --iterations 1 --format json --trace " +
                       trace);
  ASSERT_EQ(rc, 0) << stderr_text();
  std::ifstream f(trace);
  Json t = Json::parse(f);
  std::set<std::string> procs;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") procs.insert(e["args"]["name"].get<std::string>());
  EXPECT_TRUE(procs.count("device 0 predicted"));
  EXPECT_TRUE(procs.count("device 0 measured"));
  EXPECT_TRUE(procs.count("device 1 measured"));
  std::remove(trace.c_str());
}

// A CUDA replay's `--kernels fused` is the cost model's kernel_style eager: validate and replay
// say so where a prediction in another style is compared with it (stderr, JSON, table). The
// H200 replay plans say eager; without the key the h200 preset's default, fused, is a mismatch.
// Fails when the check compares the option names (fused == fused) or is skipped.
TEST(Loop, KernelStyleOfTheReplayAgainstThePrediction) {
  std::ifstream in(std::string(STRETTO_TEST_DATA) + "/costmodel/h200_replay_plans/llama8b_l4_mb4.json");
  std::stringstream ss;
  ss << in.rdbuf();
  Json plan = Json::parse(ss.str());
  auto compiled = [](const Json& p) {
    auto s = sim::Session::from_text(p.dump(), "test.json");
    EXPECT_TRUE(s) << (s ? "" : s.error()[0].message);
    return s ? s->compiled() : CompiledPlan{};
  };
  ASSERT_EQ(plan["costmodel"]["kernel_style"], "eager");
  const CompiledPlan eager = compiled(plan);
  auto k = backend::kernel_style_check(eager, true, backend::Kernels::kFused);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->plan_style, "eager");
  EXPECT_EQ(k->replay_style, "eager");
  EXPECT_TRUE(k->matches);
  // on the CPU no style applies
  EXPECT_FALSE(backend::kernel_style_check(eager, false, backend::Kernels::kFused));
  // --kernels reference: explicit formulas, no style prices them
  k = backend::kernel_style_check(eager, true, backend::Kernels::kReference);
  ASSERT_TRUE(k);
  EXPECT_FALSE(k->matches);
  EXPECT_NE(k->hint.find("--kernels fused"), std::string::npos) << k->hint;

  plan["costmodel"].erase("kernel_style");  // the h200 preset's default: fused
  const CompiledPlan fused = compiled(plan);
  k = backend::kernel_style_check(fused, true, backend::Kernels::kFused);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->plan_style, "fused");
  EXPECT_EQ(k->replay_style, "eager");
  EXPECT_FALSE(k->matches);
  EXPECT_NE(k->message.find("kernel_style eager"), std::string::npos) << k->message;
  EXPECT_NE(k->hint.find("\"kernel_style\": \"eager\""), std::string::npos) << k->hint;

  backend::PlanValidation p;
  p.plan = "a";
  p.predicted_ns = 100000000;
  p.measured_mean_ms = 110;
  p.kernel_style = k;
  Json j = backend::validation_json({p});
  EXPECT_TRUE(j["plans"][0]["kernel_style_mismatch"].get<bool>()) << j.dump();
  EXPECT_EQ(j["plans"][0]["kernel_style"]["plan"], "fused");
  EXPECT_EQ(j["plans"][0]["kernel_style"]["replay"], "eager");
  std::string t = backend::validation_table({p});
  EXPECT_NE(t.find("warning: kernel style: the prediction prices kernel_style fused"),
            std::string::npos) << t;
  p.kernel_style = backend::kernel_style_check(eager, true, backend::Kernels::kFused);
  j = backend::validation_json({p});
  EXPECT_FALSE(j["plans"][0]["kernel_style_mismatch"].get<bool>());
  EXPECT_EQ(backend::validation_table({p}).find("warning"), std::string::npos);
}
