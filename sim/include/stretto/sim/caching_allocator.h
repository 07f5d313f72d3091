#pragma once
// PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), reduced to what sets the
// memory it reserves from the device: size rounding, the small and large pools, the segment
// sizes it asks cudaMalloc for, best-fit reuse of cached blocks, splitting and coalescing.
// Segments are never returned (no empty_cache, no out-of-memory retry), so the reserved bytes
// only grow: their final value is the step's reserved peak. One stream; no
// expandable_segments, no max_split_size (PyTorch's defaults).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace stretto::sim {

/// The allocator's constants, as PyTorch names them (c10/cuda/CUDACachingAllocator.cpp and
/// c10/core/AllocatorConfig.h).
inline constexpr int64_t kMinBlockSize = 512;        // every size is a multiple of 512 B
inline constexpr int64_t kSmallSize = 1 << 20;       // the largest "small" block, 1 MiB
inline constexpr int64_t kSmallBuffer = 2 << 20;     // small blocks come from 2 MiB segments
inline constexpr int64_t kLargeBuffer = 20 << 20;    // 1-10 MiB blocks: 20 MiB segments
inline constexpr int64_t kMinLargeAlloc = 10 << 20;  // from 10 MiB a block has its own segment
inline constexpr int64_t kRoundLarge = 2 << 20;      // ... rounded up to 2 MiB

/// The cached free blocks of one pool, best fit first: take() removes the smallest
/// (size, handle) whose size is at least the one asked for, as a std::set of (size, handle)
/// pairs would give with lower_bound({size, 0}). Flat: the sizes present are one sorted array
/// (a pool holds a few dozen distinct sizes), each with its handles in one ascending array
/// read from a head index, so the best fit of a size is at its head and a block split off (a
/// new, highest handle) is appended; emptied arrays keep their memory for the next size.
/// Deterministic: no order depends on addresses or hashing.
class BestFitPool {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  void insert(int64_t size, uint32_t handle);
  /// Removes (size, handle), which the pool holds.
  void erase(int64_t size, uint32_t handle);
  /// Removes and returns the handle of the smallest (size, handle) with at least `size`;
  /// kNone when no block is that large.
  uint32_t take(int64_t size);
  /// Back to empty, keeping the arrays' memory.
  void clear();
  size_t size() const { return count_; }

 private:
  struct List {
    std::vector<uint32_t> ids;  // ascending; those before `head` are taken
    size_t head = 0;
  };
  // The slot of the first size >= `size` in sizes_ (sizes_.size() when none).
  size_t lower(int64_t size) const;
  void drop(size_t slot);         // sizes_[slot] has no handle left
  std::vector<int64_t> sizes_;    // ascending, each with at least one handle
  std::vector<uint32_t> list_of_;  // per slot of sizes_: its list
  std::vector<List> lists_;
  std::vector<uint32_t> spare_;  // lists not in use (empty)
  size_t count_ = 0;
};

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

  /// Back to no segment at all, keeping the memory of its arrays (handles restart at 0).
  void clear();

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
  BestFitPool& pool(const Block& b) { return b.small ? small_ : large_; }
  // Cuts `id` at `size`; the rest becomes a new block after it (in use or not); returns it.
  uint32_t split(uint32_t id, int64_t size, bool used);
  // `left` takes over its neighbour `right` (the block after it in the segment).
  void absorb(uint32_t left, uint32_t right);

  std::vector<Block> blocks_;
  BestFitPool small_, large_;
  int64_t reserved_ = 0, allocated_ = 0;
};

/// One device's memory effects replayed through a CachingAllocator, in time order (session.cpp
/// orders them): an allocation of a category is one block; a free of `bytes` of a category
/// releases the oldest live block of that category with exactly that size, else the oldest
/// ones, splitting the last (an op's saved activations freed in two parts, BI then BW, were two
/// tensors). Each step costs O(1) amortised besides the allocator's work: the live blocks of a
/// category are a FIFO with lazy removal, and so are those of each (category, size), found
/// through a hash table of the pairs allocated so far.
class AllocationReplay {
 public:
  /// A new device: no block, no segment (the arrays keep their memory).
  void clear();
  /// A block that lives through the step (parameters, gradients, optimizer state).
  void allocate_static(int64_t bytes) { alloc_.malloc(bytes); }
  void allocate(uint8_t category, int64_t bytes);
  void release(uint8_t category, int64_t bytes);
  int64_t reserved() const { return alloc_.reserved(); }
  int64_t allocated() const { return alloc_.allocated(); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Live {
    uint32_t block;
    bool alive;
    int64_t bytes;  // only the oldest block of its category is ever cut, so only it shrinks
  };
  struct Fifo {  // ids into live_, oldest first; ids before `head` are gone
    std::vector<uint32_t> ids;
    size_t head = 0;
    void push(uint32_t id) { ids.push_back(id); }
    void pop();
  };
  struct SizeKey {
    int64_t bytes = 0;  // 0: an empty slot of table_
    uint32_t category = 0, fifo = 0;  // fifo: index into by_size_
  };
  // The first live id of `f` (dropping dead ones and, when `bytes` >= 0, ones of another size:
  // the shrunk oldest block), or kNone.
  uint32_t front(Fifo& f, int64_t bytes);
  Fifo* fifo_of(uint8_t category, int64_t bytes);  // nullptr when never allocated
  size_t slot_of(uint8_t category, int64_t bytes) const;  // its slot in table_, or an empty one
  void kill(uint32_t id);

  CachingAllocator alloc_;
  std::vector<Live> live_;
  std::vector<Fifo> by_age_;    // per category
  std::vector<Fifo> by_size_;   // per (category, size), indexed through table_
  // (category, size) -> its FIFO: an open-addressing hash table (a power of two in size, at
  // most half full), only ever looked up, so no order depends on the hash; kept across clear().
  std::vector<SizeKey> table_;
};

}  // namespace stretto::sim
