#pragma once
// Session: the one library API the CLI, the GUI and sweeps share (DESIGN.md §1).
//
//   auto s = Session::open("plan.json");          // load + parse + compile
//   auto r = s->simulate();                        // build program + run engine + metrics
//   s->set_costmodel(spec);  s->simulate();        // cheap re-simulation: no recompile
//   s->set_directive(3, d);  s->simulate();        // recompiles, then simulates
//
// A Session is a value-owning object (no globals): many may run on parallel threads.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "stretto/costmodel/cost_model.h"
#include "stretto/compiler/compiler.h"
#include "stretto/engine/engine.h"
#include "stretto/sim/granularity.h"
#include "stretto/sim/result.h"

namespace stretto::sim {

struct SimOptions {
  /// Simulate one representative of each group of identical data-parallel replicas and copy
  /// its metrics to the others. Exact when replicas are symmetric (same program, same
  /// links); off by default.
  bool fold_replicas = false;
  /// Keep each device's allocated-memory curve (DeviceMetrics::memory), for traces and plots.
  /// Off, only the peak, its time and its breakdown are kept: at 1,024 devices the curves are
  /// ~0.45 GB and a noticeable part of the run time.
  bool memory_curves = true;
  /// What the engine simulates as one task: each op (exact), or each region pass's consecutive
  /// ops merged (granularity.h: equal under fixed costs, an approximation under interference
  /// and dispatch costs, fewer events). Either way the Result has every op's timing.
  Granularity granularity = Granularity::kOp;
  /// Threads that replay the devices' allocations for reserved memory (each device on one of
  /// them, the caller's included): the Result is the same for any count. 1 (the default) runs
  /// it on the caller's thread alone, as a sweep, which runs points in parallel, wants.
  int threads = 1;
  /// Progress, for long runs (the CLI on a terminal, a GUI): called with the phase ("building",
  /// "simulating", "metrics") and the fraction of it done; "building" and "metrics" once at
  /// their start (0), "simulating" from 0 to 1 by tasks finished, about every 65 k events. On
  /// the caller's thread.
  std::function<void(std::string_view phase, double fraction)> progress;
};

/// Builds the engine program of a compiled plan under a cost model (instance level).
/// `only_devices` (optional, sorted) restricts it to those devices' tasks (replica folding).
/// Each task's `node` is its DAG node.
engine::Program build_program(const compiler::CompiledPlan& cp, const cost::CostModel& cm,
                              const std::vector<char>* only_devices = nullptr);

/// build_program(cp, cm, only_devices) made from `built`, a program that build_program made of
/// the same compiled plan (or a copy of it) and the same `only_devices` under another cost model
/// with the same Interference::host_compute: the structure (tasks, participants, dependencies,
/// dispatch lists, links, counters) is kept, the costs are written again. Equal, field by
/// field, to build_program's. Nullopt where `cm` changes the structure (a comm task's links
/// appear or vanish, a collective crosses nodes or no longer does, hosts become shared or not).
std::optional<engine::Program> recost_program(engine::Program built,
                                              const compiler::CompiledPlan& cp,
                                              const cost::CostModel& cm,
                                              const std::vector<char>* only_devices = nullptr);

/// The cost query of each DAG node, as build_program asks the cost model (one per compute,
/// transfer or collective node: every instance of a node costs the same). For tools that map
/// measurements to queries (`stretto profile` and `validate`). build_program answers each
/// distinct query once, so a cost model does not see one call per node.
class CostQueries {
 public:
  explicit CostQueries(const compiler::CompiledPlan& cp);
  cost::ComputeQuery compute(const compiler::Node& n) const;  // n.kind == kCompute
  cost::CommQuery comm(
      const compiler::Node& n);  // a transfer or collective (caches per device set)

 private:
  const compiler::CompiledPlan& cp_;
  std::vector<int> nodes_spanned_;    // by device set; 0 = not computed yet
  std::vector<char> crosses_island_;  // by device set
};

/// Whether the plan's nodes hold more host-CPU devices than the cost model's `host_cores`, so
/// that build_program gives them shared hosts (program.h) and simulate does not fold replicas.
bool shares_host_cores(const compiler::CompiledPlan& cp, const cost::Interference& itf);

/// Runs the engine and computes every metric of `Result`.
Expected<Result> simulate(const compiler::CompiledPlan& cp, const cost::CostModel& cm,
                          const SimOptions& opt = {});
/// The same Result, bit for bit, reusing `previous`: a result `simulate` gave for the same
/// compiled plan (or a copy of it) under another cost model. Its program is re-costed
/// (recost_program) instead of built when the folding, host_compute and the structure agree;
/// otherwise it is built as by simulate(cp, cm, opt). For cost-model edits (the GUI).
Expected<Result> simulate(const compiler::CompiledPlan& cp, const cost::CostModel& cm,
                          const SimOptions& opt, const Result& previous);

struct ReservedOrder;  // (session.cpp)

/// Simulates one compiled plan again and again under other cost models (the GUI's worker),
/// keeping the engine that ran its last result: when the next cost model's program is
/// re-costed from that result (recost_program), the engine runs it on the preparation it holds
/// (engine::Engine::rerun_checked: the successor lists, stream links and collective indexes of
/// the same structure) instead of preparing it again. It also keeps the reserved-memory
/// replay's order of each device's memory effects: a device whose effects come in the same
/// order under the new times (and whose static memory is the same) keeps its reserved bytes
/// instead of being replayed, and devices whose effects moved but come in equal sequences
/// (data-parallel replicas, usually) share one replay. Each Result is sim::simulate's, bit for bit. Holds the engine's
/// scratch state and the effects' order (about the program's size) between calls; one thread
/// at a time.
class Resimulator {
 public:
  Resimulator();
  ~Resimulator();
  /// sim::simulate(cp, cm, opt), or sim::simulate(cp, cm, opt, *previous). What it keeps is
  /// reused when `previous` is the last result this object gave (or a copy of it:
  /// Result::resimulation) and its program is re-costed; the engine's preparation also needs
  /// both runs at op granularity. `storage` (optional, with `previous`): a program with the
  /// structure of previous->program (one that it was re-costed from, in turn: an earlier
  /// result's that no one reads any more), re-costed in place of a copy of previous->program
  /// and left moved-from when it is; the Result is the same either way (recost_program
  /// rewrites every cost and keeps the structure).
  Expected<Result> simulate(const compiler::CompiledPlan& cp, const cost::CostModel& cm,
                            const SimOptions& opt, const Result* previous = nullptr,
                            engine::Program* storage = nullptr);
  /// Whether the last simulate re-ran the engine's preparation.
  bool reused() const { return reused_; }
  /// Whether the last simulate re-costed the previous result's program (recost_program: the
  /// new program has its structure) instead of building one.
  bool recosted() const { return recosted_; }
  /// Devices whose allocations the last simulate replayed for their reserved bytes (the
  /// other simulated GPU devices kept the previous result's); 0 for a CPU plan.
  uint32_t replayed_devices() const { return replayed_; }
  /// Replays of the caching allocator the last simulate ran for them: devices whose effects
  /// come in the same sequence (and with the same static memory) share one after a re-costed
  /// edit (data-parallel replicas usually do), so this is at most replayed_devices().
  uint32_t allocator_replays() const { return replays_; }
  /// Of the replayed devices, those whose effects the last simulate sorted: devices whose
  /// effects are listed with equal times, kinds and (category, bytes) share one sort (their
  /// order is the same), so this is at most replayed_devices() (and at least
  /// allocator_replays()).
  uint32_t sorted_devices() const { return sorted_; }

 private:
  engine::Engine engine_;
  std::shared_ptr<const void> last_;  // Result::resimulation of its last result, or null
  bool engine_prepared_ = false;      // the engine holds the preparation of its program
  std::unique_ptr<ReservedOrder> order_;
  bool reused_ = false;
  bool recosted_ = false;
  uint32_t replayed_ = 0;
  uint32_t replays_ = 0;
  uint32_t sorted_ = 0;
};

/// The chain of ops and waits that determines the step time, last op first reversed to
/// first-to-last order.
std::vector<CriticalStep> critical_path(const compiler::CompiledPlan& cp, const Result& r);

/// Where a critical path's time goes: its compute ops, its communication ops, and the gaps
/// between one op's end and the next one's start (host dispatch, waiting for rendezvous
/// peers). The three add up to the end of the path's last op, the step time.
struct CriticalPathBreakdown {
  engine::SimTime compute = 0, comm = 0, wait = 0;
};
CriticalPathBreakdown breakdown(const std::vector<CriticalStep>& path);

/// The resolved plan (plan/resolved.h): the compiled plan's structure plus the cost model's
/// options with their sources. What `describe --format json`, the GUI's Parameters tab and
/// Python's `Plan.resolved()` show.
plan::ResolvedPlan resolve_plan(const compiler::CompiledPlan& cp);

class Session {
 public:
  static Expected<Session> open(const std::string& path);
  /// Compiles a parsed plan; `copt` is kept for recompiles (set_plan, set_directive). Without
  /// class programs (CompileOptions::class_programs) a session still simulates.
  static Expected<Session> from_plan(plan::Plan plan, std::string base_dir = ".",
                                     const compiler::CompileOptions& copt = {});
  /// Parses, compiles and prepares a plan held in memory (an editor's buffer). `file` names it
  /// in diagnostics (file:line:col); relative paths in it (a profile) resolve from `base_dir`.
  static Expected<Session> from_text(std::string text, std::string file,
                                     std::string base_dir = ".");
  /// from_text of a text already parsed (`src` locates the diagnostics; not kept).
  static Expected<Session> from_source(const plan::JsonSource& src, std::string base_dir = ".");

  const compiler::CompiledPlan& compiled() const { return *cp_; }
  const plan::Plan& plan() const { return cp_->plan; }
  const cost::CostModel& cost_model() const { return *cm_; }
  /// resolve_plan(compiled()).
  plan::ResolvedPlan resolved() const;

  Expected<Result> simulate(const SimOptions& opt = {}) const;
  /// sim::simulate(compiled(), cost_model(), opt, previous): `previous` is a result of this
  /// session, or of the one it was copied from, before set_costmodel (not set_plan or
  /// set_directive, which recompile, nor a set_costmodel that changed eager_kernel_style).
  Expected<Result> simulate(const SimOptions& opt, const Result& previous) const;

  /// Replaces the cost model (no recompilation), unless plan::eager_kernel_style changes with
  /// it: then the plan is compiled anew (set_plan), since the saved activations differ.
  Expected<void> set_costmodel(const plan::CostModelSpec& spec);
  /// set_costmodel(spec), the new compiled plan made in the storage of `retired`'s instead of
  /// a copy of this one's: when `retired` is a session of this one's compile (a copy of it or
  /// a session it was copied from, with set_costmodel in between; not set_plan or
  /// set_directive, which compile anew) whose compiled plan is another object, and no one
  /// else holds it or its compiled plan. Otherwise a copy, as set_costmodel(spec). The session
  /// is the same either way. For a GUI's worker, which edits a copy of the session it shows
  /// and can hand in the one it showed before.
  Expected<void> set_costmodel(const plan::CostModelSpec& spec,
                               std::shared_ptr<const Session> retired);
  /// Replaces directive `index` and recompiles; on error the session is unchanged.
  Expected<void> set_directive(size_t index, const plan::Directive& d);
  /// Replaces the whole plan and recompiles; on error the session is unchanged.
  Expected<void> set_plan(plan::Plan plan);

 private:
  Session() = default;
  void set_compiled(compiler::CompiledPlan&& cp);  // a new compile
  std::shared_ptr<const compiler::CompiledPlan> cp_;
  // Names the compile cp_ came from: copies and set_costmodel keep it, a compile makes a new one.
  std::shared_ptr<const void> compile_;
  std::shared_ptr<const cost::CostModel> cm_;
  std::string base_dir_;
  compiler::CompileOptions copt_;
};

}  // namespace stretto::sim
