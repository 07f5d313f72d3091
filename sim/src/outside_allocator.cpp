// Device memory outside the caching allocator (see outside_allocator.h).
#include "stretto/sim/outside_allocator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

namespace stretto::sim {

using compiler::CommKind;
using compiler::NodeKind;

int64_t cuda_context_bytes(const plan::DeviceSpec& dev) {
  if (dev.kind == "cpu") return 0;
  return static_cast<int64_t>(std::llround(dev.cuda_context_MiB * 1024 * 1024));
}

int64_t nccl_buffer_bytes(const plan::DeviceSpec& dev, int64_t communicators, int64_t peers) {
  if (dev.kind == "cpu") return 0;
  constexpr int64_t kRing = kNcclLlBuffSize + kNcclLl128BuffSize + kNcclSimpleBuffSize;
  const auto channels = static_cast<int64_t>(std::max(0, dev.nccl_channels));
  return channels * (communicators * kRing + peers * kNcclSimpleBuffSize);
}

std::vector<OutsideAllocator> outside_allocator(const compiler::CompiledPlan& cp) {
  const int D = cp.num_devices;
  std::vector<OutsideAllocator> out(static_cast<size_t>(std::max(0, D)));
  const plan::DeviceSpec& dev = cp.plan.cluster.device;
  if (dev.kind == "cpu") return out;
  const auto& sets = cp.dag.device_sets;
  // Each device set once per kind of use (a ring collective, an all-to-all, a transfer pair).
  std::vector<uint8_t> seen(sets.size(), 0);
  std::set<std::pair<uint32_t, uint32_t>> pairs;  // transfers: (senders, receivers)
  std::map<std::vector<int32_t>, uint32_t> comm_id;
  std::vector<std::vector<uint32_t>> comms(out.size());
  std::vector<std::vector<int32_t>> peers(out.size());
  auto valid = [&](int32_t d) { return d >= 0 && d < D; };
  for (const compiler::Node& n : cp.dag.nodes) {
    if (n.kind == NodeKind::kTransfer) {
      if (n.devs >= sets.size() || n.devs2 >= sets.size() || !pairs.insert({n.devs, n.devs2}).second)
        continue;
      const auto& s = sets[n.devs].devices;
      const auto& t = sets[n.devs2].devices;
      for (size_t i = 0; i < s.size() && i < t.size(); ++i)
        if (valid(t[i]) && s[i] != t[i]) peers[static_cast<size_t>(t[i])].push_back(s[i]);
      continue;
    }
    if (n.kind != NodeKind::kCollective || n.devs >= sets.size()) continue;
    const uint8_t use = n.comm == CommKind::kAllToAll ? 2 : 1;
    if (seen[n.devs] & use) continue;
    seen[n.devs] |= use;
    const auto& all = sets[n.devs].devices;
    const size_t g = static_cast<size_t>(std::max(1, sets[n.devs].group_size));
    if (g < 2) continue;
    for (size_t b = 0; b + g <= all.size(); b += g) {
      std::vector<int32_t> group(all.begin() + static_cast<std::ptrdiff_t>(b),
                                 all.begin() + static_cast<std::ptrdiff_t>(b + g));
      if (use == 2) {
        for (int32_t d : group)
          if (valid(d))
            for (int32_t e : group)
              if (e != d) peers[static_cast<size_t>(d)].push_back(e);
        continue;
      }
      std::sort(group.begin(), group.end());
      const auto id = comm_id.emplace(std::move(group), static_cast<uint32_t>(comm_id.size()));
      for (int32_t d : id.first->first)
        if (valid(d)) comms[static_cast<size_t>(d)].push_back(id.first->second);
    }
  }
  for (size_t d = 0; d < out.size(); ++d) {
    // An idle device runs no process.
    if (d < cp.class_of_device.size() && cp.class_of_device[d] < 0) continue;
    auto& c = comms[d];
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    auto& p = peers[d];
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
    OutsideAllocator& o = out[d];
    o.cuda_context = cuda_context_bytes(dev);
    o.communicators = static_cast<int>(c.size());
    o.peers = static_cast<int>(p.size());
    o.nccl = nccl_buffer_bytes(dev, o.communicators, o.peers);
  }
  return out;
}

}  // namespace stretto::sim
