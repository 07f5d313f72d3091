#pragma once
// Logical-op labels: what a profiler range or a trace slice says about the schedule op it
// belongs to, so measured and predicted timelines align by (PP, MB, PASS, bucket) rather than
// by kernel name.
//
// Accepted spellings (case-insensitive keys, any separators): Stretto's slice names and tags
// ("F mb3 PP1", "PP1 LAYER2 MB3 BW", "send act mb3 PP0→PP1", "all_reduce grad-reduce PP0"),
// key=value forms ("PP=1 MB=3 PASS=F"), underscores ("F_PP0_MB1"), torch pipelining actions
// ("fwd", "bwd", "I", "W"), and Piper's DAG-node labels (record_function ranges containing
// ":uid", also copied by Piper onto GPU events as `args.piper_dag_node`). A label may name a
// model op ("layer3.attn.qkv", "mlp_up") and a communication kind ("send", "recv", "all_gather").

#include <optional>
#include <string>
#include <string_view>

#include "stretto/compiler/model.h"
#include "stretto/plan/tags.h"

namespace stretto::traces {

struct OpLabel {
  plan::Tags tags;                     // PP, EP, LAYER, MB and PASS found in the label
  int32_t pp_to = plan::kAbsent;       // a second PP: the destination of a transfer ("PP0→PP1")
  std::optional<compiler::OpKind> op;  // a model op named in the label
  std::string comm;  // "send", "recv", "all_reduce", "all_gather", "reduce_scatter", "all_to_all"
  bool piper = false;    // a Piper DAG-node label (":uid")
  bool logical = false;  // names a schedule op: (a PASS or a comm kind) and (PP or MB), or Piper
  /// The op class used in reports: the PASS ("F", "B", "BI", "BW") or the comm kind; "" if none.
  std::string op_class() const;
  /// The alignment key: class and coordinates without LAYER ("F PP1 MB3", "all_reduce PP0").
  std::string key() const;
};

OpLabel parse_op_label(std::string_view label);

}  // namespace stretto::traces
