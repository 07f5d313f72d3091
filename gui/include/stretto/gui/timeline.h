#pragma once
// The timeline's data: one lane per (device, stream) of a simulated step, ops sorted by start,
// and the level-of-detail layout that keeps a frame's cost independent of the number of ops
// (ops narrower than a pixel merge into runs; off-screen ops are never visited).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stretto/compiler/dag.h"
#include "stretto/sim/result.h"

namespace stretto::gui {

using engine::SimTime;

/// What an op is, for its colour: the compute passes and the communication kinds.
enum class OpClass : uint8_t {
  kF,
  kB,
  kBI,
  kBW,
  kCompute,  // compute without a pass (optimizer step, ...)
  kSendRecv,
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kAllToAll,
  kBarrier,
  kCount
};
std::string_view op_class_name(OpClass c);
OpClass op_class(const compiler::CompiledPlan& cp, const sim::Result& r, uint32_t task);

struct Op {
  SimTime start = 0, end = 0;
  uint32_t task = 0;
  OpClass cls = OpClass::kCompute;
};

/// An enclosing slice of a compute lane: consecutive ops [first, last] of one (stage,
/// microbatch, pass), or of one layer within it. Ends are sorted like the ops'.
struct Span {
  SimTime start = 0, end = 0;
  uint32_t first = 0, last = 0;  // op indices in the lane
  OpClass cls = OpClass::kCompute;
};

/// One (device, stream) FIFO. Ops never overlap, so both starts and ends are sorted.
struct Lane {
  int device = 0;
  uint16_t stream = 0;  // Program::stream_names index
  std::string name;     // "compute", "dp", "pp:1"
  std::vector<Op> ops;
  /// Nested slices (pass -> layer -> op), as Perfetto draws a pass's ops under it: empty when
  /// the level would repeat the level below (one op per pass, ops without layers).
  std::vector<Span> passes, layers;
  /// Rows the lane draws: the nested levels present, then the ops.
  int depth() const { return 1 + !passes.empty() + !layers.empty(); }
};

struct Timeline {
  std::vector<Lane> lanes;                  // grouped by device, compute lane first
  std::vector<std::vector<uint32_t>> by_device;  // lane indices of each device
  SimTime end = 0;
  size_t ops = 0;
  /// (lane, index in lane) of every task's primary placement; lane UINT32_MAX = not drawn.
  std::vector<std::pair<uint32_t, uint32_t>> where;
};

/// Lanes of every simulated (device, stream); barriers are left out (zero-time joins).
/// A lane's ops are in (start, task) order.
Timeline build_timeline(const sim::Result& r, const compiler::CompiledPlan& cp);

/// build_timeline(r, cp) made from `prev`, the timeline of `prev_r`, when both results come
/// from one compiled DAG (`cp`, or a copy of it under another cost model: Session::set_costmodel)
/// and their programs have the same structure (the same tasks on the same devices and streams,
/// the same ops run). The lanes are reused and
/// their ops retimed; a lane whose order changed is sorted again and its slices nested again.
/// Equal to build_timeline(r, cp), at a fraction of its cost; std::nullopt when the structures
/// differ (then build it). `prev` is taken by value: a caller done with it moves it in (its
/// storage becomes the result's), or a timeline with the lanes of `prev_r`'s (one that `prev_r`'s
/// was retimed from, in turn), whose ops may be in another order: the result is the same.
std::optional<Timeline> retime_timeline(Timeline prev, const sim::Result& prev_r,
                                        const sim::Result& r, const compiler::CompiledPlan& cp);

/// A box to draw: one op, or a run of `count` > 1 ops merged because they are narrower than
/// a pixel and less than a pixel apart (its class: the one covering most of the run's time,
/// estimated from up to 16 of its ops).
struct Box {
  float x0 = 0, x1 = 0;
  uint32_t first = 0;  // index in the lane of the first op
  uint32_t count = 1;
  OpClass cls = OpClass::kCompute;
};

/// The view: time `t0` at pixel `x_origin`, `ns_per_px` nanoseconds per pixel, `width` pixels.
struct View {
  double t0 = 0, ns_per_px = 1;
  float x_origin = 0, width = 0;
  float x(double t) const { return x_origin + static_cast<float>((t - t0) / ns_per_px); }
  double t(float x) const { return t0 + static_cast<double>(x - x_origin) * ns_per_px; }
  double t1() const { return t0 + static_cast<double>(width) * ns_per_px; }
};

/// Appends the boxes of `lane` visible in `view` to `out`: O(visible boxes x log ops).
void layout_lane(const Lane& lane, const View& view, std::vector<Box>& out);
/// The same for a level of nested slices (Box::first indexes `spans`).
void layout_spans(const std::vector<Span>& spans, const View& view, std::vector<Box>& out);

/// Search: the query's words, lower-cased. An op matches when each word occurs in its
/// search text (search_text), a word ending in a digit not followed by another digit, so
/// that `PP3` does not match `PP31` nor `layer1.` match `layer19.`.
std::vector<std::string> search_words(std::string_view query);
bool search_match(std::string_view text, const std::vector<std::string>& words);
/// Lower-cased text a DAG node is searched by: its name (tags, model op, communication kind
/// and purpose, devices), e.g. "pp1 layer19 mb5 f (layer19.mlp.up) on device 1",
/// "all-gather param-gather pp0 mb2 f (...) on devices [0,4]".
std::string search_text(const compiler::CompiledPlan& cp, uint32_t node);

/// Index of the op of `lane` under time `t` (within `slack` ns), or -1.
long op_at(const Lane& lane, double t, double slack);

}  // namespace stretto::gui
