// torch.distributed.pipelining CSV import/export and the `_add_send_recv` lowering.
#include "stretto/pipelines/torch_csv.h"

#include "stretto/support/limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <iterator>

namespace stretto::pipelines {

namespace {

struct Cell {
  std::string text;
  uint32_t col = 0;  // 1-based column of the cell's first character
};

// Echoes a CSV line in a diagnostic: a window around the column for long lines.
void echo_line(Diagnostic& d, std::string_view text) {
  uint32_t c = d.loc.col;
  d.source_line = window_line(text, c);
  d.caret_col = c;
}

struct Row {
  std::vector<Cell> cells;
  uint32_t line = 0;
  std::string text;
};

// RFC 4180-ish: ',' separated, optional "quoted" cells with "" escapes, "\n" or "\r\n" ends.
// torch writes with Python's csv module, which never needs quotes for action strings.
std::vector<Row> split_csv(std::string_view text, Diagnostics& errs, const std::string& file) {
  std::vector<Row> rows;
  uint32_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_no;
    Row row;
    row.line = line_no;
    row.text = std::string(line);
    size_t i = 0;
    while (true) {
      Cell c;
      c.col = static_cast<uint32_t>(i + 1);
      if (i < line.size() && line[i] == '"') {
        ++i;
        bool closed = false;
        while (i < line.size()) {
          if (line[i] == '"') {
            if (i + 1 < line.size() && line[i + 1] == '"') {
              c.text.push_back('"');
              i += 2;
              continue;
            }
            ++i;
            closed = true;
            break;
          }
          c.text.push_back(line[i++]);
        }
        if (!closed) {
          Diagnostic d;
          d.message = "unterminated quoted cell";
          d.loc = {file, line_no, c.col, ""};
          echo_line(d, row.text);
          errs.push_back(std::move(d));
        }
        while (i < line.size() && line[i] != ',') c.text.push_back(line[i++]);
      } else {
        while (i < line.size() && line[i] != ',') c.text.push_back(line[i++]);
      }
      row.cells.push_back(std::move(c));
      if (i >= line.size()) break;
      ++i;  // the ','
    }
    // Python's csv reader turns an empty line into an empty row (a rank with no actions).
    if (line.empty()) row.cells.clear();
    rows.push_back(std::move(row));
    pos = end + 1;
  }
  // Blank lines at the end of the file are not ranks.
  while (!rows.empty() && rows.back().cells.empty()) rows.pop_back();
  return rows;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

enum class CellKind : uint8_t { kCompute, kIgnored };

struct ParsedAction {
  CellKind kind = CellKind::kCompute;
  Action action;
};

// "<stage><TYPE>[<mb>]" as torch's regex, but the whole string must match.
std::optional<ParsedAction> parse_action(std::string_view s, std::string& why) {
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0 || i > 6) {
    why = i == 0 ? "it does not start with a stage number" : "stage number too large";
    return std::nullopt;
  }
  const int stage = std::stoi(std::string(s.substr(0, i)));
  static constexpr std::string_view kTypes[] = {"REDUCE_GRAD", "UNSHARD", "RESHARD", "SEND_F",
                                                "RECV_F",      "SEND_B",  "RECV_B",  "F",
                                                "I",           "B",       "W"};
  std::string_view type;
  for (std::string_view t : kTypes)
    if (s.substr(i).starts_with(t)) {
      type = t;
      break;
    }
  if (type.empty()) {
    why = "unknown action type";
    return std::nullopt;
  }
  size_t j = i + type.size();
  const size_t mb_begin = j;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  if (j != s.size()) {
    why = fmt::format("unexpected '{}' after the action", s.substr(j));
    return std::nullopt;
  }
  if (j - mb_begin > 7) {
    why = "microbatch number too large";
    return std::nullopt;
  }
  ParsedAction pa;
  if (type.size() > 1) {  // communication / FSDP / grad-sync: accepted, not a compute slot
    pa.kind = CellKind::kIgnored;
    return pa;
  }
  if (j == mb_begin) {
    why = "a compute action needs a microbatch number";
    return std::nullopt;
  }
  const int mb = std::stoi(std::string(s.substr(mb_begin)));
  const ActionKind k = type == "F"   ? ActionKind::kF
                       : type == "B" ? ActionKind::kB
                       : type == "I" ? ActionKind::kI
                                     : ActionKind::kW;
  pa.action = {k, stage, mb};
  return pa;
}

constexpr const char* kCellHint =
    "expected a torch action such as 2F0, 1B3, 0I1, 0W1, (0F7;7B3)OVERLAP_F_B, or an empty cell";

}  // namespace

Expected<PipelineSchedule> parse_torch_csv(std::string_view text, const std::string& file) {
  Diagnostics errs;
  std::vector<Row> rows = split_csv(text, errs, file);
  if (!errs.empty()) return fail(cap_diagnostics(std::move(errs)));
  if (rows.empty()) {
    Diagnostic d;
    d.message = "empty schedule CSV: expected one row per pipeline rank";
    d.loc.file = file;
    return fail(std::move(d));
  }
  size_t dropped = 0;  // cell errors beyond the cap are only counted
  auto cell_error = [&](const Row& row, const Cell& c, std::string msg, std::string hint = {}) {
    if (errs.size() >= kMaxDiagnostics) {
      ++dropped;
      return;
    }
    Diagnostic d;
    d.message = std::move(msg);
    d.hint = std::move(hint);
    d.loc = {file, row.line, c.col, ""};
    echo_line(d, row.text);
    errs.push_back(std::move(d));
  };

  PipelineSchedule s;
  s.family = "torch-csv";
  const int p = static_cast<int>(rows.size());
  s.ranks = p;
  s.per_rank.assign(static_cast<size_t>(p), {});
  std::vector<std::vector<uint32_t>> cols(static_cast<size_t>(p));  // column of every slot
  for (int r = 0; r < p; ++r) {
    const Row& row = rows[static_cast<size_t>(r)];
    for (const Cell& c : row.cells) {
      const std::string_view t = trim(c.text);
      std::string why;
      if (t.empty()) {
        s.per_rank[static_cast<size_t>(r)].push_back(Slot::idle());
        cols[static_cast<size_t>(r)].push_back(c.col);
        continue;
      }
      if (t.front() == '(') {
        const size_t close = t.find(')');
        if (close == std::string_view::npos || t.substr(close + 1) != "OVERLAP_F_B") {
          cell_error(row, c, fmt::format("invalid overlapped action '{}'", t),
                     "expected (<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B");
          continue;
        }
        std::vector<Action> subs;
        bool ok = true;
        std::string_view inner = t.substr(1, close - 1);
        while (ok) {
          const size_t semi = inner.find(';');
          const std::string_view part = trim(inner.substr(0, semi));
          auto pa = parse_action(part, why);
          if (!pa || pa->kind != CellKind::kCompute) {
            cell_error(row, c,
                       fmt::format("invalid sub-action '{}' in '{}'{}", part, t,
                                   pa ? ": only compute actions can overlap" : ": " + why),
                       kCellHint);
            ok = false;
            break;
          }
          subs.push_back(pa->action);
          if (semi == std::string_view::npos) break;
          inner.remove_prefix(semi + 1);
        }
        if (!ok) continue;
        if (subs.size() != 2 || subs[0].kind != ActionKind::kF || subs[1].kind != ActionKind::kB) {
          cell_error(row, c,
                     fmt::format("'{}': OVERLAP_F_B must hold a forward then a full backward", t),
                     "expected (<stage>F<mb>;<stage>B<mb>)OVERLAP_F_B");
          continue;
        }
        s.per_rank[static_cast<size_t>(r)].push_back(Slot::overlap(subs[0], subs[1]));
        cols[static_cast<size_t>(r)].push_back(c.col);
        continue;
      }
      auto pa = parse_action(t, why);
      if (!pa) {
        cell_error(row, c, fmt::format("invalid action '{}': {}", t, why), kCellHint);
        continue;
      }
      if (pa->kind == CellKind::kIgnored) continue;
      s.per_rank[static_cast<size_t>(r)].push_back(Slot::single(pa->action));
      cols[static_cast<size_t>(r)].push_back(c.col);
    }
  }
  if (dropped > 0) {
    Diagnostic d;
    d.severity = Severity::kNote;
    d.loc.file = file;
    d.message = fmt::format("... and {} more invalid cells (not shown)", fmt::group_digits(dropped));
    d.hint = "fix the first ones and run again";
    errs.push_back(std::move(d));
  }
  if (!errs.empty()) return fail(std::move(errs));

  auto slot_loc = [&](int r, int k) {
    const Row& row = rows[static_cast<size_t>(r)];
    SourceLoc loc{file, row.line, 1, ""};  // a row-level problem points at the row's start
    if (k >= 0 && k < static_cast<int>(cols[static_cast<size_t>(r)].size()))
      loc.col = cols[static_cast<size_t>(r)][static_cast<size_t>(k)];
    return loc;
  };
  auto diag_at = [&](int r, int k, std::string msg, std::string hint = {}) {
    Diagnostic d;
    d.message = std::move(msg);
    d.hint = std::move(hint);
    d.loc = slot_loc(r, k);
    echo_line(d, rows[static_cast<size_t>(r)].text);
    return d;
  };

  // Sizes, then stage -> rank as torch infers it: the row that holds the stage's actions.
  int S = 0, m = 0;
  for (int r = 0; r < p; ++r)
    for (const Action& a : s.compute_order(r)) {
      S = std::max(S, a.stage + 1);
      m = std::max(m, a.mb + 1);
    }
  if (S == 0) {
    Diagnostic d;
    d.message = "the CSV has no compute actions";
    d.loc.file = file;
    return fail(std::move(d));
  }
  // Bounded work and memory: the validation keeps one byte per (stage, microbatch).
  constexpr int64_t kMaxStageMicrobatches = int64_t{1} << 22;
  if (int64_t{S} * m > kMaxStageMicrobatches) {
    Diagnostic d;
    d.message = fmt::format(
        "the CSV names {} stages and {} microbatches ({} pairs); at most {} are supported",
        S, m, int64_t{S} * m, kMaxStageMicrobatches);
    d.hint = "stages and microbatches are numbered from 0; check the largest numbers in the file";
    d.loc.file = file;
    return fail(std::move(d));
  }
  s.stages = S;
  s.microbatches = m;
  struct Seen {
    int rank = -1, slot = -1;
  };
  // first[st][half]: where a stage's actions were first seen (half = microbatch in the 2nd half).
  std::vector<std::array<Seen, 2>> first(static_cast<size_t>(S));
  std::vector<Seen> any(static_cast<size_t>(S));
  bool two_rows = false;
  for (int r = 0; r < p; ++r) {
    const auto& row = s.per_rank[static_cast<size_t>(r)];
    for (int k = 0; k < static_cast<int>(row.size()); ++k)
      for (const Action& a : row[static_cast<size_t>(k)].actions()) {
        Seen& f = any[static_cast<size_t>(a.stage)];
        if (f.rank < 0) f = {r, k};
        if (f.rank != r) two_rows = true;
        Seen& h = first[static_cast<size_t>(a.stage)][a.mb >= m / 2 ? 1 : 0];
        if (h.rank < 0) h = {r, k};
      }
  }
  {
    // One diagnostic per run of missing stages ("stages 0-99997 have no actions"), so an
    // 8-byte file naming stage 99999 gives one line, not 99,999.
    for (int st = 0; st < S;) {
      if (any[static_cast<size_t>(st)].rank >= 0) {
        ++st;
        continue;
      }
      int end = st;
      while (end + 1 < S && any[static_cast<size_t>(end + 1)].rank < 0) ++end;
      Diagnostic d;
      d.message = end == st ? fmt::format("stage {} has no actions (stages seen go up to {})",
                                          st, S - 1)
                            : fmt::format("stages {}-{} have no actions (stages seen go up to {})",
                                          st, end, S - 1);
      d.hint = "stages must be numbered 0..S-1 without gaps";
      d.loc.file = file;
      errs.push_back(std::move(d));
      st = end + 1;
    }
  }
  if (!errs.empty()) return fail(std::move(errs));
  s.stage_to_rank.resize(static_cast<size_t>(S));
  for (int st = 0; st < S; ++st)
    s.stage_to_rank[static_cast<size_t>(st)] = any[static_cast<size_t>(st)].rank;
  if (two_rows) {
    // Stretto extension: DualPipe's layout, stage s for microbatches [0, m/2) on one row and
    // [m/2, m) on the mirrored row p-1-row.
    bool dual = m % 2 == 0 && S == p && p % 2 == 0;
    for (int st = 0; st < S && dual; ++st) {
      const Seen& lo = first[static_cast<size_t>(st)][0];
      const Seen& hi = first[static_cast<size_t>(st)][1];
      dual = lo.rank >= 0 && hi.rank >= 0 && hi.rank == p - 1 - lo.rank && lo.rank != hi.rank;
      if (dual) s.stage_to_rank[static_cast<size_t>(st)] = lo.rank;
    }
    if (dual) {
      s.bidirectional = true;
      for (int r = 0; r < p && dual; ++r) {
        const auto& row = s.per_rank[static_cast<size_t>(r)];
        for (const Slot& sl : row)
          for (const Action& a : sl.actions())
            if (s.rank_of(a.stage, a.mb) != r) dual = false;
      }
    }
    if (!dual) {
      s.bidirectional = false;
      // Report like torch: the first action found on a second rank.
      std::vector<char> reported(static_cast<size_t>(S), 0);
      for (int r = 0; r < p; ++r) {
        const auto& row = s.per_rank[static_cast<size_t>(r)];
        for (int k = 0; k < static_cast<int>(row.size()); ++k)
          for (const Action& a : row[static_cast<size_t>(k)].actions()) {
            const Seen& f = any[static_cast<size_t>(a.stage)];
            if (f.rank == r || reported[static_cast<size_t>(a.stage)]) continue;
            reported[static_cast<size_t>(a.stage)] = 1;
            Diagnostic d = diag_at(
                r, k,
                fmt::format("stage {} is assigned to both rank {} and rank {} ({} here; its first "
                            "action is at {})",
                            a.stage, f.rank, r, a.str(), slot_loc(f.rank, f.slot).str()),
                "a stage's actions must all be in one row (one rank)");
            errs.push_back(std::move(d));
          }
      }
      return fail(std::move(errs));
    }
  }
  {
    std::vector<int> stamp(static_cast<size_t>(S), -1);  // distinct stages per row
    int v = 1;
    for (int r = 0; r < p; ++r) {
      int n = 0;
      for (const Slot& sl : s.per_rank[static_cast<size_t>(r)])
        for (const Action& a : sl.actions())
          if (stamp[static_cast<size_t>(a.stage)] != r) {
            stamp[static_cast<size_t>(a.stage)] = r;
            ++n;
          }
      v = std::max(v, n);
    }
    s.stages_per_rank = v;
  }

  Diagnostics vs = validate_schedule(s, slot_loc);
  if (!vs.empty()) {
    for (Diagnostic& d : vs) {
      if (d.loc.line > 0 && d.loc.line <= rows.size()) echo_line(d, rows[d.loc.line - 1].text);
      if (d.loc.file.empty()) d.loc.file = file;
    }
    return fail(std::move(vs));
  }
  return s;
}

Expected<PipelineSchedule> load_torch_csv(const std::string& path) {
  auto text = read_input_file(path, "torch CSV");
  if (!text) return fail(std::move(text.error()));
  return parse_torch_csv(*text, path == "-" ? std::string("<stdin>") : path);
}

namespace {
void append_action(std::string& out, const Action& a) {
  fmt::format_to(std::back_inserter(out), "{}{}{}", a.stage, action_kind_char(a.kind), a.mb);
}
void append_slot(std::string& out, const Slot& sl) {
  if (sl.is_idle()) return;
  if (!sl.is_overlap()) return append_action(out, sl.act[0]);
  out += '(';
  append_action(out, sl.act[0]);
  out += ';';
  append_action(out, sl.act[1]);
  out += ")OVERLAP_F_B";
}
}  // namespace

std::string write_torch_csv(const PipelineSchedule& s) {
  std::string out;
  for (const auto& row : s.per_rank) {
    for (size_t k = 0; k < row.size(); ++k) {
      if (k) out += ',';
      append_slot(out, row[k]);
    }
    out += '\n';
  }
  return out;
}

std::string LoweredOp::str() const {
  if (!is_comm) return compute.str();
  const char* name = comm == TorchCommOp::kSendF   ? "SEND_F"
                     : comm == TorchCommOp::kRecvF ? "RECV_F"
                     : comm == TorchCommOp::kSendB ? "SEND_B"
                                                   : "RECV_B";
  return fmt::format("{}{}{}", stage, name, mb);
}

Expected<std::vector<std::vector<LoweredOp>>> add_send_recv(const PipelineSchedule& s) {
  const int p = s.ranks, S = s.stages, m = s.microbatches;
  // What has been placed, per (stage, microbatch). torch keeps one set per rank; since a compute
  // action of (stage, mb) only ever runs on rank_of(stage, mb) and a RECV is only appended to the
  // list of the rank that runs the receiving stage, "X is in rank r's set" is "X was placed and
  // its rank is r" -- dense flags instead of hash sets (large schedules have millions).
  enum : uint8_t { kHasF = 1, kHasB = 2, kHasI = 4, kHasRecvF = 8, kHasRecvB = 16 };
  std::vector<uint8_t> placed(static_cast<size_t>(S) * static_cast<size_t>(m), 0);
  auto flags = [&](int stage, int mb) -> uint8_t& {
    return placed[static_cast<size_t>(stage) * static_cast<size_t>(m) + static_cast<size_t>(mb)];
  };
  std::vector<std::deque<Slot>> todo(static_cast<size_t>(p));
  // Idle slots are dropped first, as torch's earlier lowering passes (_add_unshard_reshard,
  // _add_reduce_grad) do; otherwise an idle slot would cost its rank a turn of the round robin.
  for (int r = 0; r < p; ++r)
    for (const Slot& sl : s.per_rank[static_cast<size_t>(r)])
      if (!sl.is_idle()) todo[static_cast<size_t>(r)].push_back(sl);
  std::vector<std::vector<LoweredOp>> out(static_cast<size_t>(p));

  auto has_comms = [&](const Action& a) {
    if (a.kind == ActionKind::kF)
      return a.stage != S - 1 && s.rank_of(a.stage + 1, a.mb) != s.rank_of(a.stage, a.mb);
    if (a.kind == ActionKind::kI || a.kind == ActionKind::kB)
      return a.stage != 0 && s.rank_of(a.stage - 1, a.mb) != s.rank_of(a.stage, a.mb);
    return false;
  };
  // An input is available when it was produced on this rank or its RECV is already listed here.
  auto ready = [&](const Action& a, int r) {
    if (a.stage < 0 || a.stage >= S || a.mb < 0 || a.mb >= m) return false;
    if (a.kind == ActionKind::kF && a.stage != 0)
      return (flags(a.stage, a.mb) & kHasRecvF) ||
             ((flags(a.stage - 1, a.mb) & kHasF) && s.rank_of(a.stage - 1, a.mb) == r);
    if ((a.kind == ActionKind::kI || a.kind == ActionKind::kB) && a.stage != S - 1)
      return (flags(a.stage, a.mb) & kHasRecvB) ||
             ((flags(a.stage + 1, a.mb) & (kHasI | kHasB)) && s.rank_of(a.stage + 1, a.mb) == r);
    return true;
  };
  auto comm_op = [](TorchCommOp k, int stage, int mb) {
    LoweredOp op;
    op.is_comm = true;
    op.comm = k;
    op.stage = stage;
    op.mb = mb;
    return op;
  };

  size_t left = 0;
  for (const auto& q : todo) left += q.size();
  while (left > 0) {
    bool progress = false;
    for (int r = 0; r < p; ++r) {
      auto& q = todo[static_cast<size_t>(r)];
      if (q.empty()) continue;
      const Slot slot = q.front();
      bool ok = true;
      for (const Action& a : slot.actions()) ok = ok && ready(a, r);
      if (!ok) continue;
      LoweredOp op;
      op.compute = slot;
      out[static_cast<size_t>(r)].push_back(op);
      for (const Action& a : slot.actions()) {
        flags(a.stage, a.mb) |= a.kind == ActionKind::kF   ? kHasF
                                : a.kind == ActionKind::kB ? kHasB
                                : a.kind == ActionKind::kI ? kHasI
                                                           : 0;
        if (!has_comms(a)) continue;
        const bool fwd = a.kind == ActionKind::kF;
        out[static_cast<size_t>(r)].push_back(
            comm_op(fwd ? TorchCommOp::kSendF : TorchCommOp::kSendB, a.stage, a.mb));
        const int peer_stage = fwd ? a.stage + 1 : a.stage - 1;
        const int peer = s.rank_of(peer_stage, a.mb);
        out[static_cast<size_t>(peer)].push_back(
            comm_op(fwd ? TorchCommOp::kRecvF : TorchCommOp::kRecvB, peer_stage, a.mb));
        flags(peer_stage, a.mb) |= fwd ? kHasRecvF : kHasRecvB;
      }
      q.pop_front();
      --left;
      progress = true;
    }
    if (!progress) {
      Diagnostic d;
      d.message =
          "malformed compute schedule: cannot place sends and receives (no rank can "
          "proceed)";
      for (int r = 0; r < p; ++r) {
        const auto& q = todo[static_cast<size_t>(r)];
        if (q.empty()) continue;
        d.notes.push_back(
            {SourceLoc{}, fmt::format("rank {} waits to run {}", r, q.front().str())});
      }
      d.hint = "each rank's next action needs an input that no rank produces first";
      return fail(std::move(d));
    }
  }
  return out;
}

Expected<std::string> write_torch_csv_with_comms(const PipelineSchedule& s) {
  auto lowered = add_send_recv(s);
  if (!lowered) return fail(std::move(lowered.error()));
  std::string out;
  for (const auto& row : *lowered) {
    for (size_t k = 0; k < row.size(); ++k) {
      if (k) out += ',';
      out += row[k].str();
    }
    out += '\n';
  }
  return out;
}

}  // namespace stretto::pipelines
