#pragma once
// The end of one instant of a device's counters (engine/program.h: within an instant only the
// end state counts; the peak is the first time the total reached its max), as simulate's memory
// replay (and the tests' reference counters) sample them.
#include <algorithm>
#include <array>
#include <cstdint>

#include "stretto/engine/program.h"

namespace stretto::sim {

/// Samples `c` at `now` with the counters at `level` (the first `num_counters` of them) and
/// their sum `total`; the curve only with `curves`.
inline void sample_counters(engine::DeviceCounters& c, engine::SimTime now, int64_t total,
                            const std::array<int64_t, engine::kMaxCounters>& level,
                            uint32_t num_counters, bool curves) {
  if (curves) {
    if (c.curve.back().t == now)
      c.curve.back().total = total;
    else
      c.curve.push_back({now, total});
  }
  if (total > c.peak) {
    c.peak = total;
    c.peak_time = now;
    std::copy(level.begin(), level.begin() + num_counters, c.at_peak.begin());
  }
}

}  // namespace stretto::sim
