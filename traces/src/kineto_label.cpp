// Logical-op labels (op_label.h).

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <optional>
#include <utility>
#include <vector>

#include "stretto/traces/op_label.h"

namespace stretto::traces {

using compiler::OpKind;
using plan::kAbsent;
using plan::Pass;
using plan::TagKey;

namespace {

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

int32_t to_int(std::string_view s) {
  int32_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

// Model-op spellings, most specific first (model.cpp op names and profiled-table names).
const std::array<std::pair<std::string_view, OpKind>, 22> kOps = {{
    {"shared_experts", OpKind::kSharedExperts},
    {"moe.shared", OpKind::kSharedExperts},
    {"moe.experts", OpKind::kExperts},
    {"moe.router", OpKind::kRouter},
    {"attn.out_proj", OpKind::kOutProj},
    {"out_proj", OpKind::kOutProj},
    {"attn.qkv", OpKind::kQKV},
    {"attn.core", OpKind::kAttention},
    {"attention", OpKind::kAttention},
    {"attn_norm", OpKind::kNorm},
    {"mlp_norm", OpKind::kNorm},
    {"mlp.up", OpKind::kMlpUp},
    {"mlp_up", OpKind::kMlpUp},
    {"mlp.down", OpKind::kMlpDown},
    {"mlp_down", OpKind::kMlpDown},
    {"mlp.act", OpKind::kMlpAct},
    {"mlp_act", OpKind::kMlpAct},
    {"qkv", OpKind::kQKV},
    {"router", OpKind::kRouter},
    {"experts", OpKind::kExperts},
    {"embedding", OpKind::kEmbedding},
    {"synthetic", OpKind::kSynthetic},
}};

const std::array<std::pair<std::string_view, std::string_view>, 16> kComms = {{
    {"all_reduce", "all_reduce"},
    {"allreduce", "all_reduce"},
    {"all-reduce", "all_reduce"},
    {"all_gather", "all_gather"},
    {"allgather", "all_gather"},
    {"all-gather", "all_gather"},
    {"reduce_scatter", "reduce_scatter"},
    {"reducescatter", "reduce_scatter"},
    {"reduce-scatter", "reduce_scatter"},
    {"all_to_all", "all_to_all"},
    {"alltoall", "all_to_all"},
    {"all-to-all", "all_to_all"},
    {"sendrecv", "send_recv"},
    {"send", "send"},
    {"recv", "recv"},
    {"isend", "send"},
}};

}  // namespace

std::string OpLabel::op_class() const {
  if (!comm.empty()) return comm;
  if (tags.pass != Pass::kNone) return std::string(plan::pass_name(tags.pass));
  return "";
}

std::string OpLabel::key() const {
  std::string k = op_class();
  auto add = [&](const char* name, int32_t v) {
    if (v != kAbsent) k += fmt::format(" {}{}", name, v);
  };
  add("PP", tags.pp());
  if (pp_to != kAbsent) k += fmt::format("->PP{}", pp_to);
  add("EP", tags.ep());
  add("MB", tags.mb());
  return k;
}

OpLabel parse_op_label(std::string_view label) {
  OpLabel r;
  const std::string low = lower(label);
  r.piper = label.find(":uid") != std::string_view::npos && label.rfind("##", 0) != 0;
  for (const auto& [spelling, kind] : kOps)
    if (low.find(spelling) != std::string::npos) {
      r.op = kind;
      break;
    }
  // " head" / "loss" / "norm" only as whole tokens (they are common words)
  // Tokens: maximal runs of letters and digits.
  std::vector<std::string_view> tok;
  for (size_t i = 0; i < label.size();) {
    if (!std::isalnum(static_cast<unsigned char>(label[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < label.size() && std::isalnum(static_cast<unsigned char>(label[j]))) ++j;
    tok.push_back(label.substr(i, j - i));
    i = j;
  }
  for (size_t i = 0; i < tok.size(); ++i) {
    const std::string t = lower(tok[i]);
    // key + number, fused ("pp1") or split ("PP=1", "PP 1")
    auto coord = [&](std::string_view key, TagKey tk) {
      std::optional<int32_t> v;
      if (t.size() > key.size() && t.compare(0, key.size(), key) == 0 &&
          all_digits(std::string_view(t).substr(key.size())))
        v = to_int(std::string_view(t).substr(key.size()));
      else if (t == key && i + 1 < tok.size() && all_digits(tok[i + 1]))
        v = to_int(tok[i + 1]), ++i;
      if (!v) return false;
      // a second PP is the destination of a transfer ("PP0→PP1")
      if (tk == TagKey::kPP && r.tags.pp() != kAbsent)
        r.pp_to = *v;
      else
        r.tags.set(tk, *v);
      return true;
    };
    if (coord("pp", TagKey::kPP) || coord("stage", TagKey::kPP) || coord("mb", TagKey::kMB) ||
        coord("microbatch", TagKey::kMB) || coord("ep", TagKey::kEP) ||
        coord("layer", TagKey::kLayer))
      continue;
    const std::string_view raw = tok[i];
    if (raw == "F" || t == "fwd" || t == "forward")
      r.tags.pass = Pass::kF;
    else if (raw == "B" || t == "bwd" || t == "backward")
      r.tags.pass = Pass::kB;
    else if (raw == "BI" || raw == "I" || t == "bwd_input")
      r.tags.pass = Pass::kBI;
    else if (raw == "BW" || raw == "W")
      r.tags.pass = Pass::kBW;
    else if (t == "pass" && i + 1 < tok.size()) {
      if (auto p = plan::parse_pass(tok[i + 1])) r.tags.pass = *p, ++i;
    } else if (!r.op && (t == "head" || t == "loss" || t == "norm")) {
      r.op = t == "head" ? OpKind::kHead : t == "loss" ? OpKind::kLoss : OpKind::kNorm;
    }
  }
  for (const auto& [spelling, kind] : kComms) {
    const size_t at = low.find(spelling);
    if (at == std::string::npos) continue;
    // whole word only: not inside another word ("sender", "recovery")
    const size_t end = at + spelling.size();
    const bool left = at == 0 || !std::isalpha(static_cast<unsigned char>(low[at - 1]));
    const bool right = end >= low.size() || !std::isalpha(static_cast<unsigned char>(low[end]));
    if (left && right) {
      r.comm = std::string(kind);
      break;
    }
  }
  const bool coord = r.tags.pp() != kAbsent || r.tags.mb() != kAbsent;
  r.logical = r.piper || ((r.tags.pass != Pass::kNone || !r.comm.empty()) && coord);
  return r;
}

}  // namespace stretto::traces
