// The CUDA caching allocator's reserved memory (sim/caching_allocator.h): PyTorch's rounding,
// pools, segment sizes, best fit, splitting and coalescing worked by hand, and the reserved
// bytes `simulate` reports next to the allocated peak.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../../bench/plans.h"
#include "same_result.h"
#include "stretto/sim/caching_allocator.h"
#include "stretto/sim/metrics_json.h"
#include "stretto/sim/session.h"
#include "replay_groups.h"  // (sim/src)
#include "replay_order.h"   // (sim/src)

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

// The allocator's invariants hold in every build (STRETTO_ASSERT, not assert, which release
// builds compile out): a block freed twice, a block split when free and an empty allocation
// stop the program with the invariant named instead of corrupting the pools.
TEST(CachingAllocatorDeathTest, MisuseStopsWithTheInvariantNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        CachingAllocator a;
        const uint32_t x = a.malloc(MiB);
        a.free(x);
        a.free(x);
      },
      "a block is freed once");
  EXPECT_DEATH(
      {
        CachingAllocator a;
        const uint32_t x = a.malloc(12 * MiB);
        a.free(x);
        a.split_in_use(x, 4 * MiB);
      },
      "only a block in use is split");
  EXPECT_DEATH(
      {
        CachingAllocator a;
        a.malloc(0);
      },
      "at least one byte");
}

TEST(BestFitPool, TakesWhatASetOfSizeHandlePairsWould) {
  // Random inserts, erases and best-fit takes against std::set<(size, handle)> and its
  // lower_bound({size, 0}): the same handle every time. Sizes from a small set, so that many
  // handles share a size; handles mostly new and highest (a block split off), sometimes an
  // old one back (a freed block merged with its neighbours), in any order.
  const int64_t sizes[] = {512, 1024, 4096, MiB, 2 * MiB, 3 * MiB, 20 * MiB};
  int takes = 0, ties = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    BestFitPool pool;
    std::set<std::pair<int64_t, uint32_t>> ref;
    std::vector<std::pair<int64_t, uint32_t>> out;  // taken or erased, may come back
    uint32_t next = 0;
    if (seed % 4 == 0) {  // a cleared pool starts afresh
      pool.insert(512, 7);
      pool.clear();
    }
    for (int step = 0; step < 3000; ++step) {
      const uint64_t r = rng() % 100;
      if (r < 40 || ref.empty()) {
        std::pair<int64_t, uint32_t> e;
        if (!out.empty() && rng() % 3 == 0) {
          const size_t i = rng() % out.size();
          e = out[i];
          out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          e = {sizes[rng() % std::size(sizes)] + (rng() % 5 == 0 ? 512 : 0), next++};
        }
        pool.insert(e.first, e.second);
        ref.insert(e);
      } else if (r < 55) {
        auto it = ref.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % ref.size()));
        pool.erase(it->first, it->second);
        out.push_back(*it);
        ref.erase(it);
      } else {
        const int64_t want = sizes[rng() % std::size(sizes)] - (rng() % 2 == 0 ? 0 : 256);
        const auto it = ref.lower_bound({want, 0});
        const uint32_t got = pool.take(want);
        if (it == ref.end()) {
          ASSERT_EQ(got, BestFitPool::kNone) << "seed " << seed << " step " << step;
          continue;
        }
        ASSERT_EQ(got, it->second) << "seed " << seed << " step " << step;
        ties += std::next(it) != ref.end() && std::next(it)->first == it->first;
        out.push_back(*it);
        ref.erase(it);
        ++takes;
      }
      ASSERT_EQ(pool.size(), ref.size());
    }
  }
  EXPECT_GT(takes, 15000) << ties;
  EXPECT_GT(ties, 3000);  // a take chose among several handles of one size
}

TEST(CachingAllocator, ReusesTheLowestHandleAmongEqualFits) {
  // One 20 MiB segment cut into five 4 MiB blocks (handles 0 to 4, in address order); the
  // fourth and then the second are freed (not neighbours: nothing merges), so two free blocks
  // fit the next 4 MiB exactly. PyTorch's pool is ordered by (size, address): the lower one
  // is taken first, whatever order they were freed in.
  CachingAllocator a;
  std::vector<uint32_t> b;
  for (int i = 0; i < 5; ++i) b.push_back(a.malloc(4 * MiB));
  EXPECT_EQ(a.reserved(), 20 * MiB);
  for (int i = 1; i < 5; ++i) EXPECT_GT(b[i], b[i - 1]);
  a.free(b[3]);
  a.free(b[1]);
  EXPECT_EQ(a.malloc(4 * MiB), b[1]);
  EXPECT_EQ(a.malloc(4 * MiB), b[3]);
  EXPECT_EQ(a.reserved(), 20 * MiB);
}

// The straightforward model the replay must equal: the allocator's pools as plain sets, each
// category's live blocks as a vector searched front to back and erased from. Kept apart from
// sim/ on purpose: it is the reference AllocationReplay and CachingAllocator are checked against.
class ReferenceReplay {
 public:
  void allocate_static(int64_t bytes) { malloc(bytes); }
  void allocate(uint8_t cat, int64_t bytes) {
    if (cat >= live_.size()) live_.resize(cat + size_t{1});
    live_[cat].push_back({malloc(bytes), bytes});
  }
  void release(uint8_t cat, int64_t bytes) {
    if (cat >= live_.size()) return;
    std::vector<Live>& l = live_[cat];
    int64_t left = bytes;
    while (left > 0 && !l.empty()) {
      auto exact = std::find_if(l.begin(), l.end(), [&](const Live& x) { return x.bytes == left; });
      if (exact != l.end()) {
        free(exact->block);
        l.erase(exact);
        break;
      }
      Live& old = l.front();
      if (old.bytes <= left) {
        left -= old.bytes;
        free(old.block);
        l.erase(l.begin());
      } else {
        const int64_t first = CachingAllocator::round_size(left);
        if (first < blocks_[old.block].size) {
          const uint32_t rest = split(old.block, first, true);
          free(old.block);
          old.block = rest;
        }
        old.bytes -= left;
        left = 0;
      }
    }
  }
  int64_t reserved() const { return reserved_; }
  int64_t allocated() const { return allocated_; }

 private:
  struct Live {
    uint32_t block;
    int64_t bytes;
  };
  struct Block {
    int64_t size = 0;
    uint32_t prev = UINT32_MAX, next = UINT32_MAX;
    bool small = false, used = false;
  };
  using Pool = std::set<std::pair<int64_t, uint32_t>>;
  uint32_t split(uint32_t id, int64_t size, bool used) {
    Block r;
    r.size = blocks_[id].size - size;
    r.small = blocks_[id].small;
    r.used = used;
    r.prev = id;
    r.next = blocks_[id].next;
    blocks_.push_back(r);
    const auto rid = static_cast<uint32_t>(blocks_.size() - 1);
    if (r.next != UINT32_MAX) blocks_[r.next].prev = rid;
    blocks_[id].next = rid;
    blocks_[id].size = size;
    return rid;
  }
  uint32_t malloc(int64_t bytes) {
    const int64_t size = CachingAllocator::round_size(bytes);
    const bool small = size <= kSmallSize;
    Pool& p = small ? small_ : large_;
    uint32_t id;
    if (auto it = p.lower_bound({size, 0}); it != p.end()) {
      id = it->second;
      p.erase(it);
    } else {
      Block b;
      b.size = CachingAllocator::segment_size(size);
      b.small = small;
      reserved_ += b.size;
      blocks_.push_back(b);
      id = static_cast<uint32_t>(blocks_.size() - 1);
    }
    const int64_t rest = blocks_[id].size - size;
    if (small ? rest >= kMinBlockSize : rest > kSmallSize) p.insert({rest, split(id, size, false)});
    blocks_[id].used = true;
    allocated_ += blocks_[id].size;
    return id;
  }
  void free(uint32_t id) {
    blocks_[id].used = false;
    allocated_ -= blocks_[id].size;
    Pool& p = blocks_[id].small ? small_ : large_;
    auto absorb = [&](uint32_t left, uint32_t right) {
      blocks_[left].size += blocks_[right].size;
      blocks_[left].next = blocks_[right].next;
      if (blocks_[right].next != UINT32_MAX) blocks_[blocks_[right].next].prev = left;
    };
    if (const uint32_t prev = blocks_[id].prev; prev != UINT32_MAX && !blocks_[prev].used) {
      p.erase({blocks_[prev].size, prev});
      absorb(prev, id);
      id = prev;
    }
    if (const uint32_t next = blocks_[id].next; next != UINT32_MAX && !blocks_[next].used) {
      p.erase({blocks_[next].size, next});
      absorb(id, next);
    }
    p.insert({blocks_[id].size, id});
  }
  std::vector<Block> blocks_;
  Pool small_, large_;
  int64_t reserved_ = 0, allocated_ = 0;
  std::vector<std::vector<Live>> live_;
};

TEST(AllocationReplay, EqualsTheReferenceOnRandomSequences) {
  // Random allocations and frees in three categories: sizes from a small set (so exact matches
  // are common, in both pools and across the 1 MiB and 10 MiB bounds) and arbitrary ones;
  // frees of a live block's size (the exact match, often not the oldest), of the oldest block
  // and another one's size, of any amount up to what lives (several blocks, splitting the
  // last), and of more than lives. After every step the reserved and allocated bytes equal
  // the reference's.
  const int64_t sizes[] = {100,     512,      700 << 10, MiB,      MiB + 1,           3 * MiB,
                           8 * MiB, 10 * MiB, 12 * MiB,  25 * MiB, 19 * MiB + MiB / 2};
  int checked = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    AllocationReplay fast;
    ReferenceReplay ref;
    if (seed % 3 == 0) fast.clear();  // a reused replay starts afresh
    fast.allocate_static(5 * MiB + 3);
    ref.allocate_static(5 * MiB + 3);
    std::vector<std::vector<int64_t>> live(3);  // what each category holds, as allocated
    for (int step = 0; step < 2000; ++step) {
      const auto cat = static_cast<uint8_t>(rng() % 3);
      std::vector<int64_t>& l = live[cat];
      const uint64_t r = rng() % 100;
      if (l.empty() || r < 45) {
        const int64_t b = rng() % 4 == 0 ? 1 + static_cast<int64_t>(rng() % (30 * MiB))
                                         : sizes[rng() % std::size(sizes)];
        fast.allocate(cat, b);
        ref.allocate(cat, b);
        l.push_back(b);
        continue;
      }
      int64_t held = 0;
      for (const int64_t b : l) held += b;
      int64_t b;
      if (r < 70)
        b = l[rng() % l.size()];  // a live block's size
      else if (r < 80)  // cuts the oldest down to a common size, which a later free may match
        b = std::max<int64_t>(1, l.front() - sizes[rng() % std::size(sizes)]);
      else if (r < 88)  // the oldest and then, exactly, another block (not the next oldest)
        b = l.front() + l[rng() % l.size()];
      else if (r < 95)
        b = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(held));
      else
        b = held + 1 + static_cast<int64_t>(rng() % MiB);
      fast.release(cat, b);
      ref.release(cat, b);
      // The sizes the category now holds (the replay's rule on sizes alone).
      for (int64_t left = b; left > 0 && !l.empty();) {
        if (auto it = std::find(l.begin(), l.end(), left); it != l.end()) {
          l.erase(it);
          break;
        }
        const int64_t cut = std::min(left, l.front());
        left -= cut;
        if ((l.front() -= cut) == 0) l.erase(l.begin());
      }
      ASSERT_EQ(fast.reserved(), ref.reserved()) << "seed " << seed << " step " << step;
      ASSERT_EQ(fast.allocated(), ref.allocated()) << "seed " << seed << " step " << step;
      ++checked;
    }
    EXPECT_GT(fast.reserved(), 0);
  }
  EXPECT_GT(checked, 30000);
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

// SimOptions::threads splits the devices' replay between threads, each device's reserved bytes
// into its own slot: every field of the Result is that of one thread, whatever the count (more
// threads than devices included), folded or not, at op or pass granularity; and every replayed
// device reserves at least its allocated peak (so that a replay into the wrong slot, which
// every count would share, fails too).
TEST(ReservedMemory, TheSameResultOnAnyNumberOfThreads) {
  EXPECT_EQ(SimOptions{}.threads, 1);
  struct Case {
    const char* plan;
    bool fold;
    Granularity granularity;
  };
  for (const Case& c : {Case{"gpt_pp4_dp2_1f1b.json", false, Granularity::kOp},
                        Case{"gpt_pp4_dp2_1f1b.json", true, Granularity::kOp},
                        Case{"megatron_gpt13b_tp8_pp2_dp2.json", false, Granularity::kPass},
                        Case{"piper_qwen3_moe_pp2_dp2_ep2.json", false, Granularity::kOp},
                        Case{"layout_llama7b_pp4_dp4_interleaved.json", true, Granularity::kPass}}) {
    SCOPED_TRACE(c.plan + std::string(c.fold ? " folded" : "") +
                 (c.granularity == Granularity::kPass ? " pass" : " op"));
    auto s = Session::open(std::string(STRETTO_EXAMPLES) + "/" + c.plan);
    ASSERT_TRUE(s) << s.error().front().message;
    SimOptions opt;
    opt.fold_replicas = c.fold;
    opt.granularity = c.granularity;
    auto one = s->simulate(opt);
    ASSERT_TRUE(one);
    ASSERT_GE(one->devices.size(), 4u);
    ASSERT_EQ(one->folded, c.fold);
    for (const DeviceMetrics& m : one->devices) {
      EXPECT_GT(m.peak_memory, 0) << "device " << m.id;
      EXPECT_GE(m.peak_reserved, m.peak_memory) << "device " << m.id;
    }
    for (const int threads : {2, 3, static_cast<int>(one->devices.size()) + 5}) {
      SCOPED_TRACE(threads);
      opt.threads = threads;
      auto many = s->simulate(opt);
      ASSERT_TRUE(many);
      expect_same_result(*one, *many);
    }
  }
}

// simulate's reserved bytes equal a replay, written here, of each device's effects: every task
// with effects that ran, on each device among its participants (once), in task order, stably
// sorted by (time, kind: a free, an allocation, a free ending a task that took no time), after
// the static blocks (docs/semantics.md "Reserved memory"). On the DualPipeV reference at
// PP4 x DP2, 16 microbatches, folded and not, where the order of an instant's allocations
// changes the reserved bytes: the same replay with the tasks listed backwards differs there.
TEST(ReservedMemory, EqualsAReplayOfEachDevicesEffectsInTaskOrder) {
  auto src = plan::JsonSource::parse(bench::reference_plan(4, 2, 16).dump(), "ref.json");
  ASSERT_TRUE(src);
  auto parsed = plan::parse_plan(*src);
  ASSERT_TRUE(parsed);
  auto s = Session::from_plan(std::move(*parsed));
  ASSERT_TRUE(s) << s.error().front().message;
  for (const bool fold : {false, true}) {
    SCOPED_TRACE(fold ? "folded" : "every device");
    SimOptions opt;
    opt.fold_replicas = fold;
    auto r = s->simulate(opt);
    ASSERT_TRUE(r);
    const engine::Program& p = r->program;
    ASSERT_FALSE(p.effect_begin.empty());
    bool order_matters = false;
    for (const DeviceMetrics& m : r->devices) {
      if (m.folded) continue;
      const auto d = static_cast<uint32_t>(m.id);
      auto replay = [&](bool backwards) {
        struct Ev {
          uint64_t key;
          uint32_t effect;
        };
        std::vector<Ev> evs;
        for (size_t i = 0; i < p.tasks.size(); ++i) {
          const uint32_t t = static_cast<uint32_t>(backwards ? p.tasks.size() - 1 - i : i);
          const engine::Task& k = p.tasks[t];
          const engine::TaskTiming& tt = r->timing[t];
          bool on_d = false;
          for (uint32_t j = k.part_begin; j < k.part_begin + k.part_count; ++j)
            on_d |= p.participants[j].device == d;
          if (!on_d || tt.start < 0) continue;
          for (uint32_t e = p.effect_begin[k.node]; e < p.effect_begin[k.node + 1]; ++e) {
            const engine::CounterEffect& ce = p.effects[e];
            if (ce.delta == 0) continue;
            const int64_t at = ce.at_end ? tt.end : tt.start;
            const uint64_t kind = ce.delta > 0 ? 1 : (ce.at_end && tt.end == tt.start ? 2 : 0);
            evs.push_back({static_cast<uint64_t>(at) << 2 | kind, e});
          }
        }
        std::stable_sort(evs.begin(), evs.end(),
                         [](const Ev& a, const Ev& b) { return a.key < b.key; });
        AllocationReplay a;
        const compiler::StaticMemory& sm = s->compiled().static_mem[d];
        for (const int64_t b : {sm.params, sm.grads, sm.optimizer})
          if (b > 0) a.allocate_static(b);
        for (const Ev& ev : evs) {
          const engine::CounterEffect& ce = p.effects[ev.effect];
          if (ce.delta > 0)
            a.allocate(ce.counter, ce.delta);
          else
            a.release(ce.counter, -ce.delta);
        }
        return a.reserved();
      };
      const int64_t reserved = replay(false);
      EXPECT_EQ(m.peak_reserved, reserved) << "device " << d;
      order_matters |= replay(true) != reserved;
    }
    EXPECT_TRUE(order_matters);
  }
}

// The replay's order of a device's effects: sort_by_key is the stable sort by key (short lists
// by comparison, long ones by radix sort), and in_key_order accepts a kept order exactly when
// it is what sorting by the new keys gives. Random keys with many ties, re-keyed with a few
// changes (a key moved, two keys made equal, two tied keys in reversed listed order).
TEST(ReservedMemory, AKeptOrderIsAcceptedExactlyWhenSortingGivesIt) {
  std::mt19937_64 rng(7);
  uint32_t accepted = 0, refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const uint32_t n = trial % 4 == 0 ? 2048 + static_cast<uint32_t>(rng() % 3000)
                                      : 1 + static_cast<uint32_t>(rng() % 300);
    const uint32_t b = static_cast<uint32_t>(rng() % 1000);  // the device's first index
    const uint64_t range = 1 + rng() % (trial % 2 ? 8 : 1'000'000'000'000ull);
    std::vector<uint64_t> keys(n);
    for (uint64_t& k : keys) k = rng() % range;
    std::vector<uint32_t> order(n), want(n);
    sort_by_key(keys.data(), b, n, order.data());
    for (uint32_t i = 0; i < n; ++i) want[i] = b + i;
    std::stable_sort(want.begin(), want.end(),
                     [&](uint32_t x, uint32_t y) { return keys[x - b] < keys[y - b]; });
    ASSERT_EQ(order, want) << "trial " << trial;
    auto key_of = [&](uint32_t i) { return keys[i - b]; };
    ASSERT_TRUE(in_key_order(order.data(), n, key_of)) << "trial " << trial;
    // New keys: each trial changes one or two of them, or none.
    const uint32_t x = static_cast<uint32_t>(rng() % n), y = static_cast<uint32_t>(rng() % n);
    switch (trial % 3) {
      case 0: keys[x] = rng() % range; break;
      case 1: keys[x] = keys[y]; break;
      default: break;
    }
    std::vector<uint32_t> resorted(n);
    sort_by_key(keys.data(), b, n, resorted.data());
    const bool same = resorted == order;
    EXPECT_EQ(in_key_order(order.data(), n, key_of), same) << "trial " << trial;
    (same ? accepted : refused) += 1;
    // Two adjacent entries of equal key swapped: listed order broken, refused.
    for (uint32_t k = 0; k + 1 < n; ++k)
      if (keys[resorted[k] - b] == keys[resorted[k + 1] - b]) {
        std::swap(resorted[k], resorted[k + 1]);
        EXPECT_FALSE(in_key_order(resorted.data(), n, key_of)) << "trial " << trial;
        break;
      }
  }
  EXPECT_GT(accepted, 100u);
  EXPECT_GT(refused, 100u);
}

// Devices share a replay with the first device whose sequence equals theirs: first_equal gives
// each item the lowest item with an equal sequence, whatever the hash, a constant one (every
// pair collides: only the exact comparison tells them apart) included. Random sequences over
// a small alphabet, many equal, against a quadratic search.
TEST(ReservedMemory, EqualSequencesShareTheFirstOnesReplay) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 40;
    std::vector<std::vector<int>> seq(n);
    for (auto& q : seq) {
      q.resize(rng() % 4);
      for (int& v : q) v = static_cast<int>(rng() % 3);
    }
    std::vector<uint32_t> items;  // ascending, some left out
    for (uint32_t i = 0; i < n; ++i)
      if (rng() % 4 != 0) items.push_back(i);
    std::vector<uint32_t> want(items.size());
    for (size_t k = 0; k < items.size(); ++k)
      for (size_t m = 0; m <= k; ++m)
        if (seq[items[m]] == seq[items[k]]) {
          want[k] = items[m];
          break;
        }
    auto same = [&](uint32_t a, uint32_t b) { return seq[a] == seq[b]; };
    auto real_hash = [&](uint32_t i) {
      uint64_t h = hash_step(0, seq[i].size());
      for (const int v : seq[i]) h = hash_step(h, static_cast<uint64_t>(v));
      return h;
    };
    EXPECT_EQ(first_equal(items, real_hash, same), want) << "trial " << trial;
    EXPECT_EQ(first_equal(items, [](uint32_t) { return uint64_t{0}; }, same), want)
        << "trial " << trial;
    // the same with the comparisons on threads (a colliding hash: computed again serially)
    auto weight = [&](uint32_t i) { return static_cast<uint32_t>(seq[i].size()); };
    for (const int threads : {1, 2, 3}) {
      EXPECT_EQ(first_equal_on_threads(items, real_hash, same, weight, threads), want)
          << "trial " << trial << " threads " << threads;
      EXPECT_EQ(first_equal_on_threads(items, [](uint32_t) { return uint64_t{0}; }, same, weight,
                                       threads),
                want)
          << "trial " << trial << " threads " << threads;
      EXPECT_EQ(first_equal_on_threads(items, [&](uint32_t i) { return real_hash(i) % 3; }, same,
                                       weight, threads),
                want)
          << "trial " << trial << " threads " << threads;
    }
  }
}

// Devices whose effects are listed alike share one sort: same_listing says two listings give
// the same replayed sequence, and must not say so of listings whose (category, bytes) agree
// while their times differ (the sort would order them differently). Random listings over a
// small alphabet (many pairs alike in all but the keys), every pair against sorting both.
TEST(ReservedMemory, EqualListingsShareOneSort) {
  std::mt19937_64 rng(29);
  uint32_t alike = 0, same_but_keys = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 2 + rng() % 6;
    std::vector<std::vector<ListedEffect>> lists(n);
    const uint32_t len = 1 + static_cast<uint32_t>(rng() % 5);
    for (auto& l : lists) {
      l.resize(rng() % 4 == 0 ? len + 1 : len);
      for (ListedEffect& e : l)
        e = {rng() % 3, static_cast<uint8_t>(rng() % 2), rng() % 2 ? 64 : -64};
    }
    auto sequence = [&](const std::vector<ListedEffect>& l) {
      std::vector<uint64_t> keys;
      for (const ListedEffect& e : l) keys.push_back(e.key);
      std::vector<uint32_t> order(l.size());
      sort_by_key(keys.data(), 0, static_cast<uint32_t>(l.size()), order.data());
      std::vector<std::pair<int, int64_t>> seq;
      for (const uint32_t i : order) seq.push_back({l[i].counter, l[i].delta});
      return seq;
    };
    for (const auto& a : lists)
      for (const auto& b : lists) {
        auto at_a = [&](uint32_t i) { return a[i]; };
        auto at_b = [&](uint32_t i) { return b[i]; };
        const auto na = static_cast<uint32_t>(a.size()), nb = static_cast<uint32_t>(b.size());
        const bool same = same_listing(na, at_a, nb, at_b);
        EXPECT_EQ(same, a == b) << "trial " << trial;
        if (!same) continue;
        ++alike;
        EXPECT_EQ(sequence(a), sequence(b)) << "trial " << trial;
        EXPECT_EQ(listing_hash(na, 7, at_a), listing_hash(nb, 7, at_b)) << "trial " << trial;
      }
    for (const auto& a : lists)
      for (const auto& b : lists) {
        bool differ_in_keys_only = a.size() == b.size() && a != b;
        for (size_t i = 0; differ_in_keys_only && i < a.size(); ++i)
          differ_in_keys_only = a[i].counter == b[i].counter && a[i].delta == b[i].delta;
        same_but_keys += differ_in_keys_only && sequence(a) != sequence(b);
      }
  }
  // listings alike but for their keys, whose sequences differ, came up (so that comparing
  // (category, bytes) alone fails the test)
  EXPECT_GT(same_but_keys, 0u);
  EXPECT_GT(alike, 0u);
}

// A Resimulator keeps each device's order of memory effects and its reserved bytes from its
// last result, and replays only the devices whose effects come in another order: over chains
// of cost-model edits every result equals a fresh simulate, on 1, 2 and 3 threads, folded and
// at pass granularity; the edits keep some devices' orders and move others' (both paths run),
// and some device's reserved bytes change from one edit to the next (so that keeping every
// device's bytes, or replaying a device in its old order, fails). Devices whose effects come
// in equal sequences share one allocator replay (some do: data-parallel replicas), so that
// sharing between devices whose sequences differ fails too.
TEST(ReservedMemory, AResimulatorReplaysOnlyTheDevicesWhoseEffectsMoved) {
  struct Case {
    const char* plan;
    bool fold;
    Granularity granularity;
  };
  const std::vector<json> edits = {
      {{"nccl_intra_GBps", 20}},      {{"gemm_efficiency", 0.3}},
      {{"dispatch_us", 30}},          {{"nccl_intra_GBps", 400}, {"gemm_efficiency", 0.8}},
      {{"comm_sm_share", 0.4}},       {{"attention_efficiency", 0.2}},
  };
  uint32_t kept = 0, replayed = 0, changed = 0, shared = 0, sorted = 0;
  for (const Case& c : {Case{"gpt_pp4_dp2_1f1b.json", false, Granularity::kOp},
                        Case{"megatron_gpt13b_tp8_pp2_dp2.json", false, Granularity::kOp},
                        Case{"piper_qwen3_moe_pp2_dp2_ep2.json", false, Granularity::kOp},
                        Case{"layout_llama7b_pp4_dp4_interleaved.json", true, Granularity::kPass}}) {
    for (const int threads : {1, 2, 3}) {
      SCOPED_TRACE(c.plan + std::string(c.fold ? " folded " : " ") + std::to_string(threads));
      auto s = Session::open(std::string(STRETTO_EXAMPLES) + "/" + c.plan);
      ASSERT_TRUE(s) << s.error().front().message;
      SimOptions opt;
      opt.fold_replicas = c.fold;
      opt.granularity = c.granularity;
      opt.threads = threads;
      Resimulator resim;
      auto prev = resim.simulate(s->compiled(), s->cost_model(), opt);
      ASSERT_TRUE(prev);
      uint32_t simulated = 0;
      for (const DeviceMetrics& m : prev->devices) simulated += !m.folded;
      EXPECT_EQ(resim.replayed_devices(), simulated);
      plan::CostModelSpec spec = s->plan().costmodel;
      for (const json& e : edits) {
        SCOPED_TRACE(e.dump());
        for (const auto& [k, v] : e.items()) spec.options[k] = v;
        ASSERT_TRUE(s->set_costmodel(spec));
        auto next = resim.simulate(s->compiled(), s->cost_model(), opt, &*prev);
        ASSERT_TRUE(next);
        expect_same_result(*s->simulate(opt), *next);
        EXPECT_LE(resim.replayed_devices(), simulated);
        EXPECT_LE(resim.allocator_replays(), resim.sorted_devices());
        EXPECT_LE(resim.sorted_devices(), resim.replayed_devices());
        shared += resim.replayed_devices() - resim.allocator_replays();
        sorted += resim.sorted_devices();
        kept += simulated - resim.replayed_devices();
        replayed += resim.replayed_devices();
        for (size_t d = 0; d < next->devices.size(); ++d)
          changed += next->devices[d].peak_reserved != prev->devices[d].peak_reserved;
        prev = std::move(next);
      }
    }
  }
  std::printf("kept %u replayed %u (%u sorted, %u sharing a replay) changed %u\n", kept,
              replayed, sorted, shared, changed);
  EXPECT_GT(kept, 0u);
  EXPECT_GT(shared, 0u);
  EXPECT_GT(replayed, 0u);
  EXPECT_GT(changed, 0u);
}

// Data-parallel replicas (the GUI's 64-device bench plan, scaled down: PP2 x DP4 MoE, ZeRO-1)
// come in equal sequences and share one allocator replay per stage after a GEMM-efficiency
// edit that reorders every device's effects; their reserved bytes change with the edit, and
// every result equals a fresh simulate on 1, 2 and 3 threads (so that a replica left with
// its old bytes, or given another stage's, fails).
TEST(ReservedMemory, ReplicasShareOneReplayAndTakeItsBytes) {
  for (const int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    auto s = Session::from_text(bench::moe_plan(2, 4, 2, 8, true).dump(), "moe.json");
    ASSERT_TRUE(s) << s.error().front().message;
    SimOptions opt;
    opt.threads = threads;
    Resimulator resim;
    auto prev = resim.simulate(s->compiled(), s->cost_model(), opt);
    ASSERT_TRUE(prev);
    ASSERT_EQ(prev->devices.size(), 8u);
    uint32_t replayed = 0, replica_changed = 0;
    plan::CostModelSpec spec = s->plan().costmodel;
    for (const double gemm : {0.9, 0.3, 0.9, 0.711}) {
      SCOPED_TRACE(gemm);
      spec.options["gemm_efficiency"] = gemm;
      ASSERT_TRUE(s->set_costmodel(spec));
      auto next = resim.simulate(s->compiled(), s->cost_model(), opt, &*prev);
      ASSERT_TRUE(next);
      expect_same_result(*s->simulate(opt), *next);
      // the replayed devices are whole stages (4 replicas each), one sort and one replay per
      // stage (the replicas' effects are listed with equal times)
      EXPECT_EQ(resim.replayed_devices(), 4 * resim.allocator_replays());
      EXPECT_EQ(resim.sorted_devices(), resim.allocator_replays());
      replayed += resim.replayed_devices();
      // devices 1-3 and 5-7 are replicas of 0 and 4
      for (const uint32_t d : {1u, 2u, 3u, 5u, 6u, 7u})
        replica_changed += next->devices[d].peak_reserved != prev->devices[d].peak_reserved;
      prev = std::move(next);
    }
    EXPECT_GE(replayed, 24u);
    EXPECT_GE(replica_changed, 12u);
  }
}

// A device's reserved bytes depend on its static memory too: a Resimulator given a plan with
// another optimizer (adam with master weights, then without, then with again; the same
// program structure, so the program is re-costed and the engine re-runs its preparation)
// replays every device although its effects keep their order, and equals a fresh simulate.
TEST(ReservedMemory, AResimulatorReplaysADeviceWhoseStaticMemoryChanged) {
  json plan = gpt_plan(4, "h100-sxm");
  auto adam = Session::from_text(plan.dump(), "alloc.json");
  plan["optimizer"]["master_weights"] = false;
  auto lean = Session::from_text(plan.dump(), "alloc.json");
  ASSERT_TRUE(adam && lean);
  ASSERT_NE(adam->compiled().static_mem[0].optimizer, lean->compiled().static_mem[0].optimizer);
  Resimulator resim;
  auto first = resim.simulate(adam->compiled(), adam->cost_model(), {});
  ASSERT_TRUE(first);
  auto next = resim.simulate(lean->compiled(), lean->cost_model(), {}, &*first);
  ASSERT_TRUE(next);
  EXPECT_TRUE(resim.reused());
  EXPECT_EQ(resim.replayed_devices(), 2u);
  auto fresh = lean->simulate();
  ASSERT_TRUE(fresh);
  expect_same_result(*fresh, *next);
  EXPECT_NE(fresh->devices[0].peak_reserved, first->devices[0].peak_reserved);
  // and back
  auto back = resim.simulate(adam->compiled(), adam->cost_model(), {}, &*next);
  ASSERT_TRUE(back);
  EXPECT_EQ(resim.replayed_devices(), 2u);
  expect_same_result(*first, *back);
}

// What a Resimulator keeps is for its last result only: after a run of one plan, a re-costed
// result of another plan (the same devices; more layers, so other tasks and static memory)
// that the Resimulator did not give lists its effects afresh, and equals a fresh simulate.
TEST(ReservedMemory, AResimulatorKeepsTheOrderOnlyForItsLastResult) {
  json deeper = gpt_plan(4, "h100-sxm");
  deeper["model"]["layers"] = 6;
  auto four = Session::from_text(gpt_plan(4, "h100-sxm").dump(), "four.json");
  auto six = Session::from_text(deeper.dump(), "six.json");
  ASSERT_TRUE(four && six);
  Resimulator resim;
  ASSERT_TRUE(resim.simulate(four->compiled(), four->cost_model(), {}));
  auto plain = six->simulate();
  ASSERT_TRUE(plain);
  plan::CostModelSpec spec = six->plan().costmodel;
  spec.options["gemm_efficiency"] = 0.4;
  ASSERT_TRUE(six->set_costmodel(spec));
  auto next = resim.simulate(six->compiled(), six->cost_model(), {}, &*plain);
  ASSERT_TRUE(next);
  EXPECT_EQ(resim.replayed_devices(), 2u);
  expect_same_result(*six->simulate(), *next);
}

// A plan of `devices` H100s laid out by `layout` (1F1B), optimizer with or without clipping.
json layout_plan(int devices, const json& layout, bool grad_clip, const json& cluster_extra = {}) {
  json p = gpt_plan(4, "h100-sxm");
  p["cluster"]["devices_per_node"] = devices;
  for (const auto& [k, v] : cluster_extra.items()) p["cluster"][k] = v;
  p["schedule"]["layout"] = layout;
  p["model"]["pp_regions"] = layout.value("pp", 1);
  p["optimizer"]["grad_clip"] = grad_clip;
  return p;
}

// NCCL's buffers by hand (docs/semantics.md "Memory outside the allocator"): a ring
// communicator is 16 channels x (LL 512 KiB + LL128 4,915,200 B + Simple 4 MiB), a device
// received from point-to-point 16 x 4 MiB; the CUDA context 400 MiB on every GPU device.
TEST(OutsideAllocator, ContextAndNcclBuffersByHand) {
  constexpr int64_t kRing = 512 * 1024 + 4915200 + 4 * MiB;
  ASSERT_EQ(kRing, 9633792);
  struct Case {
    json plan;
    int64_t comms, peers;  // per device, every device alike
    const char* what;
  };
  const std::vector<Case> cases = {
      // one TP group
      {layout_plan(2, {{"tp", 2}}, false), 1, 0, "tp2"},
      // two stages: each receives from the other (activations, gradients), no collective
      {layout_plan(2, {{"pp", 2}}, false), 0, 1, "pp2"},
      // TP and DP groups, and the gradient-norm all-reduce over TP x PP (Megatron-Core's
      // model-parallel group); one pipeline neighbour
      {layout_plan(8, {{"tp", 2}, {"pp", 2}, {"dp", 2}}, true), 3, 1, "tp2 pp2 dp2, clipped"},
      // without pipeline stages the model-parallel group is the TP group: no third
      // communicator (the norm over every device gave one)
      {layout_plan(8, {{"tp", 2}, {"dp", 4}}, true), 2, 0, "tp2 dp4, clipped"},
      // with the distributed optimizer the norm spans every device
      {layout_plan(8, {{"tp", 2}, {"dp", 4}, {"zero", 1}}, true), 3, 0, "tp2 dp4 zero1, clipped"},
      // the same DP group reduces every bucket: still one communicator
      {layout_plan(4, {{"dp", 4}}, false), 1, 0, "dp4"},
  };
  for (const Case& c : cases) {
    const json j = simulate_json_of(c.plan);
    ASSERT_TRUE(j.contains("devices")) << c.what;
    int64_t top = 0;
    for (const json& d : j["devices"]) {
      const int64_t nccl = 16 * (c.comms * kRing + c.peers * 4 * MiB);
      EXPECT_EQ(d["nccl_buffer_bytes"].get<int64_t>(), nccl) << c.what << " device " << d["id"];
      EXPECT_EQ(d["cuda_context_bytes"].get<int64_t>(), 400 * MiB) << c.what;
      EXPECT_EQ(d["peak_device_bytes"].get<int64_t>(),
                d["peak_reserved_bytes"].get<int64_t>() + 400 * MiB + nccl)
          << c.what;
      top = std::max(top, d["peak_device_bytes"].get<int64_t>());
    }
    EXPECT_EQ(j["peak_device_bytes"].get<int64_t>(), top) << c.what;
  }
}

// The cluster keys override the preset's: 4 channels and a 1,000 MiB context.
TEST(OutsideAllocator, ClusterKeysOverrideThePreset) {
  const json j = simulate_json_of(
      layout_plan(2, {{"tp", 2}}, false, {{"nccl_channels", 4}, {"cuda_context_MiB", 1000}}));
  ASSERT_TRUE(j.contains("devices"));
  for (const json& d : j["devices"]) {
    EXPECT_EQ(d["nccl_buffer_bytes"].get<int64_t>(), 4 * int64_t{9633792});
    EXPECT_EQ(d["cuda_context_bytes"].get<int64_t>(), 1000 * MiB);
  }
}

// A CPU process (Gloo) has no CUDA context and no NCCL: its device total is its allocated peak.
TEST(OutsideAllocator, CpuDevicesHoldNone) {
  const json j = simulate_json_of(gpt_plan(4, "cpu"));
  ASSERT_TRUE(j.contains("devices"));
  for (const json& d : j["devices"]) {
    EXPECT_EQ(d["cuda_context_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(d["nccl_buffer_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(d["peak_device_bytes"].get<int64_t>(), d["peak_memory_bytes"].get<int64_t>());
  }
}

// Capacity is judged on the device total: with memory_GiB between the allocated peak and
// reserved + context + NCCL buffers, the plan is over capacity (the allocated peak fits).
TEST(OutsideAllocator, CapacityIsJudgedOnTheDeviceTotal) {
  const json probe = simulate_json_of(layout_plan(2, {{"pp", 2}}, false));
  ASSERT_TRUE(probe.contains("devices"));
  const int64_t alloc = probe["peak_memory_bytes"], total = probe["peak_device_bytes"];
  ASSERT_GT(total, alloc + 400 * MiB);
  const double between = static_cast<double>(alloc + total) / 2 / (1 << 30);
  const json j = simulate_json_of(layout_plan(2, {{"pp", 2}}, false, {{"memory_GiB", between}}));
  ASSERT_TRUE(j.contains("devices"));
  EXPECT_LT(static_cast<double>(j["peak_memory_bytes"].get<int64_t>()), between * (1 << 30));
  EXPECT_TRUE(j["over_capacity"].get<bool>());
  bool any = false;
  for (const json& d : j["devices"]) any = any || d["over_capacity"].get<bool>();
  EXPECT_TRUE(any);
  // and above the total it fits
  const double above = static_cast<double>(total + MiB) / (1 << 30);
  const json k = simulate_json_of(layout_plan(2, {{"pp", 2}}, false, {{"memory_GiB", above}}));
  ASSERT_TRUE(k.contains("devices"));
  EXPECT_FALSE(k["over_capacity"].get<bool>());
}

}  // namespace
}  // namespace stretto::sim
