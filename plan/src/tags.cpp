#include "stretto/plan/tags.h"

#include <fmt/format.h>

namespace stretto::plan {

std::string_view pass_name(Pass p) {
  switch (p) {
    case Pass::kF:
      return "F";
    case Pass::kB:
      return "B";
    case Pass::kBI:
      return "BI";
    case Pass::kBW:
      return "BW";
    case Pass::kNone:
      break;
  }
  return "-";
}

std::optional<Pass> parse_pass(std::string_view s) {
  if (s == "F") return Pass::kF;
  if (s == "B") return Pass::kB;
  if (s == "BI") return Pass::kBI;
  if (s == "BW") return Pass::kBW;
  return std::nullopt;
}

std::optional<TagKey> parse_tag_key(std::string_view s) {
  for (size_t i = 0; i < kTagKeyNames.size(); ++i)
    if (kTagKeyNames[i] == s) return static_cast<TagKey>(i);
  return std::nullopt;
}

std::string Tags::str() const {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == kAbsent) continue;
    if (!s.empty()) s += ' ';
    s += fmt::format("{}{}", kTagKeyNames[i], v[i]);
  }
  if (pass != Pass::kNone) {
    if (!s.empty()) s += ' ';
    s += pass_name(pass);
  }
  return s;
}

std::string Filter::str() const {
  std::string s = "{";
  auto sep = [&] {
    if (s.size() > 1) s += ',';
  };
  for (size_t i = 0; i < cond.size(); ++i) {
    const auto& c = cond[i];
    if (c.kind == TagCond::kAny) continue;
    sep();
    s += fmt::format("\"{}\":", kTagKeyNames[i]);
    if (c.kind == TagCond::kEquals)
      s += std::to_string(c.value);
    else
      s += c.kind == TagCond::kPresent ? "\"*\"" : "\"-\"";
  }
  if (pass) {
    sep();
    s += fmt::format("\"PASS\":\"{}\"", pass_name(*pass));
  }
  return s + "}";
}

}  // namespace stretto::plan
