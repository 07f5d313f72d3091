#pragma once
// The critical path sized for people: `sim::critical_path` lists every op of the chain that
// sets the step time (tens of thousands on a large plan); the summary says where that time goes
// by (stage, pass, kind), which stretches of it are longest (segments: consecutive ops of one
// region pass on one device, or one communication op), and what the path waited on at each of
// its links (data, a link, an order edge, a stream, dispatch). Its times partition the step:
// each step's share is its end minus the previous step's end.
//
// `stretto simulate --critical-path` prints the summary, `--critical-path=full` every op; the
// JSON of both comes from critical_path_json, for every door.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stretto/compiler/compiler.h"
#include "stretto/sim/result.h"
#include "stretto/sim/session.h"

namespace stretto::sim {

/// "start", "data", "link", "order", "stream", "dispatch".
std::string_view path_wait_name(PathWait w);

struct CriticalPathSummary {
  /// Time of the path in one (stage, pass, kind) cell: stage is the PP tag (-1: none), kind
  /// "compute", "optimizer" or a communication kind ("send/recv", "all-reduce", ...). A cell's
  /// time is its ops' shares (their durations and the gaps before them).
  struct Cell {
    int32_t stage = -1;
    plan::Pass pass = plan::Pass::kNone;
    std::string kind;
    engine::SimTime time = 0;
    size_t ops = 0;
  };
  /// A stretch of the path: consecutive steps [first, last] of one region pass (stage,
  /// microbatch, pass) on one device, or one communication op.
  struct Segment {
    size_t first = 0, last = 0;  // indices into the path
    int device = -1;
    std::string what;  // "F mb3 PP1", or the communication op's name
    engine::SimTime start = 0, end = 0;
    engine::SimTime time = 0;  // its share of the step (end minus the end of the step before it)
    PathWait wait = PathWait::kStart;  // what its first step waited for
  };
  size_t steps = 0;
  engine::SimTime step_time = 0;  // end of the path's last op
  CriticalPathBreakdown breakdown;
  std::vector<Cell> cells;        // longest first
  std::vector<Segment> top;       // longest first, at most `top` of them
  size_t segments = 0;            // all segments of the path
  std::array<engine::SimTime, kPathWaits>
      waited_time{};                              // by PathWait: the shares reached that way
  std::array<size_t, kPathWaits> waited_links{};  // by PathWait: how many links
};

CriticalPathSummary summarize_critical_path(const compiler::CompiledPlan& cp, const Result& r,
                                            const std::vector<CriticalStep>& path, size_t top = 20);

/// `critical_path_summary` (cells, top segments, waits, in ms) and
/// `critical_path_breakdown_ms`; with `full`, `critical_path` too: every step.
nlohmann::json critical_path_json(const compiler::CompiledPlan& cp, const Result& r,
                                  const std::vector<CriticalStep>& path, bool full,
                                  size_t top = 20);

/// The summary as text for a terminal (what `simulate --critical-path` prints).
std::string critical_path_summary_text(const CriticalPathSummary& s);
/// Every step as text, one line each (`simulate --critical-path=full`).
std::string critical_path_full_text(const std::vector<CriticalStep>& path);

}  // namespace stretto::sim
