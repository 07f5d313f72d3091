#pragma once
// The order in which the reserved-memory replay takes a device's memory effects (session.cpp):
// by key (time, kind), ties in the order they were listed. A kept order is checked against new
// keys instead of sorting again when it is still sorted.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>

#include "radix_sort.h"

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

}  // namespace stretto::sim
