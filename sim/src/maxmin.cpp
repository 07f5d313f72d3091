#include "stretto/sim/maxmin.h"

#include <algorithm>
#include <limits>

#include "stretto/schedules/diag.h"

namespace stretto::sim {

namespace {

// A flow's rate before its first solve: never a valid rate, so the first solve reports it.
constexpr double kUnsolved = -1.0;

// Min-heap order on (share, link id) for std::push_heap / pop_heap (which build max-heaps).
struct LevelAfter {
  template <class L>
  bool operator()(const L& a, const L& b) const {
    return a.share > b.share || (a.share == b.share && a.link > b.link);
  }
};

}  // namespace

void MaxMin::reset(std::span<const double> capacities) {
  flows_.clear();
  free_flows_.clear();
  dirty_links_.clear();
  new_flows_.clear();
  changed_.clear();
  active_ = 0;
  epoch_ = 0;
  stats_ = {};
  links_.resize(capacities.size());
  for (size_t i = 0; i < capacities.size(); ++i) {
    STRETTO_ASSERT(capacities[i] > 0, "link capacity must be positive");
    Link& l = links_[i];
    l.capacity = capacities[i];
    l.flows.clear();  // keeps its capacity: no allocation when the same engine runs again
    l.dirty = false;
    l.stamp = 0;
  }
}

MaxMin::FlowId MaxMin::add_flow(std::span<const uint32_t> links, double cap) {
  FlowId id;
  if (!free_flows_.empty()) {
    id = free_flows_.back();
    free_flows_.pop_back();
  } else {
    id = static_cast<FlowId>(flows_.size());
    flows_.emplace_back();
  }
  Flow& f = flows_[id];
  f.links = links.data();
  f.num_links = static_cast<uint32_t>(links.size());
  f.cap = cap;
  f.rate = kUnsolved;
  f.alive = true;
  ++active_;
  for (uint32_t l : links) {
    STRETTO_ASSERT(l < links_.size(), "flow crosses an unknown link");
    Link& link = links_[l];
    link.flows.push_back(id);
    if (!link.dirty) {
      link.dirty = true;
      dirty_links_.push_back(l);
    }
  }
  new_flows_.push_back(id);
  return id;
}

void MaxMin::remove_flow(FlowId id) {
  STRETTO_ASSERT(id < flows_.size() && flows_[id].alive, "remove_flow of an inactive flow");
  Flow& f = flows_[id];
  for (uint32_t i = 0; i < f.num_links; ++i) {
    const uint32_t l = f.links[i];
    Link& link = links_[l];
    // Linear search: re-solving this link's component costs at least as much anyway.
    auto it = std::find(link.flows.begin(), link.flows.end(), id);
    STRETTO_ASSERT(it != link.flows.end(), "flow missing from its link");
    *it = link.flows.back();
    link.flows.pop_back();
    if (!link.dirty) {
      link.dirty = true;
      dirty_links_.push_back(l);
    }
  }
  f.alive = false;
  f.links = nullptr;
  f.num_links = 0;
  --active_;
  free_flows_.push_back(id);
}

std::span<const MaxMin::FlowId> MaxMin::solve() {
  changed_.clear();
  if (!dirty()) return {};
  ++stats_.solves;
  if (++epoch_ == 0) {  // wrapped: clear the stamps so none matches by accident
    for (Flow& f : flows_) f.stamp = 0;
    for (Link& l : links_) l.stamp = 0;
    epoch_ = 1;
  }
  for (uint32_t l : dirty_links_) {
    links_[l].dirty = false;
    if (links_[l].stamp == epoch_) continue;
    gather_from_link(l);
    if (!comp_flows_.empty()) fill();
  }
  for (FlowId f : new_flows_) {
    if (!flows_[f].alive || flows_[f].stamp == epoch_) continue;
    gather_from_flow(f);
    fill();
  }
  dirty_links_.clear();
  new_flows_.clear();
  return changed_;
}

void MaxMin::gather_from_link(uint32_t link) {
  comp_links_.clear();
  comp_flows_.clear();
  links_[link].stamp = epoch_;
  comp_links_.push_back(link);
  expand();
}

void MaxMin::gather_from_flow(FlowId flow) {
  comp_links_.clear();
  comp_flows_.clear();
  flows_[flow].stamp = epoch_;
  comp_flows_.push_back(flow);
  expand();
}

// Breadth-first closure of comp_links_ / comp_flows_ under "flow crosses link".
void MaxMin::expand() {
  size_t li = 0, fi = 0;
  while (li < comp_links_.size() || fi < comp_flows_.size()) {
    for (; li < comp_links_.size(); ++li) {
      for (FlowId f : links_[comp_links_[li]].flows) {
        if (flows_[f].stamp == epoch_) continue;
        flows_[f].stamp = epoch_;
        comp_flows_.push_back(f);
      }
    }
    for (; fi < comp_flows_.size(); ++fi) {
      const Flow& f = flows_[comp_flows_[fi]];
      for (uint32_t i = 0; i < f.num_links; ++i) {
        Link& l = links_[f.links[i]];
        if (l.stamp == epoch_) continue;
        l.stamp = epoch_;
        comp_links_.push_back(f.links[i]);
      }
    }
  }
  ++stats_.components;
  stats_.flows_solved += comp_flows_.size();
  stats_.links_solved += comp_links_.size();
}

void MaxMin::push_level(uint32_t link) {
  const Link& l = links_[link];
  const double share = std::max(0.0, l.remaining) / static_cast<double>(l.unfixed);
  levels_.push_back({share, link, l.version});
  std::push_heap(levels_.begin(), levels_.end(), LevelAfter{});
}

void MaxMin::fix(FlowId id, double rate) {
  Flow& f = flows_[id];
  f.fixed = true;
  if (f.rate != rate) {
    f.rate = rate;
    changed_.push_back(id);
  }
  for (uint32_t i = 0; i < f.num_links; ++i) {
    Link& l = links_[f.links[i]];
    l.remaining -= rate;
    --l.unfixed;
    ++l.version;
    if (!l.saturated && l.unfixed > 0) push_level(f.links[i]);
  }
}

// Progressive filling over the current component (comp_links_, comp_flows_).
void MaxMin::fill() {
  levels_.clear();
  capped_.clear();
  for (uint32_t id : comp_links_) {
    Link& l = links_[id];
    l.remaining = l.capacity;
    l.unfixed = static_cast<uint32_t>(l.flows.size());
    l.saturated = false;
    ++l.version;
    if (l.unfixed > 0) push_level(id);
  }
  for (FlowId id : comp_flows_) {
    flows_[id].fixed = false;
    if (flows_[id].cap > 0) capped_.push_back(id);
  }
  std::sort(capped_.begin(), capped_.end(), [this](FlowId a, FlowId b) {
    return flows_[a].cap < flows_[b].cap || (flows_[a].cap == flows_[b].cap && a < b);
  });

  size_t next_cap = 0;
  size_t left = comp_flows_.size();
  while (left > 0) {
    while (!levels_.empty()) {
      const Level& top = levels_.front();
      const Link& l = links_[top.link];
      if (top.version == l.version && l.unfixed > 0 && !l.saturated) break;
      std::pop_heap(levels_.begin(), levels_.end(), LevelAfter{});
      levels_.pop_back();
    }
    while (next_cap < capped_.size() && flows_[capped_[next_cap]].fixed) ++next_cap;

    if (next_cap < capped_.size() &&
        (levels_.empty() || flows_[capped_[next_cap]].cap <= levels_.front().share)) {
      // A flow reaches its own cap before any link saturates.
      const FlowId id = capped_[next_cap++];
      fix(id, flows_[id].cap);
      --left;
    } else if (!levels_.empty()) {
      // The most constrained link saturates: its unfixed flows stop at its fair share.
      const Level top = levels_.front();
      std::pop_heap(levels_.begin(), levels_.end(), LevelAfter{});
      levels_.pop_back();
      Link& l = links_[top.link];
      l.saturated = true;
      for (FlowId id : l.flows) {
        if (flows_[id].fixed) continue;
        fix(id, top.share);
        --left;
      }
    } else {
      // Only flows with neither links nor a cap remain.
      for (FlowId id : comp_flows_) {
        if (flows_[id].fixed) continue;
        fix(id, std::numeric_limits<double>::infinity());
        --left;
      }
    }
  }
}

}  // namespace stretto::sim
