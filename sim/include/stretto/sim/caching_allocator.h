#pragma once
// PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), reduced to what sets the
// memory it reserves from the device: size rounding, the small and large pools, the segment
// sizes it asks cudaMalloc for, best-fit reuse of cached blocks, splitting and coalescing.
// Segments are never returned (no empty_cache, no out-of-memory retry), so the reserved bytes
// only grow: their final value is the step's reserved peak. One stream; no
// expandable_segments, no max_split_size (PyTorch's defaults).
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

namespace stretto::sim {

/// The allocator's constants, as PyTorch names them (c10/cuda/CUDACachingAllocator.cpp and
/// c10/core/AllocatorConfig.h).
inline constexpr int64_t kMinBlockSize = 512;             // every size is a multiple of 512 B
inline constexpr int64_t kSmallSize = 1 << 20;            // the largest "small" block, 1 MiB
inline constexpr int64_t kSmallBuffer = 2 << 20;          // small blocks come from 2 MiB segments
inline constexpr int64_t kLargeBuffer = 20 << 20;         // 1-10 MiB blocks: 20 MiB segments
inline constexpr int64_t kMinLargeAlloc = 10 << 20;       // from 10 MiB a block has its own segment
inline constexpr int64_t kRoundLarge = 2 << 20;           // ... rounded up to 2 MiB

class CachingAllocator {
 public:
  /// round_size(): at least 512 B, a multiple of 512 B.
  static int64_t round_size(int64_t bytes);
  /// get_allocation_size(): the segment cudaMalloc gets when no cached block fits.
  static int64_t segment_size(int64_t rounded);

  /// A block of `bytes` (> 0): the smallest cached free block of its pool that fits, split
  /// when the rest is worth keeping (small pool: >= 512 B; large pool: > 1 MiB), or a new
  /// segment. Returns the block's handle.
  uint32_t malloc(int64_t bytes);
  /// Returns the block to its pool, merged with free neighbours of its segment.
  void free(uint32_t block);
  /// Splits the block in use at `bytes` (rounded) into two adjacent blocks in use, as if it
  /// had been allocated as two tensors; returns the handle of the second, or `block` itself
  /// when nothing is left over.
  uint32_t split_in_use(uint32_t block, int64_t bytes);

  int64_t reserved() const { return reserved_; }
  int64_t allocated() const { return allocated_; }  // rounded sizes of the blocks in use
  int64_t block_size(uint32_t block) const { return blocks_[block].size; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Block {
    int64_t size = 0;
    uint32_t prev = kNone, next = kNone;  // neighbours in the segment
    bool small = false, used = false;
  };
  using Pool = std::set<std::pair<int64_t, uint32_t>>;  // (size, handle): best fit first
  Pool& pool(const Block& b) { return b.small ? small_ : large_; }
  // Cuts `id` at `size`; the rest becomes a new block after it (in use or not); returns it.
  uint32_t split(uint32_t id, int64_t size, bool used);
  // `left` takes over its neighbour `right` (the block after it in the segment).
  void absorb(uint32_t left, uint32_t right);

  std::vector<Block> blocks_;
  Pool small_, large_;
  int64_t reserved_ = 0, allocated_ = 0;
};

}  // namespace stretto::sim
