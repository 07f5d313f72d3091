#pragma once
// Running a sweep: every point of a spec's grid (or of one shard of it) compiled and simulated
// with replica folding on a pool of threads, each result committed to a Store as it finishes;
// points already in the store are skipped, so a killed sweep resumes (store.h).
//
// Sharding: a point belongs to shard I of N when its hash, read as a 64-bit number, is I mod N.
// Shards are thus disjoint, cover the grid, and do not depend on enumeration order.

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stretto/explore/estimate.h"
#include "stretto/explore/spec.h"
#include "stretto/explore/store.h"
#include "stretto/sim/pipeline_metrics.h"
#include "stretto/sim/session.h"

namespace stretto::explore {

/// The fields of `stretto simulate --format json` for one result (sim::metrics_json), with
/// `over_capacity` (per device and overall) judged against `memory_cap_GiB`, and the cap.
plan::Json result_json(const compiler::CompiledPlan& cp, const sim::Result& r,
                       double memory_cap_GiB);
/// The same object as JSON text, written directly (a sweep stores one per point; building the
/// Json and dumping it cost more than compiling the point's order): Json::parse of it equals
/// result_json(), and its text is result_json().dump()'s, up to how equal doubles are spelled.
std::string result_json_text(const compiler::CompiledPlan& cp, const sim::Result& r,
                             double memory_cap_GiB);
/// The same, with the result's pipeline metrics (sim::pipeline_metrics) already computed.
std::string result_json_text(const compiler::CompiledPlan& cp, const sim::Result& r,
                             const sim::PipelineMetrics& pm, double memory_cap_GiB);

/// What evaluate_point may reuse between the points that one thread evaluates: the analytic
/// estimator, for as long as the points' model, cluster and cost model stay the same (it
/// expands the model once per microbatch size and TP degree). One per thread.
struct EvalCache {
  /// The plan `estimator` was made for, less what the estimator takes per point (the
  /// schedule, the name, model.microbatch_size and model.pp_regions): estimate_key().
  plan::Json key;
  std::optional<Estimator> estimator;
  /// base_defaults of the base of the spec whose hash is `spec_hash` (resolve_point's
  /// `base_values`): resolved once, not once per point.
  std::string spec_hash;
  std::optional<Resolved> base_values;
};

/// Compiles and simulates one point (folded replicas, no memory curves). Never throws; an
/// invalid point comes back with status "invalid" and its rendered diagnostics. With a cache,
/// the results are the same, only cheaper when consecutive points share a model.
PointResult evaluate_point(const SweepSpec& spec, const Point& p, EvalCache* cache = nullptr);

/// True when `hash` belongs to shard `index` of `count`.
bool in_shard(const std::string& hash, int index, int count);

struct Progress {
  size_t total = 0;    // points of this run's shard
  size_t done = 0;     // finished, including those found in the store
  size_t resumed = 0;  // found in the store at start
  size_t ok = 0, over_capacity = 0, invalid = 0;
  double elapsed_s = 0;
  double rate = 0;   // points per second in this run
  double eta_s = 0;  // remaining points / rate
};

struct SweepOptions {
  int jobs = 1;
  int shard_index = 0, shard_count = 1;
  /// Called from the runner's thread about every 200 ms and once at the end.
  std::function<void(const Progress&)> progress;
  /// Set to stop early (finished points stay committed).
  std::atomic<bool>* stop = nullptr;
  /// Stop after this many new points (0: all). For tests of resume.
  size_t limit = 0;
};

/// Runs the shard's points that are not in `store` yet. Fails only on a database error.
Expected<Progress> run_sweep(const SweepSpec& spec, const Grid& grid, Store& store,
                             const SweepOptions& opt);

/// One finished point as `stretto sweep --format json` lists it: hash, params, status,
/// wall_ms, the diagnostic (when there is one), and for simulated points `metrics` (the
/// stored `simulate --format json` object) and `estimate` (step_time_ms, peak_memory_bytes).
plan::Json point_json(const PointResult& r);

/// Pareto front of step time against peak memory over feasible points: indices into `rows`,
/// by increasing step time. A point is on it when no other feasible point is at least as fast
/// and at most as large, and strictly better in one.
std::vector<size_t> pareto_front(const std::vector<PointResult>& rows);
/// Feasible points by increasing step time (ties: smaller memory, then hash); at most n.
std::vector<size_t> top_n(const std::vector<PointResult>& rows, size_t n);

}  // namespace stretto::explore
