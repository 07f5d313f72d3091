#pragma once
// Max-min fair sharing of link bandwidth among flows, with selective re-solving.
//
// Model (SimGrid's LMM "maxmin" solver, reference/simulators.md §14): every link is a constraint
// `sum of the rates of the flows crossing it <= capacity`; every flow crosses a set of links and
// may have its own rate cap. The allocation is the max-min fair one: no flow can get more without
// taking from a flow that has no more than it. It is computed by progressive filling: the rates of
// all unfixed flows rise together; when a link saturates, its unfixed flows are fixed at the
// current level; when a flow reaches its own cap, it is fixed at the cap; repeat.
//
// Selective update: add_flow() and remove_flow() only mark the flow's links dirty. solve()
// re-solves the connected components (flows and links joined by "flow crosses link") that hold a
// dirty link or a new flow, and reports the flows whose rate changed. Max-min allocations
// decompose exactly over components, so this is exact, not an approximation.
//
// Terms and invariants:
//  - Capacities are positive, in any unit (the engine uses bytes/ns); rates are in that unit.
//  - A link listed k times by one flow counts that flow k times (weight k).
//  - A flow with no links gets its cap; with no links and no cap, +infinity.
//  - Flow ids are small integers, reused after remove_flow(); a removed flow has no rate.
//  - Deterministic: the same sequence of calls gives bit-identical rates (no hashing, no
//    pointer order; ties between links are broken by link id, between caps by flow id).
//  - No allocation per call in steady state: all scratch lives in vectors that keep capacity.
//  - One MaxMin per engine; not thread-safe, but many may be used on different threads.

#include <cstdint>
#include <span>
#include <vector>

namespace stretto::engine {

class MaxMin {
 public:
  using FlowId = uint32_t;

  struct Stats {
    uint64_t solves = 0;         ///< solve() calls that had something to do
    uint64_t components = 0;     ///< components re-solved (a link without flows is none)
    uint64_t flows_solved = 0;   ///< flow visits summed over re-solved components
    uint64_t links_solved = 0;   ///< link visits summed over re-solved components
    uint64_t flows_changed = 0;  ///< flows reported by solve() (rate changed or new)
  };

  MaxMin() = default;
  explicit MaxMin(std::span<const double> capacities) { reset(capacities); }

  /// Drops all flows and sets the links (one per capacity, ids 0..n-1). Capacities must be > 0.
  void reset(std::span<const double> capacities);

  /// Adds a flow over `links` (ids < number of links) with its own cap (<= 0: uncapped).
  /// The span is not copied: it must stay valid and unchanged until remove_flow(). The rate is
  /// known after the next solve().
  FlowId add_flow(std::span<const uint32_t> links, double cap);

  /// Removes an active flow; its id may be handed out again by add_flow().
  void remove_flow(FlowId flow);

  /// True when an add or remove happened since the last solve().
  bool dirty() const { return !dirty_links_.empty() || !new_flows_.empty(); }

  /// Re-solves the components touched since the last call. Returns the active flows whose rate
  /// changed (every flow added since the last call is included), in a deterministic order. The
  /// span is valid until the next call of any non-const member.
  std::span<const FlowId> solve();

  /// Current rate of an active flow (as of the last solve()).
  double rate(FlowId flow) const { return flows_[flow].rate; }
  /// Own cap of an active flow (<= 0: uncapped).
  double cap(FlowId flow) const { return flows_[flow].cap; }

  size_t num_links() const { return links_.size(); }
  size_t num_active_flows() const { return active_; }
  const Stats& stats() const { return stats_; }

 private:
  // Hot fields only; the visit stamps and link membership lists live in their own arrays so
  // that the component search (the bulk of a large re-solve) touches few cache lines.
  struct Flow {
    const uint32_t* links = nullptr;
    uint32_t num_links = 0;
    double cap = 0;
    double rate = 0;
    bool alive = false;
    bool fixed = false;  // scratch of fill()
  };
  struct Link {
    double capacity = 0;
    double remaining = 0;  // scratch of fill(): capacity minus the rates fixed so far
    uint32_t unfixed = 0;  // scratch of fill(): memberships not fixed yet
    bool dirty = false;
    bool saturated = false;  // scratch of fill()
  };
  struct Level {  // a link's fair share when it was pushed (a lower bound of its current share)
    double share;
    uint32_t link;
  };

  bool solve_alone(uint32_t link);
  void gather_from_link(uint32_t link);
  void gather_from_flow(FlowId flow);
  void expand(size_t num_links, size_t num_flows);
  void fill();
  void fix(FlowId flow, double rate);
  void push_level(uint32_t link);
  void settle_levels();
  double share(uint32_t link) const;

  std::vector<Flow> flows_;
  std::vector<uint32_t> flow_stamp_;  // == epoch_ when visited by the current solve()
  std::vector<FlowId> free_flows_;
  std::vector<Link> links_;
  std::vector<uint32_t> link_stamp_;             // == epoch_ when visited by the current solve()
  std::vector<std::vector<FlowId>> link_flows_;  // flows crossing each link
  std::vector<uint32_t> dirty_links_;
  std::vector<FlowId> new_flows_;
  size_t active_ = 0;
  uint32_t epoch_ = 0;

  // scratch, kept between calls
  // The component being solved: views into buffers sized for every link / flow slot (+1), so
  // that the component search can append without a branch per visit.
  std::vector<uint32_t> comp_link_buf_;
  std::vector<FlowId> comp_flow_buf_;
  std::span<const uint32_t> comp_links_;
  std::span<const FlowId> comp_flows_;
  std::vector<FlowId> capped_;
  std::vector<Level> levels_;
  std::vector<FlowId> changed_;
  Stats stats_;
};

}  // namespace stretto::engine
