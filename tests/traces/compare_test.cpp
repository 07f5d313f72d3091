// Timelines from plans, Stretto traces and Kineto traces, and their comparison op by op.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "stretto/sim/session.h"
#include "stretto/traces/chrome_trace.h"
#include "stretto/traces/compare.h"
#include "run_cli.h"

using namespace stretto;
using namespace stretto::plan;
using namespace stretto::traces;

namespace {

const std::string kData = std::string(STRETTO_TEST_DATA) + "/traces/";

const ClassStats* cls(const Comparison& c, const std::string& name) {
  for (const auto& s : c.classes)
    if (s.cls == name) return &s;
  return nullptr;
}

std::pair<int, std::string> cli(const std::string& args) {
  return run_stretto(args);
}

}  // namespace

TEST(Timeline, FromPlanHasEveryRegionPassAndTheSimulatorsMetrics) {
  auto t = load_timeline(kData + "plan_pp2_b2.json");
  ASSERT_TRUE(t) << render_all(t.error());
  EXPECT_EQ(t->kind, "plan");
  EXPECT_EQ(t->step, 9000000);  // (m + p - 1)(F + B) = 3 x 3 ms
  ASSERT_EQ(t->devices.size(), 2u);
  EXPECT_EQ(t->devices[0].busy, 6000000);
  size_t f = 0, b = 0;
  for (const auto& o : t->ops) {
    f += o.cls == "F";
    b += o.cls == "B";
    if (o.key == "B PP1 MB0") {
      EXPECT_EQ(o.busy, 2000000);  // two layers merged into one op
    }
  }
  EXPECT_EQ(f, 4u);
  EXPECT_EQ(b, 4u);
  EXPECT_FALSE(t->critical_path.empty());
}

TEST(Compare, SlowerBackwardShowsInItsClassAndStep) {
  auto a = load_timeline(kData + "plan_pp2_b2.json");
  auto b = load_timeline(kData + "plan_pp2_b3.json");
  ASSERT_TRUE(a && b);
  Comparison c = compare(*a, *b);
  EXPECT_EQ(c.only_a_count, 0u);
  EXPECT_EQ(c.only_b_count, 0u);
  const ClassStats* f = cls(c, "F");
  const ClassStats* bw = cls(c, "B");
  ASSERT_TRUE(f && bw);
  EXPECT_EQ(f->matched, 4u);
  EXPECT_DOUBLE_EQ(f->median_err, 0.0);
  EXPECT_DOUBLE_EQ(bw->median_err, 0.5);
  EXPECT_DOUBLE_EQ(bw->worst_err, 0.5);
  EXPECT_EQ(c.b.step - c.a.step, 3000000);  // 3 x 4 ms - 3 x 3 ms
  ASSERT_FALSE(c.moved.empty());
  const std::string table = comparison_table(c);
  EXPECT_NE(table.find("step time ms"), std::string::npos);
  const Json j = comparison_json(c);
  EXPECT_DOUBLE_EQ(j["step_time_delta_pct"].get<double>(), 100.0 / 3.0);
}

TEST(Compare, PlanAgainstItsOwnStrettoTraceIsExact) {
  auto s = sim::Session::open(kData + "plan_pp2_b2.json");
  ASSERT_TRUE(s);
  auto r = s->simulate();
  ASSERT_TRUE(r);
  const std::string path = ::testing::TempDir() + "stretto_compare_self.trace.json";
  {
    std::ofstream(path) << chrome_trace(s->compiled(), *r);
  }
  auto t = load_timeline(path);
  std::remove(path.c_str());
  ASSERT_TRUE(t) << render_all(t.error());
  EXPECT_EQ(t->kind, "stretto trace");
  Comparison c = compare(timeline_from_result(s->compiled(), *r, "plan"), *t);
  EXPECT_EQ(c.only_a_count, 0u);
  EXPECT_EQ(c.only_b_count, 0u);
  EXPECT_EQ(c.a.step, c.b.step);
  for (const auto& k : c.classes) {
    EXPECT_DOUBLE_EQ(k.worst_err, 0.0) << k.cls;
  }
  EXPECT_TRUE(c.path_only_a.empty() && c.path_only_b.empty());
}

TEST(Compare, KinetoDirectoryAlignsByLabel) {
  auto t = load_timeline(kData + "real");
  ASSERT_TRUE(t) << render_all(t.error());
  EXPECT_EQ(t->kind, "kineto trace");
  EXPECT_NE(t->note.find("ProfilerStep#2"), std::string::npos);  // the median step
  ASSERT_EQ(t->devices.size(), 2u);
  bool f0 = false, f1 = false;
  for (const auto& o : t->ops) {
    f0 |= o.key == "F PP0 MB1" && o.device == 0;
    f1 |= o.key == "F PP1 MB0" && o.device == 1;
  }
  EXPECT_TRUE(f0 && f1);
  Comparison c = compare(*t, *t);
  EXPECT_EQ(c.only_a_count, 0u);
  // F (two layers merged) and B of MB0, MB1 on each rank, and each rank's Gloo all-reduce and
  // all-gather, which ran on the host (no GPU slice): their host ranges
  EXPECT_EQ(c.matched, 12u);
  bool gloo = false;
  for (const auto& o : t->ops) gloo |= o.comm && o.key.rfind("all_reduce PP0 grad-reduce", 0) == 0;
  EXPECT_TRUE(gloo);
}

TEST(Compare, KendallTau) {
  EXPECT_DOUBLE_EQ(kendall_tau({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(kendall_tau({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  EXPECT_DOUBLE_EQ(kendall_tau({1, 2, 3}, {1, 3, 2}), 1.0 / 3.0);
}

TEST(Cli, ImportKinetoAndCompare) {
  auto [rc, out] = cli("import kineto --format json " + kData + "kineto_rank0.json " + kData +
                       "kineto_rank1.json.gz");
  EXPECT_EQ(rc, 0);
  Json j = Json::parse(out);
  EXPECT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["profile"]["version"], 1);
  auto [rc2, out2] = cli("import kineto " + kData + "bad/truncated.json");
  EXPECT_EQ(rc2, 2);
  EXPECT_TRUE(out2.empty());
  auto [rc3, out3] =
      cli("compare --format json " + kData + "plan_pp2_b2.json " + kData + "plan_pp2_b3.json");
  EXPECT_EQ(rc3, 0);
  Json c = Json::parse(out3);
  EXPECT_DOUBLE_EQ(c["step_time_delta_ms"].get<double>(), 3.0);
  auto [rc4, out4] = cli("compare " + kData + "bad/not_a_trace.json " + kData + "plan_pp2_b2.json");
  EXPECT_EQ(rc4, 2);
}
