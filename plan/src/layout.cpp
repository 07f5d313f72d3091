#include "stretto/plan/layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "stretto/plan/json_source.h"
#include "stretto/plan/schema.h"

namespace stretto::plan {

namespace {

const std::vector<std::string> kLayoutKeys = section_keys("layout");

}  // namespace

std::optional<Layout> parse_layout(const JsonSource& src, const std::string& pointer,
                                   Diagnostics& out) {
  const Json& j = src.root().at(Json::json_pointer(pointer));
  const size_t before = out.size();
  if (!j.is_object()) {
    out.push_back(src.error_at(pointer, "\"layout\" must be an object",
                               "e.g. \"layout\": {\"tp\": 8, \"pp\": 4, \"dp\": 4}"));
    return std::nullopt;
  }
  Layout l;
  l.pointer = pointer;
  for (const auto& [key, v] : j.items()) {
    (void)v;
    if (std::find(kLayoutKeys.begin(), kLayoutKeys.end(), key) == kLayoutKeys.end()) {
      const std::string near = nearest(key, kLayoutKeys);
      out.push_back(src.error_at(pointer + "/" + pointer_escape(key),
                                 fmt::format("unknown key '{}' in layout", key),
                                 near.empty() ? fmt::format("layout keys: {}",
                                                            fmt::join(kLayoutKeys, ", "))
                                              : fmt::format("did you mean '{}'?", near),
                                 true));
    }
  }
  auto number = [&](const char* key, int& dst) {
    if (!j.contains(key)) return;
    const PlanKey& k = schema_key("layout", key);
    const int lo = static_cast<int>(k.min), hi = static_cast<int>(k.max);
    const Json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      out.push_back(src.error_at(pointer + "/" + key,
                                 fmt::format("layout '{}' must be an integer in [{}, {}]", key,
                                             lo, hi)));
      return;
    }
    dst = v.get<int>();
  };
  number("tp", l.tp);
  number("pp", l.pp);
  number("dp", l.dp);
  number("ep", l.ep);
  number("cp", l.cp);
  number("zero", l.zero);
  auto boolean = [&](const char* key, bool& dst) {
    if (!j.contains(key)) return;
    if (j[key].is_boolean())
      dst = j[key].get<bool>();
    else
      out.push_back(src.error_at(pointer + "/" + key,
                                 fmt::format("layout '{}' must be true or false", key)));
  };
  if (j.contains("cp_comm_type")) {
    const PlanKey& k = schema_key("layout", "cp_comm_type");
    const Json& v = j["cp_comm_type"];
    const auto it = v.is_string() ? std::find(k.choices.begin(), k.choices.end(),
                                              v.get<std::string>())
                                  : k.choices.end();
    if (it == k.choices.end())
      out.push_back(src.error_at(pointer + "/cp_comm_type",
                                 fmt::format("layout 'cp_comm_type' must be one of {}",
                                             fmt::join(k.choices, ", ")),
                                 "Transformer Engine's cp_comm_type (Megatron-Core --cp-comm-type)"));
    else if (l.cp < 2)
      out.push_back(src.error_at(pointer + "/cp_comm_type",
                                 fmt::format("layout 'cp_comm_type' with cp = {}: there is no "
                                             "context-parallel communication",
                                             l.cp),
                                 "set cp to 2 or more, or drop cp_comm_type"));
    else
      l.cp_comm_type = static_cast<CpCommType>(it - k.choices.begin());
  }
  boolean("sequence_parallel", l.sequence_parallel);
  boolean("tp_comm_overlap", l.tp_comm_overlap);
  if (l.tp_comm_overlap && (l.tp < 2 || !l.sequence_parallel))
    out.push_back(src.error_at(
        pointer + "/tp_comm_overlap",
        l.tp < 2 ? fmt::format("layout 'tp_comm_overlap' with tp = {}: there is no TP "
                               "communication to overlap",
                               l.tp)
                 : std::string("layout 'tp_comm_overlap' needs 'sequence_parallel': Transformer "
                               "Engine overlaps the sequence-parallel all-gathers and "
                               "reduce-scatters"),
        l.tp < 2 ? "set tp to 2 or more, or drop tp_comm_overlap"
                 : "add \"sequence_parallel\": true (Megatron-LM asserts the same)"));
  if (j.contains("order")) {
    const Json& o = j["order"];
    std::vector<std::string> parts;
    if (o.is_string()) {
      std::string s = o.get<std::string>();
      size_t pos = 0;
      while (pos <= s.size()) {
        size_t e = s.find('-', pos);
        if (e == std::string::npos) e = s.size();
        parts.push_back(s.substr(pos, e - pos));
        pos = e + 1;
      }
    }
    std::set<std::string> seen(parts.begin(), parts.end());
    const bool ok = parts.size() == 3 && seen == std::set<std::string>{"tp", "dp", "pp"};
    if (!ok)
      out.push_back(src.error_at(pointer + "/order",
                                 "layout 'order' must name tp, dp and pp once each, innermost "
                                 "first",
                                 "Megatron's order is \"tp-dp-pp\" (the default); \"tp-pp-dp\" "
                                 "puts pipeline stages next to each other"));
    else
      l.order = parts;
  }
  if (l.ep > 1 && l.ep != l.dp)
    out.push_back(src.error_at(pointer + "/ep",
                               fmt::format("layout ep = {} with dp = {}: the layout shorthand "
                                           "spreads experts over all of a stage's data-parallel "
                                           "replicas (ep = dp) or none (ep = 1)",
                                           l.ep, l.dp),
                               "set ep to 1 or to dp, or write the shard directives in a base"));
  if (l.ep > 1 && l.cp > 1)
    out.push_back(src.error_at(pointer + "/cp",
                               fmt::format("layout cp = {} with ep = {}: expert parallelism with "
                                           "context parallelism is not modelled",
                                           l.cp, l.ep),
                               "set ep or cp to 1"));
  if (out.size() != before) return std::nullopt;
  return l;
}

int layout_device(const Layout& l, int tp, int dp, int pp, int cp) {
  int dev = 0, stride = 1;
  for (const std::string& k : l.order) {
    // CP ranks sit next to TP, outside it (Megatron-Core's tp-cp-ep-dp-pp): the "tp" slot of
    // the order holds tp + TP · cp.
    const int coord = k == "tp" ? tp + l.tp * cp : k == "dp" ? dp : pp;
    const int size = k == "tp" ? l.tp * l.cp : k == "dp" ? l.dp : l.pp;
    dev += coord * stride;
    stride *= size;
  }
  return dev;
}

}  // namespace stretto::plan
