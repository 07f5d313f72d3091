#include "stretto/sim/caching_allocator.h"

#include <algorithm>
#include <cassert>

namespace stretto::sim {

int64_t CachingAllocator::round_size(int64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

int64_t CachingAllocator::segment_size(int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

void CachingAllocator::clear() {
  blocks_.clear();
  for (Pool* p : {&small_, &large_})
    while (!p->empty()) erase(*p, p->begin());
  reserved_ = allocated_ = 0;
}

void CachingAllocator::insert(Pool& p, int64_t size, uint32_t id) {
  if (spare_.empty()) {
    p.insert({size, id});
    return;
  }
  Pool::node_type n = std::move(spare_.back());
  spare_.pop_back();
  n.value() = {size, id};
  p.insert(std::move(n));
}

uint32_t CachingAllocator::split(uint32_t id, int64_t size, bool used) {
  Block r;
  r.size = blocks_[id].size - size;
  r.small = blocks_[id].small;
  r.used = used;
  r.prev = id;
  r.next = blocks_[id].next;
  blocks_.push_back(r);
  const auto rid = static_cast<uint32_t>(blocks_.size() - 1);
  if (r.next != kNone) blocks_[r.next].prev = rid;
  blocks_[id].next = rid;
  blocks_[id].size = size;
  return rid;
}

uint32_t CachingAllocator::malloc(int64_t bytes) {
  assert(bytes > 0);
  const int64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  Pool& p = small ? small_ : large_;
  uint32_t id;
  if (const auto it = p.lower_bound({size, 0}); it != p.end()) {
    id = it->second;
    erase(p, it);
  } else {  // cudaMalloc a new segment: one free block spanning it
    const int64_t seg = segment_size(size);
    reserved_ += seg;
    Block b;
    b.size = seg;
    b.small = small;
    blocks_.push_back(b);
    id = static_cast<uint32_t>(blocks_.size() - 1);
  }
  // should_split(): the rest becomes a free block of the same segment.
  const int64_t rest = blocks_[id].size - size;
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) insert(p, rest, split(id, size, false));
  blocks_[id].used = true;
  allocated_ += blocks_[id].size;
  return id;
}

uint32_t CachingAllocator::split_in_use(uint32_t id, int64_t bytes) {
  assert(blocks_[id].used);
  const int64_t first = round_size(bytes);
  if (first >= blocks_[id].size) return id;
  return split(id, first, true);
}

void CachingAllocator::absorb(uint32_t left, uint32_t right) {
  Block& l = blocks_[left];
  const Block& r = blocks_[right];
  l.size += r.size;
  l.next = r.next;
  if (r.next != kNone) blocks_[r.next].prev = left;
}

void CachingAllocator::free(uint32_t id) {
  Block& b = blocks_[id];
  assert(b.used);
  b.used = false;
  allocated_ -= b.size;
  Pool& p = pool(b);
  // try_merge_blocks(): absorb free neighbours of the same segment.
  if (const uint32_t prev = b.prev; prev != kNone && !blocks_[prev].used) {
    erase(p, p.find({blocks_[prev].size, prev}));
    absorb(prev, id);
    id = prev;
  }
  if (const uint32_t next = blocks_[id].next; next != kNone && !blocks_[next].used) {
    erase(p, p.find({blocks_[next].size, next}));
    absorb(id, next);
  }
  insert(p, blocks_[id].size, id);
}

void AllocationReplay::Fifo::pop() {
  ++head;
  if (head == ids.size()) {
    ids.clear();
    head = 0;
  } else if (head >= 64 && 2 * head >= ids.size()) {  // compact: amortised O(1)
    ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(head));
    head = 0;
  }
}

void AllocationReplay::clear() {
  alloc_.clear();
  live_.clear();
  for (Fifo& f : by_age_) f.ids.clear(), f.head = 0;
  for (Fifo& f : by_size_) f.ids.clear(), f.head = 0;
}

uint32_t AllocationReplay::front(Fifo& f, int64_t bytes) {
  while (f.head < f.ids.size()) {
    const Live& l = live_[f.ids[f.head]];
    if (l.alive && (bytes < 0 || l.bytes == bytes)) return f.ids[f.head];
    f.pop();  // a shrunk block never grows back to this size
  }
  return kNone;
}

AllocationReplay::Fifo* AllocationReplay::fifo_of(uint8_t category, int64_t bytes) {
  const auto it =
      std::lower_bound(sizes_.begin(), sizes_.end(), std::pair<int64_t, uint32_t>{bytes, category},
                       [](const SizeKey& k, const std::pair<int64_t, uint32_t>& v) {
                         return k.bytes != v.first ? k.bytes < v.first : k.category < v.second;
                       });
  if (it == sizes_.end() || it->bytes != bytes || it->category != category) return nullptr;
  return &by_size_[it->fifo];
}

void AllocationReplay::allocate(uint8_t category, int64_t bytes) {
  const auto id = static_cast<uint32_t>(live_.size());
  live_.push_back({alloc_.malloc(bytes), true, bytes});
  if (category >= by_age_.size()) by_age_.resize(category + size_t{1});
  by_age_[category].push(id);
  Fifo* f = fifo_of(category, bytes);
  if (f == nullptr) {
    const SizeKey k{bytes, category, static_cast<uint32_t>(by_size_.size())};
    by_size_.emplace_back();
    sizes_.insert(std::lower_bound(sizes_.begin(), sizes_.end(), k,
                                   [](const SizeKey& a, const SizeKey& b) {
                                     return a.bytes != b.bytes ? a.bytes < b.bytes
                                                               : a.category < b.category;
                                   }),
                  k);
    f = &by_size_[k.fifo];
  }
  f->push(id);
}

void AllocationReplay::kill(uint32_t id) {
  alloc_.free(live_[id].block);
  live_[id].alive = false;
}

void AllocationReplay::release(uint8_t category, int64_t bytes) {
  if (category >= by_age_.size()) return;  // nothing of it lives
  Fifo& age = by_age_[category];
  int64_t left = bytes;
  while (left > 0) {
    const uint32_t oldest = front(age, -1);
    if (oldest == kNone) break;
    // The oldest live block of exactly `left` bytes: the oldest of all (perhaps shrunk), or
    // the first of its size's FIFO.
    uint32_t exact = live_[oldest].bytes == left ? oldest : kNone;
    if (exact == kNone)
      if (Fifo* f = fifo_of(category, left)) exact = front(*f, left);
    if (exact != kNone) {
      kill(exact);
      break;
    }
    Live& old = live_[oldest];
    if (old.bytes <= left) {
      left -= old.bytes;
      kill(oldest);
    } else {
      const uint32_t rest = alloc_.split_in_use(old.block, left);
      if (rest != old.block) alloc_.free(old.block);
      old.block = rest;
      old.bytes -= left;
      left = 0;
    }
  }
}

}  // namespace stretto::sim
