#pragma once
// torch.distributed.pipelining per-rank action CSV (reference/ecosystem.md §4.2, spec §1.2, §3).
//
// One CSV row per pipeline rank, rank 0 first; one cell per slot: `0F1`, `1B0`, `2I3`, `2W3`,
// `(0F7;7B3)OVERLAP_F_B`, empty = idle. The "compute+comms" form adds `3SEND_F1`, `1RECV_B2`
// and FSDP / grad-sync cells (`1UNSHARD`, `1RESHARD`, `0REDUCE_GRAD`); on import those are
// accepted and dropped (Stretto's compiler inserts its own communication).
//
// Import infers stage -> rank as torch's loader does (the row that holds a stage's actions)
// and validates with `validate_schedule`. One extension: when every stage s appears on exactly
// the two rows s and p-1-s, split by microbatch halves, the file is read as a bidirectional
// DualPipe schedule (torch has no DualPipe; Stretto exports it this way).
//
// Export writes the compute-only form, or (`add_send_recv`) torch's `_add_send_recv` lowering:
// round-robin over ranks in ascending order, one action per rank per sweep, an action placed
// only when its input is local or already received, a SEND on the producer and the matching
// RECV appended to the consumer's list as soon as the producer's action is placed.

#include <string>
#include <string_view>
#include <vector>

#include "stretto/pipelines/builders.h"
#include "stretto/support/diag.h"

namespace stretto::pipelines {

/// Parses CSV text. `file` is used in diagnostic locations (row = line, column of the cell).
Expected<PipelineSchedule> parse_torch_csv(std::string_view text,
                                           const std::string& file = "<csv>");
/// Reads and parses a CSV file.
Expected<PipelineSchedule> load_torch_csv(const std::string& path);

/// Compute-only CSV, one line per rank ("\n" line ends, no quoting needed).
std::string write_torch_csv(const PipelineSchedule& s);

enum class TorchCommOp : uint8_t { kSendF, kRecvF, kSendB, kRecvB };

/// One entry of a lowered (compute + comms) rank list: a compute slot or a send/recv.
struct LoweredOp {
  bool is_comm = false;
  Slot compute;                      // when !is_comm (never idle)
  TorchCommOp comm = TorchCommOp::kSendF;  // when is_comm
  int stage = 0;                     // stage of the comm action (torch's convention)
  int mb = 0;

  bool operator==(const LoweredOp&) const = default;
  /// torch spelling: "0F1", "(0F7;7B3)OVERLAP_F_B", "3SEND_F1", "2RECV_B0".
  std::string str() const;
};

/// torch `_add_send_recv` (spec §3). Idle slots are dropped. No progress in a full sweep is a
/// diagnostic ("malformed compute schedule") naming each stuck rank's next action.
Expected<std::vector<std::vector<LoweredOp>>> add_send_recv(const PipelineSchedule& s);

/// Compute + comms CSV (`add_send_recv` rendered one row per rank).
Expected<std::string> write_torch_csv_with_comms(const PipelineSchedule& s);

}  // namespace stretto::pipelines
