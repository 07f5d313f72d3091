// The CUDA caching allocator's reserved memory (sim/caching_allocator.h): PyTorch's rounding,
// pools, segment sizes, best fit, splitting and coalescing worked by hand, and the reserved
// bytes `simulate` reports next to the allocated peak.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "stretto/sim/caching_allocator.h"
#include "stretto/sim/metrics_json.h"
#include "stretto/sim/session.h"

namespace stretto::sim {
namespace {

using nlohmann::json;
constexpr int64_t MiB = 1 << 20;

TEST(CachingAllocator, RoundingAndSegmentSizes) {
  // round_size: at least 512 B, a multiple of 512 B.
  EXPECT_EQ(CachingAllocator::round_size(1), 512);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024);
  // get_allocation_size: <= 1 MiB -> 2 MiB; < 10 MiB -> 20 MiB; else a multiple of 2 MiB.
  EXPECT_EQ(CachingAllocator::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(11 * MiB + 512), 12 * MiB);
}

TEST(CachingAllocator, SmallAndLargePoolsShareNoSegment) {
  CachingAllocator a;
  a.malloc(100);  // small: a 2 MiB segment, 512 B of it in use
  EXPECT_EQ(a.reserved(), 2 * MiB);
  EXPECT_EQ(a.allocated(), 512);
  a.malloc(MiB);  // still small (<= 1 MiB): fits in the first segment's rest
  EXPECT_EQ(a.reserved(), 2 * MiB);
  a.malloc(3 * MiB);  // large, under 10 MiB: a 20 MiB segment
  EXPECT_EQ(a.reserved(), 22 * MiB);
  a.malloc(5 * MiB);  // the 17 MiB left of it
  EXPECT_EQ(a.reserved(), 22 * MiB);
  a.malloc(11 * MiB);  // the 12 MiB left of that: large blocks share the pool
  EXPECT_EQ(a.reserved(), 22 * MiB);
  a.malloc(13 * MiB + 1);  // nothing cached fits: its own segment, rounded up to 14 MiB
  EXPECT_EQ(a.reserved(), 36 * MiB);
  // A large block's rest is split off only when it is over 1 MiB.
  CachingAllocator b;
  const uint32_t x = b.malloc(19 * MiB + MiB / 2);  // 20 MiB segment, rest 0.5 MiB: not split
  EXPECT_EQ(b.block_size(x), 20 * MiB);
  EXPECT_EQ(b.allocated(), 20 * MiB);
}

TEST(CachingAllocator, FragmentationAndCoalescing) {
  CachingAllocator a;
  const uint32_t x = a.malloc(8 * MiB);  // a 20 MiB segment: [x 8][free 12]
  const uint32_t y = a.malloc(8 * MiB);  // best fit, the 12: [x 8][y 8][free 4]
  EXPECT_EQ(a.reserved(), 20 * MiB);
  a.free(x);  // [free 8][y 8][free 4]: 12 MiB cached, but no 10 MiB in one piece
  const uint32_t z = a.malloc(10 * MiB);  // a new segment of its own (10 MiB)
  EXPECT_EQ(a.reserved(), 30 * MiB);
  EXPECT_EQ(a.allocated(), 18 * MiB);
  a.free(y);  // merges with both free neighbours: one free 20 MiB block
  const uint32_t w = a.malloc(20 * MiB);  // fits exactly: no new segment
  EXPECT_EQ(a.reserved(), 30 * MiB);
  EXPECT_EQ(a.block_size(w), 20 * MiB);
  a.free(z);
  a.free(w);
  EXPECT_EQ(a.allocated(), 0);
  EXPECT_EQ(a.reserved(), 30 * MiB);  // segments are never returned
}

TEST(CachingAllocator, SplittingABlockInUse) {
  CachingAllocator a;
  const uint32_t x = a.malloc(12 * MiB);  // its own 12 MiB segment
  const uint32_t rest = a.split_in_use(x, 4 * MiB);
  EXPECT_NE(rest, x);
  EXPECT_EQ(a.block_size(x), 4 * MiB);
  EXPECT_EQ(a.block_size(rest), 8 * MiB);
  a.free(x);
  a.malloc(4 * MiB);  // reuses the freed first part
  EXPECT_EQ(a.reserved(), 12 * MiB);
  EXPECT_EQ(a.split_in_use(rest, 8 * MiB), rest);  // nothing left over
}

json gpt_plan(int microbatches, const std::string& preset) {
  return {{"model",
           {{"family", "transformer"}, {"layers", 4}, {"hidden", 2048}, {"heads", 16},
            {"ffn_hidden", 8192}, {"vocab", 32768}, {"seq_len", 2048}, {"microbatch_size", 1},
            {"pp_regions", 2}}},
          {"cluster", {{"preset", preset}, {"nodes", 1}, {"devices_per_node", 2}}},
          {"costmodel", {{"kind", "analytic"}}},
          {"schedule",
           {{"builder", "1f1b"}, {"microbatches", microbatches}, {"layout", {{"pp", 2}}}}},
          {"optimizer", {{"kind", "adam"}, {"master_weights", true}}}};
}

json simulate_json_of(const json& p) {
  auto s = Session::from_text(p.dump(), "alloc.json");
  if (!s) {
    ADD_FAILURE() << render_all(s.error());
    return {};
  }
  auto r = s->simulate();
  if (!r) {
    ADD_FAILURE() << render_all(r.error());
    return {};
  }
  return metrics_json(s->compiled(), *r, pipeline_metrics(s->compiled(), *r));
}

TEST(ReservedMemory, AtLeastTheAllocatedPeakAndReusedAcrossMicrobatches) {
  // 1F1B on two stages: from the third microbatch on, every microbatch's activations are
  // freed before the next but one is allocated, so the allocated peak is the same with 4 and
  // 16 microbatches, and so is the reserved peak: the cached blocks are reused, no segment is
  // added. An allocator that never reused a block (or a replay that lost frees) would reserve
  // about 4x as much with 16.
  const json four = simulate_json_of(gpt_plan(4, "h100-sxm"));
  const json sixteen = simulate_json_of(gpt_plan(16, "h100-sxm"));
  ASSERT_TRUE(four.contains("devices") && sixteen.contains("devices"));
  int64_t top = 0;
  for (size_t d = 0; d < 2; ++d) {
    const json& a = four["devices"][d];
    const json& b = sixteen["devices"][d];
    const int64_t alloc = a["peak_memory_bytes"], reserved = a["peak_reserved_bytes"];
    EXPECT_GE(reserved, alloc) << d;
    // Rounding and cached blocks: more than nothing, less than a quarter of the peak here.
    EXPECT_GT(reserved, alloc) << d;
    EXPECT_LT(reserved - alloc, alloc / 4) << d;
    EXPECT_EQ(b["peak_memory_bytes"].get<int64_t>(), alloc) << d;
    EXPECT_EQ(b["peak_reserved_bytes"].get<int64_t>(), reserved) << d;
    top = std::max(top, reserved);
  }
  EXPECT_EQ(four["peak_reserved_bytes"].get<int64_t>(), top);
}

TEST(ReservedMemory, CpuDevicesHaveNoCachingAllocator) {
  const json j = simulate_json_of(gpt_plan(4, "cpu"));
  ASSERT_TRUE(j.contains("devices"));
  for (const json& d : j["devices"])
    EXPECT_EQ(d["peak_reserved_bytes"].get<int64_t>(), d["peak_memory_bytes"].get<int64_t>());
}

}  // namespace
}  // namespace stretto::sim
