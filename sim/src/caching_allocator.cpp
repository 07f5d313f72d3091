#include "stretto/sim/caching_allocator.h"

#include <algorithm>

#include "stretto/support/diag.h"

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

size_t BestFitPool::lower(int64_t size) const {
  return static_cast<size_t>(std::lower_bound(sizes_.begin(), sizes_.end(), size) -
                             sizes_.begin());
}

void BestFitPool::insert(int64_t size, uint32_t handle) {
  const size_t slot = lower(size);
  if (slot == sizes_.size() || sizes_[slot] != size) {
    uint32_t list;
    if (spare_.empty()) {
      list = static_cast<uint32_t>(lists_.size());
      lists_.emplace_back();
    } else {
      list = spare_.back();
      spare_.pop_back();
    }
    sizes_.insert(sizes_.begin() + static_cast<std::ptrdiff_t>(slot), size);
    list_of_.insert(list_of_.begin() + static_cast<std::ptrdiff_t>(slot), list);
  }
  List& l = lists_[list_of_[slot]];
  ++count_;
  if (l.ids.size() == l.head || l.ids.back() < handle) {  // the highest (a block split off)
    l.ids.push_back(handle);
  } else if (handle < l.ids[l.head] && l.head > 0) {  // the lowest, with room before it
    l.ids[--l.head] = handle;
  } else {
    l.ids.insert(std::lower_bound(l.ids.begin() + static_cast<std::ptrdiff_t>(l.head),
                                  l.ids.end(), handle),
                 handle);
  }
}

void BestFitPool::drop(size_t slot) {
  List& l = lists_[list_of_[slot]];
  l.ids.clear();
  l.head = 0;
  spare_.push_back(list_of_[slot]);
  sizes_.erase(sizes_.begin() + static_cast<std::ptrdiff_t>(slot));
  list_of_.erase(list_of_.begin() + static_cast<std::ptrdiff_t>(slot));
}

void BestFitPool::erase(int64_t size, uint32_t handle) {
  const size_t slot = lower(size);
  STRETTO_ASSERT(slot < sizes_.size() && sizes_[slot] == size, "an erased size is in the pool");
  List& l = lists_[list_of_[slot]];
  const auto it =
      std::lower_bound(l.ids.begin() + static_cast<std::ptrdiff_t>(l.head), l.ids.end(), handle);
  STRETTO_ASSERT(it != l.ids.end() && *it == handle, "an erased block is in its size's list");
  --count_;
  if (it == l.ids.begin() + static_cast<std::ptrdiff_t>(l.head))
    ++l.head;
  else
    l.ids.erase(it);
  if (l.head == l.ids.size()) drop(slot);
}

uint32_t BestFitPool::take(int64_t size) {
  const size_t slot = lower(size);
  if (slot == sizes_.size()) return kNone;
  List& l = lists_[list_of_[slot]];
  const uint32_t handle = l.ids[l.head++];
  --count_;
  if (l.head == l.ids.size()) drop(slot);
  return handle;
}

void BestFitPool::clear() {
  for (size_t slot = sizes_.size(); slot-- > 0;) drop(slot);
  count_ = 0;
}

void CachingAllocator::clear() {
  blocks_.clear();
  small_.clear();
  large_.clear();
  reserved_ = allocated_ = 0;
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
  STRETTO_ASSERT(bytes > 0, "an allocation has at least one byte");
  const int64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  BestFitPool& p = small ? small_ : large_;
  uint32_t id = p.take(size);
  if (id == BestFitPool::kNone) {  // cudaMalloc a new segment: one free block spanning it
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
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) p.insert(rest, split(id, size, false));
  blocks_[id].used = true;
  allocated_ += blocks_[id].size;
  return id;
}

uint32_t CachingAllocator::split_in_use(uint32_t id, int64_t bytes) {
  STRETTO_ASSERT(blocks_[id].used, "only a block in use is split");
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
  STRETTO_ASSERT(b.used, "a block is freed once, after its malloc");
  b.used = false;
  allocated_ -= b.size;
  BestFitPool& p = pool(b);
  // try_merge_blocks(): absorb free neighbours of the same segment.
  if (const uint32_t prev = b.prev; prev != kNone && !blocks_[prev].used) {
    p.erase(blocks_[prev].size, prev);
    absorb(prev, id);
    id = prev;
  }
  if (const uint32_t next = blocks_[id].next; next != kNone && !blocks_[next].used) {
    p.erase(blocks_[next].size, next);
    absorb(id, next);
  }
  p.insert(blocks_[id].size, id);
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

size_t AllocationReplay::slot_of(uint8_t category, int64_t bytes) const {
  // Fibonacci hashing of (bytes, category); linear probing (the table is at most half full).
  const uint64_t h = (static_cast<uint64_t>(bytes) ^ uint64_t{category} << 56) *
                     0x9E3779B97F4A7C15ull;
  const size_t mask = table_.size() - 1;
  size_t i = static_cast<size_t>(h >> 32) & mask;
  while (table_[i].bytes != 0 && (table_[i].bytes != bytes || table_[i].category != category))
    i = (i + 1) & mask;
  return i;
}

AllocationReplay::Fifo* AllocationReplay::fifo_of(uint8_t category, int64_t bytes) {
  if (table_.empty()) return nullptr;
  const SizeKey& k = table_[slot_of(category, bytes)];
  return k.bytes == 0 ? nullptr : &by_size_[k.fifo];
}

void AllocationReplay::allocate(uint8_t category, int64_t bytes) {
  const auto id = static_cast<uint32_t>(live_.size());
  live_.push_back({alloc_.malloc(bytes), true, bytes});
  if (category >= by_age_.size()) by_age_.resize(category + size_t{1});
  by_age_[category].push(id);
  Fifo* f = fifo_of(category, bytes);
  if (f == nullptr) {
    if (2 * (by_size_.size() + 1) > table_.size()) {  // grow: at most half full
      std::vector<SizeKey> old(std::max<size_t>(64, 2 * table_.size()));
      old.swap(table_);
      for (const SizeKey& k : old)
        if (k.bytes != 0) table_[slot_of(static_cast<uint8_t>(k.category), k.bytes)] = k;
    }
    const auto fifo = static_cast<uint32_t>(by_size_.size());
    by_size_.emplace_back();
    table_[slot_of(category, bytes)] = {bytes, category, fifo};
    f = &by_size_[fifo];
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
