// The fixed model: per-pass constants split exactly over a region's nodes (DESIGN §2).

#include <gtest/gtest.h>

#include "helpers.h"

namespace stretto::cost {

using compiler::CommKind;
using plan::CostModelSpec;
using plan::Pass;

namespace {

CostModelSpec fixed_spec(int64_t f, int64_t b, int64_t bi, int64_t bw, int64_t comm) {
  CostModelSpec s;
  s.kind = CostModelSpec::Kind::kFixed;
  s.f_ns = f;
  s.b_ns = b;
  s.bi_ns = bi;
  s.bw_ns = bw;
  s.comm_ns = comm;
  return s;
}

TEST(FixedModel, RegionSplitSumsExactlyToTheConstant) {
  // 1 ms, and awkward constants that no n divides.
  for (int64_t c : {int64_t{1'000'000}, int64_t{7}, int64_t{13}, int64_t{2'000'001}, int64_t{1},
                    int64_t{0}, int64_t{999'999'999'989}}) {
    auto m = testing::make_or_die(fixed_spec(c, 2 * c, c, c, 0), testing::h100_cluster());
    ASSERT_TRUE(m);
    for (int n = 1; n <= 7; ++n) {
      int64_t sum_f = 0, sum_b = 0;
      for (int k = 0; k < n; ++k) {
        ComputeQuery q;
        q.pass = Pass::kF;
        q.region_k = k;
        q.region_n = n;
        const int64_t part = m->compute(q).ns;
        // Each node gets C*(k+1)/n - C*k/n: within one ns of C/n.
        EXPECT_GE(part, c / n) << "C=" << c << " n=" << n << " k=" << k;
        EXPECT_LE(part, c / n + 1) << "C=" << c << " n=" << n << " k=" << k;
        EXPECT_EQ(part, c * (k + 1) / n - c * k / n) << "C=" << c << " n=" << n << " k=" << k;
        sum_f += part;
        q.pass = Pass::kB;
        sum_b += m->compute(q).ns;
      }
      EXPECT_EQ(sum_f, c) << "n=" << n;
      EXPECT_EQ(sum_b, 2 * c) << "n=" << n;
    }
  }
}

TEST(FixedModel, PassesPickTheirConstant) {
  auto m = testing::make_or_die(fixed_spec(1'000'000, 2'000'000, 1'100'000, 900'000, 0),
                                testing::h100_cluster());
  ASSERT_TRUE(m);
  ComputeQuery q;
  q.pass = Pass::kF;
  EXPECT_EQ(m->compute(q).ns, 1'000'000);
  q.pass = Pass::kB;
  EXPECT_EQ(m->compute(q).ns, 2'000'000);
  q.pass = Pass::kBI;
  EXPECT_EQ(m->compute(q).ns, 1'100'000);
  q.pass = Pass::kBW;
  EXPECT_EQ(m->compute(q).ns, 900'000);
  // A node's op kind, shape and flops do not matter in fixed mode.
  q.kind = compiler::OpKind::kMlpUp;
  q.flops = 1e15;
  q.gemm = {4096, 4096, 4096, 1};
  EXPECT_EQ(m->compute(q).ns, 900'000);
  EXPECT_FALSE(m->compute(q).mem_bound);
  EXPECT_EQ(m->dispatch_ns(), 0);
  EXPECT_EQ(m->interference().comm_sm_share, 0);
  EXPECT_EQ(m->interference().comm_hbm_share, 0);
  EXPECT_EQ(m->name(), "fixed");
}

TEST(FixedModel, CommIsPureLatency) {
  for (int64_t comm : {int64_t{0}, int64_t{500'000}}) {
    auto m = testing::make_or_die(fixed_spec(1, 2, 1, 1, comm), testing::h100_cluster());
    ASSERT_TRUE(m);
    for (CommKind k : {CommKind::kSendRecv, CommKind::kAllReduce, CommKind::kAllToAll}) {
      CommQuery q;
      q.kind = k;
      q.bytes = 1 << 30;
      q.group_size = 8;
      CommCost c = m->comm(q);
      EXPECT_EQ(c.time_ns, comm);
      EXPECT_EQ(c.latency_ns, comm);
      EXPECT_EQ(c.wire_bytes, 0);
      EXPECT_EQ(c.rate_cap, 0);
      testing::expect_consistent(c);
    }
  }
}

TEST(FixedModel, AnalyticOptionsAreRejected) {
  CostModelSpec s = fixed_spec(1, 2, 1, 1, 0);
  s.options = plan::Json{{"unit", "ms"}, {"comm_sm_share", 0.2}, {"Bw", 1}};
  auto m = make_cost_model(s, testing::h100_cluster(), "");
  ASSERT_FALSE(m);
  ASSERT_EQ(m.error().size(), 2u);
  // nlohmann::json objects iterate keys in sorted order: "Bw" before "comm_sm_share".
  EXPECT_EQ(m.error()[0].loc.json_pointer, "/costmodel/Bw");
  EXPECT_EQ(m.error()[0].hint, "did you mean 'BW'?");
  EXPECT_EQ(m.error()[1].loc.json_pointer, "/costmodel/comm_sm_share");
  EXPECT_NE(m.error()[1].message.find("does not apply"), std::string::npos);
}

}  // namespace
}  // namespace stretto::cost
