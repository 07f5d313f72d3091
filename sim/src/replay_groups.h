#pragma once
// Devices whose memory effects come in the same sequence reserve the same bytes (the reserved
// replay is a function of the static memory and of the sequence of (category, bytes) effects,
// nothing else): session.cpp replays one device of each group of equal sequences and copies
// its bytes to the others (data-parallel replicas usually form such groups).
#include <cstdint>
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "fork_join.h"

namespace stretto::sim {

/// One step of a 64-bit hash of a sequence of values (a multiply-xorshift mix).
inline uint64_t hash_step(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

/// For each of `items` (ascending), the first of `items` (the lowest) whose sequence equals
/// its own: itself when none before it does. hash_of(i) is a hash of i's sequence (equal
/// sequences, equal hashes); same(i, j) compares two sequences exactly, so that items whose
/// hashes collide are told apart. Depends only on the items' sequences and order.
template <class HashOf, class Same>
std::vector<uint32_t> first_equal(const std::vector<uint32_t>& items, HashOf&& hash_of,
                                  Same&& same) {
  std::vector<uint32_t> first(items.size());
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_hash;  // hash -> firsts, in order
  for (size_t k = 0; k < items.size(); ++k) {
    const uint32_t i = items[k];
    std::vector<uint32_t>& firsts = by_hash[hash_of(i)];
    first[k] = i;
    for (const uint32_t f : firsts)
      if (same(i, f)) {
        first[k] = f;
        break;
      }
    if (first[k] == i) firsts.push_back(i);
  }
  return first;
}

/// first_equal with the exact comparisons on up to `threads` threads: each item's candidate is
/// the first item with its hash (decided on this thread), then every item is compared with its
/// candidate on the threads (contiguous ranges of items of about equal weight(i)). When all
/// compare equal, the candidates are first_equal's answer (an earlier equal item would have
/// the same hash, and so be the candidate); when a hash collided, first_equal's is computed
/// here. The same answer for any thread count.
template <class HashOf, class Same, class Weight>
std::vector<uint32_t> first_equal_on_threads(const std::vector<uint32_t>& items,
                                             HashOf&& hash_of, Same&& same, Weight&& weight,
                                             int threads) {
  std::vector<uint32_t> first(items.size());
  std::unordered_map<uint64_t, uint32_t> by_hash;  // hash -> its first item
  for (size_t k = 0; k < items.size(); ++k)
    first[k] = by_hash.try_emplace(hash_of(items[k]), items[k]).first->second;
  std::vector<uint32_t> work(items.size() + 1, 0);
  for (size_t k = 0; k < items.size(); ++k)
    work[k + 1] = work[k] + (first[k] == items[k] ? 0 : weight(items[k]) + 1);
  const std::vector<uint32_t> ranges =
      device_ranges(work, static_cast<uint32_t>(std::max(threads, 1)));
  std::vector<char> equal(items.size(), 1);
  fork_join(ranges.size() - 1, [&](size_t j) {
    for (uint32_t k = ranges[j]; k < ranges[j + 1]; ++k)
      if (first[k] != items[k]) equal[k] = same(items[k], first[k]);
  });
  if (std::find(equal.begin(), equal.end(), 0) != equal.end())
    return first_equal(items, hash_of, same);
  return first;
}

}  // namespace stretto::sim
