// Sweep and search benchmarks (issue: sweeps and plan search). Reported next to each other:
//  - BM_SweepThroughput: points/s of a whole sweep (plan generation, compile, folded simulation,
//    SQLite commit) over 64-device plans on `threads` workers;
//  - BM_Estimate: analytic estimates/s on one core over the same points;
//  - BM_Agreement: over a sweep, the Spearman rank correlation of the estimate with the
//    simulator's step time, and where the simulator's best point ranks by the estimate
//    (est_rank_of_sim_best = 1 is perfect; sim_best_in_est_top10 = 1 when it is in the top 10).
//    Spaces: 0 = examples/sweeps/gpt_layouts_64.json, 1 = search space of the dense GPT on 64
//    devices, 2 = search space of the Qwen3-style MoE on 64 devices (a sample of each).
#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "stretto/explore/search.h"
#include "stretto/explore/sweep.h"

namespace fs = std::filesystem;
using namespace stretto;
using namespace stretto::plan;
using namespace stretto::compiler;
using namespace stretto::explore;

namespace {

// The examples folder (STRETTO_EXAMPLES in the environment overrides the build's, for running
// a copied binary elsewhere).
std::string examples_dir() {
  const char* e = std::getenv("STRETTO_EXAMPLES");
  return e ? e : STRETTO_EXAMPLES;
}
std::string example(const std::string& name) {
  return examples_dir() + "/" + name;
}

// The spec of a benchmark space, with its grid.
struct Space {
  SweepSpec spec;
  Grid grid;
};

Space space_of(int which, size_t sample) {
  Space s;
  if (which == 0) {
    s.spec = *load_spec(example("sweeps/gpt_layouts_64.json"));
  } else {
    const std::string plan =
        example(which == 1 ? "gpt_pp4_dp2_1f1b.json" : "piper_qwen3_moe_pp2_dp2_ep2.json");
    Json base = JsonSource::load(plan)->root();
    // Scale the global batch with the devices (the examples are 4 and 8 devices).
    if (base["schedule"].is_array())
      for (auto& d : base["schedule"])
        if (d["op"] == "split") d["num_microbatches"] = d["num_microbatches"].get<int>() * (which == 1 ? 4 : 16);
    SearchOptions so;
    so.devices = 64;
    s.spec.base = base;
    s.spec.base_dir = examples_dir();
    s.spec.canonical = {{"base", base}, {"bench", which}};
    s.spec.hash = stable_hash(s.spec.canonical);
    auto points = search_space(base, so);
    for (auto& p : *points) s.grid.points.push_back({p, point_hash(p)});
    s.grid.grid_size = s.grid.points.size();
  }
  if (which == 0) s.grid = *enumerate(s.spec);
  if (sample > 0 && s.grid.points.size() > sample) {
    // Every k-th point: deterministic and spread over the whole grid.
    std::vector<Point> pts;
    const double k = static_cast<double>(s.grid.points.size()) / static_cast<double>(sample);
    for (size_t i = 0; i < sample; ++i)
      pts.push_back(s.grid.points[static_cast<size_t>(static_cast<double>(i) * k)]);
    s.grid.points = std::move(pts);
  }
  return s;
}

// CPU seconds this process has used (all threads): the machine is shared, so a sweep's wall
// time depends on the neighbours, its CPU time much less.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::vector<PointResult> run(const Space& s, int threads, double* seconds, double* cpu = nullptr) {
  const double cpu0 = cpu_seconds();
  const fs::path db = fs::temp_directory_path() / ("bench_explore_" + std::to_string(::getpid()) + ".db");
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
  auto store = Store::open(db.string(), s.spec.canonical, s.spec.hash, "0/1");
  SweepOptions so;
  so.jobs = threads;
  const auto t0 = std::chrono::steady_clock::now();
  auto pr = run_sweep(s.spec, s.grid, *store, so);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (cpu) *cpu = cpu_seconds() - cpu0;
  auto rows = *store->rows();
  if (const char* keep = std::getenv("STRETTO_BENCH_KEEP_DB"))  // a folder, for a closer look
    for (const char* ext : {"", "-wal"})
      if (fs::exists(db.string() + ext))
        fs::copy_file(db.string() + ext, fs::path(keep) / (db.filename().string() + ext),
                      fs::copy_options::overwrite_existing);
  fs::remove(db);
  fs::remove(db.string() + "-wal");
  fs::remove(db.string() + "-shm");
  return rows;
}

void BM_SweepThroughput(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  Space s = space_of(0, 0);
  if (state.range(1) != 0) s.spec.granularity = stretto::sim::Granularity::kPass;
  size_t ok = 0, n = 0;
  double secs = 0, sim_ms = 0, cpu = 0;
  for (auto _ : state) {
    auto rows = run(s, threads, &secs, &cpu);
    n = rows.size();
    ok = 0;
    sim_ms = 0;
    for (const auto& r : rows)
      if (r.simulated()) ++ok, sim_ms += r.wall_ms;
    state.SetIterationTime(secs);
  }
  state.counters["points"] = static_cast<double>(n);
  state.counters["simulated"] = static_cast<double>(ok);
  state.counters["points_per_s"] = static_cast<double>(n) / secs;
  state.counters["cpu_s"] = cpu;
  // What `threads` otherwise idle cores would do: points per CPU second x threads.
  state.counters["points_per_cpu_s"] = static_cast<double>(n) / cpu;
  state.counters["ms_per_simulated_point"] = ok ? sim_ms / static_cast<double>(ok) : 0;
  state.counters["load_avg_1min"] = [] {
    double l[1] = {0};
    return getloadavg(l, 1) == 1 ? l[0] : 0.0;
  }();
}
// threads, pass granularity
BENCHMARK(BM_SweepThroughput)
    ->Args({1, 0})
    ->Args({2, 0})
    ->Args({1, 1})
    ->Args({2, 1})
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

void BM_Estimate(benchmark::State& state) {
  Space s = space_of(static_cast<int>(state.range(0)), 0);
  auto doc = point_plan(s.spec.base, s.grid.points[0].params);
  JsonSource src = JsonSource::from_json(*doc, "bench");
  auto plan = parse_plan(src);
  auto est = Estimator::make(*plan, s.spec.base_dir);
  std::vector<Resolved> rs;
  for (const auto& p : s.grid.points)
    if (auto r = resolve(s.spec.base, p.params)) rs.push_back(*r);
  size_t n = 0;
  double sink = 0;
  for (auto _ : state)
    for (const auto& r : rs) {
      auto e = (*est)(r);
      if (e) sink += e->step_ms;
      ++n;
    }
  benchmark::DoNotOptimize(sink);
  state.counters["estimates_per_s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsRate);
  state.counters["points"] = static_cast<double>(rs.size());
}
BENCHMARK(BM_Estimate)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {  // average ranks over ties
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = (static_cast<double>(i + j) / 2) + 1;
    i = j + 1;
  }
  return r;
}

void BM_Agreement(benchmark::State& state) {
  Space s = space_of(static_cast<int>(state.range(0)), static_cast<size_t>(state.range(1)));
  std::vector<PointResult> rows;
  double secs = 0;
  for (auto _ : state) {
    rows = run(s, 2, &secs);
    state.SetIterationTime(secs);
  }
  std::vector<double> est, sim;
  for (const auto& r : rows)
    if (r.simulated() && r.estimate_step_ms > 0) {
      est.push_back(r.estimate_step_ms);
      sim.push_back(r.step_time_ms);
    }
  const size_t n = est.size();
  state.counters["simulated"] = static_cast<double>(n);
  state.counters["points_per_s"] = static_cast<double>(rows.size()) / secs;
  if (n < 3) return;
  auto re = ranks(est), rsim = ranks(sim);
  const double mean = (static_cast<double>(n) + 1) / 2;
  double cov = 0, ve = 0, vs = 0;
  for (size_t i = 0; i < n; ++i) {
    cov += (re[i] - mean) * (rsim[i] - mean);
    ve += (re[i] - mean) * (re[i] - mean);
    vs += (rsim[i] - mean) * (rsim[i] - mean);
  }
  state.counters["spearman"] = cov / std::sqrt(ve * vs);
  const size_t best = static_cast<size_t>(std::min_element(sim.begin(), sim.end()) - sim.begin());
  state.counters["est_rank_of_sim_best"] = re[best];
  state.counters["sim_best_in_est_top10"] = re[best] <= 10 ? 1 : 0;
  // Within 10 %: the estimate's pick simulated vs the simulator's best.
  const size_t pick = static_cast<size_t>(std::min_element(est.begin(), est.end()) - est.begin());
  state.counters["est_pick_slowdown"] = sim[pick] / sim[best];
  double err = 0;
  for (size_t i = 0; i < n; ++i) err += std::abs(est[i] - sim[i]) / sim[i];
  state.counters["mean_abs_rel_error"] = err / static_cast<double>(n);
}
BENCHMARK(BM_Agreement)
    ->Args({0, 0})
    ->Args({1, 300})
    ->Args({2, 300})
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace

namespace {

// Search quality: `search` against simulating its whole space (recompute modes included), and
// against the Megatron-style defaults. Args: model (1 dense GPT, 2 MoE), devices.
void BM_SearchVsGrid(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const int devices = static_cast<int>(state.range(1));
  Space full = space_of(which, 0);
  SearchOptions so;
  so.devices = devices;
  so.jobs = 2;
  so.budget_s = 120;
  // space_of sized the global batch for 64 devices; rebuild the space for `devices`.
  full.grid.points.clear();
  auto points = search_space(full.spec.base, so);
  for (auto& p : *points) full.grid.points.push_back({p, point_hash(p)});
  double grid_s = 0;
  std::optional<SearchResult> sr;
  for (auto _ : state) {
    auto r = search(full.spec.base, full.spec.base_dir, so);
    if (!r) {
      state.SkipWithError(render_all(r.error()).c_str());
      return;
    }
    sr = std::move(*r);
    state.SetIterationTime(sr->total_s);
  }
  auto rows = run(full, 2, &grid_s);
  auto best = top_n(rows, 1);
  state.counters["space"] = static_cast<double>(sr->space);
  state.counters["search_simulated"] = static_cast<double>(sr->simulated);
  state.counters["search_s"] = sr->total_s;
  state.counters["grid_points"] = static_cast<double>(rows.size());
  state.counters["grid_s"] = grid_s;
  if (sr->best && !best.empty()) {
    state.counters["search_best_ms"] = sr->best->step_time_ms;
    state.counters["grid_best_ms"] = rows[best[0]].step_time_ms;
    state.counters["search_over_grid"] = sr->best->step_time_ms / rows[best[0]].step_time_ms;
  }
  if (sr->best && sr->baseline) {
    state.counters["megatron_default_ms"] = sr->baseline->step_time_ms;
    state.counters["speedup_vs_megatron"] = sr->baseline->step_time_ms / sr->best->step_time_ms;
  }
}
BENCHMARK(BM_SearchVsGrid)
    ->Args({1, 8})
    ->Args({1, 64})
    ->Args({2, 64})
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace

namespace {

// Search at scale, alone (no grid): the dense GPT with its global batch scaled to one sequence
// per device (the example's 16 sequences on 8 devices, times devices / 8), searched on
// `devices` devices with 2 jobs; the rounds at the given granularity (0 op, 1 pass, search's
// default), the finalists at op granularity. The target: 1,024 devices in <= 10 s
// (search_s). Args: devices, granularity.
void BM_Search(benchmark::State& state) {
  const int devices = static_cast<int>(state.range(0));
  Json base = JsonSource::load(example("gpt_pp4_dp2_1f1b.json"))->root();
  for (auto& d : base["schedule"])
    if (d["op"] == "split") d["num_microbatches"] = d["num_microbatches"].get<int>() * devices / 8;
  SearchOptions so;
  so.devices = devices;
  so.jobs = 2;
  so.budget_s = 600;
  so.granularity = state.range(1) != 0 ? sim::Granularity::kPass : sim::Granularity::kOp;
  std::optional<SearchResult> sr;
  for (auto _ : state) {
    auto r = search(base, examples_dir(), so);
    if (!r) {
      state.SkipWithError(render_all(r.error()).c_str());
      return;
    }
    sr = std::move(*r);
    state.SetIterationTime(sr->total_s);
  }
  state.counters["space"] = static_cast<double>(sr->space);
  state.counters["simulated"] = static_cast<double>(sr->simulated);
  state.counters["finalists"] = static_cast<double>(sr->finalists);
  state.counters["estimate_s"] = sr->estimate_s;
  state.counters["simulate_s"] = sr->simulate_s;
  state.counters["search_s"] = sr->total_s;
  if (sr->best) state.counters["best_ms"] = sr->best->step_time_ms;
}
BENCHMARK(BM_Search)
    ->Args({1024, 1})
    ->Args({1024, 0})
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace

namespace {

// Compile time of a tensor-parallel layout through the explore layout generator:
// TP x PP x DP of the dense GPT example with 8 layers per stage, 1F1B, `m` microbatches. The
// issue's case is TP8 x PP16 x DP48 = 6,144 devices.
void BM_CompileTP(benchmark::State& state) {
  const int tp = static_cast<int>(state.range(0)), pp = static_cast<int>(state.range(1));
  const int dp = static_cast<int>(state.range(2)), m = static_cast<int>(state.range(3));
  Json base = JsonSource::load(example("gpt_pp4_dp2_1f1b.json"))->root();
  auto doc = point_plan(base, {{"tp", tp}, {"pp", pp}, {"dp", dp}, {"family", "1f1b"},
                               {"microbatches", m}, {"zero", 1},
                               {"/model/layers", 8 * pp}, {"/model/heads", 32}});
  if (!doc) {
    state.SkipWithError(render_all(doc.error()).c_str());
    return;
  }
  JsonSource src = JsonSource::from_json(*doc, "tp.json");
  auto plan = parse_plan(src);
  size_t nodes = 0;
  for (auto _ : state) {
    auto cp = compile(*plan);
    if (!cp) {
      state.SkipWithError(render_all(cp.error()).c_str());
      return;
    }
    nodes = cp->dag.nodes.size();
  }
  state.counters["devices"] = tp * pp * dp;
  state.counters["nodes"] = static_cast<double>(nodes);
}
BENCHMARK(BM_CompileTP)->Args({8, 16, 48, 64})->Args({8, 16, 4, 64})->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
