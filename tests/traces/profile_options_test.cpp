// A profiled table's `options` (what `stretto profile` measured: interference) apply under the
// plan's own cost-model options.
#include <gtest/gtest.h>

#include "stretto/sim/session.h"

using namespace stretto;

namespace {
const std::string kData = std::string(STRETTO_TEST_DATA) + "/traces/options/";
}

TEST(ProfileOptions, TableOptionsApplyAndThePlanWins) {
  auto s = sim::Session::open(kData + "plan.json");
  ASSERT_TRUE(s) << render_all(s.error());
  EXPECT_DOUBLE_EQ(s->cost_model().interference().comm_sm_share, 0.25);
  EXPECT_DOUBLE_EQ(s->cost_model().interference().comm_hbm_share, 0.25);
  auto o = sim::Session::open(kData + "plan_override.json");
  ASSERT_TRUE(o) << render_all(o.error());
  EXPECT_DOUBLE_EQ(o->cost_model().interference().comm_sm_share, 0.5);
  EXPECT_DOUBLE_EQ(o->cost_model().interference().comm_hbm_share, 0.25);
}
