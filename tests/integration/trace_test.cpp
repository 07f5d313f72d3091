// The Chrome trace parses back; slices lie within the step; lanes never overlap; flows
// connect existing slices; counters exist per device.
#include <gtest/gtest.h>

#include <map>

#include "plans.h"
#include "stretto/traces/chrome_trace.h"

using namespace stretto;
using namespace stretto::plan;

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
      if (ph == "X" && ev["cat"] == "pass") {
        continue;  // a region pass's enclosing slice (checked in RegionPassesNestTheirOps)
      } else if (ph == "X") {
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
        if (tk.kind != engine::TaskKind::kBarrier) n += tk.part_count;
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

// One enclosing slice per (stage, microbatch, pass) on a device's stream holds exactly the ops
// of that pass on that lane, which are then named by their model op; the readers of traces
// (GUI, compare) see only the ops.
TEST(ChromeTrace, RegionPassesNestTheirOps) {
  auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json");
  ASSERT_TRUE(s);
  auto r = s->simulate();
  ASSERT_TRUE(r);
  Json t = Json::parse(traces::chrome_trace(s->compiled(), *r));
  struct Slice {
    double ts, end;
    std::string name, tags;
  };
  std::map<std::pair<int, int>, std::vector<Slice>> parents, ops;
  for (const auto& ev : t["traceEvents"]) {
    if (ev["ph"] != "X") continue;
    const double ts = ev["ts"], dur = ev["dur"];
    Slice sl{ts, ts + dur, ev["name"], ev["args"]["tags"]};
    (ev["cat"] == "pass" ? parents : ops)[{ev["pid"], ev["tid"]}].push_back(sl);
  }
  size_t nparents = 0, nested = 0;
  for (auto& [lane, ps] : parents) {
    std::sort(ps.begin(), ps.end(), [](const Slice& a, const Slice& b) { return a.ts < b.ts; });
    for (size_t i = 1; i < ps.size(); ++i) EXPECT_LE(ps[i - 1].end, ps[i].ts + 1e-9);
    for (const Slice& p : ps) {
      ++nparents;
      size_t inside = 0;
      for (const Slice& o : ops[lane])
        if (o.ts >= p.ts - 1e-9 && o.end <= p.end + 1e-9) {
          ++inside;
          EXPECT_EQ(o.name.find(" mb"), std::string::npos) << o.name;  // named by op
        }
      EXPECT_GT(inside, 0u) << p.name;
      nested += inside;
    }
  }
  // one F and one B per device and microbatch (1F1B, one stage per device)
  EXPECT_EQ(nparents, static_cast<size_t>(s->compiled().num_devices) *
                          static_cast<size_t>(s->compiled().num_microbatches) * 2);
  EXPECT_GT(nested, nparents);
  // Without them, the same ops under their old names.
  traces::ChromeTraceOptions flat;
  flat.region_slices = false;
  Json f = Json::parse(traces::chrome_trace(s->compiled(), *r, flat));
  size_t fx = 0, fpass = 0;
  for (const auto& ev : f["traceEvents"])
    if (ev["ph"] == "X") ++fx, fpass += ev["cat"] == "pass";
  EXPECT_EQ(fpass, 0u);
  size_t tops = 0;
  for (auto& [lane, v] : ops) tops += v.size();
  EXPECT_EQ(fx, tops);
}

// The size said before writing is the size written: the events exactly, the bytes within 25 %.
TEST(ChromeTrace, TheEstimateMatchesTheTrace) {
  for (const char* e : {"gpt_pp4_dp2_1f1b", "piper_qwen3_moe_pp2_dp2_ep2"}) {
    auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/" + e + ".json");
    ASSERT_TRUE(s);
    auto r = s->simulate();
    ASSERT_TRUE(r);
    for (bool window : {false, true}) {
      traces::ChromeTraceOptions o;
      if (window) o.begin_ns = r->step_time / 4, o.end_ns = r->step_time / 2, o.devices = {1, 0, 1};
      const std::string text = traces::chrome_trace(s->compiled(), *r, o);
      const auto z = traces::estimate_chrome_trace(s->compiled(), *r, o);
      EXPECT_EQ(z.events(), Json::parse(text)["traceEvents"].size()) << e << window;
      const double ratio = static_cast<double>(z.approx_bytes) / static_cast<double>(text.size());
      EXPECT_GT(ratio, 0.75) << e << window;
      EXPECT_LT(ratio, 1.25) << e << window;
    }
  }
}
