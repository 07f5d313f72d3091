#pragma once
// Layout shorthand for builder calls (issue 14):
//
//   "schedule": {"builder": "interleaved-1f1b", "microbatches": 8,
//                "layout": {"pp": 4, "dp": 4}}
//
// instead of a hand-written `base`. Devices are numbered in Megatron-LM's rank order, tensor
// parallelism innermost: device = tp_rank + TP * (dp_rank + DP * pp_rank) ("order":
// "tp-dp-pp", innermost first; any permutation of tp, dp, pp). For every pipeline stage the
// layout generates a `place` on the heads (TP rank 0) of its rank's DP replicas, a
// `replicate` across them when dp > 1 (ZeRO level from "zero": 0-3), a `shard` of the expert
// blocks when ep > 1 (ep = dp: experts spread over the stage's replicas), and one
// `shard_tensor` with every TP group when tp > 1. The stage -> rank mapping is the family's
// (loop for 1F1B, interleaved, V for zb-v / dualpipev), taken from the built schedule.

#include <optional>
#include <string>
#include <vector>

#include "stretto/schedules/diag.h"
#include "stretto/schedules/plan.h"

namespace stretto {

class JsonSource;

/// Parses the "layout" object of a builder call at `pointer` (diagnostics appended to `out`).
std::optional<Layout> parse_layout(const JsonSource& src, const std::string& pointer,
                                   Diagnostics& out);

/// The device of (tp, dp, pp) coordinates under `layout.order`.
int layout_device(const Layout& layout, int tp, int dp, int pp);

/// The base directives a layout stands for, given the schedule's stage -> rank map
/// (`stage_to_rank`, one entry per stage) and whether it is bidirectional (DualPipe).
Expected<std::vector<Directive>> layout_base(const Layout& layout,
                                             const std::vector<int>& stage_to_rank,
                                             bool bidirectional, const std::string& family);

/// Checks a builder call against the model and cluster before expansion: the number of model
/// regions the schedule needs (pp_regions = ranks x stages per rank), and the devices a
/// layout needs. Diagnostics point at the builder call in `src`.
Diagnostics check_builder_call(const Plan& plan, const JsonSource* src);

/// Diagnostics about directives a builder generated carry pointers that are not in the file;
/// this points them at the builder call (and keeps the generated directive in the message).
void locate_builder_diagnostics(Diagnostics& ds, const JsonSource* src, const BuilderCall& call);

}  // namespace stretto
