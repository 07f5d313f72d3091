// The profiled model: table format, interpolation, fallback, and table errors.

#include <gtest/gtest.h>

#include <cmath>

#include "helpers.h"
#include "stretto/costmodel/analytic.h"
#include "stretto/costmodel/profile_table.h"

namespace stretto::cost {

using compiler::CommKind;
using compiler::OpKind;
using plan::CostModelSpec;
using plan::DType;
using plan::Pass;

namespace {

const std::string kData = std::string(STRETTO_TEST_DATA) + "/costmodel";

CostModelSpec profiled_spec(const std::string& table) {
  CostModelSpec s;
  s.kind = CostModelSpec::Kind::kProfiled;
  s.profile = table;
  s.options = plan::Json::object();
  return s;
}

ComputeQuery mlp_up(int64_t m, Pass pass = Pass::kF) {
  ComputeQuery q;
  q.kind = OpKind::kMlpUp;
  q.pass = pass;
  q.gemm = {m, 14336, 4096, 1};
  q.flops = 2.0 * m * 14336 * 4096 * (pass == Pass::kB ? 2 : 1);
  q.bytes = 2 * (m * 4096 + 4096 * 14336 + m * 14336);
  return q;
}

class Profiled : public ::testing::Test {
 protected:
  void SetUp() override {
    model = testing::make_or_die(profiled_spec("h100_example.json"), cluster, kData);
    analytic = testing::make_or_die(testing::analytic_spec(), cluster);
    ASSERT_TRUE(model);
    ASSERT_TRUE(analytic);
  }
  plan::ClusterSpec cluster = testing::h100_cluster(2, 8);
  std::unique_ptr<CostModel> model, analytic;
};

TEST_F(Profiled, ExactAtMeasuredPoints) {
  EXPECT_EQ(model->name(), "profiled");
  EXPECT_EQ(model->compute(mlp_up(1024)).ns, 200000);
  EXPECT_EQ(model->compute(mlp_up(4096)).ns, 760000);
  EXPECT_EQ(model->compute(mlp_up(16384)).ns, 3000000);
  EXPECT_EQ(model->compute(mlp_up(4096, Pass::kBI)).ns, 780000);
  EXPECT_EQ(model->compute(mlp_up(4096, Pass::kBW)).ns, 800000);
  ComputeQuery norm;
  norm.kind = OpKind::kNorm;
  norm.bytes = 67108864;
  EXPECT_EQ(model->compute(norm).ns, 25000);
  EXPECT_TRUE(model->compute(norm).mem_bound);
  ComputeQuery experts;
  experts.kind = OpKind::kExperts;
  experts.gemm = {512, 2048, 4096, 8};
  experts.flops = 2.0 * 512 * 2048 * 4096 * 8;
  EXPECT_EQ(model->compute(experts).ns, 90000);

  CommQuery ar{CommKind::kAllReduce, 16777216, 8, 1, false, DType::kBF16};
  CommCost c = model->comm(ar);
  EXPECT_EQ(c.time_ns, 110000);
  testing::expect_consistent(c);
  // The analytic structure is kept: same algorithm and wire bytes, fitted latency and rate.
  CommCost a = analytic->comm(ar);
  EXPECT_EQ(c.algo, a.algo);
  EXPECT_EQ(c.wire_bytes, a.wire_bytes);
  CommQuery p2p{CommKind::kSendRecv, 16777216, 2, 2, false, DType::kBF16};
  EXPECT_EQ(model->comm(p2p).time_ns, 340000);
  testing::expect_consistent(model->comm(p2p));
}

TEST_F(Profiled, LogLogBetweenPoints) {
  // At the geometric mean of two sizes, log-log interpolation gives the geometric mean of
  // the times.
  const double expect = std::sqrt(200000.0 * 760000.0);
  EXPECT_NEAR(static_cast<double>(model->compute(mlp_up(2048)).ns), expect, 1.0);
  // Elsewhere: t = t0 * (x/x0)^slope, slope = log(t1/t0) / log(x1/x0).
  const double slope = std::log(3000000.0 / 760000.0) / std::log(4.0);
  EXPECT_NEAR(static_cast<double>(model->compute(mlp_up(6000)).ns),
              760000.0 * std::pow(6000.0 / 4096, slope), 1.0);
  // And it is not linear interpolation.
  const double linear = 200000 + (760000 - 200000) * (2048.0 - 1024) / (4096 - 1024);
  EXPECT_GT(std::fabs(model->compute(mlp_up(2048)).ns - linear), 1000);

  ComputeQuery norm;
  norm.kind = OpKind::kNorm;
  norm.bytes = 8388608 * 2;  // between 8 MB and 64 MB
  EXPECT_NEAR(static_cast<double>(model->compute(norm).ns),
              6000.0 * std::pow(25000.0 / 6000.0, 1.0 / 3.0), 1.0);

  CommQuery ar{CommKind::kAllReduce, 4194304, 8, 1, false, DType::kBF16};  // 4 MB
  EXPECT_NEAR(static_cast<double>(model->comm(ar).time_ns),
              30000.0 * std::pow(110000.0 / 30000.0, 0.5), 1.0);
  testing::expect_consistent(model->comm(ar));
}

TEST_F(Profiled, OutsideTheRange) {
  // Above: scaled linearly from the largest measurement.
  EXPECT_EQ(model->compute(mlp_up(32768)).ns, 6000000);
  // Below: the smallest measurement (latency floor).
  EXPECT_EQ(model->compute(mlp_up(512)).ns, 200000);
  CommQuery ar{CommKind::kAllReduce, int64_t{1} << 30, 8, 1, false, DType::kBF16};
  EXPECT_EQ(model->comm(ar).time_ns, 1400000 * 4);
  ar.bytes = 1024;
  EXPECT_EQ(model->comm(ar).time_ns, 30000);
}

TEST_F(Profiled, BackwardFromItsHalves) {
  EXPECT_EQ(model->compute(mlp_up(4096, Pass::kB)).ns, 780000 + 800000);
}

TEST_F(Profiled, MissingKeysFallBackToAnalytic) {
  std::vector<ComputeQuery> qs;
  ComputeQuery down = mlp_up(4096);
  down.kind = OpKind::kMlpDown;  // op not in the table
  qs.push_back(down);
  ComputeQuery fp8 = mlp_up(4096);
  fp8.dtype = DType::kFP8;  // dtype not in the table
  qs.push_back(fp8);
  ComputeQuery wide = mlp_up(4096);
  wide.gemm.n = 28672;  // another shape
  qs.push_back(wide);
  qs.push_back(mlp_up(1024, Pass::kBI));  // BI measured only at m=4096: still a series
  ComputeQuery norm_b;
  norm_b.kind = OpKind::kNorm;
  norm_b.pass = Pass::kB;  // pass not in the table
  norm_b.bytes = 1 << 26;
  qs.push_back(norm_b);
  for (size_t i = 0; i < qs.size(); ++i) {
    if (i == 3) {
      EXPECT_EQ(model->compute(qs[i]).ns, 780000);  // below the only point: its time
      continue;
    }
    EXPECT_EQ(model->compute(qs[i]).ns, analytic->compute(qs[i]).ns) << i;
    EXPECT_EQ(model->compute(qs[i]).mem_bound, analytic->compute(qs[i]).mem_bound) << i;
  }
  for (CommQuery q : {CommQuery{CommKind::kAllReduce, 1 << 20, 16, 2, false, DType::kBF16},
                      CommQuery{CommKind::kAllGather, 1 << 20, 8, 1, false, DType::kBF16},
                      CommQuery{CommKind::kSendRecv, 1 << 20, 2, 1, false, DType::kBF16}}) {
    CommCost p = model->comm(q), a = analytic->comm(q);
    EXPECT_EQ(p.time_ns, a.time_ns);
    EXPECT_EQ(p.algo, a.algo);
  }
  EXPECT_EQ(model->dispatch_ns(), analytic->dispatch_ns());
  EXPECT_EQ(model->interference().comm_sm_share, analytic->interference().comm_sm_share);
}

TEST(ProfileTable, OptimizerStepKeysAsPassNone) {
  // The optimizer step has no pass (Pass::kNone): `stretto profile` writes it as "none", and
  // the table files it apart from the passes of the same op.
  auto t = parse_profile_table(
      R"({"version": 1, "kernels": [
           {"op": "optimizer", "pass": "none", "dtype": "fp32", "bytes": 1000000, "ns": 40000},
           {"op": "optimizer", "pass": "F", "dtype": "fp32", "bytes": 1000000, "ns": 7}]})",
      "table.json");
  ASSERT_TRUE(t) << render_all(t.error());
  ComputeQuery q;
  q.kind = OpKind::kOptimizer;
  q.pass = Pass::kNone;
  q.dtype = DType::kFP32;
  q.bytes = 1000000;
  ASSERT_TRUE(t->kernel_ns(q).has_value());
  EXPECT_EQ(*t->kernel_ns(q), 40000);
  EXPECT_EQ(profile_pass_name(Pass::kNone), "none");
  EXPECT_EQ(profile_pass_name(Pass::kBW), "BW");
}

// --- table errors --------------------------------------------------------------------------

Diagnostics errors_of(const std::string& text) {
  auto t = parse_profile_table(text, "table.json");
  EXPECT_FALSE(t.has_value());
  return t ? Diagnostics{} : t.error();
}

TEST(ProfileTableErrors, BadJsonHasLineAndColumn) {
  auto t = load_profile_table(kData + "/bad_syntax.json");
  ASSERT_FALSE(t);
  ASSERT_EQ(t.error().size(), 1u);
  const Diagnostic& d = t.error()[0];
  EXPECT_EQ(d.loc.file, kData + "/bad_syntax.json");
  EXPECT_EQ(d.loc.line, 4u);
  EXPECT_EQ(d.loc.col, 44u);  // the start of the unexpected "bytes"
  EXPECT_NE(d.message.find("invalid JSON"), std::string::npos);
  EXPECT_NE(d.source_line.find("\"group_size\": 8 \"bytes\""), std::string::npos);
}

TEST(ProfileTableErrors, MissingFieldHasFileAndPointer) {
  CostModelSpec s = profiled_spec("bad_missing_field.json");
  auto m = make_cost_model(s, testing::h100_cluster(), kData);
  ASSERT_FALSE(m);
  ASSERT_EQ(m.error().size(), 1u);
  const Diagnostic& d = m.error()[0];
  EXPECT_EQ(d.loc.file, kData + "/bad_missing_field.json");
  EXPECT_EQ(d.loc.json_pointer, "/kernels/1");
  EXPECT_EQ(d.message, "missing field 'ns'");
  EXPECT_EQ(d.loc.line, 5u);
  EXPECT_EQ(d.loc.col, 5u);
  EXPECT_EQ(d.source_line, "    {\"op\": \"norm\", \"pass\": \"F\", \"bytes\": 67108864}");
}

TEST(ProfileTableErrors, BadOptionIsLocatedInTheTable) {
  // an option measured with the table is checked as the table's (file, /options pointer), not
  // reported as one of the plan's cost model options
  CostModelSpec s = profiled_spec("bad_options.json");
  s.pointer = "/costmodel";
  auto m = make_cost_model(s, testing::h100_cluster(), kData);
  ASSERT_FALSE(m);
  ASSERT_EQ(m.error().size(), 1u);
  const Diagnostic& d = m.error()[0];
  EXPECT_EQ(d.loc.file, kData + "/bad_options.json");
  EXPECT_EQ(d.loc.json_pointer, "/options/host_cold_factor/all_gathr");
  EXPECT_EQ(d.message, "unknown communication kind 'all_gathr'");
  EXPECT_EQ(d.hint, "did you mean 'all_gather'?");
}

TEST(ProfileTableErrors, AllProblemsAreReportedWithPointersAndHints) {
  Diagnostics ds = errors_of(R"({
    "version": 1,
    "kernel": [],
    "kernels": [
      {"op": "mlp_upp", "pass": "F", "m": 1, "n": 2, "k": 3, "ns": 10},
      {"op": "norm", "pass": "FW", "bytes": 100, "ns": -5},
      {"op": "norm", "pass": "F", "bytes": 100, "ns": 5, "nss": 4},
      {"op": "norm", "pass": "F", "bytes": 100, "ns": 6},
      {"op": "norm", "pass": "F", "bytes": 100, "ns": 7},
      {"op": "norm", "pass": "F", "bytes": 100, "m": 3, "n": 4, "k": 5, "ns": 7},
      {"op": "norm", "pass": "F", "ns": 7},
      "oops"
    ],
    "collectives": [
      {"kind": "all_reduc", "group_size": 8, "bytes": 1, "ns": 1},
      {"kind": "all_reduce", "group_size": 2, "nodes": 4, "bytes": 1, "ns": 1},
      {"kind": "all_reduce", "group_size": 2.5, "bytes": 1, "ns": 1}
    ]
  })");
  auto find = [&](const std::string& ptr) -> const Diagnostic* {
    for (const auto& d : ds)
      if (d.loc.json_pointer == ptr) return &d;
    return nullptr;
  };
  auto expect_at = [&](const std::string& ptr, const std::string& words,
                       const std::string& hint = {}) {
    const Diagnostic* d = find(ptr);
    ASSERT_NE(d, nullptr) << "no diagnostic at " << ptr;
    EXPECT_NE(d->message.find(words), std::string::npos) << ptr << ": " << d->message;
    EXPECT_EQ(d->loc.file, "table.json");
    if (!hint.empty()) {
      EXPECT_EQ(d->hint, hint) << ptr;
    }
  };
  expect_at("/kernel", "unknown field 'kernel'", "did you mean 'kernels'?");
  EXPECT_EQ(find("/kernel")->loc.line, 3u);  // positions come with the pointers
  EXPECT_EQ(find("/kernels/0/op")->loc.line, 5u);
  expect_at("/kernels/0/op", "unknown op 'mlp_upp'", "did you mean 'mlp_up'?");
  expect_at("/kernels/1/pass", "unknown pass 'FW'");
  expect_at("/kernels/1/ns", "must be > 0");
  expect_at("/kernels/2/nss", "unknown field 'nss'", "did you mean 'ns'?");
  expect_at("/kernels/4", "duplicate measurement");
  expect_at("/kernels/5", "not both");
  expect_at("/kernels/6", "missing field 'bytes'");
  expect_at("/kernels/7", "must be an object");
  expect_at("/collectives/0/kind", "unknown collective kind 'all_reduc'",
            "did you mean 'all_reduce'?");
  expect_at("/collectives/1/nodes", "exceeds 'group_size'");
  expect_at("/collectives/2/group_size", "positive integer");
  EXPECT_EQ(ds.size(), 12u);
}

TEST(ProfileTableErrors, VersionAndShape) {
  Diagnostics ds = errors_of(R"({"kernels": []})");
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].message, "missing field 'version'");
  EXPECT_EQ(ds[0].loc.json_pointer, "");
  ds = errors_of(R"({"version": 2})");
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/version");
  ds = errors_of(R"([1, 2])");
  ASSERT_EQ(ds.size(), 1u);
  ds = errors_of(R"({"version": 1, "kernels": {}})");
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/kernels");
}

TEST(ProfileTableErrors, UnreadableFileAndMissingPath) {
  auto m = make_cost_model(profiled_spec("no_such_table.json"), testing::h100_cluster(), kData);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error()[0].loc.file, kData + "/no_such_table.json");
  EXPECT_NE(m.error()[0].message.find("cannot read"), std::string::npos);
  m = make_cost_model(profiled_spec(""), testing::h100_cluster(), kData);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error()[0].loc.json_pointer, "/costmodel");
  EXPECT_NE(m.error()[0].message.find("'profile'"), std::string::npos);
}

}  // namespace
}  // namespace stretto::cost
