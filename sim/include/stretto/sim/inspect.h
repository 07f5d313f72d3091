#pragma once
// Looking inside one simulated step, for the GUI and reports: memory per category over time,
// and why an op started when it did (the cause of the idle time before it).
//
// Both are derived from a `Result` (its program, timings and counters), never recomputed by
// running the engine again.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "stretto/compiler/dag.h"
#include "stretto/sim/result.h"

namespace stretto::sim {

/// A device's allocated memory by category (memory_category_name order: params, grads,
/// optimizer, activations, comm_buffers, grad_buckets, gathered_params) after the changes at
/// each instant `t` in which it changed; the first sample is at t = 0. The totals equal
/// DeviceMetrics::memory's at the same instants.
struct CategorySample {
  engine::SimTime t = 0;
  std::array<int64_t, kMemCategories> bytes{};
  int64_t total() const {
    int64_t s = 0;
    for (int64_t b : bytes) s += b;
    return s;
  }
};
/// Empty for a device that was not simulated (a folded replica: use its representative).
std::vector<CategorySample> memory_by_category(const compiler::CompiledPlan& cp, const Result& r,
                                               int device);

/// Why an op did not start earlier than it did: what it waited for after its lane (its
/// (device, stream) FIFO) was free at `lane_free`.
enum class WaitCause : uint8_t {
  kNone,        // it started as soon as its lane was free
  kInput,       // a data dependency (a compute op's output) ended later
  kTransfer,    // a send/recv it depends on ended later
  kCollective,  // a collective it depends on ended later
  kOrder,       // an order directive's edge (a temporal dependency) ended later
  kRendezvous,  // a comm op: its inputs were ready, a peer reached it later
  kDispatch,    // the host thread issued it later (dispatch overhead)
};
std::string_view wait_cause_name(WaitCause c);

struct Wait {
  WaitCause cause = WaitCause::kNone;
  engine::SimTime ready = 0;      // when the binding constraint was met
  uint32_t blocker = UINT32_MAX;  // the task waited for (kInput/kTransfer/kCollective/kOrder)
};
/// The cause of the gap [lane_free, start of `task`).
Wait wait_cause(const compiler::CompiledPlan& cp, const Result& r, uint32_t task,
                engine::SimTime lane_free);

}  // namespace stretto::sim
