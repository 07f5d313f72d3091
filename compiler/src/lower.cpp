// Order directives -> temporal edges; lowering to per-device-class programs; deadlock check.
//
// Device classes: devices that belong to exactly the same device sets run exactly the same
// nodes (e.g. all DP replicas of a stage), so their programs are computed once.
// `order` is applied per class: the groups of one directive, restricted to the nodes that run
// on the class ("the order as this device sees it"), chain one after another; every node of a
// group waits for every node of the previous non-empty group. Transfers are never members of
// order groups: the lowering places them (after their producer; receivers see them where the
// global order puts them).
// Lowering is ONE global topological sort (Kahn, with a priority key), so every device program
// is a subsequence of the same order and peers see shared transfers/collectives consistently.
// If the sort cannot finish, data + temporal edges contain a cycle: a deadlock, reported in the
// user's terms with the directives involved.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <span>
#include <unordered_map>

#include "internal.h"

namespace stretto::compiler::detail {

using plan::Directive;
using plan::JsonSource;
using plan::Pass;
using plan::TagCond;

namespace {

uint8_t pass_order(Pass p) {
  switch (p) {
    case Pass::kF:
      return 0;
    case Pass::kB:
    case Pass::kBI:
      return 1;
    case Pass::kBW:
      return 2;
    case Pass::kNone:
      break;
  }
  return 3;
}

std::string short_name(const CompiledPlan& cp, uint32_t id) {
  return cp.dag.node_name(id, cp.model);
}

// Device classes (devices in exactly the same device sets) and the classes each device set
// reaches.
struct ClassIndex {
  std::vector<std::vector<uint32_t>> classes_of_set;
  // The classes a node runs on (a transfer: both ends'); `out` is scratch for transfers.
  std::span<const uint32_t> of(const Node& n, std::vector<uint32_t>& out) const {
    if (n.kind == NodeKind::kBarrier) return {};
    if (n.devs2 == kNone) return classes_of_set[n.devs];
    out = classes_of_set[n.devs];
    for (uint32_t c : classes_of_set[n.devs2])
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    return out;
  }
};

ClassIndex assign_device_classes(CompiledPlan& cp) {
  const TrainingDag& dag = cp.dag;
  const size_t nsets = dag.device_sets.size();
  std::vector<std::vector<uint32_t>> sig(cp.num_devices);
  for (uint32_t s = 0; s < nsets; ++s)
    for (int32_t d : dag.device_sets[s].devices) sig[d].push_back(s);
  std::map<std::vector<uint32_t>, int32_t> class_of_sig;
  cp.class_of_device.assign(cp.num_devices, -1);
  cp.classes.clear();
  for (int d = 0; d < cp.num_devices; ++d) {
    if (sig[d].empty()) continue;
    auto [it, added] = class_of_sig.emplace(sig[d], static_cast<int32_t>(cp.classes.size()));
    if (added) cp.classes.emplace_back();
    cp.classes[it->second].devices.push_back(d);
    cp.class_of_device[d] = it->second;
  }
  ClassIndex ci;
  ci.classes_of_set.resize(nsets);
  for (uint32_t c = 0; c < cp.classes.size(); ++c)
    for (uint32_t s : sig[cp.classes[c].devices[0]]) ci.classes_of_set[s].push_back(c);
  return ci;
}

uint64_t region_key(int32_t pp, int32_t mb, Pass p) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(pp + 1)) << 32) |
         (static_cast<uint64_t>(static_cast<uint32_t>(mb + 1)) << 4) | static_cast<uint64_t>(p);
}

// Orderable nodes (compute and collectives) by (PP, MB, PASS) key, as one CSR: key_of maps a
// key to its slot (nodes of one region pass are made one after another, so the map is asked
// once per run of a key).
struct OrderableIndex {
  std::unordered_map<uint64_t, uint32_t> key_of;
  std::vector<uint32_t> orderable, key_begin;
  std::vector<uint32_t> by_key;  // node ids ascending within a key

  // Appends the nodes `f` matches to `out`; returns how many.
  size_t match(const TrainingDag& dag, const plan::Filter& f, std::vector<uint32_t>& out) const {
    const auto& c = f.cond;
    const size_t before = out.size();
    if (c[0].kind == TagCond::kEquals && c[3].kind == TagCond::kEquals && f.pass) {
      if (auto it = key_of.find(region_key(c[0].value, c[3].value, *f.pass)); it != key_of.end()) {
        const uint32_t* first = by_key.data() + key_begin[it->second];
        const uint32_t* last = by_key.data() + key_begin[it->second + 1];
        if (c[1].kind == TagCond::kAny && c[2].kind == TagCond::kAny)  // the key is the filter
          out.insert(out.end(), first, last);
        else
          for (const uint32_t* i = first; i != last; ++i)
            if (f.matches(dag.nodes[*i].tags)) out.push_back(*i);
      }
    } else {
      for (uint32_t i : orderable)
        if (f.matches(dag.nodes[i].tags)) out.push_back(i);
    }
    return out.size() - before;
  }
};

OrderableIndex index_orderable(const TrainingDag& dag) {
  OrderableIndex ix;
  auto& key_begin = ix.key_begin;
  // (Sized up front and written by index, here and below: a call per node and list to a
  // push_back the compiler did not inline showed in profiles.)
  std::vector<uint32_t> slot_of_node(dag.nodes.size());
  ix.orderable.resize(dag.nodes.size());
  {
    uint64_t last = UINT64_MAX;
    uint32_t slot = 0;
    size_t m = 0;
    for (uint32_t i = 0; i < dag.nodes.size(); ++i) {
      const Node& n = dag.nodes[i];
      if (n.kind != NodeKind::kCompute && n.kind != NodeKind::kCollective) continue;
      const uint64_t k = region_key(n.tags.pp(), n.tags.mb(), n.tags.pass);
      if (k != last) {
        slot = ix.key_of.try_emplace(k, static_cast<uint32_t>(ix.key_of.size())).first->second;
        last = k;
        if (slot + 2 > key_begin.size()) key_begin.resize(slot + 2, 0);
      }
      ++key_begin[slot + 1];
      ix.orderable[m] = i;
      slot_of_node[m++] = slot;
    }
    ix.orderable.resize(m);
    slot_of_node.resize(m);
  }
  for (size_t k = 1; k < key_begin.size(); ++k) key_begin[k] += key_begin[k - 1];
  ix.by_key.resize(ix.orderable.size());
  std::vector<uint32_t> fill(key_begin.begin(),
                             key_begin.empty() ? key_begin.end() : key_begin.end() - 1);
  for (size_t j = 0; j < ix.orderable.size(); ++j)
    ix.by_key[fill[slot_of_node[j]]++] = ix.orderable[j];
  return ix;
}

// Order directives -> temporal edges and barriers, and each ordered node's rank (its group's
// position on its class; the lowest where several directives order it).
class OrderDirectives {
 public:
  OrderDirectives(CompiledPlan& cp, const JsonSource* src, const ClassIndex& classes,
                  const OrderableIndex& index)
      : cp_(cp), dag_(cp.dag), src_(src), classes_(classes), index_(index),
        ncls_(cp.classes.size()) {
    add_barrier_sets();
    index_data_predecessors();
    rank_.assign(dag_.nodes.size(), -1);
    reserve();
    stamp_.assign(dag_.nodes.size(), 0);
    has_succ_.assign(dag_.nodes.size(), 0);
    prev_group_.resize(ncls_);
    prev_sinks_.resize(ncls_);
    group_pos_.resize(ncls_);
    proj_.resize(ncls_);
  }

  // Applies every order directive; false (with diagnostics) when a filter matches nothing.
  bool apply(Diagnostics& diags) {
    bool ok = true;
    for (const auto& d : cp_.plan.schedule) {
      if (d.op != plan::DirectiveOp::kOrder) continue;
      for (auto& p : prev_group_) p.clear();
      for (auto& p : prev_sinks_) p.clear();
      std::fill(group_pos_.begin(), group_pos_.end(), 0);
      for (size_t g = 0; g < d.groups.size(); ++g) {
        ok = collect_members(d, g, diags) && ok;
        for (auto& p : proj_) p.clear();
        for (uint32_t m : members_)
          for (uint32_t c : classes_.of(dag_.nodes[m], cls_)) proj_[c].push_back(m);
        for (uint32_t c = 0; c < ncls_; ++c)
          if (!proj_[c].empty()) chain_group(d, g, c);
      }
    }
    return ok;
  }
  // Each node's rank (moved out: call once, after apply).
  std::vector<int32_t> take_rank() { return std::move(rank_); }

 private:
  // Barriers run (as zero-time joins) on every device of their class.
  void add_barrier_sets() {
    class_set_.resize(ncls_);
    for (uint32_t c = 0; c < ncls_; ++c) {
      dag_.device_sets.push_back(DeviceSet{cp_.classes[c].devices, 1});
      class_set_[c] = static_cast<uint32_t>(dag_.device_sets.size() - 1);
    }
  }
  // Data predecessors of each node (CSR over the edges so far: all data edges).
  void index_data_predecessors() {
    in_begin_.assign(dag_.nodes.size() + 1, 0);
    for (const auto& e : dag_.edges) ++in_begin_[e.to + 1];
    for (size_t i = 0; i < dag_.nodes.size(); ++i) in_begin_[i + 1] += in_begin_[i];
    in_src_.resize(in_begin_.back());
    std::vector<uint32_t> fill(in_begin_.begin(), in_begin_.end() - 1);
    for (const auto& e : dag_.edges) in_src_[fill[e.to]++] = e.from;
  }
  // Temporal edges (a few per group and class: its ends and feeds, below) and barriers (at
  // most one per group and class, each joining at least two nodes), reserved once: growing the
  // node array by doubling copied it whole. A group usually falls on one class (builders order
  // each rank on its own), so that is what is reserved; a plan whose groups span several
  // classes regrows once. (Reserving for every class copied both arrays on most plans.)
  void reserve() {
    const size_t orderable = index_.orderable.size();
    const size_t groups = order_groups(cp_.plan);
    dag_.edges.reserve(dag_.edges.size() + std::min(8 * groups, 2 * orderable) + 1024);
    const size_t barriers = std::min(groups, orderable / 2 + 1);
    dag_.nodes.reserve(dag_.nodes.size() + barriers);
    rank_.reserve(dag_.nodes.size() + barriers);
  }

  // The members of group g of directive d (sorted, unique) into members_; false (with a
  // diagnostic) when one of its filters matches nothing.
  bool collect_members(const Directive& d, size_t g, Diagnostics& diags) {
    bool ok = true;
    members_.clear();
    for (const auto& f : d.groups[g]) {
      // Each filter's matches come in increasing node order: merged into those before them
      // (a sort of the whole group cost more than the rest of the directive on a DualPipeV
      // reference, whose overlap groups have several filters each).
      const size_t mid = members_.size();
      const size_t matched = index_.match(dag_, f, members_);
      if (matched > 0 && mid > 0 && members_[mid] < members_[mid - 1])
        std::inplace_merge(members_.begin(),
                           members_.begin() + static_cast<std::ptrdiff_t>(mid), members_.end());
      if (matched == 0) {
        // The weight gradients of ops that have none: their backward is all BI (no BW
        // nodes), so the group is empty where the same filter's BI is not.
        if (f.pass == Pass::kBW) {
          plan::Filter bi = f;
          bi.pass = Pass::kBI;
          scratch_.clear();
          if (index_.match(dag_, bi, scratch_) > 0) continue;
        }
        std::string hint = "check PP, MB and PASS against the model and the split";
        if (f.pass == Pass::kB)
          hint =
              "if this region's backward is split into BI/BW by another order filter, "
              "name BI and BW here too";
        diags.push_back(diag_at(src_, cp_.plan.file, f.pointer,
                                fmt::format("order filter {} matches nothing", f.str()), hint,
                                d.index));
        ok = false;
      }
    }
    STRETTO_ASSERT(std::is_sorted(members_.begin(), members_.end()), "matches merged in order");
    members_.erase(std::unique(members_.begin(), members_.end()), members_.end());
    return ok;
  }

  // Group g of a class waits for group g - 1 through the ends of the groups' own dataflow: a
  // member that depends on another member (data edge) already waits through it, and a member
  // on which another depends is already waited for. So only the sinks of g - 1 and the sources
  // of g need temporal edges; the rest follows transitively, for every instance on every
  // device (a data edge's instance on a device depends on its producer's instance there).
  // The order is the same, since a node becomes ready when its last predecessor is done
  // either way; only the edge count drops (on a DualPipeV plan, from two per ordered node to
  // a few per group).
  void ends_of(const std::vector<uint32_t>& b) {
    ++serial_;
    for (uint32_t m : b) stamp_[m] = serial_;
    sources_.clear();
    sinks_.clear();
    for (uint32_t m : b) {
      bool source = true;
      for (uint32_t k = in_begin_[m]; k < in_begin_[m + 1]; ++k)
        if (stamp_[in_src_[k]] == serial_ && in_src_[k] != m) {
          source = false;
          has_succ_[in_src_[k]] = serial_;
        }
      if (source) sources_.push_back(m);
    }
    for (uint32_t m : b)
      if (has_succ_[m] != serial_) sinks_.push_back(m);
  }
  // Whether two sorted projections share a member (then every pair is kept: a node ordered
  // after itself is a contradiction the deadlock check must see whole).
  static bool share(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
      if (a[i] == b[j]) return true;
      a[i] < b[j] ? ++i : ++j;
    }
    return false;
  }
  // An overlap group starts as a unit (DualPipe's runtime receives the inputs of both
  // chunks before running the overlapped F&B): each member waits for every transfer
  // that feeds any member of the group on this device. Collects those transfers into feeds_.
  void collect_feeds(const std::vector<uint32_t>& b) {
    for (uint32_t m : b)
      for (uint32_t k = in_begin_[m]; k < in_begin_[m + 1]; ++k) {
        uint32_t t = in_src_[k];
        if (dag_.nodes[t].kind == NodeKind::kTransfer) feeds_.push_back(t);
      }
    std::sort(feeds_.begin(), feeds_.end());
    feeds_.erase(std::unique(feeds_.begin(), feeds_.end()), feeds_.end());
  }

  // Chains class c's projection of group g after its previous non-empty group: temporal edges
  // from the previous group's sinks to this one's sources, or through a barrier when both
  // have several members; overlap groups also wait for their feeding transfers.
  void chain_group(const Directive& d, size_t g, uint32_t c) {
    auto& a = prev_group_[c];
    auto& b = proj_[c];  // sorted (members are)
    ends_of(b);
    const bool whole = !a.empty() && share(a, b);
    const std::vector<uint32_t>& from = whole ? a : prev_sinks_[c];
    const std::vector<uint32_t>& to = whole ? b : sources_;
    const bool barrier = a.size() > 1 && b.size() > 1;
    feeds_.clear();
    // (through the group's barrier when it has one, else directly to its sources)
    if (d.groups[g].size() > 1) collect_feeds(b);
    if (!barrier || a.empty())
      for (uint32_t t : feeds_)
        for (uint32_t m : to) {
          bool direct = false;
          for (uint32_t k = in_begin_[m]; k < in_begin_[m + 1] && !direct; ++k)
            direct = in_src_[k] == t;
          if (!direct) dag_.edges.push_back({t, m, EdgeKind::kTemporal, d.index});
        }
    for (uint32_t m : b)
      rank_[m] = rank_[m] < 0 ? group_pos_[c] : std::min(rank_[m], group_pos_[c]);
    if (!a.empty()) {
      if (!barrier) {
        for (uint32_t x : from)
          for (uint32_t y : to)
            dag_.edges.push_back({x, y, EdgeKind::kTemporal, d.index});
      } else {
        add_barrier(d, g, c, from, to);
      }
    }
    prev_sinks_[c].assign(sinks_.begin(), sinks_.end());
    a.swap(b);
    ++group_pos_[c];
  }
  void add_barrier(const Directive& d, size_t g, uint32_t c, const std::vector<uint32_t>& from,
                   const std::vector<uint32_t>& to) {
    Node bar;
    bar.kind = NodeKind::kBarrier;
    bar.directive = d.index;
    bar.tags = dag_.nodes[proj_[c][0]].tags;
    bar.devs = class_set_[c];
    bar.region_k = static_cast<uint16_t>(std::min<size_t>(g, 65535));
    dag_.nodes.push_back(bar);
    rank_.push_back(group_pos_[c]);
    uint32_t bid = static_cast<uint32_t>(dag_.nodes.size() - 1);
    for (uint32_t x : from) dag_.edges.push_back({x, bid, EdgeKind::kTemporal, d.index});
    for (uint32_t t : feeds_) dag_.edges.push_back({t, bid, EdgeKind::kTemporal, d.index});
    for (uint32_t y : to) dag_.edges.push_back({bid, y, EdgeKind::kTemporal, d.index});
  }

  CompiledPlan& cp_;
  TrainingDag& dag_;
  const JsonSource* src_;
  const ClassIndex& classes_;
  const OrderableIndex& index_;
  const size_t ncls_;
  std::vector<uint32_t> class_set_;           // per class: its barriers' device set
  std::vector<uint32_t> in_begin_, in_src_;   // data predecessors (CSR)
  std::vector<int32_t> rank_;                 // per node; -1: not ordered
  std::vector<uint32_t> members_, cls_, feeds_, scratch_;
  std::vector<std::vector<uint32_t>> prev_group_;  // per class: last non-empty projection
  std::vector<std::vector<uint32_t>> prev_sinks_;  // ... its members no member depends on
  std::vector<uint32_t> sources_, sinks_;
  std::vector<uint32_t> stamp_, has_succ_;
  uint32_t serial_ = 0;
  std::vector<int32_t> group_pos_;
  std::vector<std::vector<uint32_t>> proj_;  // per class: the current group's members there
};

// ---- global Kahn with priority ----
// The global order of a finalized DAG; shorter than the DAG when it has a cycle (`indeg` then
// says which nodes never became ready).
std::vector<uint32_t> global_order(const TrainingDag& dag, const std::vector<int32_t>& rank,
                                   std::vector<uint32_t>& indeg) {
  const size_t n = dag.nodes.size();
  indeg.resize(n);
  for (size_t i = 0; i < n; ++i) indeg[i] = dag.pred_begin[i + 1] - dag.pred_begin[i];
  std::vector<int32_t> eff(rank);
  for (auto& r : eff) r = std::max(r, 0);
  // Priority (rank, tie, pass, mb, id), smallest first: tie, pass and mb packed per node into
  // one word up front (mb's sign bit flipped so that unsigned order is signed order), so the
  // sort reads 8 bytes per node instead of the node.
  std::vector<uint64_t> tie_pass_mb(n);
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = dag.nodes[i];
    const uint64_t tie = nd.kind == NodeKind::kBarrier ? 0 : nd.kind == NodeKind::kTransfer ? 1 : 2;
    tie_pass_mb[i] = tie << 40 | static_cast<uint64_t>(pass_order(nd.tags.pass)) << 32 |
                     (static_cast<uint32_t>(nd.tags.mb()) ^ 0x80000000u);
  }
  struct Item {
    int32_t rank;
    uint32_t id;
    uint64_t key;
    bool operator>(const Item& o) const {
      return std::tie(rank, key, id) > std::tie(o.rank, o.key, o.id);
    }
  };
  auto item = [&](uint32_t i) { return Item{eff[i], i, tie_pass_mb[i]}; };
  // The ready set is the heap plus `next`, its smallest item when `has_next`: a node made ready
  // by the one just ordered is usually ordered right after it (a chain of ops), and then skips
  // the heap. Always the smallest of the whole set is taken, so the order is the same.
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (uint32_t i = 0; i < n; ++i)
    if (indeg[i] == 0) ready.push(item(i));
  std::vector<uint32_t> order(n);
  size_t num_ordered = 0;
  Item next{};
  bool has_next = false;
  while (has_next || !ready.empty()) {
    uint32_t i;
    if (has_next && (ready.empty() || ready.top() > next)) {
      i = next.id;
      has_next = false;
    } else {
      i = ready.top().id;
      ready.pop();
    }
    order[num_ordered++] = i;
    for (uint32_t k = dag.succ_begin[i]; k < dag.succ_begin[i + 1]; ++k) {
      const uint32_t j = dag.succ[k];
      if (rank[j] < 0) eff[j] = std::max(eff[j], eff[i]);
      if (--indeg[j] == 0) {
        const Item it = item(j);
        if (!has_next) {
          next = it;
          has_next = true;
        } else if (next > it) {
          ready.push(next);
          next = it;
        } else {
          ready.push(it);
        }
      }
    }
  }
  order.resize(num_ordered);
  return order;
}

// One cycle among the nodes that never became ready (indeg > 0), in forward order:
// `cyc_edges[k]` is the edge into `cyc[k]` (from cyc[k-1], cyclically).
void find_cycle(const TrainingDag& dag, const std::vector<uint32_t>& indeg,
                std::vector<uint32_t>& cyc, std::vector<uint32_t>& cyc_edges) {
  const size_t n = dag.nodes.size();
  std::vector<char> left(n, 0);
  for (size_t i = 0; i < n; ++i) left[i] = indeg[i] > 0;
  uint32_t start = 0;
  while (!left[start]) ++start;
  std::vector<int32_t> seen_at(n, -1);
  std::vector<uint32_t> path;  // walking predecessors
  std::vector<uint32_t> via;   // edge index used to reach path[k] from path[k+1]
  uint32_t x = start;
  while (seen_at[x] < 0) {
    seen_at[x] = static_cast<int32_t>(path.size());
    path.push_back(x);
    uint32_t next = UINT32_MAX, e_used = 0;
    // Prefer temporal edges so the cycle shows the order directives at fault.
    for (int pass = 0; pass < 2 && next == UINT32_MAX; ++pass)
      for (uint32_t k = dag.pred_begin[x]; k < dag.pred_begin[x + 1]; ++k) {
        const Edge& e = dag.edges[dag.pred[k]];
        if (!left[e.from]) continue;
        if (pass == 0 && e.kind != EdgeKind::kTemporal) continue;
        next = e.from;
        e_used = dag.pred[k];
        break;
      }
    STRETTO_ASSERT(next != UINT32_MAX, "a blocked node must have a blocked predecessor");
    via.push_back(e_used);
    x = next;
  }
  // Cycle: path[seen_at[x]] .. path.back() walking backwards; reverse to forward order.
  cyc.assign(path.begin() + seen_at[x], path.end());
  cyc_edges.assign(via.begin() + seen_at[x], via.end());
  std::reverse(cyc.begin(), cyc.end());
  std::reverse(cyc_edges.begin(), cyc_edges.end());
}

// ---- deadlock: the diagnostic of a DAG whose global order could not finish ----
Diagnostic deadlock_diagnostic(const CompiledPlan& cp, const JsonSource* src,
                               const std::vector<uint32_t>& indeg) {
  const TrainingDag& dag = cp.dag;
  std::vector<uint32_t> cyc, cyc_edges;
  find_cycle(dag, indeg, cyc, cyc_edges);
  const size_t len = cyc.size();
  std::set<int32_t> dirs;
  int order_steps = 0;  // temporal constraints, counting a barrier hop once
  std::set<int32_t> devices;
  std::vector<std::string> lines;
  std::string last;
  for (size_t k = 0; k < len; ++k) {
    const Edge& out = dag.edges[cyc_edges[(k + 1) % len]];
    const Node& nd = dag.nodes[cyc[k]];
    if (out.kind == EdgeKind::kTemporal) {
      dirs.insert(out.directive);
      if (dag.nodes[out.to].kind != NodeKind::kBarrier) ++order_steps;
    }
    if (nd.kind == NodeKind::kBarrier) continue;
    for (int32_t d : dag.device_sets[nd.devs].devices) devices.insert(d);
    std::string tagkey = nd.tags.str() + "/" + std::to_string(nd.devs) + "/" +
                         std::to_string(static_cast<int>(nd.kind));
    std::string why = out.kind == EdgeKind::kTemporal
                          ? fmt::format("must finish before (order directive {})", out.directive)
                          : "must finish before (data dependency)";
    if (tagkey == last && out.kind == EdgeKind::kData) continue;  // same region pass
    last = tagkey;
    lines.push_back(short_name(cp, cyc[k]));
    lines.push_back("  " + why);
  }
  lines.push_back("(the first op again)");
  Diagnostic dg;
  const bool contradiction = order_steps == 1;
  dg.message = contradiction
                   ? "order contradicts dataflow: an op is ordered before one it depends on"
                   : fmt::format(
                         "deadlock: the order directives create a cycle of waits "
                         "through {} ops",
                         (lines.size() - 1) / 2);
  int32_t first_dir = dirs.empty() ? -1 : *dirs.begin();
  std::string ptr = first_dir >= 0 ? cp.plan.schedule[first_dir].pointer : "/schedule";
  Diagnostic at = diag_at(src, cp.plan.file, ptr, "", "", first_dir);
  dg.loc = at.loc;
  dg.source_line = at.source_line;
  dg.directive = first_dir;
  for (const auto& l : lines) dg.message += "\n    " + l;
  dg.hint = contradiction
                ? "on one device, an op must come after the ops it consumes (a backward after "
                  "its forward, BW after BI, a later stage after an earlier one)"
            : devices.size() > 1
                ? "the devices wait on each other's transfers: ranks that exchange "
                  "microbatches must order them compatibly (see the cycle above)"
                : "the order groups on this device wait on each other";
  for (int32_t di : dirs)
    if (di != first_dir)
      dg.notes.push_back(
          {diag_at(src, cp.plan.file, cp.plan.schedule[di].pointer, "", "", di).loc,
           fmt::format("order directive {} is part of the cycle", di)});
  return dg;
}

// ---- per-class programs ----
// Sizes first (per class and per class and stream), then each list filled by index.
void build_class_programs(CompiledPlan& cp, const ClassIndex& classes) {
  const TrainingDag& dag = cp.dag;
  const size_t ncls = cp.classes.size();
  const size_t ns = dag.streams.size();
  std::vector<uint32_t> cls;  // scratch
  std::vector<uint32_t> fill_prog(ncls, 0), fill_stream(ncls * ns, 0);
  for (uint32_t i : cp.topo_order) {
    const Node& nd = dag.nodes[i];
    if (nd.kind == NodeKind::kBarrier) continue;
    for (uint32_t c : classes.of(nd, cls)) {
      ++fill_prog[c];
      ++fill_stream[c * ns + nd.stream];
    }
  }
  for (uint32_t c = 0; c < ncls; ++c) {
    auto& cl = cp.classes[c];
    cl.program.assign(fill_prog[c], 0);
    cl.streams.assign(ns, {});
    for (size_t st = 0; st < ns; ++st) cl.streams[st].resize(fill_stream[c * ns + st]);
  }
  std::fill(fill_prog.begin(), fill_prog.end(), 0);
  std::fill(fill_stream.begin(), fill_stream.end(), 0);
  for (uint32_t i : cp.topo_order) {
    const Node& nd = dag.nodes[i];
    if (nd.kind == NodeKind::kBarrier) continue;
    for (uint32_t c : classes.of(nd, cls)) {
      cp.classes[c].program[fill_prog[c]++] = i;
      cp.classes[c].streams[nd.stream][fill_stream[c * ns + nd.stream]++] = i;
    }
  }
}

}  // namespace

bool order_and_lower(CompiledPlan& cp, const JsonSource* src, bool class_programs,
                     Diagnostics& diags) {
  const ClassIndex classes = assign_device_classes(cp);
  const OrderableIndex index = index_orderable(cp.dag);
  std::vector<int32_t> rank;
  {
    OrderDirectives od(cp, src, classes, index);
    if (!od.apply(diags)) return false;
    rank = od.take_rank();
  }
  cp.dag.finalize();
  std::vector<uint32_t> indeg;
  std::vector<uint32_t> order = global_order(cp.dag, rank, indeg);
  if (order.size() < cp.dag.nodes.size()) {
    diags.push_back(deadlock_diagnostic(cp, src, indeg));
    return false;
  }
  cp.topo_order = std::move(order);
  if (class_programs) build_class_programs(cp, classes);
  return true;
}

}  // namespace stretto::compiler::detail
