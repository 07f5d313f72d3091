#pragma once
// Closing the loop with the replay backend: `stretto profile` and `stretto validate`
// (docs/validation.md). Torch-free: it drives replay.h's launch_local and reads its op records.
//
// profile: replays plans on this host and turns every measured op into an entry of the profiled
//   cost-model table, keyed exactly as the simulator will look it up. The keys come from the
//   cost queries the simulator itself builds for each DAG node (recorded by wrapping the cost
//   model while sim::build_program runs), so a compute op is filed under its op kind, pass,
//   dtype and forward GEMM shape after TP split (or its bytes when it has no GEMM shape), and a
//   communication under (kind, group size, nodes) at its bytes. A compute op's time is its
//   measured duration; a collective's or transfer's runs from its last participant's start to
//   its last participant's end (the simulator starts it when every member has reached it; the
//   wait for late peers is not its cost). Each entry is the mean over instances, iterations
//   and plans; the spread is kept.
//   An α-β line (t = α + bytes/β, least squares) is fitted per collective series and reported.
//
// validate: simulates a plan with a profiled table, replays it, and compares step, per device
//   metrics and every op (compare.h, with the measurement as the reference: error = (predicted
//   - measured) / measured).

#include <array>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "stretto/backend/replay.h"
#include "stretto/costmodel/cost_model.h"
#include "stretto/sim/coverage.h"
#include "stretto/traces/compare.h"

namespace stretto::backend {

/// Measured samples, pooled over plans, that become a profiled table.
class ProfileSamples {
 public:
  /// Adds the measured ops of one replay of `cp`, each under its node's cost query
  /// (sim::CostQueries). Returns the number of op instances filed.
  size_t add(const compiler::CompiledPlan& cp, const ReplayResult& r);

  /// CPU replays: the cores of this host, written into the table as the cost model's
  /// `host_cores` (the cores the `cpu` preset's processes share). A replay with more
  /// processes than cores is not filed (add returns 0): its ops took turns on the cores, so
  /// their times are not what one op takes alone; skipped() counts such replays.
  void set_host_cores(int cores) { host_cores_ = cores; }
  size_t skipped() const { return skipped_; }
  /// `profile --force`: file replays with more processes than cores all the same (their op
  /// times then include waiting for a core); skipped() still counts them.
  void set_file_oversubscribed(bool file) { file_oversubscribed_ = file; }

  /// The table (version 1, docs/costmodel.md): means of the samples (loop_validate.cpp: mean()).
  plan::Json table(const std::string& device) const;
  /// Per-series statistics for people: count, mean, median, min, max; α-β fits of collectives.
  plan::Json stats() const;
  std::string stats_table() const;

  /// Interference: compute ops of the same key timed while a communication op of their device
  /// ran (over half their duration) and while none ran; comm_sm_share = 1 - alone/overlapped
  /// (processor sharing: a compute op keeps 1 - share of the device), the median over keys with
  /// both, clamped to [0, 0.9]; nullopt without such keys.
  std::optional<double> comm_share() const;

  /// CPU replays (set_host_cores): the host thread's time per op outside every op's filed time
  /// (DeviceReport: overhead - post - unpack, over ops_per_step), the mean over devices and
  /// replays, microseconds; nullopt when none was measured. The table carries it as the
  /// `host_op_us` option.
  std::optional<double> host_op_us() const;

  /// CPU replays (set_host_cores): per communication kind (indexed by CommKind), how much
  /// slower a compute op runs when the last op its device issued before it (since its previous
  /// compute op) was such a communication op rather than a compute op: over the series
  /// measured at least 3 times in both contexts (at least 3 series), the sum of their mean
  /// times in that context over the sum of their mean times after compute (time-weighted),
  /// clamped to [0.25, 4]; NaN where not measured. The table carries the
  /// measured kinds as the `host_cold_factor` option and files its kernel times warm (each
  /// sample divided by the factor of its context).
  std::array<double, cost::kCommKinds> cold_factors() const;

  /// CPU replays (set_host_cores): per reuse distance k (1, 2, 3 or more: the other
  /// microbatches whose forward ran on a backward op's device since its own,
  /// cost::StaleActivations), how much slower a backward op (B, BI, BW) runs at that distance
  /// than fresh (k = 0), both right after a compute op: over the series measured at least 3
  /// times both ways (at least 3 series), the sum of their mean times at k over the sum of
  /// their fresh mean times (time-weighted), clamped to [0.25, 4]; NaN where not measured, [0]
  /// is 1. The table carries the measured distances as the `host_reuse_factor` option (a
  /// distance not measured takes the nearest shorter one's factor, or 1) and files its kernel
  /// times fresh (each sample divided by its distance's factor).
  std::array<double, cost::kReuseDistances> reuse_factors() const;

  /// CPU replays with more processes than cores (not filed, see set_host_cores): from their
  /// compute ops, the share of the cores that the processes got while they outnumbered them.
  /// Per op, the measured number a(t) of the host's compute ops running at each instant splits
  /// its duration into time with a <= cores and the integral of cores / a where a > cores; the
  /// simulator's op, of warm table time W (times its context's cold factor), takes as long when
  /// W = under + efficiency * that integral. Solved over every op with both a table time and
  /// oversubscribed time (at least 20 ops): efficiency = (sum W - sum under) / sum integral,
  /// clamped to [0.05, 1]; nullopt without such ops. The table carries it as the
  /// `host_share_efficiency` option.
  std::optional<double> share_efficiency() const;
  /// The compute ops of oversubscribed replays with a table time and oversubscribed time (what
  /// share_efficiency solves over; it needs at least 20).
  size_t share_ops() const;

  size_t kernel_series() const { return shapes_.size() + bytes_.size(); }
  size_t comm_series() const { return comms_.size(); }

 private:
  // (op, pass, dtype, n, k, batch) -> m -> ns samples
  std::map<std::tuple<std::string, std::string, std::string, int64_t, int64_t, int64_t>,
           std::map<int64_t, std::vector<int64_t>>>
      shapes_;
  // (op, pass, dtype) -> bytes -> ns samples
  std::map<std::tuple<std::string, std::string, std::string>, std::map<int64_t, std::vector<int64_t>>>
      bytes_;
  int host_cores_ = 0;
  size_t skipped_ = 0;
  bool file_oversubscribed_ = false;
  std::vector<double> host_op_ns_;  // per (replay, device)
  // (kind, group, nodes) -> bytes -> ns samples
  std::map<std::tuple<std::string, int, int>, std::map<int64_t, std::vector<int64_t>>> comms_;
  // series key (series_key()) -> samples by context: [0] after a compute op (or first), [k]
  // right after a communication op of CommKind k; plus kCommKinds x d for a backward op at
  // reuse distance bucket d (cost::StaleActivations::bucket; CPU replays only)
  std::map<std::string, std::array<std::vector<int64_t>, cost::kCommKinds * cost::kReuseDistances>>
      ctx_;
  // reuse_factors() with the distances not measured filled (the nearest shorter one's, or 1)
  std::array<double, cost::kReuseDistances> reuse_filled() const;
  // a series' table time: the mean of its samples, cold ones divided by their context's factor
  // and stale ones by their distance's factor r
  int64_t warm_mean(const std::string& series, const std::vector<int64_t>& raw,
                    const std::array<double, cost::kCommKinds>& f,
                    const std::array<double, cost::kReuseDistances>& r) const;
  // compute ops of oversubscribed replays (share_efficiency)
  struct OversubOp {
    std::string series;
    compiler::CommKind ctx = compiler::CommKind::kNone;
    size_t distance = 0;  // reuse distance bucket
    double under_ns = 0, over_share_ns = 0;  // time with a <= cores; integral of cores / a
  };
  std::vector<OversubOp> oversub_;
  struct ShareSums {
    double table = 0, under = 0, over = 0;
    size_t ops = 0;
  };
  ShareSums share_sums() const;
  // compute key -> (alone, overlapped) durations
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>> overlap_;
};

/// The measured timeline of a replay: per op, the median start and end over the measured
/// iterations, aligned like the simulator's (compare.h).
traces::Timeline timeline_from_replay(const compiler::CompiledPlan& cp, const ReplayResult& r,
                                      const std::string& source);

/// One plan validated.
/// The cost model's kernel_style a replay on a GPU corresponds to, against the style the plan's
/// prediction was made in (docs/validation.md, "Which kernel style the replay is"). `replay
/// --kernels fused` (the default) calls the ATen ops a plain PyTorch program calls: the cost
/// model prices those as kernel_style `eager`, not `fused` (Megatron / Transformer Engine's
/// fused kernels, the default on h100-sxm and h200). `--kernels reference` runs explicit
/// formulas, which no kernel style prices.
struct KernelStyleCheck {
  std::string plan_style;    ///< the prediction's: "fused", "eager" or "roofline"
  std::string replay_style;  ///< "eager" (--kernels fused) or "reference" (no style)
  bool matches = true;
  std::string message, hint;  ///< when it does not match: the warning and the way out
};

/// The check for a replay of `cp` with `kernels` on a GPU; nullopt where it does not apply (a
/// replay on the CPU, whose kernels no style was measured on, or a prediction that does not
/// come from the analytic model: a profiled table or fixed costs).
std::optional<KernelStyleCheck> kernel_style_check(const compiler::CompiledPlan& cp, bool on_gpu,
                                                   Kernels kernels);
/// {"plan": ..., "replay": ..., "matches": ...} (and "hint" when it does not match).
plan::Json kernel_style_json(const KernelStyleCheck& k);

struct PlanValidation {
  std::string plan;
  int64_t predicted_ns = 0;
  double measured_mean_ms = 0, measured_std_ms = 0, measured_min_ms = 0;
  int measured_steps = 0;  ///< measured steps behind the mean (all rounds pooled)
  double step_err = 0;  ///< (predicted - measured mean) / measured mean
  /// Measured step time after the last recorded op ends (the optimizer step and the step-end
  /// synchronisation, which the simulator does not model), ms.
  double measured_tail_ms = 0;
  /// The measurement's own noise, percent of the measured mean (NaN with fewer than 4 steps):
  /// the larger of twice the standard error of the mean (2 std / sqrt(n): steps taken as
  /// independent, a lower bound) and the difference between the means of the first and the
  /// second half of the steps in the order measured (the host's drift over the measurement,
  /// rounds included). An error within it cannot be told from noise.
  double noise_pct = std::numeric_limits<double>::quiet_NaN();
  traces::Comparison ops;  ///< a = measured, b = predicted
  /// With a profiled cost model: how much of the plan its table prices (the rest fell back to
  /// the analytic model).
  std::optional<sim::TableCoverage> coverage;
  /// On a GPU with the analytic model: the prediction's kernel style against the replay's.
  std::optional<KernelStyleCheck> kernel_style;
};

/// PlanValidation::noise_pct of measured step times (ns, in the order measured).
double measured_noise_pct(const std::vector<int64_t>& step_ns);

PlanValidation validate_plan(const compiler::CompiledPlan& cp, const sim::Result& predicted,
                             const ReplayResult& measured, const traces::CompareOptions& opt = {});

plan::Json validation_json(const std::vector<PlanValidation>& v);
std::string validation_table(const std::vector<PlanValidation>& v);

/// A Chrome trace with each device's predicted and measured timelines one above the other.
std::string validation_trace(const std::vector<PlanValidation>& v);

}  // namespace stretto::backend
