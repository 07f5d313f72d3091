#include "stretto/pipelines/layout_base.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "stretto/pipelines/builders.h"
#include "stretto/plan/json_source.h"
#include "stretto/plan/layout.h"
#include "stretto/support/plural.h"

namespace stretto::pipelines {

using plan::Json;
using plan::JsonSource;

Expected<std::vector<plan::Directive>> layout_base(const plan::Layout& l,
                                                   const std::vector<int>& stage_to_rank,
                                                   bool bidirectional, const std::string& family) {
  if (bidirectional && l.dp * l.cp > 1) {
    Diagnostic d;
    d.message = fmt::format(
        "{} with {} is not supported: DualPipe runs every stage in both directions on mirrored "
        "ranks, and Stretto does not model the extra gradient reduction between a stage's two "
        "copies",
        family,
        l.cp > 1 ? fmt::format("context parallelism (cp = {}, dp = {})", l.cp, l.dp)
                 : fmt::format("data parallelism (dp = {})", l.dp));
    d.hint = l.cp > 1 ? "use dualpipev (one copy per stage; context parallelism works), or cp = 1"
                      : "use dualpipev (one copy per stage; data parallelism works), or dp = 1";
    d.loc.json_pointer = l.pointer + (l.cp > 1 ? "/cp" : "/dp");
    return fail(std::move(d));
  }
  Json base = Json::array();
  auto heads = [&](int rank) {
    std::vector<int> v;
    // dp-major, the CP ranks of one DP replica consecutive (replicate's context_parallel)
    for (int d = 0; d < l.dp; ++d)
      for (int c = 0; c < l.cp; ++c) v.push_back(plan::layout_device(l, 0, d, rank, c));
    return v;
  };
  const int stages = bidirectional ? l.pp : static_cast<int>(stage_to_rank.size());
  for (int st = 0; st < stages; ++st) {
    const int r = bidirectional ? st : stage_to_rank[static_cast<size_t>(st)];
    const std::vector<int> h = heads(r);
    base.push_back({{"op", "place"}, {"filter", {{"PP", st}}}, {"devices", h}, {"stream", "pp"}});
    if (l.dp * l.cp > 1) {
      Json rep = {{"op", "replicate"}, {"filter", {{"PP", st}}}, {"devices", h},
                  {"reduce_stream", "dp"}};
      if (l.cp > 1) rep["context_parallel"] = l.cp;
      if (l.cp > 1 && l.cp_comm_type != plan::CpCommType::kP2P)
        rep["cp_comm_type"] = std::string(plan::cp_comm_type_name(l.cp_comm_type));
      if (l.zero >= 1) rep["shard_optimizer"] = true;
      if (l.zero >= 2) rep["shard_grads"] = true;
      if (l.zero >= 3) rep["shard_params"] = true;
      base.push_back(std::move(rep));
    }
    if (l.ep > 1)
      base.push_back({{"op", "shard"}, {"filter", {{"PP", st}, {"EP", "*"}}}, {"devices", h},
                      {"stream", "ep"}});
  }
  if (l.tp > 1) {
    Json groups = Json::array();
    for (int r = 0; r < l.pp; ++r)
      for (int d = 0; d < l.dp; ++d)
        for (int c = 0; c < l.cp; ++c) {
          std::vector<int> g;
          for (int t = 0; t < l.tp; ++t) g.push_back(plan::layout_device(l, t, d, r, c));
          groups.push_back(g);
        }
    Json st = {{"op", "shard_tensor"}, {"filter", Json::object()}, {"devices", groups},
               {"stream", "tp"}};
    if (l.sequence_parallel) st["sequence_parallel"] = true;
    if (l.tp_comm_overlap) st["tp_comm_overlap"] = true;
    base.push_back(std::move(st));
  }
  const JsonSource gen = JsonSource::from_json(std::move(base), "<layout>");
  auto ds = plan::parse_directives(gen, "");
  if (!ds) {
    Diagnostics errs = std::move(ds.error());
    for (Diagnostic& d : errs) d.loc.json_pointer = l.pointer;
    return fail(std::move(errs));
  }
  for (plan::Directive& d : *ds) d.pointer = l.pointer;
  return std::move(*ds);
}

Diagnostics check_builder_call(const plan::Plan& plan, const JsonSource* src) {
  Diagnostics out;
  if (!plan.builder) return out;
  const plan::BuilderCall& call = *plan.builder;
  auto at = [&](const std::string& ptr, std::string msg, std::string hint) {
    Diagnostic d;
    if (src) {
      d = src->error_at(ptr, std::move(msg), std::move(hint));
    } else {
      d.message = std::move(msg);
      d.hint = std::move(hint);
      d.loc.json_pointer = ptr;
    }
    out.push_back(std::move(d));
  };
  if (call.layout) {
    const plan::Layout& l = *call.layout;
    const int64_t need = int64_t{l.tp} * l.pp * l.dp * l.cp;
    const int64_t have = int64_t{plan.cluster.nodes} * plan.cluster.devices_per_node;
    if (need > have)
      at(l.pointer,
         l.cp > 1 ? fmt::format("the layout tp {} x cp {} x pp {} x dp {} needs {} devices; the "
                                "cluster has {}",
                                l.tp, l.cp, l.pp, l.dp, need, have)
                  : fmt::format("the layout tp {} x pp {} x dp {} needs {} devices; the cluster "
                                "has {}",
                                l.tp, l.pp, l.dp, need, have),
         "add nodes (\"cluster\": {\"nodes\": N}) or shrink the layout");
    // Megatron-Core's load-balanced causal ring attention cuts each sequence into 2·cp chunks
    // (get_batch_on_this_cp_rank).
    if (l.cp > 1 && plan.model.family == plan::ModelSpec::Family::kTransformer &&
        plan.model.seq_len % (2 * l.cp) != 0)
      at(l.pointer + "/cp",
         fmt::format("layout cp = {} with seq_len {}: context parallelism cuts each sequence into "
                     "2·cp = {} chunks (load-balanced causal ring attention), and {} does not "
                     "divide it",
                     l.cp, plan.model.seq_len, 2 * l.cp, 2 * l.cp),
         "pick cp so that 2·cp divides seq_len (Megatron-Core asserts the same)");
    if (call.ranks > 0 && call.ranks != l.pp)
      at(call.pointer + "/ranks",
         fmt::format("\"ranks\": {} disagrees with the layout's pp = {}", call.ranks, l.pp),
         "drop \"ranks\"; the layout's pp is the number of pipeline ranks");
    if (!call.base.empty())
      at(call.pointer + "/base", "a builder call takes a \"layout\" or a \"base\", not both",
         "keep the layout (it generates the base), or write the whole base by hand");
    if (!out.empty()) return out;
  }
  const int p = call.layout ? call.layout->pp : call.ranks;
  if (p <= 0 || call.microbatches <= 0) return out;  // inferred from a base: checked later
  auto sched = build_schedule(call.builder, p, call.stages_per_rank, call.microbatches);
  if (!sched) return out;  // the expansion reports it, located at the call
  const int S = sched->stages;
  if (plan.model.pp_regions != S) {
    const std::string v = sched->bidirectional
                              ? fmt::format("{} ranks (each stage runs in both directions)", p)
                              : fmt::format("{} ranks x {} per rank", p,
                                            count_noun(sched->stages_per_rank, "stage", "stages"));
    at(call.pointer,
       fmt::format("{} with {} needs pp_regions = {}; the model has {}", sched->family, v, S,
                   plan.model.pp_regions),
       fmt::format("set \"pp_regions\": {} in \"model\" (each region is one pipeline stage)", S));
  }
  return out;
}

void locate_builder_diagnostics(Diagnostics& ds, const JsonSource* src,
                                const plan::BuilderCall& call) {
  if (!src) return;
  for (Diagnostic& d : ds) {
    if (d.loc.known()) continue;
    // Generated directives have pointers into the expanded list, not into the file.
    const std::string ptr = d.loc.json_pointer;
    bool in_file = false;
    if (!ptr.empty()) {
      try {
        in_file = src->root().contains(Json::json_pointer(ptr));
      } catch (const std::exception&) {
        in_file = false;
      }
    }
    const std::string where = in_file ? ptr : call.pointer;
    const SourceLoc l = src->loc(where);
    if (!in_file && !ptr.empty() && ptr != call.pointer)
      d.message += fmt::format(" (in the directives generated by the '{}' builder call)",
                               call.builder);
    d.loc = l;
    d.loc.json_pointer = where;
    uint32_t c = l.col;
    d.source_line = src->line_window(l.line, c);
    d.caret_col = c;
  }
}

}  // namespace stretto::pipelines
