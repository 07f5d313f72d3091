// The step of a Kineto trace (kineto_step.h).
#include "stretto/traces/kineto_step.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

namespace stretto::traces {

size_t warmup_steps(size_t n, int skip_steps) {
  if (skip_steps >= 0) return std::min(n, static_cast<size_t>(skip_steps));
  return n >= 2 ? 1 : 0;
}

std::vector<StepSpan> rank_steps(std::vector<StepSpan> host, const std::vector<GpuOpSpan>& gpu,
                                 int skip_steps) {
  std::sort(host.begin(), host.end(), [](const StepSpan& a, const StepSpan& b) {
    return std::tie(a.start, a.end, a.number) < std::tie(b.start, b.end, b.number);
  });
  std::vector<int64_t> host_end(host.size());
  for (size_t i = 0; i < host.size(); ++i) host_end[i] = host[i].end;
  for (const GpuOpSpan& op : gpu) {
    // the last step starting at or before the launch, if its host range holds the launch
    auto it = std::upper_bound(host.begin(), host.end(), op.launch,
                               [](int64_t t, const StepSpan& s) { return t < s.start; });
    if (it == host.begin()) continue;
    const size_t i = static_cast<size_t>(it - host.begin()) - 1;
    if (op.launch > host_end[i]) continue;  // launched between steps: no step's work
    host[i].end = std::max(host[i].end, op.end);
  }
  host.erase(host.begin(),
             host.begin() + static_cast<std::ptrdiff_t>(warmup_steps(host.size(), skip_steps)));
  return host;
}

std::vector<StepSpan> join_ranks(const std::vector<std::vector<StepSpan>>& ranks) {
  std::map<int64_t, std::pair<StepSpan, size_t>> by_number;  // step, ranks that have it
  for (const auto& r : ranks)
    for (const StepSpan& s : r) {
      auto [it, fresh] = by_number.try_emplace(s.number, s, 0);
      StepSpan& j = it->second.first;
      j.start = std::min(j.start, s.start);
      j.end = std::max(j.end, s.end);
      ++it->second.second;
    }
  std::vector<StepSpan> out;
  for (const auto& [n, js] : by_number)
    if (js.second == ranks.size()) out.push_back(js.first);
  return out;
}

std::optional<StepSpan> median_step(std::vector<StepSpan> steps) {
  if (steps.empty()) return std::nullopt;
  std::sort(steps.begin(), steps.end(), [](const StepSpan& a, const StepSpan& b) {
    return std::tuple(a.duration(), a.number) < std::tuple(b.duration(), b.number);
  });
  return steps[(steps.size() - 1) / 2];
}

std::optional<int64_t> profiler_step_number(std::string_view name) {
  constexpr std::string_view kPrefix = "ProfilerStep#";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  int64_t n = 0;
  const char* b = name.data() + kPrefix.size();
  const char* e = name.data() + name.size();
  auto [p, ec] = std::from_chars(b, e, n);
  if (ec != std::errc() || p != e) return std::nullopt;
  return n;
}

}  // namespace stretto::traces
