#pragma once
// Shared fixtures of the cost model tests: small clusters with round numbers.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "stretto/costmodel/cost_model.h"

namespace stretto::cost::testing {

/// An H100-like cluster. intra 360 GB/s makes NCCL's channel search land exactly on
/// 6 x 60 GB/s (duplicated to 12 x 30), i.e. busBw 360, which keeps closed forms readable
/// (tests of closed forms pass "nccl_intra_GBps": 360, since NCCL would otherwise see the
/// link at its own per-link speed, 360 x 20.6/25).
inline plan::ClusterSpec h100_cluster(int nodes = 1, int devices_per_node = 8, double intra = 360,
                                      double inter = 50, double inter_latency_us = 2.0) {
  plan::ClusterSpec c;
  c.preset = "h100-sxm";
  c.nodes = nodes;
  c.devices_per_node = devices_per_node;
  c.device.kind = "h100-sxm";
  c.device.peak_tflops = 989.4;  // dense BF16
  c.device.hbm_GBps = 3350;
  c.device.memory_GiB = 80;
  c.device.sms = 132;
  c.intra_node = {intra, 1.0};
  c.inter_node = {inter, inter_latency_us};
  return c;
}

inline plan::CostModelSpec analytic_spec(plan::Json options = plan::Json::object()) {
  plan::CostModelSpec s;
  s.kind = plan::CostModelSpec::Kind::kAnalytic;
  s.options = std::move(options);
  return s;
}

inline std::unique_ptr<CostModel> make_or_die(const plan::CostModelSpec& spec,
                                              const plan::ClusterSpec& cl,
                                              const std::string& base_dir = {}) {
  auto m = make_cost_model(spec, cl, base_dir);
  if (!m) {
    std::string all;
    for (const auto& d : m.error()) all += d.loc.json_pointer + ": " + d.message + "\n";
    ADD_FAILURE() << "make_cost_model failed:\n" << all;
    return nullptr;
  }
  return std::move(*m);
}

/// The op of a measured table's row: "attention", "qkv", "out_proj", "mlp_up" or "mlp_down".
inline compiler::OpKind measured_op(const std::string& op) {
  return op == "attention"  ? compiler::OpKind::kAttention
         : op == "qkv"      ? compiler::OpKind::kQKV
         : op == "out_proj" ? compiler::OpKind::kOutProj
         : op == "mlp_up"   ? compiler::OpKind::kMlpUp
                            : compiler::OpKind::kMlpDown;
}

/// The query of one measured GEMM: op and pass ("F", "BI", "BW") by name, the forward shape
/// [m,k] x [k,n], its flops and the bytes of its three matrices in bf16.
inline ComputeQuery measured_gemm(const std::string& op, const std::string& pass, int64_t m,
                                  int64_t k, int64_t n) {
  ComputeQuery q;
  q.kind = measured_op(op);
  q.pass = pass == "F" ? plan::Pass::kF : pass == "BI" ? plan::Pass::kBI : plan::Pass::kBW;
  q.gemm = {m, n, k, 1};
  q.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  q.bytes = 2 * (m * k + k * n + m * n);
  return q;
}

/// time_ns must equal latency + transfer, as the engine computes it.
inline void expect_consistent(const CommCost& c) {
  EXPECT_EQ(c.time_ns, c.latency_ns + transfer_ns(c.wire_bytes, c.rate_cap));
  EXPECT_GE(c.latency_ns, 0);
  EXPECT_GE(c.wire_bytes, 0);
  if (c.wire_bytes > 0) {
    EXPECT_GT(c.rate_cap, 0);
  } else {
    EXPECT_EQ(c.rate_cap, 0);
  }
}

}  // namespace stretto::cost::testing
