#pragma once
// How stale the activations of a host-compute device's backward op are
// (Interference::host_reuse_factor). The simulator (sim/src/build_program.cpp) walks a device's
// ops in dispatch order, `stretto profile` walks a replay's measured ops in the order they ran
// (backend/src/loop_validate.cpp): both call forward() for every forward compute op (a
// recomputed forward included) and ask distance() for every backward one, so the two classify
// the same op the same way.
//
// The reuse distance of a backward op of model op `op` and microbatch `mb`: how many other
// microbatches ran a forward op on its device after the last forward of (op, mb). Each saved
// activations of its own, which can displace (op, mb)'s from the caches. 0 = fresh.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "stretto/costmodel/cost_model.h"

namespace stretto::cost {

class StaleActivations {
 public:
  /// A forward (or recomputed forward) compute op of model op `op`, microbatch `mb`, ran on
  /// `device`.
  void forward(int device, uint32_t op, int32_t mb) {
    Device& d = devices_[device];
    ++d.forwards;
    d.last_forward[mb] = d.forwards;
    d.at[key(op, mb)] = d.forwards;
  }

  /// A backward compute op of (op, mb) on `device`: the number of other microbatches whose
  /// forward ran on the device since the last forward of (op, mb); 0 when that forward was
  /// never seen (nothing to reuse).
  int distance(int device, uint32_t op, int32_t mb) const {
    auto di = devices_.find(device);
    if (di == devices_.end()) return 0;
    const Device& d = di->second;
    auto it = d.at.find(key(op, mb));
    if (it == d.at.end()) return 0;
    int k = 0;
    for (const auto& [other, last] : d.last_forward) k += other != mb && last > it->second;
    return k;
  }

  /// distance() as an index of host_reuse_factor: 3 and more share the last.
  static size_t bucket(int distance) {
    return static_cast<size_t>(std::clamp<int>(distance, 0, kReuseDistances - 1));
  }

 private:
  static uint64_t key(uint32_t op, int32_t mb) {
    return (static_cast<uint64_t>(op) << 32) | static_cast<uint32_t>(mb);
  }
  struct Device {
    int64_t forwards = 0;                                // forward ops run so far
    std::unordered_map<int32_t, int64_t> last_forward;  // mb -> `forwards` after its last one
    std::unordered_map<uint64_t, int64_t> at;            // (op, mb) -> `forwards` after it
  };
  std::unordered_map<int, Device> devices_;
};

}  // namespace stretto::cost
