// Plan search: enumerate, estimate, prune, simulate the promising points (search.h).
#include "stretto/explore/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

#include "stretto/pipelines/builders.h"
#include "stretto/plan/plan.h"

namespace stretto::explore {

using plan::Json;
using plan::JsonSource;

namespace {

using Clock = std::chrono::steady_clock;
double since_s(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Diagnostic plain(std::string msg, std::string hint = {}) {
  Diagnostic d;
  d.message = std::move(msg);
  d.hint = std::move(hint);
  return d;
}

std::vector<int> divisors(int n) {
  std::vector<int> lo, hi;
  for (int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      lo.push_back(static_cast<int>(i));
      if (i * i != n) hi.push_back(static_cast<int>(n / i));
    }
  lo.insert(lo.end(), hi.rbegin(), hi.rend());
  return lo;
}

struct ModelFacts {
  int layers = 1, heads = 1, experts = 0, dpn = 1;
};
// What the space is bounded by, from the plan parser's reading of the base (the cluster's
// devices per node as its preset resolves them).
Expected<ModelFacts> facts(const Json& base) {
  const JsonSource src = JsonSource::from_json(base, "<base plan>");
  auto plan = plan::parse_plan(src);
  if (!plan) return fail(std::move(plan).error());
  ModelFacts f;
  f.layers = std::max(1, plan->model.layers);
  f.heads = std::max(1, plan->model.heads);
  if (plan->model.moe) f.experts = plan->model.moe->experts;
  f.dpn = std::max(1, plan->cluster.devices_per_node);
  return f;
}

// Runs the points through the simulator (as a sweep into an in-memory database) with a budget.
std::vector<PointResult> simulate_points(const Json& base, const std::string& base_dir,
                                         double cap, const std::vector<Json>& params, int jobs,
                                         double budget_s, sim::Granularity granularity) {
  SweepSpec spec;
  spec.base = base;
  spec.base_dir = base_dir;
  spec.memory_cap_GiB = cap;
  spec.granularity = granularity;
  spec.canonical = {{"base", base}, {"search", true}};
  spec.hash = stable_hash(spec.canonical);
  Grid g;
  for (const auto& p : params) g.points.push_back({p, point_hash(p)});
  auto store = Store::open(":memory:", spec.canonical, spec.hash, "0/1");
  if (!store) return {};
  std::atomic<bool> stop{false};
  SweepOptions so;
  so.jobs = jobs;
  so.stop = &stop;
  std::atomic<bool> finished{false};
  std::thread timer([&] {
    const auto t0 = Clock::now();
    while (!finished.load() && since_s(t0) < budget_s)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stop.store(true);
  });
  (void)run_sweep(spec, g, *store, so);
  finished.store(true);
  timer.join();
  auto rows = store->rows();  // an in-memory database: a failed read is an internal error
  if (!rows) throw std::runtime_error(rows.error()[0].message);
  return std::move(*rows);
}

}  // namespace

Expected<std::vector<Json>> search_space(const Json& base, const SearchOptions& opt) {
  if (opt.devices < 1) return fail(plain("--devices must be at least 1"));
  // The largest device count a sweep factorises (docs/sweeps.md): beyond it the candidates'
  // collectives hold millions of participants each.
  if (opt.devices > kMaxSearchDevices)
    return fail(plain(fmt::format("--devices {} is more than a search plans for ({})", opt.devices,
                                  kMaxSearchDevices),
                      "search at most 1048576 devices"));
  auto facts_or = facts(base);
  if (!facts_or) return fail(std::move(facts_or).error());
  const ModelFacts& mf = *facts_or;
  // Every point fills whole nodes (docs/sweeps.md), as the base's cluster does.
  if (opt.devices > mf.dpn && opt.devices % mf.dpn != 0)
    return fail(plain(fmt::format("--devices {} is not a whole number of {}-device nodes",
                                  opt.devices, mf.dpn),
                      "the base plan's cluster.devices_per_node (written, or its preset's)"));
  // The base's global batch (microbatch_size x microbatches x dp, resolved by plan/: a layout
  // plan's dp counts): every point of the space trains on the same number of sequences.
  auto rb = resolve(base, Json::object());
  if (!rb) return fail(std::move(rb).error());
  const int64_t gbs = rb->global_batch();
  std::vector<Json> out;
  for (int tp : divisors(opt.devices)) {
    if (tp > mf.dpn || mf.heads % tp != 0) continue;
    for (int pp : divisors(opt.devices / tp)) {
      if (pp > mf.layers) continue;
      const int dp = opt.devices / tp / pp;
      for (int mbs : {1, 2, 4, 8}) {
        if (gbs % (static_cast<int64_t>(dp) * mbs) != 0) continue;
        const int64_t m = gbs / (static_cast<int64_t>(dp) * mbs);
        if (m < 1 || m > 4096) continue;
        for (const auto& fam : opt.families) {
          const bool two = fam == "zb-v" || fam == "dualpipev" || fam == "dualpipe" ||
                           fam == "interleaved-1f1b" || fam == "looped-bfs";
          if (pp == 1 && fam != "1f1b") continue;  // one rank: every family is the same
          if ((two ? 2 : 1) * pp > mf.layers) continue;
          // what the family's builder refuses (DualPipeV with fewer microbatches than stages)
          if (pipelines::check_schedule(fam, pp, 0, static_cast<int>(m))) continue;
          std::vector<int> eps = {1};
          if (mf.experts > 0 && dp > 1 && mf.experts % dp == 0) eps.push_back(dp);
          for (int ep : eps)
            for (int zero : dp > 1 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0})
              for (const char* rc : {"none", "selective", "full"})
                for (int bucket : dp > 1 ? std::vector<int>{25, 100} : std::vector<int>{25}) {
                  Json p = {{"family", fam},         {"tp", tp},
                            {"pp", pp},              {"dp", dp},
                            {"microbatches", m},     {"microbatch_size", mbs},
                            {"zero", zero},          {"recompute", rc},
                            {"bucket_size_MB", bucket}, {"sequence_parallel", tp > 1}};
                  if (mf.experts > 0) p["ep"] = ep;  // a dense model has no expert parallelism
                  // the base's TP communication overlap, where there is TP to overlap
                  if (rb->tp_comm_overlap) p["tp_comm_overlap"] = tp > 1;
                  // context parallelism is not searched: candidates run without it
                  if (rb->cp > 1) p["cp"] = 1;
                  out.push_back(std::move(p));
                }
        }
      }
    }
  }
  if (out.empty())
    return fail(plain(fmt::format("no layout of {} devices fits this model and global batch {}",
                                  opt.devices, gbs),
                      "the global batch (microbatch_size x microbatches x dp of the base plan) "
                      "must be divisible by the data-parallel degree"));
  return out;
}

std::vector<Json> megatron_defaults(const Json& base, int devices) {
  auto facts_or = facts(base);
  if (!facts_or) return {};  // search_space reports it
  const ModelFacts& mf = *facts_or;
  auto rb = resolve(base, Json::object());
  if (!rb) return {};  // search_space reports it
  const int64_t gbs = rb->global_batch();
  int node_tp = 1;
  for (int t : {8, 4, 2})
    if (t <= mf.dpn && mf.heads % t == 0 && devices % t == 0) {
      node_tp = t;
      break;
    }
  std::vector<Json> out;
  for (int tp : node_tp > 1 ? std::vector<int>{1, node_tp} : std::vector<int>{1})
    for (int pp = 1; pp <= devices / tp && pp <= mf.layers; pp *= 2) {
      if ((devices / tp) % pp != 0) continue;
      const int dp = devices / tp / pp;
      if (gbs % dp != 0) continue;
      const int ep = mf.experts > 0 && dp > 1 && mf.experts % dp == 0 ? dp : 1;
      Json p = {{"family", "1f1b"},       {"tp", tp},
                {"pp", pp},               {"dp", dp},
                {"microbatches", gbs / dp}, {"microbatch_size", 1},
                {"zero", dp > 1 ? 1 : 0}, {"recompute", "none"},
                {"bucket_size_MB", 25},   {"sequence_parallel", tp > 1}};
      if (mf.experts > 0) p["ep"] = ep;  // a dense model has no expert parallelism
      // Megatron-LM's --tp-comm-overlap is off unless asked for
      if (rb->tp_comm_overlap) p["tp_comm_overlap"] = false;
      if (rb->cp > 1) p["cp"] = 1;  // (not searched)
      out.push_back(std::move(p));
    }
  return out;
}

Json search_json(const SearchResult& r, int devices) {
  Json j = {{"devices", devices},
            {"global_batch", r.global_batch},
            {"space", r.space},
            {"estimated", r.estimated},
            {"over_memory_by_estimate", r.over_memory},
            {"simulated", r.simulated},
            {"extra_batches", r.batches},
            {"granularity", sim::granularity_name(r.granularity)},
            {"finalists_at_op_granularity", r.finalists},
            {"invalid", r.invalid},
            {"infeasible", r.infeasible},
            {"estimate_s", r.estimate_s},
            {"simulate_s", r.simulate_s},
            {"search_s", r.total_s}};
  j["best"] = r.best ? point_json(*r.best) : Json();
  j["megatron_default"] = r.baseline ? point_json(*r.baseline) : Json();
  if (r.best && r.baseline)
    j["speedup_vs_megatron_default"] = r.baseline->step_time_ms / r.best->step_time_ms;
  Json beat = Json::array();
  for (size_t i = 1; i < r.results.size() && i < 11; ++i) beat.push_back(point_json(r.results[i]));
  j["runners_up"] = std::move(beat);
  return j;
}

Expected<SearchResult> search(const Json& base, const std::string& base_dir,
                              const SearchOptions& opt) {
  const auto t0 = Clock::now();
  SearchResult res;
  res.granularity = opt.granularity;
  // Size the base cluster to N devices so the estimate sees the right topology.
  auto space = search_space(base, opt);
  if (!space) return fail(std::move(space).error());
  res.space = space->size();
  res.global_batch = resolve(base, Json::object())->global_batch();  // (search_space checked it)
  auto probe_doc = point_plan(base, (*space)[0]);
  if (!probe_doc) return fail(std::move(probe_doc).error());
  JsonSource probe_src = JsonSource::from_json(*probe_doc, "search");
  auto probe = plan::parse_plan(probe_src);
  if (!probe) return fail(std::move(probe).error());
  const double cap =
      opt.memory_cap_GiB > 0 ? opt.memory_cap_GiB : probe->cluster.device.memory_GiB;
  auto est = Estimator::make(*probe, base_dir);
  if (!est) return fail(std::move(est).error());
  if (opt.progress) opt.progress(fmt::format("estimating {} points ...", space->size()));
  struct Cand {
    size_t idx;
    Estimate e;
  };
  std::vector<Cand> cands;
  const auto te = Clock::now();
  const double cap_bytes = cap * static_cast<double>(1LL << 30);
  const Resolved base_values = *base_defaults(base);  // (search_space checked it)
  for (size_t i = 0; i < space->size(); ++i) {
    auto r = resolve_from(base_values, (*space)[i]);
    if (!r) continue;
    auto e = (*est)(*r);
    if (!e) continue;
    ++res.estimated;
    if (!estimated_to_fit(*e, cap_bytes)) {  // on the device total, as simulate judges it
      ++res.over_memory;
      continue;
    }
    cands.push_back({i, *e});
  }
  res.estimate_s = since_s(te);
  res.estimates_per_s = res.estimate_s > 0 ? static_cast<double>(res.estimated) / res.estimate_s : 0;
  std::stable_sort(cands.begin(), cands.end(),
                   [](const Cand& a, const Cand& b) { return a.e.step_ms < b.e.step_ms; });
  // Megatron-style defaults go first (always simulated, and the search never returns anything
  // slower than them), then the promising points: the best overall, the best few of each
  // family and of each layout, and the best of each (layout, family) pair.
  std::vector<Json> pick = megatron_defaults(base, opt.devices);
  std::set<std::string> defaults;
  for (const auto& p : pick) defaults.insert(point_hash(p));
  std::set<size_t> chosen;
  std::map<std::string, size_t> per_family, per_layout, per_pair;
  for (const Cand& c : cands) {
    const Json& p = (*space)[c.idx];
    const std::string fam = p["family"];
    const std::string layout = fmt::format("{}x{}x{}", p["tp"].get<int>(), p["pp"].get<int>(),
                                           p["dp"].get<int>());
    const std::string pair = layout + " " + fam;
    const bool top = chosen.size() < opt.simulate_top;
    if (!top && per_family[fam] >= opt.per_family && per_layout[layout] >= opt.per_layout &&
        per_pair[pair] >= opt.per_layout_family)
      continue;
    chosen.insert(c.idx);
    ++per_family[fam];
    ++per_layout[layout];
    ++per_pair[pair];
    if (!defaults.count(point_hash(p))) pick.push_back(p);
  }
  if (chosen.empty())
    return fail(plain(fmt::format("no plan for {} devices is estimated to fit in {:.1f} GiB",
                                  opt.devices, cap),
                      "raise --memory-cap or --devices"));
  if (opt.progress)
    opt.progress(fmt::format("simulating {} candidates on {} threads ...", pick.size(), opt.jobs));
  const auto ts = Clock::now();
  res.results =
      simulate_points(base, base_dir, cap, pick, opt.jobs, opt.budget_s, opt.granularity);
  // Then further down the estimate's ranking, a batch at a time, until `patience` batches in a
  // row find no faster feasible plan or the budget is spent (the estimate ranks some families
  // and layouts too low; this walks past them).
  auto best_of = [](const std::vector<PointResult>& rs) {
    double b = 1e300;
    for (const auto& r : rs)
      if (r.feasible()) b = std::min(b, r.step_time_ms);
    return b;
  };
  double best = best_of(res.results);
  size_t next = 0, idle = 0;
  while (since_s(ts) < opt.budget_s && idle < opt.patience) {
    std::vector<Json> batch;
    for (; next < cands.size() && batch.size() < opt.batch; ++next)
      if (!chosen.count(cands[next].idx)) {
        chosen.insert(cands[next].idx);
        batch.push_back((*space)[cands[next].idx]);
      }
    if (batch.empty()) break;
    if (opt.progress)
      opt.progress(fmt::format("simulating {} more candidates (best so far {:.3f} ms) ...",
                               batch.size(), best));
    auto more = simulate_points(base, base_dir, cap, batch, opt.jobs,
                                opt.budget_s - since_s(ts), opt.granularity);
    const double b = best_of(more);
    res.results.insert(res.results.end(), more.begin(), more.end());
    ++res.batches;
    if (b < best) {
      best = b;
      idle = 0;
    } else {
      ++idle;
    }
  }
  // The finalists and the defaults again at op granularity (not bounded by the budget: they
  // are few, and the answer must be op granularity's), replacing their earlier rows.
  size_t exact_rows = res.results.size();  // rows simulated at op granularity, first
  if (opt.granularity != sim::Granularity::kOp) {
    std::vector<Json> again;
    for (size_t i : top_n(res.results, opt.finalists)) again.push_back(res.results[i].params);
    for (const auto& r : res.results)
      if (defaults.count(r.hash) && !std::any_of(again.begin(), again.end(), [&](const Json& p) {
            return point_hash(p) == r.hash;
          }))
        again.push_back(r.params);
    if (opt.progress)
      opt.progress(fmt::format("simulating {} finalists at op granularity ...", again.size()));
    auto exact = simulate_points(base, base_dir, cap, again, opt.jobs, 1e9, sim::Granularity::kOp);
    res.finalists = exact.size();
    std::map<std::string, PointResult> by_hash;
    for (auto& r : exact) by_hash.emplace(r.hash, std::move(r));
    for (auto& r : res.results)
      if (auto it = by_hash.find(r.hash); it != by_hash.end()) r = it->second;
    // Only op-granularity rows may win: the others are ranked after the finalists.
    exact_rows = static_cast<size_t>(
        std::stable_partition(res.results.begin(), res.results.end(),
                              [&](const PointResult& r) { return by_hash.count(r.hash) > 0; }) -
        res.results.begin());
  }
  res.simulate_s = since_s(ts);
  // Fastest feasible first (the op-granularity rows before the others).
  const std::vector<PointResult> tail(res.results.begin() + static_cast<ptrdiff_t>(exact_rows),
                                      res.results.end());
  res.results.resize(exact_rows);
  std::vector<size_t> order = top_n(res.results, 0);
  for (size_t i : top_n(tail, 0)) order.push_back(exact_rows + i);
  res.results.insert(res.results.end(), tail.begin(), tail.end());
  std::vector<PointResult> sorted;
  for (size_t i : order) sorted.push_back(res.results[i]);
  for (const auto& r : res.results) {
    ++res.simulated;
    if (r.status == "invalid") ++res.invalid;
    else if (r.status == "over_capacity") ++res.infeasible;
    if (!r.feasible()) sorted.push_back(r);
  }
  res.results = std::move(sorted);
  if (!res.results.empty() && res.results[0].feasible()) {
    res.best = res.results[0];
    auto plan = point_plan(base, res.best->params);
    if (plan) res.best_plan = std::move(*plan);
  }
  // The Megatron-style baseline: the fastest feasible default.
  for (const auto& r : res.results)
    if (defaults.count(r.hash)) res.baselines.push_back(r);
  for (const auto& b : res.baselines)
    if (b.feasible() && (!res.baseline || b.step_time_ms < res.baseline->step_time_ms))
      res.baseline = b;
  res.total_s = since_s(t0);
  return res;
}

}  // namespace stretto::explore
