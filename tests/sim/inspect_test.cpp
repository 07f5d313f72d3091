// sim/inspect.h: memory by category agrees with the engine's totals; wait causes name what
// an op waited for.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "stretto/sim/inspect.h"
#include "stretto/sim/session.h"

namespace stretto::sim {
namespace {

Session open_example(const std::string& name) {
  auto s = Session::open(std::string(STRETTO_EXAMPLES) + "/" + name);
  if (!s) ADD_FAILURE() << render_all(s.error());
  return std::move(*s);
}

TEST(MemoryByCategory, TotalsMatchTheEngineCurveAndPeak) {
  for (const char* ex : {"gpt_pp4_dp2_1f1b.json", "piper_qwen3_moe_zero3.json"}) {
    SCOPED_TRACE(ex);
    Session s = open_example(ex);
    auto r = s.simulate();
    ASSERT_TRUE(r) << render_all(r.error());
    for (const auto& dm : r->devices) {
      auto cat = memory_by_category(s.compiled(), *r, dm.id);
      ASSERT_FALSE(cat.empty());
      // Every engine sample appears with the same total (the engine's curve may hold
      // samples where the total is unchanged but a category moved; ours too).
      size_t k = 0;
      int64_t peak = 0;
      for (const auto& c : cat) peak = std::max(peak, c.total());
      EXPECT_EQ(peak, dm.peak_memory) << "device " << dm.id;
      for (const auto& m : dm.memory) {
        while (k + 1 < cat.size() && cat[k + 1].t <= m.t) ++k;
        EXPECT_EQ(cat[k].total(), m.total) << "device " << dm.id << " t=" << m.t;
      }
      // Static categories never change.
      for (const auto& c : cat) {
        EXPECT_EQ(c.bytes[0], cat.front().bytes[0]);
        for (int64_t b : c.bytes) EXPECT_GE(b, 0);
      }
    }
  }
}

TEST(MemoryByCategory, OutOfRangeDeviceIsEmpty) {
  Session s = open_example("gpt_pp4_dp2_1f1b.json");
  auto r = s.simulate();
  ASSERT_TRUE(r);
  EXPECT_TRUE(memory_by_category(s.compiled(), *r, -1).empty());
  EXPECT_TRUE(memory_by_category(s.compiled(), *r, 1000).empty());
}

TEST(WaitCause, PipelineStagesWaitForTransfersAndNothingWaitsWhenTheLaneWasBusy) {
  Session s = open_example("gpt_pp4_dp2_1f1b.json");
  auto r = s.simulate();
  ASSERT_TRUE(r);
  const auto& p = r->program;
  // The first forward compute op on the last stage's device waits for its activation.
  size_t transfer_waits = 0, none = 0, total = 0;
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    if (p.tasks[t].kind != engine::TaskKind::kCompute) continue;
    ++total;
    Wait w0 = wait_cause(s.compiled(), *r, t, r->timing[t].start);
    EXPECT_EQ(w0.cause, WaitCause::kNone);  // the lane became free exactly when it started
    Wait w = wait_cause(s.compiled(), *r, t, 0);
    if (r->timing[t].start == 0) {
      EXPECT_EQ(w.cause, WaitCause::kNone);
      ++none;
      continue;
    }
    EXPECT_NE(w.cause, WaitCause::kNone);
    EXPECT_LE(w.ready, r->timing[t].start);
    if (w.cause == WaitCause::kTransfer) {
      ++transfer_waits;
      ASSERT_NE(w.blocker, UINT32_MAX);
      EXPECT_EQ(p.tasks[w.blocker].kind, engine::TaskKind::kComm);
      EXPECT_LE(r->timing[w.blocker].end, r->timing[t].start);
    }
  }
  EXPECT_GT(total, 0u);
  EXPECT_GT(transfer_waits, 0u);  // stages 1..3 wait for activations from their predecessor
  EXPECT_FALSE(wait_cause_name(WaitCause::kDispatch).empty());
}

TEST(SessionFromText, MatchesOpenAndReportsLineColumn) {
  const std::string path = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json";
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  auto a = Session::open(path);
  auto b = Session::from_text(ss.str(), path, STRETTO_EXAMPLES);
  ASSERT_TRUE(a && b);
  auto ra = a->simulate(), rb = b->simulate();
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->step_time, rb->step_time);
  auto bad = Session::from_text("{\n  \"model\": {\"family\": \"transformer\", \"layers\": -3}\n}\n",
                                "edited.json");
  ASSERT_FALSE(bad);
  bool located = false;
  for (const auto& d : bad.error())
    if (d.loc.file == "edited.json" && d.loc.line >= 2) located = true;
  EXPECT_TRUE(located) << render_all(bad.error());
}

}  // namespace
}  // namespace stretto::sim
