// NCCL's model: topology, closed-form ring times, and the algorithm/protocol choice.
//
// Expected values are computed by hand from NCCL 2.28's tuning.cc constants (written out as
// literals here, so a wrong table entry in the implementation fails these tests).

#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "stretto/costmodel/analytic.h"
#include "stretto/costmodel/nccl.h"

namespace stretto::cost {

using compiler::CommKind;
using plan::DType;

namespace {

NcclSystem hopper(double intra = 360, double inter = 50, double net_latency_us = 2.0) {
  NcclSystem s;
  s.arch = NcclArch::kHopper;
  s.nvlink = true;
  s.intra_GBps = intra;
  s.inter_GBps = inter;
  s.net_latency_us = net_latency_us;
  return s;
}

TEST(NcclTopology, ChannelSearchOnHopper) {
  // Single node, 360 GB/s: 6 channels at 60 GB/s (sm90 intra speeds), duplicated to 12 x 30.
  NcclComm c = nccl_comm(hopper(), 8, 1);
  EXPECT_EQ(c.n_channels, 12);
  EXPECT_DOUBLE_EQ(c.bw_per_channel, 30.0);
  EXPECT_DOUBLE_EQ(c.bus_bw(), 360.0);
  EXPECT_FALSE(c.inter_bottleneck);

  // One rank per node over 50 GB/s NICs: one channel at 48 (sm90 inter speeds), duplicated.
  c = nccl_comm(hopper(), 4, 4);
  EXPECT_EQ(c.n_channels, 2);
  EXPECT_DOUBLE_EQ(c.bus_bw(), 48.0);
  EXPECT_TRUE(c.inter_bottleneck);

  // 8 ranks per node: 8 NICs x 45 GB/s channels fill the 360 GB/s NVLink.
  c = nccl_comm(hopper(), 16, 2);
  EXPECT_EQ(c.n_channels, 8);
  EXPECT_DOUBLE_EQ(c.bus_bw(), 360.0);
  EXPECT_FALSE(c.inter_bottleneck);

  // busBw never exceeds the physical per-device limits.
  for (double intra : {20.0, 100.0, 360.0, 450.0, 900.0})
    for (double inter : {12.5, 25.0, 50.0, 100.0})
      for (int nodes : {1, 2, 4})
        for (int ppn : {1, 2, 8}) {
          NcclComm k = nccl_comm(hopper(intra, inter), nodes * ppn, nodes);
          double limit = nodes == 1 ? intra : std::min(intra, ppn * inter);
          EXPECT_LE(k.bus_bw(), limit + 1e-9)
              << intra << " " << inter << " " << nodes << "x" << ppn;
          EXPECT_GE(k.bus_bw(), 0.7 * limit) << intra << " " << inter << " " << nodes << "x" << ppn;
        }
}

TEST(NcclTuning, RingLatencyAndBandwidthTables) {
  NcclSystem s = hopper();
  NcclComm c = nccl_comm(s, 8, 1);
  // Ring AllReduce, one node: base + 2(n-1) * hwLat[NVLink][Ring][p].
  NcclTuning ll = nccl_tune(s, c, CommKind::kAllReduce, NcclAlgo::kRing, NcclProto::kLL);
  NcclTuning ll128 = nccl_tune(s, c, CommKind::kAllReduce, NcclAlgo::kRing, NcclProto::kLL128);
  NcclTuning simple = nccl_tune(s, c, CommKind::kAllReduce, NcclAlgo::kRing, NcclProto::kSimple);
  EXPECT_NEAR(ll.latency_us, 6.6 + 14 * 0.6, 1e-9);
  EXPECT_NEAR(ll128.latency_us, 14.0 + 14 * 1.9, 1e-9);
  EXPECT_NEAR(simple.latency_us, 8.4 + 14 * 3.4, 1e-9);
  EXPECT_NEAR(ll.bus_bw, 141.0, 1e-9);          // min(llMaxBw Hopper-N1, 360/2)
  EXPECT_NEAR(ll128.bus_bw, 0.92 * 360, 1e-9);  // < 12 channels x 36.7
  EXPECT_NEAR(simple.bus_bw, 360.0, 1e-9);
  EXPECT_NEAR(simple.ratio, 8.0 / 14.0, 1e-12);
  // Tree AllReduce: 2 * ((ppn-1) * intraLat + log2(nNodes) * interLat), bus .92, ratio .5.
  NcclTuning tree = nccl_tune(s, c, CommKind::kAllReduce, NcclAlgo::kTree, NcclProto::kSimple);
  EXPECT_NEAR(tree.latency_us, 8.4 + 2 * (7 * 4.0), 1e-9);
  EXPECT_NEAR(tree.bus_bw, 0.92 * 360, 1e-9);
  EXPECT_NEAR(tree.ratio, 0.5, 1e-12);
  // Query-time tree correction, indexed by log2(bytes / 64): 1 MB -> index 14, Simple .5;
  // 4 KB -> index 6, LL .7; 1 GB -> index 24, past the table: no correction.
  EXPECT_NEAR(
      nccl_estimate(s, c, CommKind::kAllReduce, NcclAlgo::kTree, NcclProto::kSimple, 1 << 20)
          .bus_bw,
      0.5 * tree.bus_bw, 1e-9);
  NcclTuning tree_ll = nccl_tune(s, c, CommKind::kAllReduce, NcclAlgo::kTree, NcclProto::kLL);
  EXPECT_NEAR(
      nccl_estimate(s, c, CommKind::kAllReduce, NcclAlgo::kTree, NcclProto::kLL, 4096).bus_bw,
      0.7 * tree_ll.bus_bw, 1e-9);
  EXPECT_NEAR(nccl_estimate(s, c, CommKind::kAllReduce, NcclAlgo::kTree, NcclProto::kSimple,
                            int64_t{1} << 30)
                  .bus_bw,
              tree.bus_bw, 1e-9);
  // No trees for AllGather; PAT only with one rank per node.
  EXPECT_EQ(nccl_tune(s, c, CommKind::kAllGather, NcclAlgo::kTree, NcclProto::kSimple).bus_bw, 0);
  EXPECT_EQ(nccl_tune(s, c, CommKind::kAllGather, NcclAlgo::kPat, NcclProto::kSimple).bus_bw, 0);
  NcclComm one_per_node = nccl_comm(s, 8, 8);
  EXPECT_GT(
      nccl_tune(s, one_per_node, CommKind::kAllGather, NcclAlgo::kPat, NcclProto::kSimple).bus_bw,
      0);
  // LL128 is off by default without NVLink.
  NcclSystem pci = s;
  pci.nvlink = false;
  EXPECT_EQ(
      nccl_tune(pci, nccl_comm(pci, 8, 1), CommKind::kAllReduce, NcclAlgo::kRing, NcclProto::kLL128)
          .bus_bw,
      0);
}

// Closed form of a ring all-reduce with the Simple protocol:
//   t = lat + 2(n-1)/n * bytes / busBw.
TEST(NcclRing, AllReduceMatchesClosedFormSingleNode) {
  auto cl = testing::h100_cluster(1, 8);
  auto m = testing::make_or_die(
      testing::analytic_spec(
          {{"nccl_algo", "ring"}, {"nccl_proto", "simple"}, {"nccl_intra_GBps", 360}}),
      cl);
  ASSERT_TRUE(m);
  for (int n : {2, 4, 8}) {
    for (int64_t bytes : {int64_t{1} << 10, int64_t{1} << 20, int64_t{64} << 20, int64_t{1} << 30,
                          int64_t{3'000'000'007}}) {
      CommQuery q;
      q.kind = CommKind::kAllReduce;
      q.bytes = bytes;
      q.group_size = n;
      q.nodes_spanned = 1;
      CommCost c = m->comm(q);
      const double lat_us = 8.4 + 2 * (n - 1) * 3.4;  // baseLat Ring/Simple + hwLat NVLink
      const double bus_bw = 360.0;                    // GB/s == bytes/ns
      const double expect = lat_us * 1000 + 2.0 * (n - 1) / n * bytes / bus_bw;
      EXPECT_NEAR(static_cast<double>(c.time_ns), expect, 2.0) << "n=" << n << " bytes=" << bytes;
      EXPECT_EQ(c.algo, "ring");
      EXPECT_EQ(c.proto, "simple");
      EXPECT_FALSE(c.inter_node);
      EXPECT_EQ(c.latency_ns, std::llround(lat_us * 1000));
      EXPECT_DOUBLE_EQ(c.rate_cap, bus_bw);
      testing::expect_consistent(c);
    }
  }
}

TEST(NcclRing, AllReduceMatchesClosedFormMultiNode) {
  auto cl = testing::h100_cluster(4, 8);
  for (double net_lat : {0.0, 2.0}) {
    auto m = testing::make_or_die(
        testing::analytic_spec(
            {{"nccl_algo", "ring"},
             {"nccl_proto", "simple"},
             {"nccl_net_latency_us", net_lat},
             {"nccl_intra_GBps", 360}}),
        cl);
    ASSERT_TRUE(m);
    for (int nodes : {2, 4}) {
      const int n = 8 * nodes;
      for (int64_t bytes : {int64_t{1} << 20, int64_t{256} << 20, int64_t{2} << 30}) {
        CommQuery q;
        q.kind = CommKind::kAllReduce;
        q.bytes = bytes;
        q.group_size = n;
        q.nodes_spanned = nodes;
        CommCost c = m->comm(q);
        // 8 channels x 45 GB/s (one per NIC) = 360 GB/s, limited by NVLink, not the NICs.
        const double bus_bw = 360.0;
        const int nsteps = 2 * (n - 1), inter_steps = 2 * (nodes - 1);
        const double intra_lat = std::max(3.4, 3 * 1.0);  // hwLat NVLink vs 3 x net overhead
        const double inter_lat = 14.0 + 2 * net_lat;      // hwLat NET + latencyInter (+ flush)
        double lat_us = 8.4 + (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
        lat_us *= 1.4;  // ring plateau: bytes / (nChannels * nRanks) >= 64 on sm80+
        const double expect = lat_us * 1000 + 2.0 * (n - 1) / n * bytes / bus_bw;
        EXPECT_NEAR(static_cast<double>(c.time_ns), expect, 2.0)
            << "n=" << n << " bytes=" << bytes << " net latency " << net_lat;
        EXPECT_EQ(c.algo, "ring");
        EXPECT_FALSE(c.inter_node);
        testing::expect_consistent(c);
      }
    }
  }
}

TEST(NcclRing, ReduceScatterAndAllGatherUseNMinusOneSteps) {
  auto cl = testing::h100_cluster(1, 8);
  auto m = testing::make_or_die(
      testing::analytic_spec({{"nccl_proto", "simple"}, {"nccl_intra_GBps", 360}}), cl);
  ASSERT_TRUE(m);
  for (CommKind k : {CommKind::kAllGather, CommKind::kReduceScatter}) {
    CommQuery q;
    q.kind = k;
    q.bytes = int64_t{1} << 30;  // the whole gathered / scattered buffer (NCCL's nBytes)
    q.group_size = 8;
    CommCost c = m->comm(q);
    const double expect = (8.4 + 7 * 3.4) * 1000 + 7.0 / 8 * q.bytes / 360.0;
    EXPECT_NEAR(static_cast<double>(c.time_ns), expect, 2.0);
    EXPECT_EQ(c.algo, "ring");
    testing::expect_consistent(c);
  }
}

// Returns "algo/proto" of NCCL's choice.
std::string choice(const NcclSystem& s, const NcclComm& c, int64_t bytes,
                   CommKind kind = CommKind::kAllReduce) {
  NcclEstimate e = nccl_choose(s, c, kind, bytes, DType::kBF16);
  return std::string(nccl_algo_name(e.algo)) + "/" + std::string(nccl_proto_name(e.proto));
}

// The chosen pair is the argmin of all available estimates.
void expect_argmin(const NcclSystem& s, const NcclComm& c, CommKind kind, int64_t bytes) {
  NcclEstimate best = nccl_choose(s, c, kind, bytes, DType::kBF16);
  ASSERT_TRUE(best.available);
  for (int a = 0; a < kNcclNumAlgos; ++a)
    for (int p = 0; p < kNcclNumProtos; ++p) {
      NcclEstimate e =
          nccl_estimate(s, c, kind, static_cast<NcclAlgo>(a), static_cast<NcclProto>(p), bytes);
      if (e.available) {
        EXPECT_LE(best.time_us, e.time_us) << bytes;
      }
    }
}

// Smallest size in [lo, hi] for which pred holds, given pred(hi) and !pred(lo).
template <class Pred>
int64_t crossover(int64_t lo, int64_t hi, Pred pred) {
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (pred(mid) ? hi : lo) = mid;
  }
  return hi;
}

TEST(NcclChoice, SmallMessagesUseLLLargeUseRingSimpleSingleNode) {
  NcclSystem s = hopper();
  NcclComm c = nccl_comm(s, 8, 1);
  EXPECT_EQ(choice(s, c, 1024), "ring/ll");
  EXPECT_EQ(choice(s, c, int64_t{1} << 32), "ring/simple");
  auto simple = [&](int64_t b) { return choice(s, c, b) == "ring/simple"; };
  const int64_t x = crossover(1024, int64_t{1} << 32, simple);
  // Where the model says: LL128 (lat 40.6 us, algBw 0.92*360*8/14) meets Simple
  // (lat 56 us, algBw 360*8/14): bytes = 15.4 us * 1000 / (1/189.26 - 1/205.71) ~ 36.4 MB.
  const double ll128_bw = 0.92 * 360 * 8 / 14, simple_bw = 360.0 * 8 / 14;
  const double expect = (56.0 - 40.6) * 1000 / (1 / ll128_bw - 1 / simple_bw);
  EXPECT_NEAR(static_cast<double>(x), expect, 1e-3 * expect);
  EXPECT_EQ(choice(s, c, x - 1), "ring/ll128");
  EXPECT_EQ(choice(s, c, x), "ring/simple");
  // ... and it stays Simple above, LL/LL128 below.
  for (int64_t b = 1024; b < x; b *= 2) EXPECT_NE(choice(s, c, b), "ring/simple") << b;
  for (int64_t b = x; b <= (int64_t{1} << 34); b *= 2)
    EXPECT_EQ(choice(s, c, b), "ring/simple") << b;
  for (int64_t b = 64; b <= (int64_t{1} << 34); b *= 4)
    expect_argmin(s, c, CommKind::kAllReduce, b);
}

TEST(NcclChoice, MultiNodeLatencyRegimeAndBandwidthRegime) {
  // 4 nodes x 8: trees beat rings at small and medium sizes (log2(nNodes) network hops instead
  // of 2(nNodes-1)), rings with Simple win for large messages.
  NcclSystem s = hopper();
  NcclComm c = nccl_comm(s, 32, 4);
  const std::string small = choice(s, c, 4096);
  EXPECT_TRUE(small == "tree/ll" || small == "ring/ll") << small;
  EXPECT_EQ(choice(s, c, int64_t{1} << 34), "ring/simple");
  auto simple = [&](int64_t b) { return choice(s, c, b) == "ring/simple"; };
  const int64_t x = crossover(4096, int64_t{1} << 34, simple);
  EXPECT_NE(choice(s, c, x - 1), "ring/simple");
  EXPECT_EQ(choice(s, c, x), "ring/simple");
  // At the crossover both sides predict (nearly) the same time.
  NcclEstimate below = nccl_choose(s, c, CommKind::kAllReduce, x - 1, DType::kBF16);
  NcclEstimate at = nccl_choose(s, c, CommKind::kAllReduce, x, DType::kBF16);
  NcclEstimate other = nccl_estimate(s, c, CommKind::kAllReduce, below.algo, below.proto, x);
  EXPECT_NEAR(at.time_us, other.time_us, 1e-3 * at.time_us);
  bool saw_tree = false;
  for (int64_t b = 4096; b < x; b *= 2) saw_tree |= choice(s, c, b).starts_with("tree");
  EXPECT_TRUE(saw_tree);
  for (int64_t b = 64; b <= (int64_t{1} << 34); b *= 4)
    expect_argmin(s, c, CommKind::kAllReduce, b);
}

TEST(NcclChoice, PatForAllGatherWithOneRankPerNode) {
  NcclSystem s = hopper();
  NcclComm c = nccl_comm(s, 16, 16);
  // PAT's latency (8 + log2(16) * (14 + 2 + 2) / 3.5 + 2.8 * 16 = 73.4 us) beats the 15-hop
  // ring for small messages (ring/LL: 6.6 + 15 * (5 + 2) = 111.6 us); its 0.75 bandwidth factor
  // loses for large ones.
  EXPECT_EQ(choice(s, c, 4096, CommKind::kAllGather).substr(0, 3), "pat");
  EXPECT_EQ(choice(s, c, int64_t{1} << 32, CommKind::kAllGather), "ring/simple");
}

TEST(NcclChoice, MasksActLikeNcclAlgoAndProto) {
  NcclSystem s = hopper();
  NcclComm c = nccl_comm(s, 8, 1);
  s.algo_enabled = {true, false, false};  // NCCL_ALGO=tree
  EXPECT_TRUE(choice(s, c, int64_t{1} << 30).starts_with("tree/"));
  // AllGather has no tree: NCCL would fail; we fall back to the unmasked choice.
  EXPECT_EQ(choice(s, c, int64_t{1} << 30, CommKind::kAllGather), "ring/simple");
  s = hopper();
  s.proto_enabled = {true, false, false};  // NCCL_PROTO=LL
  s.proto_default_ll128 = false;
  EXPECT_EQ(choice(s, c, int64_t{1} << 30), "ring/ll");
}

TEST(NcclChoice, Fp8RingsOverEightRanksAreAvoided) {
  NcclSystem s = hopper();
  NcclComm c = nccl_comm(s, 16, 2);
  NcclEstimate bf16 = nccl_choose(s, c, CommKind::kAllReduce, int64_t{1} << 30, DType::kBF16);
  NcclEstimate fp8 = nccl_choose(s, c, CommKind::kAllReduce, int64_t{1} << 30, DType::kFP8);
  EXPECT_EQ(bf16.algo, NcclAlgo::kRing);
  EXPECT_EQ(fp8.algo, NcclAlgo::kTree);
  EXPECT_GE(fp8.time_us, bf16.time_us);  // the reported time is not penalised by 1024
  EXPECT_LT(fp8.time_us, 100 * bf16.time_us);
}

TEST(NcclComm, AllReduceThroughTheCostModelIsConsistent) {
  auto cl = testing::h100_cluster(4, 8);
  auto m = testing::make_or_die(testing::analytic_spec(), cl);
  ASSERT_TRUE(m);
  for (int g : {2, 8, 16, 32})
    for (int nodes : {1, 2, 4}) {
      if (nodes > g || (nodes == 1 && g > 8) || g / nodes > 8) continue;
      for (int64_t b = 1; b <= (int64_t{1} << 33); b *= 8) {
        for (CommKind k : {CommKind::kAllReduce, CommKind::kAllGather, CommKind::kReduceScatter}) {
          CommQuery q{k, b, g, nodes, false, DType::kBF16};
          CommCost c = m->comm(q);
          testing::expect_consistent(c);
          // Never faster than the bottleneck link allows.
          EXPECT_LE(c.rate_cap, (c.inter_node ? 50.0 : 360.0) + 1e-9);
          // Agrees with NCCL's own estimate up to rounding.
          AnalyticParams p = *parse_analytic_params(plan::Json::object(), cl, "/costmodel", "");
          NcclSystem s = p.nccl;
          NcclEstimate e = nccl_choose(s, nccl_comm(s, g, nodes), k, b, DType::kBF16);
          EXPECT_NEAR(static_cast<double>(c.time_ns), e.time_us * 1000,
                      2.0 + 1e-9 * e.time_us * 1000);
          EXPECT_EQ(c.algo, nccl_algo_name(e.algo));
        }
      }
    }
}

}  // namespace
}  // namespace stretto::cost
