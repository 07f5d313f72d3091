// The resolved plan (resolved.h): structure read from the directives the compiler runs, model
// and cluster values from the parsed plan, each with its source.
#include "stretto/plan/resolved.h"

#include <algorithm>
#include <map>
#include <set>

namespace stretto::plan {

const ResolvedField* ResolvedPlan::field(std::string_view name) const {
  for (const ResolvedField& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

Json ResolvedPlan::to_json() const {
  Json fs = Json::object();
  for (const ResolvedField& f : fields) {
    Json e = {{"value", f.value}, {"source", std::string(value_source_name(f.source))}};
    if (!f.path.empty()) e["path"] = f.path;
    fs[f.name] = std::move(e);
  }
  return {{"fields", std::move(fs)}, {"placement", placement}, {"tp_groups", tp_groups}};
}

Json ResolvedPlan::values() const {
  Json v = Json::object();
  for (const ResolvedField& f : fields) v[f.name] = f.value;
  return v;
}

namespace {

// The first `stage` a place directive names (PP = s), or -1 for a filter over every stage.
int placed_stage(const Directive& d) {
  const TagCond& c = d.filter.cond[static_cast<size_t>(TagKey::kPP)];
  return c.kind == TagCond::kEquals ? c.value : -1;
}

// Pointers of the directives a hand-written plan's values are edited at.
struct DirectivePaths {
  std::string split, replicate;
};

DirectivePaths read_directives(const std::vector<Directive>& ds, ResolvedPlan& r) {
  DirectivePaths paths;
  std::map<int, std::vector<int>> stage_devices;  // first list placed per stage
  std::map<std::vector<int>, std::set<int>> stages_of_list;
  std::set<int> used;
  bool have_rep = false, have_shard = false, have_tp = false, have_rc = false;
  int place_width = 1;
  for (const Directive& d : ds) {
    for (int x : d.devices) used.insert(x);
    for (const auto& g : d.device_groups) used.insert(g.begin(), g.end());
    switch (d.op) {
      case DirectiveOp::kPlace: {
        const int s = placed_stage(d);
        stage_devices.try_emplace(s, d.devices);
        stages_of_list[d.devices].insert(s);
        place_width = std::max(place_width, static_cast<int>(d.devices.size()));
        if (d.stream == "comm") r.streams = "shared";
        break;
      }
      case DirectiveOp::kReplicate:
        if (have_rep) break;
        have_rep = true;
        paths.replicate = d.pointer;
        r.cp = std::max(1, d.context_parallel);
        r.cp_comm_type = std::string(cp_comm_type_name(d.cp_comm_type));
        r.dp = static_cast<int>(d.devices.size()) / r.cp;
        r.zero = d.shard_params ? 3 : d.shard_grads ? 2 : d.shard_optimizer ? 1 : 0;
        r.bucket_size_MB = d.bucket_size_MB;
        r.prefetch = d.prefetch;
        r.reshard_after_forward = d.reshard_after_forward;
        break;
      case DirectiveOp::kShard:
        if (have_shard) break;
        have_shard = true;
        r.ep = static_cast<int>(d.devices.size());
        break;
      case DirectiveOp::kShardTensor:
        if (have_tp || d.device_groups.empty()) break;
        have_tp = true;
        r.tp = static_cast<int>(d.device_groups[0].size());
        r.tp_groups = d.device_groups;
        r.sequence_parallel = d.sequence_parallel;
        r.tp_comm_overlap = d.tp_comm_overlap;
        break;
      case DirectiveOp::kSplit:
        r.microbatches = d.num_microbatches;
        paths.split = d.pointer;
        break;
      case DirectiveOp::kRecompute:
        if (have_rc) break;
        have_rc = true;
        r.recompute = d.recompute == RecomputeMode::kFull ? "full" : "selective";
        break;
      case DirectiveOp::kOrder:
        break;
    }
  }
  if (!have_rep) r.dp = place_width;
  r.devices_used = static_cast<int>(used.size());
  r.placement.clear();
  for (const auto& [s, devs] : stage_devices) r.placement.push_back(devs);
  r.stages = std::max<int>(1, static_cast<int>(stage_devices.size()));
  r.ranks = std::max<int>(1, static_cast<int>(stages_of_list.size()));
  r.stages_per_rank = 1;
  for (const auto& [list, stages] : stages_of_list)
    r.stages_per_rank = std::max(r.stages_per_rank, static_cast<int>(stages.size()));
  return paths;
}

class FieldWriter {
 public:
  FieldWriter(ResolvedPlan& r, const JsonSource* src) : r_(r), src_(src) {}
  bool written(const std::string& path) const {
    return src_ && !path.empty() && src_->find(path) != nullptr;
  }
  // A value whose source is `plan` when `path` is written, else `otherwise`.
  void add(std::string name, std::string path, Json value, ValueSource otherwise) {
    const ValueSource s = written(path) ? ValueSource::kPlan : otherwise;
    r_.fields.push_back({std::move(name), std::move(path), std::move(value), s});
  }

 private:
  ResolvedPlan& r_;
  const JsonSource* src_;
};

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kFP32:
      return "fp32";
    case DType::kBF16:
      return "bf16";
    case DType::kFP16:
      return "fp16";
    case DType::kFP8:
      return "fp8";
  }
  return "bf16";
}

}  // namespace

ResolvedPlan resolve_structure(const Plan& plan, const std::vector<Directive>& directives,
                               const JsonSource* src) {
  ResolvedPlan r;
  const DirectivePaths dp = read_directives(directives, r);
  r.microbatch_size = plan.model.microbatch_size;
  r.cluster_devices = plan.cluster.num_devices();
  const BuilderCall* call = plan.builder ? &*plan.builder : nullptr;
  const Layout* layout = call && call->layout ? &*call->layout : nullptr;
  if (call) r.family = call->builder;
  if (layout) r.order = layout->order;

  FieldWriter w(r, src);
  // Schedule structure: a layout key's path when the plan has the shorthand, the builder call's
  // own keys, else what the directives say.
  const ValueSource structural = layout ? ValueSource::kDefault : ValueSource::kDirectives;
  auto lay = [&](const char* key) {
    return layout ? "/schedule/layout/" + std::string(key) : std::string();
  };
  w.add("family", call ? "/schedule/builder" : "", r.family, ValueSource::kDirectives);
  w.add("ranks", layout ? lay("pp") : call && call->ranks > 0 ? "/schedule/ranks" : "", r.ranks,
        structural);
  w.add("stages_per_rank", call ? "/schedule/stages_per_rank" : "", r.stages_per_rank,
        call ? ValueSource::kBuilder : ValueSource::kDirectives);
  w.add("stages", "", r.stages, ValueSource::kDerived);
  w.add("tp", lay("tp"), r.tp, structural);
  w.add("dp", lay("dp"), r.dp, structural);
  w.add("ep", lay("ep"), r.ep, structural);
  w.add("cp", lay("cp"), r.cp, structural);
  w.add("cp_comm_type", lay("cp_comm_type"), r.cp_comm_type, structural);
  w.add("zero", lay("zero"), r.zero, structural);
  w.add("sequence_parallel", lay("sequence_parallel"), r.sequence_parallel, structural);
  w.add("tp_comm_overlap", lay("tp_comm_overlap"), r.tp_comm_overlap, structural);
  w.add("order", lay("order"), r.order, layout ? ValueSource::kDefault : ValueSource::kDerived);
  // A hand-written plan's values live in its directives (the first split / replicate).
  auto in_directive = [&](const std::string& ptr, const char* key) {
    return call || ptr.empty() ? std::string() : ptr + "/" + key;
  };
  w.add("microbatches", call ? "/schedule/microbatches" : in_directive(dp.split, "num_microbatches"),
        r.microbatches, ValueSource::kDirectives);
  w.add("recompute", "", r.recompute,
        r.recompute == "none" ? ValueSource::kDefault : ValueSource::kDirectives);
  const ValueSource rep = r.dp > 1 && !layout ? ValueSource::kDirectives : ValueSource::kDefault;
  w.add("bucket_size_MB", in_directive(dp.replicate, "bucket_size"), r.bucket_size_MB, rep);
  w.add("prefetch", "", r.prefetch, rep);
  w.add("reshard_after_forward", "", r.reshard_after_forward, rep);
  w.add("streams", "", r.streams, layout ? ValueSource::kLayout : ValueSource::kDirectives);
  w.add("microbatch_size", "/model/microbatch_size", r.microbatch_size, ValueSource::kDefault);
  w.add("global_batch", "", r.global_batch(), ValueSource::kDerived);
  w.add("devices_used", "", r.devices_used, ValueSource::kDerived);

  // Model: every key that changes what is simulated, named and sourced as the schema table
  // has it (its source when the plan leaves it out: default, or derived for kv_heads and
  // head_dim). Only the free-text name and the model family (which decides which keys apply)
  // are not fields. A synthetic model has none of the transformer's keys (the parser refuses
  // them).
  const ModelSpec& m = plan.model;
  auto model = [&](const char* section, const char* key, Json value) {
    const std::string at = section == std::string_view("moe") ? "/model/moe/" : "/model/";
    w.add(key, at + key, std::move(value), schema_key(section, key).when_absent);
  };
  model("model", "pp_regions", m.pp_regions);
  model("model", "layers", m.layers);
  model("model", "dtype", dtype_name(m.dtype));  // a synthetic model's parameter count too
  if (m.family == ModelSpec::Family::kTransformer) {
    model("model", "hidden", m.hidden);
    model("model", "heads", m.heads);
    model("model", "kv_heads", m.kv_heads > 0 ? m.kv_heads : m.heads);
    model("model", "head_dim", m.attention_head_dim());
    model("model", "ffn_hidden", m.ffn_hidden);
    model("model", "vocab", m.vocab);
    model("model", "make_vocab_size_divisible_by", m.vocab_divisible_by);
    model("model", "seq_len", m.seq_len);
    model("model", "gated_mlp", m.gated_mlp);
    model("model", "tie_embeddings", m.tie_embeddings);
    model("model", "attention", m.attention == AttentionImpl::kUnfused ? "unfused" : "flash");
    model("model", "bias", m.bias);
    model("model", "dropout", m.dropout);
    model("model", "async_tp_grad_reduce", m.async_tp_grad_reduce);
    if (m.moe) {
      const MoeSpec& e = *m.moe;
      model("moe", "experts", e.experts);
      model("moe", "top_k", e.top_k);
      model("moe", "expert_ffn_hidden", e.expert_ffn_hidden);
      model("moe", "shared_experts", e.shared_experts);
      model("moe", "first_layer", e.first_layer);
      model("moe", "every", e.every);
      model("moe", "capacity_factor", e.capacity_factor);
      model("moe", "token_drop_policy",
            e.token_drop_policy == MoeSpec::DropPolicy::kPosition ? "position" : "probs");
      model("moe", "imbalance", e.imbalance);
    }
  } else {
    model("model", "activation_bytes", m.activation_bytes);
    model("model", "param_bytes", m.param_bytes);
    model("model", "boundary_bytes", m.boundary_bytes);
    model("model", "flops", m.flops);
  }

  // Cluster: a preset fills what the plan does not write.
  const ClusterSpec& c = plan.cluster;
  const ValueSource dev = c.preset.empty() ? ValueSource::kDefault : ValueSource::kPreset;
  w.add("preset", "/cluster/preset", c.preset, ValueSource::kDefault);
  w.add("nodes", "/cluster/nodes", c.nodes, ValueSource::kDefault);
  w.add("devices_per_node", "/cluster/devices_per_node", c.devices_per_node, dev);
  w.add("cluster_devices", "", r.cluster_devices, ValueSource::kDerived);
  w.add("device_kind", "", c.device.kind, dev);  // the preset's (no plan key)
  w.add("peak_tflops", "/cluster/peak_tflops", c.device.peak_tflops, dev);
  w.add("hbm_GBps", "/cluster/hbm_GBps", c.device.hbm_GBps, dev);
  w.add("memory_GiB", "/cluster/memory_GiB", c.device.memory_GiB, dev);
  w.add("intra_node_GBps", "/cluster/intra_node/bandwidth_GBps", c.intra_node.bandwidth_GBps,
        dev);
  w.add("inter_node_GBps", "/cluster/inter_node/bandwidth_GBps", c.inter_node.bandwidth_GBps,
        dev);
  return r;
}

}  // namespace stretto::plan
