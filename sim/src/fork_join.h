#pragma once
// A tiny fork-join for work split by device (reserved_peaks): contiguous device ranges of
// about equal work, and a call of f(0..n-1) with f(0) on the caller's thread and the others on
// threads of their own, joined before it returns.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace stretto::sim {

/// Boundaries b of at most `n` non-empty ranges [b[j], b[j+1]) covering devices [0, D), where
/// `begin` (D + 1 entries) holds the prefix sums of each device's work: range j starts at the
/// first device whose work before it reaches j/n of the total. b[0] = 0 and b.back() = D
/// (one empty range when D is 0).
inline std::vector<uint32_t> device_ranges(const std::vector<uint32_t>& begin, uint32_t n) {
  const auto D = static_cast<uint32_t>(begin.empty() ? 0 : begin.size() - 1);
  const uint64_t total = D == 0 ? 0 : begin[D];
  std::vector<uint32_t> b{0};
  for (uint32_t j = 1; j < n; ++j) {
    const uint64_t goal = total * j / n;
    const auto d = static_cast<uint32_t>(
        std::lower_bound(begin.begin(), begin.begin() + D, goal) - begin.begin());
    if (d > b.back() && d < D) b.push_back(d);
  }
  b.push_back(D);
  return b;
}

/// Calls f(j) for j in [0, n): f(0) on this thread, the others on threads of their own; returns
/// once all have, rethrowing the first exception (by j) that one of them threw. A share
/// whose thread cannot be created runs on this thread (results do not depend on where).
template <class F>
void fork_join(size_t n, F&& f) {
  if (n == 0) return;
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> workers;
  workers.reserve(n - 1);
  auto guarded = [&](size_t j) {
    try {
      f(j);
    } catch (...) {
      errors[j] = std::current_exception();
    }
  };
  for (size_t j = 1; j < n; ++j) {
    // A thread that cannot be created (std::system_error: the process's thread limit) runs
    // its share here instead; the already started ones are still joined below.
    try {
      workers.emplace_back(guarded, j);
    } catch (const std::system_error&) {
      guarded(j);
    }
  }
  guarded(0);
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace stretto::sim
