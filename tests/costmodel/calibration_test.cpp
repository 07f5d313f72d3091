// The h100-sxm and h200 presets' calibrated GEMM and flash-attention curves against the kernels
// measured on those GPUs (tests/data/costmodel/{h100,h200}_kernels_measured_raw.json, made by
// bench/gpu/kernel_sweep.py; the constants by bench/gpu/fit_curves.py, which prints the same
// numbers). Issue 11's GPU target: per-kernel error <= 5 % on shapes not profiled.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "helpers.h"
#include "stretto/costmodel/analytic.h"
#include "stretto/plan/tags.h"

namespace stretto::cost {

using plan::ClusterSpec;
using plan::Json;
using plan::Pass;

namespace {

// The presets of plan/src/plan.cpp.
ClusterSpec preset(const std::string& kind) {
  ClusterSpec c = testing::h100_cluster(1, 8, 450);
  c.preset = kind;
  if (kind == "h200") c.device = {"h200", 989.4, 4800, 141e9 / (1u << 30), 132};
  return c;
}

Json load_raw(const std::string& device) {
  std::ifstream in(std::string(STRETTO_TEST_DATA) + "/costmodel/" + device +
                   "_kernels_measured_raw.json");
  EXPECT_TRUE(in.good()) << device;
  return Json::parse(in);
}

struct Errors {
  double mean_abs = 0;  // mean |model / measured - 1|
  double worst = 0;
  size_t n = 0;
};

// The timed GEMMs of the held-out Llama widths (h4096_llama FFN 11008, h5120_llama 13824,
// h8192_llama 28672: fit_curves.py fits on the other widths), of one pass or all. Kernels under
// 50 us are left out: the sweep times torch.matmul between CUDA events from Python, and the
// host needs ~20-25 us per call, so below ~50 us the events time the dispatch.
// With `unseen`, only those whose shape is in no fitted row (the Llama widths' QKV and output
// projections at h4096 and h5120 have the GPT widths' shapes).
Errors held_out_gemms(const CostModel& model, const Json& raw, const std::string& pass = "",
                      bool unseen = false) {
  auto llama = [](const Json& r) {
    return r["model"].get<std::string>().find("llama") != std::string::npos;
  };
  auto shape = [](const Json& r) {
    return r["pass"].dump() + r["m"].dump() + "x" + r["k"].dump() + "x" + r["n"].dump();
  };
  std::set<std::string> fitted;
  for (const auto& r : raw["rows"])
    if (r["kind"] == "gemm" && !llama(r)) fitted.insert(shape(r));
  Errors e;
  for (const auto& r : raw["rows"]) {
    if (r["kind"] != "gemm" || r["ms"].get<double>() < 0.05 || !llama(r)) continue;
    if (!pass.empty() && r["pass"] != pass) continue;
    if (unseen && fitted.contains(shape(r))) continue;
    const ComputeQuery q = testing::measured_gemm(r["op"], r["pass"], r["m"], r["k"], r["n"]);
    const double err = static_cast<double>(model.compute(q).ns) / (r["ms"].get<double>() * 1e6) - 1;
    e.mean_abs += std::abs(err);
    e.worst = std::max(e.worst, std::abs(err));
    ++e.n;
  }
  if (e.n > 0) e.mean_abs /= static_cast<double>(e.n);
  return e;
}

// Causal flash attention (SDPA, head dim 128, batch 1): the forward and the backward (FB - F;
// the sweep times forward + backward together). Left out where the host sets the time: a
// forward under 75 us or a forward + backward under 300 us (8 and 16 heads at s = 2048 take the
// same time for twice the work).
Errors causal_attention(const CostModel& model, const Json& raw) {
  Errors e;
  for (const auto& f : raw["rows"]) {
    if (f["kind"] != "attention" || f["pass"] != "F" || !f["causal"].get<bool>()) continue;
    double fb_ms = 0;
    for (const auto& r : raw["rows"])
      if (r["kind"] == "attention" && r["pass"] == "FB" && r["causal"] == f["causal"] &&
          r["heads"] == f["heads"] && r["seq"] == f["seq"])
        fb_ms = r["ms"];
    const int64_t s = f["seq"], heads = f["heads"], d = f["head_dim"], h = heads * d;
    const double f_ms = f["ms"];
    for (const bool backward : {false, true}) {
      const double ms = backward ? fb_ms - f_ms : f_ms;
      if (backward ? fb_ms < 0.30 : f_ms < 0.075) continue;
      ComputeQuery q;
      q.kind = compiler::OpKind::kAttention;
      q.pass = backward ? Pass::kB : Pass::kF;
      q.gemm = {s, s, d, heads};  // as compiler/src/model.cpp: per head [s,d]x[d,s]
      const double fwd = 2.0 * static_cast<double>(s) * static_cast<double>(s * h);
      q.flops = backward ? 2.5 * fwd : fwd;
      q.bytes = 2 * (s * 3 * h + s * h);
      const double err = static_cast<double>(model.compute(q).ns) / (ms * 1e6) - 1;
      e.mean_abs += std::abs(err);
      e.worst = std::max(e.worst, std::abs(err));
      ++e.n;
    }
  }
  if (e.n > 0) e.mean_abs /= static_cast<double>(e.n);
  return e;
}

// The options that restore the generic defaults (AnalyticParams{}) on a calibrated preset.
Json generic_options() {
  const AnalyticParams g;
  return {{"gemm_efficiency", g.gemm_efficiency},
          {"gemm_k_half", g.gemm_k_half},
          {"gemm_split_k_min", g.gemm_split_k_min},
          {"wave_quantization", g.wave_quantization},
          {"attention_efficiency", g.attention_efficiency},
          {"attention_seq_half", g.attention_seq_half},
          {"attention_waves_half", g.attention_waves_half},
          {"attention_bwd_ratio", g.attention_bwd_ratio}};
}

struct Case {
  const char* kind;  // preset
  const char* raw;   // measurement file
  // Held-out GEMM mean |error| as fit_curves.py and this test measure it, and the bounds
  // asserted (the measured value plus ~0.2 points: the constants are rounded to 3 digits).
  double gemm_mean_bound, gemm_pass_bound, gemm_unseen_bound;
  double attention_mean_bound, attention_worst_bound;
};

// fit_curves.py, held out (552 GEMMs >= 50 us each):
//   H100: mean 4.20 % (F 4.22, BI 3.60, BW 4.78), worst 27.9 %; old defaults 7.23 %;
//         of them in no fitted shape (354): 3.52 %.
//   H200: mean 3.37 % (F 3.32, BI 2.85, BW 3.94), worst 26.9 %; old defaults 8.38 %;
//         of them in no fitted shape (354): 2.98 %.
// Causal attention (in-sample, 20 rows each): H100 mean 3.2 %, worst 9.2 %; H200 mean 2.5 %,
// worst 10.9 %; old defaults 0.40: mean 23.7 % and 23.3 %.
constexpr Case kCases[] = {
    {"h100-sxm", "h100", 0.044, 0.050, 0.037, 0.035, 0.11},
    {"h200", "h200", 0.036, 0.042, 0.032, 0.028, 0.12},
};

// A preset's calibrated model and the same with the generic curve, and its measurements.
struct Models {
  Json raw;
  std::unique_ptr<CostModel> calibrated, generic;
};

Models models_of(const Case& c) {
  return {load_raw(c.raw), testing::make_or_die(testing::analytic_spec(), preset(c.kind)),
          testing::make_or_die(testing::analytic_spec(generic_options()), preset(c.kind))};
}

TEST(Calibration, HeldOutGemmsWithinFivePercent) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.kind);
    const auto [raw, model, generic] = models_of(c);
    ASSERT_TRUE(model && generic);
    const Errors all = held_out_gemms(*model, raw);
    EXPECT_EQ(all.n, 552u);
    std::printf("%s: held-out GEMMs mean |error| %.2f %%, worst %.1f %% (n %zu)\n", c.kind,
                100 * all.mean_abs, 100 * all.worst, all.n);
    EXPECT_LE(all.mean_abs, c.gemm_mean_bound);
    EXPECT_LE(all.mean_abs, 0.05);  // issue 11's target
    for (const char* pass : {"F", "BI", "BW"}) {
      const Errors e = held_out_gemms(*model, raw, pass);
      EXPECT_LE(e.mean_abs, c.gemm_pass_bound) << pass;
      std::printf("  %s: %.2f %%\n", pass, 100 * e.mean_abs);
    }
    // The 354 whose shape is in no fitted row: H100 3.52 %, H200 2.98 % (old 7.12, 8.45 %).
    const Errors unseen = held_out_gemms(*model, raw, "", true);
    EXPECT_EQ(unseen.n, 354u);
    EXPECT_LE(unseen.mean_abs, c.gemm_unseen_bound);
    std::printf("  shapes in no fitted row: %.2f %% (n %zu)\n", 100 * unseen.mean_abs, unseen.n);
    // Thin TP-split weight gradients (Llama 13B out_proj BW at TP 4/8, k = 1280 or 640) are
    // the worst: ~25 % fast. No held-out GEMM is off by more than 30 %.
    EXPECT_LE(all.worst, 0.30);
    // The same test fails with the generic curve: the old defaults are 6-9 % optimistic.
    EXPECT_GT(held_out_gemms(*generic, raw).mean_abs, 0.07);
  }
}

TEST(Calibration, CausalFlashAttention) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.kind);
    const auto [raw, model, generic] = models_of(c);
    ASSERT_TRUE(model && generic);
    const Errors e = causal_attention(*model, raw);
    EXPECT_EQ(e.n, 20u);
    std::printf("%s: causal attention mean |error| %.2f %%, worst %.1f %%\n", c.kind,
                100 * e.mean_abs, 100 * e.worst);
    EXPECT_LE(e.mean_abs, c.attention_mean_bound);
    EXPECT_LE(e.worst, c.attention_worst_bound);
    EXPECT_GT(causal_attention(*generic, raw).mean_abs, 0.15);
  }
}

// The small-shape end of the GEMM curve, from the sweeps' GEMMs of every width (fitted and
// held out alike: the fit used only kernels >= 50 us). The sweep times each torch.matmul between
// two CUDA events from Python, so a kernel shorter than the host's dispatch is timed at the
// dispatch: the device's floor is the slowest of its smallest GEMMs (<= 4.3 GFLOP, <= 11 us in
// the model): 26.7 us on the H200, 32.7 us on the H100. At and above 1.5 x the floor the events
// time the kernel; below it a measurement is only an upper bound on the kernel.
struct Bin {
  double lo_us, hi_us;
  double bias = 0, mean_abs = 0;  // mean (model / measured - 1), mean |.|
  size_t n = 0;
};

double dispatch_floor_ms(const Json& raw) {
  double floor = 0;
  for (const auto& r : raw["rows"]) {
    if (r["kind"] != "gemm") continue;
    const double gflop = 2e-9 * r["m"].get<double>() * r["k"].get<double>() * r["n"].get<double>();
    if (gflop <= 4.3) floor = std::max(floor, r["ms"].get<double>());
  }
  return floor;
}

// Error of `model` per time bin of the measured GEMMs at or above 1.5 x the floor, and the
// largest model / measured ratio below it.
std::vector<Bin> small_gemm_bins(const CostModel& model, const Json& raw, double& below_worst) {
  const double start_us = 1.5 * dispatch_floor_ms(raw) * 1e3;
  std::vector<Bin> bins = {{start_us, 75}, {75, 150}, {150, 400}, {400, 1e12}};
  below_worst = 0;
  for (const auto& r : raw["rows"]) {
    if (r["kind"] != "gemm") continue;
    const double us = r["ms"].get<double>() * 1e3;
    const ComputeQuery q = testing::measured_gemm(r["op"], r["pass"], r["m"], r["k"], r["n"]);
    const double ratio = static_cast<double>(model.compute(q).ns) / (us * 1e3);
    if (us < start_us) below_worst = std::max(below_worst, ratio);
    for (Bin& b : bins)
      if (us >= b.lo_us && us < b.hi_us) {
        b.bias += ratio - 1;
        b.mean_abs += std::abs(ratio - 1);
        ++b.n;
      }
  }
  for (Bin& b : bins)
    if (b.n > 0) {
      b.bias /= static_cast<double>(b.n);
      b.mean_abs /= static_cast<double>(b.n);
    }
  return bins;
}

TEST(Calibration, SmallGemmsDownToTheDispatchFloor) {
  // fit_curves.py's model on the same rows (bias / mean |error|):
  //   H200 (floor 26.7 us): 40-75 us -2.9 % / 7.6 % (102 GEMMs), 75-150 -0.5 / 5.6 (164),
  //                         150-400 +0.1 / 3.8 (312), >= 400 -0.1 / 2.0 (674);
  //   H100 (floor 32.7 us): 49-75 us -4.3 % / 7.8 % (83), 75-150 -0.9 / 7.2 (160),
  //                         150-400 +0.2 / 4.8 (313), >= 400 +0.4 / 2.6 (671).
  // The curve has no bias at its small end above the floor: the per-kernel scatter grows as
  // kernels shrink, the mean does not move. Below 1.5 x the floor the model is at most 9 %
  // (H200) and 11 % (H100) above a measurement that is only an upper bound.
  // A curve refitted to the plain-PyTorch microbenchmark's GEMMs (back-to-back bursts, 14-18 %
  // faster than this sweep on the same shape: next test), gemm_efficiency 0.704 x 1.17, is
  // 13-15 % fast in every bin and fails.
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.kind);
    const auto [raw, model, generic] = models_of(c);
    ASSERT_TRUE(model);
    const double floor_us = dispatch_floor_ms(raw) * 1e3;
    EXPECT_NEAR(floor_us, std::string(c.raw) == "h200" ? 26.7 : 32.7, 0.1);
    double below = 0;
    std::printf("%s: dispatch floor %.1f us\n", c.kind, floor_us);
    for (const Bin& b : small_gemm_bins(*model, raw, below)) {
      std::printf("  %4.0f-%5.0f us: n %4zu  bias %+5.1f %%  mean |error| %4.1f %%\n", b.lo_us,
                  std::min(b.hi_us, 99999.0), b.n, 100 * b.bias, 100 * b.mean_abs);
      EXPECT_GT(b.n, 80u);
      EXPECT_LE(std::abs(b.bias), 0.05) << b.lo_us;
      EXPECT_LE(b.mean_abs, 0.085) << b.lo_us;
    }
    EXPECT_LE(below, 1.12);
    // The control: the curve refitted to the microbenchmark's bursts breaks the bias bound.
    const AnalyticParams cal = calibrated_defaults(c.kind);
    auto burst = testing::make_or_die(
        testing::analytic_spec({{"gemm_efficiency", cal.gemm_efficiency * 1.17}}),
        preset(c.kind));
    ASSERT_TRUE(burst);
    for (const Bin& b : small_gemm_bins(*burst, raw, below)) EXPECT_LT(b.bias, -0.10) << b.lo_us;
  }
}

TEST(Calibration, SweepAndMicrobenchmarkTimeTheSameGemmApart) {
  // The plain-PyTorch microbenchmark (h200_pytorch_ops_measured.json, "M") and the kernel sweep
  // (h200_kernels_measured_raw.json, "S") both time torch.matmul(x[m,k], w[k,n]) in bf16 on
  // random data on an H200 with torch 2.11.0+cu130. One shape is in both: M's gemm_qkv_gqa,
  // [4096,4096] x [4096,6144], is S's QKV forward of the h4096 and h4096_llama widths at TP 2
  // (two rows, timed minutes apart). Same shape, dtype, layout and library: the 15-19 % between
  // them is not the shape. S times each call between its own events (median of 20) during a
  // sweep of 1,452 kernels of continuous load; M times 20 back-to-back calls after 5 warm-ups,
  // a burst of ~7 ms after the GPU idled. S's kernels >= 100 us run at 632-697 TFLOPS (p10-p90),
  // M's four GEMMs at 759-804, S's fastest at 806; and S has rows that changed speed within
  // their 20 calls, between those two levels (h4096_llama T 4096 QKV BW: median 670, fastest
  // call 787 TFLOPS; h5120_llama T 8192 QKV BI: 688 and 791). That is the GPU's clock under
  // load (the boost clock in a short burst, a lower one once power and heat settle; the clock
  // was not logged), not the timing method: a fixed per-call offset fitted on S is 3-5 us. A
  // training step is continuous load, so the presets keep S's curve.
  const Json s = load_raw("h200");
  std::ifstream in(std::string(STRETTO_TEST_DATA) + "/costmodel/h200_pytorch_ops_measured.json");
  const Json m = Json::parse(in);
  const double m_ms = m["results"]["gemm_qkv_gqa"]["F_ms"];
  std::vector<double> s_ms;
  double faster_calls = 0;
  for (const auto& r : s["rows"]) {
    if (r["kind"] != "gemm") continue;
    const double ms = r["ms"], lo = r["min_ms"];
    if (r["pass"] == "F" && r["m"] == 4096 && r["k"] == 4096 && r["n"] == 6144) s_ms.push_back(ms);
    const double tflops = 2e-9 * r["m"].get<double>() * r["k"].get<double>() *
                          r["n"].get<double>() / lo;
    if (ms >= 0.1 && ms / lo > 1.10) faster_calls = std::max(faster_calls, tflops);
  }
  ASSERT_EQ(s_ms.size(), 2u);
  EXPECT_NEAR(s_ms[0] / s_ms[1], 1.0, 0.01);  // 0.3138 and 0.3123 ms
  for (const double ms : s_ms) {
    EXPECT_GT(ms / m_ms, 1.15);  // 0.2646 ms in M: 18.0-18.6 % faster
    EXPECT_LT(ms / m_ms, 1.20);
  }
  EXPECT_GT(faster_calls, 780.0);  // within-row calls at M's level
  // The h200 preset prices the shape at S's time, 14-19 % above M's.
  auto model = testing::make_or_die(testing::analytic_spec(), preset("h200"));
  ASSERT_TRUE(model);
  const double ns =
      static_cast<double>(model->compute(testing::measured_gemm("qkv", "F", 4096, 4096, 6144)).ns);
  std::printf("qkv F 4096x4096x6144 on the H200: sweep %.4f / %.4f ms, microbenchmark %.4f ms, "
              "model %.4f ms\n",
              s_ms[0], s_ms[1], m_ms, ns * 1e-6);
  EXPECT_NEAR(ns * 1e-6 / s_ms[0], 1.0, 0.03);
  EXPECT_GT(ns * 1e-6 / m_ms, 1.14);
}

TEST(Calibration, WeightGradientGemmsRunAtTheDepthOfTheirTokens) {
  // A weight gradient dW = X^T dY reduces over the microbatch's tokens: its depth is m, where
  // the forward's is k. The model prices every pass by its own shape, so a BW of few tokens is
  // slower than its forward (1,024 tokens: depth term 1024/(1024+191) = 0.84 on the H200, where
  // a forward of depth 4096 gets 0.96). Measured: GEMMs of >= 100 us with at least 4 waves of
  // 128x128 tiles (fill 1), grouped by depth, F/BI and BW apart. Efficiency falls with depth
  // alike in every pass (H200 F/BI: 0.60 of peak at depth ~1024, 0.69 at >= 8192), and the
  // model's mean error is within 3 % in every group, BW included (H200 BW: +0.3, -0.0, -1.0,
  // -1.5 % at depth ~2048 .. 16384). The sweep has no BW below 2,048 tokens.
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.kind);
    const auto [raw, model, generic] = models_of(c);
    ASSERT_TRUE(model);
    struct Group {
      double err = 0, eff = 0;
      size_t n = 0;
    };
    std::map<std::pair<int, bool>, Group> groups;  // (depth bucket, BW)
    for (const auto& r : raw["rows"]) {
      if (r["kind"] != "gemm" || r["ms"].get<double>() < 0.1) continue;
      const double m = r["m"], k = r["k"], n = r["n"];
      const bool bw = r["pass"] == "BW";
      const double rows = bw ? k : m, cols = r["pass"] == "BI" ? k : n;
      const double depth = bw ? m : r["pass"] == "BI" ? n : k;
      if (rows * cols / (128.0 * 128.0) < 4 * 132) continue;
      const int bucket = static_cast<int>(std::lround(std::log2(depth)));
      const ComputeQuery q = testing::measured_gemm(r["op"], r["pass"], r["m"], r["k"], r["n"]);
      const double ns = r["ms"].get<double>() * 1e6;
      Group& g = groups[{bucket, bw}];
      g.err += static_cast<double>(model->compute(q).ns) / ns - 1;
      g.eff += 2 * m * k * n / ns / 989.4e3;
      ++g.n;
    }
    for (auto& [key, g] : groups) {
      g.err /= static_cast<double>(g.n);
      g.eff /= static_cast<double>(g.n);
      std::printf("  depth ~%5d %-4s n %3zu  efficiency %.3f  model %+5.1f %%\n", 1 << key.first,
                  key.second ? "BW" : "F/BI", g.n, g.eff, 100 * g.err);
      EXPECT_LE(std::abs(g.err), 0.03) << (1 << key.first) << (key.second ? " BW" : " F/BI");
    }
    const std::pair<int, bool> shallow{10, false}, deep{13, false}, bw_shallowest{11, true},
        bw_1024{10, true};
    ASSERT_TRUE(groups.contains(shallow) && groups.contains(deep));
    EXPECT_LT(groups[shallow].eff, 0.9 * groups[deep].eff);
    EXPECT_TRUE(groups.contains(bw_shallowest) && !groups.contains(bw_1024));
  }
}

TEST(Calibration, OnlyTheMeasuredPresetsMove) {
  const AnalyticParams generic;
  for (const char* kind : {"a100-sxm", "cpu", "h100-pcie", "b200", ""}) {
    const AnalyticParams p = calibrated_defaults(kind);
    EXPECT_EQ(p.gemm_efficiency, generic.gemm_efficiency) << kind;
    EXPECT_EQ(p.gemm_k_half, generic.gemm_k_half) << kind;
    EXPECT_EQ(p.gemm_split_k_min, generic.gemm_split_k_min) << kind;
    EXPECT_EQ(p.wave_quantization, generic.wave_quantization) << kind;
    EXPECT_EQ(p.attention_efficiency, generic.attention_efficiency) << kind;
    EXPECT_EQ(p.attention_seq_half, 0.0) << kind;
    EXPECT_EQ(p.attention_waves_half, 0.0) << kind;
    EXPECT_EQ(p.attention_bwd_ratio, 1.0) << kind;
  }
  const AnalyticParams h100 = calibrated_defaults("H100-SXM");
  EXPECT_EQ(h100.gemm_efficiency, 0.711);
  EXPECT_FALSE(h100.wave_quantization);
  EXPECT_EQ(calibrated_defaults("h200").attention_seq_half, 546.0);
  // Options still override the calibration.
  auto p = parse_analytic_params({{"gemm_efficiency", 0.8}, {"wave_quantization", true}},
                                 preset("h100-sxm"), "/costmodel", "plan.json");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->gemm_efficiency, 0.8);
  EXPECT_TRUE(p->wave_quantization);
  EXPECT_EQ(p->gemm_k_half, 188.0);
}

TEST(Calibration, SweepsAsProfiledTables) {
  // fit_curves.py --tables writes the sweeps' timed GEMMs and causal attention rows as
  // profiled tables; each kernel comes back exactly.
  const std::string dir = std::string(STRETTO_TEST_DATA) + "/costmodel";
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.kind);
    plan::CostModelSpec spec;
    spec.kind = plan::CostModelSpec::Kind::kProfiled;
    spec.profile = dir + "/" + c.raw + "_kernels_profiled.json";
    spec.options = Json::object();
    auto model = testing::make_or_die(spec, preset(c.kind), dir);
    ASSERT_TRUE(model);
    std::ifstream in(spec.profile);
    const Json table = Json::parse(in);
    size_t n = 0;
    for (const auto& k : table["kernels"]) {
      ComputeQuery q;
      q.kind = testing::measured_op(k["op"]);
      q.pass = plan::parse_pass(k["pass"].get<std::string>()).value();
      q.gemm = {k["m"].get<int64_t>(), k["n"].get<int64_t>(), k["k"].get<int64_t>(),
                k.value("batch", int64_t{1})};
      q.flops = 1.0;
      EXPECT_EQ(model->compute(q).ns, k["ns"].get<int64_t>()) << k.dump();
      ++n;
    }
    EXPECT_GT(n, 1000u);
  }
}

TEST(Calibration, AttentionTermsAndTheirOptions) {
  // On a generic kind the new terms are off: attention_efficiency alone, as before.
  ClusterSpec cl = preset("h100-sxm");
  cl.device.kind = "custom";
  ComputeQuery q;
  q.kind = compiler::OpKind::kAttention;
  q.gemm = {4096, 4096, 128, 32};  // 32 x 32 = 1024 blocks: fill 1
  q.flops = 2.0 * 4096 * 4096 * 4096;
  const double peak = 989.4e3;  // flops per ns
  auto plain = parse_analytic_params(Json::object(), cl, "/costmodel", "plan.json");
  ASSERT_TRUE(plain);
  EXPECT_NEAR(static_cast<double>(analytic_compute(*plain, cl.device, q).ns),
              q.flops / (peak * 0.40), 1.0);
  q.pass = Pass::kB;
  EXPECT_NEAR(static_cast<double>(analytic_compute(*plain, cl.device, q).ns),
              q.flops / (peak * 0.40), 1.0);
  // With the terms: 0.7 * s/(s + 1024) * waves/(waves + 1) * 0.8 in the backward.
  auto p = parse_analytic_params({{"attention_efficiency", 0.7},
                                  {"attention_seq_half", 1024},
                                  {"attention_waves_half", 1},
                                  {"attention_bwd_ratio", 0.8}},
                                 cl, "/costmodel", "plan.json");
  ASSERT_TRUE(p);
  const double waves = 1024.0 / 132;
  const double eff = 0.7 * 4096.0 / (4096 + 1024) * waves / (waves + 1);
  EXPECT_NEAR(static_cast<double>(analytic_compute(*p, cl.device, q).ns),
              q.flops / (peak * eff * 0.8), 1.0);
  q.pass = Pass::kF;
  EXPECT_NEAR(static_cast<double>(analytic_compute(*p, cl.device, q).ns), q.flops / (peak * eff),
              1.0);
  // Out of range values are errors at the option.
  auto bad = parse_analytic_params({{"attention_bwd_ratio", 0}, {"attention_seq_half", -1}}, cl,
                                   "/costmodel", "plan.json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().size(), 2u);
}

}  // namespace
}  // namespace stretto::cost
