// make_cost_model: option validation and cluster checks, as diagnostics with pointers.

#include <gtest/gtest.h>

#include "helpers.h"
#include "stretto/costmodel/analytic.h"
#include "stretto/plan/schema.h"

namespace stretto::cost {

using compiler::CommKind;
using plan::ClusterSpec;
using plan::Json;
using plan::ValueSource;

namespace {

Diagnostics errors_of(Json options, ClusterSpec cl = testing::h100_cluster(2, 8)) {
  auto m = make_cost_model(testing::analytic_spec(std::move(options)), cl, "");
  EXPECT_FALSE(m.has_value());
  return m ? Diagnostics{} : m.error();
}

TEST(CostModelOptions, UnknownKeyGivesDidYouMean) {
  Diagnostics ds = errors_of({{"gemm_eficiency", 0.7}});
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].message, "unknown cost model option 'gemm_eficiency'");
  EXPECT_EQ(ds[0].loc.json_pointer, "/costmodel/gemm_eficiency");
  EXPECT_EQ(ds[0].hint, "did you mean 'gemm_efficiency'?");
  EXPECT_EQ(ds[0].severity, Severity::kError);

  ds = errors_of({{"comm_sm_shares", 0.2}, {"dispatch", 3}, {"zzzzzzzz", 1}});
  ASSERT_EQ(ds.size(), 3u);  // all collected
  EXPECT_EQ(ds[0].hint, "did you mean 'comm_sm_share'?");
  EXPECT_EQ(ds[1].hint, "did you mean 'dispatch_us'?");
  EXPECT_EQ(ds[2].hint, "");  // nothing plausible
  EXPECT_EQ(ds[2].loc.json_pointer, "/costmodel/zzzzzzzz");
}

TEST(CostModelOptions, PointerUsesTheSpecPointerAndEscapes) {
  plan::CostModelSpec s = testing::analytic_spec({{"a/b", 1}});
  s.pointer = "/plans/0/costmodel";
  auto m = make_cost_model(s, testing::h100_cluster(), "");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error()[0].loc.json_pointer, "/plans/0/costmodel/a~1b");
}

TEST(CostModelOptions, BadValues) {
  Diagnostics ds = errors_of({{"gemm_efficiency", 1.5},
                              {"memory_efficiency", "high"},
                              {"gemm_tile_m", 0},
                              {"wave_quantization", 1},
                              {"nccl_arch", "hoper"},
                              {"comm_hbm_share", -0.1}});
  ASSERT_EQ(ds.size(), 6u);  // every problem, in key order
  EXPECT_EQ(ds[0].loc.json_pointer, "/costmodel/comm_hbm_share");
  EXPECT_EQ(ds[0].message, "option 'comm_hbm_share' = -0.1 is out of range [0.0, 1.0]");
  EXPECT_EQ(ds[1].loc.json_pointer, "/costmodel/gemm_efficiency");
  EXPECT_EQ(ds[1].message, "option 'gemm_efficiency' = 1.5 is out of range (0.0, 1.0]");
  EXPECT_EQ(ds[2].loc.json_pointer, "/costmodel/gemm_tile_m");
  EXPECT_EQ(ds[3].loc.json_pointer, "/costmodel/memory_efficiency");
  EXPECT_EQ(ds[3].message, "option 'memory_efficiency' must be a number");
  EXPECT_EQ(ds[4].loc.json_pointer, "/costmodel/nccl_arch");
  EXPECT_EQ(ds[4].hint, "did you mean 'hopper'?");
  EXPECT_EQ(ds[5].loc.json_pointer, "/costmodel/wave_quantization");
}

TEST(CostModelOptions, HostColdFactorByKind) {
  // a number for every kind, or an object by communication kind; each located
  Diagnostics ds = errors_of({{"host_cold_factor", {{"all_gathr", 1.2}, {"all_to_all", 9}}}});
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/costmodel/host_cold_factor/all_gathr");
  EXPECT_EQ(ds[0].message, "unknown communication kind 'all_gathr'");
  EXPECT_EQ(ds[0].hint, "did you mean 'all_gather'?");
  EXPECT_EQ(ds[1].loc.json_pointer, "/costmodel/host_cold_factor/all_to_all");
  EXPECT_EQ(ds[1].message, "option 'all_to_all' = 9 is out of range [0.25, 4.0]");
  ds = errors_of({{"host_cold_factor", "fast"}});
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/costmodel/host_cold_factor");
  ds = errors_of({{"host_cold_factor", 0.1}});
  ASSERT_EQ(ds.size(), 1u);
  auto cl = testing::h100_cluster(1, 8);
  auto m = testing::make_or_die(
      testing::analytic_spec({{"host_cold_factor", {{"all_gather", 1.25}}}}), cl);
  ASSERT_TRUE(m);
  const Interference itf = m->interference();
  EXPECT_EQ(itf.host_cold_factor[static_cast<size_t>(CommKind::kAllGather)], 1.25);
  EXPECT_EQ(itf.host_cold_factor[static_cast<size_t>(CommKind::kAllToAll)], 1.0);
  ds = errors_of({{"host_share_efficiency", 0}});
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/costmodel/host_share_efficiency");
  auto all = testing::make_or_die(testing::analytic_spec({{"host_cold_factor", 2}}), cl);
  ASSERT_TRUE(all);
  for (size_t k = 0; k < kCommKinds; ++k) EXPECT_EQ(all->interference().host_cold_factor[k], 2.0);
}

TEST(CostModelOptions, HostReuseFactor) {
  // a number (every distance from 1) or a list by distance (the last for every larger one),
  // each in [0.25, 4]; 1 (no effect) unless given
  Diagnostics ds = errors_of({{"host_reuse_factor", 5}});
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/costmodel/host_reuse_factor");
  EXPECT_EQ(ds[0].message, "option 'host_reuse_factor' = 5 is out of range [0.25, 4.0]");
  ds = errors_of({{"host_reuse_factor", {1.1, 9}}});
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/costmodel/host_reuse_factor/1");
  ds = errors_of({{"host_reuse_factor", {1.1, 1.2, 1.3, 1.4}}});
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].message,
            "option 'host_reuse_factor' must be a number or a list of 1 to 3 numbers");
  ds = errors_of({{"host_reuse_factor", {{"B", 1.2}}}});
  ASSERT_EQ(ds.size(), 1u);
  ds = errors_of({{"host_reuse_facter", 1.2}});
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].hint, "did you mean 'host_reuse_factor'?");
  auto cl = testing::h100_cluster(1, 8);
  auto one = testing::make_or_die(testing::analytic_spec({{"host_reuse_factor", 1.2}}), cl);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->interference().host_reuse_factor, (std::array<double, 4>{1.0, 1.2, 1.2, 1.2}));
  auto two = testing::make_or_die(testing::analytic_spec({{"host_reuse_factor", {1.1, 1.3}}}), cl);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->interference().host_reuse_factor, (std::array<double, 4>{1.0, 1.1, 1.3, 1.3}));
  auto plain = testing::make_or_die(testing::analytic_spec({}), cl);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->interference().host_reuse_factor, unit_reuse_factors());
}

TEST(CostModelOptions, NcclMaskTypos) {
  Diagnostics ds = errors_of({{"nccl_algo", "ring,rign"}});
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/costmodel/nccl_algo");
  EXPECT_EQ(ds[0].hint, "did you mean 'ring'?");
  ds = errors_of({{"nccl_proto", "^LL,simpel"}});
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].hint, "did you mean 'simple'?");
  ds = errors_of({{"nccl_algo", "nvls"}});  // real NCCL algorithm, not modelled
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_NE(ds[0].message.find("expected one of tree, ring, pat"), std::string::npos);
  ds = errors_of({{"nccl_algo", ""}});
  ASSERT_EQ(ds.size(), 1u);
}

TEST(CostModelOptions, MasksAreCaseInsensitiveAndInvertible) {
  auto cl = testing::h100_cluster(1, 8);
  auto m = testing::make_or_die(
      testing::analytic_spec({{"nccl_algo", "Tree"}, {"nccl_proto", "^LL,LL128"}}), cl);
  ASSERT_TRUE(m);
  CommCost c = m->comm({CommKind::kAllReduce, 1 << 10, 8, 1, false, plan::DType::kBF16});
  EXPECT_EQ(c.algo, "tree");
  EXPECT_EQ(c.proto, "simple");
}

TEST(CostModelOptions, PlanKeysAreToleratedFixedKeysAreNot) {
  auto m = make_cost_model(testing::analytic_spec({{"kind", "analytic"}, {"profile", "x"}}),
                           testing::h100_cluster(), "");
  EXPECT_TRUE(m.has_value());
  Diagnostics ds = errors_of({{"F", 1}, {"unit", "ms"}});
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/costmodel/F");
  EXPECT_EQ(ds[0].message, "'F' applies only to the fixed cost model");
  EXPECT_EQ(ds[1].loc.json_pointer, "/costmodel/unit");
}

TEST(CostModelOptions, OptionsMustBeAnObject) {
  Diagnostics ds = errors_of(Json::array({1, 2}));
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/costmodel");
}

TEST(CostModelCluster, MissingNumbersAreDiagnosed) {
  ClusterSpec cl = testing::h100_cluster(2, 8);
  cl.device.peak_tflops = 0;
  cl.inter_node.bandwidth_GBps = 0;
  Diagnostics ds = errors_of(Json::object(), cl);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].loc.json_pointer, "/cluster/peak_tflops");
  EXPECT_EQ(ds[1].loc.json_pointer, "/cluster/inter_node/bandwidth_GBps");
  // A single-node cluster does not need a network.
  ClusterSpec one = testing::h100_cluster(1, 8);
  one.inter_node.bandwidth_GBps = 0;
  EXPECT_TRUE(make_cost_model(testing::analytic_spec(), one, "").has_value());
}

}  // namespace
}  // namespace stretto::cost

namespace stretto::cost {
namespace {

TEST(CostModelOptions, PlanDiagnosticsGetLineAndColumnFromTheSource) {
  const std::string text =
      "{\n"
      "  \"costmodel\": {\"kind\": \"analytic\",\n"
      "                \"gemm_eficiency\": 0.7}\n"
      "}\n";
  auto src = plan::JsonSource::parse(text, "plan.json");
  ASSERT_TRUE(src.has_value());
  plan::CostModelSpec spec = testing::analytic_spec({{"gemm_eficiency", 0.7}});
  auto m = make_cost_model(spec, testing::h100_cluster(), "", &*src);
  ASSERT_FALSE(m);
  ASSERT_EQ(m.error().size(), 1u);
  const Diagnostic& d = m.error()[0];
  EXPECT_EQ(d.loc.file, "plan.json");
  EXPECT_EQ(d.loc.json_pointer, "/costmodel/gemm_eficiency");
  EXPECT_EQ(d.loc.line, 3u);
  EXPECT_EQ(d.loc.col, 17u);  // the key
  EXPECT_EQ(d.source_line, "                \"gemm_eficiency\": 0.7}");
  EXPECT_EQ(d.hint, "did you mean 'gemm_efficiency'?");
}

}  // namespace
}  // namespace stretto::cost

namespace stretto::cost {
namespace {

// The resolved options' sources follow the plan's schema table: a value derived from other
// values (comm_sm_share = 20 / SMs, ...) says "derived", a calibrated one "preset"; and every
// option left to its plain default has the value the table documents.
TEST(CostModelOptions, ResolvedSourcesAndDefaultsAreTheSchemaTables) {
  const ClusterSpec cl = testing::h100_cluster(1, 8);
  const auto fields = resolved_options(testing::analytic_spec(Json::object()), cl);
  ASSERT_FALSE(fields.empty());
  size_t defaults = 0;
  for (const plan::ResolvedField& f : fields) {
    SCOPED_TRACE(f.name);
    const plan::PlanKey& k = plan::schema_key("costmodel", f.name);
    if (k.when_absent == ValueSource::kDerived) {
      EXPECT_EQ(f.source, ValueSource::kDerived);
    }
    if (f.source == ValueSource::kDefault && !k.fallback.empty()) {
      EXPECT_EQ(f.value, k.default_value());
      ++defaults;
    }
  }
  auto source_of = [&](std::string_view name) {
    for (const plan::ResolvedField& f : fields)
      if (f.name == name) return f.source;
    return ValueSource::kPlan;
  };
  EXPECT_EQ(source_of("comm_sm_share"), ValueSource::kDerived);
  EXPECT_EQ(source_of("gemm_efficiency"), ValueSource::kPreset);
  EXPECT_EQ(source_of("dispatch_us"), ValueSource::kDefault);
  EXPECT_GE(defaults, 5u);
}

}  // namespace
}  // namespace stretto::cost
