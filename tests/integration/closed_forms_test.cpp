// Builders + compiler + engine together: closed-form makespans of schedules-spec.md §4 under
// fixed costs (F = 1, B = 2, BI = BW = 1 ms, free communication; costs per stage chunk) for
// p = 2..8 and several m. Bubble ratio = 1 - busy / (devices x makespan).
#include <gtest/gtest.h>

#include "plans.h"

using namespace stretto;
using namespace stretto::testing;

namespace {

constexpr int64_t kMs = 1'000'000;

struct Case {
  const char* family;
  int v;  // stages per rank
  // makespan in ms for (p, m)
  int64_t (*makespan)(int p, int m);
  // smallest m as a function of p, and whether m must be a multiple of something
  int (*min_m)(int p);
  // the model's stages: p·v, except DualPipe's p stages, each held by two ranks (one per
  // direction); each device computes m·v·(F+B) (DualPipe: m·(F+B), half the microbatches
  // on each of its two stages)
  bool bidirectional = false;
};

sim::Result simulate_builder(const char* family, int p, int v, int m, int stages) {
  json plan = {{"model", synthetic_model(stages, 1 << 20)},
               {"cluster", {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", p}}},
               {"costmodel", fixed_costs()},
               {"schedule",
                {{"builder", family}, {"ranks", p}, {"stages_per_rank", v}, {"microbatches", m}}}};
  auto s = session_of(plan);
  EXPECT_TRUE(s) << family << " p=" << p << " m=" << m << "\n" << (s ? "" : render_all(s.error()));
  if (!s) return {};
  auto r = s->simulate();
  EXPECT_TRUE(r) << (r ? "" : render_all(r.error()));
  return r ? std::move(*r) : sim::Result{};
}

}  // namespace

TEST(ClosedForms, EveryFamilyMatchesTheSpec) {
  const std::vector<Case> cases = {
      {"gpipe", 1, [](int p, int m) -> int64_t { return 3 * (m + p - 1); },
       [](int p) { return p; }},
      {"1f1b", 1, [](int p, int m) -> int64_t { return 3 * (m + p - 1); }, [](int p) { return p; }},
      // interleaved and looped BFS: m·v·(F+B) + (p-1)(F+B), v = 2
      {"interleaved-1f1b", 2, [](int p, int m) -> int64_t { return 3 * (2 * m) + 3 * (p - 1); },
       [](int p) { return p; }},
      {"looped-bfs", 2, [](int p, int m) -> int64_t { return 3 * (2 * m) + 3 * (p - 1); },
       [](int p) { return p; }},
      // ZB-H1: m(F+I+W) + (p-1)(F+I-W)
      {"zb-h1", 1, [](int p, int m) -> int64_t { return 3 * m + (p - 1); },
       [](int p) { return p; }},
      // ZB-V: 2m(F+I+W) + (p-1)F. The builder works with n = max(2p-1, m) microbatches and
      // drops the rest, so the steady-state form applies from m >= 2p-1 on.
      {"zb-v", 2, [](int p, int m) -> int64_t { return 6 * m + (p - 1); },
       [](int p) { return 2 * p; }},
      // DualPipeV: 2m(F+B) + (p-1)(F&B + B - 3W), F&B = F + B
      {"dualpipev", 2, [](int p, int m) -> int64_t { return 6 * m + 2 * (p - 1); },
       [](int p) { return 2 * p; }},
      // ZB-H2: the steady state has no bubble ((p-1)(F+I-2W) = 0 at F = I = W), so the last
      // rank, idle until the fill (p-1)F has reached it, then works without a gap:
      // m(F+I+W) + (p-1)F. The warm-up of up to 2p-1 microbatches needs m >= 2p here.
      {"zb-h2", 1, [](int p, int m) -> int64_t { return 3 * m + (p - 1); },
       [](int p) { return 2 * p; }},
      // DualPipe (p even, p stages, half the microbatches per direction): DeepSeek's
      // m(F+B) + (p/2-1)(F&B + B - 3W), F&B = F + B: 3m + (p/2-1)(3 + 2 - 3).
      {"dualpipe", 2, [](int p, int m) -> int64_t { return 3 * m + (p / 2 - 1) * 2; },
       [](int p) { return 2 * p; }, true},
  };
  for (const auto& c : cases)
    for (int p = 2; p <= 8; ++p)
      for (int k : {1, 2, 3}) {
        if (c.bidirectional && p % 2 != 0) continue;
        int m = c.min_m(p) * k;
        auto r = simulate_builder(c.family, p, c.v, m, c.bidirectional ? p : p * c.v);
        EXPECT_EQ(r.step_time, c.makespan(p, m) * kMs) << c.family << " p=" << p << " m=" << m;
        // All work is compute here: busy = m·v·(F+B) per device (DualPipe m·(F+B)).
        int64_t work = static_cast<int64_t>(m) * (c.bidirectional ? 1 : c.v) * 3 * kMs;
        double ratio =
            1.0 - static_cast<double>(work) / static_cast<double>(c.makespan(p, m) * kMs);
        EXPECT_NEAR(r.bubble_ratio, ratio, 1e-9) << c.family << " p=" << p << " m=" << m;
      }
}
