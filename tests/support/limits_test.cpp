// Issue 14 limits at the library level: JSON nesting, the iterative position index, windowed
// source lines, capped diagnostics, byte sizes, checked arithmetic.
#include <gtest/gtest.h>

#include <string>

#include "stretto/plan/json_source.h"
#include "stretto/support/limits.h"
#include "stretto/support/plural.h"

using namespace stretto;
using namespace stretto::plan;

TEST(Formatting, CountNounIsSingularForExactlyOne) {
  EXPECT_EQ(count_noun(1, "microbatch", "microbatches"), "1 microbatch");
  EXPECT_EQ(count_noun(0, "microbatch", "microbatches"), "0 microbatches");
  EXPECT_EQ(count_noun(2, "step", "steps"), "2 steps");
  EXPECT_EQ(count_noun(-1, "step", "steps"), "-1 steps");
}

TEST(Limits, NestingAtTheLimitParsesAndOneMoreIsRefused) {
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(JsonSource::parse(ok, "ok.json").has_value());
  const std::string deep =
      std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  auto r = JsonSource::parse(deep, "deep.json");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error()[0].loc.line, 1u);
  EXPECT_EQ(r.error()[0].loc.col, static_cast<uint32_t>(kMaxJsonDepth + 1));
  // Brackets inside strings do not count.
  const std::string in_string = "{\"a\": \"" + std::string(1000, '[') + "\"}";
  EXPECT_TRUE(JsonSource::parse(in_string, "s.json").has_value());
}

TEST(Limits, PositionIndexFindsEveryValueAtDepth) {
  // 200 nested objects: the index (iterative, keyed by node) locates the innermost value.
  std::string text;
  std::string ptr;
  for (int i = 0; i < 200; ++i) {
    text += "{\"k~/" + std::to_string(i) + "\":\n";
    ptr += "/k~0~1" + std::to_string(i);
  }
  text += "[1, {\"x\": \"\\u00e9\\n\"}, \"z\"]" + std::string(200, '}');
  auto src = JsonSource::parse(text, "t.json");
  ASSERT_TRUE(src.has_value()) << render_all(src.error());
  SourceLoc l = src->loc(ptr + "/2");
  EXPECT_EQ(l.line, 201u);
  EXPECT_EQ(l.col, 24u);
  EXPECT_EQ(src->loc(ptr + "/1/x").col, 11u);
  EXPECT_EQ(src->key_loc(ptr + "/1/x").col, 6u);
  // A pointer that does not exist falls back to the deepest existing ancestor.
  EXPECT_EQ(src->loc(ptr + "/1/nope").col, 5u);
  EXPECT_EQ(src->loc(ptr + "/7").col, 1u);  // the array
  // Escaped keys resolve (unicode escapes included).
  auto u = JsonSource::parse("{\"caf\\u00e9\": {\"a/b\": 3}}", "u.json");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->loc("/caf\xc3\xa9/a~1b").col, 23u);
  // A copy indexes its own document.
  JsonSource copy = *u;
  EXPECT_EQ(copy.loc("/caf\xc3\xa9/a~1b").col, 23u);
}

TEST(Limits, WindowLineKeepsTheCaretOnItsCharacter) {
  std::string line(100000, 'a');
  line[70000] = 'X';
  uint32_t col = 70001;
  const std::string w = window_line(line, col);
  EXPECT_LE(w.size(), kMaxEchoedLine + 6);
  EXPECT_EQ(w[col - 1], 'X');
  EXPECT_EQ(w.substr(0, 3), "...");
  uint32_t c2 = 3;
  EXPECT_EQ(window_line("short", c2), "short");
  EXPECT_EQ(c2, 3u);
  // A caret near the end of a long line.
  uint32_t c3 = 100000;
  const std::string w3 = window_line(line, c3);
  EXPECT_EQ(c3, w3.size());
}

TEST(Limits, DiagnosticsAreCapped) {
  Diagnostics ds(10000);
  for (auto& d : ds) d.message = "bad";
  Diagnostics capped = cap_diagnostics(ds);
  ASSERT_EQ(capped.size(), kMaxDiagnostics + 1);
  EXPECT_NE(capped.back().message.find("9,950 more errors"), std::string::npos);
  const std::string all = render_all(ds);
  EXPECT_NE(all.find("... and 9,950 more"), std::string::npos);
  EXPECT_LT(all.size(), 8000u);
  // A rendered long source line is windowed even when the producer did not window it.
  Diagnostic d;
  d.message = "m";
  d.loc = {"f.json", 1, 50000, ""};
  d.source_line = std::string(60000, 'b');
  EXPECT_LT(d.render().size(), 600u);
}

TEST(Limits, ByteSizesAndCheckedArithmetic) {
  EXPECT_EQ(parse_byte_size("1000"), 1000u);
  EXPECT_EQ(parse_byte_size("8G"), uint64_t{8} << 30);
  EXPECT_EQ(parse_byte_size("1.5M"), uint64_t{3} << 19);
  EXPECT_EQ(parse_byte_size("64KiB"), uint64_t{64} << 10);
  EXPECT_FALSE(parse_byte_size("lots").has_value());
  EXPECT_FALSE(parse_byte_size("-1G").has_value());
  EXPECT_FALSE(checked_mul(int64_t{1} << 40, int64_t{1} << 30).has_value());
  EXPECT_EQ(checked_mul(3, 4), 12);
  EXPECT_FALSE(checked_add(INT64_MAX, 1).has_value());
}
