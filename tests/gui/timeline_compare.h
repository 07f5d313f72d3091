#pragma once
// Test helper: two timelines field by field (gui/timeline.h).
#include <gtest/gtest.h>

#include <string>

#include "stretto/gui/timeline.h"

namespace stretto::gui {

// Every field of two timelines.
inline void expect_same_timeline(const Timeline& a, const Timeline& b) {
  EXPECT_EQ(a.end, b.end);
  EXPECT_EQ(a.ops, b.ops);
  EXPECT_EQ(a.by_device, b.by_device);
  EXPECT_EQ(a.where, b.where);
  ASSERT_EQ(a.lanes.size(), b.lanes.size());
  auto same_spans = [](const std::vector<Span>& x, const std::vector<Span>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].start != y[i].start || x[i].end != y[i].end || x[i].first != y[i].first ||
          x[i].last != y[i].last || x[i].cls != y[i].cls)
        return false;
    return true;
  };
  for (size_t li = 0; li < a.lanes.size(); ++li) {
    const Lane &x = a.lanes[li], &y = b.lanes[li];
    SCOPED_TRACE("lane " + std::to_string(li));
    EXPECT_EQ(x.device, y.device);
    EXPECT_EQ(x.stream, y.stream);
    EXPECT_EQ(x.name, y.name);
    ASSERT_EQ(x.ops.size(), y.ops.size());
    for (size_t i = 0; i < x.ops.size(); ++i) {
      EXPECT_EQ(x.ops[i].start, y.ops[i].start) << i;
      EXPECT_EQ(x.ops[i].end, y.ops[i].end) << i;
      EXPECT_EQ(x.ops[i].task, y.ops[i].task) << i;
      EXPECT_EQ(x.ops[i].cls, y.ops[i].cls) << i;
    }
    EXPECT_TRUE(same_spans(x.passes, y.passes));
    EXPECT_TRUE(same_spans(x.layers, y.layers));
  }
}

}  // namespace stretto::gui
