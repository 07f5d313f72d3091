// sim/coverage.h: how much of a plan a measured table prices, node by node, as the simulator
// asks (the two-stage synthetic plan of tests/data/traces/options: 2 stages x 2 microbatches x
// 2 regions, F and B, and the send/recv between the stages).
#include <gtest/gtest.h>

#include "stretto/sim/coverage.h"
#include "stretto/sim/session.h"

using namespace stretto;
using namespace stretto::plan;
using namespace stretto::compiler;

namespace {

cost::ProfileTable table(const Json& kernels, const Json& collectives) {
  Json t = {{"version", 1}, {"device", "cpu"}, {"kernels", kernels}, {"collectives", collectives}};
  auto p = cost::parse_profile_table(t.dump(), "test table");
  EXPECT_TRUE(p) << render_all(p.error());
  return *p;
}

}  // namespace

TEST(TableCoverage, CountsWhatTheTablePricesAndNamesWhatFellBack) {
  auto s = sim::Session::open(std::string(STRETTO_TEST_DATA) + "/traces/options/plan.json");
  ASSERT_TRUE(s) << render_all(s.error());
  const CompiledPlan& cp = s->compiled();
  const std::string dt(cost::profile_dtype_name(cp.model.dtype));
  auto kernel = [&](const char* pass) {
    return Json{{"op", "synthetic"}, {"pass", pass}, {"dtype", dt}, {"bytes", 1 << 20}, {"ns", 100000}};
  };
  // the plan's own table is empty: everything fell back, and says so
  auto own = sim::profiled_coverage(cp);
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->ops, 16u);
  EXPECT_EQ(own->ops_measured, 0u);
  EXPECT_EQ(own->collectives, 4u);
  EXPECT_EQ(own->collectives_measured, 0u);
  EXPECT_EQ(own->percent(), 0.0);
  EXPECT_EQ(own->ops_fell_back, (std::vector<std::string>{"synthetic B", "synthetic F"}));
  EXPECT_EQ(own->collectives_fell_back, (std::vector<std::string>{"send/recv x2"}));
  // forwards only: half the ops
  sim::TableCoverage c = sim::table_coverage(cp, table(Json::array({kernel("F")}), Json::array()));
  EXPECT_EQ(c.ops_measured, 8u);
  EXPECT_DOUBLE_EQ(c.percent(), 100.0 * 8 / 20);
  EXPECT_EQ(c.ops_fell_back, (std::vector<std::string>{"synthetic B"}));
  // and the stage-to-stage transfers
  const Json p2p = Json::array(
      {{{"kind", "send_recv"}, {"group_size", 2}, {"nodes", 1}, {"bytes", 65536}, {"ns", 5000}}});
  c = sim::table_coverage(cp, table(Json::array({kernel("F"), kernel("B")}), p2p));
  EXPECT_EQ(c.ops_measured, 16u);
  EXPECT_EQ(c.collectives_measured, 4u);
  EXPECT_EQ(c.percent(), 100.0);
  EXPECT_TRUE(c.ops_fell_back.empty());
  EXPECT_TRUE(c.collectives_fell_back.empty());
  const Json j = sim::coverage_json(c);
  EXPECT_EQ(j["percent"], 100.0);
  EXPECT_EQ(j["ops"], 16);
  // the analytic cost model has no table
  CostModelSpec analytic;
  ASSERT_TRUE(s->set_costmodel(analytic));
  EXPECT_FALSE(sim::profiled_coverage(s->compiled()).has_value());
}
