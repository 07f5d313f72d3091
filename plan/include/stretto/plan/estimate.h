#pragma once
// Resource checks made before a plan is compiled or simulated (issue 14):
//
// - check_plan_sizes: user sizes that are each inside their range but whose products overflow
//   the 64-bit byte and element counts of the model expansion (hidden 1e7 x vocab 1e8 x ...),
//   and clusters whose device count overflows. Located diagnostics naming the fields.
// - estimate_resources: the DAG nodes, engine tasks and events a compile and a simulation
//   will create, and the memory they need, from the plan alone (no allocation proportional to
//   the plan). check_memory_budget refuses a plan whose estimate exceeds the budget (the
//   machine's available memory, or --max-memory) with the estimate and the way out.
//
// The per-node, per-task and per-device byte costs are measured, not guessed: see the
// constants in estimate.cpp and the benchmark rows in README.md they come from.

#include <cstdint>
#include <string>

#include "stretto/support/diag.h"
#include "stretto/plan/plan.h"

namespace stretto::plan {

class JsonSource;

/// Diagnostics for sizes whose products overflow (empty when all is well).
Diagnostics check_plan_sizes(const Plan& plan, const JsonSource* src);

struct ResourceEstimate {
  int64_t devices_declared = 0;  // the cluster's devices
  int64_t devices_used = 0;      // devices some directive (or the builder call) names
  int64_t microbatches = 1;
  int64_t replication = 1;   // instances of each DAG node (DP x TP replicas)
  double dag_nodes = 0;      // compile
  double tasks = 0;          // engine tasks (instances of nodes, plus transfers)
  double compile_bytes = 0;  // DAG, lowering
  double simulate_bytes = 0; // engine program, event queue, per-device metrics
  double total_bytes() const { return compile_bytes + simulate_bytes; }
};

/// Estimates what compiling and simulating `plan` need. `fold_replicas`: one replica of each
/// class is simulated. `simulate`: false for `compile` alone.
ResourceEstimate estimate_resources(const Plan& plan, bool fold_replicas, bool simulate);

/// Memory available to this process: MemAvailable from /proc/meminfo, capped by a cgroup
/// (v2 or v1) limit and by the address-space limit (RLIMIT_AS) less what is mapped; 0 if
/// unknown.
uint64_t available_memory_bytes();

/// The budget plans are checked against: set_max_memory_bytes() (the CLI's --max-memory) when
/// set, else available_memory_bytes() (0 = unknown: no check).
uint64_t memory_budget_bytes();
void set_max_memory_bytes(uint64_t bytes);

/// Estimates at or under this are not checked against the machine's available memory (reading
/// it costs file reads, twice per point of a sweep); an explicit budget checks every plan.
inline constexpr double kUncheckedBytes = 64.0 * (1 << 20);

/// A refusal (with the estimate and the way out) when the estimate exceeds the budget.
Diagnostics check_memory_budget(const Plan& plan, const JsonSource* src, bool fold_replicas,
                                bool simulate);

/// `build-schedule`: a refusal when the directive list of P ranks x V stages x M microbatches
/// would be a larger file than a plan may be (max_input_bytes()), or (its JSON document and
/// text) is estimated above the memory budget.
Diagnostics check_schedule_budget(int ranks, int stages_per_rank, int microbatches);

}  // namespace stretto::plan
