// Pipeline schedule builders, validation and directive conversion.
//
// Every builder below transcribes one rule of reference/schedules-spec.md §2; the comments name
// the step. Where implementations disagree (spec §7) we follow torch's current behaviour and say
// so at the spot.
#include "stretto/pipelines/builders.h"

#include "stretto/pipelines/layout_base.h"
#include "stretto/support/plural.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <iterator>
#include <map>
#include <ostream>
#include <set>
#include <utility>

namespace stretto::pipelines {

using plan::Directive;
using plan::DirectiveOp;
using plan::Filter;
using plan::Pass;
using plan::TagCond;
using plan::TagKey;

// ---------------------------------------------------------------------------------------------
// Value types

char action_kind_char(ActionKind k) {
  switch (k) {
    case ActionKind::kF:
      return 'F';
    case ActionKind::kB:
      return 'B';
    case ActionKind::kI:
      return 'I';
    case ActionKind::kW:
      return 'W';
  }
  return '?';
}

Pass action_kind_pass(ActionKind k) {
  switch (k) {
    case ActionKind::kF:
      return Pass::kF;
    case ActionKind::kB:
      return Pass::kB;
    case ActionKind::kI:
      return Pass::kBI;
    case ActionKind::kW:
      return Pass::kBW;
  }
  return Pass::kNone;
}

std::optional<ActionKind> action_kind_from_pass(Pass p) {
  switch (p) {
    case Pass::kF:
      return ActionKind::kF;
    case Pass::kB:
      return ActionKind::kB;
    case Pass::kBI:
      return ActionKind::kI;
    case Pass::kBW:
      return ActionKind::kW;
    case Pass::kNone:
      break;
  }
  return std::nullopt;
}

std::string Action::str() const {
  return fmt::format("{}{}{}", stage, action_kind_char(kind), mb);
}

bool Slot::operator==(const Slot& o) const {
  if (count != o.count) return false;
  for (int i = 0; i < count; ++i)
    if (!(act[static_cast<size_t>(i)] == o.act[static_cast<size_t>(i)])) return false;
  return true;
}

std::string Slot::str() const {
  if (count == 0) return "";
  if (count == 1) return act[0].str();
  return fmt::format("({};{})OVERLAP_F_B", act[0].str(), act[1].str());
}

std::ostream& operator<<(std::ostream& os, const Action& a) {
  return os << a.str();
}
std::ostream& operator<<(std::ostream& os, const Slot& s) {
  return os << (s.is_idle() ? std::string("<idle>") : s.str());
}

int PipelineSchedule::rank_of(int stage, int mb) const {
  STRETTO_ASSERT(stage >= 0 && stage < static_cast<int>(stage_to_rank.size()), "stage in range");
  const int r = stage_to_rank[static_cast<size_t>(stage)];
  if (bidirectional && mb >= microbatches / 2) return ranks - 1 - r;
  return r;
}

std::vector<Action> PipelineSchedule::compute_order(int rank) const {
  std::vector<Action> out;
  for (const Slot& s : per_rank[static_cast<size_t>(rank)])
    for (const Action& a : s.actions()) out.push_back(a);
  return out;
}

std::vector<int> stage_to_rank_map(StageMapStyle style, int ranks, int stages) {
  STRETTO_ASSERT(ranks > 0 && stages >= 0, "positive rank count");
  std::vector<int> map(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    const int pos = s % ranks;
    const bool down = (s / ranks) % 2 == 0;
    map[static_cast<size_t>(s)] = (style == StageMapStyle::kLoop || down) ? pos : ranks - 1 - pos;
  }
  return map;
}

// ---------------------------------------------------------------------------------------------
// Families

namespace {

enum class Family : uint8_t {
  kGPipe,
  k1F1B,
  kInterleaved,
  kLoopedBfs,
  kZbH1,
  kZbH2,
  kZbV,
  kDualPipe,
  kDualPipeV
};

struct FamilyInfo {
  Family family;
  const char* name;
  int default_v;
};

constexpr FamilyInfo kFamilies[] = {
    {Family::kGPipe, "gpipe", 1},
    {Family::k1F1B, "1f1b", 1},
    {Family::kInterleaved, "interleaved-1f1b", 2},
    {Family::kLoopedBfs, "looped-bfs", 2},
    {Family::kZbH1, "zb-h1", 1},
    {Family::kZbH2, "zb-h2", 1},
    {Family::kZbV, "zb-v", 2},
    {Family::kDualPipe, "dualpipe", 2},
    {Family::kDualPipeV, "dualpipev", 2},
};

const FamilyInfo& info(Family f) {
  return kFamilies[static_cast<size_t>(f)];
}

// Lower case, without '-', '_', '.', ' ' and a leading "schedule" (torch class names).
std::string normalize_family(std::string_view name) {
  std::string s;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.' || c == ' ') continue;
    s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (s.starts_with("schedule") && s.size() > 8) s.erase(0, 8);
  return s;
}

std::optional<Family> parse_family(std::string_view name) {
  static const std::map<std::string, Family> kAliases = {
      {"gpipe", Family::kGPipe},
      {"1f1b", Family::k1F1B},
      {"interleaved1f1b", Family::kInterleaved},
      {"interleaved", Family::kInterleaved},
      {"loopedbfs", Family::kLoopedBfs},
      {"bfs", Family::kLoopedBfs},
      {"zbh1", Family::kZbH1},
      {"zb1p", Family::kZbH1},
      {"interleavedzerobubble", Family::kZbH1},
      {"zerobubble", Family::kZbH1},  // Piper's harness name for torch's ZB1P
      {"zbh2", Family::kZbH2},
      {"zb2p", Family::kZbH2},
      {"zbv", Family::kZbV},
      {"zbvzerobubble", Family::kZbV},
      {"dualpipe", Family::kDualPipe},
      {"dualpipev", Family::kDualPipeV},
  };
  auto it = kAliases.find(normalize_family(name));
  if (it == kAliases.end()) return std::nullopt;
  return it->second;
}

Diagnostic make_error(std::string message, std::string hint = {}) {
  Diagnostic d;
  d.message = std::move(message);
  d.hint = std::move(hint);
  return d;
}

// Per-rank emitter: per-stage ascending microbatch counters (spec §2 "Each stage keeps its own
// ascending microbatch counters"), an optional microbatch offset per stage (DualPipe's second
// direction) and the FIFO of pending weight gradients.
class RankEmitter {
 public:
  RankEmitter(std::vector<Slot>& out, int stages)
      : out_(out),
        f_(static_cast<size_t>(stages), 0),
        b_(static_cast<size_t>(stages), 0),
        offset_(static_cast<size_t>(stages), 0) {}

  void set_offset(int stage, int off) { offset_[idx(stage)] = off; }
  void idle(int n) {
    for (int i = 0; i < n; ++i) out_.push_back(Slot::idle());
  }
  Action next_f(int s) { return {ActionKind::kF, s, offset_[idx(s)] + f_[idx(s)]++}; }
  // A backward (B or I) takes the stage's next backward microbatch; an I queues its W.
  Action next_back(int s, ActionKind k) {
    Action a{k, s, offset_[idx(s)] + b_[idx(s)]++};
    if (k == ActionKind::kI) pending_w_.push_back({ActionKind::kW, s, a.mb});
    return a;
  }
  void f(int s) { out_.push_back(Slot::single(next_f(s))); }
  void back(int s, ActionKind k) { out_.push_back(Slot::single(next_back(s, k))); }
  void pair(int fs, int bs) {
    Action fa = next_f(fs);
    Action ba = next_back(bs, ActionKind::kB);
    out_.push_back(Slot::overlap(fa, ba));
  }
  // Emits the oldest pending W; nothing when none is pending (DeepSeek/torch skip silently).
  void pop_w() {
    if (pending_w_.empty()) return;
    out_.push_back(Slot::single(pending_w_.front()));
    pending_w_.pop_front();
  }
  void flush_w() {
    while (!pending_w_.empty()) pop_w();
  }

 private:
  static size_t idx(int s) { return static_cast<size_t>(s); }
  std::vector<Slot>& out_;
  std::vector<int> f_, b_, offset_;
  std::deque<Action> pending_w_;
};

void init_schedule(PipelineSchedule& s, Family fam, int p, int v, int stages, int m,
                   StageMapStyle style) {
  s.family = info(fam).name;
  s.ranks = p;
  s.stages_per_rank = v;
  s.stages = stages;
  s.microbatches = m;
  s.stage_to_rank = stage_to_rank_map(style, p, stages);
  s.per_rank.assign(static_cast<size_t>(p), {});
}

// §2.1 torch ScheduleGPipe: F0..F(m-1) then B0..B(m-1) in *ascending* order (spec §7.2: torch's
// LoopedBFS and d9d's gpipe run them descending; we follow torch's GPipe class).
void build_gpipe(PipelineSchedule& s, bool pad) {
  const int p = s.ranks, m = s.microbatches;
  for (int r = 0; r < p; ++r) {
    RankEmitter e(s.per_rank[static_cast<size_t>(r)], s.stages);
    if (pad) e.idle(r);
    for (int i = 0; i < m; ++i) e.f(r);
    if (pad) e.idle(3 * (p - 1 - r));
    for (int i = 0; i < m; ++i) e.back(r, ActionKind::kB);
  }
}

// §2.2 torch Schedule1F1B: warm-up min(p-1-r, m) forwards, then "next F, oldest B" until all
// forwards are issued, then the remaining backwards.
void build_1f1b(PipelineSchedule& s, bool pad) {
  const int p = s.ranks, m = s.microbatches;
  for (int r = 0; r < p; ++r) {
    RankEmitter e(s.per_rank[static_cast<size_t>(r)], s.stages);
    const int warm = std::min(p - 1 - r, m);
    if (pad) e.idle(r);
    for (int i = 0; i < warm; ++i) e.f(r);
    if (pad) e.idle(2 * (p - 1 - r));
    int fwd = warm, bwd = 0;
    while (fwd < m) {
      e.f(r);
      ++fwd;
      e.back(r, ActionKind::kB);
      ++bwd;
    }
    for (; bwd < m; ++bwd) {
      if (pad) e.idle(1);
      e.back(r, ActionKind::kB);
    }
  }
}

// §2.3 / §2.5 / ZB-H2: the interleaved skeleton shared by torch's ScheduleInterleaved1F1B
// (warm-up factor 2, full B) and ScheduleInterleavedZeroBubble (factor 1, I + FIFO of W).
//   rounds = max(1, m div p), mpr = m div rounds;
//   warm-up = min((v-1)*mpr + factor*(p-1-r), m*v);
//   op k: warm-up -> F; steady -> F then backward; cool-down -> backward;
//   F of op k on local chunk (k div mpr) mod v; backward of op k on chunk
//   v-1 - ((k - warm-up) div mpr) mod v.
//   Zero bubble: after the backward of op k, pop one W if (k - warm-up) >= lag (ZB1P: lag = r);
//   flush the FIFO at the end.
//
// ZB-H2 (spec §6 describes it only in words; this is our precise rule, v = 1 only): the
// zero-bubble skeleton with the warm-up factor 2 of interleaved 1F1B, so rank r issues 2(p-r)-1
// forwards before its first I, and a W lag of 2r instead of r, so 2r weight passes move to the
// tail (rank p-1 ends with 2p-1 of them). Every rank then holds exactly
// 2(p-r)-1 + 2r = 2p-1 microbatches in flight (F done, W not yet), and for m >= 2p-1 the layout
// is the ZB paper's parallelogram: under F = I = W no rank idles between its first and last op,
// the makespan is the single-iteration bound m(F+I+W) + (p-1)F (also for I > W, where ZB-H1
// needs (p-1)(F+I-W)), and rank 0's idle time is (p-1)(F+I-2W) (checked in tests/builders).
void build_skeleton(PipelineSchedule& s, int factor, bool zero_bubble, int lag_per_rank, bool pad) {
  const int p = s.ranks, v = s.stages_per_rank, m = s.microbatches;
  const int rounds = std::max(1, m / p);
  const int mpr = m / rounds;
  const int total = m * v;
  for (int r = 0; r < p; ++r) {
    RankEmitter e(s.per_rank[static_cast<size_t>(r)], s.stages);
    const int warm = std::min((v - 1) * mpr + factor * (p - 1 - r), total);
    auto fwd_stage = [&](int k) { return ((k / mpr) % v) * p + r; };
    auto bwd_stage = [&](int k) { return (v - 1 - ((k - warm) / mpr) % v) * p + r; };
    // torch's grid: r idle slots first; after the warm-up, enough idle slots to line the first
    // backward up (zero bubble: p-1-r); one idle slot before each cool-down B (not for ZB).
    const int post_warm =
        zero_bubble ? p - 1 - r : std::max(0, (v * p + 2 * (p - 1 - r)) - (warm + r));
    const ActionKind back_kind = zero_bubble ? ActionKind::kI : ActionKind::kB;
    auto backward = [&](int k) {
      e.back(bwd_stage(k), back_kind);
      if (zero_bubble && k - warm >= lag_per_rank * r) e.pop_w();
    };
    if (pad) e.idle(r);
    for (int k = 0; k < total + warm; ++k) {
      if (k < warm) {
        e.f(fwd_stage(k));
        if (pad && k == warm - 1) e.idle(post_warm);
      } else if (k < total) {
        e.f(fwd_stage(k));
        backward(k);
      } else {
        if (pad && !zero_bubble) e.idle(1);
        backward(k);
      }
    }
    e.flush_w();
  }
}

// §2.4 torch ScheduleLoopedBFS: all forwards of each local stage (ascending stages), then all
// backwards of each local stage (descending stages, descending microbatches).
void build_looped_bfs(PipelineSchedule& s, bool pad) {
  const int p = s.ranks, v = s.stages_per_rank, m = s.microbatches;
  for (int r = 0; r < p; ++r) {
    auto& out = s.per_rank[static_cast<size_t>(r)];
    if (pad) out.insert(out.end(), static_cast<size_t>(r), Slot::idle());
    for (int c = 0; c < v; ++c)
      for (int i = 0; i < m; ++i) out.push_back(Slot::single({ActionKind::kF, c * p + r, i}));
    if (pad) out.insert(out.end(), static_cast<size_t>(2 * (p - 1 - r)), Slot::idle());
    for (int c = v - 1; c >= 0; --c)
      for (int i = m - 1; i >= 0; --i) out.push_back(Slot::single({ActionKind::kB, c * p + r, i}));
  }
}

// §2.6 torch ScheduleZBVZeroBubble. V map, s0 = r, s1 = 2p-1-r; built for n = max(2p-1, m)
// microbatches, then every action of a microbatch >= m is dropped (torch turns it into an idle
// slot, which we keep only with torch padding).
void build_zbv(PipelineSchedule& s, bool pad) {
  const int p = s.ranks, m = s.microbatches;
  const int n = std::max(2 * p - 1, m);
  for (int r = 0; r < p; ++r) {
    std::vector<Action> ops;
    const int s0 = r, s1 = 2 * p - 1 - r;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    auto push = [&](ActionKind k, int st, int mb) { ops.push_back({k, st, mb}); };
    for (int i = 0; i < 2 * (p - r) - 1; ++i) push(ActionKind::kF, s0, f0++);  // 1.
    for (int i = 0; i < r; ++i) {                                              // 2.
      push(ActionKind::kF, s1, f1++);
      push(ActionKind::kF, s0, f0++);
    }
    for (int i = 0; i < p - r; ++i) {  // 3.
      push(ActionKind::kF, s1, f1++);
      push(ActionKind::kI, s1, b1);
      push(ActionKind::kW, s1, b1++);
    }
    while (f1 < f0 || f0 < n) {  // 4. steady
      if (f0 < n) push(ActionKind::kF, s0, f0++);
      push(ActionKind::kI, s0, b0);
      push(ActionKind::kW, s0, b0++);
      push(ActionKind::kF, s1, f1++);
      push(ActionKind::kI, s1, b1);
      push(ActionKind::kW, s1, b1++);
    }
    int w0 = b0, w1 = b1;
    for (int i = 0; i < r; ++i) {  // 5. W deferred
      push(ActionKind::kI, s0, b0++);
      push(ActionKind::kI, s1, b1++);
    }
    for (int i = 0; i < p - r; ++i) {  // 6.
      push(ActionKind::kI, s0, b0++);
      push(ActionKind::kW, s0, w0++);
    }
    while (w1 < b1) push(ActionKind::kW, s1, w1++);  // 7.
    while (w0 < b0) push(ActionKind::kW, s0, w0++);
    STRETTO_ASSERT(f0 == n && f1 == n && b0 == n && b1 == n && w0 == n && w1 == n,
                   "ZB-V emits n of every kind per stage");
    auto& out = s.per_rank[static_cast<size_t>(r)];
    if (pad) out.insert(out.end(), static_cast<size_t>(r), Slot::idle());
    for (const Action& a : ops) {
      if (a.mb < m)
        out.push_back(Slot::single(a));
      else if (pad)
        out.push_back(Slot::idle());
    }
  }
}

// §2.7 DeepSeek DualPipeV / torch ScheduleDualPipeV, for one rank of a V with `P` ranks:
// `h` is the rank's position (DualPipe: its half rank), s0 its down-leg stage, s1 its up-leg
// stage, `M` the microbatches per stage, `last` whether it is the V's turning rank.
// "I" = backward with zero bubble on (W queued on the rank's single FIFO), "B" = full backward.
void dualpipe_rank(RankEmitter& e, int P, int h, int M, int s0, int s1, bool last) {
  for (int i = 0; i < 2 * (P - h - 1); ++i) e.f(s0);  // 1. nF0
  for (int i = 0; i < h + 1; ++i) {                   // 2. nF0F1
    e.f(s0);
    e.f(s1);
  }
  for (int i = 0; i < P - h - 1; ++i) {  // 3. nI1W1F1 (zero bubble)
    e.back(s1, ActionKind::kI);
    e.pop_w();
    e.f(s1);
  }
  for (int i = 0; i < M - 2 * P + h + 1; ++i) {  // 4. main: (F0;B1) (F1;B0)
    if (i == 0 && last) {
      // The turning rank does not overlap its first pair (shorter bubble, as DeepSeek/torch).
      e.f(s0);
      e.back(s1, ActionKind::kB);
    } else {
      e.pair(s0, s1);
    }
    e.pair(s1, s0);
  }
  for (int i = 0; i < P - h - 1; ++i) {  // 5. nB1 (F1;B0)
    e.back(s1, ActionKind::kB);
    e.pair(s1, s0);
  }
  bool zb = false;  // 6. nB1B0, zero bubble switched on half-way
  const int step6 = h + 1;
  for (int i = 0; i < step6; ++i) {
    if (i == step6 / 2 && h % 2 == 1) zb = true;
    e.back(s1, zb ? ActionKind::kI : ActionKind::kB);
    if (i == step6 / 2 && h % 2 == 0) zb = true;
    e.back(s0, zb ? ActionKind::kI : ActionKind::kB);
  }
  for (int i = 0; i < P - h - 1; ++i) {  // 7. nWI0 (zb is on after step 6)
    e.pop_w();
    e.back(s0, ActionKind::kI);
  }
  for (int i = 0; i < h + 1; ++i) e.pop_w();  // 8. nW
  e.flush_w();  // no-op for valid parameters; keeps every I matched with a W
}

void build_dualpipev(PipelineSchedule& s) {
  const int p = s.ranks, m = s.microbatches;
  for (int r = 0; r < p; ++r) {
    RankEmitter e(s.per_rank[static_cast<size_t>(r)], s.stages);
    dualpipe_rank(e, p, r, m, r, 2 * p - 1 - r, r == p - 1);
  }
}

// DeepSeek's bidirectional DualPipe (§2.7 last paragraph): the same 8 steps with P = p/2 and the
// half rank h = min(r, p-1-r). Stage k of direction 0 (microbatches [0, m/2)) runs on rank k;
// stage k of direction 1 (microbatches [m/2, m)) runs on rank p-1-k. A rank's "chunk 0" is the
// stage at pipeline position h of the direction that enters at its end of the pipe (direction 0
// for the first half of the ranks, direction 1 for the second), its "chunk 1" the stage at
// position p-1-h of the other direction (DeepSeek swaps the phases on the second half).
void build_dualpipe(PipelineSchedule& s) {
  const int p = s.ranks, m = s.microbatches;
  const int P = p / 2, M = m / 2;
  for (int r = 0; r < p; ++r) {
    RankEmitter e(s.per_rank[static_cast<size_t>(r)], s.stages);
    const int h = std::min(r, p - 1 - r);
    const bool first_half = r < P;
    const int s0 = h, s1 = p - 1 - h;
    e.set_offset(s0, first_half ? 0 : M);
    e.set_offset(s1, first_half ? M : 0);
    dualpipe_rank(e, P, h, M, s0, s1, h == P - 1);
  }
}

std::string valid_microbatch_hint(int p, int m) {
  // Nearest m' with m' mod max(1, m' div p) == 0 below and above m.
  auto ok = [p](int x) { return x > 0 && x % std::max(1, x / p) == 0; };
  int lo = m - 1, hi = m + 1;
  while (lo > 0 && !ok(lo)) --lo;
  while (!ok(hi)) ++hi;
  if (lo > 0) return fmt::format("use {} or {} microbatches", lo, hi);
  return fmt::format("use {} microbatches", hi);
}

// A parameter a family refuses: its name ("builder", "ranks", "stages_per_rank",
// "microbatches", so that callers can point at it), the message and the hint.
struct BadParam {
  const char* param;
  std::string message, hint;
};

// The family, and v resolved (<= 0: the family's default), or what is wrong with p, v, m: every
// constraint the builders enforce, checked before anything is built.
struct Checked {
  std::optional<Family> fam;
  int v = 0;
  std::optional<BadParam> bad;
};
Checked check_params(std::string_view family_name, int p, int v, int m) {
  Checked c;
  auto bad = [&](const char* param, std::string msg, std::string hint = {}) {
    c.bad = BadParam{param, std::move(msg), std::move(hint)};
    return c;
  };
  c.fam = parse_family(family_name);
  if (!c.fam) {
    std::vector<std::string> names = schedule_family_names();
    std::string near = nearest(normalize_family(family_name), names);
    std::string hint = near.empty() ? fmt::format("known schedules: {}", fmt::join(names, ", "))
                                    : fmt::format("did you mean '{}'?", near);
    return bad("builder", fmt::format("unknown pipeline schedule '{}'", family_name), hint);
  }
  const Family fam = *c.fam;
  const FamilyInfo& fi = info(fam);
  c.v = v = v <= 0 ? fi.default_v : v;
  if (p < 1) return bad("ranks", fmt::format("{} needs at least 1 rank, got {}", fi.name, p));
  if (m < 1)
    return bad("microbatches", fmt::format("{} needs at least 1 microbatch, got {}", fi.name, m));
  // (stage, microbatch) pairs; 2^22 covers a 1024-rank DualPipeV with its 2048 microbatches and
  // keeps every index far from int overflow.
  constexpr int64_t kMaxPairs = int64_t{1} << 22;
  if (p > (1 << 20) || v > (1 << 10) || m > (1 << 22) ||
      static_cast<int64_t>(p) * v * m > kMaxPairs)
    return bad("microbatches",
               fmt::format("{}: {} ranks x {} stages/rank x {} microbatches is too large "
                           "(at most {} stage-microbatch pairs)",
                           fi.name, p, v, m, kMaxPairs));
  switch (fam) {
    case Family::kGPipe:
    case Family::k1F1B:
      if (v != 1)
        return bad("stages_per_rank",
                   fmt::format("{} runs one stage per rank, got {} stages per rank", fi.name, v),
                   fam == Family::kGPipe ? "use looped-bfs for several stages per rank"
                                         : "use interleaved-1f1b for several stages per rank");
      // torch Schedule1F1B rejects m < p (torchtitan#775: it used to hang); Megatron-LM runs it
      // with a warm-up of min(p-1-r, m) forwards (then no steady state: all backwards), which
      // is what build_1f1b does, so we accept it (docs/fidelity.md). GPipe accepts any m.
      break;
    case Family::kInterleaved:
    case Family::kZbH1:
    case Family::kZbH2: {
      if (fam == Family::kZbH2 && v != 1)
        return bad("stages_per_rank",
                   fmt::format("zb-h2 is the ZB paper's single-chunk schedule: it needs 1 "
                               "stage per rank, got {}",
                               v),
                   "use zb-h1 (torch's interleaved zero bubble) for several stages per rank");
      const int rounds = std::max(1, m / p);
      if (m % rounds != 0)
        return bad("microbatches",
                   fmt::format("{} needs the microbatches to be a multiple of the number of "
                               "rounds max(1, m div p) = {}, got m = {}",
                               fi.name, rounds, m),
                   valid_microbatch_hint(p, m));
      break;
    }
    case Family::kLoopedBfs:
      break;
    case Family::kZbV:
    case Family::kDualPipeV:
      if (v != 2)
        return bad("stages_per_rank",
                   fmt::format("{} is a V schedule: it needs exactly 2 stages per rank, got {}",
                               fi.name, v),
                   "use stages_per_rank 2");
      if (fam == Family::kDualPipeV && m < 2 * p)
        return bad("microbatches",
                   fmt::format("dualpipev needs at least as many microbatches as stages "
                               "(2p = {}), got {}",
                               2 * p, m),
                   fmt::format("use at least {} microbatches", 2 * p));
      break;
    case Family::kDualPipe:
      if (v != 2)
        return bad("stages_per_rank",
                   fmt::format("dualpipe holds exactly 2 model chunks per rank (one per "
                               "direction), got {} stages per rank",
                               v),
                   "leave stages_per_rank out, or use 2");
      if (p % 2 != 0)
        return bad("ranks", fmt::format("dualpipe needs an even number of ranks, got {}", p),
                   "use dualpipev for an odd number of ranks");
      if (m % 2 != 0 || m < 2 * p)
        return bad("microbatches",
                   fmt::format("dualpipe needs an even number of microbatches, at least 2p = "
                               "{} (half per direction), got {}",
                               2 * p, m),
                   fmt::format("use {} microbatches", std::max(2 * p, m + (m % 2))));
      break;
  }
  return c;
}

// The builder, with the name of the offending parameter reported through `bad_param`.
Expected<PipelineSchedule> build_impl(std::string_view family_name, int p, int v, int m,
                                      const BuildOptions& opt, std::string* bad_param) {
  const Checked c = check_params(family_name, p, v, m);
  if (c.bad) {
    if (bad_param) *bad_param = c.bad->param;
    return fail(make_error(c.bad->message, c.bad->hint));
  }
  const Family fam = *c.fam;
  v = c.v;
  PipelineSchedule s;
  switch (fam) {
    case Family::kGPipe:
    case Family::k1F1B:
      init_schedule(s, fam, p, 1, p, m, StageMapStyle::kLoop);
      if (fam == Family::kGPipe)
        build_gpipe(s, opt.torch_padding);
      else
        build_1f1b(s, opt.torch_padding);
      break;
    case Family::kInterleaved:
    case Family::kZbH1:
    case Family::kZbH2:
      init_schedule(s, fam, p, v, p * v, m, StageMapStyle::kLoop);
      if (fam == Family::kInterleaved)
        build_skeleton(s, 2, false, 0, opt.torch_padding);
      else if (fam == Family::kZbH1)
        build_skeleton(s, 1, true, 1, opt.torch_padding);
      else
        build_skeleton(s, 2, true, 2, false);  // not a torch schedule: no torch grid to mimic
      break;
    case Family::kLoopedBfs:
      init_schedule(s, fam, p, v, p * v, m, StageMapStyle::kLoop);
      build_looped_bfs(s, opt.torch_padding);
      break;
    case Family::kZbV:
    case Family::kDualPipeV:
      init_schedule(s, fam, p, 2, 2 * p, m, StageMapStyle::kV);
      if (fam == Family::kZbV)
        build_zbv(s, opt.torch_padding);
      else
        build_dualpipev(s);
      break;
    case Family::kDualPipe:
      init_schedule(s, fam, p, 2, p, m, StageMapStyle::kLoop);
      s.bidirectional = true;
      build_dualpipe(s);
      break;
  }
  return s;
}

}  // namespace

const std::vector<std::string>& schedule_family_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> v;
    for (const FamilyInfo& f : kFamilies) v.emplace_back(f.name);
    return v;
  }();
  return kNames;
}

std::optional<Diagnostic> check_schedule(std::string_view family, int ranks, int stages_per_rank,
                                         int microbatches) {
  const Checked c = check_params(family, ranks, stages_per_rank, microbatches);
  if (!c.bad) return std::nullopt;
  return make_error(c.bad->message, c.bad->hint);
}

std::optional<std::string> canonical_family(std::string_view name) {
  auto f = parse_family(name);
  if (!f) return std::nullopt;
  return std::string(info(*f).name);
}

Expected<PipelineSchedule> build_schedule(std::string_view family, int ranks, int stages_per_rank,
                                          int microbatches, const BuildOptions& opt) {
  return build_impl(family, ranks, stages_per_rank, microbatches, opt, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Validation (torch `_validate_schedule`)

Diagnostics validate_schedule(const PipelineSchedule& s, const SlotLocator& locate) {
  Diagnostics out;
  constexpr size_t kMaxDiagnostics = 50;
  auto loc_of = [&](int r, int k) { return locate ? locate(r, k) : SourceLoc{}; };
  auto report = [&](SourceLoc loc, std::string msg, std::string hint = {}) {
    if (out.size() == kMaxDiagnostics) {
      Diagnostic d = make_error("too many problems in the schedule; stopping here");
      out.push_back(std::move(d));
    }
    if (out.size() > kMaxDiagnostics) return;
    Diagnostic d = make_error(std::move(msg), std::move(hint));
    d.loc = std::move(loc);
    out.push_back(std::move(d));
  };

  const int p = s.ranks, S = s.stages, m = s.microbatches;
  if (p <= 0 || S <= 0 || m <= 0) {
    report({}, fmt::format("schedule has {} ranks, {} stages and {} microbatches; all must be "
                           "positive",
                           p, S, m));
    return out;
  }
  if (static_cast<int>(s.per_rank.size()) != p)
    report({}, fmt::format("schedule has {} rank rows, expected {}", s.per_rank.size(), p));
  if (static_cast<int>(s.stage_to_rank.size()) != S) {
    report({},
           fmt::format("stage map has {} entries, expected {} stages", s.stage_to_rank.size(), S));
    return out;
  }
  for (int st = 0; st < S; ++st) {
    const int r = s.stage_to_rank[static_cast<size_t>(st)];
    if (r < 0 || r >= p) {
      report({}, fmt::format("stage {} is mapped to rank {}, but there are {} ranks", st, r, p));
      return out;
    }
  }
  if (s.bidirectional && m % 2 != 0) {
    report({},
           fmt::format("a bidirectional schedule needs an even number of microbatches, got {}", m));
    return out;
  }

  enum : uint8_t { kHasF = 1, kHasB = 2, kHasI = 4, kHasW = 8 };
  std::vector<uint8_t> state(static_cast<size_t>(S) * static_cast<size_t>(m), 0);
  auto at = [&](int st, int mb) -> uint8_t& {
    return state[static_cast<size_t>(st) * static_cast<size_t>(m) + static_cast<size_t>(mb)];
  };
  // Which rank first ran each (stage, direction) -- torch infers the stage map this way -- and
  // whether that (stage, direction) already produced a placement diagnostic. Conflicts are
  // found first so that they are reported as torch does ("assigned to both rank a and rank b")
  // rather than as a mismatch with the stage map.
  std::vector<int> owner(static_cast<size_t>(S) * 2, -1);
  std::vector<char> reported(static_cast<size_t>(S) * 2, 0);
  const int rows = static_cast<int>(s.per_rank.size());
  auto in_range = [&](const Action& a) {
    return a.stage >= 0 && a.stage < S && a.mb >= 0 && a.mb < m;
  };
  auto owner_index = [&](const Action& a) {
    const int dir = (s.bidirectional && a.mb >= m / 2) ? 1 : 0;
    return static_cast<size_t>(a.stage) * 2 + static_cast<size_t>(dir);
  };
  for (int r = 0; r < rows; ++r) {
    const auto& row = s.per_rank[static_cast<size_t>(r)];
    for (int k = 0; k < static_cast<int>(row.size()); ++k)
      for (const Action& a : row[static_cast<size_t>(k)].actions()) {
        if (!in_range(a)) continue;
        const size_t oi = owner_index(a);
        if (owner[oi] < 0) owner[oi] = r;
        if (owner[oi] == r || reported[oi]) continue;
        reported[oi] = 1;
        report(loc_of(r, k),
               fmt::format("rank {}, slot {}: stage {} is assigned to both rank {} and rank {}", r,
                           k, a.stage, owner[oi], r),
               s.bidirectional ? "in a bidirectional schedule each direction of a stage lives on "
                                 "one rank"
                               : "a stage's actions must all be on one rank");
      }
  }

  for (int r = 0; r < rows; ++r) {
    const auto& row = s.per_rank[static_cast<size_t>(r)];
    for (int k = 0; k < static_cast<int>(row.size()); ++k) {
      for (const Action& a : row[static_cast<size_t>(k)].actions()) {
        // Built only when something is reported: this loop runs once per action.
        auto where = [&] { return fmt::format("rank {}, slot {}", r, k); };
        auto what = [&] { return fmt::format("stage {} microbatch {}", a.stage, a.mb); };
        if (a.stage < 0 || a.stage >= S) {
          report(loc_of(r, k), fmt::format("{}: action {} names stage {}, but the schedule has {} "
                                           "stages",
                                           where(), a.str(), a.stage, S));
          continue;
        }
        if (a.mb < 0 || a.mb >= m) {
          report(loc_of(r, k), fmt::format("{}: action {} names microbatch {}, but the schedule "
                                           "has {} microbatches",
                                           where(), a.str(), a.mb, m));
          continue;
        }
        const size_t oi = owner_index(a);
        if (!reported[oi] && s.rank_of(a.stage, a.mb) != r) {
          reported[oi] = 1;
          report(loc_of(r, k), fmt::format("{}: stage {} (microbatch {}) runs on rank {}, but the "
                                           "stage map puts it on rank {}",
                                           where(), a.stage, a.mb, r, s.rank_of(a.stage, a.mb)));
        }
        uint8_t& st = at(a.stage, a.mb);
        switch (a.kind) {
          case ActionKind::kF:
            if (st & kHasF)
              report(loc_of(r, k), fmt::format("{}: second forward of {}", where(), what()));
            st |= kHasF;
            break;
          case ActionKind::kB:
          case ActionKind::kI: {
            const char* name =
                a.kind == ActionKind::kB ? "full backward (B)" : "input backward (I)";
            if (!(st & kHasF))
              report(loc_of(r, k),
                     fmt::format("{}: {} of {} runs before its forward", where(), name, what()),
                     "a backward must come after the forward of the same stage and microbatch");
            if (st & (kHasB | kHasI))
              report(loc_of(r, k), fmt::format("{}: second backward of {}", where(), what()));
            st |= a.kind == ActionKind::kB ? kHasB : kHasI;
            break;
          }
          case ActionKind::kW:
            if (st & kHasB)
              report(loc_of(r, k), fmt::format("{}: weight backward (W) of {} after its full "
                                               "backward (B), which already computed it",
                                               where(), what()));
            else if (!(st & kHasI))
              report(loc_of(r, k),
                     fmt::format("{}: weight backward (W) of {} runs before its input backward (I)",
                                 where(), what()),
                     "W must come after the I of the same stage and microbatch");
            if (st & kHasW)
              report(loc_of(r, k),
                     fmt::format("{}: second weight backward of {}", where(), what()));
            st |= kHasW;
            break;
        }
      }
    }
  }

  // Completeness, one diagnostic per stage and kind of gap, listing the microbatches.
  for (int st = 0; st < S; ++st) {
    std::vector<int> no_f, no_back, no_w;
    for (int mb = 0; mb < m; ++mb) {
      const uint8_t x = at(st, mb);
      if (!(x & kHasF)) no_f.push_back(mb);
      if (!(x & (kHasB | kHasI))) no_back.push_back(mb);
      if ((x & kHasI) && !(x & kHasW)) no_w.push_back(mb);
    }
    auto list = [](const std::vector<int>& v) {
      if (v.size() <= 8) return fmt::format("{}", fmt::join(v, ", "));
      return fmt::format("{}, ... ({} in all)", fmt::join(v.begin(), v.begin() + 8, ", "),
                         v.size());
    };
    const int r = s.stage_to_rank[static_cast<size_t>(st)];
    if (!no_f.empty())
      report(loc_of(r, -1),
             fmt::format("stage {} (rank {}) has {} of {} forwards: microbatch{} {} "
                         "{} no F",
                         st, r, m - static_cast<int>(no_f.size()), m, no_f.size() > 1 ? "es" : "",
                         list(no_f), no_f.size() > 1 ? "have" : "has"));
    if (!no_back.empty())
      report(loc_of(r, -1),
             fmt::format("stage {} (rank {}) is missing backwards: microbatch{} {} {} no B or I",
                         st, r, no_back.size() > 1 ? "es" : "", list(no_back),
                         no_back.size() > 1 ? "have" : "has"));
    if (!no_w.empty())
      report(loc_of(r, -1),
             fmt::format("stage {} (rank {}) is missing weight backwards: microbatch{} {} {} an I "
                         "but no W",
                         st, r, no_w.size() > 1 ? "es" : "", list(no_w),
                         no_w.size() > 1 ? "have" : "has"),
             "every I needs a W of the same stage and microbatch (or use B)");
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Directives

namespace {

int max_stages_per_rank_impl(const PipelineSchedule& s) {
  std::vector<int> stamp(static_cast<size_t>(std::max(s.stages, 0)), -1);
  int v = 1;
  for (size_t r = 0; r < s.per_rank.size(); ++r) {
    int n = 0;
    for (const Slot& sl : s.per_rank[r])
      for (const Action& a : sl.actions())
        if (a.stage >= 0 && a.stage < s.stages &&
            stamp[static_cast<size_t>(a.stage)] != static_cast<int>(r)) {
          stamp[static_cast<size_t>(a.stage)] = static_cast<int>(r);
          ++n;
        }
    v = std::max(v, n);
  }
  return v;
}

TagCond eq(int x) {
  TagCond c;
  c.kind = TagCond::kEquals;
  c.value = x;
  return c;
}

TagCond& cond(Filter& f, TagKey k) {
  return f.cond[static_cast<size_t>(k)];
}
const TagCond& cond(const Filter& f, TagKey k) {
  return f.cond[static_cast<size_t>(k)];
}

Filter action_filter(const Action& a) {
  Filter f;
  cond(f, TagKey::kPP) = eq(a.stage);
  cond(f, TagKey::kMB) = eq(a.mb);
  f.pass = action_kind_pass(a.kind);
  return f;
}

std::string devices_str(const std::vector<int>& d) {
  return fmt::format("[{}]", fmt::join(d, ","));
}

// A place directive that places stage `s` as a whole (no MB/EP/LAYER/PASS condition).
bool places_whole_stage(const Directive& d, int s) {
  if (d.op != DirectiveOp::kPlace || d.filter.pass) return false;
  for (TagKey k : {TagKey::kMB, TagKey::kEP, TagKey::kLayer})
    if (cond(d.filter, k).kind != TagCond::kAny) return false;
  return cond(d.filter, TagKey::kPP).matches(s);
}

bool places_any_whole_stage(const Directive& d) {
  if (d.op != DirectiveOp::kPlace || d.filter.pass) return false;
  for (TagKey k : {TagKey::kMB, TagKey::kEP, TagKey::kLayer})
    if (cond(d.filter, k).kind != TagCond::kAny) return false;
  return cond(d.filter, TagKey::kPP).kind != TagCond::kAbsentOnly;
}

// Index of the last base directive that places stage `s` as a whole, or -1.
int base_place_of(const std::vector<Directive>& base, int s) {
  int found = -1;
  for (size_t i = 0; i < base.size(); ++i)
    if (places_whole_stage(base[i], s)) found = static_cast<int>(i);
  return found;
}

Directive new_directive(DirectiveOp op) {
  Directive d;
  d.op = op;
  return d;
}

// Gives generated directive i its index and pointers: "/schedule/i/..." or, for a builder call,
// the call's own pointer (the user's file has no directive there).
void number_generated(Directive& d, int index, const std::string& origin) {
  d.index = index;
  d.pointer = origin.empty() ? fmt::format("/schedule/{}", index) : origin;
  if (d.op == DirectiveOp::kOrder) {
    for (size_t g = 0; g < d.groups.size(); ++g)
      for (size_t j = 0; j < d.groups[g].size(); ++j)
        d.groups[g][j].pointer = d.pointer;  // one string per filter would dominate big plans
  } else {
    d.filter.pointer = origin.empty() ? d.pointer + "/filter" : origin;
  }
}

Expected<std::vector<Directive>> to_directives_impl(const PipelineSchedule& s,
                                                    const std::vector<Directive>& base,
                                                    const std::string& origin) {
  if (Diagnostics ds = validate_schedule(s); !ds.empty()) return fail(std::move(ds));
  const int p = s.ranks, S = s.stages, m = s.microbatches;
  Diagnostics errs;

  // Device list of every schedule rank.
  std::vector<std::vector<int>> rank_devices(static_cast<size_t>(p));
  std::vector<int> rank_source(static_cast<size_t>(p), -1);  // base directive that set it
  std::vector<int> rank_source_stage(static_cast<size_t>(p), -1);
  std::vector<char> stage_placed(static_cast<size_t>(S), 0);
  if (!s.bidirectional) {
    for (int st = 0; st < S; ++st) {
      const int di = base_place_of(base, st);
      if (di < 0) continue;
      stage_placed[static_cast<size_t>(st)] = 1;
      const int r = s.stage_to_rank[static_cast<size_t>(st)];
      const auto& devs = base[static_cast<size_t>(di)].devices;
      if (rank_source[static_cast<size_t>(r)] < 0) {
        rank_devices[static_cast<size_t>(r)] = devs;
        rank_source[static_cast<size_t>(r)] = di;
        rank_source_stage[static_cast<size_t>(r)] = st;
      } else if (rank_devices[static_cast<size_t>(r)] != devs) {
        Diagnostic d = make_error(
            fmt::format(
                "stage {} is placed on devices {} by directive {}, but stage {} of the same "
                "schedule rank {} is placed on devices {} by directive {}",
                st, devices_str(devs), base[static_cast<size_t>(di)].index,
                rank_source_stage[static_cast<size_t>(r)], r,
                devices_str(rank_devices[static_cast<size_t>(r)]),
                base[static_cast<size_t>(rank_source[static_cast<size_t>(r)])].index),
            fmt::format("the {} schedule runs stages {} and {} on one rank; place them on the same "
                        "devices",
                        s.family, rank_source_stage[static_cast<size_t>(r)], st));
        d.directive = base[static_cast<size_t>(di)].index;
        d.loc.json_pointer = base[static_cast<size_t>(di)].pointer;
        errs.push_back(std::move(d));
      }
    }
  } else {
    // DualPipe: the base's whole-stage place of PP=r names rank r's devices.
    for (int r = 0; r < p && r < S; ++r) {
      const int di = base_place_of(base, r);
      if (di < 0) continue;
      rank_devices[static_cast<size_t>(r)] = base[static_cast<size_t>(di)].devices;
      rank_source[static_cast<size_t>(r)] = di;
    }
  }
  for (int r = 0; r < p; ++r)
    if (rank_source[static_cast<size_t>(r)] < 0) rank_devices[static_cast<size_t>(r)] = {r};

  // Two schedule ranks on one device would merge two rank orders into one device program.
  std::map<int, int> device_owner;
  for (int r = 0; r < p && errs.empty(); ++r) {
    for (int dev : rank_devices[static_cast<size_t>(r)]) {
      auto [it, inserted] = device_owner.emplace(dev, r);
      if (!inserted && it->second != r) {
        Diagnostic d = make_error(
            fmt::format("schedule ranks {} and {} would both run on device {}", it->second, r, dev),
            "place the stages of different schedule ranks on disjoint devices (in the base, place "
            "every pipeline stage or none)");
        const int src = rank_source[static_cast<size_t>(r)] >= 0
                            ? rank_source[static_cast<size_t>(r)]
                            : rank_source[static_cast<size_t>(it->second)];
        if (src >= 0) {
          d.directive = base[static_cast<size_t>(src)].index;
          d.loc.json_pointer = base[static_cast<size_t>(src)].pointer;
        }
        errs.push_back(std::move(d));
        break;
      }
    }
  }

  // A split in the base must agree; it then replaces ours.
  bool base_has_split = false;
  for (const Directive& d : base) {
    if (d.op != DirectiveOp::kSplit) continue;
    base_has_split = true;
    if (d.num_microbatches != m) {
      Diagnostic e =
          make_error(fmt::format("the base splits into {} microbatches, but the schedule has {}",
                                 d.num_microbatches, m),
                     "drop the split from the base; the builder adds it");
      e.directive = d.index;
      e.loc.json_pointer = d.pointer;
      errs.push_back(std::move(e));
    }
  }
  if (!errs.empty()) return fail(std::move(errs));

  std::vector<Directive> out;
  for (const Directive& d : base)
    if (!(s.bidirectional && places_any_whole_stage(d))) out.push_back(d);
  const size_t first_generated = out.size();
  // A directive's index is its position in the schedule (the compiler looks directives up by
  // it): DualPipe drops the base's whole-stage places, so the base directives after them move.
  for (size_t i = 0; i < first_generated; ++i) out[i].index = static_cast<int>(i);

  Directive split = new_directive(DirectiveOp::kSplit);
  split.dim_name = "MB";
  split.num_microbatches = m;
  auto place = [&](Filter f, int r) {
    Directive d = new_directive(DirectiveOp::kPlace);
    d.filter = std::move(f);
    d.devices = rank_devices[static_cast<size_t>(r)];
    d.stream = "pp";
    out.push_back(std::move(d));
  };
  if (!s.bidirectional) {
    for (int st = 0; st < S; ++st) {
      if (stage_placed[static_cast<size_t>(st)]) continue;
      Filter f;
      cond(f, TagKey::kPP) = eq(st);
      place(std::move(f), s.stage_to_rank[static_cast<size_t>(st)]);
    }
    if (!base_has_split) out.push_back(split);
  } else {
    // MB exists only after the split, so the per-direction places follow it.
    if (!base_has_split) out.push_back(split);
    for (int st = 0; st < S; ++st)
      for (int mb = 0; mb < m; ++mb) {
        Filter f;
        cond(f, TagKey::kPP) = eq(st);
        cond(f, TagKey::kMB) = eq(mb);
        place(std::move(f), s.rank_of(st, mb));
      }
  }
  for (int r = 0; r < p; ++r) {
    Directive d = new_directive(DirectiveOp::kOrder);
    for (const Slot& slot : s.per_rank[static_cast<size_t>(r)]) {
      if (slot.is_idle()) continue;
      std::vector<Filter> group;
      for (const Action& a : slot.actions()) group.push_back(action_filter(a));
      d.groups.push_back(std::move(group));
    }
    if (d.groups.size() >= 2) out.push_back(std::move(d));
  }
  for (size_t i = first_generated; i < out.size(); ++i)
    number_generated(out[i], static_cast<int>(i), origin);
  return out;
}

}  // namespace

Expected<std::vector<Directive>> schedule_to_directives(const PipelineSchedule& s,
                                                        const std::vector<Directive>& base) {
  return to_directives_impl(s, base, "");
}

Expected<PipelineSchedule> schedule_from_directives(const std::vector<Directive>& ds) {
  Diagnostics errs;
  auto err_at = [&](const Directive& d, std::string msg, std::string hint = {},
                    const std::string& pointer = {}) {
    Diagnostic e = make_error(std::move(msg), std::move(hint));
    e.directive = d.index;
    e.loc.json_pointer = pointer.empty() ? d.pointer : pointer;
    errs.push_back(std::move(e));
  };

  // Microbatches.
  int m = 0;
  for (const Directive& d : ds)
    if (d.op == DirectiveOp::kSplit) m = d.num_microbatches;
  if (m <= 0) {
    Diagnostic e = make_error("no split directive: the number of microbatches is unknown",
                              "add {\"op\":\"split\",\"filter\":{},\"dim_name\":\"MB\","
                              "\"num_microbatches\":M}");
    return fail(std::move(e));
  }

  // Orders -> slots (rank resolved later).
  struct RankOrder {
    const Directive* d;
    std::vector<Slot> slots;
  };
  std::vector<RankOrder> orders;
  int max_stage = -1;
  for (const Directive& d : ds) {
    if (d.op != DirectiveOp::kOrder) continue;
    RankOrder ro{&d, {}};
    bool ok = true;
    for (size_t g = 0; g < d.groups.size() && ok; ++g) {
      std::vector<Action> acts;
      for (const Filter& f : d.groups[g]) {
        const TagCond& pp = cond(f, TagKey::kPP);
        const TagCond& mb = cond(f, TagKey::kMB);
        const bool others_any = cond(f, TagKey::kEP).kind == TagCond::kAny &&
                                cond(f, TagKey::kLayer).kind == TagCond::kAny;
        std::optional<ActionKind> kind = f.pass ? action_kind_from_pass(*f.pass) : std::nullopt;
        if (pp.kind != TagCond::kEquals || mb.kind != TagCond::kEquals || !kind || !others_any) {
          err_at(d,
                 fmt::format("order filter {} does not name one stage, one microbatch and a pass",
                             f.str()),
                 "torch's CSV needs every order group to be {\"PP\":s,\"MB\":i,\"PASS\":...}",
                 f.pointer);
          ok = false;
          break;
        }
        if (pp.value < 0 || mb.value < 0 || mb.value >= m) {
          err_at(d, fmt::format("order filter {} is out of range ({} microbatches)", f.str(), m),
                 {}, f.pointer);
          ok = false;
          break;
        }
        acts.push_back({*kind, pp.value, mb.value});
        max_stage = std::max(max_stage, pp.value);
      }
      if (!ok) break;
      if (acts.size() == 1) {
        ro.slots.push_back(Slot::single(acts[0]));
      } else if (acts.size() == 2 && acts[0].kind == ActionKind::kF &&
                 acts[1].kind == ActionKind::kB) {
        ro.slots.push_back(Slot::overlap(acts[0], acts[1]));
      } else {
        err_at(d,
               fmt::format("order group {} has {} filters; torch's CSV can express one action or "
                           "an overlapped forward + full backward pair",
                           g, acts.size()),
               {}, fmt::format("{}/filters/{}", d.pointer, g));
        ok = false;
      }
    }
    if (ok) orders.push_back(std::move(ro));
  }
  if (!errs.empty()) return fail(std::move(errs));
  if (orders.empty())
    return fail(make_error("no order directive: there is no per-rank order to export"));
  const int S = max_stage + 1;

  // Device list of every (stage, microbatch): the last matching place without a PASS. Places
  // are bucketed by their PP value so that big plans (DualPipe places every (PP, MB)) stay
  // linear in the number of directives.
  std::vector<int> place_of(static_cast<size_t>(S) * static_cast<size_t>(m), -1);
  std::vector<std::vector<int>> by_stage(static_cast<size_t>(S));
  std::vector<int> any_stage;
  for (size_t i = 0; i < ds.size(); ++i) {
    const Directive& d = ds[i];
    if (d.op != DirectiveOp::kPlace || d.filter.pass) continue;
    const TagCond& pp = cond(d.filter, TagKey::kPP);
    if (pp.kind != TagCond::kEquals)
      any_stage.push_back(static_cast<int>(i));
    else if (pp.value >= 0 && pp.value < S)
      by_stage[static_cast<size_t>(pp.value)].push_back(static_cast<int>(i));
  }
  for (int st = 0; st < S; ++st) {
    std::vector<int> cand;  // in directive order: a later place wins
    std::merge(by_stage[static_cast<size_t>(st)].begin(), by_stage[static_cast<size_t>(st)].end(),
               any_stage.begin(), any_stage.end(), std::back_inserter(cand));
    for (int i : cand) {
      const Filter& f = ds[static_cast<size_t>(i)].filter;
      if (!cond(f, TagKey::kPP).matches(st) || !cond(f, TagKey::kEP).matches(plan::kAbsent) ||
          !cond(f, TagKey::kLayer).matches(plan::kAbsent))
        continue;
      const TagCond& mbc = cond(f, TagKey::kMB);
      const size_t row = static_cast<size_t>(st) * static_cast<size_t>(m);
      if (mbc.kind == TagCond::kEquals) {
        if (mbc.value >= 0 && mbc.value < m) place_of[row + static_cast<size_t>(mbc.value)] = i;
      } else {
        for (int mb = 0; mb < m; ++mb)
          if (mbc.matches(mb)) place_of[row + static_cast<size_t>(mb)] = i;
      }
    }
  }
  for (int st = 0; st < S; ++st)
    if (place_of[static_cast<size_t>(st) * static_cast<size_t>(m)] < 0)
      errs.push_back(make_error(fmt::format("stage {} is not placed by any place directive", st),
                                fmt::format("add {{\"op\":\"place\",\"filter\":{{\"PP\":{}}},"
                                            "\"devices\":[...]}}",
                                            st)));
  if (!errs.empty()) return fail(std::move(errs));

  // Ranks = distinct device lists, ordered by first device (then lexicographically).
  std::vector<std::vector<int>> lists;
  std::vector<char> used(ds.size(), 0);
  for (int pi : place_of)
    if (pi >= 0 && !used[static_cast<size_t>(pi)]) {
      used[static_cast<size_t>(pi)] = 1;
      lists.push_back(ds[static_cast<size_t>(pi)].devices);
    }
  std::sort(lists.begin(), lists.end());
  lists.erase(std::unique(lists.begin(), lists.end()), lists.end());
  const int p = static_cast<int>(lists.size());
  std::vector<int> rank_cache(ds.size(), -1);
  auto rank_of_place = [&](int pi) {
    int& r = rank_cache[static_cast<size_t>(pi)];
    if (r < 0) {
      const auto& dv = ds[static_cast<size_t>(pi)].devices;
      r = static_cast<int>(std::lower_bound(lists.begin(), lists.end(), dv) - lists.begin());
    }
    return r;
  };

  PipelineSchedule s;
  s.family = "directives";
  s.ranks = p;
  s.stages = S;
  s.microbatches = m;
  s.stage_to_rank.assign(static_cast<size_t>(S), 0);
  std::vector<int> rank_mb(static_cast<size_t>(S) * static_cast<size_t>(m));
  bool uniform = true;
  for (int st = 0; st < S; ++st)
    for (int mb = 0; mb < m; ++mb) {
      const size_t i = static_cast<size_t>(st) * static_cast<size_t>(m) + static_cast<size_t>(mb);
      if (place_of[i] < 0) {
        errs.push_back(make_error(
            fmt::format("stage {} microbatch {} is not placed by any place directive", st, mb)));
        continue;
      }
      rank_mb[i] = rank_of_place(place_of[i]);
      if (rank_mb[i] != rank_mb[static_cast<size_t>(st) * static_cast<size_t>(m)]) uniform = false;
    }
  if (!errs.empty()) return fail(std::move(errs));
  for (int st = 0; st < S; ++st)
    s.stage_to_rank[static_cast<size_t>(st)] =
        rank_mb[static_cast<size_t>(st) * static_cast<size_t>(m)];
  if (!uniform) {
    // Only DualPipe's two-direction layout is expressible: [0, m/2) on r, [m/2, m) on p-1-r.
    s.bidirectional = true;
    bool ok = m % 2 == 0;
    for (int st = 0; st < S && ok; ++st)
      for (int mb = 0; mb < m && ok; ++mb) {
        const size_t i = static_cast<size_t>(st) * static_cast<size_t>(m) + static_cast<size_t>(mb);
        if (rank_mb[i] != s.rank_of(st, mb)) {
          ok = false;
          const Directive& d = ds[static_cast<size_t>(place_of[i])];
          err_at(d,
                 fmt::format("stage {} microbatch {} is placed on devices {}, which does not fit "
                             "one rank per stage nor DualPipe's two-direction layout",
                             st, mb, devices_str(d.devices)),
                 "place each stage on one device list (or, for dualpipe, microbatches [0, m/2) "
                 "on rank s and [m/2, m) on rank p-1-s)");
        }
      }
    if (!errs.empty()) return fail(std::move(errs));
  }

  s.per_rank.assign(static_cast<size_t>(p), {});
  std::vector<int> order_of_rank(static_cast<size_t>(p), -1);
  for (const RankOrder& ro : orders) {
    const Action& first = ro.slots.front().act[0];
    const int r = s.rank_of(first.stage, first.mb);
    bool ok = true;
    for (const Slot& sl : ro.slots)
      for (const Action& a : sl.actions())
        if (ok && s.rank_of(a.stage, a.mb) != r) {
          ok = false;
          err_at(*ro.d,
                 fmt::format("order mixes ranks: {} runs on rank {} but {} on rank {}", first.str(),
                             r, a.str(), s.rank_of(a.stage, a.mb)),
                 "torch's CSV needs one order directive per rank");
        }
    if (!ok) continue;
    if (order_of_rank[static_cast<size_t>(r)] >= 0) {
      err_at(*ro.d,
             fmt::format("rank {} has two order directives ({} and {})", r,
                         order_of_rank[static_cast<size_t>(r)], ro.d->index),
             "torch's CSV needs one total order per rank");
      continue;
    }
    order_of_rank[static_cast<size_t>(r)] = ro.d->index;
    s.per_rank[static_cast<size_t>(r)] = ro.slots;
  }
  if (!errs.empty()) return fail(std::move(errs));

  s.stages_per_rank = max_stages_per_rank_impl(s);
  if (Diagnostics vs = validate_schedule(s); !vs.empty()) return fail(std::move(vs));
  return s;
}

Expected<std::vector<Directive>> expand_builder(const plan::BuilderCall& call) {
  auto at = [&](Diagnostics ds, const std::string& param) {
    for (Diagnostic& d : ds)
      if (d.loc.json_pointer.empty())
        d.loc.json_pointer = param.empty() ? call.pointer : call.pointer + "/" + param;
    return fail(std::move(ds));
  };
  const std::optional<Family> fam = parse_family(call.builder);
  int p = call.layout ? call.layout->pp : call.ranks;
  if (p <= 0) {
    // Infer from the base: the distinct device lists of whole-stage places.
    std::set<std::vector<int>> lists;
    for (const Directive& d : call.base)
      if (places_any_whole_stage(d)) lists.insert(d.devices);
    p = static_cast<int>(lists.size());
    if (p == 0 && fam) {
      Diagnostic d = make_error(
          fmt::format("builder '{}' needs \"ranks\" (or a base that places the pipeline stages)",
                      call.builder),
          "add \"ranks\": P");
      return at({std::move(d)}, "");
    }
  }
  int v = call.stages_per_rank;
  if (fam && (*fam == Family::kZbV || *fam == Family::kDualPipe || *fam == Family::kDualPipeV) &&
      v == 1)
    v = 0;
  std::string bad_param;
  auto sched = build_impl(call.builder, p, v, call.microbatches, {}, &bad_param);
  if (!sched) return at(std::move(sched.error()), bad_param);
  std::vector<Directive> base = call.base;
  if (call.layout) {
    auto gen = layout_base(*call.layout, sched->stage_to_rank, sched->bidirectional,
                           sched->family);
    if (!gen) return at(std::move(gen.error()), "layout");
    base = std::move(*gen);
  } else if (sched->bidirectional) {
    // DualPipe's two directions share each stage on mirrored ranks: data parallelism over
    // them is not modelled, so a base that replicates is refused with the reason.
    for (const Directive& d : base)
      if (d.op == DirectiveOp::kReplicate && d.devices.size() > 1) {
        Diagnostic e = make_error(
            fmt::format("{} with data parallelism (a replicate over {} devices) is not "
                        "supported: DualPipe runs every stage in both directions on mirrored "
                        "ranks, and Stretto does not model the extra gradient reduction between "
                        "a stage's two copies",
                        sched->family, d.devices.size()),
            "use dualpipev (one copy per stage; data parallelism works), or drop the replicate");
        e.directive = d.index;
        e.loc.json_pointer = d.pointer;
        return fail(std::move(e));
      }
  }
  auto ds = to_directives_impl(*sched, base, call.pointer);
  if (!ds) return at(std::move(ds.error()), call.layout ? "layout" : "base");
  return ds;
}

// ---------------------------------------------------------------------------------------------
// Text grid

std::string show_grid(const PipelineSchedule& s) {
  const bool with_stage = s.stages_per_rank > 1 || s.bidirectional || s.stages != s.ranks;
  auto action_text = [&](const Action& a) {
    return with_stage ? a.str() : fmt::format("{}{}", action_kind_char(a.kind), a.mb);
  };
  std::vector<std::vector<std::string>> cells(s.per_rank.size());
  size_t width = 1;
  for (size_t r = 0; r < s.per_rank.size(); ++r)
    for (const Slot& sl : s.per_rank[r]) {
      std::string t;
      if (sl.is_idle())
        t = ".";
      else if (sl.is_overlap())
        t = action_text(sl.act[0]) + "|" + action_text(sl.act[1]);
      else
        t = action_text(sl.act[0]);
      width = std::max(width, t.size());
      cells[r].push_back(std::move(t));
    }
  std::string out = fmt::format("{}: {}, {}/rank, {}{}\n", s.family,
                                count_noun(s.ranks, "rank", "ranks"),
                                count_noun(s.stages_per_rank, "stage", "stages"),
                                count_noun(s.microbatches, "microbatch", "microbatches"),
                                s.bidirectional ? " (bidirectional)" : "");
  const size_t label = fmt::format("r{}", s.per_rank.empty() ? 0 : s.per_rank.size() - 1).size();
  for (size_t r = 0; r < cells.size(); ++r) {
    std::string line = fmt::format("{:<{}} |", fmt::format("r{}", r), label);
    for (const std::string& c : cells[r]) line += fmt::format(" {:<{}}", c, width);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace stretto::pipelines
