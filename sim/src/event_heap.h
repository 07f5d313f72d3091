#pragma once
// The engine's event queue: a d-ary min-heap of small POD events ordered by (time, key).
//
// `key` is (sequence number << kKindBits | kind); sequence numbers are unique and increase with
// every push, so ties in time pop in insertion order and the order never depends on heap layout.
// No allocation per event: the backing vector keeps its capacity between runs.

#include <cstdint>
#include <vector>

#include "stretto/sim/program.h"

namespace stretto::sim::detail {

struct Event {
  SimTime time;
  uint64_t key;      // seq << kKindBits | kind
  uint32_t id;       // task or job id, by kind
  uint32_t version;  // job version for lazily invalidated completions
};
static_assert(sizeof(Event) <= 32, "events must stay small PODs");

inline constexpr unsigned kKindBits = 2;

/// (time, key) lexicographic, as one 128-bit comparison: no data-dependent branch (times are
/// never negative in the engine; the cast keeps the order for any non-negative time).
inline bool before(const Event& a, const Event& b) {
  __extension__ using U = unsigned __int128;
  const U x = static_cast<U>(static_cast<uint64_t>(a.time)) << 64 | a.key;
  const U y = static_cast<U>(static_cast<uint64_t>(b.time)) << 64 | b.key;
  return x < y;
}

template <unsigned Arity>
class EventHeap {
  static_assert(Arity >= 2);

 public:
  bool empty() const { return v_.empty(); }
  size_t size() const { return v_.size(); }
  const Event& top() const { return v_.front(); }
  void clear() { v_.clear(); }
  void reserve(size_t n) { v_.reserve(n); }

  void push(const Event& e) {
    size_t i = v_.size();
    v_.push_back(e);
    // Sift up with a hole: one copy per level instead of a swap.
    while (i > 0) {
      const size_t parent = (i - 1) / Arity;
      if (!before(e, v_[parent])) break;
      v_[i] = v_[parent];
      i = parent;
    }
    v_[i] = e;
  }

  // Floyd's bottom-up pop: the hole left by the minimum walks down to a leaf along the smaller
  // children (one comparison per level, no test against the moved element), then the last
  // element, which usually belongs near the bottom, sifts up from there.
  Event pop() {
    const Event out = v_.front();
    const Event last = v_.back();
    v_.pop_back();
    const size_t n = v_.size();
    if (n == 0) return out;
    size_t i = 0;
    for (;;) {
      const size_t first = i * Arity + 1;
      if (first >= n) break;
      size_t best = first;
      const size_t end = first + Arity < n ? first + Arity : n;
      for (size_t c = first + 1; c < end; ++c) {
        if (before(v_[c], v_[best])) best = c;
      }
      v_[i] = v_[best];
      i = best;
    }
    while (i > 0) {
      const size_t parent = (i - 1) / Arity;
      if (!before(last, v_[parent])) break;
      v_[i] = v_[parent];
      i = parent;
    }
    v_[i] = last;
    return out;
  }

 private:
  std::vector<Event> v_;
};

}  // namespace stretto::sim::detail
