#pragma once
// BigArray: the engine's per-task arrays (tens of millions of entries on the reference plan)
// without std::vector's value-initialisation: resize() leaves new entries unwritten, since
// prepare writes every entry itself, so the memory is written once, not twice (a 23 M-task
// program's records are 740 MB). Capacity is kept across runs of a kept Engine.
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

namespace stretto::engine::detail {

template <class T>
class BigArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  BigArray() = default;
  BigArray(const BigArray&) = delete;
  BigArray& operator=(const BigArray&) = delete;
  ~BigArray() { release(); }

  /// n entries; their values are unspecified (the caller writes each before reading it).
  void resize(size_t n) {
    if (n > cap_) {
      release();
      allocate(n);
    }
    size_ = n;
  }
  /// n entries, each `value`.
  void assign(size_t n, const T& value) {
    resize(n);
    for (size_t i = 0; i < n; ++i) data_[i] = value;
  }
  size_t size() const { return size_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  void allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    data_ = static_cast<T*>(::operator new(bytes > 0 ? bytes : 1, std::align_val_t{alignof(T)}));
    cap_ = n;
  }
  void release() {
    if (data_) ::operator delete(data_, std::align_val_t{alignof(T)});
    data_ = nullptr;
    size_ = cap_ = 0;
  }

  T* data_ = nullptr;
  size_t size_ = 0, cap_ = 0;
};

}  // namespace stretto::engine::detail
