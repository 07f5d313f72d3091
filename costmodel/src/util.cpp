#include "util.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <utility>

namespace stretto::cost::detail {

using compiler::CommKind;
using compiler::OpKind;
using plan::DType;
using plan::Pass;

Diagnostic diag_at(const std::string& file, const std::string& pointer, std::string message,
                   std::string hint) {
  Diagnostic d;
  d.severity = Severity::kError;
  d.message = std::move(message);
  d.loc.file = file;
  d.loc.json_pointer = pointer;
  d.hint = std::move(hint);
  return d;
}

Diagnostic diag_at_line(const std::string& file, uint32_t line, uint32_t col, std::string message,
                        std::string source_line) {
  Diagnostic d;
  d.severity = Severity::kError;
  d.message = std::move(message);
  d.loc.file = file;
  d.loc.line = line;
  d.loc.col = col;
  d.source_line = std::move(source_line);
  return d;
}

std::string child_pointer(const std::string& base, std::string_view key) {
  return base + "/" + plan::pointer_escape(key);
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  // A plausible typo: within a third of the word (at least 2 edits, never the whole word), or
  // a truncation / extension of a candidate ("dispatch" for "dispatch_us").
  const std::string w = lower(word);
  const size_t limit = std::max<size_t>(2, w.size() / 3);
  size_t best = SIZE_MAX;
  const std::string* pick = nullptr;
  for (const auto& c : candidates) {
    const std::string lc = lower(c);
    const size_t d = stretto::edit_distance(w, lc);
    const size_t shorter = std::min(w.size(), lc.size());
    const bool prefix = shorter >= 4 && (lc.starts_with(w) || w.starts_with(lc));
    const bool close = d <= limit && d < std::max(w.size(), lc.size());
    if ((close || prefix) && d < best) {
      best = d;
      pick = &c;
    }
  }
  return pick ? "did you mean '" + *pick + "'?" : std::string();
}

void locate(Diagnostics& ds, const plan::JsonSource* src) {
  if (!src) return;
  for (Diagnostic& d : ds) {
    if (d.loc.file != src->file() || d.loc.known()) continue;
    const SourceLoc l = src->key_loc(d.loc.json_pointer);
    if (!l.known()) continue;
    d.loc.line = l.line;
    d.loc.col = l.col;
    d.source_line = src->line_text(l.line);
  }
}

void line_col(const std::string& text, size_t offset, uint32_t& line, uint32_t& col,
              std::string& line_text) {
  offset = std::min(offset, text.size());
  line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  col = static_cast<uint32_t>(offset - line_start + 1);
  size_t end = text.find('\n', line_start);
  line_text =
      text.substr(line_start, end == std::string::npos ? std::string::npos : end - line_start);
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

namespace {

constexpr std::array<std::pair<OpKind, std::string_view>, 19> kOps = {{
    {OpKind::kEmbedding, "embedding"},
    {OpKind::kNorm, "norm"},
    {OpKind::kQKV, "qkv"},
    {OpKind::kAttention, "attention"},
    {OpKind::kOutProj, "out_proj"},
    {OpKind::kMlpUp, "mlp_up"},
    {OpKind::kMlpAct, "mlp_act"},
    {OpKind::kMlpDown, "mlp_down"},
    {OpKind::kRouter, "router"},
    {OpKind::kExperts, "experts"},
    {OpKind::kSharedExperts, "shared_experts"},
    {OpKind::kHead, "head"},
    {OpKind::kLoss, "loss"},
    {OpKind::kSynthetic, "synthetic"},
    {OpKind::kAttnScores, "attn_scores"},
    {OpKind::kSoftmax, "softmax"},
    {OpKind::kAttnContext, "attn_context"},
    {OpKind::kResidual, "residual"},
    {OpKind::kOptimizer, "optimizer"},
}};

constexpr std::array<std::pair<Pass, std::string_view>, 5> kPasses = {{
    {Pass::kF, "F"},
    {Pass::kB, "B"},
    {Pass::kBI, "BI"},
    {Pass::kBW, "BW"},
    {Pass::kNone, "none"},  // an op outside the passes: the optimizer step
}};

constexpr std::array<std::pair<DType, std::string_view>, 4> kDtypes = {{
    {DType::kFP32, "fp32"},
    {DType::kBF16, "bf16"},
    {DType::kFP16, "fp16"},
    {DType::kFP8, "fp8"},
}};

constexpr std::array<std::pair<CommKind, std::string_view>, 5> kComms = {{
    {CommKind::kSendRecv, "send_recv"},
    {CommKind::kAllReduce, "all_reduce"},
    {CommKind::kReduceScatter, "reduce_scatter"},
    {CommKind::kAllGather, "all_gather"},
    {CommKind::kAllToAll, "all_to_all"},
}};

template <class Table, class E>
std::string_view name_of(const Table& t, E e) {
  for (const auto& [k, n] : t)
    if (k == e) return n;
  return "?";
}

template <class Table>
auto parse_of(const Table& t, std::string_view s) -> std::optional<decltype(t[0].first)> {
  for (const auto& [k, n] : t)
    if (n == s) return k;
  return std::nullopt;
}

template <class Table>
std::vector<std::string> names_of(const Table& t) {
  std::vector<std::string> out;
  for (const auto& [k, n] : t) out.emplace_back(n);
  return out;
}

}  // namespace

std::string_view op_name(OpKind k) {
  return name_of(kOps, k);
}
std::optional<OpKind> parse_op(std::string_view s) {
  return parse_of(kOps, s);
}
std::vector<std::string> op_names() {
  return names_of(kOps);
}
std::string_view pass_key(Pass p) {
  return name_of(kPasses, p);
}
std::optional<Pass> parse_pass_key(std::string_view s) {
  return parse_of(kPasses, s);
}
std::vector<std::string> pass_keys() {
  return names_of(kPasses);
}
std::string_view dtype_name(DType d) {
  return name_of(kDtypes, d);
}
std::optional<DType> parse_dtype(std::string_view s) {
  return parse_of(kDtypes, s);
}
std::vector<std::string> dtype_names() {
  return names_of(kDtypes);
}
std::string_view comm_name(CommKind k) {
  return name_of(kComms, k);
}
std::optional<CommKind> parse_comm(std::string_view s) {
  return parse_of(kComms, s);
}
std::vector<std::string> comm_names() {
  return names_of(kComms);
}

int64_t ceil_ns(double ns) {
  if (!(ns > 0)) return 0;
  if (ns >= kMaxOpNs) return static_cast<int64_t>(kMaxOpNs);
  // Guard against values that are integral up to rounding noise (e.g. 2999.9999999996).
  double r = std::round(ns);
  if (std::fabs(ns - r) < 1e-6 * std::max(1.0, r)) return static_cast<int64_t>(r);
  return static_cast<int64_t>(std::ceil(ns));
}

}  // namespace stretto::cost::detail
