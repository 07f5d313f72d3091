// traces::read_chrome_trace reads back what chrome_trace writes, and survives other files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "stretto/sim/session.h"
#include "stretto/traces/chrome_reader.h"
#include "stretto/traces/chrome_trace.h"

namespace stretto::traces {
namespace {

namespace fs = std::filesystem;

fs::path write(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("stretto_reader_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

TEST(ChromeReader, ReadsBackSlicesTimesNamesAndTags) {
  auto s = sim::Session::open(std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json");
  ASSERT_TRUE(s);
  auto r = s->simulate();
  ASSERT_TRUE(r);
  const fs::path p = write("t.json", chrome_trace(s->compiled(), *r));
  auto t = read_chrome_trace(p.string());
  ASSERT_TRUE(t) << render_all(t.error());
  size_t expected = 0;  // one slice per (task, participant), barriers left out
  for (const auto& tk : r->program.tasks)
    if (tk.kind != engine::TaskKind::kBarrier) expected += tk.part_count;
  EXPECT_EQ(t->slices.size(), expected);
  int64_t end = 0;
  for (const auto& sl : t->slices) end = std::max(end, sl.end_ns);
  EXPECT_EQ(end, r->step_time);  // microseconds with ns precision round-trip exactly
  EXPECT_EQ(t->process_names.size(), 8u);
  EXPECT_EQ(t->thread_names.at({0, 0}), "compute");
  bool tagged = false;
  for (const auto& sl : t->slices) tagged |= sl.tags == "PP0 MB0 F" && sl.cat == "compute";
  EXPECT_TRUE(tagged);
}

TEST(ChromeReader, BareArraysOddEventsAndBadFiles) {
  auto t = read_chrome_trace(write("a.json", R"([{"ph":"X","pid":1,"tid":2,"ts":1.5,"dur":2,"name":"k"},
    {"ph":"X","pid":1,"tid":2,"name":"no time"}, {"ph":"C","name":"mem"}, 3])").string());
  ASSERT_TRUE(t);
  ASSERT_EQ(t->slices.size(), 1u);
  EXPECT_EQ(t->slices[0].start_ns, 1500);
  EXPECT_EQ(t->slices[0].end_ns, 3500);
  EXPECT_EQ(t->skipped, 3u);
  auto bad = read_chrome_trace(write("b.json", "{\"traceEvents\": 3}").string());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error()[0].message.find("traceEvents"), std::string::npos);
  EXPECT_FALSE(read_chrome_trace(write("c.json", "{not json").string()));
  EXPECT_FALSE(read_chrome_trace("/nonexistent/trace.json"));
}

}  // namespace
}  // namespace stretto::traces
