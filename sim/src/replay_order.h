#pragma once
// The order in which the reserved-memory replay takes a device's memory effects (session.cpp):
// by key (time, kind), ties in the order they were listed. A kept order is checked against new
// keys instead of sorting again when it is still sorted.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>

#include "radix_sort.h"
#include "replay_groups.h"

namespace stretto::sim {

/// order[0, n) := the indices b .. b+n-1 sorted by (key, index), where keys[i - b] is i's key
/// (the stable sort by key of the listed order).
inline void sort_by_key(const uint64_t* keys, uint32_t b, uint32_t n, uint32_t* order) {
  // Short lists by comparison, long ones by the radix sort (whose rounds cost 4,096 counters
  // each, whatever the length).
  if (n < 2048) {
    for (uint32_t i = 0; i < n; ++i) order[i] = b + i;
    std::sort(order, order + n, [&](uint32_t x, uint32_t y) {
      return keys[x - b] < keys[y - b] || (keys[x - b] == keys[y - b] && x < y);
    });
    return;
  }
  struct Item {
    uint64_t key;
    uint32_t index;
  };
  std::unique_ptr<Item[]> items(new Item[n]), other(new Item[n]);  // written before read
  for (uint32_t i = 0; i < n; ++i) items[i] = {keys[i], b + i};
  const uint32_t one_group = 0;
  radix_sort_grouped(
      items, other, n, std::span<const uint32_t>(&one_group, 1),
      [](const Item& it) { return it.key; }, [](const Item&) { return 0u; });
  for (uint32_t i = 0; i < n; ++i) order[i] = items[i].index;
}

/// Whether order[0, n) is sorted by (key_of(index), index): then it is what sort_by_key would
/// give for these keys (that order is unique, indices being distinct). key_of is called in
/// order, and not after the first index out of order.
template <class KeyOf>
bool in_key_order(const uint32_t* order, uint32_t n, KeyOf&& key_of) {
  uint64_t last = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const uint64_t key = key_of(order[k]);
    if (k > 0 && (key < last || (key == last && order[k] < order[k - 1]))) return false;
    last = key;
  }
  return true;
}

/// A device's effects as listed (in task and effect order) before they are sorted: each one's
/// sort key and what the replay takes of it.
struct ListedEffect {
  uint64_t key = 0;  // (time, kind), as sort_by_key takes it
  uint8_t counter = 0;
  int64_t delta = 0;
  bool operator==(const ListedEffect&) const = default;
};

/// Two listings that are equal, key and (category, bytes) at every position, give the same
/// order (sort_by_key is a function of the keys) and so the same replayed sequence: one sort
/// serves both. listing_hash: equal listings, equal hashes (`seed` takes what else must be
/// equal, the static memory). at(i) gives the i-th listed effect.
template <class At>
uint64_t listing_hash(uint32_t n, uint64_t seed, At&& at) {
  uint64_t h = hash_step(seed, n);
  for (uint32_t i = 0; i < n; ++i) {
    const ListedEffect e = at(i);
    h = hash_step(hash_step(hash_step(h, e.key), e.counter), static_cast<uint64_t>(e.delta));
  }
  return h;
}
template <class AtA, class AtB>
bool same_listing(uint32_t n_a, AtA&& at_a, uint32_t n_b, AtB&& at_b) {
  if (n_a != n_b) return false;
  for (uint32_t i = 0; i < n_a; ++i)
    if (!(at_a(i) == at_b(i))) return false;
  return true;
}

}  // namespace stretto::sim
