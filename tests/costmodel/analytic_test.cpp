// The analytic model's compute side, point-to-point flows and defaults.

#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "stretto/costmodel/analytic.h"

namespace stretto::cost {

using compiler::CommKind;
using compiler::OpKind;
using plan::ClusterSpec;
using plan::DType;
using plan::Json;
using plan::Pass;

namespace {

AnalyticParams params(Json options = Json::object(), ClusterSpec cl = testing::h100_cluster()) {
  auto p = parse_analytic_params(options, cl, "/costmodel", "plan.json");
  EXPECT_TRUE(p.has_value());
  return p ? *p : AnalyticParams{};
}

TEST(GemmEfficiency, MonotoneInSizeAndBelowPeak) {
  const plan::DeviceSpec dev = testing::h100_cluster().device;
  AnalyticParams p = params({{"wave_quantization", false}});
  double prev = 0;
  for (double s = 32; s <= 32768; s *= std::sqrt(2.0)) {
    const int64_t n = std::llround(s);
    const double e = gemm_efficiency(p, dev, n, n, n);
    EXPECT_GT(e, prev) << "square GEMM of size " << n;
    EXPECT_LE(e, p.gemm_efficiency);
    EXPECT_LT(e, 1.0);
    prev = e;
  }
  // Monotone along each dimension too (tokens m, width n, depth k, and grouped batch).
  for (int dim = 0; dim < 4; ++dim) {
    prev = 0;
    for (int64_t x = 1; x <= 65536; x *= 2) {
      int64_t m = 2048, n = 2048, k = 2048, b = 1;
      (dim == 0 ? m : dim == 1 ? n : dim == 2 ? k : b) = x;
      const double e = gemm_efficiency(p, dev, m, n, k, b);
      EXPECT_GE(e, prev) << "dim " << dim << " x " << x;
      prev = e;
    }
  }
  // Small GEMMs are far from peak, large ones reach the published 0.7-0.8 of peak (the generic
  // curve, on a device kind without a calibration).
  EXPECT_LT(gemm_efficiency(p, dev, 256, 256, 256), 0.3);
  ClusterSpec generic = testing::h100_cluster();
  generic.device.kind = "custom";
  const double big = gemm_efficiency(params(Json::object(), generic), dev, 8192, 8192, 8192);
  EXPECT_GT(big * dev.peak_tflops, 700);
  EXPECT_LT(big * dev.peak_tflops, 800);
  // The h100-sxm preset's measured curve: 0.711 * 8192 / (8192 + 188) = 0.695 of 989.4, 688
  // TFLOPS. Its sweep's 465 largest GEMMs (m n k >= 2^38) measure a median of 690 TFLOPS
  // (h100_kernels_measured_raw.json; 4-8k shapes that run for less time reach 770-800).
  const double calibrated = gemm_efficiency(params(), dev, 8192, 8192, 8192);
  EXPECT_NEAR(calibrated * dev.peak_tflops, 687.7, 0.1);
}

TEST(GemmEfficiency, WaveQuantization) {
  const plan::DeviceSpec dev = testing::h100_cluster().device;  // 132 SMs
  AnalyticParams q = params({{"wave_quantization", true}});  // quantised (generic default)
  AnalyticParams smooth = params({{"wave_quantization", false}});
  // 132 tiles of 128x128 fill one wave; 133 need a second, nearly empty one.
  const double one_wave = gemm_efficiency(q, dev, 128 * 132, 128, 8192);
  const double two_waves = gemm_efficiency(q, dev, 128 * 133, 128, 8192);
  EXPECT_NEAR(two_waves / one_wave, 133.0 / 264.0, 1e-9);
  // Quantisation only ever loses efficiency against the smooth curve.
  for (int64_t m : {1, 100, 1000, 4096, 16896, 17024, 100000})
    for (int64_t n : {64, 128, 1000, 4096})
      for (int64_t k : {64, 512, 4096})
        EXPECT_LE(gemm_efficiency(q, dev, m, n, k), gemm_efficiency(smooth, dev, m, n, k) + 1e-12);
}

TEST(AnalyticCompute, GemmTimeMonotoneInTokensWithQuantisation) {
  auto m = testing::make_or_die(testing::analytic_spec(), testing::h100_cluster());
  ASSERT_TRUE(m);
  int64_t prev = 0;
  for (int64_t tokens = 128; tokens <= 65536; tokens += 128) {
    ComputeQuery q;
    q.kind = OpKind::kMlpUp;
    q.pass = Pass::kF;
    q.gemm = {tokens, 14336, 4096, 1};
    q.flops = 2.0 * tokens * 14336 * 4096;
    q.bytes = 2 * (tokens * 4096 + 4096 * 14336 + tokens * 14336);
    const int64_t t = m->compute(q).ns;
    EXPECT_GE(t, prev) << tokens;
    prev = t;
  }
}

TEST(AnalyticCompute, RooflineAndPasses) {
  const ClusterSpec cl = testing::h100_cluster();
  AnalyticParams p = params();
  auto m = testing::make_or_die(testing::analytic_spec(), cl);
  ASSERT_TRUE(m);
  const int64_t M = 8192, N = 8192, K = 8192;
  ComputeQuery q;
  q.kind = OpKind::kOutProj;
  q.pass = Pass::kF;
  q.gemm = {M, N, K, 1};
  q.flops = 2.0 * M * N * K;
  q.bytes = 2 * (M * K + K * N + M * N);
  const ComputeCost f = m->compute(q);
  EXPECT_FALSE(f.mem_bound);
  const double peak_per_ns = cl.device.peak_tflops * 1e3;
  EXPECT_NEAR(static_cast<double>(f.ns),
              q.flops / (peak_per_ns * gemm_efficiency(p, cl.device, q.gemm)), 1.0);
  // B = BI + BW: twice the flops, the BI and BW GEMMs (square: same shape as F).
  q.pass = Pass::kB;
  q.flops *= 2;
  EXPECT_NEAR(static_cast<double>(m->compute(q).ns), 2.0 * f.ns, 2.0);
  // FP8 doubles the peak, FP32 (TF32) halves it.
  q.pass = Pass::kF;
  q.flops /= 2;
  q.dtype = DType::kFP8;
  EXPECT_NEAR(static_cast<double>(m->compute(q).ns), f.ns / 2.0, 1.0);
  q.dtype = DType::kFP32;
  EXPECT_NEAR(static_cast<double>(m->compute(q).ns), f.ns * 2.0, 2.0);
  // A skinny GEMM (decode-like, 16 tokens) is limited by reading the weights.
  q.dtype = DType::kBF16;
  q.gemm = {16, N, K, 1};
  q.flops = 2.0 * 16 * N * K;
  q.bytes = 2 * (16 * K + K * N + 16 * N);
  const ComputeCost skinny = m->compute(q);
  EXPECT_TRUE(skinny.mem_bound);
  EXPECT_NEAR(static_cast<double>(skinny.ns), q.bytes / (cl.device.hbm_GBps * p.memory_efficiency),
              1.0);
  // Nothing to do: no time, not even the launch floor.
  q.flops = 0;
  q.bytes = 0;
  EXPECT_EQ(m->compute(q).ns, 0);
}

TEST(AnalyticCompute, MemoryBoundOpIsBytesOverHbmWithinLaunchFloor) {
  const ClusterSpec cl = testing::h100_cluster();
  // kernel_style roofline: the norms, activations, loss and embedding at memory_efficiency x
  // HBM (the h100-sxm default, fused, prices them at measured rates: KernelStyle below).
  auto m = testing::make_or_die(
      testing::analytic_spec({{"memory_efficiency", 1.0}, {"kernel_style", "roofline"}}), cl);
  ASSERT_TRUE(m);
  const double floor_ns = 3000;  // launch_floor_us default
  for (OpKind k : {OpKind::kNorm, OpKind::kMlpAct, OpKind::kLoss, OpKind::kEmbedding}) {
    for (int64_t bytes :
         {int64_t{1} << 10, int64_t{1} << 20, int64_t{64} << 20, int64_t{1} << 30}) {
      ComputeQuery q;
      q.kind = k;
      q.pass = Pass::kF;
      q.bytes = bytes;
      q.flops = 5.0 * bytes;  // elementwise flops do not matter
      const ComputeCost c = m->compute(q);
      const double ideal = static_cast<double>(bytes) / cl.device.hbm_GBps;  // bytes/ns
      EXPECT_TRUE(c.mem_bound);
      EXPECT_GE(static_cast<double>(c.ns), ideal);
      EXPECT_LE(static_cast<double>(c.ns), ideal + floor_ns);
      EXPECT_GE(c.ns, static_cast<int64_t>(floor_ns));
    }
  }
  // The default 0.9 efficiency slows large streams by exactly 1/0.9 (a residual add: no
  // measured rate in any kernel style).
  auto d = testing::make_or_die(testing::analytic_spec(), cl);
  ComputeQuery q;
  q.kind = OpKind::kResidual;
  q.bytes = int64_t{1} << 30;
  EXPECT_NEAR(static_cast<double>(d->compute(q).ns), q.bytes / (cl.device.hbm_GBps * 0.9), 1.0);
}

TEST(AnalyticComm, SendRecvIsOneFlowOverTheLinkBetweenTheRanks) {
  const ClusterSpec cl = testing::h100_cluster(2, 8);
  auto m = testing::make_or_die(testing::analytic_spec(), cl);
  ASSERT_TRUE(m);
  CommQuery q;
  q.kind = CommKind::kSendRecv;
  q.bytes = 64 << 20;
  q.group_size = 2;
  q.nodes_spanned = 1;
  CommCost c = m->comm(q);
  EXPECT_EQ(c.wire_bytes, q.bytes);
  EXPECT_DOUBLE_EQ(c.rate_cap, 360.0);
  EXPECT_EQ(c.latency_ns,
            std::llround((1.0 + 3.4) * 1000));  // link latency + hwLat NVLink ring/Simple
  EXPECT_FALSE(c.inter_node);
  EXPECT_EQ(c.algo, "p2p");
  testing::expect_consistent(c);
  q.nodes_spanned = 2;
  c = m->comm(q);
  EXPECT_DOUBLE_EQ(c.rate_cap, 50.0);
  EXPECT_EQ(c.latency_ns, std::llround((2.0 + 14.0) * 1000));  // + hwLat NET ring/Simple
  EXPECT_TRUE(c.inter_node);
  testing::expect_consistent(c);
  // p2p_latency_us overrides the derived latency.
  auto o = testing::make_or_die(testing::analytic_spec({{"p2p_latency_us", 7.5}}), cl);
  EXPECT_EQ(o->comm(q).latency_ns, 7500);
}

TEST(AnalyticComm, AllToAllBottleneck) {
  const ClusterSpec cl = testing::h100_cluster(4, 8);
  auto m = testing::make_or_die(testing::analytic_spec(), cl);
  ASSERT_TRUE(m);
  const int64_t S = int64_t{256} << 20;
  CommQuery q;
  q.kind = CommKind::kAllToAll;
  q.bytes = S;
  // 8 ranks on one node: 7/8 of the buffer over NVLink.
  q.group_size = 8;
  q.nodes_spanned = 1;
  CommCost c = m->comm(q);
  EXPECT_EQ(c.wire_bytes, (S * 7 + 7) / 8);
  EXPECT_DOUBLE_EQ(c.rate_cap, 360.0);
  EXPECT_FALSE(c.inter_node);
  testing::expect_consistent(c);
  // 32 ranks on 4 nodes: 24/32 of the buffer over the 50 GB/s NIC beats 7/32 over NVLink.
  q.group_size = 32;
  q.nodes_spanned = 4;
  c = m->comm(q);
  EXPECT_EQ(c.wire_bytes, S * 24 / 32);
  EXPECT_DOUBLE_EQ(c.rate_cap, 50.0);
  EXPECT_TRUE(c.inter_node);
  testing::expect_consistent(c);
  // With very fast NICs the NVLink share becomes the bottleneck.
  ClusterSpec fast = cl;
  fast.inter_node.bandwidth_GBps = 2000;
  auto f = testing::make_or_die(testing::analytic_spec(), fast);
  c = f->comm(q);
  EXPECT_FALSE(c.inter_node);
  EXPECT_EQ(c.wire_bytes, S * 7 / 32);
  testing::expect_consistent(c);
}

TEST(AnalyticComm, IslandsUseTheDcnLink) {
  ClusterSpec cl = testing::h100_cluster(4, 8);
  cl.islands = 2;
  cl.dcn = {12.5, 10.0};
  auto m = testing::make_or_die(testing::analytic_spec(), cl);
  ASSERT_TRUE(m);
  CommQuery q;
  q.kind = CommKind::kSendRecv;
  q.bytes = 1 << 30;
  q.nodes_spanned = 2;
  q.crosses_island = true;
  CommCost c = m->comm(q);
  EXPECT_DOUBLE_EQ(c.rate_cap, 12.5);
  EXPECT_TRUE(c.inter_node);
  q.kind = CommKind::kAllReduce;
  q.group_size = 4;
  q.nodes_spanned = 4;
  CommCost dcn = m->comm(q);
  q.crosses_island = false;
  CommCost ib = m->comm(q);
  EXPECT_GT(dcn.time_ns, 3 * ib.time_ns);
  EXPECT_LE(dcn.rate_cap, 12.5);
}

TEST(AnalyticComm, EmptyAndTrivialCommunication) {
  auto m = testing::make_or_die(testing::analytic_spec(), testing::h100_cluster());
  CommQuery q;
  q.kind = CommKind::kAllReduce;
  q.bytes = 0;
  q.group_size = 8;
  EXPECT_EQ(m->comm(q).time_ns, 0);
  q.bytes = 1 << 20;
  q.group_size = 1;
  EXPECT_EQ(m->comm(q).time_ns, 0);
  q.kind = CommKind::kNone;
  q.group_size = 8;
  EXPECT_EQ(m->comm(q).time_ns, 0);
}

TEST(AnalyticModel, Defaults) {
  auto m = testing::make_or_die(testing::analytic_spec(), testing::h100_cluster());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->name(), "analytic");
  EXPECT_EQ(m->dispatch_ns(), 5000);
  EXPECT_DOUBLE_EQ(m->interference().comm_sm_share, 20.0 / 132.0);  // DeepSeek-V3: 20 of 132 SMs
  EXPECT_DOUBLE_EQ(m->interference().comm_hbm_share, 0.10);
  AnalyticParams p = params();
  EXPECT_EQ(p.nccl.arch, NcclArch::kHopper);
  EXPECT_TRUE(p.nccl.nvlink);
  ClusterSpec a100 = testing::h100_cluster();
  a100.device.kind = "a100-sxm";
  a100.device.sms = 108;
  EXPECT_EQ(params(Json::object(), a100).nccl.arch, NcclArch::kAmpere);
  EXPECT_DOUBLE_EQ(params(Json::object(), a100).comm_sm_share, 20.0 / 108.0);
  auto o = testing::make_or_die(
      testing::analytic_spec(
          {{"comm_sm_share", 0.25}, {"comm_hbm_share", 0.3}, {"dispatch_us", 0}}),
      testing::h100_cluster());
  EXPECT_DOUBLE_EQ(o->interference().comm_sm_share, 0.25);
  EXPECT_DOUBLE_EQ(o->interference().comm_hbm_share, 0.3);
  EXPECT_EQ(o->dispatch_ns(), 0);
}

}  // namespace
}  // namespace stretto::cost

namespace stretto::cost {
namespace {

ClusterSpec h200_cluster() {
  ClusterSpec c = testing::h100_cluster();
  c.preset = c.device.kind = "h200";
  c.device.hbm_GBps = 4800;
  return c;
}

ComputeQuery mem_query(OpKind k, Pass pass, int64_t bytes) {
  ComputeQuery q;
  q.kind = k;
  q.pass = pass;
  q.bytes = bytes;
  return q;
}

// The h200 preset's three kernel styles (`fused` is the default).
struct Styles {
  std::unique_ptr<CostModel> fused = testing::make_or_die(testing::analytic_spec({}), h200_cluster());
  std::unique_ptr<CostModel> eager =
      testing::make_or_die(testing::analytic_spec({{"kernel_style", "eager"}}), h200_cluster());
  std::unique_ptr<CostModel> roof =
      testing::make_or_die(testing::analytic_spec({{"kernel_style", "roofline"}}), h200_cluster());
};

TEST(KernelStyle, FusedAndEagerRatesOnH200) {
  const Styles st;
  ASSERT_TRUE(st.fused && st.eager && st.roof);
  const auto& [fused, eager, roof] = st;
  // A Llama-3-8B RMSNorm forward (T = h = 4096, bf16): 2 x 4096 x 4096 x 2 + 4096 x 2 =
  // 67,117,056 bytes. Fused: F.rms_norm measured 0.0254 ms on the H200 (2642.4 GB/s) ->
  // 25,400 ns; eager: the same kernel (a plain PyTorch program's F.rms_norm is ATen's fused
  // kernel in torch 2.11, not the fp32 formula's 0.2431 ms); roofline: at 0.9 x 4800 GB/s ->
  // 15,536.4 -> 15,537 ns.
  const ComputeQuery nf = mem_query(OpKind::kNorm, Pass::kF, 67117056);
  EXPECT_EQ(fused->compute(nf).ns, 25400);
  EXPECT_EQ(eager->compute(nf).ns, 25400);
  EXPECT_EQ(roof->compute(nf).ns, 15537);
  // Its backward (B = BI 3 x T x h x 2 + h x 2 = 100,671,488 and BW 2 x T x h x 2 + h x 2 =
  // 67,117,056 bytes): fused reads x and dY once, so only the BI bytes at the layer-norm
  // backward's measured 2401 GB/s: 41,928.1 -> 41,929 ns; a split BW pass pays its own bytes.
  ComputeQuery nb = mem_query(OpKind::kNorm, Pass::kB, 100671488 + 67117056);
  nb.bw_bytes = 67117056;
  EXPECT_EQ(fused->compute(nb).ns, 41929);
  EXPECT_EQ(fused->compute(mem_query(OpKind::kNorm, Pass::kBW, 67117056)).ns, 27954);  // /2401
  // Eager: all 167,788,544 bytes at the rate ATen's norm backward reached at this shape in the
  // H200 kernel sweep (layer_norm B, tokens 4096, hidden 4096: 0.09456 ms, 1774.4 GB/s):
  // 94,560 ns (188,917 before, on the microbenchmark's row, twice the sweep's kernel).
  EXPECT_NEAR(static_cast<double>(eager->compute(nb).ns), 94560, 1);
  // Embedding backward: the dense index-add over vocab x hidden. Compiler bytes 2 x T x h x 2
  // = 67,108,864 plus the 32000 x 4096 x 2 = 262,144,000-byte gradient; measured 0.6289 ms
  // less (3 x 262,144,000 + 33,554,432) / 4237 -> 435,369.5 ns, so the same op costs that.
  ComputeQuery eb = mem_query(OpKind::kEmbedding, Pass::kB, 67108864);
  eb.param_bytes = 262144000;
  EXPECT_NEAR(static_cast<double>(fused->compute(eb).ns),
              0.6289e6 - (3.0 * 262144000 + 33554432) / 4237, 1.0);
  // Roofline leaves the parameter bytes out (the model before the measured rates).
  EXPECT_EQ(roof->compute(eb).ns, static_cast<int64_t>(std::ceil(67108864 / 4320.0)));
  // Residual adds keep memory_efficiency x HBM in every style.
  const ComputeQuery add = mem_query(OpKind::kResidual, Pass::kF, 100663296);
  EXPECT_EQ(fused->compute(add).ns, roof->compute(add).ns);
  EXPECT_EQ(eager->compute(add).ns, roof->compute(add).ns);
}

// kernel_style eager pays split's backward: the gradients of an input read as split views of
// one tensor are gathered with one cat (read and written: 2 x split_grad_bytes at 0.9 x 4800 =
// 4320 GB/s), on top of the op's kernels, in B and BI (not BW). A Llama-3-8B SwiGLU backward
// (T = 4096, f = 14336; its [T, 2f] input, 234,881,024 bytes, is the gate and up halves of the
// up GEMM's output): +108,741.2 ns; a flash attention backward (q, k, v: views of the QKV
// output, [T, 6144] = 50,331,648 bytes): +23,301.7 ns on a compute-bound op. Fused
// (Transformer Engine writes the halves in place) and roofline pay nothing.
// What `m` charges for `q` with `field` at `v` over `field` at 0 (ns).
int64_t paid(const CostModel& m, ComputeQuery q, int64_t ComputeQuery::*field, int64_t v) {
  q.*field = 0;
  const int64_t without = m.compute(q).ns;
  q.*field = v;
  return m.compute(q).ns - without;
}

TEST(KernelStyle, EagerGathersSplitInputGradientsWithACat) {
  const Styles st;
  ASSERT_TRUE(st.fused && st.eager && st.roof);
  const auto& [fused, eager, roof] = st;
  constexpr auto kSplit = &ComputeQuery::split_grad_bytes;
  ComputeQuery act = mem_query(OpKind::kMlpAct, Pass::kB, 469762048);
  for (const Pass pass : {Pass::kB, Pass::kBI, Pass::kBW}) {  // BW has no input gradient
    act.pass = pass;
    EXPECT_NEAR(static_cast<double>(paid(*eager, act, kSplit, 234881024)),
                pass == Pass::kBW ? 0.0 : 2.0 * 234881024 / 4320, 1.0)
        << plan::pass_name(pass);
    EXPECT_EQ(paid(*fused, act, kSplit, 234881024), 0) << plan::pass_name(pass);
    EXPECT_EQ(paid(*roof, act, kSplit, 234881024), 0) << plan::pass_name(pass);
  }
  // Flash attention backward, Llama-3-8B layer: compute-bound, the cat comes after the kernel.
  ComputeQuery att;
  att.kind = OpKind::kAttention;
  att.pass = Pass::kB;
  att.gemm = {4096, 4096, 128, 32};
  att.flops = 2.5 * 2.0 * 4096.0 * 4096 * 4096;
  att.bytes = 2 * (50331648 + 33554432) + 33554432;
  EXPECT_NEAR(static_cast<double>(paid(*eager, att, kSplit, 50331648)), 2.0 * 50331648 / 4320,
              1.0);
  EXPECT_EQ(paid(*fused, att, kSplit, 50331648), 0);
}

// kernel_style eager pays each weight gradient's accumulation into the parameter's .grad
// (`grad.add_(g)`: read both, write one: 3 x param_bytes at 4320 GB/s) in B and BW, on top of
// the kernels the measured rates and curves time alone. The Llama-3-8B embedding backward
// (32000 x 4096 x 2 = 262,144,000-byte gradient): the dense index-add's 435,369.5 ns
// (FusedAndEagerRatesOnH200) + 182,044.4 ns; an up GEMM's (4096 x 28672 x 2 = 234,881,024
// bytes) + 163,111.8 ns. Not in BI, not in F; fused (Megatron-Core accumulates in the GEMM and
// its gradient buffers) and roofline pay nothing.
TEST(KernelStyle, EagerAccumulatesWeightGradients) {
  const Styles st;
  ASSERT_TRUE(st.fused && st.eager && st.roof);
  const auto& [fused, eager, roof] = st;
  ComputeQuery eb = mem_query(OpKind::kEmbedding, Pass::kB, 67108864);
  eb.param_bytes = 262144000;
  EXPECT_NEAR(static_cast<double>(eager->compute(eb).ns),
              0.6289e6 - (3.0 * 262144000 + 33554432) / 4237 + 3.0 * 262144000 / 4320, 1.0);
  EXPECT_NEAR(static_cast<double>(eager->compute(eb).ns - fused->compute(eb).ns),
              3.0 * 262144000 / 4320, 1.0);
  ComputeQuery up;
  up.kind = OpKind::kMlpUp;
  up.gemm = {4096, 28672, 4096, 1};
  up.flops = 2 * 2.0 * 4096.0 * 28672 * 4096;
  constexpr auto kParams = &ComputeQuery::param_bytes;
  for (const Pass pass : {Pass::kF, Pass::kB, Pass::kBI, Pass::kBW}) {
    up.pass = pass;
    const bool pays = pass == Pass::kB || pass == Pass::kBW;
    EXPECT_NEAR(static_cast<double>(paid(*eager, up, kParams, 234881024)),
                pays ? 3.0 * 234881024 / 4320 : 0.0, 1.0)
        << plan::pass_name(pass);
    EXPECT_EQ(paid(*fused, up, kParams, 234881024), 0) << plan::pass_name(pass);
    EXPECT_EQ(paid(*roof, up, kParams, 234881024), 0) << plan::pass_name(pass);
  }
}

// The optimizer step of Llama-3-8B's four-layer plans (1,134,596,096 parameters) as each style
// prices it, at `fused` bytes per parameter (the one-pass step) and `unfused` (eager's).
struct StepNs {
  int64_t fused = 0, roofline = 0, eager = 0;
};
StepNs llama_step_ns(int64_t fused, int64_t unfused) {
  const Styles st;
  EXPECT_TRUE(st.fused && st.eager && st.roof);
  if (!st.fused || !st.eager || !st.roof) return {};
  ComputeQuery q;
  q.kind = OpKind::kOptimizer;
  q.pass = Pass::kNone;
  q.bytes = 1134596096LL * fused;
  q.unfused_step_bytes = 1134596096LL * unfused;
  return {st.fused->compute(q).ns, st.roof->compute(q).ns, st.eager->compute(q).ns};
}

// kernel_style eager prices the optimizer step at its unfused bytes (torch.optim.SGD's momentum
// step: three kernels, 16 bytes per bf16 parameter, plan::OptimizerSpec::
// unfused_step_bytes_per_param) where fused and roofline price the one-pass step (10 bytes).
// Llama-3-8B's four-layer plans hold 1,134,596,096 parameters: 11,345,960,960 bytes fused ->
// 2,626,380 ns at 4320 GB/s; 18,153,537,536 bytes eager -> 4,202,208 ns.
TEST(KernelStyle, EagerStepsTheOptimizerUnfused) {
  plan::OptimizerSpec sgd;
  sgd.kind = plan::OptimizerSpec::Kind::kSgd;
  sgd.master_weights = false;
  sgd.grad_clip = false;
  EXPECT_EQ(sgd.step_bytes_per_param(2), 10);
  EXPECT_EQ(sgd.unfused_step_bytes_per_param(2), 16);  // mul_ 4 + add_ 6 + the weights' add_ 6
  sgd.master_weights = true;  // fp32 master and momentum: 3 more fp32 passes
  EXPECT_EQ(sgd.unfused_step_bytes_per_param(2), sgd.step_bytes_per_param(2) + 12);
  const StepNs ns = llama_step_ns(10, 16);
  EXPECT_EQ(ns.fused, 2626380);
  EXPECT_EQ(ns.roofline, 2626380);
  EXPECT_EQ(ns.eager, 4202208);
}

// kernel_style eager prices Adam's step as the replay runs it unfused (RankRun::optimizer_step,
// nine kernels: 2 g + 20 w bytes per parameter, plan::OptimizerSpec::
// unfused_step_bytes_per_param) where fused and roofline price FusedAdam's one pass (g + 6 w).
// Per bf16 parameter without a master copy: 44 bytes against 14; with the fp32 master (g and w
// fp32): 60 more than the fused step. torch.optim.Adam's seven passes (2 g + 16 w) would be 36
// and 48. Llama-3-8B's four-layer plans hold 1,134,596,096 parameters: 15,884,345,344 bytes
// fused -> 3,676,932 ns at 4320 GB/s; 49,922,228,224 bytes eager -> 11,556,071.3 ns, which
// detail::ceil_ns takes as 11,556,071 (within 1e-6 of an integer: rounding noise).
TEST(KernelStyle, EagerStepsAdamAsTheReplayRunsIt) {
  plan::OptimizerSpec adam;
  adam.kind = plan::OptimizerSpec::Kind::kAdam;
  adam.master_weights = false;
  adam.grad_clip = false;
  EXPECT_EQ(adam.step_bytes_per_param(2), 14);
  // m.mul_ 4, .add_ 6, v.mul_ 4, .addcmul_ 6, m / c1 4, v / c2 4, .sqrt_ 4, .add_ 4, addcdiv_ 8
  EXPECT_EQ(adam.unfused_step_bytes_per_param(2), 44);
  adam.master_weights = true;  // fp32 master, moments and temporaries
  EXPECT_EQ(adam.unfused_step_bytes_per_param(2), adam.step_bytes_per_param(2) + 60);
  adam.grad_clip = true;  // the clipping and the master's casts as the fused step prices them
  EXPECT_EQ(adam.unfused_step_bytes_per_param(2), adam.step_bytes_per_param(2) + 60);
  EXPECT_EQ(adam.unfused_step_bytes_per_param(4), adam.step_bytes_per_param(4) + 60);  // fp32
  const StepNs ns = llama_step_ns(14, 44);
  EXPECT_EQ(ns.fused, 3676932);
  EXPECT_EQ(ns.roofline, 3676932);
  EXPECT_EQ(ns.eager, 11556071);
}

TEST(KernelStyle, H100ScalesTheH200RatesByTheSweepsRatios) {
  auto h100 = testing::make_or_die(testing::analytic_spec({}), testing::h100_cluster());
  ASSERT_TRUE(h100);
  // Norm forward: 2642.4 GB/s x 1836 / 2279 (layer norm F in the H100 and H200 sweeps) =
  // 2128.8 GB/s: 67,117,056 bytes -> 31,528.4 -> 31,529 ns.
  EXPECT_EQ(h100->compute(mem_query(OpKind::kNorm, Pass::kF, 67117056)).ns, 31529);
}

TEST(KernelStyle, MeasuredStylesOnlyWhereMeasured) {
  ClusterSpec a100 = testing::h100_cluster();
  a100.preset = a100.device.kind = "a100-sxm";
  auto p = parse_analytic_params({{"kernel_style", "eager"}}, a100, "/costmodel", "plan.json");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error()[0].loc.json_pointer, "/costmodel/kernel_style");
  EXPECT_EQ(p.error()[0].message,
            "kernel_style 'eager' has no measured kernels on device kind 'a100-sxm'");
  auto bad = parse_analytic_params({{"kernel_style", "fusd"}}, a100, "/costmodel", "plan.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error()[0].message.find("unknown value 'fusd'"), std::string::npos);
  // The default elsewhere is roofline, and it parses.
  auto roof = parse_analytic_params({}, a100, "/costmodel", "plan.json");
  ASSERT_TRUE(roof);
  EXPECT_EQ(roof->kernel_style, KernelStyle::kRoofline);
  EXPECT_EQ(calibrated_defaults("h200").kernel_style, KernelStyle::kFused);
}

}  // namespace
}  // namespace stretto::cost
