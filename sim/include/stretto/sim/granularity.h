#pragma once
// Pass granularity: the engine program of a plan with the ops of each region pass merged.
//
// At op granularity (the default) every op instance is an engine task. At pass granularity the
// consecutive compute ops of one (device, stream, PP region, microbatch, pass) become one task
// whose work is the sum of theirs, wherever that cannot move any op's start under fixed costs:
// a run of ops is cut before an op that waits for anything outside the run (a transfer, a
// collective, a barrier, another stream's op, the host thread) and after an op that anything
// outside the run waits for. Communication (PP send/recv, DP buckets, EP all-to-alls, ZeRO
// gathers, TP collectives) stays as tasks. The merged task runs its ops back to back, so under
// fixed costs (no dispatch cost, no interference) every op's start and end are those of op
// granularity; what it approximates is in docs/semantics.md:
//  - interference: a merged task is compute-bound or memory-bound as the larger part of its
//    work is, so a communication kernel overlapping it slows all of it by that one share;
//  - dispatch: a merged task is one entry of its device's issue list, so the host thread
//    issues the ops after it earlier (by dispatch_ns per merged op);
//  - memory: the coarse program has no counters; the ops' allocations and frees are applied
//    at their rebuilt times (simulate computes them from the
//    listing of memory effects its reserved-memory replay sorts anyway), so memory is exact
//    wherever the timings are.
// Op timings are rebuilt from the merged ones (expand_timing), so metrics, traces, memory and
// the critical path read an op-level Result either way.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "stretto/compiler/dag.h"
#include "stretto/engine/program.h"

namespace stretto::sim {

enum class Granularity : uint8_t { kOp, kPass };
std::string_view granularity_name(Granularity g);
/// "op" or "pass"; nullopt otherwise.
std::optional<Granularity> parse_granularity(std::string_view s);

/// A coarse program and how its tasks map to the op-level program's.
struct PassProgram {
  engine::Program program;           // the coarse program (no counters; a merged task's node
                                     // is its first op's)
  std::vector<uint32_t> task_of;     // by op task: the coarse task that runs it
  std::vector<uint32_t> member_begin;  // by coarse task (+ end): its op tasks in `members`
  std::vector<uint32_t> members;       // op tasks, in run order
};

/// Merges the ops of `ops` (a build_program result for `cp`) into region-pass tasks (above).
PassProgram coarsen_to_passes(const compiler::CompiledPlan& cp, const engine::Program& ops);

/// Op-level timings from a run of `pp.program`: a merged task's ops run back to back from its
/// start, each for its share of the merged task's time in proportion to its work (exactly its
/// work when the merged task ran at full rate).
std::vector<engine::TaskTiming> expand_timing(const PassProgram& pp, const engine::Program& ops,
                                              const std::vector<engine::TaskTiming>& coarse);

}  // namespace stretto::sim
