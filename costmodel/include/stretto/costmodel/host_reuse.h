#pragma once
// How stale the activations of a host-compute device's backward op are
// (Interference::host_reuse_factor). The simulator (sim/src/build_program.cpp) walks a device's
// compute ops in dispatch order, `stretto profile` walks a replay's measured ones in the order
// they ran (backend/src/loop_validate.cpp): both hand each op to visit(), so the two classify
// the same op the same way.
//
// The reuse distance of a backward op of model op `op` and microbatch `mb`: how many other
// microbatches ran a forward op on its device after the last forward of (op, mb). Each saved
// activations of its own, which can displace (op, mb)'s from the caches. 0 = fresh.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "stretto/costmodel/cost_model.h"

namespace stretto::cost {

class StaleActivations {
 public:
  /// A compute node run on `device`: a forward one (or a recomputed forward) is recorded and
  /// gives 0; a backward one (B, BI, BW) gives its reuse distance, 3 and more as 3 (the index
  /// of host_reuse_factor); any other (the optimizer step) gives 0.
  size_t visit(int device, const compiler::Node& nd, const compiler::ModelGraph& model) {
    if (model.ops[nd.op].kind == compiler::OpKind::kOptimizer) return 0;
    const plan::Pass ps = nd.tags.pass;
    if (nd.recompute || ps == plan::Pass::kF) {
      forward(device, nd.op, nd.tags.mb());
      return 0;
    }
    if (ps == plan::Pass::kB || ps == plan::Pass::kBI || ps == plan::Pass::kBW)
      return distance(device, nd.op, nd.tags.mb());
    return 0;
  }

 private:
  static constexpr size_t kMax = kReuseDistances - 1;  // distances told apart: 0 .. kMax

  void forward(int device, uint32_t op, int32_t mb) {
    Device& d = devices_[device];
    ++d.forwards;
    d.at[key(op, mb)] = d.forwards;
    // move mb to the front of the most recent microbatches
    size_t i = 0;
    while (i < d.used && d.recent[i].mb != mb) ++i;
    if (i == d.used && d.used < d.recent.size()) ++d.used;
    for (size_t j = std::min(i, d.used - 1); j > 0; --j) d.recent[j] = d.recent[j - 1];
    d.recent[0] = {mb, d.forwards};
  }

  // min(k, kMax): the microbatches whose last forward came after (op, mb)'s are the most
  // recent ones, so the kMax + 1 most recent (one may be mb itself) decide it.
  size_t distance(int device, uint32_t op, int32_t mb) const {
    auto di = devices_.find(device);
    if (di == devices_.end()) return 0;
    const Device& d = di->second;
    auto it = d.at.find(key(op, mb));
    if (it == d.at.end()) return 0;  // its forward was never seen: nothing to reuse
    size_t k = 0;
    for (size_t j = 0; j < d.used && d.recent[j].last > it->second; ++j) k += d.recent[j].mb != mb;
    return std::min(k, kMax);
  }

  static uint64_t key(uint32_t op, int32_t mb) {
    return (static_cast<uint64_t>(op) << 32) | static_cast<uint32_t>(mb);
  }
  struct Recent {
    int32_t mb = 0;
    int64_t last = 0;  // `forwards` after its last forward
  };
  struct Device {
    int64_t forwards = 0;                       // forward ops run so far
    std::array<Recent, kMax + 1> recent{};      // most recent distinct microbatches, newest first
    size_t used = 0;
    std::unordered_map<uint64_t, int64_t> at;  // (op, mb) -> `forwards` after its last forward
  };
  std::unordered_map<int, Device> devices_;
};

}  // namespace stretto::cost
