// profile and validate over the replay backend (validate.h). Torch-free.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "stretto/backend/validate.h"
#include "stretto/costmodel/analytic.h"
#include "stretto/costmodel/host_reuse.h"
#include "stretto/costmodel/profile_table.h"
#include "stretto/sim/session.h"

namespace stretto::backend {

using compiler::CommKind;
using compiler::CompiledPlan;
using compiler::NodeKind;
using plan::Json;

namespace {

double ms(int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

// The table's entry for a series: the mean of its samples. A step's expected time is the sum of
// its ops' expected times, and on CPU the communication times are heavy-tailed (Gloo transfers
// and collectives between busy processes: the mean is 1.4-2.6x the median), so a median
// under-predicts every plan that communicates.
int64_t mean(const std::vector<int64_t>& v) {
  if (v.empty()) return 0;
  long double sum = 0;
  for (int64_t x : v) sum += static_cast<long double>(x);
  return static_cast<int64_t>(std::llround(sum / static_cast<long double>(v.size())));
}

int64_t median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

// One kernel series of the table: its shape (n, k, batch: 0 when by bytes) and size (m, or
// bytes).
std::string series_key(const std::string& op, const std::string& pass, const std::string& dt,
                       int64_t n, int64_t k, int64_t batch, int64_t size) {
  return fmt::format("{} {} {} {} {} {} {}", op, pass, dt, n, k, batch, size);
}

// The cost query of every DAG node (compute or comm), as the simulator builds it.
struct NodeQueries {
  std::vector<int32_t> compute_of, comm_of;  // by node: index into the lists, -1 none
  std::vector<cost::ComputeQuery> compute;
  std::vector<cost::CommQuery> comm;
};

NodeQueries node_queries(const CompiledPlan& cp) {
  sim::CostQueries queries(cp);
  NodeQueries nq;
  nq.compute_of.assign(cp.dag.nodes.size(), -1);
  nq.comm_of.assign(cp.dag.nodes.size(), -1);
  for (uint32_t n : cp.topo_order) {
    const compiler::Node& nd = cp.dag.nodes[n];
    if (nd.kind == NodeKind::kCompute) {
      nq.compute_of[n] = static_cast<int32_t>(nq.compute.size());
      nq.compute.push_back(queries.compute(nd));
    } else if (nd.kind == NodeKind::kTransfer || nd.kind == NodeKind::kCollective) {
      nq.comm_of[n] = static_cast<int32_t>(nq.comm.size());
      nq.comm.push_back(queries.comm(nd));
    }
  }
  return nq;
}

// Per record of `r`: for a compute op, the kind of the last communication op its device issued
// since its previous compute op, in program order (the records' order), as the simulator counts
// them (sim/src/build_program.cpp, host_cold_factor); kNone otherwise.
std::vector<CommKind> cold_contexts(const CompiledPlan& cp, const NodeQueries& nq,
                                    const ReplayResult& r) {
  std::vector<CommKind> ctx(r.ops.size(), CommKind::kNone);
  std::map<std::pair<int, int>, CommKind> since;  // (device, iteration) -> last comm kind
  for (size_t i = 0; i < r.ops.size(); ++i) {
    const OpRecord& o = r.ops[i];
    if (o.iteration < 0 || o.node >= cp.dag.nodes.size()) continue;
    if (int32_t mi = nq.comm_of[o.node]; mi >= 0) {
      since[{o.device, o.iteration}] = nq.comm[static_cast<size_t>(mi)].kind;
    } else if (nq.compute_of[o.node] >= 0) {
      auto it = since.find({o.device, o.iteration});
      if (it != since.end()) ctx[i] = std::exchange(it->second, CommKind::kNone);
    }
  }
  return ctx;
}

// Per op record of a CPU replay: the reuse distance bucket of a backward compute op
// (cost::StaleActivations, the rule the simulator applies host_reuse_factor by), 0 for every
// other op, walking each device's ops of each iteration in the order they started.
std::vector<uint8_t> reuse_contexts(const CompiledPlan& cp, const NodeQueries& nq,
                                    const ReplayResult& r) {
  std::vector<uint8_t> dist(r.ops.size(), 0);
  std::vector<size_t> order;
  for (size_t i = 0; i < r.ops.size(); ++i) {
    const OpRecord& o = r.ops[i];
    if (o.iteration >= 0 && o.node < cp.dag.nodes.size() && nq.compute_of[o.node] >= 0)
      order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const OpRecord &x = r.ops[a], &y = r.ops[b];
    return std::tie(x.iteration, x.device, x.start_ns) < std::tie(y.iteration, y.device, y.start_ns);
  });
  std::map<int, cost::StaleActivations> by_iteration;
  for (size_t i : order) {
    const OpRecord& o = r.ops[i];
    dist[i] = static_cast<uint8_t>(
        by_iteration[o.iteration].visit(o.device, cp.dag.nodes[o.node], cp.model));
  }
  return dist;
}

// A compute op's table series (series_key), or "" when the table has none for it.
std::string compute_series(const cost::ComputeQuery& q) {
  const std::string op(cost::profile_op_name(q.kind)), pass(cost::profile_pass_name(q.pass)),
      dt(cost::profile_dtype_name(q.dtype));
  if (q.gemm.m > 0 && q.gemm.n > 0 && q.gemm.k > 0)
    return series_key(op, pass, dt, q.gemm.n, q.gemm.k, std::max<int64_t>(1, q.gemm.batch), q.gemm.m);
  if (q.bytes > 0) return series_key(op, pass, dt, 0, 0, 0, q.bytes);
  return {};
}

Json series_stats(const std::map<int64_t, std::vector<int64_t>>& pts) {
  Json a = Json::array();
  for (const auto& [size, v] : pts) {
    auto s = v;
    std::sort(s.begin(), s.end());
    a.push_back({{"size", size},
                 {"count", s.size()},
                 {"mean_ns", mean(s)},
                 {"median_ns", s[(s.size() - 1) / 2]},
                 {"min_ns", s.front()},
                 {"max_ns", s.back()}});
  }
  return a;
}

// Least-squares t = alpha + bytes / beta over the means; beta in bytes/ns (= GB/s). Only
// when the sizes span at least 4x (else {NaN, NaN}: no fit).
std::pair<double, double> alpha_beta(const std::map<int64_t, std::vector<int64_t>>& pts) {
  if (pts.size() < 2 || pts.rbegin()->first < 4 * pts.begin()->first) return {NAN, NAN};
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [b, v] : pts) {
    const double x = static_cast<double>(b), y = static_cast<double>(mean(v));
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  if (n < 2 || n * sxx - sx * sx <= 0) {
    const double y = n > 0 ? sy / n : 0;
    return {y, 0};
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double alpha = (sy - slope * sx) / n;
  if (!(slope > 0)) return {NAN, NAN};
  return {alpha, 1.0 / slope};
}

}  // namespace

size_t ProfileSamples::add(const CompiledPlan& cp, const ReplayResult& r) {
  const NodeQueries nq = node_queries(cp);
  const std::vector<CommKind> ctx_of =
      host_cores_ > 0 ? cold_contexts(cp, nq, r) : std::vector<CommKind>(r.ops.size());
  const std::vector<uint8_t> dist_of =
      host_cores_ > 0 ? reuse_contexts(cp, nq, r) : std::vector<uint8_t>(r.ops.size(), 0);
  if (host_cores_ > 0 && r.world_size > host_cores_) {
    ++skipped_;
    // Not filed; its compute ops measure how the processes shared the cores (share_efficiency).
    // The ranks of one host share one timeline per step (report.cpp): a(t) = the compute ops
    // running at t, a step function over the sorted boundaries of each iteration's compute
    // intervals (ends before starts at one instant).
    const double cores = host_cores_;
    struct Steps {
      std::vector<int64_t> t;  // boundaries, ascending
      std::vector<int> a;      // a(t) from t[k] up to t[k + 1]
    };
    std::map<int, Steps> steps;  // by iteration
    {
      std::map<int, std::vector<std::pair<int64_t, int>>> edges;  // iteration -> (t, +1 / -1)
      for (const OpRecord& o : r.ops)
        if (o.iteration >= 0 && o.node < cp.dag.nodes.size() && nq.compute_of[o.node] >= 0 &&
            o.end_ns > o.start_ns) {
          edges[o.iteration].push_back({o.start_ns, +1});
          edges[o.iteration].push_back({o.end_ns, -1});
        }
      for (auto& [it, e] : edges) {
        std::sort(e.begin(), e.end());
        Steps& s = steps[it];
        int a = 0;
        for (const auto& [t, delta] : e) {
          a += delta;
          s.t.push_back(t);
          s.a.push_back(a);
        }
      }
    }
    for (size_t i = 0; i < r.ops.size(); ++i) {
      const OpRecord& o = r.ops[i];
      if (o.iteration < 0 || o.node >= cp.dag.nodes.size() || o.end_ns <= o.start_ns) continue;
      const int32_t ci = nq.compute_of[o.node];
      if (ci < 0) continue;
      std::string series = compute_series(nq.compute[static_cast<size_t>(ci)]);
      if (series.empty()) continue;
      const Steps& s = steps.at(o.iteration);
      OversubOp op{std::move(series), ctx_of[i], dist_of[i], 0, 0};
      // from the last boundary at or before the op's start (its own start is one) to its end
      size_t k = static_cast<size_t>(std::upper_bound(s.t.begin(), s.t.end(), o.start_ns) -
                                     s.t.begin()) - 1;
      for (; k < s.t.size() && s.t[k] < o.end_ns; ++k) {
        const int64_t from = std::max(s.t[k], o.start_ns);
        const int64_t to = k + 1 < s.t.size() ? std::min(s.t[k + 1], o.end_ns) : o.end_ns;
        const double span = static_cast<double>(to - from);
        if (s.a[k] <= cores)
          op.under_ns += span;
        else
          op.over_share_ns += span * cores / s.a[k];
      }
      if (op.over_share_ns > 0) oversub_.push_back(std::move(op));
    }
    if (!file_oversubscribed_) return size_t{0};
  }
  if (host_cores_ > 0)
    for (const DeviceReport& d : r.devices)
      if (d.ops_per_step > 0)
        host_op_ns_.push_back(
            static_cast<double>(std::max<int64_t>(0, d.overhead_ns - d.post_ns - d.unpack_ns)) /
            d.ops_per_step);
  // comm per (node, iteration) instance: from the last participant's arrival (the latest
  // start) to the last participant's completion (the latest end): what the simulator times
  // (a collective or transfer starts when every member has reached it)
  struct Span {
    int64_t last_start = INT64_MIN, last_end = INT64_MIN;
  };
  std::map<std::pair<uint32_t, int>, Span> comm_span;
  // comm intervals per (device, iteration), for the interference estimate
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> comm_busy;
  for (const OpRecord& o : r.ops)
    if (o.iteration >= 0 && o.node < cp.dag.nodes.size() && nq.comm_of[o.node] >= 0)
      comm_busy[{o.device, o.iteration}].push_back({o.start_ns, o.end_ns});
  auto overlap = [&](const OpRecord& o) {
    auto it = comm_busy.find({o.device, o.iteration});
    if (it == comm_busy.end()) return int64_t{0};
    // overlap with the union of the comm intervals
    auto v = it->second;
    std::sort(v.begin(), v.end());
    int64_t total = 0, cs = INT64_MIN, ce = INT64_MIN;
    for (auto [a, b] : v) {
      if (a > ce) {
        if (ce > cs) total += std::max<int64_t>(0, std::min(ce, o.end_ns) - std::max(cs, o.start_ns));
        cs = a, ce = b;
      } else {
        ce = std::max(ce, b);
      }
    }
    if (ce > cs) total += std::max<int64_t>(0, std::min(ce, o.end_ns) - std::max(cs, o.start_ns));
    return total;
  };
  size_t filed = 0;
  for (size_t ri = 0; ri < r.ops.size(); ++ri) {
    const OpRecord& o = r.ops[ri];
    if (o.iteration < 0 || o.node >= cp.dag.nodes.size()) continue;
    const size_t ctx = static_cast<size_t>(ctx_of[ri]) + cost::kCommKinds * dist_of[ri];
    const int64_t d = o.end_ns - o.start_ns;
    if (d <= 0) continue;
    if (int32_t ci = nq.compute_of[o.node]; ci >= 0) {
      const cost::ComputeQuery& q = nq.compute[static_cast<size_t>(ci)];
      const std::string op(cost::profile_op_name(q.kind)), pass(cost::profile_pass_name(q.pass)),
          dt(cost::profile_dtype_name(q.dtype));
      {
        auto& [alone, over] = overlap_[fmt::format("{} {} {} {} {} {} {}", op, pass, dt, q.gemm.m,
                                                   q.gemm.n, q.gemm.k, q.bytes)];
        (2 * overlap(o) > d ? over : alone).push_back(d);
      }
      const int64_t batch = std::max<int64_t>(1, q.gemm.batch);
      if (q.gemm.m > 0 && q.gemm.n > 0 && q.gemm.k > 0) {
        shapes_[{op, pass, dt, q.gemm.n, q.gemm.k, batch}][q.gemm.m].push_back(d);
        if (host_cores_ > 0)
          ctx_[series_key(op, pass, dt, q.gemm.n, q.gemm.k, batch, q.gemm.m)][ctx].push_back(d);
      } else if (q.bytes > 0) {
        bytes_[{op, pass, dt}][q.bytes].push_back(d);
        if (host_cores_ > 0)
          ctx_[series_key(op, pass, dt, 0, 0, 0, q.bytes)][ctx].push_back(d);
      } else {
        continue;
      }
      ++filed;
    } else if (nq.comm_of[o.node] >= 0) {
      // ... to the last member's result unpacked: the host work before its consumer can run,
      // which the simulator has in the collective's time only
      Span& sp = comm_span[{o.node, o.iteration}];
      sp.last_start = std::max(sp.last_start, o.start_ns);
      sp.last_end = std::max(sp.last_end, o.end_ns + o.unpack_ns);
    }
  }
  for (const auto& [key, sp] : comm_span) {
    const cost::CommQuery& q = nq.comm[static_cast<size_t>(nq.comm_of[key.first])];
    const int64_t d = sp.last_end - sp.last_start;
    if (q.bytes <= 0 || d <= 0) continue;
    comms_[{std::string(cost::profile_comm_name(q.kind)), q.group_size, q.nodes_spanned}][q.bytes]
        .push_back(d);
    ++filed;
  }
  return filed;
}

std::optional<double> ProfileSamples::host_op_us() const {
  if (host_op_ns_.empty()) return std::nullopt;
  double sum = 0;
  for (double x : host_op_ns_) sum += x;
  return sum / static_cast<double>(host_op_ns_.size()) / 1e3;
}

std::array<double, cost::kCommKinds> ProfileSamples::cold_factors() const {
  std::array<double, cost::kCommKinds> f;
  f.fill(NAN);
  constexpr size_t kMinSamples = 3, kMinSeries = 3;
  for (size_t k = 1; k < cost::kCommKinds; ++k) {
    // time-weighted over the series: what the step's compute after such ops costs more
    double warm = 0, cold = 0;
    size_t series = 0;
    for (const auto& [key, by] : ctx_) {
      if (by[0].size() < kMinSamples || by[k].size() < kMinSamples) continue;
      const double w = static_cast<double>(mean(by[0])), c = static_cast<double>(mean(by[k]));
      if (w > 0 && c > 0) warm += w, cold += c, ++series;
    }
    if (series < kMinSeries) continue;
    f[k] = std::clamp(cold / warm, 0.25, 4.0);
  }
  return f;
}

std::array<double, cost::kReuseDistances> ProfileSamples::reuse_factors() const {
  // each distance against fresh, both right after a compute op ([kCommKinds x d] and [0]): the
  // cold contexts stay out, so a stale backward that also follows a transfer is not counted
  // twice
  std::array<double, cost::kReuseDistances> f;
  f.fill(NAN);
  f[0] = 1;
  constexpr size_t kMinSamples = 3, kMinSeries = 3;
  for (size_t d = 1; d < cost::kReuseDistances; ++d) {
    double fresh = 0, stale = 0;
    size_t series = 0;
    for (const auto& [key, by] : ctx_) {
      const auto &a = by[0], &b = by[cost::kCommKinds * d];
      if (a.size() < kMinSamples || b.size() < kMinSamples) continue;
      const double ma = static_cast<double>(mean(a)), mb = static_cast<double>(mean(b));
      if (ma > 0 && mb > 0) fresh += ma, stale += mb, ++series;
    }
    if (series >= kMinSeries) f[d] = std::clamp(stale / fresh, 0.25, 4.0);
  }
  return f;
}

std::array<double, cost::kReuseDistances> ProfileSamples::reuse_filled() const {
  auto f = reuse_factors();
  for (size_t d = 1; d < cost::kReuseDistances; ++d)
    if (!std::isfinite(f[d])) f[d] = f[d - 1];
  return f;
}

ProfileSamples::ShareSums ProfileSamples::share_sums() const {
  const auto cold = cold_factors();
  const auto reuse = reuse_filled();
  ShareSums s;
  for (const OversubOp& op : oversub_) {
    if (!ctx_.contains(op.series)) continue;  // no unshared time for this series
    const std::vector<int64_t> none;
    double w = static_cast<double>(warm_mean(op.series, none, cold, reuse));
    if (op.ctx != CommKind::kNone && std::isfinite(cold[static_cast<size_t>(op.ctx)]))
      w *= cold[static_cast<size_t>(op.ctx)];
    w *= reuse[op.distance];
    s.table += w, s.under += op.under_ns, s.over += op.over_share_ns, ++s.ops;
  }
  return s;
}

size_t ProfileSamples::share_ops() const {
  return share_sums().ops;
}

std::optional<double> ProfileSamples::share_efficiency() const {
  const ShareSums s = share_sums();
  if (s.ops < 20 || !(s.over > 0)) return std::nullopt;
  return std::clamp((s.table - s.under) / s.over, 0.05, 1.0);
}

int64_t ProfileSamples::warm_mean(const std::string& series, const std::vector<int64_t>& raw,
                                  const std::array<double, cost::kCommKinds>& f,
                                  const std::array<double, cost::kReuseDistances>& r) const {
  auto it = ctx_.find(series);
  if (it == ctx_.end()) return mean(raw);
  long double sum = 0;
  size_t n = 0;
  for (size_t i = 0; i < cost::kCommKinds * cost::kReuseDistances; ++i) {
    const size_t k = i % cost::kCommKinds;
    const double div = (k > 0 && std::isfinite(f[k]) ? f[k] : 1.0) * r[i / cost::kCommKinds];
    for (int64_t x : it->second[i]) sum += static_cast<long double>(x) / div, ++n;
  }
  return n ? static_cast<int64_t>(std::llround(sum / static_cast<long double>(n))) : mean(raw);
}

std::optional<double> ProfileSamples::comm_share() const {
  std::vector<double> shares;
  for (const auto& [key, v] : overlap_) {
    const auto& [alone, over] = v;
    if (alone.size() < 3 || over.size() < 3) continue;
    const double a = static_cast<double>(median(alone)), o = static_cast<double>(median(over));
    if (a > 0 && o > 0) shares.push_back(1.0 - a / o);
  }
  if (shares.empty()) return std::nullopt;
  std::sort(shares.begin(), shares.end());
  const double m = shares[(shares.size() - 1) / 2];
  return std::clamp(m, 0.0, 0.9);
}

Json ProfileSamples::table(const std::string& device) const {
  Json t;
  t["version"] = 1;
  t["device"] = device;
  // Measured interference for the cost model (docs/costmodel.md): a compute op's share of the
  // device lost while communication runs; absent when not measured (the analytic default holds).
  if (auto share = comm_share()) t["options"] = {{"comm_sm_share", *share}, {"comm_hbm_share", *share}};
  // The processes of a CPU replay share this host's cores (docs/costmodel.md, host_cores).
  if (host_cores_ > 0) t["options"]["host_cores"] = host_cores_;
  // ... and its host thread's bookkeeping per op (docs/costmodel.md, host_op_us)
  if (auto h = host_op_us()) t["options"]["host_op_us"] = std::round(*h * 1000) / 1000;
  // ... and how much slower compute runs right after the host's communication work, by kind
  // (docs/costmodel.md, host_cold_factor); the kernel times below are the warm ones
  const auto cold = cold_factors();
  for (size_t k = 1; k < cost::kCommKinds; ++k)
    if (std::isfinite(cold[k]))
      t["options"]["host_cold_factor"][std::string(cost::profile_comm_name(static_cast<CommKind>(k)))] =
          std::round(cold[k] * 1000) / 1000;
  // ... and the share of the cores that processes outnumbering them got (host_share_efficiency)
  if (auto e = share_efficiency()) t["options"]["host_share_efficiency"] = std::round(*e * 1000) / 1000;
  // ... and how much slower a backward op runs on stale activations (host_reuse_factor); the
  // kernel times below are the fresh ones
  const auto reuse = reuse_filled();
  {
    const auto measured = reuse_factors();
    size_t last = 0;  // the longest distance measured
    for (size_t d = 1; d < cost::kReuseDistances; ++d)
      if (std::isfinite(measured[d])) last = d;
    for (size_t d = 1; d <= last; ++d)
      t["options"]["host_reuse_factor"].push_back(std::round(reuse[d] * 1000) / 1000);
  }
  Json kernels = Json::array(), colls = Json::array();
  for (const auto& [key, pts] : shapes_) {
    const auto& [op, pass, dt, n, k, b] = key;
    for (const auto& [m, v] : pts) {
      Json e = {{"op", op}, {"pass", pass}, {"dtype", dt}, {"m", m}, {"n", n}, {"k", k},
                {"ns", warm_mean(series_key(op, pass, dt, n, k, b, m), v, cold, reuse)}};
      if (b > 1) e["batch"] = b;
      kernels.push_back(std::move(e));
    }
  }
  for (const auto& [key, pts] : bytes_) {
    const auto& [op, pass, dt] = key;
    for (const auto& [bytes, v] : pts)
      kernels.push_back({{"op", op}, {"pass", pass}, {"dtype", dt}, {"bytes", bytes},
                         {"ns", warm_mean(series_key(op, pass, dt, 0, 0, 0, bytes), v, cold, reuse)}});
  }
  for (const auto& [key, pts] : comms_) {
    const auto& [kind, g, nodes] = key;
    for (const auto& [bytes, v] : pts)
      colls.push_back({{"kind", kind}, {"group_size", g}, {"nodes", nodes}, {"bytes", bytes},
                       {"ns", mean(v)}});
  }
  t["kernels"] = std::move(kernels);
  t["collectives"] = std::move(colls);
  return t;
}

Json ProfileSamples::stats() const {
  Json j;
  Json k = Json::array(), c = Json::array();
  for (const auto& [key, pts] : shapes_) {
    const auto& [op, pass, dt, n, kk, b] = key;
    k.push_back({{"op", op}, {"pass", pass}, {"dtype", dt}, {"n", n}, {"k", kk}, {"batch", b},
                 {"by_m", series_stats(pts)}});
  }
  for (const auto& [key, pts] : bytes_) {
    const auto& [op, pass, dt] = key;
    k.push_back({{"op", op}, {"pass", pass}, {"dtype", dt}, {"by_bytes", series_stats(pts)}});
  }
  for (const auto& [key, pts] : comms_) {
    const auto& [kind, g, nodes] = key;
    auto [alpha, beta] = alpha_beta(pts);
    Json e = {{"kind", kind}, {"group_size", g}, {"nodes", nodes}, {"by_bytes", series_stats(pts)}};
    if (std::isfinite(alpha) && std::isfinite(beta)) {
      e["alpha_us"] = alpha / 1e3;
      e["beta_GBps"] = beta;
    }
    c.push_back(std::move(e));
  }
  j["kernels"] = std::move(k);
  j["collectives"] = std::move(c);
  if (auto sh = comm_share()) j["comm_sm_share"] = *sh;
  if (auto h = host_op_us()) j["host_op_us"] = *h;
  const auto cold = cold_factors();
  for (size_t k = 1; k < cost::kCommKinds; ++k)
    if (std::isfinite(cold[k]))
      j["host_cold_factor"][std::string(cost::profile_comm_name(static_cast<CommKind>(k)))] = cold[k];
  if (auto e = share_efficiency()) j["host_share_efficiency"] = *e;
  {
    const auto r = reuse_factors();
    for (size_t d = 1; d < cost::kReuseDistances; ++d)
      if (std::isfinite(r[d])) j["host_reuse_factor"][std::to_string(d)] = r[d];
  }
  if (!oversub_.empty()) j["host_share_ops"] = share_ops();
  return j;
}

std::string ProfileSamples::stats_table() const {
  std::string o;
  auto row = [&](const std::string& what, int64_t size, const std::vector<int64_t>& v) {
    auto s = v;
    std::sort(s.begin(), s.end());
    const int64_t med = s[(s.size() - 1) / 2];
    const double spread = med > 0 ? 100.0 * static_cast<double>(s.back() - s.front()) /
                                        static_cast<double>(med)
                                  : 0;
    o += fmt::format("{:<44} {:>12} {:>6} {:>9.3f} {:>11.3f} {:>8.1f}%\n", what, size, s.size(),
                     ms(mean(s)), ms(med), spread);
  };
  o += fmt::format("{:<44} {:>12} {:>6} {:>9} {:>11} {:>9}\n",
                   "measured op (kind pass dtype [n k])", "size", "count", "mean ms", "median ms",
                   "spread");
  for (const auto& [key, pts] : shapes_) {
    const auto& [op, pass, dt, n, k, b] = key;
    for (const auto& [m, v] : pts) row(fmt::format("{} {} {} n={} k={}", op, pass, dt, n, k), m, v);
  }
  for (const auto& [key, pts] : bytes_) {
    const auto& [op, pass, dt] = key;
    for (const auto& [b, v] : pts) row(fmt::format("{} {} {} (bytes)", op, pass, dt), b, v);
  }
  for (const auto& [key, pts] : comms_) {
    const auto& [kind, g, nodes] = key;
    for (const auto& [b, v] : pts) row(fmt::format("{} group {} (bytes)", kind, g), b, v);
    auto [alpha, beta] = alpha_beta(pts);
    if (std::isfinite(alpha) && std::isfinite(beta))
      o += fmt::format("  alpha-beta fit: {:.1f} us + bytes / {:.3f} GB/s\n", alpha / 1e3, beta);
    else
      o += "  alpha-beta fit: none (sizes span less than 4x, or time does not grow with size)\n";
  }
  o += "(spread = (max - min) / median over instances, iterations and plans)\n";
  if (auto h = host_op_us())
    o += fmt::format("host thread: {:.1f} us per op outside the ops' own times (host_op_us, over {} "
                     "device replays)\n",
                     *h, host_op_ns_.size());
  const auto cold = cold_factors();
  for (size_t k = 1; k < cost::kCommKinds; ++k)
    if (std::isfinite(cold[k]))
      o += fmt::format("host thread: compute right after {} takes {:.3f}x its time after compute "
                       "(host_cold_factor)\n",
                       cost::profile_comm_name(static_cast<CommKind>(k)), cold[k]);
  {
    const auto r = reuse_factors();
    for (size_t d = 1; d < cost::kReuseDistances; ++d)
      if (std::isfinite(r[d]))
        o += fmt::format("host thread: a backward op whose forward was followed by {} takes "
                         "{:.3f}x its fresh time (host_reuse_factor)\n",
                         d + 1 == cost::kReuseDistances
                             ? fmt::format("{} or more other microbatches' forwards", d)
                         : d == 1 ? std::string("1 other microbatch's forward")
                                  : fmt::format("{} other microbatches' forwards", d),
                         r[d]);
  }
  if (auto e = share_efficiency())
    o += fmt::format("host cores: processes that outnumber the cores get {:.3f} of them "
                     "(host_share_efficiency, over {} compute ops of oversubscribed replays)\n",
                     *e, share_ops());
  if (auto sh = comm_share())
    o += fmt::format("interference: compute keeps {:.0f}% of the device while communication runs "
                     "(comm_sm_share {:.3f})\n",
                     100 * (1 - *sh), *sh);
  else
    o += "interference: not measured (no op timed both alone and during communication); the "
         "analytic default stays\n";
  return o;
}

traces::Timeline timeline_from_replay(const CompiledPlan& cp, const ReplayResult& r,
                                      const std::string& source) {
  // per (device, node, stream) instance: median start and end over measured iterations
  struct Acc {
    std::vector<int64_t> start, end;
    const OpRecord* rec = nullptr;
  };
  std::map<std::tuple<int, uint32_t, std::string>, Acc> acc;
  for (const OpRecord& o : r.ops) {
    if (o.iteration < 0) continue;
    Acc& a = acc[{o.device, o.node, o.stream}];
    a.start.push_back(o.start_ns);
    a.end.push_back(o.end_ns);
    a.rec = &o;
  }
  std::vector<traces::TimelineSlice> slices;
  for (auto& [key, a] : acc) {
    const OpRecord& o = *a.rec;
    traces::TimelineSlice s;
    s.name = o.name;
    s.device = o.device;
    s.start = median(a.start);
    s.end = std::max(s.start, median(a.end));
    if (o.node < cp.dag.nodes.size()) {
      const compiler::Node& nd = cp.dag.nodes[o.node];
      s.tags = nd.tags.str();
      s.comm = nd.kind != NodeKind::kCompute;
      if (nd.kind == NodeKind::kTransfer) {
        const auto& snd = cp.dag.device_sets[nd.devs].devices;
        s.participant =
            std::find(snd.begin(), snd.end(), o.device) != snd.end() ? 0 : 1;
      }
    }
    slices.push_back(std::move(s));
  }
  traces::Timeline t = traces::timeline_from_slices(slices, 0, source, "replay");
  // the backend's own per-device metrics (means over iterations)
  t.devices.clear();
  for (const auto& d : r.devices)
    t.devices.push_back({d.id, d.busy_ns, d.bubble_ns, d.exposed_comm_ns, d.peak_memory});
  t.step = static_cast<int64_t>(std::llround(r.step_mean_ms * 1e6));
  t.note = fmt::format("median over {} measured steps", r.iterations);
  return t;
}

double measured_noise_pct(const std::vector<int64_t>& step_ns) {
  const size_t n = step_ns.size();
  if (n < 4) return std::nan("");
  auto mean = [&](size_t from, size_t to) {
    double sum = 0;
    for (size_t i = from; i < to; ++i) sum += static_cast<double>(step_ns[i]);
    return sum / static_cast<double>(to - from);
  };
  const double m = mean(0, n);
  if (m <= 0) return std::nan("");
  double var = 0;
  for (int64_t x : step_ns) var += (static_cast<double>(x) - m) * (static_cast<double>(x) - m);
  const double se = std::sqrt(var / static_cast<double>(n - 1) / static_cast<double>(n));
  const double halves = std::fabs(mean(0, n / 2) - mean(n - n / 2, n));
  return 100.0 * std::max(2 * se, halves) / m;
}

PlanValidation validate_plan(const CompiledPlan& cp, const sim::Result& predicted,
                             const ReplayResult& measured, const traces::CompareOptions& opt) {
  PlanValidation v;
  v.plan = cp.plan.file;
  v.predicted_ns = predicted.step_time;
  v.measured_mean_ms = measured.step_mean_ms;
  v.measured_std_ms = measured.step_std_ms;
  v.measured_min_ms = measured.step_min_ms;
  v.measured_steps = static_cast<int>(measured.step_ns.size());
  v.noise_pct = measured_noise_pct(measured.step_ns);
  v.step_err = measured.step_mean_ms > 0
                   ? (ms(predicted.step_time) - measured.step_mean_ms) / measured.step_mean_ms
                   : 0;
  v.ops = traces::compare(timeline_from_replay(cp, measured, cp.plan.file + " (measured)"),
                          traces::timeline_from_result(cp, predicted, cp.plan.file + " (predicted)"),
                          opt);
  int64_t last = 0;
  for (const auto& o : v.ops.a.ops) last = std::max(last, o.end);
  v.measured_tail_ms = std::max(0.0, measured.step_mean_ms - ms(last));
  return v;
}

namespace {

// Pairs of plans whose predicted order is the reverse of their measured order. A pair is
// resolved when the measured means differ by more than twice the standard error of their
// difference (sqrt(std_a^2 / n_a + std_b^2 / n_b), steps taken as independent: consecutive
// steps share the host's speed drifts, so this error is a lower bound and "resolved" errs
// towards reporting a reversal); an unresolved reversal is within the measurement's noise.
struct Reversal {
  size_t a = 0, b = 0;  // measured faster, measured slower
  double diff_ms = 0, se_ms = 0;
  bool resolved = false;
};

std::vector<Reversal> ranking_reversals(const std::vector<PlanValidation>& v) {
  std::vector<Reversal> out;
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t j = i + 1; j < v.size(); ++j) {
      const double dm = v[i].measured_mean_ms - v[j].measured_mean_ms;
      const double dp = ms(v[i].predicted_ns) - ms(v[j].predicted_ns);
      if (dm == 0 || dp == 0 || (dm > 0) == (dp > 0)) continue;
      Reversal r;
      r.a = dm < 0 ? i : j;
      r.b = dm < 0 ? j : i;
      r.diff_ms = std::fabs(dm);
      auto var = [](const PlanValidation& p) {
        return p.measured_steps > 0 ? p.measured_std_ms * p.measured_std_ms / p.measured_steps : 0.0;
      };
      r.se_ms = std::sqrt(var(v[i]) + var(v[j]));
      r.resolved = r.diff_ms > 2 * r.se_ms;
      out.push_back(r);
    }
  return out;
}

}  // namespace

namespace {

// Over the plans whose noise was measured: its mean, and how many errors lie within it.
struct NoiseSummary {
  double mean_pct = 0;
  int within = 0, plans = 0;
};
std::optional<NoiseSummary> noise_summary(const std::vector<PlanValidation>& v) {
  NoiseSummary n;
  for (const auto& p : v) {
    if (!std::isfinite(p.noise_pct)) continue;
    n.mean_pct += p.noise_pct;
    n.within += std::fabs(100 * p.step_err) <= p.noise_pct;
    ++n.plans;
  }
  if (n.plans == 0) return std::nullopt;
  n.mean_pct /= n.plans;
  return n;
}

}  // namespace

std::optional<KernelStyleCheck> kernel_style_check(const compiler::CompiledPlan& cp, bool on_gpu,
                                                   Kernels kernels) {
  const plan::CostModelSpec& spec = cp.plan.costmodel;
  if (!on_gpu || spec.kind != plan::CostModelSpec::Kind::kAnalytic) return std::nullopt;
  auto params = cost::parse_analytic_params(spec.options, cp.plan.cluster, spec.pointer, "");
  if (!params) return std::nullopt;  // the compile reported why
  KernelStyleCheck k;
  k.plan_style = cost::kernel_style_name(params->kernel_style);
  k.replay_style = kernels == Kernels::kFused ? "eager" : "reference";
  k.matches = k.plan_style == k.replay_style;
  if (k.matches) return k;
  if (kernels == Kernels::kFused) {
    k.message = fmt::format(
        "the prediction prices kernel_style {} but the replay's `--kernels fused` runs the ATen "
        "ops a plain PyTorch program calls, which the cost model prices as kernel_style eager: "
        "the comparison mixes two programs",
        k.plan_style);
    k.hint = "set \"kernel_style\": \"eager\" in the plan's costmodel to predict what the replay "
             "runs (docs/validation.md, \"Which kernel style the replay is\")";
  } else {
    k.message = fmt::format(
        "the replay's `--kernels reference` runs explicit formulas, which no kernel_style prices "
        "(the prediction is kernel_style {})",
        k.plan_style);
    k.hint = "replay with --kernels fused and predict with \"kernel_style\": \"eager\"";
  }
  return k;
}

Json kernel_style_json(const KernelStyleCheck& k) {
  Json j = {{"plan", k.plan_style}, {"replay", k.replay_style}, {"matches", k.matches}};
  if (!k.matches) j["hint"] = k.hint;
  return j;
}

Json validation_json(const std::vector<PlanValidation>& v) {
  Json j;
  Json plans = Json::array();
  std::vector<double> pred, meas;
  double sum = 0, worst = 0;
  for (const auto& p : v) {
    Json e = traces::comparison_json(p.ops);
    e["plan"] = p.plan;
    e["predicted_step_ms"] = ms(p.predicted_ns);
    e["measured_step_ms"] = p.measured_mean_ms;
    e["measured_step_std_ms"] = p.measured_std_ms;
    e["measured_step_min_ms"] = p.measured_min_ms;
    e["measured_steps"] = p.measured_steps;
    e["step_err_pct"] = 100 * p.step_err;
    e["measured_tail_ms"] = p.measured_tail_ms;
    if (std::isfinite(p.noise_pct)) {
      e["noise_pct"] = p.noise_pct;
      e["error_within_noise"] = std::fabs(100 * p.step_err) <= p.noise_pct;
    }
    if (p.coverage) {
      e["table_coverage"] = sim::coverage_json(*p.coverage);
      e["table_coverage_low"] = p.coverage->percent() < sim::kLowCoveragePercent;
    }
    if (p.kernel_style) {
      e["kernel_style"] = kernel_style_json(*p.kernel_style);
      e["kernel_style_mismatch"] = !p.kernel_style->matches;
    }
    plans.push_back(std::move(e));
    pred.push_back(ms(p.predicted_ns));
    meas.push_back(p.measured_mean_ms);
    sum += std::fabs(p.step_err);
    worst = std::max(worst, std::fabs(p.step_err));
  }
  j["plans"] = std::move(plans);
  if (!v.empty()) {
    j["mean_abs_step_err_pct"] = 100 * sum / static_cast<double>(v.size());
    j["worst_abs_step_err_pct"] = 100 * worst;
    if (auto n = noise_summary(v)) {
      j["mean_noise_pct"] = n->mean_pct;
      j["errors_within_noise"] = n->within;
    }
  }
  if (v.size() >= 2) {
    j["kendall_tau"] = traces::kendall_tau(pred, meas);
    const size_t bp = static_cast<size_t>(std::min_element(pred.begin(), pred.end()) - pred.begin());
    const size_t bm = static_cast<size_t>(std::min_element(meas.begin(), meas.end()) - meas.begin());
    j["predicted_best"] = v[bp].plan;
    j["measured_best"] = v[bm].plan;
    Json rev = Json::array();
    int resolved = 0;
    for (const Reversal& r : ranking_reversals(v)) {
      rev.push_back({{"faster", v[r.a].plan},
                     {"slower", v[r.b].plan},
                     {"measured_diff_ms", r.diff_ms},
                     {"measured_diff_se_ms", r.se_ms},
                     {"resolved", r.resolved}});
      resolved += r.resolved;
    }
    j["ranking_reversals"] = std::move(rev);
    j["ranking_reversals_resolved"] = resolved;
  }
  return j;
}

namespace {

// " (measured noise ±2.1 %: within it)" after an error, or "" when not measured.
std::string noise_note(const PlanValidation& p) {
  if (!std::isfinite(p.noise_pct)) return "";
  return fmt::format(" (measured noise ±{:.1f}%{})", p.noise_pct,
                     std::fabs(100 * p.step_err) <= p.noise_pct ? ": within it, not told from noise"
                                                                : "");
}

}  // namespace

std::string validation_table(const std::vector<PlanValidation>& v) {
  std::string o;
  for (const auto& p : v) {
    o += fmt::format("== {}\n", p.plan);
    o += fmt::format("step time: predicted {:.3f} ms, measured {:.3f} ms (std {:.3f}, min {:.3f}, "
                     "{} steps): error {:+.1f}%{}\n\n",
                     ms(p.predicted_ns), p.measured_mean_ms, p.measured_std_ms, p.measured_min_ms,
                     p.measured_steps, 100 * p.step_err, noise_note(p));
    if (p.coverage) {
      o += sim::coverage_text(*p.coverage, "");
      if (p.coverage->percent() < sim::kLowCoveragePercent)
        o += fmt::format("warning: the table covers under {:.0f} % of this plan: the prediction is "
                         "partly the analytic model's\n",
                         sim::kLowCoveragePercent);
      o += "\n";
    }
    if (p.kernel_style && !p.kernel_style->matches)
      o += fmt::format("warning: kernel style: {}\n  hint: {}\n\n", p.kernel_style->message,
                       p.kernel_style->hint);
    o += fmt::format("the measured step runs {:.3f} ms past its last op (optimizer step, step-end "
                     "sync: not simulated)\n\n",
                     p.measured_tail_ms);
    o += traces::comparison_table(p.ops);
    o += "\n";
  }
  if (v.size() >= 2) {
    std::vector<double> pred, meas;
    double sum = 0, worst = 0;
    o += fmt::format("{:<50} {:>12} {:>12} {:>9} {:>9} {:>9}\n", "plan", "predicted ms",
                     "measured ms", "std ms", "error", "noise");
    for (const auto& p : v) {
      o += fmt::format("{:<50} {:>12.3f} {:>12.3f} {:>9.3f} {:>+8.1f}% {:>9}\n", p.plan,
                       ms(p.predicted_ns), p.measured_mean_ms, p.measured_std_ms, 100 * p.step_err,
                       std::isfinite(p.noise_pct) ? fmt::format("±{:.1f}%", p.noise_pct) : "-");
      pred.push_back(ms(p.predicted_ns));
      meas.push_back(p.measured_mean_ms);
      sum += std::fabs(p.step_err);
      worst = std::max(worst, std::fabs(p.step_err));
    }
    o += fmt::format("\nstep-time error: mean |err| {:.1f}%, worst {:.1f}%; ranking Kendall tau {:.3f}\n",
                     100 * sum / static_cast<double>(v.size()), 100 * worst,
                     traces::kendall_tau(pred, meas));
    if (auto n = noise_summary(v))
      o += fmt::format("measured noise: mean ±{:.1f}%; {} of {} plans' errors within their noise\n",
                       n->mean_pct, n->within, n->plans);
    const auto rev = ranking_reversals(v);
    int resolved = 0;
    for (const Reversal& r : rev) resolved += r.resolved;
    o += fmt::format("{} pair(s) ranked the other way round; {} of them measured apart by more than "
                     "twice the standard error of their difference\n",
                     rev.size(), resolved);
    for (const Reversal& r : rev)
      o += fmt::format("  {} measured faster than {} by {:.3f} ms (standard error {:.3f} ms){}\n",
                       v[r.a].plan, v[r.b].plan, r.diff_ms, r.se_ms,
                       r.resolved ? "" : ": within the noise");
  }
  return o;
}

std::string validation_trace(const std::vector<PlanValidation>& v) {
  // one process per (plan, device, side): predicted above measured
  Json events = Json::array();
  int pid = 0;
  auto us = [](int64_t ns) { return static_cast<double>(ns) / 1e3; };
  for (size_t pi = 0; pi < v.size(); ++pi) {
    const auto& p = v[pi];
    std::set<int> devs;
    for (const auto& o : p.ops.a.ops) devs.insert(o.device);
    for (const auto& o : p.ops.b.ops) devs.insert(o.device);
    for (int d : devs) {
      for (int side = 0; side < 2; ++side) {
        const traces::Timeline& t = side == 0 ? p.ops.b : p.ops.a;  // predicted first
        const std::string label = fmt::format("{}device {} {}", v.size() > 1 ? p.plan + " · " : "",
                                              d, side == 0 ? "predicted" : "measured");
        events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", label}}}});
        events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid},
                          {"args", {{"sort_index", pid}}}});
        for (int lane = 0; lane < 2; ++lane)
          events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", lane},
                            {"args", {{"name", lane == 0 ? "compute" : "communication"}}}});
        for (const auto& o : t.ops) {
          if (o.device != d) continue;
          events.push_back({{"ph", "X"},
                            {"name", o.key},
                            {"cat", o.comm ? "comm" : "compute"},
                            {"pid", pid},
                            {"tid", o.comm ? 1 : 0},
                            {"ts", us(o.start)},
                            {"dur", us(o.end - o.start)},
                            {"args", {{"class", o.cls}, {"busy_us", us(o.busy)}}}});
        }
        ++pid;
      }
    }
  }
  Json j = {{"displayTimeUnit", "ns"},
            {"otherData", {{"generator", "stretto validate"}}},
            {"traceEvents", std::move(events)}};
  return j.dump() + "\n";
}

}  // namespace stretto::backend
