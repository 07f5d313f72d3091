#include "stretto/engine/maxmin.h"

#include <algorithm>
#include <limits>

#include "stretto/support/diag.h"

namespace stretto::engine {

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
  flow_stamp_.clear();
  links_.assign(capacities.size(), Link{});
  link_stamp_.assign(capacities.size(), 0);
  link_flows_.resize(capacities.size());
  comp_link_buf_.assign(capacities.size() + 1, 0);
  comp_flow_buf_.assign(1, 0);
  comp_links_ = {};
  comp_flows_ = {};
  for (size_t i = 0; i < capacities.size(); ++i) {
    STRETTO_ASSERT(capacities[i] > 0, "link capacity must be positive");
    links_[i].capacity = capacities[i];
    link_flows_[i].clear();  // keeps its capacity: no allocation when the same engine runs again
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
    flow_stamp_.push_back(0);
    comp_flow_buf_.push_back(0);
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
    link_flows_[l].push_back(id);
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
    std::vector<FlowId>& on = link_flows_[l];
    // Linear search: re-solving this link's component costs at least as much anyway.
    auto it = std::find(on.begin(), on.end(), id);
    STRETTO_ASSERT(it != on.end(), "flow missing from its link");
    *it = on.back();
    on.pop_back();
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
    std::fill(flow_stamp_.begin(), flow_stamp_.end(), 0);
    std::fill(link_stamp_.begin(), link_stamp_.end(), 0);
    epoch_ = 1;
  }
  for (uint32_t l : dirty_links_) {
    links_[l].dirty = false;
    // (a link left without flows, as after a transfer alone on it ended: nothing to solve)
    if (link_stamp_[l] == epoch_ || link_flows_[l].empty()) continue;
    if (solve_alone(l)) continue;
    gather_from_link(l);
    if (!comp_flows_.empty()) fill();
  }
  for (FlowId f : new_flows_) {
    if (!flows_[f].alive || flow_stamp_[f] == epoch_) continue;
    gather_from_flow(f);
    fill();
  }
  dirty_links_.clear();
  new_flows_.clear();
  stats_.flows_changed += changed_.size();
  return changed_;
}

// The common component: a transfer alone on each of its links (link_flows_ of each holds it
// once). It is solved as fill() solves a one-flow component (the tightest link or the cap;
// capacity / 1 is the capacity), without the search: stamps, statistics and changed_ as the
// search and fill() leave them. False (nothing done) for any other component.
bool MaxMin::solve_alone(uint32_t link) {
  if (link_flows_[link].size() != 1) return false;
  const FlowId id = link_flows_[link].front();
  Flow& f = flows_[id];
  double rate = f.cap > 0 ? f.cap : std::numeric_limits<double>::infinity();
  for (const uint32_t* l = f.links; l != f.links + f.num_links; ++l) {
    if (link_flows_[*l].size() != 1) return false;
    rate = std::min(rate, links_[*l].capacity);
  }
  for (const uint32_t* l = f.links; l != f.links + f.num_links; ++l) link_stamp_[*l] = epoch_;
  flow_stamp_[id] = epoch_;
  ++stats_.components;
  ++stats_.flows_solved;
  stats_.links_solved += f.num_links;
  if (f.rate != rate) {
    f.rate = rate;
    changed_.push_back(id);
  }
  return true;
}

void MaxMin::gather_from_link(uint32_t link) {
  link_stamp_[link] = epoch_;
  comp_link_buf_[0] = link;
  expand(1, 0);
}

void MaxMin::gather_from_flow(FlowId flow) {
  flow_stamp_[flow] = epoch_;
  comp_flow_buf_[0] = flow;
  expand(0, 1);
}

// Breadth-first closure under "flow crosses link" of the seed already in the buffers. Each visit
// writes the candidate at the end and advances the end only if it was new: no branch to
// mispredict, which dominates the cost of searching large components.
void MaxMin::expand(size_t num_links, size_t num_flows) {
  uint32_t* const flow_stamp = flow_stamp_.data();
  uint32_t* const link_stamp = link_stamp_.data();
  uint32_t* const comp_links = comp_link_buf_.data();
  FlowId* const comp_flows = comp_flow_buf_.data();
  const Flow* const flows = flows_.data();
  const uint32_t epoch = epoch_;
  size_t li = 0, fi = 0;
  while (li < num_links || fi < num_flows) {
    for (; li < num_links; ++li) {
      for (const FlowId f : link_flows_[comp_links[li]]) {
        comp_flows[num_flows] = f;
        num_flows += flow_stamp[f] != epoch;
        flow_stamp[f] = epoch;
      }
    }
    for (; fi < num_flows; ++fi) {
      const Flow& f = flows[comp_flows[fi]];
      for (const uint32_t* l = f.links; l != f.links + f.num_links; ++l) {
        comp_links[num_links] = *l;
        num_links += link_stamp[*l] != epoch;
        link_stamp[*l] = epoch;
      }
    }
  }
  comp_links_ = {comp_links, num_links};
  comp_flows_ = {comp_flows, num_flows};
  ++stats_.components;
  stats_.flows_solved += num_flows;
  stats_.links_solved += num_links;
}

double MaxMin::share(uint32_t link) const {
  const Link& l = links_[link];
  return std::max(0.0, l.remaining) / static_cast<double>(l.unfixed);
}

void MaxMin::push_level(uint32_t link) {
  levels_.push_back({share(link), link});
  std::push_heap(levels_.begin(), levels_.end(), LevelAfter{});
}

// Makes the heap's top the link with the smallest current share. Fixing a flow at the current
// level never lowers the share of its other links, so keys only grow: a top whose share grew
// since it was pushed is re-pushed with its current share (at most one entry per link).
void MaxMin::settle_levels() {
  while (!levels_.empty()) {
    const Level top = levels_.front();
    const Link& l = links_[top.link];
    if (l.unfixed > 0 && !l.saturated) {
      const double now = share(top.link);
      if (now <= top.share) return;
      std::pop_heap(levels_.begin(), levels_.end(), LevelAfter{});
      levels_.back() = {now, top.link};
      std::push_heap(levels_.begin(), levels_.end(), LevelAfter{});
      continue;
    }
    std::pop_heap(levels_.begin(), levels_.end(), LevelAfter{});
    levels_.pop_back();
  }
}

void MaxMin::fix(FlowId id, double rate) {
  Flow& f = flows_[id];
  f.fixed = true;
  if (f.rate != rate) {
    f.rate = rate;
    changed_.push_back(id);
  }
  Link* const links = links_.data();
  for (const uint32_t* l = f.links; l != f.links + f.num_links; ++l) {
    links[*l].remaining -= rate;
    --links[*l].unfixed;
  }
}

// Progressive filling over the current component (comp_links_, comp_flows_).
void MaxMin::fill() {
  if (comp_flows_.size() == 1) {
    // Common case (a transfer alone on its links): the tightest link or the cap. A link that
    // the flow lists k times holds it k times.
    const FlowId id = comp_flows_[0];
    double rate = flows_[id].cap > 0 ? flows_[id].cap : std::numeric_limits<double>::infinity();
    for (uint32_t l : comp_links_) {
      rate = std::min(rate, links_[l].capacity / static_cast<double>(link_flows_[l].size()));
    }
    if (flows_[id].rate != rate) {
      flows_[id].rate = rate;
      changed_.push_back(id);
    }
    return;
  }
  levels_.clear();
  capped_.clear();
  for (uint32_t id : comp_links_) {
    Link& l = links_[id];
    l.remaining = l.capacity;
    l.unfixed = static_cast<uint32_t>(link_flows_[id].size());
    l.saturated = false;
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
    settle_levels();
    while (next_cap < capped_.size() && flows_[capped_[next_cap]].fixed) ++next_cap;

    if (next_cap < capped_.size() &&
        (levels_.empty() || flows_[capped_[next_cap]].cap <= levels_.front().share)) {
      // A flow reaches its own cap before any link saturates.
      const FlowId id = capped_[next_cap++];
      fix(id, flows_[id].cap);
      --left;
    } else if (!levels_.empty()) {
      // The most constrained link saturates: its unfixed flows stop at its fair share.
      const uint32_t link = levels_.front().link;
      const double level = share(link);
      std::pop_heap(levels_.begin(), levels_.end(), LevelAfter{});
      levels_.pop_back();
      links_[link].saturated = true;
      for (FlowId id : link_flows_[link]) {
        if (flows_[id].fixed) continue;
        fix(id, level);
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

}  // namespace stretto::engine
