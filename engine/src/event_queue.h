#pragma once
// The engine's event queue: small POD events popped in (time, key) order.
//
// `key` is (sequence number << kKindBits | kind); sequence numbers are unique and increase with
// every push, so ties in time pop in insertion order and the order never depends on the queue's
// layout. No allocation per event: the buckets keep their capacity between runs.

#include <array>
#include <bit>
#include <cstdint>
#include <vector>

#include "pod_stack.h"
#include "stretto/engine/program.h"

namespace stretto::engine::detail {

struct Event {
  SimTime time;
  uint64_t key;      // seq << kKindBits | kind
  uint32_t id;       // task or job id, by kind
  uint32_t version;  // job version for lazily invalidated completions
};
static_assert(sizeof(Event) <= 32, "events must stay small PODs");

inline constexpr unsigned kKindBits = 2;

/// A bucket of events (a PodStack: its append is inlined).
using EventBucket = PodStack<Event>;

/// The engine's event queue: a radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, 1990) over event
/// times, which never decrease in a simulation. It pops in exactly (time, key) order, faster than
/// the binary and 4-ary heaps it replaced (bench_engine): a push is an append, and each event is
/// moved between buckets a few times on its way down instead of sifting through heap levels.
///
/// Bucket 0 holds the events at the current time now(); bucket k > 0 those whose time differs
/// from now() first in bit k - 1. An instant is consumed with has_now() / pop_now(); advance()
/// then moves to the earliest pending time by splitting the lowest non-empty bucket around its
/// minimum (the other buckets stay valid: their times agree with the new now() above their bit).
/// Key order among equal times comes for free when keys grow with every push (the engine's
/// sequence numbers): events of equal time always share a bucket, each bucket is appended to in
/// push order, and a split moves a bucket's events in order to buckets that hold no event of
/// their time yet.
class RadixEventQueue {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  SimTime now() const { return now_; }
  void clear() {
    for (auto& b : buckets_) b.clear();
    head_ = 0;
    size_ = 0;
    now_ = 0;
    mask_ = 0;
  }
  void reserve(size_t n) { buckets_[0].reserve(n); }

  /// Preconditions: e.time >= now(), e.key above every key pushed before.
  void push(const Event& e) {
    const unsigned k = bucket(e.time);
    buckets_[k].push_back(e);
    mask_ |= (uint64_t{1} << k) & ~uint64_t{1};
    ++size_;
  }
  /// Whether an event at now() is pending.
  bool has_now() const { return head_ < buckets_[0].size(); }
  /// The next event at now() (precondition: has_now()).
  Event pop_now() {
    --size_;
    return buckets_[0][head_++];
  }
  /// Moves now() to the earliest pending time and returns it (preconditions: !has_now(),
  /// !empty()).
  SimTime advance() {
    buckets_[0].clear();
    head_ = 0;
    const unsigned k = static_cast<unsigned>(std::countr_zero(mask_));
    EventBucket& src = buckets_[k];
    mask_ &= ~(uint64_t{1} << k);
    if (src.size() == 1) {  // (often: the event alone is the next instant)
      now_ = src.front().time;
      buckets_[0].push_back(src.front());
      src.clear();
      return now_;
    }
    SimTime m = src.front().time;
    for (const Event& e : src) m = e.time < m ? e.time : m;
    now_ = m;
    for (const Event& e : src) {
      const unsigned j = bucket(e.time);  // < k: e and m agree on every bit from k - 1 up
      buckets_[j].push_back(e);
      mask_ |= (uint64_t{1} << j) & ~uint64_t{1};
    }
    src.clear();
    return m;
  }

 private:
  // Times are non-negative, so bit 63 never differs: buckets 0..63.
  unsigned bucket(SimTime t) const {
    return static_cast<unsigned>(std::bit_width(static_cast<uint64_t>(t ^ now_)));
  }

  std::array<EventBucket, 64> buckets_;
  size_t head_ = 0;    // next event of bucket 0 to pop
  size_t size_ = 0;    // pending events
  SimTime now_ = 0;    // time of the events in bucket 0
  uint64_t mask_ = 0;  // non-empty buckets above 0
};

}  // namespace stretto::engine::detail
