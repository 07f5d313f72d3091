// Max-min fair sharing: textbook cases with hand-computed rates, caps, selective update.

#include "stretto/engine/maxmin.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace stretto::engine {
namespace {

std::vector<MaxMin::FlowId> sorted(std::span<const MaxMin::FlowId> s) {
  std::vector<MaxMin::FlowId> v(s.begin(), s.end());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(MaxMin, TwoFlowsOnOneLinkGetHalfEach) {
  const std::vector<double> caps{1.0};
  MaxMin mm(caps);
  const std::vector<uint32_t> on_a{0};
  const auto f1 = mm.add_flow(on_a, 0);
  const auto f2 = mm.add_flow(on_a, 0);
  EXPECT_EQ(sorted(mm.solve()), (std::vector<MaxMin::FlowId>{f1, f2}));
  EXPECT_EQ(mm.rate(f1), 0.5);
  EXPECT_EQ(mm.rate(f2), 0.5);
}

TEST(MaxMin, TextbookThreeFlowsTwoLinks) {
  // Links A, B of capacity 1; flow 1 crosses A and B, flow 2 only A, flow 3 only B.
  const std::vector<double> caps{1.0, 1.0};
  MaxMin mm(caps);
  const std::vector<uint32_t> ab{0, 1}, a{0}, b{1};
  const auto f1 = mm.add_flow(ab, 0);
  const auto f2 = mm.add_flow(a, 0);
  const auto f3 = mm.add_flow(b, 0);
  mm.solve();
  EXPECT_EQ(mm.rate(f1), 0.5);
  EXPECT_EQ(mm.rate(f2), 0.5);
  EXPECT_EQ(mm.rate(f3), 0.5);
}

TEST(MaxMin, AsymmetricCapacitiesGiveLeftoverToTheFreeFlow) {
  // A = 1, B = 2: A is the bottleneck (1/2 each for flows 1 and 2); flow 3 takes B's rest, 1.5.
  const std::vector<double> caps{1.0, 2.0};
  MaxMin mm(caps);
  const std::vector<uint32_t> ab{0, 1}, a{0}, b{1};
  const auto f1 = mm.add_flow(ab, 0);
  const auto f2 = mm.add_flow(a, 0);
  const auto f3 = mm.add_flow(b, 0);
  mm.solve();
  EXPECT_EQ(mm.rate(f1), 0.5);
  EXPECT_EQ(mm.rate(f2), 0.5);
  EXPECT_EQ(mm.rate(f3), 1.5);
}

TEST(MaxMin, ParkingLot) {
  // Chain of 3 links (capacity 1); a long flow crosses all three, one short flow per link, plus
  // a second short flow on the middle link: middle link has 3 flows -> 1/3 each; the long flow
  // is fixed at 1/3, the short flows on the outer links get 2/3.
  const std::vector<double> caps{1.0, 1.0, 1.0};
  MaxMin mm(caps);
  const std::vector<uint32_t> all{0, 1, 2}, l0{0}, l1{1}, l2{2};
  const auto lng = mm.add_flow(all, 0);
  const auto s0 = mm.add_flow(l0, 0);
  const auto s1 = mm.add_flow(l1, 0);
  const auto s1b = mm.add_flow(l1, 0);
  const auto s2 = mm.add_flow(l2, 0);
  mm.solve();
  EXPECT_DOUBLE_EQ(mm.rate(lng), 1.0 / 3);
  EXPECT_DOUBLE_EQ(mm.rate(s1), 1.0 / 3);
  EXPECT_DOUBLE_EQ(mm.rate(s1b), 1.0 / 3);
  EXPECT_DOUBLE_EQ(mm.rate(s0), 2.0 / 3);
  EXPECT_DOUBLE_EQ(mm.rate(s2), 2.0 / 3);
}

TEST(MaxMin, OwnCapFreesBandwidthForOthers) {
  const std::vector<double> caps{1.0};
  MaxMin mm(caps);
  const std::vector<uint32_t> a{0};
  const auto capped = mm.add_flow(a, 0.25);
  const auto free1 = mm.add_flow(a, 0);
  const auto free2 = mm.add_flow(a, 0);
  mm.solve();
  EXPECT_EQ(mm.rate(capped), 0.25);
  EXPECT_EQ(mm.rate(free1), 0.375);
  EXPECT_EQ(mm.rate(free2), 0.375);
  // A cap above the fair share does not bind.
  mm.remove_flow(capped);
  const auto loose = mm.add_flow(a, 10.0);
  mm.solve();
  EXPECT_DOUBLE_EQ(mm.rate(loose), 1.0 / 3);
  EXPECT_DOUBLE_EQ(mm.rate(free1), 1.0 / 3);
}

TEST(MaxMin, FlowWithoutLinksRunsAtItsCap) {
  MaxMin mm(std::vector<double>{1.0});
  const auto f = mm.add_flow({}, 3.5);
  mm.solve();
  EXPECT_EQ(mm.rate(f), 3.5);
  const auto g = mm.add_flow({}, 0);
  mm.solve();
  EXPECT_TRUE(std::isinf(mm.rate(g)));
}

TEST(MaxMin, RateRisesWhenAnotherFlowLeaves) {
  const std::vector<double> caps{2.0};
  MaxMin mm(caps);
  const std::vector<uint32_t> a{0};
  const auto f1 = mm.add_flow(a, 0);
  const auto f2 = mm.add_flow(a, 0);
  mm.solve();
  EXPECT_EQ(mm.rate(f1), 1.0);
  mm.remove_flow(f2);
  EXPECT_EQ(sorted(mm.solve()), (std::vector<MaxMin::FlowId>{f1}));
  EXPECT_EQ(mm.rate(f1), 2.0);
  EXPECT_EQ(mm.num_active_flows(), 1u);
}

TEST(MaxMin, ALinkLeftWithoutFlowsIsNotSolved) {
  // A transfer alone on links 0 and 1 ends: solve() has dirty links but no component to
  // re-solve (the engine's common case), so it visits nothing; the other component is untouched.
  const std::vector<double> caps{1.0, 1.0, 1.0};
  MaxMin mm(caps);
  const std::vector<uint32_t> ab{0, 1}, c{2};
  const auto f1 = mm.add_flow(ab, 0);
  const auto f2 = mm.add_flow(c, 0);
  mm.solve();
  const MaxMin::Stats before = mm.stats();
  mm.remove_flow(f1);
  EXPECT_TRUE(mm.dirty());
  EXPECT_TRUE(mm.solve().empty());
  EXPECT_FALSE(mm.dirty());
  EXPECT_EQ(mm.stats().solves - before.solves, 1u);
  EXPECT_EQ(mm.stats().components, before.components);
  EXPECT_EQ(mm.stats().links_solved, before.links_solved);
  EXPECT_EQ(mm.rate(f2), 1.0);
  // The links are usable again, and a flow on them is solved.
  const auto f3 = mm.add_flow(ab, 0.25);
  EXPECT_EQ(sorted(mm.solve()), (std::vector<MaxMin::FlowId>{f3}));
  EXPECT_EQ(mm.rate(f3), 0.25);
  EXPECT_EQ(mm.stats().components, before.components + 1);
}

TEST(MaxMin, AFlowAloneOnItsLinksTakesItsTightestLinkOrItsCap) {
  // Components of one flow each (solve's shortcut): f alone on links 0-2, g on link 3 listed
  // twice (it holds g twice: half each, not alone), h alone on link 4 under its own cap.
  const std::vector<double> caps{4.0, 2.0, 3.0, 5.0, 6.0, 2.0, 10.0, 10.0, 6.0};
  MaxMin mm(caps);
  const std::vector<uint32_t> abc{0, 1, 2}, dd{3, 3}, e{4};
  const auto f = mm.add_flow(abc, 0);
  const auto g = mm.add_flow(dd, 0);
  const auto h = mm.add_flow(e, 1.5);
  EXPECT_EQ(sorted(mm.solve()), (std::vector<MaxMin::FlowId>{f, g, h}));
  EXPECT_EQ(mm.rate(f), 2.0);
  EXPECT_EQ(mm.rate(g), 2.5);
  EXPECT_EQ(mm.rate(h), 1.5);
  // each component once, each of its links once (link 3 once, though g lists it twice)
  EXPECT_EQ(mm.stats().components, 3u);
  EXPECT_EQ(mm.stats().flows_solved, 3u);
  EXPECT_EQ(mm.stats().links_solved, 5u);
  // A second flow on link 1 joins f's component: both share link 1's 2.0.
  const std::vector<uint32_t> b{1};
  const auto k = mm.add_flow(b, 0);
  EXPECT_EQ(sorted(mm.solve()), (std::vector<MaxMin::FlowId>{f, k}));
  EXPECT_EQ(mm.rate(f), 1.0);
  EXPECT_EQ(mm.rate(k), 1.0);
  // k leaves: f is alone again and back at 2.0; g and h are not visited.
  mm.remove_flow(k);
  EXPECT_EQ(sorted(mm.solve()), (std::vector<MaxMin::FlowId>{f}));
  EXPECT_EQ(mm.rate(f), 2.0);
  EXPECT_EQ(mm.stats().components, 5u);
  EXPECT_EQ(mm.stats().flows_solved, 6u);
  // Alone on its first (dirty) link but not on the others: n shares link 5 with m, and q
  // lists link 8 twice. Each is solved with what shares its links.
  const std::vector<uint32_t> l5{5}, l65{6, 5}, l788{7, 8, 8};
  const auto m = mm.add_flow(l5, 0);
  mm.solve();
  EXPECT_EQ(mm.rate(m), 2.0);
  const auto n = mm.add_flow(l65, 0);
  const auto q = mm.add_flow(l788, 0);
  EXPECT_EQ(sorted(mm.solve()), (std::vector<MaxMin::FlowId>{m, n, q}));
  EXPECT_EQ(mm.rate(m), 1.0);
  EXPECT_EQ(mm.rate(n), 1.0);
  EXPECT_EQ(mm.rate(q), 3.0);
}

TEST(MaxMin, SelectiveUpdateTouchesOnlyTheChangedComponent) {
  // Two independent components: {A: f1, f2} and {B, C: f3 (B,C), f4 (C)}.
  const std::vector<double> caps{1.0, 1.0, 1.0};
  MaxMin mm(caps);
  const std::vector<uint32_t> a{0}, bc{1, 2}, c{2};
  const auto f1 = mm.add_flow(a, 0);
  const auto f2 = mm.add_flow(a, 0);
  const auto f3 = mm.add_flow(bc, 0);
  const auto f4 = mm.add_flow(c, 0);
  mm.solve();
  const uint64_t before = mm.stats().flows_solved;
  const auto f5 = mm.add_flow(a, 0);
  const auto changed = sorted(mm.solve());
  EXPECT_EQ(changed, (std::vector<MaxMin::FlowId>{f1, f2, f5}));
  EXPECT_EQ(mm.stats().flows_solved - before, 3u);  // f3, f4 not visited
  EXPECT_DOUBLE_EQ(mm.rate(f1), 1.0 / 3);
  EXPECT_EQ(mm.rate(f3), 0.5);
  EXPECT_EQ(mm.rate(f4), 0.5);
  // Removing the link-C flow re-solves only {B, C}.
  const uint64_t before2 = mm.stats().flows_solved;
  mm.remove_flow(f4);
  EXPECT_EQ(sorted(mm.solve()), (std::vector<MaxMin::FlowId>{f3}));
  EXPECT_EQ(mm.stats().flows_solved - before2, 1u);
  EXPECT_EQ(mm.rate(f3), 1.0);
  // Nothing dirty: nothing to do.
  EXPECT_TRUE(mm.solve().empty());
}

TEST(MaxMin, AddThenRemoveBeforeSolveReportsNothingStale) {
  const std::vector<double> caps{1.0};
  MaxMin mm(caps);
  const std::vector<uint32_t> a{0};
  const auto f1 = mm.add_flow(a, 0);
  mm.solve();
  const auto f2 = mm.add_flow(a, 0);
  mm.remove_flow(f2);
  const auto changed = sorted(mm.solve());
  EXPECT_TRUE(changed.empty()) << changed.size();
  EXPECT_EQ(mm.rate(f1), 1.0);
}

// Property check against the definition: every flow is either at its cap or crosses a
// saturated link on which it has the largest rate; no link is over capacity.
TEST(MaxMin, RandomInstancesSatisfyMaxMinConditions) {
  std::mt19937 rng(12345);
  for (int round = 0; round < 200; ++round) {
    const int nl = 1 + static_cast<int>(rng() % 6);
    std::vector<double> caps(nl);
    for (double& c : caps) c = 0.5 + (rng() % 100) / 20.0;
    MaxMin mm(caps);
    const int nf = 1 + static_cast<int>(rng() % 12);
    std::vector<std::vector<uint32_t>> paths(nf);
    std::vector<MaxMin::FlowId> ids;
    std::vector<double> fcap(nf);
    for (int f = 0; f < nf; ++f) {
      const int k = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < k; ++i) paths[f].push_back(rng() % nl);
      std::sort(paths[f].begin(), paths[f].end());
      paths[f].erase(std::unique(paths[f].begin(), paths[f].end()), paths[f].end());
      fcap[f] = (rng() % 3 == 0) ? 0.1 + (rng() % 40) / 20.0 : 0.0;
      ids.push_back(mm.add_flow(paths[f], fcap[f]));
    }
    mm.solve();
    std::vector<double> load(nl, 0);
    for (int f = 0; f < nf; ++f) {
      for (uint32_t l : paths[f]) load[l] += mm.rate(ids[f]);
    }
    for (int l = 0; l < nl; ++l) EXPECT_LE(load[l], caps[l] * (1 + 1e-9));
    for (int f = 0; f < nf; ++f) {
      const double r = mm.rate(ids[f]);
      EXPECT_GT(r, 0);
      if (fcap[f] > 0 && std::abs(r - fcap[f]) < 1e-9) continue;
      bool bottlenecked = false;
      for (uint32_t l : paths[f]) {
        if (load[l] < caps[l] * (1 - 1e-9)) continue;
        bool largest = true;
        for (int g = 0; g < nf; ++g) {
          if (std::find(paths[g].begin(), paths[g].end(), l) == paths[g].end()) continue;
          if (mm.rate(ids[g]) > r * (1 + 1e-9)) largest = false;
        }
        bottlenecked |= largest;
      }
      EXPECT_TRUE(bottlenecked) << "round " << round << " flow " << f;
    }
  }
}

}  // namespace
}  // namespace stretto::engine
