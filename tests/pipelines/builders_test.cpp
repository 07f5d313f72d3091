// Pipeline schedule builders: hand-derived per-rank orders, structural properties over many
// (p, v, m), closed-form makespans with a tiny dependency-driven evaluator, validation errors,
// directive conversion. The expected orders below were derived by hand from the rules of
// reference/schedules-spec.md §2 (derivations in the comments), not by running the builders.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "stretto/compiler/compiler.h"
#include "stretto/pipelines/builders.h"
#include "stretto/plan/json_source.h"
#include "stretto/plan/plan.h"

namespace stretto::pipelines {

using plan::Directive;
using plan::DirectiveOp;
using plan::Filter;
using plan::Pass;
using plan::TagCond;
using plan::TagKey;

namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

// Parses "F0 F1 B0", "0F1 2I3", "(0F7;7B3)" and "." (idle). Tokens without a stage number use
// `stage` (single-stage families).
std::vector<Slot> slots(const std::string& text, int stage = -1) {
  auto action = [&](const std::string& tok) {
    size_t i = 0;
    int st = stage;
    if (std::isdigit(static_cast<unsigned char>(tok[0]))) {
      st = 0;
      while (std::isdigit(static_cast<unsigned char>(tok[i]))) st = st * 10 + (tok[i++] - '0');
    }
    EXPECT_GE(st, 0) << "token " << tok << " needs a stage";
    const char k = tok[i++];
    ActionKind kind = k == 'F'   ? ActionKind::kF
                      : k == 'B' ? ActionKind::kB
                      : k == 'I' ? ActionKind::kI
                                 : ActionKind::kW;
    EXPECT_TRUE(k == 'F' || k == 'B' || k == 'I' || k == 'W') << tok;
    return Action{kind, st, std::stoi(tok.substr(i))};
  };
  std::vector<Slot> out;
  std::istringstream in(text);
  std::string tok;
  while (in >> tok) {
    if (tok == ".") {
      out.push_back(Slot::idle());
    } else if (tok[0] == '(') {
      const size_t semi = tok.find(';');
      out.push_back(Slot::overlap(action(tok.substr(1, semi - 1)),
                                  action(tok.substr(semi + 1, tok.size() - semi - 2))));
    } else {
      out.push_back(Slot::single(action(tok)));
    }
  }
  return out;
}

std::string render(const std::vector<Slot>& row) {
  std::string s;
  for (const Slot& sl : row) s += (s.empty() ? "" : " ") + (sl.is_idle() ? "." : sl.str());
  return s;
}

PipelineSchedule build(const std::string& fam, int p, int v, int m, bool pad = false) {
  BuildOptions opt;
  opt.torch_padding = pad;
  auto s = build_schedule(fam, p, v, m, opt);
  EXPECT_TRUE(s.has_value()) << fam << " p=" << p << " v=" << v << " m=" << m << ": "
                             << (s ? "" : render_all(s.error()));
  return s ? *s : PipelineSchedule{};
}

void expect_rows(const PipelineSchedule& s, const std::vector<std::vector<Slot>>& rows) {
  ASSERT_EQ(s.per_rank.size(), rows.size());
  for (size_t r = 0; r < rows.size(); ++r)
    EXPECT_EQ(render(s.per_rank[r]), render(rows[r])) << "rank " << r;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Rows of a torch CSV written with the test's own tiny reader (the library's parser is tested in
// torch_csv_test.cpp): cells become tokens, "(a;b)OVERLAP_F_B" -> "(a;b)", "" -> ".".
std::vector<std::vector<Slot>> csv_rows(const std::string& path) {
  std::vector<std::vector<Slot>> rows;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    std::string toks;
    std::string cell;
    std::istringstream ls(line);
    while (std::getline(ls, cell, ',')) {
      if (cell.empty()) cell = ".";
      const size_t ov = cell.find("OVERLAP_F_B");
      if (ov != std::string::npos) cell = cell.substr(0, ov);
      toks += cell + " ";
    }
    if (!line.empty() && line.back() == ',') toks += ". ";
    rows.push_back(slots(toks));
  }
  return rows;
}

// Microbatches held by a rank at its peak: forwards done whose backward has not finished (a
// full B or the W of a split backward frees it). Counted in stage-chunk units.
int max_in_flight(const std::vector<Slot>& row) {
  int cur = 0, peak = 0;
  for (const Slot& sl : row)
    for (const Action& a : sl.actions()) {
      if (a.kind == ActionKind::kF) ++cur;
      if (a.kind == ActionKind::kB || a.kind == ActionKind::kW) --cur;
      peak = std::max(peak, cur);
    }
  return peak;
}

// A unit-time, dependency-driven list scheduler: each rank runs its slots in order; an action
// starts when its rank is free and its inputs are done (F after the F of the previous stage,
// I/B after its own F and the I/B of the next stage, W after its I). An overlapped pair takes
// F+B and starts when both halves are ready. Returns makespan, or -1 on deadlock.
struct Costs {
  int64_t f = 1, b = 2, i = 1, w = 1;
};
struct Timing {
  int64_t makespan = -1;
  std::vector<int64_t> first, last, busy;
};
Timing evaluate(const PipelineSchedule& s, Costs c = {}) {
  const int p = s.ranks, S = s.stages, m = s.microbatches;
  std::vector<int64_t> done(static_cast<size_t>(4 * S * m), -1);
  auto at = [&](ActionKind k, int st, int mb) -> int64_t& {
    return done[(static_cast<size_t>(k) * S + st) * m + mb];
  };
  auto ready = [&](const Action& a) -> int64_t {
    switch (a.kind) {
      case ActionKind::kF:
        return a.stage == 0 ? 0 : at(ActionKind::kF, a.stage - 1, a.mb);
      case ActionKind::kB:
      case ActionKind::kI: {
        const int64_t f = at(ActionKind::kF, a.stage, a.mb);
        if (f < 0 || a.stage == S - 1) return f;
        int64_t nb =
            std::max(at(ActionKind::kB, a.stage + 1, a.mb), at(ActionKind::kI, a.stage + 1, a.mb));
        return nb < 0 ? -1 : std::max(f, nb);
      }
      case ActionKind::kW:
        return at(ActionKind::kI, a.stage, a.mb);
    }
    return -1;
  };
  auto cost = [&](ActionKind k) {
    return k == ActionKind::kF ? c.f : k == ActionKind::kB ? c.b : k == ActionKind::kI ? c.i : c.w;
  };
  Timing t;
  t.first.assign(static_cast<size_t>(p), -1);
  t.last.assign(static_cast<size_t>(p), 0);
  t.busy.assign(static_cast<size_t>(p), 0);
  std::vector<size_t> pos(static_cast<size_t>(p), 0);
  size_t left = 0;
  for (const auto& row : s.per_rank) left += row.size();
  while (left > 0) {
    bool progress = false;
    for (int r = 0; r < p; ++r) {
      auto& row = s.per_rank[static_cast<size_t>(r)];
      while (pos[static_cast<size_t>(r)] < row.size()) {
        const Slot& sl = row[pos[static_cast<size_t>(r)]];
        int64_t start = t.last[static_cast<size_t>(r)], dur = 0;
        bool ok = true;
        for (const Action& a : sl.actions()) {
          const int64_t rd = ready(a);
          if (rd < 0) ok = false;
          start = std::max(start, rd);
          dur += cost(a.kind);
        }
        if (!ok) break;
        for (const Action& a : sl.actions()) at(a.kind, a.stage, a.mb) = start + dur;
        if (!sl.is_idle() && t.first[static_cast<size_t>(r)] < 0)
          t.first[static_cast<size_t>(r)] = start;
        t.last[static_cast<size_t>(r)] = start + dur;
        t.busy[static_cast<size_t>(r)] += dur;
        ++pos[static_cast<size_t>(r)];
        --left;
        progress = true;
      }
    }
    if (!progress) return t;
  }
  t.makespan = *std::max_element(t.last.begin(), t.last.end());
  return t;
}

// ---------------------------------------------------------------------------------------------
// Names and maps

TEST(BuilderFamilies, CanonicalNamesAndAliases) {
  EXPECT_EQ(canonical_family("1F1B"), "1f1b");
  EXPECT_EQ(canonical_family("Schedule1F1B"), "1f1b");
  EXPECT_EQ(canonical_family("ScheduleGPipe"), "gpipe");
  EXPECT_EQ(canonical_family("ScheduleInterleaved1F1B"), "interleaved-1f1b");
  EXPECT_EQ(canonical_family("interleaved_1f1b"), "interleaved-1f1b");
  EXPECT_EQ(canonical_family("ScheduleLoopedBFS"), "looped-bfs");
  EXPECT_EQ(canonical_family("ScheduleInterleavedZeroBubble"), "zb-h1");
  EXPECT_EQ(canonical_family("ZB1P"), "zb-h1");
  EXPECT_EQ(canonical_family("ZB-H2"), "zb-h2");
  EXPECT_EQ(canonical_family("ScheduleZBVZeroBubble"), "zb-v");
  EXPECT_EQ(canonical_family("ScheduleDualPipeV"), "dualpipev");
  EXPECT_EQ(canonical_family("DualPipe"), "dualpipe");
  EXPECT_EQ(canonical_family("pipedream"), std::nullopt);
  EXPECT_EQ(schedule_family_names().size(), 9u);
  for (const std::string& n : schedule_family_names()) EXPECT_EQ(canonical_family(n), n);
}

TEST(BuilderFamilies, UnknownNameHasHint) {
  auto s = build_schedule("dualpip", 2, 0, 4);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error()[0].message.find("unknown pipeline schedule 'dualpip'"), std::string::npos);
  EXPECT_NE(s.error()[0].hint.find("dualpipe"), std::string::npos);
}

TEST(BuilderStageMaps, LoopAndVFromSpec) {
  EXPECT_EQ(stage_to_rank_map(StageMapStyle::kLoop, 2, 4), (std::vector<int>{0, 1, 0, 1}));
  // Spec §1.3: (p=2, S=4) -> 0:0 1:1 2:1 3:0; (p=4, S=8) -> ranks hold {0,7},{1,6},{2,5},{3,4}.
  EXPECT_EQ(stage_to_rank_map(StageMapStyle::kV, 2, 4), (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(stage_to_rank_map(StageMapStyle::kV, 4, 8), (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(stage_to_rank_map(StageMapStyle::kV, 2, 6), (std::vector<int>{0, 1, 1, 0, 0, 1}));
}

// ---------------------------------------------------------------------------------------------
// Hand-derived orders

// 1F1B, p=4, m=8 (spec §2.2): rank r warms up with 3-r forwards, then alternates "next F,
// oldest B" until F7 is issued, then drains the remaining backwards.
TEST(BuilderHandDerived, OneFOneB_p4_m8) {
  auto s = build("1f1b", 4, 1, 8);
  expect_rows(s, {slots("F0 F1 F2  F3 B0 F4 B1 F5 B2 F6 B3 F7 B4  B5 B6 B7", 0),
                  slots("F0 F1  F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5  B6 B7", 1),
                  slots("F0  F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6  B7", 2),
                  slots("F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7", 3)});
  EXPECT_EQ(s.stage_to_rank, (std::vector<int>{0, 1, 2, 3}));
}

// torch's Schedule1F1B grid: r idle slots first, 2(p-1-r) after the warm-up, one before each
// cool-down B. p=2, m=3: rank 0 warm-up F0; rank 1 none.
TEST(BuilderHandDerived, OneFOneB_TorchPadding) {
  auto s = build("1f1b", 2, 1, 3, true);
  expect_rows(s, {slots("F0 . . F1 B0 F2 B1 . B2", 0), slots(". F0 B0 F1 B1 F2 B2", 1)});
}

// GPipe (torch ScheduleGPipe, spec §2.1): all forwards then all backwards, ascending.
TEST(BuilderHandDerived, GPipe_p3_m4) {
  auto s = build("gpipe", 3, 1, 4);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(render(s.per_rank[static_cast<size_t>(r)]),
              render(slots("F0 F1 F2 F3 B0 B1 B2 B3", r)));
  // torch's grid: r idle first, 3(p-1-r) idle before the backwards.
  auto padded = build("gpipe", 3, 1, 2, true);
  expect_rows(padded, {slots("F0 F1 . . . . . . B0 B1", 0), slots(". F0 F1 . . . B0 B1", 1),
                       slots(". . F0 F1 B0 B1", 2)});
}

// Interleaved 1F1B, p=2, v=2, m=4 (spec §2.3): rounds = max(1, 4/2) = 2, mpr = 2; loop map:
// rank 0 holds stages {0, 2}, rank 1 holds {1, 3}.
// rank 0: warm-up = min((2-1)*2 + 2*(2-1-0), 8) = 4. F stage of op k = ((k/2)%2)*2:
//   k0..3 -> 0,0,2,2; k4..7 -> 0,0,2,2. B stage of op k = (1 - ((k-4)/2)%2)*2:
//   k4,5 -> 2; k6,7 -> 0; k8,9 -> 2; k10,11 -> 0.
//   warm-up 0F0 0F1 2F0 2F1; steady k4: 0F2 2B0, k5: 0F3 2B1, k6: 2F2 0B0, k7: 2F3 0B1;
//   cool-down k8: 2B2, k9: 2B3, k10: 0B2, k11: 0B3.
// rank 1: warm-up = min(2 + 0, 8) = 2. F stages k0,1 -> 1; k2,3 -> 3; k4,5 -> 1; k6,7 -> 3.
//   B stage (1 - ((k-2)/2)%2)*2+1: k2,3 -> 3; k4,5 -> 1; k6,7 -> 3; k8,9 -> 1.
TEST(BuilderHandDerived, Interleaved_p2_v2_m4) {
  auto s = build("interleaved-1f1b", 2, 2, 4);
  expect_rows(s, {slots("0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3"),
                  slots("1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3")});
  EXPECT_EQ(s.stage_to_rank, (std::vector<int>{0, 1, 0, 1}));
}

// Interleaved with v = 1 is not classic 1F1B (spec §2.3, §7.3): p=4, m=8, rounds 2, mpr 4;
// rank 0 warm-up = 2*(4-1) = 6, so 7 forwards precede its first backward (2p-1), not 4.
TEST(BuilderHandDerived, InterleavedWithOneStageIsNotClassic1F1B) {
  auto s = build("interleaved-1f1b", 4, 1, 8);
  EXPECT_EQ(render(s.per_rank[0]),
            render(slots("F0 F1 F2 F3 F4 F5 F6 B0 F7 B1 B2 B3 B4 B5 B6 B7", 0)));
  EXPECT_EQ(render(s.per_rank[3]),
            render(slots("F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7", 3)));
  EXPECT_NE(render(s.per_rank[0]), render(build("1f1b", 4, 1, 8).per_rank[0]));
  EXPECT_EQ(max_in_flight(s.per_rank[0]), 7);
}

// Looped BFS (spec §2.4), p=2, v=2, m=3: each local stage ascending all forwards, then each
// local stage descending, backwards m-1..0.
TEST(BuilderHandDerived, LoopedBfs_p2_v2_m3) {
  auto s = build("looped-bfs", 2, 2, 3);
  expect_rows(s, {slots("0F0 0F1 0F2 2F0 2F1 2F2 2B2 2B1 2B0 0B2 0B1 0B0"),
                  slots("1F0 1F1 1F2 3F0 3F1 3F2 3B2 3B1 3B0 1B2 1B1 1B0")});
}

// ZB1P, p=2, v=2, m=8 must be torch's artifact zb1p_2rank_2stagep (spec §2.5). By hand:
// rounds 4, mpr 2, 16 ops of each kind per rank.
// rank 0: warm-up = min(1*2 + 1*1, 16) = 3, W lag 0, torch pads p-1-r = 1 idle after warm-up.
//   F stages ((k/2)%2)*2: k0,1 -> 0; 2,3 -> 2; 4,5 -> 0; ... B stages (1-((k-3)/2)%2)*2:
//   k3,4 -> 2; 5,6 -> 0; 7,8 -> 2; ...; every I is followed by its own W (FIFO never backs up).
//   0F0 0F1 2F0 . | k3: 2F1 2I0 2W0 | k4: 0F2 2I1 2W1 | k5: 0F3 0I0 0W0 | k6: 2F2 0I1 0W1 | ...
// rank 1: warm-up = 2, one idle in front, W lag 1: the first I (3I0) keeps its W pending, so
//   from then on each I is followed by the W of the I before it: 3F0 3I0 | 3F1 3I1 3W0 | ...
// The full rows are tests/data/builders/zb1p_2rank_2stagep_compute.csv, written by hand from
// this rule and identical to torch's artifact.
TEST(BuilderHandDerived, Zb1p_TorchArtifact) {
  auto s = build("zb-h1", 2, 2, 8, true);
  auto want = csv_rows(STRETTO_TEST_DATA "/builders/zb1p_2rank_2stagep_compute.csv");
  expect_rows(s, want);
  // Without torch's padding only the idle cells go.
  auto compact = build("ScheduleInterleavedZeroBubble", 2, 2, 8);
  for (auto& row : want) std::erase_if(row, [](const Slot& x) { return x.is_idle(); });
  expect_rows(compact, want);
}

// ZB-H2 (our rule, see builders.cpp): warm-up factor 2, W lag 2r, v = 1. p=3, m=6: rounds 2,
// mpr 3. rank 0: warm-up 4, lag 0: F0..F3 | F4 I0 W0 | F5 I1 W1 | I2 W2 I3 W3 I4 W4 I5 W5.
// rank 1: warm-up 2, lag 2: F0 F1 | F2 I0 | F3 I1 | F4 I2 W0 | F5 I3 W1 | I4 W2 | I5 W3 | W4 W5.
// rank 2: warm-up 0, lag 4: F0 I0 F1 I1 F2 I2 F3 I3 | F4 I4 W0 | F5 I5 W1 | W2 W3 W4 W5.
TEST(BuilderHandDerived, ZbH2_p3_m6) {
  auto s = build("zb-h2", 3, 1, 6);
  expect_rows(s, {slots("F0 F1 F2 F3 F4 I0 W0 F5 I1 W1 I2 W2 I3 W3 I4 W4 I5 W5", 0),
                  slots("F0 F1 F2 I0 F3 I1 F4 I2 W0 F5 I3 W1 I4 W2 I5 W3 W4 W5", 1),
                  slots("F0 I0 F1 I1 F2 I2 F3 I3 F4 I4 W0 F5 I5 W1 W2 W3 W4 W5", 2)});
  for (int r = 0; r < 3; ++r) EXPECT_EQ(max_in_flight(s.per_rank[static_cast<size_t>(r)]), 5);
}

// ZB-V, p=2, m=4 (spec §2.6): n = max(3, 4) = 4; V map: rank 0 {0, 3}, rank 1 {1, 2}.
// rank 0 (s0=0, s1=3): 1. 3 x F(0) | 2. none | 3. 2 x [F(3) I(3) W(3)] | 4. f0=3<4:
//   0F3 0I0 0W0 3F2 3I2 3W2; f1=3<f0=4: 0I1 0W1 3F3 3I3 3W3 | 5. none | 6. 2 x [I(0) W(0)]:
//   0I2 0W2 0I3 0W3 | 7. nothing left.
// rank 1 (s0=1, s1=2): 1. 1F0 | 2. 2F0 1F1 | 3. 2F1 2I0 2W0 | 4. 1F2 1I0 1W0 2F2 2I1 2W1,
//   1F3 1I1 1W1 2F3 2I2 2W2 | 5. 1 x [1I2 2I3] | 6. 1 x [1I3 1W2] | 7. 2W3 then 1W3.
TEST(BuilderHandDerived, ZbV_p2_m4) {
  auto s = build("zb-v", 2, 2, 4);
  expect_rows(s, {slots("0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 "
                        "3F3 3I3 3W3 0I2 0W2 0I3 0W3"),
                  slots("1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 "
                        "2W2 1I2 2I3 1I3 1W2 2W3 1W3")});
  EXPECT_EQ(s.stage_to_rank, (std::vector<int>{0, 1, 1, 0}));
}

// ZB-V with m < 2p-1 builds n = 2p-1 microbatches and deletes the extra ones; torch keeps idle
// cells there (and r idle cells in front).
TEST(BuilderHandDerived, ZbV_SmallMDeletesExtraMicrobatches) {
  auto s = build("zb-v", 2, 2, 2);
  EXPECT_TRUE(validate_schedule(s).empty());
  // rank 0 with n=3: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 | steady f0=3=n, f1=2<3: 0I0 0W0 3F2
  // 3I2 3W2 | 6. 0I1 0W1 0I2 0W2. Dropping microbatch 2:
  EXPECT_EQ(render(s.per_rank[0]),
            render(slots("0F0 0F1 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 0I1 0W1")));
  auto padded = build("zb-v", 2, 2, 2, true);
  EXPECT_EQ(render(padded.per_rank[0]),
            render(slots("0F0 0F1 . 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 . . . 0I1 0W1 . .")));
  EXPECT_EQ(padded.per_rank[1].front(), Slot::idle());
}

// DualPipeV, p=4, m=10 = torch's artifact dualpipev_4rank_10mb (spec §2.7). By hand, e.g.
// rank 3 (s0=3, s1=4, the turning rank): 1. none | 2. 4 x [F3 F4]: 3F0 4F0 .. 3F3 4F3 |
//   3. none | 4. m-2p+r+1 = 6 iterations; the first un-overlapped: 3F4 4B0 (4F4;3B0), then
//   (3F5;4B1) (4F5;3B1) ... (3F9;4B5) (4F9;3B5) | 5. none | 6. 4 iterations, zero bubble from
//   i = 2 (r odd: before the s1 backward): 4B6 3B6 4B7 3B7 4I8 3I8 4I9 3I9 | 7. none |
//   8. 4 x pop-W: 4W8 3W8 4W9 3W9.
// rank 2 (s0=2, s1=5): 1. 2F0 2F1 | 2. 2F2 5F0 2F3 5F1 2F4 5F2 | 3. 5I0 5W0 5F3 |
//   4. 5 x [(F2;B5) (F5;B2)] from (2F5;5B1) (5F4;2B0) | 5. 5B6 (5F9;2B5) | 6. 3 iterations,
//   zero bubble from i=1 between the two backwards (r even): 5B7 2B6 5B8 2I7 5I9 2I8 |
//   7. pop 2W7, 2I9 | 8. 5W9 2W8 2W9 (one W FIFO for both stages).
// ranks 0 and 1 likewise; the four rows are tests/data/builders/dualpipev_4rank_10mb.csv.
TEST(BuilderHandDerived, DualPipeV_TorchArtifact) {
  auto s = build("dualpipev", 4, 2, 10);
  expect_rows(s, csv_rows(STRETTO_TEST_DATA "/builders/dualpipev_4rank_10mb.csv"));
  EXPECT_EQ(s.stage_to_rank, stage_to_rank_map(StageMapStyle::kV, 4, 8));
}

// DualPipe (bidirectional), p=4, m=8: P = 2, 4 microbatches per direction; direction 0 =
// microbatches 0..3 (stage k on rank k), direction 1 = 4..7 (stage k on rank 3-k).
// rank 0: h=0, chunk0 = stage 0 (dir 0), chunk1 = stage 3 (dir 1):
//   1. 0F0 0F1 | 2. 0F2 3F4 | 3. 3I4 3W4 3F5 | 4. M-2P+h+1 = 1: (0F3;3B5) (3F6;0B0) |
//   5. 3B6 (3F7;0B1) | 6. zb on between (h even): 3B7 0I2 | 7. 0W2 0I3 | 8. 0W3.
// rank 1: h=1 (middle rank), chunk0 = stage 1 (dir 0), chunk1 = stage 2 (dir 1):
//   2. 1F0 2F4 1F1 2F5 | 4. two iterations, the first un-overlapped: 1F2 2B4 (2F6;1B0)
//   (1F3;2B5) (2F7;1B1) | 6. zb from i=1 (h odd): 2B6 1B2 2I7 1I3 | 8. 2W7 1W3.
// ranks 2 and 3 mirror ranks 1 and 0 with the directions swapped.
TEST(BuilderHandDerived, DualPipe_p4_m8) {
  auto s = build("dualpipe", 4, 0, 8);
  EXPECT_TRUE(s.bidirectional);
  EXPECT_EQ(s.stages, 4);
  expect_rows(s, {slots("0F0 0F1 0F2 3F4 3I4 3W4 3F5 (0F3;3B5) (3F6;0B0) 3B6 (3F7;0B1) 3B7 0I2 "
                        "0W2 0I3 0W3"),
                  slots("1F0 2F4 1F1 2F5 1F2 2B4 (2F6;1B0) (1F3;2B5) (2F7;1B1) 2B6 1B2 2I7 1I3 "
                        "2W7 1W3"),
                  slots("1F4 2F0 1F5 2F1 1F6 2B0 (2F2;1B4) (1F7;2B1) (2F3;1B5) 2B2 1B6 2I3 1I7 "
                        "2W3 1W7"),
                  slots("0F4 0F5 0F6 3F0 3I0 3W0 3F1 (0F7;3B1) (3F2;0B4) 3B2 (3F3;0B5) 3B3 0I6 "
                        "0W6 0I7 0W7")});
  EXPECT_EQ(s.rank_of(0, 0), 0);
  EXPECT_EQ(s.rank_of(0, 4), 3);
  EXPECT_EQ(s.rank_of(2, 7), 1);
}

// ---------------------------------------------------------------------------------------------
// Constraints

void expect_error(const std::string& fam, int p, int v, int m, const std::string& needle,
                  const std::string& hint_needle = "") {
  auto s = build_schedule(fam, p, v, m);
  ASSERT_FALSE(s) << fam << " p=" << p << " v=" << v << " m=" << m << " should fail";
  EXPECT_NE(s.error()[0].message.find(needle), std::string::npos) << s.error()[0].message;
  if (!hint_needle.empty()) {
    EXPECT_NE(s.error()[0].hint.find(hint_needle), std::string::npos) << s.error()[0].hint;
  }
}

TEST(BuilderConstraints, Diagnostics) {
  expect_error("dualpipev", 4, 2, 7, "at least as many microbatches as stages (2p = 8)", "8");
  expect_error("zb-v", 2, 3, 4, "exactly 2 stages per rank");
  expect_error("dualpipev", 2, 1, 8, "exactly 2 stages per rank");
  expect_error("ScheduleInterleaved1F1B", 4, 2, 9, "multiple of the number of rounds", "8 or 10");
  expect_error("zb-h1", 4, 2, 9, "multiple of the number of rounds");
  expect_error("gpipe", 2, 2, 4, "one stage per rank", "looped-bfs");
  expect_error("dualpipe", 3, 0, 12, "even number of ranks");
  expect_error("dualpipe", 4, 0, 9, "even number of microbatches");
  expect_error("dualpipe", 4, 0, 6, "at least 2p = 8");
  expect_error("zb-h2", 2, 2, 4, "1 stage per rank", "zb-h1");
  expect_error("1f1b", 0, 1, 4, "at least 1 rank");
  expect_error("gpipe", 2, 1, 0, "at least 1 microbatch");
  // torch's GPipe does not reject m < p.
  EXPECT_TRUE(build_schedule("gpipe", 4, 1, 2));
  // 1f1b with m < p runs as Megatron-LM does (torch refuses it): rank r warms up with
  // min(p-1-r, m) forwards. p = 4, m = 3: rank 0 warms up with all 3 (F F F B B B); rank 3 has
  // no warm-up (F B F B F B).
  auto m_lt_p = build_schedule("1f1b", 4, 1, 3);
  ASSERT_TRUE(m_lt_p);
  auto kinds = [&](int r) {
    std::string k;
    for (const Slot& sl : m_lt_p->per_rank[static_cast<size_t>(r)])
      for (const Action& a : sl.actions()) k += action_kind_char(a.kind);
    return k;
  };
  EXPECT_EQ(kinds(0), "FFFBBB");
  EXPECT_EQ(kinds(3), "FBFBFB");
  EXPECT_TRUE(build_schedule("interleaved-1f1b", 4, 2, 10));  // rounds 2, mpr 5
  EXPECT_TRUE(build_schedule("zb-v", 4, 2, 1));
}

// check_schedule refuses exactly what build_schedule refuses, with the same message.
TEST(BuilderConstraints, CheckAgreesWithBuild) {
  size_t refused = 0, built = 0;
  for (const std::string& fam : schedule_family_names())
    for (int p = 0; p <= 6; ++p)
      for (int v = -1; v <= 3; ++v)
        for (int m = 0; m <= 15; ++m) {
          const auto check = check_schedule(fam, p, v, m);
          const auto b = build_schedule(fam, p, v, m);
          ASSERT_EQ(!check, static_cast<bool>(b)) << fam << " p" << p << " v" << v << " m" << m;
          if (check) {
            ++refused;
            EXPECT_EQ(render_all({*check}), render_all(b.error())) << fam;
          } else {
            ++built;
          }
        }
  EXPECT_GT(refused, 100u);
  EXPECT_GT(built, 100u);
  EXPECT_TRUE(check_schedule("no-such-family", 2, 1, 4));
}

// ---------------------------------------------------------------------------------------------
// Structural properties over many (p, v, m)

struct Case {
  std::string fam;
  int p, v, m;
};

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 3 * p + 3; ++m) {
      cases.push_back({"gpipe", p, 1, m});
      if (m >= p) cases.push_back({"1f1b", p, 1, m});
      for (int v = 1; v <= 3; ++v) {
        cases.push_back({"looped-bfs", p, v, m});
        if (m % std::max(1, m / p) == 0) {
          cases.push_back({"interleaved-1f1b", p, v, m});
          cases.push_back({"zb-h1", p, v, m});
        }
      }
      if (m % std::max(1, m / p) == 0) cases.push_back({"zb-h2", p, 1, m});
      cases.push_back({"zb-v", p, 2, m});
      if (m >= 2 * p) cases.push_back({"dualpipev", p, 2, m});
      if (p % 2 == 0 && m % 2 == 0 && m >= 2 * p) cases.push_back({"dualpipe", p, 2, m});
    }
  return cases;
}

TEST(BuilderStructure, EveryCaseIsValidAndCountsAreRight) {
  size_t n = 0;
  for (const Case& c : sweep()) {
    SCOPED_TRACE(c.fam + " p=" + std::to_string(c.p) + " v=" + std::to_string(c.v) +
                 " m=" + std::to_string(c.m));
    for (bool pad : {false, true}) {
      auto s = build(c.fam, c.p, c.v, c.m, pad);
      const Diagnostics ds = validate_schedule(s);
      EXPECT_TRUE(ds.empty()) << render_all(ds);
      // Counts: m forwards and m complete backwards per stage (copy), checked independently of
      // validate_schedule.
      std::map<std::pair<int, char>, int> count;
      for (int r = 0; r < s.ranks; ++r)
        for (const Action& a : s.compute_order(r)) {
          EXPECT_EQ(s.rank_of(a.stage, a.mb), r);
          ++count[{a.stage, action_kind_char(a.kind)}];
        }
      for (int st = 0; st < s.stages; ++st) {
        EXPECT_EQ((count[{st, 'F'}]), c.m);
        EXPECT_EQ((count[{st, 'B'}] + count[{st, 'I'}]), c.m);
        EXPECT_EQ((count[{st, 'I'}]), (count[{st, 'W'}]));
      }
      // No deadlock when every rank runs its order.
      EXPECT_GE(evaluate(s).makespan, 0);
    }
    ++n;
  }
  EXPECT_GT(n, 700u);
}

// Closed forms of spec §4 under F=1, B=2, I=W=1 (an overlapped pair takes F+B).
TEST(BuilderStructure, MakespanClosedForms) {
  for (const Case& c : sweep()) {
    SCOPED_TRACE(c.fam + " p=" + std::to_string(c.p) + " v=" + std::to_string(c.v) +
                 " m=" + std::to_string(c.m));
    const int64_t p = c.p, v = c.v, m = c.m;
    const int64_t F = 1, B = 2, I = 1, W = 1;
    auto s = build(c.fam, c.p, c.v, c.m);
    const int64_t got = evaluate(s).makespan;
    if (c.fam == "gpipe" || c.fam == "1f1b") {
      EXPECT_EQ(got, (m + p - 1) * (F + B));
    } else if (c.fam == "interleaved-1f1b" || c.fam == "looped-bfs") {
      // The closed forms assume a full pipeline (m >= p); below that the chunks wait.
      if (m >= p) {
        EXPECT_EQ(got, m * v * (F + B) + (p - 1) * (F + B));
      } else {
        EXPECT_GE(got, m * v * (F + B) + (p - 1) * (F + B));
      }
    } else if (c.fam == "zb-h1") {
      if (m >= p) {
        EXPECT_EQ(got, m * v * (F + I + W) + (p - 1) * (F + I - W));
      } else {
        EXPECT_GE(got, m * v * (F + I + W) + (p - 1) * (F + I - W));
      }
    } else if (c.fam == "zb-h2") {
      if (m >= 2 * p - 1) {
        EXPECT_EQ(got, m * (F + I + W) + (p - 1) * F);
      }
    } else if (c.fam == "zb-v") {
      if (m >= 2 * p - 1) {
        EXPECT_EQ(got, 2 * m * (F + I + W) + (p - 1) * F);
      } else {
        EXPECT_GE(got, 2 * m * (F + I + W) + (p - 1) * F);
      }
    } else if (c.fam == "dualpipev") {
      EXPECT_EQ(got, 2 * m * (F + B) + (p - 1) * ((F + B) + B - 3 * W));
    } else if (c.fam == "dualpipe") {
      EXPECT_EQ(got, m * (F + B) + (p / 2 - 1) * ((F + B) + B - 3 * W));
    }
  }
  // Spot values (DESIGN.md §3): 1F1B on 4 ranks with 8 microbatches takes 33.
  EXPECT_EQ(evaluate(build("1f1b", 4, 1, 8)).makespan, 33);
  // Spec §4 note: ZB-V with p=4, m=8 under uniform costs: 51 = 48 + 3.
  EXPECT_EQ(evaluate(build("zb-v", 4, 2, 8), {1, 2, 1, 1}).makespan, 51);
}

// ZB-H2 vs ZB-H1 (spec §4 table, §6): the parallelogram. Under F = I = W no rank of ZB-H2 idles
// between its first and last op, while ZB-H1's rank 0 idles p-1; when I > W, ZB-H2 still meets
// the single-iteration bound m(F+I+W) + (p-1)F and rank 0 idles (p-1)(F+I-2W); ZB-H1 needs
// (p-1)(F+I-W) more than m(F+I+W).
TEST(BuilderStructure, ZbH2IsAParallelogram) {
  for (int p = 2; p <= 6; ++p)
    for (int m : {2 * p - 1, 2 * p, 3 * p, 4 * p}) {
      if (m % std::max(1, m / p)) continue;
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      auto h2 = build("zb-h2", p, 1, m);
      auto h1 = build("zb-h1", p, 1, m);
      Timing t2 = evaluate(h2, {1, 2, 1, 1});
      Timing t1 = evaluate(h1, {1, 2, 1, 1});
      for (int r = 0; r < p; ++r) {
        const size_t i = static_cast<size_t>(r);
        EXPECT_EQ(t2.last[i] - t2.first[i] - t2.busy[i], 0) << "rank " << r;
        EXPECT_EQ(t2.first[i], r);
      }
      EXPECT_EQ(t1.last[0] - t1.first[0] - t1.busy[0], p - 1);
      const Costs slow_i{1, 3, 2, 1};
      EXPECT_EQ(evaluate(h2, slow_i).makespan, 4 * m + (p - 1));
      EXPECT_EQ(evaluate(h1, slow_i).makespan, 4 * m + 2 * (p - 1));
      Timing ts = evaluate(h2, slow_i);
      EXPECT_EQ(ts.last[0] - ts.first[0] - ts.busy[0], (p - 1) * (1 + 2 - 2));
    }
}

// In-flight microbatches per rank (activation memory, spec §4 table).
TEST(BuilderStructure, InFlightMicrobatches) {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 4 * p; ++m) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      auto g = build("gpipe", p, 1, m);
      for (const auto& row : g.per_rank) EXPECT_EQ(max_in_flight(row), m);
      const bool flex = m % std::max(1, m / p) == 0;
      if (m >= p) {
        auto s = build("1f1b", p, 1, m);
        for (int r = 0; r < p; ++r)
          EXPECT_EQ(max_in_flight(s.per_rank[static_cast<size_t>(r)]), p - r);
      }
      if (flex) {
        auto zb = build("zb-h1", p, 1, m);  // ZB-H1 keeps 1F1B's memory (p on every rank)
        for (const auto& row : zb.per_rank) EXPECT_LE(max_in_flight(row), p);
        if (m >= p) {
          for (const auto& row : zb.per_rank) EXPECT_EQ(max_in_flight(row), p);
        }
        auto h2 = build("zb-h2", p, 1, m);  // ZB-H2: up to 2p-1
        int peak = 0;
        for (const auto& row : h2.per_rank) peak = std::max(peak, max_in_flight(row));
        EXPECT_EQ(peak, std::min(m, 2 * p - 1));
        auto il = build("interleaved-1f1b", p, 1, m);  // v=1 interleaved: rank 0 holds 2p-1
        EXPECT_EQ(max_in_flight(il.per_rank[0]), std::min(m, 2 * p - 1));
      }
      auto zbv = build("zb-v", p, 2, m);  // ZB-V: p microbatches = 2p stage chunks
      for (const auto& row : zbv.per_rank) EXPECT_LE(max_in_flight(row), 2 * p);
      if (m >= 2 * p) {
        // DualPipeV: PP+1 activations with PP = 2p stages (DeepSeek README).
        auto dv = build("dualpipev", p, 2, m);
        int peak = 0;
        for (const auto& row : dv.per_rank) peak = std::max(peak, max_in_flight(row));
        EXPECT_EQ(peak, 2 * p + 1);
      }
      if (p % 2 == 0 && m % 2 == 0 && m >= 2 * p) {
        auto d = build("dualpipe", p, 2, m);  // DualPipe: PP+1 with PP = p stages
        int peak = 0;
        for (const auto& row : d.per_rank) peak = std::max(peak, max_in_flight(row));
        EXPECT_EQ(peak, p + 1);
      }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation errors

PipelineSchedule two_rank_1f1b() {
  return build("1f1b", 2, 1, 2);
}

TEST(BuilderValidate, MissingWeightBackward) {
  auto s = build("zb-h1", 2, 1, 2);
  auto& row = s.per_rank[1];
  auto it = std::find(row.begin(), row.end(), Slot::single({ActionKind::kW, 1, 1}));
  ASSERT_NE(it, row.end());
  row.erase(it);
  const Diagnostics ds = validate_schedule(s);
  ASSERT_EQ(ds.size(), 1u) << render_all(ds);
  EXPECT_EQ(ds[0].message,
            "stage 1 (rank 1) is missing weight backwards: microbatch 1 has an I but no W");
}

TEST(BuilderValidate, BackwardBeforeForward) {
  auto s = two_rank_1f1b();  // rank 1: F0 B0 F1 B1
  std::swap(s.per_rank[1][2], s.per_rank[1][3]);
  const Diagnostics ds = validate_schedule(s);
  ASSERT_EQ(ds.size(), 1u) << render_all(ds);
  EXPECT_EQ(ds[0].message,
            "rank 1, slot 2: full backward (B) of stage 1 microbatch 1 runs before its forward");
}

TEST(BuilderValidate, WeightBeforeInput) {
  auto s = build("zb-h1", 1, 1, 1);  // F0 I0 W0
  std::swap(s.per_rank[0][1], s.per_rank[0][2]);
  const Diagnostics ds = validate_schedule(s);
  ASSERT_FALSE(ds.empty());
  EXPECT_EQ(ds[0].message,
            "rank 0, slot 1: weight backward (W) of stage 0 microbatch 0 runs before its input "
            "backward (I)");
}

TEST(BuilderValidate, StageOnTwoRanks) {
  auto s = two_rank_1f1b();
  // Move rank 1's F1 (stage 1) to rank 0.
  s.per_rank[0].push_back(s.per_rank[1][2]);
  s.per_rank[1].erase(s.per_rank[1].begin() + 2);
  const Diagnostics ds = validate_schedule(s);
  ASSERT_FALSE(ds.empty());
  EXPECT_EQ(ds[0].message, "rank 1, slot 0: stage 1 is assigned to both rank 0 and rank 1");
  // Per-slot locations come from the locator.
  const Diagnostics located = validate_schedule(s, [](int r, int k) {
    return SourceLoc{"x.csv", static_cast<uint32_t>(r + 1), static_cast<uint32_t>(k + 1), ""};
  });
  EXPECT_EQ(located[0].loc.line, 2u);
  EXPECT_EQ(located[0].loc.col, 1u);
}

TEST(BuilderValidate, MissingForwardsAndRows) {
  auto s = two_rank_1f1b();
  s.per_rank[0].erase(s.per_rank[0].begin());  // drop 0F0
  Diagnostics ds = validate_schedule(s);
  ASSERT_FALSE(ds.empty());
  EXPECT_NE(render_all(ds).find("stage 0 (rank 0) has 1 of 2 forwards: microbatch 0 has no F"),
            std::string::npos)
      << render_all(ds);
  s = two_rank_1f1b();
  s.per_rank.pop_back();
  ds = validate_schedule(s);
  ASSERT_FALSE(ds.empty());
  EXPECT_EQ(ds[0].message, "schedule has 1 rank rows, expected 2");
}

TEST(BuilderValidate, DualPipeStagesLiveOnTwoRanksByDesign) {
  auto s = build("dualpipe", 2, 0, 4);
  EXPECT_TRUE(validate_schedule(s).empty());
  // Without the bidirectional flag the same rows put each stage on two ranks.
  s.bidirectional = false;
  const Diagnostics ds = validate_schedule(s);
  ASSERT_FALSE(ds.empty());
  EXPECT_NE(ds[0].message.find("is assigned to both rank"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Directives

Filter pp_mb_pass(int pp, int mb, Pass pass) {
  Filter f;
  f.cond[static_cast<size_t>(TagKey::kPP)] = {TagCond::kEquals, pp};
  f.cond[static_cast<size_t>(TagKey::kMB)] = {TagCond::kEquals, mb};
  f.pass = pass;
  return f;
}

bool same_filter(const Filter& a, const Filter& b) {
  return a.cond == b.cond && a.pass == b.pass;
}

TEST(BuilderDirectives, DefaultPlacementSplitAndOrders) {
  auto ds = schedule_to_directives(two_rank_1f1b());
  ASSERT_TRUE(ds) << render_all(ds.error());
  ASSERT_EQ(ds->size(), 5u);
  const auto& d = *ds;
  EXPECT_EQ(d[0].op, DirectiveOp::kPlace);
  EXPECT_EQ(d[0].devices, std::vector<int>{0});
  EXPECT_EQ(d[0].stream, "pp");
  EXPECT_EQ(d[0].filter.cond[static_cast<size_t>(TagKey::kPP)].value, 0);
  EXPECT_EQ(d[1].devices, std::vector<int>{1});
  EXPECT_EQ(d[2].op, DirectiveOp::kSplit);
  EXPECT_EQ(d[2].dim_name, "MB");
  EXPECT_EQ(d[2].num_microbatches, 2);
  EXPECT_EQ(d[2].filter.cond[static_cast<size_t>(TagKey::kPP)].kind, TagCond::kAny);
  ASSERT_EQ(d[3].op, DirectiveOp::kOrder);
  // rank 0 of 1F1B p=2 m=2: F0 F1 B0 B1.
  ASSERT_EQ(d[3].groups.size(), 4u);
  EXPECT_TRUE(same_filter(d[3].groups[0][0], pp_mb_pass(0, 0, Pass::kF)));
  EXPECT_TRUE(same_filter(d[3].groups[1][0], pp_mb_pass(0, 1, Pass::kF)));
  EXPECT_TRUE(same_filter(d[3].groups[2][0], pp_mb_pass(0, 0, Pass::kB)));
  EXPECT_EQ(d[3].index, 3);
  EXPECT_EQ(d[3].pointer, "/schedule/3");
  EXPECT_EQ(d[3].groups[2][0].pointer, "/schedule/3");  // filters share their directive's
  // rank 1: F0 B0 F1 B1.
  EXPECT_TRUE(same_filter(d[4].groups[1][0], pp_mb_pass(1, 0, Pass::kB)));
}

TEST(BuilderDirectives, SplitBackwardAndOverlappedPairs) {
  auto dv = schedule_to_directives(build("dualpipev", 2, 2, 4));
  ASSERT_TRUE(dv) << render_all(dv.error());
  bool saw_pair = false, saw_bi = false, saw_bw = false;
  for (const Directive& d : *dv) {
    if (d.op != DirectiveOp::kOrder) continue;
    for (const auto& g : d.groups) {
      if (g.size() == 2) {
        saw_pair = true;
        EXPECT_EQ(g[0].pass, Pass::kF);
        EXPECT_EQ(g[1].pass, Pass::kB);
      }
      saw_bi |= g[0].pass == Pass::kBI;
      saw_bw |= g[0].pass == Pass::kBW;
    }
  }
  EXPECT_TRUE(saw_pair && saw_bi && saw_bw);
}

TEST(BuilderDirectives, DualPipePlacesPerStageAndMicrobatch) {
  auto ds = schedule_to_directives(build("dualpipe", 4, 0, 8));
  ASSERT_TRUE(ds) << render_all(ds.error());
  ASSERT_EQ((*ds)[0].op, DirectiveOp::kSplit);  // MB exists after the split
  int places = 0;
  for (const Directive& d : *ds) {
    if (d.op != DirectiveOp::kPlace) continue;
    ++places;
    const int pp = d.filter.cond[static_cast<size_t>(TagKey::kPP)].value;
    const int mb = d.filter.cond[static_cast<size_t>(TagKey::kMB)].value;
    ASSERT_EQ(d.filter.cond[static_cast<size_t>(TagKey::kMB)].kind, TagCond::kEquals);
    EXPECT_EQ(d.devices, std::vector<int>{mb < 4 ? pp : 3 - pp}) << "PP" << pp << " MB" << mb;
  }
  EXPECT_EQ(places, 4 * 8);
}

Directive base_place(int index, int pp, std::vector<int> devices) {
  Directive d;
  d.op = DirectiveOp::kPlace;
  d.index = index;
  d.pointer = "/base/" + std::to_string(index);
  d.filter.cond[static_cast<size_t>(TagKey::kPP)] = {TagCond::kEquals, pp};
  d.devices = std::move(devices);
  d.stream = "pp_stream";
  return d;
}

TEST(BuilderDirectives, BaseIsKeptVerbatim) {
  std::vector<Directive> base = {base_place(0, 0, {0, 2}), base_place(1, 1, {1, 3})};
  Directive rep;
  rep.op = DirectiveOp::kReplicate;
  rep.index = 2;
  rep.pointer = "/base/2";
  rep.filter.cond[static_cast<size_t>(TagKey::kPP)] = {TagCond::kEquals, 0};
  rep.devices = {0, 2};
  rep.shard_grads = true;
  base.push_back(rep);
  auto ds = schedule_to_directives(two_rank_1f1b(), base);
  ASSERT_TRUE(ds) << render_all(ds.error());
  ASSERT_EQ(ds->size(), 3u + 1 + 2);  // base, split, two orders: no new places
  EXPECT_EQ((*ds)[0].pointer, "/base/0");
  EXPECT_EQ((*ds)[1].devices, (std::vector<int>{1, 3}));
  EXPECT_EQ((*ds)[2].op, DirectiveOp::kReplicate);
  EXPECT_TRUE((*ds)[2].shard_grads);
  EXPECT_EQ((*ds)[3].op, DirectiveOp::kSplit);
  EXPECT_EQ((*ds)[4].op, DirectiveOp::kOrder);
  // And back: ranks are the distinct device lists ordered by first device.
  auto back = schedule_from_directives(*ds);
  ASSERT_TRUE(back) << render_all(back.error());
  EXPECT_EQ(back->ranks, 2);
  EXPECT_EQ(back->per_rank, two_rank_1f1b().per_rank);
}

TEST(BuilderDirectives, BasePlacesOnlySomeStages) {
  // Interleaved p=2 v=2: rank 0 holds stages 0 and 2; the base places only stage 0.
  std::vector<Directive> base = {base_place(0, 0, {4, 5})};
  auto ds = schedule_to_directives(build("interleaved-1f1b", 2, 2, 4), base);
  ASSERT_TRUE(ds) << render_all(ds.error());
  std::map<int, std::vector<int>> placed;
  for (const Directive& d : *ds)
    if (d.op == DirectiveOp::kPlace)
      placed[d.filter.cond[static_cast<size_t>(TagKey::kPP)].value] = d.devices;
  EXPECT_EQ(placed[0], (std::vector<int>{4, 5}));
  EXPECT_EQ(placed[2], (std::vector<int>{4, 5}));  // follows its rank-mate
  EXPECT_EQ(placed[1], std::vector<int>{1});
  EXPECT_EQ(placed[3], std::vector<int>{1});
}

TEST(BuilderDirectives, BaseConflictsAreDiagnosed) {
  // Stages 0 and 2 run on schedule rank 0 but the base splits them over two device lists.
  std::vector<Directive> base = {base_place(0, 0, {0}), base_place(1, 1, {1}),
                                 base_place(2, 2, {2}), base_place(3, 3, {1})};
  auto ds = schedule_to_directives(build("interleaved-1f1b", 2, 2, 4), base);
  ASSERT_FALSE(ds);
  EXPECT_EQ(ds.error()[0].message,
            "stage 2 is placed on devices [2] by directive 2, but stage 0 of the same schedule "
            "rank 0 is placed on devices [0] by directive 0");
  EXPECT_EQ(ds.error()[0].directive, 2);
  EXPECT_EQ(ds.error()[0].loc.json_pointer, "/base/2");
  // Two ranks on one device.
  auto shared = schedule_to_directives(two_rank_1f1b(), {base_place(0, 0, {1})});
  ASSERT_FALSE(shared);
  EXPECT_EQ(shared.error()[0].message, "schedule ranks 0 and 1 would both run on device 1");
  // A base split that disagrees.
  Directive split;
  split.op = DirectiveOp::kSplit;
  split.index = 0;
  split.num_microbatches = 3;
  auto bad_split = schedule_to_directives(two_rank_1f1b(), {split});
  ASSERT_FALSE(bad_split);
  EXPECT_NE(bad_split.error()[0].message.find("splits into 3 microbatches"), std::string::npos);
}

TEST(BuilderDirectives, RoundTripEveryFamily) {
  for (const auto& [fam, p, v, m] : std::vector<Case>{{"gpipe", 3, 1, 4},
                                                      {"1f1b", 4, 1, 8},
                                                      {"interleaved-1f1b", 2, 2, 4},
                                                      {"looped-bfs", 3, 2, 5},
                                                      {"zb-h1", 2, 2, 8},
                                                      {"zb-h2", 3, 1, 6},
                                                      {"zb-v", 3, 2, 7},
                                                      {"dualpipe", 4, 2, 8},
                                                      {"dualpipev", 4, 2, 10}}) {
    SCOPED_TRACE(fam);
    auto s = build(fam, p, v, m, true);  // idle slots are dropped on the way
    auto ds = schedule_to_directives(s);
    ASSERT_TRUE(ds) << render_all(ds.error());
    auto back = schedule_from_directives(*ds);
    ASSERT_TRUE(back) << render_all(back.error());
    EXPECT_EQ(back->ranks, s.ranks);
    EXPECT_EQ(back->stages, s.stages);
    EXPECT_EQ(back->microbatches, s.microbatches);
    EXPECT_EQ(back->stage_to_rank, s.stage_to_rank);
    EXPECT_EQ(back->bidirectional, s.bidirectional);
    EXPECT_EQ(back->stages_per_rank, s.stages_per_rank);
    for (int r = 0; r < s.ranks; ++r) EXPECT_EQ(back->compute_order(r), s.compute_order(r));
  }
}

TEST(BuilderDirectives, FromDirectivesRejectsUnexpressibleOrders) {
  auto ds = *schedule_to_directives(two_rank_1f1b());
  ds[3].groups[0][0].cond[static_cast<size_t>(TagKey::kMB)] = {TagCond::kPresent, 0};
  ds[3].groups[0][0].pointer = "/schedule/3/filters/0/0";
  auto back = schedule_from_directives(ds);
  ASSERT_FALSE(back);
  EXPECT_NE(back.error()[0].message.find("does not name one stage, one microbatch and a pass"),
            std::string::npos);
  EXPECT_EQ(back.error()[0].directive, 3);
  EXPECT_EQ(back.error()[0].loc.json_pointer, "/schedule/3/filters/0/0");
  // No split.
  auto no_split = *schedule_to_directives(two_rank_1f1b());
  no_split.erase(no_split.begin() + 2);
  auto b2 = schedule_from_directives(no_split);
  ASSERT_FALSE(b2);
  EXPECT_NE(b2.error()[0].message.find("no split directive"), std::string::npos);
}

TEST(BuilderDirectives, ExpandBuilder) {
  plan::BuilderCall call;
  call.builder = "ScheduleDualPipeV";
  call.ranks = 2;
  call.stages_per_rank = 1;  // plan.h's default: means "family default" for V families
  call.microbatches = 4;
  call.pointer = "/schedule";
  auto ds = expand_builder(call);
  ASSERT_TRUE(ds) << render_all(ds.error());
  EXPECT_EQ(ds->back().op, DirectiveOp::kOrder);
  EXPECT_EQ(ds->back().pointer, "/schedule");  // generated: points at the call
  // Ranks inferred from a V-shaped base (4 stages on 2 device lists).
  call.ranks = 0;
  call.base = {base_place(0, 0, {0}), base_place(1, 1, {1}), base_place(2, 2, {1}),
               base_place(3, 3, {0})};
  ds = expand_builder(call);
  ASSERT_TRUE(ds) << render_all(ds.error());
  EXPECT_EQ(ds->size(), 4u + 1 + 2);
  // Errors point at the offending field of the call.
  call.microbatches = 3;
  ds = expand_builder(call);
  ASSERT_FALSE(ds);
  EXPECT_EQ(ds.error()[0].loc.json_pointer, "/schedule/microbatches");
  call.builder = "nope";
  call.ranks = 2;
  ds = expand_builder(call);
  ASSERT_FALSE(ds);
  EXPECT_EQ(ds.error()[0].loc.json_pointer, "/schedule/builder");
}

// DualPipe from a layout with TP: the expansion drops the layout's whole-stage places, and the
// directives after them (the shard_tensor) must be renumbered to their position in the schedule,
// which is how the compiler looks them up. With the old numbering the TP directive's index named
// a per-microbatch place: every op's device set came out empty (no work on any device, no
// transfers, no gradient reductions; at PP2 the simulator crashed). TP 2 must compile to TP 1's
// pattern: every device works, and the same transfer, tied-embedding and gradient-reduction
// (the two copies of each op) node counts per TP rank.
TEST(BuilderDirectives, DualPipeLayoutWithTensorParallelismCompilesEveryCopy) {
  auto plan_json = [](int tp, int pp) {
    return plan::Json{
        {"model",
         {{"family", "transformer"}, {"layers", 8}, {"hidden", 1024}, {"heads", 16},
          {"ffn_hidden", 4096}, {"vocab", 50304}, {"seq_len", 2048}, {"microbatch_size", 1},
          {"dtype", "bf16"}, {"gated_mlp", false}, {"pp_regions", pp},
          {"tie_embeddings", true}}},
        {"cluster", {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", tp * pp}}},
        {"schedule",
         {{"builder", "dualpipe"},
          {"microbatches", 8},
          {"layout", {{"tp", tp}, {"pp", pp}, {"dp", 1}}}}}};
  };
  for (int pp : {2, 4}) {
    std::map<int, std::map<compiler::CommPurpose, int>> counts;  // tp -> purpose -> nodes
    for (int tp : {1, 2}) {
      SCOPED_TRACE(fmt::format("PP{} TP{}", pp, tp));
      const plan::JsonSource src = plan::JsonSource::from_json(plan_json(tp, pp), "dualpipe");
      auto plan = plan::parse_plan(src);
      ASSERT_TRUE(plan) << render_all(plan.error());
      auto ds = expand_builder(*plan->builder);
      ASSERT_TRUE(ds) << render_all(ds.error());
      for (size_t i = 0; i < ds->size(); ++i) EXPECT_EQ((*ds)[i].index, static_cast<int>(i));
      auto cp = compiler::compile(*plan);
      ASSERT_TRUE(cp) << render_all(cp.error());
      std::vector<int> work(static_cast<size_t>(tp * pp), 0);
      for (const compiler::Node& n : cp->dag.nodes) {
        if (n.kind == compiler::NodeKind::kCompute)
          for (int32_t d : cp->dag.device_sets[n.devs].devices) ++work[static_cast<size_t>(d)];
        if (n.kind != compiler::NodeKind::kCompute) ++counts[tp][n.purpose];
      }
      for (size_t d = 0; d < work.size(); ++d) EXPECT_GT(work[d], 0) << "device " << d;
      EXPECT_GT(counts[tp][compiler::CommPurpose::kTiedGrad], 0);
      EXPECT_GT(counts[tp][compiler::CommPurpose::kGradReduce], 0);
    }
    SCOPED_TRACE(fmt::format("PP{}", pp));
    // (one transfer per TP rank pair: TP 2 sends as many as TP 1; counted per node)
    for (compiler::CommPurpose c : {compiler::CommPurpose::kActivation,
                                    compiler::CommPurpose::kGradient,
                                    compiler::CommPurpose::kTiedGrad})
      EXPECT_EQ(counts[2][c], counts[1][c]) << static_cast<int>(c);
    EXPECT_GT(counts[2][compiler::CommPurpose::kTensorPar], 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Grid

TEST(BuilderGrid, CompactAndReadable) {
  EXPECT_EQ(show_grid(two_rank_1f1b()),
            "1f1b: 2 ranks, 1 stage/rank, 2 microbatches\n"
            "r0 | F0 F1 B0 B1\n"
            "r1 | F0 B0 F1 B1\n");
  const std::string g = show_grid(build("dualpipev", 4, 2, 10));
  EXPECT_NE(g.find("0F7|7B3"), std::string::npos) << g;
  EXPECT_NE(g.find("r3 | 3F0"), std::string::npos) << g;
  const std::string padded = show_grid(build("gpipe", 2, 1, 1, true));
  EXPECT_NE(padded.find("r1 | .  F0 B0"), std::string::npos) << padded;
}

}  // namespace
}  // namespace stretto::pipelines
