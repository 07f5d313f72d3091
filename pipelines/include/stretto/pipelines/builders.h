#pragma once
// Pipeline schedule builders (DESIGN.md §2 "builder", reference/schedules-spec.md §1-§4).
//
// A `PipelineSchedule` is the per-rank *compute order* of one training step of a pipeline:
// rank r runs the slots of `per_rank[r]` in order. A slot is idle, one action, or an
// overlapped pair (a forward of one stage followed by a full backward of another, torch's
// OVERLAP_F_B / DeepSeek's "F&B"). An action is (kind, stage, microbatch) with kinds
//   F  forward,  B  full backward,  I  backward for inputs,  W  backward for weights
// (torch's current letters; Piper's PASS tags are F, B, BI, BW). Stage indices are the global
// pipeline stage = Piper's PP index; microbatch indices are global (0..m-1).
//
// Stage -> rank: every family but DualPipe keeps a stage on one rank (`stage_to_rank`, loop or
// V map, spec §1.3). DualPipe is bidirectional: microbatches [0, m/2) flow rank 0 -> p-1 (stage s
// on rank s) and [m/2, m) flow rank p-1 -> 0 (stage s on rank p-1-s); `rank_of(stage, mb)` covers
// both.
//
// Builders follow spec §2 rule by rule; `validate_schedule` mirrors torch's
// `_validate_schedule` (spec §3). `schedule_to_directives` lowers a schedule to Stretto's
// directive language (place + split + one `order` per rank), and `schedule_from_directives`
// reads one back for export. Bad input gives diagnostics, never aborts.

#include <array>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stretto/support/diag.h"
#include "stretto/plan/plan.h"
#include "stretto/plan/tags.h"

namespace stretto::pipelines {

/// Compute kinds. `kB` is the *full* backward (input + weight grads).
enum class ActionKind : uint8_t { kF, kB, kI, kW };

/// 'F', 'B', 'I', 'W'.
char action_kind_char(ActionKind k);
/// F -> F, B -> B, I -> BI, W -> BW.
plan::Pass action_kind_pass(ActionKind k);
/// Inverse of action_kind_pass; nullopt for Pass::kNone.
std::optional<ActionKind> action_kind_from_pass(plan::Pass p);

/// One compute action of one stage on one microbatch.
struct Action {
  ActionKind kind = ActionKind::kF;
  int stage = 0;
  int mb = 0;

  bool operator==(const Action&) const = default;
  /// torch spelling: "2I3" (stage, kind, microbatch).
  std::string str() const;
};

/// One position of a rank's order: idle, one action, or an overlapped (F, B) pair.
struct Slot {
  uint8_t count = 0;  // 0 idle, 1 single, 2 overlapped pair
  std::array<Action, 2> act{};

  static Slot idle() { return {}; }
  static Slot single(Action a) {
    Slot s;
    s.count = 1;
    s.act[0] = a;
    return s;
  }
  /// torch OVERLAP_F_B: the forward `f` runs first, then the full backward `b`.
  static Slot overlap(Action f, Action b) {
    Slot s;
    s.count = 2;
    s.act = {f, b};
    return s;
  }
  bool is_idle() const { return count == 0; }
  bool is_overlap() const { return count == 2; }
  std::span<const Action> actions() const { return {act.data(), count}; }
  bool operator==(const Slot& o) const;
  /// torch CSV cell: "" (idle), "0F1", "(0F7;7B3)OVERLAP_F_B".
  std::string str() const;
};

std::ostream& operator<<(std::ostream& os, const Action& a);
std::ostream& operator<<(std::ostream& os, const Slot& s);

/// The per-rank compute orders of one pipeline schedule.
struct PipelineSchedule {
  std::string family;              // canonical family name, "torch-csv" or "directives"
  int ranks = 0;                   // p
  int stages_per_rank = 1;         // v (model chunks per rank; 2 for DualPipe's two copies)
  int stages = 0;                  // S = p*v (DualPipe: S = p, each stage has two copies)
  int microbatches = 0;            // m
  std::vector<int> stage_to_rank;  // size S; for DualPipe the map of direction 0
  bool bidirectional = false;      // DualPipe: microbatches >= m/2 use rank p-1-stage_to_rank
  std::vector<std::vector<Slot>> per_rank;

  /// Rank that runs `stage` for microbatch `mb`.
  int rank_of(int stage, int mb) const;
  /// The actions of `rank` in order, idle slots dropped, pairs flattened (F then B).
  std::vector<Action> compute_order(int rank) const;
  bool operator==(const PipelineSchedule&) const = default;
};

/// Stage -> rank map styles of torch `_utils.py` (spec §1.3).
enum class StageMapStyle : uint8_t { kLoop, kV };
/// Loop: s mod p. V: zig-zag 0..p-1, p-1..0, ... (`stages` must be a multiple of `ranks`).
std::vector<int> stage_to_rank_map(StageMapStyle style, int ranks, int stages);

/// Canonical family names, in the order of DESIGN.md §4.
const std::vector<std::string>& schedule_family_names();
/// Canonical name for a user spelling: case-insensitive, '-'/'_' ignored, torch class names
/// (ScheduleInterleavedZeroBubble, ...) and torch `get_schedule_class` names accepted.
std::optional<std::string> canonical_family(std::string_view name);

struct BuildOptions {
  /// Insert the idle slots torch puts into its own timestep grid (pipeline_order), so that a
  /// compute-only CSV export is cell-for-cell torch's. Never changes the order of actions.
  /// Only for families torch has (gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-v).
  bool torch_padding = false;
};

/// Builds family `family` (any spelling canonical_family accepts) for p = `ranks`,
/// v = `stages_per_rank` (<= 0: the family's default: 2 for interleaved-1f1b, looped-bfs, zb-v,
/// dualpipe, dualpipev; 1 otherwise) and m = `microbatches`. Constraints that torch (or DeepSeek)
/// enforce are diagnostics with a hint; zb-h2 (not a torch schedule) takes v = 1 only.
Expected<PipelineSchedule> build_schedule(std::string_view family, int ranks, int stages_per_rank,
                                          int microbatches, const BuildOptions& opt = {});

/// What build_schedule would refuse for these parameters (its diagnostic), without building:
/// empty when it builds them.
std::optional<Diagnostic> check_schedule(std::string_view family, int ranks, int stages_per_rank,
                                         int microbatches);

/// Maps a (rank, slot index) to a source location for diagnostics (e.g. a CSV cell).
using SlotLocator = std::function<SourceLoc(int rank, int slot)>;

/// torch `_validate_schedule` (spec §3): exactly `ranks` rows; every stage has m forwards and
/// complete backwards (B, or I and W); no I/B before the F of the same (stage, mb); no W before
/// its I; a stage lives on one rank (both directions of a bidirectional schedule checked
/// separately). Returns all problems (empty = valid), each naming rank, stage and microbatch.
Diagnostics validate_schedule(const PipelineSchedule& s, const SlotLocator& locate = {});

/// Lowers a schedule to directives (DESIGN.md §2):
///   place (one per stage: {"PP":s} -> [rank], stream "pp"), split (MB, m), one order per rank
///   whose groups are the rank's non-idle slots ({"PP":s,"MB":i,"PASS":...}; a pair = a group of
///   two filters).
/// With a non-empty `base`: base directives are kept verbatim and first; stages the base
/// already places get no place; all stages of one schedule rank must be placed on one identical
/// device list (else a diagnostic naming stage and directive), and two ranks may not share a
/// device. A base `split` must agree with m and replaces the generated one.
/// Bidirectional (DualPipe) schedules place per (PP, MB) after the split, since a stage runs on
/// rank s for one direction and on rank p-1-s for the other; a base's whole-stage places then
/// only name rank devices (rank r = devices of PP=r) and are replaced.
/// Generated directives get index = position and pointer "/schedule/<index>" (their filters
/// share the directive's pointer).
Expected<std::vector<plan::Directive>> schedule_to_directives(
    const PipelineSchedule& s, const std::vector<plan::Directive>& base = {});

/// Reads place + split + order directives back into a schedule (for export). The rank of a
/// stage is the index of its device list among the distinct stage device lists, ordered by
/// first device. Every order filter must name one PP, one MB and a PASS. The result is
/// validated.
Expected<PipelineSchedule> schedule_from_directives(const std::vector<plan::Directive>& ds);

/// Expands a plan's `"schedule": {"builder": ...}` into directives (called by the compiler).
/// `ranks` <= 0 is inferred from the base's stage placement. Because BuilderCall defaults
/// `stages_per_rank` to 1, a 1 means "family default" for the two-chunk families (zb-v,
/// dualpipe, dualpipev). Diagnostics carry JSON pointers under `call.pointer`.
Expected<std::vector<plan::Directive>> expand_builder(const plan::BuilderCall& call);

/// Compact text grid: one row per rank, one fixed-width cell per slot ("F3", "B3", "I3", "W3";
/// "1F3" when ranks hold several stages; "F3|B1" for an overlapped pair; "." for idle).
std::string show_grid(const PipelineSchedule& s);

}  // namespace stretto::pipelines
