// The step of a Kineto trace (traces/kineto_step.h): one definition, used by `import kineto`
// and `compare`, on hand-made spans and on the traces PyTorch's profiler wrote.
#include <gtest/gtest.h>

#include <string>

#include "stretto/traces/compare.h"
#include "stretto/traces/kineto.h"
#include "stretto/traces/kineto_step.h"

using namespace stretto;
using namespace stretto::traces;

namespace {
const std::string kData = std::string(STRETTO_TEST_DATA) + "/traces/";
}  // namespace

// Steps 1-3 on the host: [0, 10), [10, 20), [20, 30). GPU work launched in step 2 runs to 27:
// step 2 ends at 27 (not at the host's 20, not at a GPU op of step 3). Work launched in step 3
// that starts during step 2's tail is step 3's. A launch between steps belongs to none.
TEST(KinetoStep, HostRangeExtendedToTheGpuWorkItLaunched) {
  const std::vector<StepSpan> host = {{3, 20, 30}, {1, 0, 10}, {2, 10, 20}};
  const std::vector<GpuOpSpan> gpu = {{1, 9}, {12, 27}, {21, 33}, {35, 99}};
  const auto all = rank_steps(host, gpu, 0);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].number, 1);
  EXPECT_EQ(all[0].end, 10);  // the host's range: its GPU work ended first
  EXPECT_EQ(all[1].end, 27);
  EXPECT_EQ(all[2].end, 33);
  const auto used = rank_steps(host, gpu);  // the first step is warm-up
  ASSERT_EQ(used.size(), 2u);
  EXPECT_EQ(used[0].number, 2);
  EXPECT_EQ(warmup_steps(1, -1), 0u);
  EXPECT_EQ(warmup_steps(5, 2), 2u);
  EXPECT_EQ(warmup_steps(1, 3), 1u);
}

TEST(KinetoStep, RanksJoinByNumberAndTheMedianIsAMeasuredStep) {
  const std::vector<std::vector<StepSpan>> ranks = {{{2, 100, 150}, {3, 150, 300}, {4, 300, 320}},
                                                    {{2, 90, 140}, {3, 155, 310}}};
  const auto joined = join_ranks(ranks);  // step 4 is not on every rank
  ASSERT_EQ(joined.size(), 2u);
  EXPECT_EQ(joined[0].start, 90);
  EXPECT_EQ(joined[0].end, 150);
  EXPECT_EQ(joined[1].end, 310);
  // durations 60, 160, 20: the median is 60; of an even count, the lower middle
  const auto m = median_step({{2, 0, 60}, {3, 0, 160}, {4, 0, 20}});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->number, 2);
  EXPECT_EQ(median_step({{2, 0, 60}, {3, 0, 160}})->number, 2);
  EXPECT_FALSE(median_step({}));
  EXPECT_EQ(profiler_step_number("ProfilerStep#12"), 12);
  EXPECT_FALSE(profiler_step_number("ProfilerStep#1x"));
  EXPECT_FALSE(profiler_step_number("Step#1"));
}

// `import kineto` took the median of the host ranges (36.1 ms per rank) and `compare` the last,
// cut-short step ending at its last labelled GPU op (7.0 ms) of the same trace. Both now take
// the same step: two Gloo ranks on an H100 (PyTorch 2.11), used steps 2-4 of 36.18, 37.20 and
// 20.76 ms over both ranks (the Gloo all-reduce on the host ends each step, after the GPU).
TEST(KinetoStep, ImportAndCompareAgreeOnRealTraces) {
  struct Case {
    std::vector<std::string> files;
    std::string dir;
    int64_t number;
    double ms;
  };
  for (const Case& c :
       {Case{{kData + "real/rank0.pt.trace.json.gz", kData + "real/rank1.pt.trace.json.gz"},
             kData + "real", 2, 36.182},
        Case{{kData + "real_gemm/h100_gemm.pt.trace.json.gz"},
             kData + "real_gemm/h100_gemm.pt.trace.json.gz", 3, 16.877}}) {
    SCOPED_TRACE(c.dir);
    auto k = import_kineto(c.files);
    ASSERT_TRUE(k) << render_all(k.error());
    ASSERT_TRUE(k->step);
    EXPECT_EQ(k->step->number, c.number);
    EXPECT_NEAR(static_cast<double>(k->step->duration()) / 1e6, c.ms, 0.001);
    auto t = load_timeline(c.dir);
    ASSERT_TRUE(t) << render_all(t.error());
    EXPECT_EQ(t->step, k->step->duration());
    EXPECT_NE(t->note.find("ProfilerStep#" + std::to_string(c.number)), std::string::npos)
        << t->note;
    if (c.files.size() == 1) {
      EXPECT_EQ(k->ranks[0].step.median, k->step->duration());
    }
  }
}
