#pragma once
// Plan -> global training DAG -> per-device programs (passes: expand model, expand cluster,
// apply directives, insert communication, order, lower, validate). See dag.h for the IR.

#include "stretto/compiler/dag.h"
#include "stretto/plan/json_source.h"
#include "stretto/plan/plan.h"

namespace stretto::compiler {

struct CompileOptions {
  /// Build each device class's program and stream queues (DeviceClass::program, ::streams),
  /// which summaries and executors read. The simulator needs only the global order
  /// (CompiledPlan::topo_order, always built): sweeps leave them out.
  bool class_programs = true;
  /// Emit each distinct kind of block once and copy it for the others. A block is the forward
  /// or the backward of one PP region's ops for one microbatch; the same block of two
  /// microbatches (1 or later) whose ops and neighbouring ops are placed and directed alike
  /// differ only in their MB tag, which of two alike place directives placed them (DualPipe
  /// places every stage and microbatch with its own) and a shift of node ids. So compiling
  /// costs about one microbatch per kind of block rather than one per microbatch. The result
  /// is identical either way (tests/compiler/microbatch_template_test.cpp); off emits every
  /// microbatch, for that comparison.
  bool template_microbatches = true;
};

/// Compiles a parsed plan. `src` (optional) gives source positions for diagnostics.
/// Builder calls in `plan.builder` are expanded first (see builders.h).
Expected<CompiledPlan> compile(const plan::Plan& plan, const plan::JsonSource* src = nullptr,
                               const CompileOptions& opt = {});

/// Loads, parses and compiles a plan file.
Expected<CompiledPlan> compile_file(const std::string& path, const CompileOptions& opt = {});

/// Summary for `stretto compile` (also the golden-file format).
struct CompileSummary {
  size_t nodes = 0, edges = 0, data_edges = 0, temporal_edges = 0;
  size_t compute_nodes = 0, transfer_nodes = 0, collective_nodes = 0, barrier_nodes = 0;
  int64_t total_params = 0;
  struct PerDevice {
    int id;
    size_t compute = 0, transfers = 0, collectives = 0;
    std::vector<std::pair<std::string, size_t>> per_stream;  // stream name -> ops
    int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;
    int64_t activation_bytes_per_mb = 0;  // saved activations of one microbatch (all stages here)
  };
  std::vector<PerDevice> devices;
};
CompileSummary summarize(const CompiledPlan& cp);
std::string summary_table(const CompiledPlan& cp, const CompileSummary& s);
plan::Json summary_json(const CompiledPlan& cp, const CompileSummary& s);
/// Effects the simulation of this plan leaves out, in words ("optimizer: none", ...), so that
/// an optimistic number is not mistaken for a prediction (`stretto simulate` prints them).
std::vector<std::string> unmodelled_effects(const CompiledPlan& cp);

/// Graphviz. Fails (diagnostic) above max_nodes unless forced.
Expected<std::string> to_dot(const CompiledPlan& cp, size_t max_nodes = 5000);

}  // namespace stretto::compiler
