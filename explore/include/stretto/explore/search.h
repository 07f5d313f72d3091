#pragma once
// Plan search (docs/sweeps.md "How search works"): the fastest plan for a base plan's model on
// N devices under a memory cap, at the base plan's global batch (sequences per step).
//
// 1. Enumerate the space: every TP x PP x DP factorisation of N (TP within a node), EP in
//    {1, DP} for MoE models, the schedule families, microbatch sizes (the count follows from the
//    global batch), ZeRO 0-3, recompute none/selective/full, two bucket sizes; not the
//    schedules a family's builder refuses (schedules::check_schedule: DualPipeV with fewer
//    microbatches than stages, say).
// 2. Price every point with the analytic estimate (estimate.h): tens of thousands per second.
// 3. Drop points whose estimated memory exceeds the cap by more than 10 % (the estimate is not
//    exact, the simulator decides), rank the rest by estimated step time.
// 4. Simulate, on -j threads, the best `simulate_top` of them plus the best few of each family
//    and of each layout, and the best of each (layout, family) pair (the estimate's errors
//    differ by family and layout), until the time
//    budget is spent; then further batches down the estimate's ranking until two batches in a
//    row find no faster feasible plan. These rounds run at `granularity` (pass by default:
//    each region pass one engine task, sim/granularity.h).
// 5. Simulate the `finalists` fastest feasible candidates and the Megatron-style defaults
//    again at op granularity; the fastest feasible of those wins, so the printed prediction is
//    what `stretto simulate` says of the emitted plan.
// Also simulates Megatron-style default plans on the same devices for comparison.

#include <functional>
#include <string>
#include <vector>

#include "stretto/explore/estimate.h"
#include "stretto/explore/sweep.h"

namespace stretto::explore {

/// The most devices a search plans for: the largest device count a sweep factorises.
inline constexpr int kMaxSearchDevices = 1048576;

struct SearchOptions {
  int devices = 0;
  double memory_cap_GiB = 0;  // 0: the device's memory
  double budget_s = 60;       // wall-time budget of the simulation phase
  int jobs = 1;
  size_t simulate_top = 64;   // candidates ranked by the estimate to simulate
  size_t per_family = 4;      // and the best few of each family
  size_t per_layout = 2;      // and of each TP x PP x DP layout
  size_t per_layout_family = 1;  // and of each (layout, family) pair
  size_t batch = 64;          // then batches further down the ranking ...
  size_t patience = 2;        // ... until this many in a row find nothing faster
  sim::Granularity granularity = sim::Granularity::kPass;  // of the rounds above
  size_t finalists = 8;       // re-simulated at op granularity (as the defaults are)
  std::vector<std::string> families = {"1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipev"};
  std::function<void(const std::string&)> progress;  // one-line status updates (stderr on a TTY)
};

struct SearchResult {
  size_t space = 0;            // points enumerated
  size_t estimated = 0;        // priced by the estimate
  size_t over_memory = 0;      // dropped: estimated memory over the cap
  size_t simulated = 0, invalid = 0, infeasible = 0;
  size_t batches = 0;  // extra batches simulated after the first
  sim::Granularity granularity = sim::Granularity::kPass;  // of the rounds
  size_t finalists = 0;  // candidates re-simulated at op granularity (defaults included)
  double estimate_s = 0, simulate_s = 0, total_s = 0;
  double estimates_per_s = 0;
  int64_t global_batch = 0;
  std::vector<PointResult> results;  // simulated candidates, fastest feasible first
  std::optional<PointResult> best;
  plan::Json best_plan;                 // runnable plan document of `best`
  std::optional<PointResult> baseline;  // the fastest feasible Megatron-style default plan
  std::vector<PointResult> baselines;
};

/// Searches. `base` is a plan document (its model, cluster, cost model and global batch are
/// kept); `base_dir` resolves profiled tables.
Expected<SearchResult> search(const plan::Json& base, const std::string& base_dir,
                              const SearchOptions& opt);

/// The report of `stretto search --format json` for a search on `devices` devices: the counts
/// and times, `best` and `megatron_default` (point_json rows or null),
/// `speedup_vs_megatron_default`, and the next ten simulated candidates as `runners_up`.
plan::Json search_json(const SearchResult& r, int devices);

/// The points `search` enumerates (parameters as in a sweep point), for comparing with a full
/// grid sweep over the same space.
Expected<std::vector<plan::Json>> search_space(const plan::Json& base, const SearchOptions& opt);

/// Megatron-style default plans for N devices: 1F1B, distributed optimizer (ZeRO-1), microbatch
/// size 1, 25 MB buckets, EP = DP for MoE models, TP = 1 (Megatron-LM's default) or a whole node
/// (8, fewer when the heads do not divide; sequence parallel on), PP = 1, 2, 4, ... The
/// search's baseline is the fastest of them that fits.
std::vector<plan::Json> megatron_defaults(const plan::Json& base, int devices);

}  // namespace stretto::explore
