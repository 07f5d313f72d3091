#pragma once
// Devices whose memory effects come in the same sequence reserve the same bytes (the reserved
// replay is a function of the static memory and of the sequence of (category, bytes) effects,
// nothing else): session.cpp replays one device of each group of equal sequences and copies
// its bytes to the others (data-parallel replicas usually form such groups).
#include <cstdint>
#include <unordered_map>
#include <vector>

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

}  // namespace stretto::sim
