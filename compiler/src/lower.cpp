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

namespace stretto::detail {
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

}  // namespace

bool order_and_lower(CompiledPlan& cp, const JsonSource* src, bool class_programs,
                     Diagnostics& diags) {
  TrainingDag& dag = cp.dag;
  const size_t nsets = dag.device_sets.size();
  // ---- device classes ----
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
  const size_t ncls = cp.classes.size();
  std::vector<std::vector<uint32_t>> classes_of_set(nsets);
  for (uint32_t c = 0; c < ncls; ++c)
    for (uint32_t s : sig[cp.classes[c].devices[0]]) classes_of_set[s].push_back(c);
  // The classes a node runs on (a transfer: both ends'); `out` is scratch for transfers.
  auto node_classes = [&](const Node& n, std::vector<uint32_t>& out) -> std::span<const uint32_t> {
    if (n.kind == NodeKind::kBarrier) return {};
    if (n.devs2 == kNone) return classes_of_set[n.devs];
    out = classes_of_set[n.devs];
    for (uint32_t c : classes_of_set[n.devs2])
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    return out;
  };

  // ---- order directives ----
  auto key = [](int32_t pp, int32_t mb, Pass p) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(pp + 1)) << 32) |
           (static_cast<uint64_t>(static_cast<uint32_t>(mb + 1)) << 4) | static_cast<uint64_t>(p);
  };
  // Orderable nodes by (PP, MB, PASS) key, as one CSR: key_of maps a key to its slot (nodes of
  // one region pass are made one after another, so the map is asked once per run of a key).
  std::unordered_map<uint64_t, uint32_t> key_of;
  // (Sized up front and written by index, here and below: this function is too large for the
  // compiler to inline push_back, and a call per node and list showed in profiles.)
  std::vector<uint32_t> orderable(dag.nodes.size()), slot_of_node(dag.nodes.size()), key_begin;
  {
    uint64_t last = UINT64_MAX;
    uint32_t slot = 0;
    size_t m = 0;
    for (uint32_t i = 0; i < dag.nodes.size(); ++i) {
      const Node& n = dag.nodes[i];
      if (n.kind != NodeKind::kCompute && n.kind != NodeKind::kCollective) continue;
      const uint64_t k = key(n.tags.pp(), n.tags.mb(), n.tags.pass);
      if (k != last) {
        slot = key_of.try_emplace(k, static_cast<uint32_t>(key_of.size())).first->second;
        last = k;
        if (slot + 2 > key_begin.size()) key_begin.resize(slot + 2, 0);
      }
      ++key_begin[slot + 1];
      orderable[m] = i;
      slot_of_node[m++] = slot;
    }
    orderable.resize(m);
    slot_of_node.resize(m);
  }
  for (size_t k = 1; k < key_begin.size(); ++k) key_begin[k] += key_begin[k - 1];
  std::vector<uint32_t> by_key(orderable.size());  // node ids ascending within a key
  {
    std::vector<uint32_t> fill(key_begin.begin(), key_begin.empty() ? key_begin.end()
                                                                     : key_begin.end() - 1);
    for (size_t j = 0; j < orderable.size(); ++j) by_key[fill[slot_of_node[j]]++] = orderable[j];
  }
  auto match = [&](const Filter& f, std::vector<uint32_t>& out) {
    const auto& c = f.cond;
    const size_t before = out.size();
    if (c[0].kind == TagCond::kEquals && c[3].kind == TagCond::kEquals && f.pass) {
      if (auto it = key_of.find(key(c[0].value, c[3].value, *f.pass)); it != key_of.end()) {
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
  };
  // Barriers run (as zero-time joins) on every device of their class.
  std::vector<uint32_t> class_set(ncls);
  for (uint32_t c = 0; c < ncls; ++c) {
    dag.device_sets.push_back(DeviceSet{cp.classes[c].devices, 1});
    class_set[c] = static_cast<uint32_t>(dag.device_sets.size() - 1);
  }
  // Data predecessors of each node (CSR over the edges so far: all data edges).
  std::vector<uint32_t> in_begin(dag.nodes.size() + 1, 0), in_src;
  for (const auto& e : dag.edges) ++in_begin[e.to + 1];
  for (size_t i = 0; i < dag.nodes.size(); ++i) in_begin[i + 1] += in_begin[i];
  in_src.resize(in_begin.back());
  {
    std::vector<uint32_t> fill(in_begin.begin(), in_begin.end() - 1);
    for (const auto& e : dag.edges) in_src[fill[e.to]++] = e.from;
  }
  std::vector<int32_t> rank(dag.nodes.size(), -1);
  bool ok = true;
  std::vector<uint32_t> members, cls, feeds, scratch;
  // Temporal edges (a few per group and class: its ends and feeds, below) and barriers (at
  // most one per group and class, each joining at least two nodes), reserved once: growing the
  // node array by doubling copied it whole. A group usually falls on one class (builders order
  // each rank on its own), so that is what is reserved; a plan whose groups span several
  // classes regrows once. (Reserving for every class copied both arrays on most plans.)
  {
    const size_t groups = order_groups(cp.plan);
    dag.edges.reserve(dag.edges.size() + std::min(8 * groups, 2 * orderable.size()) + 1024);
    const size_t barriers = std::min(groups, orderable.size() / 2 + 1);
    dag.nodes.reserve(dag.nodes.size() + barriers);
    rank.reserve(dag.nodes.size() + barriers);
  }
  std::vector<std::vector<uint32_t>> prev_group(ncls);  // per class: last non-empty projection
  std::vector<std::vector<uint32_t>> prev_sinks(ncls);  // ... its members no member depends on
  std::vector<uint32_t> sources, sinks;
  // Group g of a class waits for group g - 1 through the ends of the groups' own dataflow: a
  // member that depends on another member (data edge) already waits through it, and a member
  // on which another depends is already waited for. So only the sinks of g - 1 and the sources
  // of g need temporal edges; the rest follows transitively, for every instance on every
  // device (a data edge's instance on a device depends on its producer's instance there).
  // The order is the same, since a node becomes ready when its last predecessor is done
  // either way; only the edge count drops (on a DualPipeV plan, from two per ordered node to
  // a few per group).
  std::vector<uint32_t> stamp(dag.nodes.size(), 0), has_succ(dag.nodes.size(), 0);
  uint32_t serial = 0;
  auto ends_of = [&](const std::vector<uint32_t>& b) {
    ++serial;
    for (uint32_t m : b) stamp[m] = serial;
    sources.clear();
    sinks.clear();
    for (uint32_t m : b) {
      bool source = true;
      for (uint32_t k = in_begin[m]; k < in_begin[m + 1]; ++k)
        if (stamp[in_src[k]] == serial && in_src[k] != m) {
          source = false;
          has_succ[in_src[k]] = serial;
        }
      if (source) sources.push_back(m);
    }
    for (uint32_t m : b)
      if (has_succ[m] != serial) sinks.push_back(m);
  };
  // Whether two sorted projections share a member (then every pair is kept: a node ordered
  // after itself is a contradiction the deadlock check must see whole).
  auto share = [](const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
      if (a[i] == b[j]) return true;
      a[i] < b[j] ? ++i : ++j;
    }
    return false;
  };
  std::vector<int32_t> group_pos(ncls);
  std::vector<std::vector<uint32_t>> proj(ncls);
  for (const auto& d : cp.plan.schedule) {
    if (d.op != DirectiveOp::kOrder) continue;
    for (auto& p : prev_group) p.clear();
    for (auto& p : prev_sinks) p.clear();
    std::fill(group_pos.begin(), group_pos.end(), 0);
    for (size_t g = 0; g < d.groups.size(); ++g) {
      members.clear();
      for (const auto& f : d.groups[g]) {
        if (match(f, members) == 0) {
          // The weight gradients of ops that have none: their backward is all BI (no BW
          // nodes), so the group is empty where the same filter's BI is not.
          if (f.pass == Pass::kBW) {
            Filter bi = f;
            bi.pass = Pass::kBI;
            scratch.clear();
            if (match(bi, scratch) > 0) continue;
          }
          std::string hint = "check PP, MB and PASS against the model and the split";
          if (f.pass == Pass::kB)
            hint =
                "if this region's backward is split into BI/BW by another order filter, "
                "name BI and BW here too";
          diags.push_back(diag_at(src, cp.plan.file, f.pointer,
                                  fmt::format("order filter {} matches nothing", f.str()), hint,
                                  d.index));
          ok = false;
        }
      }
      std::sort(members.begin(), members.end());
      members.erase(std::unique(members.begin(), members.end()), members.end());
      for (auto& p : proj) p.clear();
      for (uint32_t m : members) {
        for (uint32_t c : node_classes(dag.nodes[m], cls)) proj[c].push_back(m);
      }
      const bool overlap = d.groups[g].size() > 1;
      for (uint32_t c = 0; c < ncls; ++c) {
        if (proj[c].empty()) continue;
        auto& a = prev_group[c];
        auto& b = proj[c];  // sorted (members are)
        ends_of(b);
        const bool whole = !a.empty() && share(a, b);
        const std::vector<uint32_t>& from = whole ? a : prev_sinks[c];
        const std::vector<uint32_t>& to = whole ? b : sources;
        const bool barrier = a.size() > 1 && b.size() > 1;
        feeds.clear();
        if (overlap) {
          // An overlap group starts as a unit (DualPipe's runtime receives the inputs of both
          // chunks before running the overlapped F&B): each member waits for every transfer
          // that feeds any member of the group on this device. Through the group's barrier
          // when it has one, else directly (to its sources, as above).
          for (uint32_t m : b)
            for (uint32_t k = in_begin[m]; k < in_begin[m + 1]; ++k) {
              uint32_t t = in_src[k];
              if (dag.nodes[t].kind == NodeKind::kTransfer) feeds.push_back(t);
            }
          std::sort(feeds.begin(), feeds.end());
          feeds.erase(std::unique(feeds.begin(), feeds.end()), feeds.end());
        }
        if (!barrier || a.empty())
          for (uint32_t t : feeds)
            for (uint32_t m : to) {
              bool direct = false;
              for (uint32_t k = in_begin[m]; k < in_begin[m + 1] && !direct; ++k)
                direct = in_src[k] == t;
              if (!direct) dag.edges.push_back({t, m, EdgeKind::kTemporal, d.index});
            }
        for (uint32_t m : b)
          rank[m] = rank[m] < 0 ? group_pos[c] : std::min(rank[m], group_pos[c]);
        if (!a.empty()) {
          if (!barrier) {
            for (uint32_t x : from)
              for (uint32_t y : to)
                if (x != y) dag.edges.push_back({x, y, EdgeKind::kTemporal, d.index});
          } else {
            Node bar;
            bar.kind = NodeKind::kBarrier;
            bar.directive = d.index;
            bar.tags = dag.nodes[b[0]].tags;
            bar.devs = class_set[c];
            bar.region_k = static_cast<uint16_t>(std::min<size_t>(g, 65535));
            dag.nodes.push_back(bar);
            rank.push_back(group_pos[c]);
            uint32_t bid = static_cast<uint32_t>(dag.nodes.size() - 1);
            for (uint32_t x : from) dag.edges.push_back({x, bid, EdgeKind::kTemporal, d.index});
            for (uint32_t t : feeds) dag.edges.push_back({t, bid, EdgeKind::kTemporal, d.index});
            for (uint32_t y : to) dag.edges.push_back({bid, y, EdgeKind::kTemporal, d.index});
          }
        }
        prev_sinks[c].assign(sinks.begin(), sinks.end());
        a.swap(b);
        ++group_pos[c];
      }
    }
  }
  if (!ok) return false;
  dag.finalize();

  // ---- global Kahn with priority ----
  const size_t n = dag.nodes.size();
  std::vector<uint32_t> indeg(n);
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

  if (order.size() < n) {
    // ---- deadlock: find one cycle among the nodes that never became ready ----
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
    std::vector<uint32_t> cyc(path.begin() + seen_at[x], path.end());
    std::vector<uint32_t> cyc_edges(via.begin() + seen_at[x], via.end());
    std::reverse(cyc.begin(), cyc.end());
    std::reverse(cyc_edges.begin(), cyc_edges.end());
    // cyc_edges[k] is the edge INTO cyc[k] (from cyc[k-1], cyclically).
    const size_t len = cyc.size();
    std::set<int32_t> dirs;
    int order_steps = 0;  // temporal constraints, counting a barrier hop once
    std::set<int32_t> devices;
    std::vector<std::string> lines;
    std::string pending;  // what the next printed node waits through
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
    diags.push_back(std::move(dg));
    return false;
  }
  cp.topo_order = std::move(order);
  if (!class_programs) return true;

  // ---- per-class programs ----
  // Sizes first (per class and per class and stream), then each list filled by index.
  const size_t ns = dag.streams.size();
  std::vector<uint32_t> fill_prog(ncls, 0), fill_stream(ncls * ns, 0);
  for (uint32_t i : cp.topo_order) {
    const Node& nd = dag.nodes[i];
    if (nd.kind == NodeKind::kBarrier) continue;
    for (uint32_t c : node_classes(nd, cls)) {
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
    for (uint32_t c : node_classes(nd, cls)) {
      cp.classes[c].program[fill_prog[c]++] = i;
      cp.classes[c].streams[nd.stream][fill_stream[c * ns + nd.stream]++] = i;
    }
  }
  return true;
}

}  // namespace stretto::detail
