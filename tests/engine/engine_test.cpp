// Engine semantics on hand-built programs, with end times computed by hand in the comments.

#include "stretto/engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "program_builder.h"

namespace stretto::engine {
namespace {

using testing::ProgramBuilder;

RunResult run_ok(const Program& p) {
  const auto errors = validate(p);
  EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : errors.front());
  Engine engine;
  return engine.run(p);
}

// ---- processor sharing and interference ----

TEST(Engine, SingleComputeKernelRunsAlone) {
  ProgramBuilder b(1, {"compute"});
  const auto k = b.compute(0, 0, 1000);
  const RunResult r = run_ok(b.p);
  EXPECT_FALSE(r.stalled);
  EXPECT_EQ(r.timing[k].start, 0);
  EXPECT_EQ(r.timing[k].end, 1000);
  EXPECT_EQ(slowdown(b.p, k, r.timing[k]), 1.0f);
  EXPECT_EQ(r.makespan, 1000);
}

TEST(Engine, TwoEqualComputeKernelsStartedTogetherFinishAtTwiceTheirAloneTime) {
  ProgramBuilder b(1, {"s0", "s1"});
  const auto k1 = b.compute(0, 0, 1000);
  const auto k2 = b.compute(0, 1, 1000);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[k1].start, 0);
  EXPECT_EQ(r.timing[k2].start, 0);
  EXPECT_EQ(r.timing[k1].end, 2000);
  EXPECT_EQ(r.timing[k2].end, 2000);
  EXPECT_EQ(slowdown(b.p, k1, r.timing[k1]), 2.0f);
  EXPECT_EQ(slowdown(b.p, k2, r.timing[k2]), 2.0f);
}

TEST(Engine, ThreeKernelsShareInThirdsWithoutRoundingDrift) {
  ProgramBuilder b(1, {"s0", "s1", "s2"});
  for (uint16_t s = 0; s < 3; ++s) b.compute(0, s, 1000);
  const RunResult r = run_ok(b.p);
  for (uint32_t t = 0; t < 3; ++t) EXPECT_EQ(r.timing[t].end, 3000);
}

// engine.h's rounding rule, written with std::ceil: a completion `x` ns of work away at the
// current rate ends at ceil(x - (1e-6 + 1e-13 x)), at least 0, at most 4e18 ns.
int64_t rounded_up(double x) {
  if (!(x > 0)) return 0;
  if (x >= 4.0e18) return static_cast<int64_t>(4.0e18);
  const double y = std::ceil(x - (1e-6 + x * 1e-13));
  return y > 0 ? static_cast<int64_t>(y) : 0;
}

TEST(Engine, CompletionTimesRoundUpAsTheRuleSays) {
  // On each device: a compute kernel slowed by comm_sm_share for its whole run (the comm beside
  // it is a fixed 3e18 ns), so it ends at rounded_up(work / (1 - share)); and a transfer without
  // links, which ends at rounded_up(bytes / rate_cap). Works from 1 ns to 1e17 ns (doubles are
  // whole numbers from 2^52 up), some exact multiples, some just above one.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(0.0, 17.0), share(0.0, 0.95), cap(0.01, 1000.0);
  const uint32_t n = 600;
  ProgramBuilder b(n, {"compute", "comm", "xfer"});
  std::vector<int64_t> want_k(n), want_x(n);
  std::vector<uint32_t> k(n), x(n);
  for (uint32_t d = 0; d < n; ++d) {
    auto work = static_cast<int64_t>(std::pow(10.0, exponent(rng)));
    double s = share(rng), c = cap(rng);
    if (d % 5 == 0) s = 0.5;                     // exact: work / 0.5
    if (d % 7 == 0) c = 0.25 * double(1 + d % 3);  // exact or just above a whole number
    if (d % 11 == 0) work = 1;
    b.p.devices[d].comm_sm_share = s;
    k[d] = b.compute(d, 0, std::max<int64_t>(work, 1));
    b.comm({{d, 1}}, 0, 3'000'000'000'000'000'000, 0.0);
    x[d] = b.comm({{d, 2}}, work, 0, c);
    want_k[d] = rounded_up(static_cast<double>(std::max<int64_t>(work, 1)) / (1.0 - s));
    want_x[d] = rounded_up(static_cast<double>(work) / c);
  }
  const RunResult r = run_ok(b.p);
  int wrong = 0;
  for (uint32_t d = 0; d < n && wrong < 10; ++d) {
    wrong += r.timing[k[d]].end != want_k[d] || r.timing[x[d]].end != want_x[d];
    EXPECT_EQ(r.timing[k[d]].end, want_k[d]) << "device " << d;
    EXPECT_EQ(r.timing[x[d]].end, want_x[d]) << "device " << d;
  }
}

TEST(Engine, ShortKernelLeavesAndTheLongOneSpeedsUp) {
  // 0..10: both at 1/2 -> short (work 5) done at 10; long has 5 left at full speed -> 15.
  ProgramBuilder b(1, {"s0", "s1"});
  const auto lng = b.compute(0, 0, 10);
  const auto shrt = b.compute(0, 1, 5);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[shrt].end, 10);
  EXPECT_EQ(r.timing[lng].end, 15);
  EXPECT_FLOAT_EQ(slowdown(b.p, lng, r.timing[lng]), 1.5f);
}

TEST(Engine, CommKernelSlowsConcurrentComputeBySmShare) {
  // comm_sm_share = 0.25. The comm (latency 100 + 600 bytes at rate_cap 2 = 400 ns) is active
  // on device 0 during [0, 400): the compute kernel (work 1000) runs at 0.75 -> 300 done; the
  // remaining 700 at full speed -> ends at 1100. The mem-bound kernel on device 1 (hbm share
  // 0.5, same comm pattern) does 200 by 400, then 800 more -> 1200.
  ProgramBuilder b(2, {"compute", "comm"});
  b.p.devices[0].comm_sm_share = 0.25;
  b.p.devices[0].comm_hbm_share = 0.9;  // not used by a compute-bound kernel
  b.p.devices[1].comm_sm_share = 0.9;   // not used by a mem-bound kernel
  b.p.devices[1].comm_hbm_share = 0.5;
  const auto k0 = b.compute(0, 0, 1000);
  const auto c0 = b.comm({{0, 1}}, 600, 100, 2.0);
  const auto k1 = b.compute(1, 0, 1000, {}, /*mem_bound=*/true);
  const auto c1 = b.comm({{1, 1}}, 600, 100, 2.0);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[c0].end, 400);
  EXPECT_EQ(r.timing[c1].end, 400);
  EXPECT_EQ(r.timing[k0].end, 1100);
  EXPECT_EQ(r.timing[k1].end, 1200);
  EXPECT_FLOAT_EQ(slowdown(b.p, k0, r.timing[k0]), 1.1f);
  EXPECT_EQ(slowdown(b.p, c0, r.timing[c0]), 1.0f);
}

TEST(Engine, OverlappedCommDoesNotSlowCompute) {
  // A comm marked `overlapped` (a TP collective under tp_comm_overlap, whose SM cost is priced
  // into the GEMM it overlaps) takes nothing from the device's compute; a plain comm beside it
  // still does. comm_sm_share 0.25; the overlapped comm is active during [0, 400) (latency 100
  // + 600 bytes at rate_cap 2), the plain one during [0, 200) (latency 200). The kernel (work
  // 1000) runs at 0.75 while the plain comm is active (150 done by 200), then at full speed:
  // 200 + 850 = 1050. Without the plain comm it ends at 1000 (CommKernelSlows...: 1100).
  for (bool plain : {false, true}) {
    ProgramBuilder b(1, {"compute", "tp", "dp"});
    b.p.devices[0].comm_sm_share = 0.25;
    const auto k = b.compute(0, 0, 1000);
    const auto c = b.comm({{0, 1}}, 600, 100, 2.0);
    b.p.tasks[c].overlapped = true;
    if (plain) b.comm({{0, 2}}, 0, 200, 0);
    const RunResult r = run_ok(b.p);
    EXPECT_EQ(r.timing[c].end, 400);
    EXPECT_EQ(r.timing[k].end, plain ? 1050 : 1000) << (plain ? "with" : "without") << " a plain comm";
  }
}

// A collective of 17 devices (more than the engine's small-group limit, 16, so that it finds
// each device's entry by search) with latency 400, comm_sm_share 0.5 everywhere, beside a
// kernel (work 600) on device 0 (task 0; the collective is task 1): [0, 400) at 0.5 -> 200
// done, then 400 more -> 800. Marked overlapped it takes nothing: 600.
Program wide_collective_beside_a_kernel(bool sorted_participants) {
  ProgramBuilder b(17, {"compute", "comm"});
  std::vector<Participant> parts;
  for (uint32_t d = 0; d < 17; ++d) parts.push_back({sorted_participants ? d : 16 - d, 1});
  for (uint32_t d = 0; d < 17; ++d) b.p.devices[d].comm_sm_share = 0.5;
  b.compute(0, 0, 600);
  b.comm(parts, 0, 400, 0);
  return b.p;
}

TEST(Engine, AWideCollectiveSlowsComputeUnlessOverlapped) {
  // Participants sorted by device or not, both ways.
  for (bool overlapped : {false, true}) {
    for (bool sorted : {true, false}) {
      Program p = wide_collective_beside_a_kernel(sorted);
      const uint32_t k = 0, c = 1;
      p.tasks[c].overlapped = overlapped;
      const RunResult r = run_ok(p);
      EXPECT_EQ(r.timing[c].end, 400);
      EXPECT_EQ(r.timing[k].end, overlapped ? 600 : 800)
          << (overlapped ? "overlapped" : "plain") << ", " << (sorted ? "sorted" : "unsorted");
    }
  }
}

TEST(Engine, InterferenceCombinesWithProcessorSharing) {
  // Two kernels (work 600 each) and a comm of latency 400 with sm share 0.5.
  // [0,400): each at 0.5/2 = 0.25 -> 100 done each. Then 500 left each at 1/2 -> +1000 = 1400.
  ProgramBuilder b(1, {"a", "b", "comm"});
  b.p.devices[0].comm_sm_share = 0.5;
  const auto k1 = b.compute(0, 0, 600);
  const auto k2 = b.compute(0, 1, 600);
  b.comm({{0, 2}}, 0, 400, 0);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[k1].end, 1400);
  EXPECT_EQ(r.timing[k2].end, 1400);
}

TEST(Engine, FullSmShareStallsComputeUntilTheCommEnds) {
  ProgramBuilder b(1, {"compute", "comm"});
  b.p.devices[0].comm_sm_share = 1.0;
  const auto k = b.compute(0, 0, 100);
  b.comm({{0, 1}}, 0, 50, 0);
  const RunResult r = run_ok(b.p);
  EXPECT_FALSE(r.stalled);
  EXPECT_EQ(r.timing[k].end, 150);
}

TEST(Engine, DevicesTimeShareTheirHostCores) {
  // Four devices on a host of 2 cores; device 3's kernel waits for device 2's. [0, 900):
  // devices 0-2 compute, 3 on 2 cores: each at 2/3; device 2's kernel (600) ends at 900,
  // devices 0 and 1 have 400 left. [900, 1500): device 3 starts, 3 active again: each at 2/3,
  // so devices 0 and 1 end at 900 + 400 * 3/2 = 1500 and device 3 has done 400. Then it is
  // alone at full speed: 600 more, ends at 2100. Without the host: 1000, 1000, 600, 1600.
  ProgramBuilder b(4, {"compute"});
  b.p.host_cores = {2.0};
  for (auto& d : b.p.devices) d.host = 0;
  const auto k0 = b.compute(0, 0, 1000);
  const auto k1 = b.compute(1, 0, 1000);
  const auto k2 = b.compute(2, 0, 600);
  const auto k3 = b.compute(3, 0, 1000, {k2});
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[k2].end, 900);
  EXPECT_EQ(r.timing[k0].end, 1500);
  EXPECT_EQ(r.timing[k1].end, 1500);
  EXPECT_EQ(r.timing[k3].start, 900);
  EXPECT_EQ(r.timing[k3].end, 2100);
}

TEST(Engine, OversubscribedHostCoresLoseTheirShareEfficiency) {
  // Host of 1 core, efficiency 0.5: while both devices compute (2 > 1 core) each runs at
  // 0.5 * 1 / 2 = 1/4: device 1's 250 ends at 1000, device 0 has done 250 of 1000; then it is
  // alone (1 <= 1 core: full speed, the efficiency no longer applies): 750 more, ends at 1750.
  ProgramBuilder b(2, {"compute"});
  b.p.host_cores = {1.0};
  b.p.host_share_efficiency = 0.5;
  b.p.devices[0].host = b.p.devices[1].host = 0;
  const auto k0 = b.compute(0, 0, 1000);
  const auto k1 = b.compute(1, 0, 250);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[k1].end, 1000);
  EXPECT_EQ(r.timing[k0].end, 1750);
  // outside (0, 1]: refused
  b.p.host_share_efficiency = 0;
  const auto errors = validate(b.p);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("host_share_efficiency"), std::string::npos) << errors[0];
}

TEST(Engine, HostCoresLimitOnlyTheirHostsDevices) {
  // Host 0 (1 core) holds devices 0 and 1; device 2 has no host. All three compute 1000 at
  // once: devices 0 and 1 at 1/2 -> 2000; device 2 alone -> 1000. With enough cores (2) the
  // host changes nothing.
  for (double cores : {1.0, 2.0}) {
    ProgramBuilder b(3, {"compute"});
    b.p.host_cores = {cores};
    b.p.devices[0].host = b.p.devices[1].host = 0;
    const auto k0 = b.compute(0, 0, 1000);
    const auto k1 = b.compute(1, 0, 1000);
    const auto k2 = b.compute(2, 0, 1000);
    const RunResult r = run_ok(b.p);
    const SimTime shared = cores < 2 ? 2000 : 1000;
    EXPECT_EQ(r.timing[k0].end, shared) << cores;
    EXPECT_EQ(r.timing[k1].end, shared) << cores;
    EXPECT_EQ(r.timing[k2].end, 1000) << cores;
  }
}

TEST(Validate, ReportsBadHosts) {
  ProgramBuilder b(2, {"compute"});
  b.p.host_cores = {0.0};
  b.p.devices[1].host = 3;
  b.compute(0, 0, 10);
  const auto errors = validate(b.p);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("unknown host 3"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("cores must be finite and > 0"), std::string::npos) << errors[1];
}

// ---- links and max-min sharing ----

TEST(Engine, TwoFlowsOnOneLinkEachGetHalf) {
  ProgramBuilder b(2, {"pp"});
  const auto l = b.link(1.0);  // 1 byte/ns
  const auto f1 = b.comm({{0, 0}}, 1000, 0, 0, {l});
  const auto f2 = b.comm({{1, 0}}, 1000, 0, 0, {l});
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[f1].end, 2000);
  EXPECT_EQ(r.timing[f2].end, 2000);
  EXPECT_EQ(slowdown(b.p, f1, r.timing[f1]), 2.0f);
}

TEST(Engine, TextbookMaxMinThroughTheEngine) {
  // Links A, B (1 byte/ns); f1 over A+B, f2 over A, f3 over B: all at 1/2. 500 bytes -> 1000 ns.
  ProgramBuilder b(3, {"net"});
  const auto la = b.link(1.0, "A");
  const auto lb = b.link(1.0, "B");
  const auto f1 = b.comm({{0, 0}}, 500, 0, 0, {la, lb});
  const auto f2 = b.comm({{1, 0}}, 500, 0, 0, {la});
  const auto f3 = b.comm({{2, 0}}, 500, 0, 0, {lb});
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[f1].end, 1000);
  EXPECT_EQ(r.timing[f2].end, 1000);
  EXPECT_EQ(r.timing[f3].end, 1000);
}

TEST(Engine, AsymmetricMaxMinThroughTheEngine) {
  // A = 1, B = 2: f1 (A+B) and f2 (A) at 1/2, f3 (B) at 3/2 while all run.
  // f3: 3000 bytes -> 2000 ns. f1, f2: 1000 bytes -> 2000 ns.
  ProgramBuilder b(3, {"net"});
  const auto la = b.link(1.0, "A");
  const auto lb = b.link(2.0, "B");
  const auto f1 = b.comm({{0, 0}}, 1000, 0, 0, {la, lb});
  const auto f2 = b.comm({{1, 0}}, 1000, 0, 0, {la});
  const auto f3 = b.comm({{2, 0}}, 3000, 0, 0, {lb});
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[f1].end, 2000);
  EXPECT_EQ(r.timing[f2].end, 2000);
  EXPECT_EQ(r.timing[f3].end, 2000);
}

TEST(Engine, FlowRateRisesWhenAnotherEnds) {
  // Link 1 byte/ns. a: 1000 bytes, b: 3000 bytes. Both at 1/2 until a ends at 2000 (b did 1000);
  // then b alone at 1: 2000 more -> 4000.
  ProgramBuilder b(2, {"net"});
  const auto l = b.link(1.0);
  const auto fa = b.comm({{0, 0}}, 1000, 0, 0, {l});
  const auto fb = b.comm({{1, 0}}, 3000, 0, 0, {l});
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[fa].end, 2000);
  EXPECT_EQ(r.timing[fb].end, 4000);
  EXPECT_FLOAT_EQ(slowdown(b.p, fb, r.timing[fb]), 4000.0f / 3000.0f);
}

TEST(Engine, LatencyPhaseDoesNotUseTheLink) {
  // Link 1 byte/ns. a: latency 100, 1000 bytes. b: no latency, 1000 bytes.
  // [0,100): b alone at 1 -> 100 done. Then both at 1/2: b's 900 take 1800 -> b ends 1900;
  // a did 900 by then, its last 100 at full rate -> 2000.
  ProgramBuilder b(2, {"net"});
  const auto l = b.link(1.0);
  const auto fa = b.comm({{0, 0}}, 1000, 100, 0, {l});
  const auto fb = b.comm({{1, 0}}, 1000, 0, 0, {l});
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[fb].end, 1900);
  EXPECT_EQ(r.timing[fa].end, 2000);
}

TEST(Engine, RateCapLimitsAFlowAndFreesTheLinkForOthers) {
  // Link 1 byte/ns; a capped at 0.25 (250 bytes -> 1000 ns); b uncapped gets 0.75
  // (750 bytes -> 1000 ns).
  ProgramBuilder b(2, {"net"});
  const auto l = b.link(1.0);
  const auto fa = b.comm({{0, 0}}, 250, 0, 0.25, {l});
  const auto fb = b.comm({{1, 0}}, 750, 0, 0, {l});
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[fa].end, 1000);
  EXPECT_EQ(r.timing[fb].end, 1000);
  EXPECT_EQ(slowdown(b.p, fa, r.timing[fa]), 1.0f);
}

TEST(Engine, CommWithoutLinksRunsAtItsCapOrInstantly) {
  ProgramBuilder b(1, {"a", "b", "c"});
  const auto capped = b.comm({{0, 0}}, 1000, 10, 4.0);  // 10 + 250
  const auto instant = b.comm({{0, 1}}, 1000, 10, 0);   // latency only
  const auto nothing = b.comm({{0, 2}}, 0, 0, 0);       // zero time
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[capped].end, 260);
  EXPECT_EQ(r.timing[instant].end, 10);
  EXPECT_EQ(r.timing[nothing].start, 0);
  EXPECT_EQ(r.timing[nothing].end, 0);
}

// ---- streams, dispatch, dependencies ----

TEST(Engine, StreamIsAFifo) {
  ProgramBuilder b(1, {"compute"});
  const auto k1 = b.compute(0, 0, 100);
  const auto k2 = b.compute(0, 0, 200);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[k1].end, 100);
  EXPECT_EQ(r.timing[k2].start, 100);
  EXPECT_EQ(r.timing[k2].end, 300);
  EXPECT_EQ(slowdown(b.p, k2, r.timing[k2]), 1.0f);
}

TEST(Engine, StreamOrderFollowsDispatchOrderNotTaskIds) {
  ProgramBuilder b(1, {"compute"});
  const auto k1 = b.compute(0, 0, 100);
  const auto k2 = b.compute(0, 0, 200);
  b.p.devices[0].dispatch = {k2, k1};
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[k2].start, 0);
  EXPECT_EQ(r.timing[k1].start, 200);
}

TEST(Engine, DispatchDelaysStarts) {
  // Device 0 issues entry k at (k+1)*50: k1 at 50 (runs 50..60), k2 at 100 (100..110) although
  // the stream is free at 60. k3 on another stream is entry 2: issued at 150.
  ProgramBuilder b(2, {"compute", "other"});
  b.p.devices[0].dispatch_ns = 50;
  const auto k1 = b.compute(0, 0, 10);
  const auto k2 = b.compute(0, 0, 10);
  const auto k3 = b.compute(0, 1, 10);
  // A transfer between device 0 (entry 3: issued at 200) and device 1 (dispatch_ns 0).
  const auto x = b.comm({{0, 1}, {1, 0}}, 0, 5, 0);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[k1].start, 50);
  EXPECT_EQ(r.timing[k1].end, 60);
  EXPECT_EQ(r.timing[k2].start, 100);
  EXPECT_EQ(r.timing[k3].start, 150);
  EXPECT_EQ(r.timing[x].start, 200);
  EXPECT_EQ(r.timing[x].end, 205);
}

TEST(Engine, DependenciesAcrossDevicesAndStreams) {
  ProgramBuilder b(2, {"compute"});
  const auto a = b.compute(0, 0, 100);
  const auto c = b.compute(1, 0, 50, {a});
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[c].start, 100);
  EXPECT_EQ(r.timing[c].end, 150);
}

TEST(Engine, TransferStartsOnlyWhenBothSidesAreAtTheHead) {
  // Device 0 is ready to send at 0; device 1's pp stream is busy with a 1000 ns transfer first.
  ProgramBuilder b(2, {"pp"});
  const auto busy = b.comm({{1, 0}}, 0, 1000, 0);
  const auto send = b.comm({{0, 0}, {1, 0}}, 0, 10, 0);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[busy].end, 1000);
  EXPECT_EQ(r.timing[send].start, 1000);
  EXPECT_EQ(r.timing[send].end, 1010);
}

TEST(Engine, RendezvousWaitsForTheLaterSideToo) {
  // Symmetric case: the receiver is at the head at 0; the sender's stream frees at 300.
  ProgramBuilder b(2, {"pp"});
  const auto busy = b.comm({{0, 0}}, 0, 300, 0);
  const auto send = b.comm({{0, 0}, {1, 0}}, 0, 10, 0);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[busy].end, 300);
  EXPECT_EQ(r.timing[send].start, 300);
}

TEST(Engine, CollectiveStartsWhenEveryMemberArrives) {
  // Device d runs a kernel of (d+1)*100 ns, then the collective on the same stream.
  ProgramBuilder b(4, {"s"});
  std::vector<uint32_t> kernels;
  for (uint32_t d = 0; d < 4; ++d) kernels.push_back(b.compute(d, 0, (d + 1) * 100));
  const auto coll = b.comm({{0, 0}, {1, 0}, {2, 0}, {3, 0}}, 0, 50, 0);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[coll].start, 400);
  EXPECT_EQ(r.timing[coll].end, 450);
}

TEST(Engine, LargeCollectiveStartsWhenTheLastOfManyMembersArrives) {
  // 40 members (more than the engine's small-group scan): the slowest member arrives at 400.
  const uint32_t n = 40;
  ProgramBuilder b(n, {"s"});
  std::vector<Participant> members;
  for (uint32_t d = 0; d < n; ++d) {
    b.compute(d, 0, d == 17 ? 400 : 100);
    members.push_back({d, 0});
  }
  std::reverse(members.begin(), members.end());  // any member order
  const auto coll = b.comm(members, 0, 50, 0);
  const auto after = b.compute(3, 0, 10);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[coll].start, 400);
  EXPECT_EQ(r.timing[coll].end, 450);
  EXPECT_EQ(r.timing[after].start, 450);
}

TEST(Engine, TaskOnTwoStreamsOfOneDeviceHoldsBothFifos) {
  // A copy engine transfer that occupies two streams of device 0 (and one of device 1).
  ProgramBuilder b(2, {"a", "b"});
  const auto busy_a = b.compute(0, 0, 100);
  const auto busy_b = b.compute(0, 1, 300);
  const auto x = b.comm({{0, 0}, {0, 1}, {1, 0}}, 0, 20, 0);
  const auto after_a = b.compute(0, 0, 5);
  const auto after_b = b.compute(0, 1, 5);
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[busy_a].end, 200);  // shares the device with busy_b until then
  EXPECT_EQ(r.timing[busy_b].end, 400);
  EXPECT_EQ(r.timing[x].start, 400);
  EXPECT_EQ(r.timing[after_a].start, 420);
  EXPECT_EQ(r.timing[after_b].start, 420);
}

TEST(Engine, SendRecvOrderInversionIsReportedAsStalled) {
  // Device 0's pp stream: send A (0->1) then recv B (1->0); device 1's: send B then recv A.
  // Each transfer waits for the other device's head: a deadlock.
  ProgramBuilder b(2, {"pp"});
  const auto a = b.comm({{0, 0}, {1, 0}}, 100, 10, 1.0);
  const auto bb = b.comm({{1, 0}, {0, 0}}, 100, 10, 1.0);
  b.p.devices[1].dispatch = {bb, a};
  ASSERT_TRUE(validate(b.p).empty());
  Engine engine;
  const RunResult r = engine.run(b.p);
  EXPECT_TRUE(r.stalled);
  auto blocked = r.stall.blocked_tasks;
  std::sort(blocked.begin(), blocked.end());
  EXPECT_EQ(blocked, (std::vector<uint32_t>{a, bb}));
  EXPECT_EQ(r.timing[a].start, -1);
  EXPECT_EQ(r.timing[bb].start, -1);
}

TEST(Engine, StallAfterPartialProgressKeepsFinishedTimings) {
  // A kernel runs; then a dependency that contradicts the stream order blocks the rest.
  ProgramBuilder b(1, {"compute"});
  const auto first = b.compute(0, 0, 100);
  const auto x = b.compute(0, 0, 10);
  const auto y = b.compute(0, 0, 10, {x});
  b.p.devices[0].dispatch = {first, y, x};
  const RunResult r = run_ok(b.p);
  EXPECT_TRUE(r.stalled);
  EXPECT_EQ(r.timing[first].end, 100);
  EXPECT_EQ(r.makespan, 100);
  EXPECT_EQ(r.stall.blocked_tasks, (std::vector<uint32_t>{y}));
}

TEST(Engine, StallNamesEachStreamsFirstBlockedTaskInDeviceAndStreamOrder) {
  // Device 0 issues its streams' first tasks in the order s2, s0, s1; the report walks
  // (device, stream) in order all the same: s0, s1, s2 of device 0, then device 1's s0.
  ProgramBuilder b(2, {"s0", "s1", "s2"});
  const auto a = b.comm({{0, 0}, {1, 0}}, 100, 10, 1.0);   // a send/recv inversion on s0
  const auto bb = b.comm({{1, 0}, {0, 0}}, 100, 10, 1.0);
  const auto c1 = b.compute(0, 1, 10, {a});
  const auto c2 = b.compute(0, 2, 10, {a});
  b.p.devices[0].dispatch = {c2, a, bb, c1};
  b.p.devices[1].dispatch = {bb, a};
  ASSERT_TRUE(validate(b.p).empty());
  const RunResult r = Engine().run(b.p);
  ASSERT_TRUE(r.stalled);
  EXPECT_EQ(r.stall.blocked_tasks, (std::vector<uint32_t>{a, c1, c2, bb}));
  for (uint32_t t : {a, bb, c1, c2}) {
    EXPECT_EQ(r.timing[t].start, -1) << t;
    EXPECT_EQ(r.timing[t].end, -1) << t;
  }
}

TEST(Engine, ReusedResultOfAStalledRunMarksTheTasksThatNeverRan) {
  // Same shape twice into one RunResult: first deadlock-free, then with the order inverted.
  ProgramBuilder b(2, {"pp"});
  const auto a = b.comm({{0, 0}, {1, 0}}, 0, 10, 0);
  const auto c = b.comm({{1, 0}, {0, 0}}, 0, 10, 0);
  Engine engine;
  RunResult r;
  engine.run(b.p, r);
  ASSERT_FALSE(r.stalled);
  EXPECT_EQ(r.timing[c].end, 20);
  b.p.devices[1].dispatch = {c, a};
  engine.run(b.p, r);
  EXPECT_TRUE(r.stalled);
  EXPECT_EQ(r.timing[a].start, -1);
  EXPECT_EQ(r.timing[a].end, -1);
  EXPECT_EQ(r.timing[c].end, -1);
  EXPECT_EQ(r.makespan, 0);
}

TEST(Engine, BarrierJoinsInZeroTime) {
  ProgramBuilder b(2, {"compute"});
  const auto a = b.compute(0, 0, 100);
  const auto c = b.compute(1, 0, 300);
  const auto bar = b.barrier({a, c});
  const auto after0 = b.compute(0, 0, 10, {bar});
  const auto after1 = b.compute(1, 0, 10, {bar});
  const auto free_bar = b.barrier();
  const RunResult r = run_ok(b.p);
  EXPECT_EQ(r.timing[bar].start, 300);
  EXPECT_EQ(r.timing[bar].end, 300);
  EXPECT_EQ(r.timing[after0].start, 300);
  EXPECT_EQ(r.timing[after1].start, 300);
  EXPECT_EQ(r.timing[free_bar].end, 0);
  EXPECT_EQ(r.makespan, 310);
}

TEST(Engine, ChainsOfBarriersAndZeroWorkTasksResolveAtOneInstant) {
  ProgramBuilder b(1, {"compute"});
  const auto a = b.compute(0, 0, 100);
  uint32_t prev = a;
  for (int i = 0; i < 1000; ++i) prev = b.barrier({prev});
  const auto z = b.compute(0, 0, 0, {prev});
  const auto last = b.compute(0, 0, 5);
  const RunResult r = run_ok(b.p);
  EXPECT_FALSE(r.stalled);
  EXPECT_EQ(r.timing[prev].end, 100);
  EXPECT_EQ(r.timing[z].end, 100);
  EXPECT_EQ(r.timing[last].end, 105);
}

TEST(Engine, OneFOneBClosedForm) {
  // DESIGN.md §3: fixed costs F=1, B=2 (here in µs), free comm, 4 ranks, 8 microbatches:
  // (m + p - 1)(F + B) = 33.
  const uint32_t p = 4, m = 8;
  const int64_t F = 1000, B = 2000;
  // Sends and receives of each direction on their own streams, so each stream's FIFO order is
  // the microbatch order whatever the creation order.
  ProgramBuilder b(p, {"compute", "fwd_send", "fwd_recv", "bwd_send", "bwd_recv"});
  std::vector<std::vector<uint32_t>> f(p, std::vector<uint32_t>(m)), bw = f, sf = f, sb = f;
  // Per-rank 1F1B order of (is_backward, microbatch).
  std::vector<std::vector<std::pair<bool, uint32_t>>> order(p);
  for (uint32_t s = 0; s < p; ++s) {
    const uint32_t warm = std::min(p - s - 1, m);
    uint32_t nf = 0, nb = 0;
    for (; nf < warm; ++nf) order[s].push_back({false, nf});
    while (nb < m) {
      if (nf < m) order[s].push_back({false, nf++});
      order[s].push_back({true, nb++});
    }
  }
  // Build tasks in a topological order: sweep time-steps until every op is placed.
  std::vector<size_t> pos(p, 0);
  std::vector<std::vector<bool>> fdone(p, std::vector<bool>(m)), bdone = fdone;
  bool progress = true;
  while (progress) {
    progress = false;
    for (uint32_t s = 0; s < p; ++s) {
      while (pos[s] < order[s].size()) {
        auto [bwd, i] = order[s][pos[s]];
        if (!bwd) {
          if (s > 0 && !fdone[s - 1][i]) break;
          std::vector<uint32_t> deps;
          if (s > 0) deps.push_back(sf[s - 1][i]);
          f[s][i] = b.compute(s, 0, F, deps);
          if (s + 1 < p) sf[s][i] = b.comm({{s, 1}, {s + 1, 2}}, 0, 0, 0, {}, {f[s][i]});
          fdone[s][i] = true;
        } else {
          if (s + 1 < p && !bdone[s + 1][i]) break;
          if (!fdone[s][i]) break;
          std::vector<uint32_t> deps{f[s][i]};
          if (s + 1 < p) deps.push_back(sb[s + 1][i]);
          bw[s][i] = b.compute(s, 0, B, deps);
          if (s > 0) sb[s][i] = b.comm({{s, 3}, {s - 1, 4}}, 0, 0, 0, {}, {bw[s][i]});
          bdone[s][i] = true;
        }
        ++pos[s];
        progress = true;
      }
    }
  }
  for (uint32_t s = 0; s < p; ++s) ASSERT_EQ(pos[s], order[s].size());
  const RunResult r = run_ok(b.p);
  ASSERT_FALSE(r.stalled);
  EXPECT_EQ(r.makespan, (m + p - 1) * (F + B));
}

// ---- validation ----

TEST(Validate, AcceptsAWellFormedProgram) {
  ProgramBuilder b(2, {"compute", "pp"});
  const auto l = b.link(1.0);
  const auto a = b.compute(0, 0, 10);
  b.comm({{0, 1}, {1, 1}}, 10, 1, 0, {l}, {a});
  b.barrier({a});
  EXPECT_TRUE(validate(b.p).empty());
}

TEST(Validate, RunCheckedReportsInsteadOfAsserting) {
  ProgramBuilder b(1, {"compute"});
  const auto k = b.compute(0, 0, 10);
  Engine engine;
  RunResult r;
  EXPECT_TRUE(engine.run_checked(b.p, r).empty());
  EXPECT_EQ(r.timing[k].end, 10);
  b.p.deps.push_back(5);  // the last task's dependencies run to the end of `deps`
  const auto errs = engine.run_checked(b.p, r);
  ASSERT_FALSE(errs.empty());
  EXPECT_NE(errs.front().find("task 0 depends on task 5"), std::string::npos) << errs.front();
}

TEST(Validate, ReportsMalformedPrograms) {
  auto has = [](const std::vector<std::string>& errs, const std::string& needle) {
    return std::any_of(errs.begin(), errs.end(),
                       [&](const std::string& e) { return e.find(needle) != std::string::npos; });
  };
  {
    ProgramBuilder b(1, {"compute"});
    b.compute(0, 0, 10);
    b.p.deps.push_back(0);  // task 0, the last one, depends on itself
    EXPECT_TRUE(has(validate(b.p), "not listed before it"));
  }
  {
    ProgramBuilder b(1, {"compute"});
    b.compute(0, 0, 10);
    b.p.participants[0].device = 7;
    EXPECT_TRUE(has(validate(b.p), "unknown device 7"));
  }
  {
    ProgramBuilder b(1, {"compute"});
    b.compute(0, 0, 10);
    b.p.participants[0].stream = 3;
    EXPECT_TRUE(has(validate(b.p), "unknown stream 3"));
  }
  {
    ProgramBuilder b(2, {"compute"});
    b.compute(0, 0, 10);
    b.p.devices[0].dispatch.clear();
    EXPECT_TRUE(has(validate(b.p), "missing from its dispatch list"));
  }
  {
    ProgramBuilder b(2, {"compute"});
    b.compute(0, 0, 10);
    b.p.devices[1].dispatch.push_back(0);
    EXPECT_TRUE(has(validate(b.p), "no participant on it"));
  }
  {
    ProgramBuilder b(1, {"compute"});
    b.compute(0, 0, 10);
    b.p.devices[0].dispatch.push_back(0);
    b.p.devices[0].dispatch.push_back(9);
    const auto errs = validate(b.p);
    EXPECT_TRUE(has(errs, "twice"));
    EXPECT_TRUE(has(errs, "unknown task 9"));
  }
  {
    ProgramBuilder b(1, {"compute"});
    b.comm({{0, 0}}, 10, 0, 0, {3});
    b.link(0.0);
    EXPECT_TRUE(has(validate(b.p), "unknown link 3"));
    EXPECT_TRUE(has(validate(b.p), "capacity must be positive"));
  }
  {
    ProgramBuilder b(1, {"compute"});
    b.compute(0, 0, 10);
    b.p.tasks[0].part_begin = 5;
    EXPECT_TRUE(has(validate(b.p), "participant range out of bounds"));
  }
  {
    ProgramBuilder b(1, {"compute"});
    const auto a = b.compute(0, 0, 10);
    b.compute(0, 0, 10, {a});
    b.p.tasks[0].dep_begin = 1;  // above task 1's: the ranges are one CSR array
    EXPECT_TRUE(has(validate(b.p), "task 0: dependency range out of bounds"));
  }
  {
    // (device, stream) twice in one task: a small task and a large one (separate checks)
    ProgramBuilder b(20, {"s", "t"});
    b.comm({{0, 0}, {1, 0}, {0, 0}}, 0, 1, 0);
    std::vector<Participant> members;
    for (uint32_t d = 0; d < 20; ++d) members.push_back({d, 0});
    members.push_back({7, 1});  // another stream of device 7: allowed
    members.push_back({7, 0});  // the same stream again: not
    b.comm(members, 0, 1, 0);
    const auto errs = validate(b.p);
    EXPECT_TRUE(has(errs, "task 0: device 0 stream 0 listed twice"));
    EXPECT_TRUE(has(errs, "task 1: device 7 stream 0 listed twice"));
    EXPECT_FALSE(has(errs, "stream 1 listed twice"));
  }
  {
    ProgramBuilder b(1, {"compute", "c"});
    b.compute(0, 0, 10);
    b.comm({{0, 1}}, 10, 0, 1.0);
    b.p.tasks[0].comm = 0;  // a compute task cannot borrow a comm spec
    b.p.tasks[1].comm = 7;
    const auto errs = validate(b.p);
    EXPECT_TRUE(has(errs, "task 0: only a comm task has a comm spec"));
    EXPECT_TRUE(has(errs, "task 1: comm spec out of bounds"));
  }
  {
    ProgramBuilder b(1, {"compute"});
    b.p.devices[0].comm_sm_share = 1.5;
    EXPECT_TRUE(has(validate(b.p), "comm_sm_share"));
  }
  {
    // A 20-member collective that one member does not dispatch and another dispatches twice.
    ProgramBuilder b(20, {"s"});
    std::vector<Participant> members;
    for (uint32_t d = 0; d < 20; ++d) members.push_back({d, 0});
    b.comm(members, 0, 1, 0);
    b.p.devices[4].dispatch.clear();
    b.p.devices[5].dispatch.push_back(0);
    const auto errs = validate(b.p);
    EXPECT_TRUE(has(errs, "task 0 runs on device 4 but is missing from its dispatch list"));
    EXPECT_TRUE(has(errs, "device 5: dispatch list names task 0 twice"));
  }
  {
    ProgramBuilder b(1, {"s"});
    b.compute(0, 0, 10);
    b.compute(0, 0, 10);
    b.p.tasks[1].part_begin = 0;  // both tasks claim participant entry 0
    EXPECT_TRUE(has(validate(b.p), "shared with task 0"));
  }
}

// ---- determinism, re-use, threads ----

// A random but deadlock-free program: per device a few streams of compute kernels and
// transfers to random peers, with transfers over shared links. Transfers are single-participant
// (sender-side) so that random peers cannot deadlock; deps point backwards to random tasks.
Program random_program(uint32_t seed, uint32_t devices, uint32_t tasks_per_device) {
  std::mt19937 rng(seed);
  ProgramBuilder b(devices, {"compute", "aux", "comm0", "comm1"});
  for (uint32_t d = 0; d < devices; ++d) {
    b.p.devices[d].dispatch_ns = rng() % 3 == 0 ? 7 : 0;
    b.p.devices[d].comm_sm_share = (rng() % 4) / 8.0;
    b.p.devices[d].comm_hbm_share = (rng() % 4) / 6.0;
  }
  std::vector<uint32_t> tx, rx;
  for (uint32_t d = 0; d < devices; ++d) tx.push_back(b.link(1.0 + rng() % 4));
  for (uint32_t d = 0; d < devices; ++d) rx.push_back(b.link(0.5 + rng() % 3));
  const uint32_t spine = b.link(3.0);
  const uint32_t n = devices * tasks_per_device;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t d = rng() % devices;
    std::vector<uint32_t> deps;
    const uint32_t id = static_cast<uint32_t>(b.p.tasks.size());
    if (id > 0 && rng() % 2) deps.push_back(rng() % id);
    switch (rng() % 5) {
      case 0:
      case 1:
        b.compute(d, rng() % 2, 1 + rng() % 5000, deps, rng() % 3 == 0);
        break;
      case 2:
      case 3: {
        const uint32_t peer = rng() % devices;
        std::vector<uint32_t> links{tx[d], rx[peer]};
        if (rng() % 2) links.push_back(spine);
        b.comm({{d, static_cast<uint16_t>(2 + rng() % 2)}}, rng() % 20000, rng() % 300,
               rng() % 2 ? 0.0 : 0.3 + (rng() % 10) / 10.0, links, deps);
        break;
      }
      default:
        if (rng() % 2) {
          b.barrier(deps);
        } else {
          const uint32_t peer = (d + 1) % devices;
          // a rendezvous pair on the aux streams of d and d+1, in creation order on both
          b.comm({{d, 1}, {peer, 1}}, rng() % 5000, rng() % 100, 1.0, {}, deps);
        }
        break;
    }
  }
  return b.p;
}

bool same(const RunResult& a, const RunResult& b) {
  if (a.timing.size() != b.timing.size() || a.makespan != b.makespan || a.stalled != b.stalled ||
      a.stats.events != b.stats.events || a.stall.blocked_tasks != b.stall.blocked_tasks) {
    return false;
  }
  for (size_t i = 0; i < a.timing.size(); ++i) {
    if (a.timing[i].start != b.timing[i].start || a.timing[i].end != b.timing[i].end) {
      return false;
    }
  }
  return true;
}

TEST(Engine, ReportsProgressByFinishedTasks) {
  const Program p = random_program(7, 16, 200);
  ASSERT_TRUE(validate(p).empty());
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  RunOptions opt;
  opt.progress = [&](uint64_t finished, uint64_t total) { calls.emplace_back(finished, total); };
  opt.progress_every = 64;
  Engine engine;
  const RunResult r = engine.run(p, opt);
  ASSERT_FALSE(r.stalled);
  ASSERT_GE(calls.size(), 3u);
  // every 64 events, at the end of an instant (one instant may hold several of those)
  EXPECT_GE(calls.size(), r.stats.events / 64 / 4);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, p.tasks.size());
    if (i > 0) {
      EXPECT_GE(calls[i].first, calls[i - 1].first);
    }
  }
  EXPECT_LT(calls.front().first, p.tasks.size());
  EXPECT_EQ(calls.back().first, p.tasks.size());
  // The same run without a callback gives the same result.
  const RunResult quiet = Engine().run(p);
  EXPECT_EQ(quiet.makespan, r.makespan);
  EXPECT_EQ(quiet.stats.events, r.stats.events);
}

TEST(Engine, DeterministicAcrossRunsEnginesAndThreads) {
  const Program p = random_program(7, 16, 200);
  ASSERT_TRUE(validate(p).empty());
  Engine e1;
  const RunResult r1 = e1.run(p);
  ASSERT_FALSE(r1.stalled);
  EXPECT_GT(r1.stats.events, p.tasks.size() / 2);
  const RunResult r2 = e1.run(p);  // same engine, reused buffers
  EXPECT_TRUE(same(r1, r2));
  Engine e2;
  EXPECT_TRUE(same(r1, e2.run(p)));
  // Reuse after a different program, and parallel engines.
  e1.run(random_program(8, 5, 50));
  EXPECT_TRUE(same(r1, e1.run(p)));
  RunResult t1, t2;
  std::thread a([&] { t1 = Engine().run(p); });
  std::thread c([&] { t2 = Engine().run(p); });
  a.join();
  c.join();
  EXPECT_TRUE(same(r1, t1));
  EXPECT_TRUE(same(r1, t2));
}

// Semantic invariants on many random programs: deps, FIFO, dispatch, durations >= alone.
TEST(Engine, RandomProgramsRespectTheContract) {
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const Program p = random_program(100 + seed, 2 + seed % 7, 60);
    ASSERT_TRUE(validate(p).empty());
    const RunResult r = Engine().run(p);
    ASSERT_FALSE(r.stalled) << seed;
    SimTime mk = 0;
    for (size_t t = 0; t < p.tasks.size(); ++t) {
      const Task& k = p.tasks[t];
      const TaskTiming& tm = r.timing[t];
      ASSERT_GE(tm.start, 0);
      ASSERT_GE(tm.end, tm.start);
      mk = std::max(mk, tm.end);
      for (uint32_t d : p.deps_of(static_cast<uint32_t>(t))) EXPECT_GE(tm.start, r.timing[d].end);
      if (k.kind == TaskKind::kCompute) {
        EXPECT_GE(tm.end - tm.start, k.work);
      }
      if (k.kind != TaskKind::kBarrier) {
        EXPECT_GE(slowdown(p, static_cast<uint32_t>(t), tm), 1.0f - 1e-6f) << seed << " " << t;
      }
    }
    EXPECT_EQ(r.makespan, mk);
    for (size_t d = 0; d < p.devices.size(); ++d) {
      const auto& disp = p.devices[d].dispatch;
      std::vector<SimTime> last_end(p.stream_names.size(), 0);
      for (size_t k = 0; k < disp.size(); ++k) {
        const Task& task = p.tasks[disp[k]];
        const TaskTiming& tm = r.timing[disp[k]];
        EXPECT_GE(tm.start, static_cast<SimTime>(k + 1) * p.devices[d].dispatch_ns);
        for (uint32_t i = 0; i < task.part_count; ++i) {
          const Participant& pa = p.participants[task.part_begin + i];
          if (pa.device != d) continue;
          EXPECT_GE(tm.start, last_end[pa.stream]) << "FIFO, seed " << seed;
          last_end[pa.stream] = tm.end;
        }
      }
    }
  }
}

// Occupancy (busy, comm, exposed comm) accumulated by the engine equals the union of the
// task intervals computed from the timings, on many random programs.
TEST(Engine, OccupancyEqualsTheUnionOfTaskIntervals) {
  using Spans = std::vector<std::pair<SimTime, SimTime>>;
  auto merge = [](Spans v) {
    std::sort(v.begin(), v.end());
    Spans out;
    for (const auto& x : v) {
      if (!out.empty() && x.first <= out.back().second) {
        out.back().second = std::max(out.back().second, x.second);
      } else {
        out.push_back(x);
      }
    }
    return out;
  };
  auto length = [](const Spans& v) {
    SimTime total = 0;
    for (auto [a, b] : v) total += b - a;
    return total;
  };
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const Program p = random_program(300 + seed, 2 + seed % 5, 80);
    const RunResult r = Engine().run(p);
    ASSERT_FALSE(r.stalled);
    ASSERT_EQ(r.occupancy.size(), p.devices.size());
    for (uint32_t d = 0; d < p.devices.size(); ++d) {
      Spans comp, comm;
      for (uint32_t t : p.devices[d].dispatch) {
        const TaskTiming& tm = r.timing[t];
        if (tm.end <= tm.start) continue;
        (p.tasks[t].kind == TaskKind::kCompute ? comp : comm).push_back({tm.start, tm.end});
      }
      comp = merge(comp);
      comm = merge(comm);
      // comm \ comp, by sweeping the boundaries
      SimTime exposed = 0;
      for (auto [a, b] : comm) {
        SimTime cur = a;
        for (auto [c, e] : comp) {
          if (e <= cur || c >= b) continue;
          if (c > cur) exposed += c - cur;
          cur = std::max(cur, e);
        }
        if (cur < b) exposed += b - cur;
      }
      EXPECT_EQ(r.occupancy[d].busy, length(comp)) << seed << " " << d;
      EXPECT_EQ(r.occupancy[d].comm, length(comm)) << seed << " " << d;
      EXPECT_EQ(r.occupancy[d].exposed_comm, exposed) << seed << " " << d;
    }
  }
}

// The program's counter effects, listed by node (= task id for ProgramBuilder's tasks).
void set_effects(Program& p, const std::vector<std::vector<CounterEffect>>& by_node) {
  p.effect_begin.assign(1, 0);
  p.effects.clear();
  for (const auto& v : by_node) {
    p.effects.insert(p.effects.end(), v.begin(), v.end());
    p.effect_begin.push_back(static_cast<uint32_t>(p.effects.size()));
  }
}

// Counters: effects at start and end, once per device for a task on two streams of one device,
// the end state of an instant only (a buffer freed as the next is taken is no new peak), the
// peak's time and breakdown, and curves off.
TEST(Engine, CountersFollowTaskStartsAndEnds) {
  ProgramBuilder b(2, {"compute", "s1", "s2"});
  const uint32_t a = b.compute(0, 0, 10);                         // 0-10 on device 0
  const uint32_t c = b.compute(0, 0, 10);                         // 10-20 (FIFO)
  const uint32_t x = b.comm({{0, 1}, {1, 1}}, 0, 5, 0);           // rendezvous, 0-5 on both devices
  const uint32_t y = b.comm({{1, 1}, {1, 2}}, 0, 4, 0, {}, {x});  // two streams of device 1: 5-9
  b.p.num_counters = 2;
  // effects by node (= task id here)
  std::vector<std::vector<CounterEffect>> by_task(b.p.tasks.size());
  by_task[a] = {{0, false, 100}, {0, true, -100}};  // 100 while a runs
  by_task[c] = {{0, false, 100}, {1, true, 7}};     // 100 taken as a's is freed (t = 10)
  by_task[x] = {{1, false, 3}, {1, true, -3}};      // on both devices
  by_task[y] = {{0, false, 50}};                    // once on device 1, from t = 5
  set_effects(b.p, by_task);
  ASSERT_TRUE(validate(b.p).empty());
  const RunResult r = Engine().run(b.p);
  ASSERT_FALSE(r.stalled);
  ASSERT_EQ(r.counters.size(), 2u);
  const DeviceCounters& d0 = r.counters[0];
  const std::vector<std::pair<SimTime, int64_t>> want0 = {{0, 103}, {5, 100}, {10, 100}, {20, 107}};
  ASSERT_EQ(d0.curve.size(), want0.size());
  for (size_t i = 0; i < want0.size(); ++i) {
    EXPECT_EQ(d0.curve[i].t, want0[i].first) << i;
    EXPECT_EQ(d0.curve[i].total, want0[i].second) << i;
  }
  EXPECT_EQ(d0.peak, 107);  // never 200 at t = 10: a's 100 is freed as c's is taken
  EXPECT_EQ(d0.peak_time, 20);
  EXPECT_EQ(d0.at_peak[0], 100);
  EXPECT_EQ(d0.at_peak[1], 7);
  const DeviceCounters& d1 = r.counters[1];
  const std::vector<std::pair<SimTime, int64_t>> want1 = {{0, 3}, {5, 50}};
  ASSERT_EQ(d1.curve.size(), want1.size());
  for (size_t i = 0; i < want1.size(); ++i) {
    EXPECT_EQ(d1.curve[i].t, want1[i].first) << i;
    EXPECT_EQ(d1.curve[i].total, want1[i].second) << i;
  }
  EXPECT_EQ(d1.peak, 50);  // y's +50 counted once although it holds two streams
  EXPECT_EQ(d1.peak_time, 5);
  // Without curves: the same peaks, and only the initial sample.
  RunOptions no_curves;
  no_curves.counter_curves = false;
  const RunResult q = Engine().run(b.p, no_curves);
  ASSERT_EQ(q.counters.size(), 2u);
  EXPECT_EQ(q.counters[0].curve.size(), 1u);
  EXPECT_EQ(q.counters[0].peak, 107);
  EXPECT_EQ(q.counters[1].peak, 50);
  EXPECT_EQ(q.counters[1].peak_time, 5);
  // Without counters: none reported.
  b.p.num_counters = 0;
  b.p.effect_begin.clear();
  b.p.effects.clear();
  EXPECT_TRUE(Engine().run(b.p).counters.empty());
}

// Effects at one end of a task only: the other end applies nothing and samples nothing, for
// a compute task whose node lists its end effect first, a collective of more than 16
// participants (sorted by device: its record's flag bits beside the effect bits) and one
// of 19.
TEST(Engine, CountersAtOneEndOnlyLeaveTheOtherEndUnsampled) {
  constexpr uint32_t kDevices = 20;
  ProgramBuilder b(kDevices, {"s"});
  std::vector<Participant> all, rest;
  for (uint32_t d = 0; d < kDevices; ++d) all.push_back({d, 0});
  for (uint32_t d = 1; d < kDevices; ++d) rest.push_back({d, 0});
  const uint32_t g = b.comm(all, 0, 5, 0);              // 0-5 on every device
  const uint32_t a = b.compute(0, 0, 10, {g});          // 5-15 on device 0
  const uint32_t h = b.comm(rest, 0, 3, 0, {}, {g});    // 5-8 on devices 1..19
  b.p.num_counters = 2;
  std::vector<std::vector<CounterEffect>> by_task(b.p.tasks.size());
  by_task[g] = {{0, false, 10}};                   // start only
  by_task[a] = {{0, true, -10}, {1, false, 4}};    // the end's effect listed first
  by_task[h] = {{1, true, 2}};                     // end only
  set_effects(b.p, by_task);
  ASSERT_TRUE(validate(b.p).empty());
  const RunResult r = Engine().run(b.p);
  ASSERT_FALSE(r.stalled);
  ASSERT_EQ(r.counters.size(), kDevices);
  using Curve = std::vector<std::pair<SimTime, int64_t>>;
  auto curve_of = [](const DeviceCounters& c) {
    Curve v;
    for (const auto& s : c.curve) v.emplace_back(s.t, s.total);
    return v;
  };
  EXPECT_EQ(curve_of(r.counters[0]), (Curve{{0, 10}, {5, 14}, {15, 4}}));
  EXPECT_EQ(r.counters[0].peak, 14);
  EXPECT_EQ(r.counters[0].at_peak[0], 10);
  EXPECT_EQ(r.counters[0].at_peak[1], 4);
  for (uint32_t d = 1; d < kDevices; ++d) {
    EXPECT_EQ(curve_of(r.counters[d]), (Curve{{0, 10}, {8, 12}})) << d;
    EXPECT_EQ(r.counters[d].peak_time, 8) << d;
  }
  // rerun_checked on the prepared structure, other deltas: a fresh run's counters
  Engine kept;
  RunResult first;
  ASSERT_TRUE(kept.run_checked(b.p, first).empty());
  Program q = b.p;
  for (CounterEffect& e : q.effects) e.delta *= 3;
  RunResult again, fresh;
  ASSERT_TRUE(kept.rerun_checked(q, again).empty());
  ASSERT_TRUE(Engine().run_checked(q, fresh).empty());
  for (uint32_t d = 0; d < kDevices; ++d) {
    EXPECT_EQ(curve_of(again.counters[d]), curve_of(fresh.counters[d])) << d;
  }
  EXPECT_EQ(curve_of(again.counters[0]), (Curve{{0, 30}, {5, 42}, {15, 12}}));
}

TEST(Validate, ReportsMalformedCounters) {
  ProgramBuilder b(1, {"compute"});
  b.compute(0, 0, 10);
  b.p.num_counters = 1;
  b.p.effects = {{1, false, 5}};
  b.p.effect_begin = {0, 1};
  auto has = [](const std::vector<std::string>& errs, const std::string& what) {
    for (const auto& e : errs)
      if (e.find(what) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has(validate(b.p), "counter out of range"));
  b.p.effects = {{0, false, 5}};
  b.p.effect_begin = {0, 2};
  EXPECT_TRUE(has(validate(b.p), "effect_begin must rise"));
  b.p.effect_begin = {0, 1};
  b.p.num_counters = kMaxCounters + 1;
  EXPECT_TRUE(has(validate(b.p), "num_counters above"));
  b.p.num_counters = 1;
  EXPECT_TRUE(validate(b.p).empty());
}

// ---- rerun_checked: a program whose values alone changed, on the prepared structure ----

// random_program with counters (an allocation at the start of some tasks, freed at their end or
// never) and with some devices time-sharing host cores.
Program with_counters_and_hosts(Program p, uint32_t seed) {
  std::mt19937 rng(seed);
  p.num_counters = 2;
  p.effect_begin.assign(1, 0);
  for (size_t t = 0; t < p.tasks.size(); ++t) {
    if (rng() % 2) {
      const auto c = static_cast<uint8_t>(rng() % 2);
      const int64_t bytes = 1 + rng() % 1000;
      p.effects.push_back({c, false, bytes});
      if (rng() % 3) p.effects.push_back({c, true, -bytes});
    }
    p.effect_begin.push_back(static_cast<uint32_t>(p.effects.size()));
  }
  p.host_cores = {1.0, 2.0};
  for (size_t d = 0; d < p.devices.size(); ++d)
    p.devices[d].host = d % 3 == 2 ? kNoHost : static_cast<uint32_t>(d % 2);
  return p;
}

// The same structure with every value rerun_checked lets change drawn again.
Program revalued(Program p, uint32_t seed) {
  std::mt19937 rng(seed);
  for (Task& t : p.tasks) {
    if (t.kind == TaskKind::kCompute) {
      t.work = 1 + rng() % 5000;
      t.mem_bound = rng() % 3 == 0;
    } else if (t.kind == TaskKind::kComm) {
      t.work = rng() % 20000;
      t.overlapped = rng() % 4 == 0;
    }
  }
  for (CommSpec& c : p.comms) {
    c.latency_ns = rng() % 300;
    c.rate_cap = rng() % 2 ? 0.0 : 0.3 + (rng() % 10) / 10.0;
  }
  for (Link& l : p.links) l.capacity = 0.5 + rng() % 4;
  for (DeviceProgram& d : p.devices) {
    d.dispatch_ns = rng() % 3 == 0 ? 0 : 1 + rng() % 9;
    d.comm_sm_share = (rng() % 4) / 8.0;
    d.comm_hbm_share = (rng() % 4) / 6.0;
  }
  for (double& c : p.host_cores) c = 0.5 + rng() % 3;
  p.host_share_efficiency = 0.5 + (rng() % 6) / 10.0;
  for (CounterEffect& e : p.effects) e.delta = (e.at_end ? -1 : 1) * static_cast<int64_t>(1 + rng() % 1000);
  return p;
}

// Everything a RunResult holds but the wall time.
void expect_same_run(const RunResult& a, const RunResult& b) {
  EXPECT_TRUE(same(a, b));
  ASSERT_EQ(a.occupancy.size(), b.occupancy.size());
  for (size_t d = 0; d < a.occupancy.size(); ++d) {
    EXPECT_EQ(a.occupancy[d].busy, b.occupancy[d].busy) << "device " << d;
    EXPECT_EQ(a.occupancy[d].comm, b.occupancy[d].comm) << "device " << d;
    EXPECT_EQ(a.occupancy[d].exposed_comm, b.occupancy[d].exposed_comm) << "device " << d;
  }
  ASSERT_EQ(a.counters.size(), b.counters.size());
  for (size_t d = 0; d < a.counters.size(); ++d) {
    const DeviceCounters &x = a.counters[d], &y = b.counters[d];
    EXPECT_EQ(x.peak, y.peak) << "device " << d;
    EXPECT_EQ(x.peak_time, y.peak_time) << "device " << d;
    EXPECT_EQ(x.at_peak, y.at_peak) << "device " << d;
    ASSERT_EQ(x.curve.size(), y.curve.size()) << "device " << d;
    for (size_t i = 0; i < x.curve.size(); ++i) {
      EXPECT_EQ(x.curve[i].t, y.curve[i].t);
      EXPECT_EQ(x.curve[i].total, y.curve[i].total);
    }
  }
}

TEST(Engine, RerunOfAProgramWithOtherValuesEqualsAFreshRun) {
  for (uint32_t seed = 0; seed < 12; ++seed) {
    SCOPED_TRACE(seed);
    const Program p = with_counters_and_hosts(random_program(500 + seed, 2 + seed % 6, 80), seed);
    ASSERT_TRUE(validate(p).empty());
    Engine kept;
    RunResult out;
    ASSERT_TRUE(kept.run_checked(p, out).empty());
    ASSERT_TRUE(kept.prepared());
    const SimTime first = out.makespan;
    bool moved = false;
    for (uint32_t edit = 0; edit < 4; ++edit) {
      const Program q = revalued(p, 1000 * seed + edit);
      ASSERT_TRUE(validate(q).empty());
      const RunResult fresh = Engine().run(q);
      ASSERT_FALSE(fresh.stalled);
      ASSERT_TRUE(kept.rerun_checked(q, out).empty());  // into the reused result
      expect_same_run(fresh, out);
      moved |= fresh.makespan != first;
    }
    EXPECT_TRUE(moved) << "edits that change nothing test nothing";
  }
}

TEST(Engine, RerunFlipsOverlappedAndKeepsAWideCollectivesOrder) {
  // wide_collective_beside_a_kernel re-run with the collective overlapped and not: 600 and
  // 800 ns, sorted participants or not.
  for (bool sorted : {true, false}) {
    Program p = wide_collective_beside_a_kernel(sorted);
    const uint32_t k = 0, c = 1;
    Engine engine;
    RunResult out;
    ASSERT_TRUE(engine.run_checked(p, out).empty());
    EXPECT_EQ(out.timing[k].end, 800);
    for (bool overlapped : {true, false, true}) {
      p.tasks[c].overlapped = overlapped;
      ASSERT_TRUE(engine.rerun_checked(p, out).empty());
      EXPECT_EQ(out.timing[k].end, overlapped ? 600 : 800) << (sorted ? "sorted" : "unsorted");
    }
  }
}

TEST(Engine, RerunAfterAStallAndAfterBadValues) {
  // A deadlocked program re-run gives the same stall (the start conditions are counted again).
  ProgramBuilder b(2, {"pp"});
  const auto a = b.comm({{0, 0}, {1, 0}}, 100, 10, 1.0);
  const auto bb = b.comm({{1, 0}, {0, 0}}, 100, 10, 1.0);
  b.p.devices[1].dispatch = {bb, a};
  Engine engine;
  RunResult out;
  ASSERT_TRUE(engine.run_checked(b.p, out).empty());
  const RunResult stalled = out;
  ASSERT_TRUE(stalled.stalled);
  ASSERT_TRUE(engine.rerun_checked(b.p, out).empty());
  expect_same_run(stalled, out);
  // Bad values are reported as validate() reports them; the structure stays prepared.
  Program bad = random_program(9, 4, 40);
  ASSERT_TRUE(engine.run_checked(bad, out).empty());
  const RunResult good = out;
  bad.tasks[3].work = -1;
  bad.devices[1].comm_sm_share = 2;
  ASSERT_FALSE(bad.comms.empty());
  bad.comms[0].latency_ns = -5;
  const auto errors = engine.rerun_checked(bad, out);
  EXPECT_EQ(errors, validate(bad));
  EXPECT_EQ(errors.size(), 3u);
  EXPECT_TRUE(engine.prepared());
  bad.tasks[3].work = random_program(9, 4, 40).tasks[3].work;
  bad.devices[1].comm_sm_share = random_program(9, 4, 40).devices[1].comm_sm_share;
  bad.comms[0].latency_ns = random_program(9, 4, 40).comms[0].latency_ns;
  ASSERT_TRUE(engine.rerun_checked(bad, out).empty());
  expect_same_run(good, out);
  // A copied engine holds no preparation.
  EXPECT_FALSE(Engine(engine).prepared());
}

TEST(Engine, EmptyProgram) {
  Program p;
  const RunResult r = Engine().run(p);
  EXPECT_FALSE(r.stalled);
  EXPECT_EQ(r.makespan, 0);
  EXPECT_EQ(r.stats.events, 0u);
}

}  // namespace
}  // namespace stretto::engine
