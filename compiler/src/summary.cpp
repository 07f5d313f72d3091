// `stretto compile` output: DAG summary as a table (people) or JSON (machines), and Graphviz.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "stretto/compiler/compiler.h"
#include "stretto/support/plural.h"

namespace stretto::compiler {

using plan::Json;

namespace {
std::string human_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (std::abs(v) >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}
std::string human_count(int64_t n) {
  if (n >= 1'000'000'000) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1'000'000) return fmt::format("{:.2f} M", n / 1e6);
  if (n >= 1'000) return fmt::format("{:.1f} K", n / 1e3);
  return std::to_string(n);
}
}  // namespace

CompileSummary summarize(const CompiledPlan& cp) {
  CompileSummary s;
  const auto& dag = cp.dag;
  s.nodes = dag.nodes.size();
  s.edges = dag.edges.size();
  for (const auto& e : dag.edges) (e.kind == EdgeKind::kData ? s.data_edges : s.temporal_edges)++;
  for (const auto& n : dag.nodes) {
    switch (n.kind) {
      case NodeKind::kCompute:
        ++s.compute_nodes;
        break;
      case NodeKind::kTransfer:
        ++s.transfer_nodes;
        break;
      case NodeKind::kCollective:
        ++s.collective_nodes;
        break;
      case NodeKind::kBarrier:
        ++s.barrier_nodes;
        break;
    }
  }
  s.total_params = cp.model.total_params;
  // Saved activations of one microbatch per class: sum over F nodes of MB 0 (or no MB).
  std::vector<int64_t> act_per_class(cp.classes.size(), 0);
  for (const auto& m : dag.mem) {
    const Node& n = dag.nodes[m.node];
    if (n.kind != NodeKind::kCompute || n.tags.pass != plan::Pass::kF || m.bytes <= 0 ||
        m.cat != MemCategory::kActivations || n.tags.mb() > 0)
      continue;
    for (size_t c = 0; c < cp.classes.size(); ++c) {
      const auto& devs = dag.device_sets[n.devs].devices;
      if (std::find(devs.begin(), devs.end(), cp.classes[c].devices[0]) != devs.end())
        act_per_class[c] += m.bytes;
    }
  }
  for (int d = 0; d < cp.num_devices; ++d) {
    CompileSummary::PerDevice pd;
    pd.id = d;
    int c = cp.class_of_device[d];
    if (c >= 0) {
      const auto& cl = cp.classes[c];
      for (uint32_t i : cl.program) {
        switch (dag.nodes[i].kind) {
          case NodeKind::kCompute:
            ++pd.compute;
            break;
          case NodeKind::kTransfer:
            ++pd.transfers;
            break;
          case NodeKind::kCollective:
            ++pd.collectives;
            break;
          default:
            break;
        }
      }
      for (size_t st = 0; st < cl.streams.size(); ++st)
        if (!cl.streams[st].empty())
          pd.per_stream.emplace_back(dag.streams[st], cl.streams[st].size());
      pd.activation_bytes_per_mb = act_per_class[c];
    }
    if (static_cast<size_t>(d) < cp.static_mem.size()) {
      pd.param_bytes = cp.static_mem[d].params;
      pd.grad_bytes = cp.static_mem[d].grads;
      pd.optimizer_bytes = cp.static_mem[d].optimizer;
    }
    s.devices.push_back(std::move(pd));
  }
  return s;
}

std::string summary_table(const CompiledPlan& cp, const CompileSummary& s) {
  std::string out;
  out += fmt::format("plan        {}\n", cp.plan.file.empty() ? "<memory>" : cp.plan.file);
  out += fmt::format("model       {} params, {} ops/microbatch, {} PP regions\n",
                     human_count(s.total_params), cp.model.ops.size(), cp.model.pp_regions);
  out +=
      fmt::format("devices     {} ({} classes of identical programs), {}, ZeRO-{}\n",
                  cp.num_devices, cp.classes.size(),
                  count_noun(cp.num_microbatches, "microbatch", "microbatches"), cp.zero_level);
  out +=
      fmt::format("DAG         {} nodes: {} compute, {} transfers, {} collectives, {} barriers\n",
                  s.nodes, s.compute_nodes, s.transfer_nodes, s.collective_nodes, s.barrier_nodes);
  out += fmt::format("edges       {}: {} data, {} temporal\n\n", s.edges, s.data_edges,
                     s.temporal_edges);
  out += fmt::format("{:>6}  {:>8}  {:>9}  {:>11}  {:>10}  {:>10}  {:>10}  {:>12}  {}\n", "device",
                     "compute", "transfers", "collectives", "params", "grads", "optimizer",
                     "act/microbatch", "ops per stream");
  // Devices with identical rows (DP replicas) are folded into one line.
  for (size_t i = 0; i < s.devices.size();) {
    const auto& d = s.devices[i];
    size_t j = i + 1;
    auto same = [&](const CompileSummary::PerDevice& e) {
      return e.compute == d.compute && e.transfers == d.transfers &&
             e.collectives == d.collectives && e.per_stream == d.per_stream &&
             e.param_bytes == d.param_bytes && e.grad_bytes == d.grad_bytes &&
             e.optimizer_bytes == d.optimizer_bytes &&
             e.activation_bytes_per_mb == d.activation_bytes_per_mb;
    };
    while (j < s.devices.size() && same(s.devices[j]) && s.devices[j].id == s.devices[j - 1].id + 1)
      ++j;
    std::string id =
        j - i > 1 ? fmt::format("{}-{}", d.id, s.devices[j - 1].id) : std::to_string(d.id);
    std::string streams;
    for (const auto& [name, cnt] : d.per_stream)
      streams += fmt::format("{}{}={}", streams.empty() ? "" : " ", name, cnt);
    out +=
        fmt::format("{:>6}  {:>8}  {:>9}  {:>11}  {:>10}  {:>10}  {:>10}  {:>14}  {}\n", id,
                    d.compute, d.transfers, d.collectives, human_bytes(d.param_bytes),
                    human_bytes(d.grad_bytes), human_bytes(d.optimizer_bytes),
                    human_bytes(d.activation_bytes_per_mb), streams.empty() ? "(idle)" : streams);
    i = j;
  }
  for (const auto& w : cp.warnings) out += w.render();
  return out;
}

Json summary_json(const CompiledPlan& cp, const CompileSummary& s) {
  Json j;
  j["plan"] = cp.plan.file;
  j["nodes"] = s.nodes;
  j["edges"] = s.edges;
  j["data_edges"] = s.data_edges;
  j["temporal_edges"] = s.temporal_edges;
  j["compute_nodes"] = s.compute_nodes;
  j["transfer_nodes"] = s.transfer_nodes;
  j["collective_nodes"] = s.collective_nodes;
  j["barrier_nodes"] = s.barrier_nodes;
  j["total_params"] = s.total_params;
  j["num_devices"] = cp.num_devices;
  j["device_classes"] = cp.classes.size();
  j["microbatches"] = cp.num_microbatches;
  j["zero_level"] = cp.zero_level;
  Json devs = Json::array();
  for (const auto& d : s.devices) {
    Json e;
    e["id"] = d.id;
    e["compute"] = d.compute;
    e["transfers"] = d.transfers;
    e["collectives"] = d.collectives;
    Json st = Json::object();
    for (const auto& [name, cnt] : d.per_stream) st[name] = cnt;
    e["per_stream"] = st;
    e["param_bytes"] = d.param_bytes;
    e["grad_bytes"] = d.grad_bytes;
    e["optimizer_bytes"] = d.optimizer_bytes;
    e["activation_bytes_per_microbatch"] = d.activation_bytes_per_mb;
    devs.push_back(std::move(e));
  }
  j["devices"] = std::move(devs);
  return j;
}

Expected<std::string> to_dot(const CompiledPlan& cp, size_t max_nodes) {
  const auto& dag = cp.dag;
  if (dag.nodes.size() > max_nodes) {
    Diagnostic d;
    d.message = fmt::format("the DAG has {} nodes; Graphviz output is limited to {}",
                            dag.nodes.size(), max_nodes);
    d.loc.file = cp.plan.file;
    d.hint = "use fewer microbatches or layers for inspection, or pass --dot-max-nodes N";
    return fail(std::move(d));
  }
  std::string out = "digraph stretto {\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n";
  for (uint32_t i = 0; i < dag.nodes.size(); ++i) {
    const Node& n = dag.nodes[i];
    const char* color = n.kind == NodeKind::kCompute
                            ? (n.tags.pass == plan::Pass::kF ? "lightblue" : "lightsalmon")
                        : n.kind == NodeKind::kTransfer   ? "khaki"
                        : n.kind == NodeKind::kCollective ? "palegreen"
                                                          : "gray90";
    std::string label = dag.node_name(i, cp.model);
    std::string esc;
    for (char c : label) esc += c == '"' ? std::string("\\\"") : std::string(1, c);
    out += fmt::format("  n{} [label=\"{}\", style=filled, fillcolor={}];\n", i, esc, color);
  }
  for (const auto& e : dag.edges)
    out += fmt::format("  n{} -> n{}{};\n", e.from, e.to,
                       e.kind == EdgeKind::kTemporal ? " [style=dashed, color=gray40]" : "");
  out += "}\n";
  return out;
}

std::vector<std::string> unmodelled_effects(const CompiledPlan& cp) {
  std::vector<std::string> out;
  const plan::Plan& p = cp.plan;
  if (!p.optimizer.given)
    out.push_back("optimizer step: the plan has no \"optimizer\" (add {\"kind\": \"adam\"})");
  else if (p.optimizer.kind == plan::OptimizerSpec::Kind::kNone)
    out.push_back("optimizer: none");
  if (p.costmodel.kind == plan::CostModelSpec::Kind::kFixed)
    out.push_back("compute and communication times: fixed constants (costmodel \"fixed\")");
  if (p.model.family == plan::ModelSpec::Family::kTransformer) {
    if (p.model.moe && p.model.moe->capacity_factor <= 0 && p.model.moe->imbalance <= 1.0)
      out.push_back("MoE routing imbalance: balanced routing assumed (set \"imbalance\")");
  }
  // The analytic model's kernel_style eager prices each weight gradient's accumulation into
  // .grad on every microbatch (docs/costmodel.md, "Kernel style").
  const bool priced = plan::eager_kernel_style(p.costmodel);
  if (cp.num_microbatches > 1 && !priced)
    out.push_back(
        "gradient accumulation over microbatches (each backward's read-modify-write of the "
        "gradient buffer, unless fused into the weight-gradient GEMM)");
  out.push_back("host work outside the ops (data loading, Python, logging, loss-scale checks)");
  return out;
}

}  // namespace stretto::compiler
