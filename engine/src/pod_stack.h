#pragma once
// PodStack: the engine's lists that grow and empty over and over (the event queue's buckets; the
// ids of tasks made ready, devices whose rates must be recomputed, freed jobs, devices whose
// counters changed). A vector whose append and back/pop are inlined, with its data pointer and
// capacity cached: GCC kept std::vector::push_back out of line in the engine's loop (a call per
// appended id), and its size check divides by sizeof(T). Storage only grows; clear() keeps it.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace stretto::engine::detail {

template <class T>
class PodStack {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  PodStack() = default;
  PodStack(const PodStack&) = delete;  // data_ points into store_
  PodStack& operator=(const PodStack&) = delete;

  [[gnu::always_inline]] void push_back(const T& x) {
    if (size_ == cap_) [[unlikely]]
      grow();
    data_[size_++] = x;
  }
  const T& front() const { return data_[0]; }
  const T& back() const { return data_[size_ - 1]; }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }
  void reserve(size_t n) {
    if (n > cap_) resize_store(n);
  }
  template <class It>
  void assign(It first, It last) {
    clear();
    reserve(static_cast<size_t>(last - first));
    for (; first != last; ++first) data_[size_++] = *first;
  }
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  // (out of the appends' line: the hot path keeps its registers)
  [[gnu::noinline, gnu::cold]] void grow() { resize_store(cap_ == 0 ? 64 : 2 * cap_); }
  void resize_store(size_t n) {
    store_.resize(n);
    data_ = store_.data();
    cap_ = n;
  }
  std::vector<T> store_;  // [0, size_) holds the entries; the rest is capacity
  T* data_ = nullptr;
  size_t size_ = 0, cap_ = 0;
};

using IdStack = PodStack<uint32_t>;

}  // namespace stretto::engine::detail
