#pragma once
// Records grouped by device in time order (the memory replay's effects, reserved_peaks): an LSD radix sort on
// an unsigned key, 12 bits a round, then a stable scatter by group. Every step is stable, so
// records with the same group and key keep the order they were listed in.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace stretto::sim {

/// Sorts items[0, n) by (group(item), key(item), listed order); `other` has room for n items
/// (its contents are lost). group_begin[g] is where group g starts once sorted (the counts'
/// prefix sums), one entry per group at least.
template <class T, class KeyFn, class GroupFn>
void radix_sort_grouped(std::unique_ptr<T[]>& items, std::unique_ptr<T[]>& other, size_t n,
                        std::span<const uint32_t> group_begin, KeyFn key, GroupFn group) {
  if (n == 0) return;
  uint64_t hi = 0;
  for (size_t i = 0; i < n; ++i) hi = std::max<uint64_t>(hi, key(items[i]));
  const int bits = std::bit_width(hi);
  constexpr int kDigit = 12;  // three rounds up to 68 s of nanoseconds
  std::vector<uint32_t> count(size_t{1} << kDigit);
  for (int shift = 0; shift < bits; shift += kDigit) {
    auto digit = [&](const T& c) {
      return (static_cast<uint64_t>(key(c)) >> shift) & ((uint64_t{1} << kDigit) - 1);
    };
    std::fill(count.begin(), count.end(), 0);
    for (size_t i = 0; i < n; ++i) ++count[digit(items[i])];
    uint32_t sum = 0;
    for (uint32_t& k : count) sum += std::exchange(k, sum);
    for (size_t i = 0; i < n; ++i) other[count[digit(items[i])]++] = items[i];
    items.swap(other);
  }
  std::vector<uint32_t> fill(group_begin.begin(), group_begin.end());
  for (size_t i = 0; i < n; ++i) other[fill[group(items[i])]++] = items[i];
  items.swap(other);
}

}  // namespace stretto::sim
