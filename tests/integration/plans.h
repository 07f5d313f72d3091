#pragma once
// Small plan builders shared by the integration tests.
#include <nlohmann/json.hpp>

#include "stretto/sim/session.h"

namespace stretto::testing {

using nlohmann::json;

inline json synthetic_model(int regions, int64_t act, int64_t params = 0, int64_t boundary = 0) {
  return {{"family", "synthetic"}, {"layers", regions},
          {"pp_regions", regions}, {"activation_bytes", act},
          {"param_bytes", params}, {"boundary_bytes", boundary},
          {"flops", 1e9}};
}
inline json fixed_costs() {
  return {{"kind", "fixed"}, {"F", 1}, {"B", 2}, {"BI", 1}, {"BW", 1}, {"comm", 0}, {"unit", "ms"}};
}
inline json fp(int pp, int mb, const char* p) {
  return {{"PP", pp}, {"MB", mb}, {"PASS", p}};
}

/// Classic 1F1B per-rank order (warm-up p-1-r).
inline json order_1f1b(int p, int m, int r) {
  json groups = json::array();
  int w = std::min(p - 1 - r, m), nf = 0, nb = 0;
  for (; nf < w; ++nf) groups.push_back({fp(r, nf, "F")});
  while (nf < m) {
    groups.push_back({fp(r, nf++, "F")});
    groups.push_back({fp(r, nb++, "B")});
  }
  while (nb < m) groups.push_back({fp(r, nb++, "B")});
  return {{"op", "order"}, {"filters", groups}};
}
inline json order_gpipe(int m, int r) {
  json groups = json::array();
  for (int i = 0; i < m; ++i) groups.push_back({fp(r, i, "F")});
  for (int i = 0; i < m; ++i) groups.push_back({fp(r, i, "B")});
  return {{"op", "order"}, {"filters", groups}};
}

/// p stages on devices 0..p-1, m microbatches, orders from `order(r)`.
template <class F>
json pipeline_plan(int p, int m, int64_t act, F order) {
  json s = json::array();
  for (int r = 0; r < p; ++r)
    s.push_back({{"op", "place"}, {"filter", {{"PP", r}}}, {"devices", {r}}});
  s.push_back({{"op", "split"}, {"filter", json::object()}, {"num_microbatches", m}});
  for (int r = 0; r < p; ++r) s.push_back(order(r));
  return {{"model", synthetic_model(p, act)},
          {"cluster", {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", p}}},
          {"costmodel", fixed_costs()},
          {"schedule", s}};
}

inline Expected<sim::Session> session_of(const json& plan) {
  auto src = plan::JsonSource::parse(plan.dump(), "test.json");
  if (!src) return fail(src.error());
  auto p = plan::parse_plan(*src);
  if (!p) return fail(p.error());
  return sim::Session::from_plan(std::move(*p));
}

}  // namespace stretto::testing
