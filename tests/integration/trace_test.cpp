// The Chrome trace parses back; slices lie within the step; lanes never overlap; flows
// connect existing slices; counters exist per device.
#include <gtest/gtest.h>

#include <map>

#include "plans.h"
#include "stretto/traces/chrome_trace.h"

using namespace stretto;

TEST(ChromeTrace, ParsesBackAndIsWellFormed) {
  for (const char* e : {"gpt_pp4_dp2_1f1b", "piper_qwen3_moe_pp2_dp2_ep2"}) {
    auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/" + e + ".json");
    ASSERT_TRUE(s);
    auto r = s->simulate();
    ASSERT_TRUE(r);
    Json t = Json::parse(traces::chrome_trace(s->compiled(), *r));
    const double step_us = static_cast<double>(r->step_time) / 1000.0;
    std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> lanes;
    std::map<int64_t, int> flow_ends;
    size_t slices = 0, counters = 0;
    for (const auto& ev : t["traceEvents"]) {
      const std::string ph = ev["ph"];
      if (ph == "X") {
        ++slices;
        double ts = ev["ts"], dur = ev["dur"];
        EXPECT_GE(ts, 0);
        EXPECT_LE(ts + dur, step_us + 1e-6);
        lanes[{ev["pid"], ev["tid"]}].push_back({ts, ts + dur});
        EXPECT_TRUE(ev["name"].get<std::string>().size() > 0);
      } else if (ph == "s" || ph == "f") {
        flow_ends[ev["id"].get<int64_t>()] += ph == "s" ? 1 : 10;
      } else if (ph == "C") {
        ++counters;
      }
    }
    EXPECT_EQ(slices, [&] {
      size_t n = 0;
      for (const auto& tk : r->program.tasks)
        if (tk.kind != sim::TaskKind::kBarrier) n += tk.part_count;
      return n;
    }());
    for (auto& [lane, v] : lanes) {
      std::sort(v.begin(), v.end());
      for (size_t i = 1; i < v.size(); ++i) EXPECT_LE(v[i - 1].second, v[i].first + 1e-9) << e;
    }
    // every flow has exactly one start and one end, each on a lane that has slices
    for (auto [id, c] : flow_ends) EXPECT_EQ(c, 11) << id;
    EXPECT_GT(flow_ends.size(), 0u);
    EXPECT_GT(counters, 0u);
  }
}
