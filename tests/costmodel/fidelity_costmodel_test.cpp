// Issue 9 in the cost model: NCCL's own NVLink bandwidths, the A100's sustained clock, and the
// two-input backward of unfused attention's activation GEMMs. Numbers derived in comments.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "helpers.h"
#include "stretto/costmodel/analytic.h"
#include "stretto/costmodel/nccl.h"

namespace stretto::cost {

using compiler::OpKind;
using plan::ClusterSpec;
using plan::Json;
using plan::Pass;

namespace {

ClusterSpec a100(int nodes = 1) {
  ClusterSpec c;
  c.preset = "a100-sxm";
  c.nodes = nodes;
  c.devices_per_node = 8;
  c.device = {"a100-sxm", 312, 2039, 80, 108};
  c.intra_node = {300, 2.0};
  c.inter_node = {25, 5.0};
  return c;
}

AnalyticParams params_of(const ClusterSpec& c, Json options = Json::object()) {
  auto p = parse_analytic_params(options, c, "/costmodel", "t.json");
  EXPECT_TRUE(p);
  return p ? *p : AnalyticParams{};
}

TEST(NcclLinks, NvlinkBandwidthAsNcclCountsIt) {
  // NCCL topo.h: SM80_NVLINK_BW 20.0 per link vs 25 on the data sheet: 300 -> 240 GB/s;
  // SM90_NVLINK_BW 20.6: 450 -> 370.8 GB/s.
  EXPECT_DOUBLE_EQ(params_of(a100()).nccl_intra_GBps, 240.0);
  EXPECT_DOUBLE_EQ(params_of(testing::h100_cluster(1, 8, 450)).nccl_intra_GBps, 450 * 20.6 / 25);
  // The option overrides; a PCIe intra-node link is left alone.
  EXPECT_DOUBLE_EQ(params_of(a100(), {{"nccl_intra_GBps", 300}}).nccl_intra_GBps, 300.0);
  EXPECT_DOUBLE_EQ(params_of(testing::h100_cluster(1, 8, 32)).nccl_intra_GBps, 32.0);
}

TEST(NcclLinks, SingleNodeAllReduceUsesTheNcclBandwidth) {
  // 8 A100s, one node, NCCL sees 240 GB/s: the Ampere speed array tries 40 GB/s first:
  // 6 channels x 40 = 240, duplicated to 12 x 20 (ncclTopoDupChannels): busBw 240. A large
  // all-reduce picks Ring/Simple (uncapped busBw), so the collective's rate cap is 240 GB/s,
  // below the 300 GB/s link.
  const AnalyticParams p = params_of(a100());
  CommQuery q;
  q.kind = compiler::CommKind::kAllReduce;
  q.bytes = int64_t{1} << 30;
  q.group_size = 8;
  q.nodes_spanned = 1;
  const CommCost c = analytic_comm(p, a100(), q);
  testing::expect_consistent(c);
  EXPECT_EQ(c.algo, "ring");
  EXPECT_EQ(c.proto, "simple");
  EXPECT_DOUBLE_EQ(c.rate_cap, 240.0);
  // Ring all-reduce moves 2(n-1)/n of the buffer: 1.75 GiB of wire bytes.
  EXPECT_EQ(c.wire_bytes, (int64_t{7} << 30) / 4);
}

TEST(SustainedClock, A100GemmsRunAtTheSustainedClock) {
  // A100: 312 TFLOPS at 1410 MHz boost, 1305 MHz sustained: ratio 0.92553.
  const AnalyticParams p = params_of(a100());
  EXPECT_DOUBLE_EQ(p.sustained_clock_ratio, 1305.0 / 1410.0);
  EXPECT_DOUBLE_EQ(params_of(testing::h100_cluster()).sustained_clock_ratio, 1.0);
  // A GEMM whose time is pure compute takes 1410/1305 x as long as at the boost clock.
  ComputeQuery q;
  q.kind = OpKind::kMlpUp;
  q.pass = Pass::kF;
  q.gemm = {8192, 8192, 8192, 1};
  q.flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
  q.bytes = 3 * 8192 * 8192 * 2;
  const ComputeCost at_sustained = analytic_compute(p, a100().device, q);
  const ComputeCost at_boost =
      analytic_compute(params_of(a100(), {{"sustained_clock_ratio", 1.0}}), a100().device, q);
  EXPECT_NEAR(static_cast<double>(at_sustained.ns) / static_cast<double>(at_boost.ns),
              1410.0 / 1305.0, 1e-6);
}

TEST(ActivationGemms, BackwardIsTwoInputGradients) {
  // QK^T per head, [s,d]x[d,s] with s = 2048, d = 128, batch 64: its BI (dQ and dK) is priced
  // like a weight GEMM's B: half the FLOPs at the dX shape, half at the dW shape, two kernels.
  const AnalyticParams p = params_of(testing::h100_cluster());
  const plan::DeviceSpec dev = testing::h100_cluster().device;
  ComputeQuery scores;
  scores.kind = OpKind::kAttnScores;
  scores.pass = Pass::kBI;
  scores.gemm = {2048, 2048, 128, 64};
  scores.flops = 4.0 * 2048 * 2048 * 128 * 64;
  ComputeQuery as_b = scores;
  as_b.kind = OpKind::kQKV;  // a weight GEMM's full backward (BI + BW) of the same shape
  as_b.pass = Pass::kB;
  EXPECT_EQ(analytic_compute(p, dev, scores).ns, analytic_compute(p, dev, as_b).ns);
}

TEST(MeasuredGemms, AnalyticCurveAgainstH100Measurements) {
  // h100_gemm_measured.json: 36 bf16 GEMMs (forward, input gradient, weight gradient of the
  // QKV, output, MLP-up and MLP-down projections of GPT 7B (TP 1), 13B (TP 8) and 175B (TP 8)
  // layers) measured with torch.matmul on an H100 SXM (h100_gemm_bench.py). Loaded as a
  // profiled table, each is returned exactly. The h100-sxm preset's calibrated curve (fitted
  // to another H100's sweep, h100_kernels_measured_raw.json) is off by 8.5 % on average over
  // these 36 (the generic 0.80 curve: 10.6 %) and by at most 38.5 %: the 13B output
  // projection's weight gradient at TP 8 (rows k = 640, depth 4096) measures 413 TFLOPS where
  // the smooth curve gives 672 (thin TP-split GEMMs are the curve's known weak spot; see
  // docs/fidelity.md).
  const std::string dir = std::string(STRETTO_TEST_DATA) + "/costmodel";
  plan::CostModelSpec spec;
  spec.kind = plan::CostModelSpec::Kind::kProfiled;
  spec.profile = dir + "/h100_gemm_measured.json";
  spec.options = Json::object();
  const ClusterSpec cl = testing::h100_cluster(1, 8, 450);
  auto profiled = testing::make_or_die(spec, cl, dir);
  auto analytic = testing::make_or_die(testing::analytic_spec(), cl);
  ASSERT_TRUE(profiled && analytic);
  std::ifstream in(spec.profile);
  const Json table = Json::parse(in);
  size_t n = 0;
  double sum_abs = 0;
  for (const auto& k : table["kernels"]) {
    const ComputeQuery q = testing::measured_gemm(k["op"], k["pass"], k["m"], k["k"], k["n"]);
    const int64_t measured = k["ns"].get<int64_t>();
    EXPECT_EQ(profiled->compute(q).ns, measured) << k.dump();
    const double ratio = static_cast<double>(analytic->compute(q).ns) / measured;
    EXPECT_NEAR(ratio, 1.0, 0.40) << k.dump();
    sum_abs += std::abs(ratio - 1.0);
    ++n;
  }
  EXPECT_EQ(n, 36u);
  EXPECT_LE(sum_abs / static_cast<double>(n), 0.09);
}

}  // namespace
}  // namespace stretto::cost
