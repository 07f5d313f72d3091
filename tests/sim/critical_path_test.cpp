// The critical path summarised (sim/critical_path.h): its shares partition the step time by
// (stage, pass, kind), by segment and by what each link waited on; the JSON carries every op
// only when asked.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "stretto/sim/critical_path.h"
#include "stretto/sim/session.h"

using namespace stretto;

namespace {

struct SimRun {
  sim::Session s;
  sim::Result r;
  std::vector<sim::CriticalStep> path;
};

SimRun run(const char* example) {
  auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/" + example);
  EXPECT_TRUE(s) << example;
  auto r = s->simulate();
  EXPECT_TRUE(r) << example;
  auto path = sim::critical_path(s->compiled(), *r);
  return {std::move(*s), std::move(*r), std::move(path)};
}

}  // namespace

TEST(CriticalPathSummary, SharesPartitionTheStepTime) {
  for (const char* e : {"gpt_pp4_dp2_1f1b.json", "piper_qwen3_moe_pp2_dp2_ep2.json",
                        "layout_llama7b_pp4_dp4_interleaved.json"}) {
    SCOPED_TRACE(e);
    const SimRun x = run(e);
    ASSERT_GT(x.path.size(), 20u);
    const auto all = sim::summarize_critical_path(x.s.compiled(), x.r, x.path, SIZE_MAX);
    EXPECT_EQ(all.step_time, x.r.step_time);
    EXPECT_EQ(all.steps, x.path.size());
    engine::SimTime cells = 0, segs = 0, waits = 0;
    size_t cell_ops = 0, seg_ops = 0, links = 0;
    for (const auto& c : all.cells) cells += c.time, cell_ops += c.ops;
    for (const auto& g : all.top) segs += g.time, seg_ops += g.last - g.first + 1;
    for (size_t w = 0; w < sim::kPathWaits; ++w) waits += all.waited_time[w], links += all.waited_links[w];
    EXPECT_EQ(cells, x.r.step_time);
    EXPECT_EQ(segs, x.r.step_time);
    EXPECT_EQ(waits, x.r.step_time);
    EXPECT_EQ(cell_ops, x.path.size());
    EXPECT_EQ(seg_ops, x.path.size());
    EXPECT_EQ(links, x.path.size());
    EXPECT_EQ(all.top.size(), all.segments);
    EXPECT_LT(all.segments, x.path.size());  // region passes fold into segments
    // A pipeline's path crosses stages: it waits for data over a link at least once, and for
    // compute outputs within a pass.
    EXPECT_GT(all.waited_links[static_cast<size_t>(sim::PathWait::kLink)], 0u);
    EXPECT_GT(all.waited_links[static_cast<size_t>(sim::PathWait::kData)], 0u);
    // The first op waited for nothing but its host thread (or started at 0); no other did.
    EXPECT_TRUE(x.path.front().wait == sim::PathWait::kStart ||
                x.path.front().wait == sim::PathWait::kDispatch);
    EXPECT_LE(all.waited_links[static_cast<size_t>(sim::PathWait::kStart)], 1u);
    // longest first; the default keeps the 20 longest
    for (size_t i = 1; i < all.cells.size(); ++i) EXPECT_GE(all.cells[i - 1].time, all.cells[i].time);
    const auto top = sim::summarize_critical_path(x.s.compiled(), x.r, x.path);
    ASSERT_EQ(top.top.size(), std::min<size_t>(20, all.segments));
    for (size_t i = 0; i < top.top.size(); ++i) EXPECT_EQ(top.top[i].time, all.top[i].time);
    for (size_t i = 1; i < top.top.size(); ++i) EXPECT_GE(top.top[i - 1].time, top.top[i].time);
  }
}

TEST(CriticalPathSummary, JsonHasEveryOpOnlyWhenFull) {
  const SimRun x = run("gpt_pp4_dp2_1f1b.json");
  const auto sum = sim::critical_path_json(x.s.compiled(), x.r, x.path, false);
  EXPECT_FALSE(sum.contains("critical_path"));
  ASSERT_TRUE(sum.contains("critical_path_summary"));
  const auto& j = sum["critical_path_summary"];
  EXPECT_EQ(j["steps"].get<size_t>(), x.path.size());
  EXPECT_LE(j["top_segments"].size(), 20u);
  for (const char* w : {"start", "data", "link", "order", "stream", "dispatch"})
    EXPECT_TRUE(j["waited_on"].contains(w)) << w;
  EXPECT_TRUE(sum.contains("critical_path_breakdown_ms"));
  const auto full = sim::critical_path_json(x.s.compiled(), x.r, x.path, true);
  ASSERT_TRUE(full.contains("critical_path"));
  EXPECT_EQ(full["critical_path"].size(), x.path.size());
  EXPECT_EQ(full["critical_path_summary"], sum["critical_path_summary"]);
  // The texts: the summary is short, the full list has a line per op.
  const std::string text = sim::critical_path_summary_text(
      sim::summarize_critical_path(x.s.compiled(), x.r, x.path));
  EXPECT_LT(std::count(text.begin(), text.end(), '\n'), 70);
  EXPECT_NE(text.find("longest segments"), std::string::npos);
  const std::string all = sim::critical_path_full_text(x.path);
  EXPECT_GE(static_cast<size_t>(std::count(all.begin(), all.end(), '\n')), x.path.size());
}
