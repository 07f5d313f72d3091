#pragma once
// `stretto simulate --timeline`: the simulated step drawn in the terminal, one row per device
// (or per device and stream), time left to right, a legend, colours on a terminal.

#include <string>
#include <vector>

#include "stretto/compiler/compiler.h"
#include "stretto/sim/result.h"

namespace stretto::cli {

inline constexpr int kMaxColumns = 2000;

struct TimelineOptions {
  int width = 100;              // columns of the time axis (per band with scale_to_passes)
  /// Enough columns for two per median compute pass (at most kMaxColumns), drawn in bands of
  /// `width` columns, so that short passes do not blur into one letter.
  bool scale_to_passes = false;
  bool per_stream = false;      // a row per (device, stream) instead of per device
  bool color = false;           // ANSI colours
  std::vector<char> devices;    // rows to draw (by device id; empty = all, up to max_rows)
  size_t max_rows = 64;
};

std::string timeline(const compiler::CompiledPlan& cp, const sim::Result& r,
                     const TimelineOptions& opt);

}  // namespace stretto::cli
