#pragma once
// Two runs of one plan, op by op (`stretto compare A B`, and `validate`'s per-op report).
//
// A run is a Timeline: per device, the schedule's logical ops (a region pass "F PP1 MB3", a
// transfer "send PP0->PP1 MB3 act", a collective "all_reduce PP0 grad-reduce #2") with start
// and end, plus the per-device metrics of DESIGN.md §3 (busy, bubble, exposed communication,
// peak memory). Timelines come from
//  * a plan (simulated here with its cost model),
//  * a Chrome trace Stretto wrote (`simulate --trace`, slices carrying `args.tags`),
//  * PyTorch profiler traces: a file, or a directory of per-rank files (.json / .json.gz):
//    labelled ranges (op_label.h) on the GPU (`gpu_user_annotation`) or, for CPU runs, on the
//    host (`user_annotation`); NCCL kernels with `Collective name`; one `ProfilerStep#N`
//    (the last complete one) when there are steps,
//  * the JSON of `stretto simulate --format json` (summary metrics only, no ops).
// Ops align by key and device, never by kernel name. Several pieces of one compute key on a
// device (the layers of one region pass) merge into one op; repeated communication keys are
// numbered in time order ("#2": the bucket index).
//
// Errors are relative to A: (B - A) / A. With A = prediction and B = measurement this is the
// usual "measured vs predicted" sign; `validate` puts the measurement first.

#include <cstdint>
#include <string>
#include <vector>

#include "stretto/compiler/compiler.h"
#include "stretto/support/diag.h"
#include "stretto/plan/json_source.h"
#include "stretto/sim/result.h"

namespace stretto::traces {

struct TimelineOp {
  std::string key;  // alignment key (see above)
  std::string cls;  // F, B, BI, BW, send, recv, all_reduce, all_gather, reduce_scatter, ...
  int device = 0;
  int64_t start = 0, end = 0;  // ns from the timeline's origin
  int64_t busy = 0;            // summed duration of its pieces
  bool comm = false;
};

struct TimelineDevice {
  int id = 0;
  int64_t busy = 0, bubble = 0, exposed_comm = 0;
  int64_t peak_memory = -1;  // bytes; -1 when the source does not say
};

struct Timeline {
  std::string source;  // file
  std::string kind;    // "plan", "stretto trace", "kineto trace", "result"
  int64_t step = 0;    // ns
  std::vector<TimelineDevice> devices;  // by id
  std::vector<TimelineOp> ops;          // by (device, start)
  bool has_ops = false;
  std::vector<size_t> critical_path;  // indices into ops, first to last (empty without ops)
  std::string note;                   // e.g. which ProfilerStep was used
};

/// One measured or simulated slice, before alignment.
struct TimelineSlice {
  std::string name;  // the simulator's slice name ("F mb3 PP1", "send act mb3 PP0→PP1")
  std::string tags;  // "PP1 LAYER2 MB3 F" (optional, for compute slices)
  int device = 0;
  int64_t start = 0, end = 0;
  bool comm = false;
  int participant = -1;  // transfers: 0 sender, 1 receiver
};
/// Aligns slices into a timeline (merging the pieces of a compute key, numbering repeated
/// communication keys) and derives per-device metrics and the critical path from them.
Timeline timeline_from_slices(const std::vector<TimelineSlice>& slices, int64_t origin,
                              std::string source, std::string kind);

/// Loads a plan, a Stretto trace, Kineto trace(s) or a simulate JSON result (sniffed from the
/// content). Errors are located diagnostics.
Expected<Timeline> load_timeline(const std::string& path);
/// The timeline of a simulated step.
Timeline timeline_from_result(const compiler::CompiledPlan& cp, const sim::Result& r,
                              const std::string& source);
/// Derives per-device metrics, the step and the critical path from the ops alone (for sources
/// that only give ops); keeps peak memory.
void finish_timeline(Timeline& t, std::vector<std::vector<std::pair<int64_t, int64_t>>> compute,
                     std::vector<std::vector<std::pair<int64_t, int64_t>>> comm);

struct CompareOptions {
  size_t top = 10;
};

struct OpDelta {
  std::string key, cls;
  int device = 0;
  int64_t a_start = 0, a_dur = 0, b_start = 0, b_dur = 0;
  double rel_err() const;  // (b_dur - a_dur) / a_dur
};

struct ClassStats {
  std::string cls;
  size_t matched = 0;
  int64_t a_median = 0, b_median = 0;  // durations
  double median_err = 0, worst_err = 0;  // relative, signed (worst = largest magnitude)
  std::string worst_key;
  int worst_device = 0;
};

struct Comparison {
  Timeline a, b;
  std::vector<ClassStats> classes;
  std::vector<OpDelta> moved;  // the ops that moved most (start or end), at most `top`
  std::vector<OpDelta> longer;  // the ops whose duration differs most, at most `top`
  size_t matched = 0;
  std::vector<std::string> only_a, only_b;  // "key @ device", at most `top` each
  size_t only_a_count = 0, only_b_count = 0;
  std::vector<std::string> path_only_a, path_only_b;  // critical-path ops not on the other path
};

Comparison compare(Timeline a, Timeline b, const CompareOptions& opt = {});
plan::Json comparison_json(const Comparison& c);
std::string comparison_table(const Comparison& c);

/// Kendall's tau-b between two rankings given as values (higher or lower: only the order
/// matters). 1 = same order, -1 = reversed. Requires equal sizes >= 2.
double kendall_tau(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace stretto::traces
