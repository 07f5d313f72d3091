// gui/timeline.h: lanes from a simulated step, and the level-of-detail layout.
#include <gtest/gtest.h>

#include "stretto/gui/timeline.h"
#include "timeline_compare.h"
#include "stretto/sim/session.h"

namespace stretto::gui {
namespace {

TEST(Timeline, OneLanePerDeviceStreamComputeFirstOpsSortedAndDisjoint) {
  auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json");
  ASSERT_TRUE(s);
  auto r = s->simulate();
  ASSERT_TRUE(r);
  Timeline tl = build_timeline(*r, s->compiled());
  ASSERT_EQ(tl.by_device.size(), 8u);
  size_t ops = 0;
  for (size_t d = 0; d < 8; ++d) {
    ASSERT_GE(tl.by_device[d].size(), 2u) << "compute and at least one comm stream";
    EXPECT_EQ(tl.lanes[tl.by_device[d][0]].name, "compute");
    for (uint32_t li : tl.by_device[d]) {
      const Lane& l = tl.lanes[li];
      EXPECT_EQ(l.device, static_cast<int>(d));
      for (size_t i = 1; i < l.ops.size(); ++i) {
        EXPECT_LE(l.ops[i - 1].end, l.ops[i].start) << l.name;  // a FIFO never overlaps
      }
      ops += l.ops.size();
    }
  }
  EXPECT_EQ(ops, tl.ops);
  EXPECT_EQ(tl.end, r->step_time);
  // Every non-barrier task is placed, and where[] points back at it.
  for (uint32_t t = 0; t < r->program.tasks.size(); ++t) {
    if (r->program.tasks[t].kind == engine::TaskKind::kBarrier) continue;
    auto [li, oi] = tl.where[t];
    ASSERT_NE(li, UINT32_MAX) << t;
    EXPECT_EQ(tl.lanes[li].ops[oi].task, t);
  }
  // Forward and backward passes are coloured apart.
  bool f = false, b = false;
  for (const Op& o : tl.lanes[tl.by_device[0][0]].ops) {
    f |= o.cls == OpClass::kF;
    b |= o.cls == OpClass::kB;
  }
  EXPECT_TRUE(f && b);
}

Lane synthetic_lane(size_t n, SimTime dur, SimTime gap) {
  Lane l;
  for (size_t i = 0; i < n; ++i) {
    const SimTime s = static_cast<SimTime>(i) * (dur + gap);
    l.ops.push_back({s, s + dur, static_cast<uint32_t>(i), i % 2 ? OpClass::kB : OpClass::kF});
  }
  return l;
}

TEST(Lod, FullyZoomedOutBoxesAreBoundedByPixelsAndCoverEveryOp) {
  const Lane l = synthetic_lane(500000, 100, 20);  // 60 ms of 100 ns ops
  View v;
  v.width = 1000;
  v.t0 = 0;
  v.ns_per_px = static_cast<double>(l.ops.back().end) / v.width;
  std::vector<Box> boxes;
  layout_lane(l, v, boxes);
  EXPECT_LE(boxes.size(), 1000u);
  EXPECT_GE(boxes.size(), 1u);
  size_t covered = 0;
  uint32_t next = 0;
  for (const Box& b : boxes) {
    EXPECT_EQ(b.first, next);  // runs are contiguous and in order
    next = b.first + b.count;
    covered += b.count;
    EXPECT_LE(b.x0, b.x1);
  }
  EXPECT_EQ(covered, l.ops.size());
}

TEST(Lod, ZoomedInOpsAreSingleBoxesAndOffScreenOpsAreSkipped) {
  const Lane l = synthetic_lane(500000, 100, 20);
  View v;
  v.width = 1200;
  v.t0 = 120.0 * 1000;  // op 1000 starts here
  v.ns_per_px = 1;      // 1200 ns: ops 1000..1009
  std::vector<Box> boxes;
  layout_lane(l, v, boxes);
  ASSERT_EQ(boxes.size(), 10u);
  for (size_t i = 0; i < boxes.size(); ++i) {
    EXPECT_EQ(boxes[i].count, 1u);
    EXPECT_EQ(boxes[i].first, 1000 + i);
    EXPECT_FLOAT_EQ(boxes[i].x1 - boxes[i].x0, 100.0f);
  }
  EXPECT_EQ(boxes[1].cls, OpClass::kB);
}

TEST(Lod, AWideOpAmongTinyOnesStaysItsOwnBox) {
  Lane l = synthetic_lane(1000, 10, 0);  // 10 us of tiny ops
  l.ops.push_back({10000, 50000, 1000, OpClass::kAllReduce});
  for (uint32_t i = 0; i < 1000; ++i) l.ops.push_back({50000 + i * 10, 50010 + i * 10, 1001 + i, OpClass::kF});
  View v;
  v.width = 600;
  v.ns_per_px = 100;
  std::vector<Box> boxes;
  layout_lane(l, v, boxes);
  bool wide = false;
  for (const Box& b : boxes)
    if (b.count == 1 && b.first == 1000) {
      wide = true;
      EXPECT_EQ(b.cls, OpClass::kAllReduce);
    }
  EXPECT_TRUE(wide);
  EXPECT_LE(boxes.size(), 10u);
}

TEST(Lod, AMergedRunTakesTheClassCoveringMostOfItsTime) {
  Lane l;
  SimTime t = 0;
  for (uint32_t i = 0; i < 20000; ++i) {
    const bool b = i % 2;
    const SimTime d = b ? 30 : 10;  // backward passes take 3x the forward's time
    l.ops.push_back({t, t + d, i, b ? OpClass::kB : OpClass::kF});
    t += d;
  }
  View v;
  v.width = 100;
  v.ns_per_px = static_cast<double>(t) / 100;
  std::vector<Box> boxes;
  layout_lane(l, v, boxes);
  ASSERT_FALSE(boxes.empty());
  for (const Box& b : boxes) {
    EXPECT_GT(b.count, 1u);
    EXPECT_EQ(b.cls, OpClass::kB);
  }
}

TEST(Lod, OpAtFindsTheOpUnderATime) {
  const Lane l = synthetic_lane(100, 100, 20);
  EXPECT_EQ(op_at(l, 50, 0), 0);
  EXPECT_EQ(op_at(l, 130, 0), 1);
  EXPECT_EQ(op_at(l, 110, 0), -1);  // in a gap
  EXPECT_EQ(op_at(l, 110, 15), 0);  // within the slack of op 0's end
  EXPECT_EQ(op_at(l, 1e9, 0), -1);
}


// Search words match whole numbers: PP3 is not PP31, layer1. is not layer19.; every word must
// occur, case aside.
TEST(Search, EveryWordMatchesAndNumbersEndWhereTheyEnd) {
  const auto w = search_words("  PP3   MB5 ");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], "pp3");
  EXPECT_TRUE(search_match("pp3 mb5 f (layer19.mlp.up) on device 3", w));
  EXPECT_FALSE(search_match("pp31 mb5 f", w));
  EXPECT_FALSE(search_match("pp3 mb51 f", w));
  EXPECT_TRUE(search_match("pp31 pp3 mb5", w));  // a later occurrence counts
  EXPECT_FALSE(search_match("pp3 f", w));
  EXPECT_TRUE(search_match("x (layer19.mlp.up)", search_words("layer19.mlp")));
  EXPECT_FALSE(search_match("x (layer1.mlp.up)", search_words("layer19.mlp")));
  EXPECT_FALSE(search_match("x (layer19.mlp.up)", search_words("layer1.")));
  EXPECT_TRUE(search_match("all-gather param-gather pp0", search_words("ALL-GATHER")));
}

// Compute lanes nest their ops: one slice per run of one (stage, microbatch, pass), one per
// layer within it; each slice spans exactly its ops, and the ops of a slice share its tags.
TEST(Timeline, ComputeLanesNestPassLayerOp) {
  auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json");
  ASSERT_TRUE(s);
  auto r = s->simulate();
  ASSERT_TRUE(r);
  const Timeline tl = build_timeline(*r, s->compiled());
  const auto& nodes = s->compiled().dag.nodes;
  const Lane& l = tl.lanes[tl.by_device[0][0]];
  ASSERT_EQ(l.name, "compute");
  ASSERT_EQ(l.depth(), 3);
  // 8 microbatches x (F, B) on stage 0, each one run of ops in 1F1B.
  EXPECT_EQ(l.passes.size(), 16u);
  EXPECT_GT(l.layers.size(), l.passes.size());
  for (const auto* level : {&l.passes, &l.layers})
    for (const Span& sp : *level) {
      EXPECT_EQ(sp.start, l.ops[sp.first].start);
      EXPECT_EQ(sp.end, l.ops[sp.last].end);
      const plan::Tags& a = nodes[r->node_of(l.ops[sp.first].task)].tags;
      for (uint32_t i = sp.first; i <= sp.last; ++i) {
        const plan::Tags& b = nodes[r->node_of(l.ops[i].task)].tags;
        EXPECT_EQ(a.pp(), b.pp());
        EXPECT_EQ(a.mb(), b.mb());
        EXPECT_EQ(a.pass, b.pass);
        if (level == &l.layers) {
          EXPECT_EQ(a.layer(), b.layer());
        }
      }
    }
  // Communication lanes have no nesting.
  EXPECT_EQ(tl.lanes[tl.by_device[0][1]].depth(), 1);
}

// A cost-model edit keeps the program's structure: the previous lanes, retimed, are the lanes
// build_timeline makes of the new result (what the GUI shows after such an edit).
TEST(Timeline, RetimedLanesOfACostModelEditAreTheBuiltLanes) {
  auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json");
  ASSERT_TRUE(s);
  auto r0 = s->simulate();
  ASSERT_TRUE(r0);
  const Timeline tl0 = build_timeline(*r0, s->compiled());
  sim::Session edited = *s;
  plan::CostModelSpec spec = s->plan().costmodel;
  spec.options["dispatch_us"] = 40;
  ASSERT_TRUE(edited.set_costmodel(spec));
  auto r1 = edited.simulate();
  ASSERT_TRUE(r1);
  ASSERT_NE(r1->step_time, r0->step_time);
  const compiler::CompiledPlan& cp = edited.compiled();  // the same DAG, another cost model
  const Timeline built = build_timeline(*r1, cp);
  auto retimed = retime_timeline(tl0, *r0, *r1, cp);
  ASSERT_TRUE(retimed);
  expect_same_timeline(*retimed, built);
  EXPECT_NE(retimed->end, tl0.end);

  // Ops that swap places in a lane (times exchanged by hand): the lane is sorted and nested
  // again, and every op's place (`where`) follows.
  sim::Result r2 = *r1;
  const Lane& lane = built.lanes[built.by_device[0][0]];
  ASSERT_GE(lane.ops.size(), 3u);
  std::swap(r2.timing[lane.ops[1].task], r2.timing[lane.ops[2].task]);
  const Timeline built2 = build_timeline(r2, cp);
  ASSERT_NE(built2.where[lane.ops[1].task], built.where[lane.ops[1].task]);
  auto retimed2 = retime_timeline(built, *r1, r2, cp);
  ASSERT_TRUE(retimed2);
  expect_same_timeline(*retimed2, built2);
  // The lanes of r0, which r1's were retimed from (the worker's spare storage), give the same
  // lanes as r1's: their ops are in r0's order in each lane, and those of the lanes whose
  // order changed are sorted and nested again.
  auto from_older = retime_timeline(tl0, *r1, r2, cp);
  ASSERT_TRUE(from_older);
  expect_same_timeline(*from_older, built2);
  // ... and the storage moved in is the result's.
  Timeline moved = tl0;
  const Op* storage = moved.lanes[built.by_device[1][0]].ops.data();
  auto into_storage = retime_timeline(std::move(moved), *r0, *r1, cp);
  ASSERT_TRUE(into_storage);
  EXPECT_EQ(into_storage->lanes[built.by_device[1][0]].ops.data(), storage);
  expect_same_timeline(*into_storage, built);

  // Another structure is refused: an op that did not run, another plan's program.
  sim::Result r3 = *r1;
  r3.timing[lane.ops[0].task].start = -1;
  EXPECT_FALSE(retime_timeline(built, *r1, r3, cp));
  sim::Result r5 = *r1;  // an op moved to another device
  r5.program.participants[r5.program.tasks[lane.ops[0].task].part_begin].device = 1;
  EXPECT_FALSE(retime_timeline(built, *r1, r5, cp));
  auto other = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/cpu_gpt_pp2_1f1b.json");
  ASSERT_TRUE(other);
  auto r4 = other->simulate();
  ASSERT_TRUE(r4);
  EXPECT_FALSE(retime_timeline(built, *r1, *r4, cp));
}

}  // namespace
}  // namespace stretto::gui
