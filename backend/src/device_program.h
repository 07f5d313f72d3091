#pragma once
// A device's ops, derived from the compiled plan (torch-free; shared by the executor, the
// support check and expected_ops()).
//
// The device's class program (the simulator's dispatch order) expanded to the instances this
// device takes part in: a compute node once; a transfer once per (sender, receiver) pair the
// device belongs to (as sender or receiver; stream "pp:<peer>" as the simulator splits it); a
// collective once, for the group the device belongs to. Barriers are joins, not ops.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stretto/compiler/dag.h"

namespace stretto::backend::detail {

struct DeviceOp {
  uint32_t node = 0;
  compiler::NodeKind kind = compiler::NodeKind::kCompute;
  bool is_send = false;  // transfer: this device sends (else receives)
  int peer = -1;         // transfer: the other end
  int group_index = 0;   // collective: which group of the node's device set
  int rank_in_group = 0; // collective: position in that group; compute: position in the set
  std::vector<int32_t> group;  // collective: the group's devices (in the set's order)
  std::string stream;    // "compute", "pp:3", "dp", ...
  std::string name;      // the simulator's slice name
};

std::vector<DeviceOp> device_ops(const compiler::CompiledPlan& cp, int device);

/// The same-device predecessors of every node that a device must wait for, looking through
/// order barriers: by node id, for the nodes in `ops` (others empty).
std::vector<std::vector<uint32_t>> local_preds(const compiler::CompiledPlan& cp,
                                               const std::vector<DeviceOp>& ops);

/// The plan's context-parallel degree (its replicate directives' context_parallel; the
/// compiler admits one degree per plan): 1 without context parallelism.
int context_parallel(const compiler::CompiledPlan& cp);
/// Its cp_comm_type (one per plan, the compiler checked; p2p without context parallelism).
plan::CpCommType cp_comm_type(const compiler::CompiledPlan& cp);

/// Position of `device` in device set `set` (-1 if absent).
int position_in(const compiler::DeviceSet& set, int device);

/// The union of time intervals [start, end) as sorted, disjoint intervals (busy and
/// communication time of the measured ops).
std::vector<std::pair<int64_t, int64_t>> merge_intervals(std::vector<std::pair<int64_t, int64_t>> v);

}  // namespace stretto::backend::detail
