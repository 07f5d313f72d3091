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
// `shard_tensor` with every TP group when tp > 1. With cp > 1 (context parallelism) the
// replicas are dp × cp heads, cp consecutive ones per CP group (`replicate`'s
// context_parallel), and the gradient reduction spans them all. The stage -> rank mapping is the family's
// (loop for 1F1B, interleaved, V for zb-v / dualpipev), taken from the built schedule.

#include <optional>
#include <string>
#include <vector>

#include "stretto/support/diag.h"
#include "stretto/plan/plan.h"

namespace stretto::plan {

class JsonSource;

/// Parses the "layout" object of a builder call at `pointer` (diagnostics appended to `out`).
std::optional<Layout> parse_layout(const JsonSource& src, const std::string& pointer,
                                   Diagnostics& out);

/// The device of (tp, dp, pp, cp) coordinates under `layout.order`. CP ranks sit next to TP,
/// outside it (Megatron-Core's rank order tp-cp-ep-dp-pp, parallel_state.py's RankGenerator):
/// with the default order, device = tp + TP · (cp + CP · (dp + DP · pp)).
int layout_device(const Layout& layout, int tp, int dp, int pp, int cp = 0);

}  // namespace stretto::plan
