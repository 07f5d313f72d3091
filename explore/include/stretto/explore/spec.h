#pragma once
// Sweep specs and points (docs/sweeps.md).
//
// A *spec* names a base plan and *axes*; each axis is a list of values or a range. A *point*
// is one choice per axis (a flat JSON object, e.g. {"family":"1f1b","tp":2,"pp":4,"dp":8,
// "microbatches":16}); its *hash* (16 hex digits: FNV-1a 64 over the canonical JSON of the
// object, finished with MurmurHash3's fmix64) keys its row in the results database, so it is stable across runs, machines, shard
// counts and the order axes are listed in. The *grid* is the cartesian product of the axes,
// pruned by the spec's constraints; a spec may instead ask for a seeded random sample of it.
//
// A point becomes a plan (`point_plan`) by editing the base plan: JSON-pointer axes set that
// field; `microbatch_size` sets the model's; any schedule axis (family, pp/ranks, stages_per_rank,
// microbatches, tp, dp, ep, zero, bucket_size_MB, recompute, streams, prefetch,
// sequence_parallel, tp_comm_overlap) regenerates the schedule as a builder call over a TP x DP x PP device
// layout (TP fastest, then DP, then PP: Megatron's order), taking every parameter the point
// does not set from the base plan. Everything is deterministic.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stretto/explore/expr.h"
#include "stretto/plan/json_source.h"
#include "stretto/sim/granularity.h"

namespace stretto::explore {

struct Axis {
  std::string name;         // "family", "layout", "/cluster/inter_node/bandwidth_GBps", ...
  std::vector<plan::Json> values;  // "layout": objects {tp, pp, dp[, ep]}
};

/// The most devices a point's layout (tp x pp x dp) may use: the layout's own dp bound.
inline constexpr int64_t kMaxLayoutDevices = int64_t{1} << 20;

struct SweepSpec {
  std::string file;       // the spec's path (for messages)
  std::string name;       // its "name" ("" without one; not part of the canonical spec)
  std::string base_path;  // the base plan's path as written in the spec
  std::string base_dir;   // directory of the base plan (profiled cost tables resolve there)
  plan::Json base;        // the base plan document
  std::vector<Axis> axes;
  std::vector<Expr> constraints;
  std::optional<size_t> sample_n;  // seeded random sample of the pruned grid
  uint64_t seed = 0;
  double memory_cap_GiB = 0;  // 0: the device's memory
  /// What the engine runs as one task at each point (sim/granularity.h): the spec's
  /// "granularity", "op" unless it says "pass".
  sim::Granularity granularity = sim::Granularity::kOp;
  /// The spec with the base plan inlined, canonical: stored in the database (a database
  /// belongs to one spec) and enough to rebuild any point's plan.
  plan::Json canonical;
  std::string hash;  // of `canonical`
};

/// Parses a spec file (the base plan path is relative to the spec's directory).
Expected<SweepSpec> load_spec(const std::string& path);
/// Parses a spec document. `dir` resolves the base plan path.
Expected<SweepSpec> parse_spec(const plan::JsonSource& src, const std::string& dir);

struct Point {
  plan::Json params;  // flat object: axis name -> value (layout expanded into tp, pp, dp, ep)
  std::string hash;  // point_hash(params)
};

/// FNV-1a 64 of the canonical JSON dump (keys sorted) + fmix64, as 16 lowercase hex digits.
std::string stable_hash(const plan::Json& j);
inline std::string point_hash(const plan::Json& params) {
  return stable_hash(params);
}

struct Grid {
  std::vector<Point> points;  // in grid order (or sample order), no duplicates
  size_t grid_size = 0;       // cartesian product size before constraints
  size_t pruned = 0;          // removed by constraints
};

/// Expands the grid (or the sample). Constraint errors (unknown name, type mismatch) are
/// diagnostics; a grid over 10 M combinations without `sample`, or keeping over 1 M points, is
/// refused (docs/sweeps.md). `progress`, when set, is called with (combinations checked, of how
/// many) every 2^16 combinations: checking 10 M takes tens of seconds.
Expected<Grid> enumerate(const SweepSpec& spec,
                         const std::function<void(size_t, size_t)>& progress = {});

/// Every parameter of a point's plan, the point's own values completed from the base plan's
/// resolved values (plan/resolved.h): a point is "the resolved base plus its edits".
struct Resolved {
  std::string family;  // canonical builder family ("" = the base's hand-written directives)
  int tp = 1, pp = 1, dp = 1, ep = 1;
  int cp = 1;  // context parallelism (layout cp / replicate's context_parallel)
  std::string cp_comm_type = "p2p";  // layout cp_comm_type / replicate's (with cp > 1)
  int stages_per_rank = 0;  // 0: the family's default
  int microbatches = 1;
  int64_t microbatch_size = 1;
  int zero = 0;
  double bucket_size_MB = 25;
  std::string recompute = "none";  // none | selective | full
  std::string streams = "separate";  // separate | shared
  plan::Json prefetch;               // null: not set
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;  // Megatron-Core --tp-comm-overlap (needs sequence_parallel)
  std::vector<std::string> order = {"tp", "dp", "pp"};  // rank order, innermost first
  bool reshard_after_forward = true;  // ZeRO-3: free gathered parameters after the forward
  bool layout_base = false;    // the base is a builder call with the "layout" shorthand
  int devices_per_node = 1;    // the base's resolved cluster.devices_per_node (plan or preset)
  bool schedule_axes = false;  // the point changes the schedule: it is regenerated
  int64_t devices() const { return int64_t{tp} * pp * dp * cp; }
  int64_t global_batch() const { return microbatch_size * microbatches * dp; }
  /// The same schedule (every field a schedule axis sets).
  bool same_schedule(const Resolved& o) const;
};
/// The base plan's own values: the base parsed and resolved by plan/ (resolve_structure over
/// its expanded builder call), read once per spec and passed to resolve_from() /
/// bindings_from() when many points share the base. A base the parser refuses is an error
/// with the parser's diagnostics (never a silent default).
Expected<Resolved> base_defaults(const plan::Json& base_plan);
/// base_defaults + resolve_from; a point value of the wrong type is an error.
Expected<Resolved> resolve(const plan::Json& base_plan, const plan::Json& params);
Expected<Resolved> resolve_from(Resolved defaults, const plan::Json& params);

/// Checks one value of a known axis with the plan parser's rules and words (the diagnostic
/// `simulate` gives for the same value in a plan), located at `pointer` of the spec.
std::optional<Diagnostic> check_axis_value(const std::string& axis, const plan::Json& value);

/// Constraint bindings of a point: its parameters plus devices, global_batch, stages.
Expected<Bindings> bindings_of(const plan::Json& base_plan, const plan::Json& params);
Expected<Bindings> bindings_from(const Resolved& defaults, const plan::Json& params);

/// The plan document of a point: the resolved base plus the point's edits. A point that sets
/// every schedule value to the base's own leaves the schedule as written; on a base with the
/// layout shorthand, a point the shorthand can express edits the builder call (keeping the
/// layout's order); otherwise the schedule is regenerated (layout_schedule). The plan's
/// `name` says which point it is. Diagnostics say why the point is invalid.
Expected<plan::Json> point_plan(const plan::Json& base_plan, const plan::Json& params);
/// A point's plan document together with its resolved values (the base resolved once, plus
/// the point's edits), which the estimator and constraints use without resolving again.
struct PointPlan {
  plan::Json doc;
  Resolved resolved;
};
/// `base_values`, when given, is base_defaults(base_plan), which a caller resolving many points
/// of one base computes once; it is used unless a JSON-pointer axis edits the plan.
Expected<PointPlan> resolve_point(const plan::Json& base_plan, const plan::Json& params,
                                  const Resolved* base_values = nullptr);
/// "<base name> (sweep point: family=1f1b, zero=2)": the `name` point_plan writes.
std::string point_name(const plan::Json& base_plan, const plan::Json& params);

/// Layout directives for tp x pp x dp (x ep) with a builder family: the `schedule` value of a
/// plan (a builder call) and the number of PP regions the model must be cut into.
struct GeneratedSchedule {
  plan::Json schedule;
  int pp_regions = 1;
};
Expected<GeneratedSchedule> layout_schedule(const Resolved& r);

}  // namespace stretto::explore
