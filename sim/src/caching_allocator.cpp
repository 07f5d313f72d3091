#include "stretto/sim/caching_allocator.h"

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
  auto it = p.lower_bound({size, 0});
  if (it != p.end()) {
    id = it->second;
    p.erase(it);
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
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) p.insert({rest, split(id, size, false)});
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
    p.erase({blocks_[prev].size, prev});
    absorb(prev, id);
    id = prev;
  }
  if (const uint32_t next = blocks_[id].next; next != kNone && !blocks_[next].used) {
    p.erase({blocks_[next].size, next});
    absorb(id, next);
  }
  p.insert({blocks_[id].size, id});
}

}  // namespace stretto::sim
