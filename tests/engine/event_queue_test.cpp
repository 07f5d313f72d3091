// The engine's event queue pops in exact (time, key) order whatever the push pattern; its id
// lists (IdStack) keep their ids in order across growth.
#include "event_queue.h"
#include "pod_stack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace stretto::engine::detail {
namespace {

bool earlier(const Event& a, const Event& b) {
  return a.time < b.time || (a.time == b.time && a.key < b.key);
}

// Pops everything, pushing new events at or after the current time as it goes (as the engine
// does), and checks each pop against the minimum of a plain list of the pending events.
void check_random_schedule(uint32_t seed, SimTime spread) {
  std::mt19937_64 rng(seed);
  RadixEventQueue q;
  std::vector<Event> pending;
  uint64_t seq = 0;
  auto push = [&](SimTime t) {
    const Event e{t, seq++ << kKindBits, static_cast<uint32_t>(seq), 0};
    q.push(e);
    pending.push_back(e);
  };
  for (int i = 0; i < 200; ++i) push(static_cast<SimTime>(rng() % spread));
  size_t pops = 0;
  while (!q.empty()) {
    if (!q.has_now()) {
      const SimTime t = q.advance();
      ASSERT_GT(t, -1);
    }
    ASSERT_TRUE(q.has_now());
    const Event e = q.pop_now();
    const auto it = std::min_element(pending.begin(), pending.end(), earlier);
    ASSERT_EQ(e.time, it->time) << "pop " << pops;
    ASSERT_EQ(e.key, it->key) << "pop " << pops;
    ASSERT_EQ(q.now(), e.time);
    pending.erase(it);
    ++pops;
    // Follow-ups: often at the same instant (zero-delay), sometimes far ahead.
    if (pops < 2000) {
      const int n = static_cast<int>(rng() % 3);
      for (int k = 0; k < n; ++k) {
        const uint64_t r = rng() % 10;
        push(e.time + (r < 3 ? 0 : static_cast<SimTime>(rng() % (r < 8 ? 16 : spread))));
      }
    }
  }
  EXPECT_TRUE(pending.empty());
  EXPECT_EQ(q.size(), 0u);
}

TEST(EventQueue, PopsInTimeThenKeyOrder) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    check_random_schedule(seed, 8);          // many ties
    check_random_schedule(seed, 1000);       // some ties
    check_random_schedule(seed, 1ll << 50);  // far-apart times, high buckets
  }
}

TEST(EventQueue, ClearResetsTheTime) {
  RadixEventQueue q;
  q.push({100, 0, 1, 0});
  EXPECT_EQ(q.advance(), 100);
  q.clear();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.now(), 0);
  q.push({5, 0, 2, 0});
  q.push({3, 4, 3, 0});
  q.push({5, 8, 4, 0});
  EXPECT_FALSE(q.has_now());
  EXPECT_EQ(q.advance(), 3);
  EXPECT_EQ(q.pop_now().id, 3u);
  EXPECT_FALSE(q.has_now());
  EXPECT_EQ(q.advance(), 5);
  EXPECT_EQ(q.pop_now().id, 2u);
  EXPECT_EQ(q.pop_now().id, 4u);
  EXPECT_TRUE(q.empty());
}

TEST(IdStack, KeepsItsIdsInOrderAcrossGrowthAndClear) {
  // Against a std::vector doing the same random appends, pops, clears and assigns; 64 ids fit
  // before the first growth, and the lists reach hundreds of ids between clears.
  std::mt19937 rng(11);
  IdStack s;
  std::vector<uint32_t> want;
  size_t most = 0;
  for (int step = 0; step < 20000; ++step) {
    const unsigned op = rng() % 1000;
    if (op < 800 || op >= 955) {
      const uint32_t id = rng();
      s.push_back(id);
      want.push_back(id);
    } else if (op < 950) {
      if (!want.empty()) {
        ASSERT_EQ(s.back(), want.back());
        s.pop_back();
        want.pop_back();
      }
    } else if (op < 952) {
      s.clear();
      want.clear();
    } else {
      std::vector<uint32_t> from(rng() % 300);
      for (auto& x : from) x = rng();
      s.assign(from.begin(), from.end());
      want = from;
    }
    ASSERT_EQ(s.size(), want.size());
    ASSERT_EQ(s.empty(), want.empty());
    most = std::max(most, want.size());
  }
  ASSERT_GT(most, 256u);
  ASSERT_EQ(std::vector<uint32_t>(s.begin(), s.end()), want);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(s[i], want[i]);
}

}  // namespace
}  // namespace stretto::engine::detail
