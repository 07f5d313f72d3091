#pragma once
// IdStack: the engine's lists of ids that grow and empty every instant (tasks made ready, devices
// whose rates must be recomputed, freed jobs, devices whose counters changed). A vector whose
// append and back/pop are inlined: GCC kept std::vector::push_back out of line in the engine's
// loop, a call per appended id. Storage only grows; clear() keeps it.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace stretto::engine::detail {

class IdStack {
 public:
  IdStack() = default;
  IdStack(const IdStack&) = delete;  // data_ points into store_
  IdStack& operator=(const IdStack&) = delete;

  void push_back(uint32_t id) {
    if (size_ == cap_) [[unlikely]]
      resize_store(cap_ == 0 ? 64 : 2 * cap_);
    data_[size_++] = id;
  }
  uint32_t back() const { return data_[size_ - 1]; }
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
  uint32_t operator[](size_t i) const { return data_[i]; }
  const uint32_t* begin() const { return data_; }
  const uint32_t* end() const { return data_ + size_; }

 private:
  void resize_store(size_t n) {
    store_.resize(n);
    data_ = store_.data();
    cap_ = n;
  }
  std::vector<uint32_t> store_;  // [0, size_) holds ids; the rest is capacity
  uint32_t* data_ = nullptr;
  size_t size_ = 0, cap_ = 0;
};

}  // namespace stretto::engine::detail
