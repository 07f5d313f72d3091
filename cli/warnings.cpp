#include "warnings.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace stretto::cli {

namespace {

// "0-3,8,10-11" from a sorted list of ids.
std::string ranges(const std::vector<int>& ids, size_t max_items = 8) {
  std::string s;
  size_t items = 0;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (items == max_items) {
      s += ", ...";
      break;
    }
    s += (s.empty() ? "" : ",") +
         (j > i ? fmt::format("{}-{}", ids[i], ids[j]) : std::to_string(ids[i]));
    ++items;
    i = j + 1;
  }
  return s;
}

}  // namespace

int print_warnings(const CompiledPlan& cp, const sim::Result& r, bool folded) {
  int n = 0;
  const size_t D = r.devices.size();
  // Devices with no task at all (folded devices count as used when their representative is).
  std::vector<char> used(D, 0);
  for (const auto& pa : r.program.participants)
    if (pa.device < D) used[pa.device] = 1;
  for (size_t d = 0; d < D; ++d)
    if (r.devices[d].folded) used[d] = 1;
  std::vector<int> unused;
  for (size_t d = 0; d < D; ++d)
    if (!used[d]) unused.push_back(static_cast<int>(d));
  if (!unused.empty()) {
    std::fprintf(stderr,
                 "warning: the plan never uses %zu of the cluster's %zu devices (%s)\n"
                 "  hint: declare a smaller cluster, or place work on them\n",
                 unused.size(), D, ranges(unused).c_str());
    ++n;
  }
  // Stage imbalance: compute busy time of the devices that compute.
  sim::SimTime lo = -1, hi = -1;
  int lo_d = -1, hi_d = -1;
  for (size_t d = 0; d < D; ++d) {
    const sim::SimTime b = r.devices[d].busy;
    if (b <= 0) continue;
    if (lo < 0 || b < lo) lo = b, lo_d = static_cast<int>(d);
    if (hi < 0 || b > hi) hi = b, hi_d = static_cast<int>(d);
  }
  if (lo > 0 && static_cast<double>(hi) > 1.10 * static_cast<double>(lo)) {
    std::fprintf(stderr,
                 "warning: compute is imbalanced across devices: device %d computes %.3f ms, "
                 "device %d %.3f ms (+%.0f %%)\n"
                 "  hint: the slowest stage sets the pace; move layers (pp_regions, place) so "
                 "stages do similar work (the first and last stages also hold the embedding "
                 "and the output layer)\n",
                 hi_d, static_cast<double>(hi) / 1e6, lo_d, static_cast<double>(lo) / 1e6,
                 100.0 * (static_cast<double>(hi) / static_cast<double>(lo) - 1));
    ++n;
  }
  if (!folded && D >= 256 && cp.classes.size() < D) {
    std::fprintf(stderr,
                 "warning: %zu devices simulated one by one; only %zu distinct programs\n"
                 "  hint: --fold-replicas simulates one device per class of identical programs "
                 "(same metrics, much faster and smaller)\n",
                 D, cp.classes.size());
    ++n;
  }
  return n;
}

int terminal_width() {
  if (const char* c = std::getenv("COLUMNS"))
    if (int v = std::atoi(c); v >= 40) return v;
  struct winsize w {};
  for (int fd : {STDOUT_FILENO, STDERR_FILENO})
    if (::ioctl(fd, TIOCGWINSZ, &w) == 0 && w.ws_col >= 40) return w.ws_col;
  return 100;
}

}  // namespace stretto::cli
