// A plan the simulator must refuse, and the check every refusal test makes of it: the session
// does not open, its diagnostic says `says`, names the JSON pointer (when given) and is located
// in the file (file:line:col). Shared by the tp_comm_overlap and context-parallelism tests.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "stretto/sim/session.h"

namespace stretto::sim::testing {

struct Refusal {
  const char* name;
  nlohmann::json plan;
  const char* pointer;  // "" when the refusal has no JSON pointer of its own
  const char* says;
};

inline void expect_refused(std::span<const Refusal> cases) {
  for (const Refusal& rc : cases) {
    SCOPED_TRACE(rc.name);
    auto s = Session::from_text(rc.plan.dump(2), "refused.json");
    ASSERT_FALSE(s);
    const std::string all = render_all(s.error());
    EXPECT_NE(all.find(rc.says), std::string::npos) << all;
    if (*rc.pointer) {
      EXPECT_NE(all.find(rc.pointer), std::string::npos) << all;
    }
    EXPECT_NE(all.find("refused.json:"), std::string::npos) << all;  // file:line:col
  }
}

}  // namespace stretto::sim::testing
