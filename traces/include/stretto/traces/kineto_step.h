#pragma once
// What one training step of a PyTorch profiler (Kineto) trace is: the one definition that
// `import kineto` and `compare` share (docs/validation.md, "Steps").
//
// A step is a host `ProfilerStep#N` range, from its start to the later of its end and the end
// of the last GPU op (kernel, memcpy, memset) launched inside it. The host's own work in the
// step counts (a Gloo collective, a blocking copy), and so does the device work it queued that
// runs past the host's range; work launched in step N belongs to N even when it runs during
// N + 1. The first steps of each rank are warm-up and dropped (one when a rank has two or
// more, or `skip_steps`). Across ranks, step N runs from the earliest rank's start to the
// latest rank's end. The step time is the median of the used steps (the lower middle of an
// even count, so that it is a step that was measured); `compare` shows that step.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace stretto::traces {

/// One step: N of `ProfilerStep#N` and its extent (ns, the trace's clock).
struct StepSpan {
  int64_t number = 0;
  int64_t start = 0, end = 0;
  int64_t duration() const { return end - start; }
};

/// A GPU op: when the host called its launch, and when it ended on the device.
struct GpuOpSpan {
  int64_t launch = 0, end = 0;
};

/// How many leading steps of n are warm-up: `skip_steps` (at most n), or when it is -1, one
/// when there are two or more.
size_t warmup_steps(size_t n, int skip_steps);

/// One rank's used steps, by start: the host ranges `host` (any order), each extended to the
/// end of the GPU ops launched inside it, warm-up dropped.
std::vector<StepSpan> rank_steps(std::vector<StepSpan> host, const std::vector<GpuOpSpan>& gpu,
                                 int skip_steps = -1);

/// The step numbers every rank used, each from the earliest start to the latest end over the
/// ranks; by number.
std::vector<StepSpan> join_ranks(const std::vector<std::vector<StepSpan>>& ranks);

/// The step of median duration (the lower middle; ties: the lower number), if any.
std::optional<StepSpan> median_step(std::vector<StepSpan> steps);

/// N of a "ProfilerStep#N" name; nullopt for any other name.
std::optional<int64_t> profiler_step_number(std::string_view name);

}  // namespace stretto::traces
