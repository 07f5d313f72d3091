#pragma once
// The resolved plan (docs/plan-format.md "Resolved values"): what a plan means once presets,
// defaults and the layout shorthand are applied, with where each value came from.
//
// A plan is resolved once, and every door shows and uses these values under the same names
// (`stretto describe --format json`, the GUI's Parameters tab and `--dump-state`, sweeps and
// search as the base every point edits, Python's `Plan.resolved()`). The structural values
// (ranks, stages per rank, placement, TP groups, ZeRO flags, microbatches) are read from the
// directive list the compiler runs, i.e. after a builder call and its layout shorthand are
// expanded, so they are what is simulated, not a second reading of the JSON.
//
// Terms:
//   field   one named value (`tp`, `zero`, `microbatches`, `gemm_efficiency`, ...), its plan
//           path (the JSON pointer a user writes it at; empty when the plan has no such key)
//           and its source:
//             plan        written in the plan at `path`
//             layout      derived from the builder call's "layout" shorthand
//             directives  read from hand-written (or builder-generated) directives
//             builder     the builder family's default (stages_per_rank of a V schedule)
//             preset      the cluster preset / device kind's calibrated value
//             default     the documented default (nothing in the plan sets it)
//             derived     computed from other fields (global_batch, devices)
//   sweep axes use the same names, so a sweep point is "the resolved base plus its edits".

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stretto/plan/json_source.h"
#include "stretto/plan/plan.h"
#include "stretto/plan/schema.h"

namespace stretto::plan {

/// One resolved value (see the header comment).
struct ResolvedField {
  std::string name;  // "tp", "zero", "gemm_efficiency", ...
  std::string path;  // "/schedule/layout/tp"; "" when no plan key holds it
  Json value;
  ValueSource source = ValueSource::kDefault;
};

struct ResolvedPlan {
  /// Builder family as written ("" for a hand-written directive list).
  std::string family;
  int ranks = 1;            // pipeline ranks (distinct stage device lists)
  int stages = 1;           // pipeline stages (distinct PP indices placed)
  int stages_per_rank = 1;  // most stages one rank holds (2 for V and DualPipe schedules)
  int tp = 1, dp = 1, ep = 1;
  int cp = 1;    // context parallelism (the first replicate's context_parallel); dp excludes it
  std::string cp_comm_type = "p2p";  // the first replicate's (Megatron-Core --cp-comm-type)
  int zero = 0;  // 0-3, from the first replicate's flags
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;  // Megatron-Core --tp-comm-overlap (TE userbuffers)
  int microbatches = 1;
  int64_t microbatch_size = 1;
  std::string recompute = "none";  // none | selective | full
  double bucket_size_MB = 25;
  int prefetch = 1;
  bool reshard_after_forward = true;
  std::string streams = "separate";               // separate | shared (one "comm" stream)
  std::vector<std::string> order = {"tp", "dp", "pp"};  // rank order, innermost first
  /// Stage -> devices it is placed on (data-parallel replica heads); for a bidirectional
  /// (DualPipe) schedule, the first direction's.
  std::vector<std::vector<int>> placement;
  std::vector<std::vector<int>> tp_groups;  // of the first shard_tensor
  int devices_used = 0;                     // distinct devices any directive names
  int cluster_devices = 0;
  /// Every value above plus the cluster, model and cost-model values, in a stable order, with
  /// its source (fields named by the schema's names; cost-model options are added by
  /// sim::resolve_plan, which knows the cost model's defaults).
  std::vector<ResolvedField> fields;

  /// microbatch_size x microbatches x dp: the sequences one step trains on.
  int64_t global_batch() const { return microbatch_size * microbatches * dp; }
  /// The field named `name`, or nullptr.
  const ResolvedField* field(std::string_view name) const;
  /// {"fields": {name: {"value", "source", "path"}}, "placement", "tp_groups"}.
  Json to_json() const;
  /// {name: value} of every field: what the GUI's Parameters tab shows.
  Json values() const;
};

/// Resolves the structural and model values of `plan` as written, given `directives`: the
/// list the compiler runs (the builder call's expansion, or plan.schedule). `src`, when
/// given, tells which keys the plan writes (source `plan`) from those left to defaults.
ResolvedPlan resolve_structure(const Plan& plan, const std::vector<Directive>& directives,
                               const JsonSource* src = nullptr);

}  // namespace stretto::plan
