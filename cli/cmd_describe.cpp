// `stretto describe PLAN`: what Stretto will simulate, resolved — the cluster (devices, per-link
// bandwidth and latency, peak FLOP/s, memory), the model, its parallel layout and batch, the cost
// model and its options, every resolved value with its source (the fields of `--format json`),
// which measured-table entries the plan's ops match and which fall back to the analytic model,
// and the effects that are not modelled.
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "commands.h"
#include "stretto/costmodel/profile_table.h"
#include "stretto/compiler/compiler.h"
#include "stretto/plan/estimate.h"
#include "stretto/plan/schema.h"
#include "stretto/sim/coverage.h"
#include "stretto/sim/session.h"
#include "stretto/support/limits.h"
#include "stretto/support/plural.h"
#include "usage.h"

namespace stretto::cli {

using plan::CostModelSpec;

namespace {

std::string link(const plan::LinkSpec& l) {
  return fmt::format("{:g} GB/s per direction per device, {:g} us latency", l.bandwidth_GBps,
                     l.latency_us);
}

// A resolved value as text: numbers as `{:g}`, strings bare ("-" when empty), the rest as
// compact JSON.
std::string value_text(const plan::Json& v) {
  if (v.is_string()) return v.get<std::string>().empty() ? "-" : v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
  return v.dump();
}

// The parallel layout and the batch, from the resolved plan.
std::string layout_lines(const plan::ResolvedPlan& r) {
  return fmt::format(
      "  parallelism     tp {} x pp {} ({}, {} per rank) x dp {}, ep {}; ZeRO {}{}\n"
      "  batch           {} x {} x dp {} = global batch {}; recompute {}\n",
      r.tp, r.stages, count_noun(r.ranks, "rank", "ranks"),
      count_noun(r.stages_per_rank, "stage", "stages"), r.dp, r.ep, r.zero,
      r.sequence_parallel ? "; sequence parallel" : "",
      count_noun(r.microbatches, "microbatch", "microbatches"),
      count_noun(r.microbatch_size, "sequence", "sequences"), r.dp, r.global_batch(), r.recompute);
}

// Every resolved value (the fields of `--format json`), grouped by source in the order
// plan, layout, directives, builder, preset, derived, default; each group's `name value` pairs
// wrapped to ~100 columns.
std::string resolved_text(const plan::ResolvedPlan& r) {
  std::string o = "\nresolved values (as --format json; docs/plan-format.md \"Resolved values\")\n";
  constexpr plan::ValueSource kOrder[] = {plan::ValueSource::kPlan,    plan::ValueSource::kLayout,
                                          plan::ValueSource::kDirectives,
                                          plan::ValueSource::kBuilder, plan::ValueSource::kPreset,
                                          plan::ValueSource::kDerived, plan::ValueSource::kDefault};
  constexpr size_t kIndent = 14, kWidth = 100;
  for (plan::ValueSource s : kOrder) {
    std::string line = fmt::format("  {:<{}}", plan::value_source_name(s), kIndent - 2);
    bool any = false;
    for (const plan::ResolvedField& f : r.fields) {
      if (f.source != s) continue;
      std::string item = f.name + " " + value_text(f.value);
      if (any && line.size() + 2 + item.size() > kWidth) {
        o += line + ",\n";
        line = std::string(kIndent, ' ');
      } else if (any) {
        line += ", ";
      }
      line += item;
      any = true;
    }
    if (any) o += line + "\n";
  }
  return o;
}

std::string describe(const compiler::CompiledPlan& cp, const std::string& path) {
  const plan::Plan& p = cp.plan;
  const plan::ResolvedPlan resolved = sim::resolve_plan(cp);
  const plan::ClusterSpec& c = p.cluster;
  std::string o;
  o += fmt::format("plan        {}\n\n", path);
  o += "cluster\n";
  o += fmt::format("  preset          {}\n", c.preset);
  o += fmt::format("  devices         {} = {} x {}\n", c.num_devices(),
                   count_noun(c.nodes, "node", "nodes"),
                   count_noun(c.devices_per_node, "device", "devices"));
  o += fmt::format("  device          {:g} TFLOP/s dense BF16 peak, {:g} GB/s HBM, {:g} GiB, {} "
                   "SMs\n",
                   c.device.peak_tflops, c.device.hbm_GBps, c.device.memory_GiB, c.device.sms);
  o += c.device.kind == "cpu"
           ? "  memory          simulate reports the allocated peak (no caching allocator on a "
             "CPU: reserved = allocated)\n"
           : fmt::format(
                 "  memory          simulate reports the allocated peak, what PyTorch's CUDA "
                 "caching allocator reserves (512 B blocks, 2 / 20 MiB segments), and the "
                 "device total with a {:g} MiB CUDA context and NCCL's buffers ({} channels), "
                 "which capacity is judged on\n",
                 c.device.cuda_context_MiB, c.device.nccl_channels);
  o += fmt::format("  intra-node link {}\n", link(c.intra_node));
  if (c.nodes > 1) o += fmt::format("  inter-node link {}\n", link(c.inter_node));
  if (c.islands > 1)
    o += fmt::format("  islands         {} of {} nodes, joined by {}\n", c.islands,
                     c.nodes / std::max(1, c.islands), link(c.dcn));
  const plan::ModelSpec& m = p.model;
  o += "\nmodel\n";
  if (m.family == plan::ModelSpec::Family::kTransformer) {
    o += fmt::format("  transformer     {} layers, hidden {}, {} heads ({} kv), ffn {}, vocab {}, "
                     "seq_len {}, microbatch {}\n",
                     m.layers, m.hidden, m.heads, m.kv_heads ? m.kv_heads : m.heads, m.ffn_hidden,
                     m.vocab, m.seq_len, m.microbatch_size);
    if (m.head_dim > 0) o += fmt::format("  head_dim        {}\n", m.head_dim);
    if (m.moe) {
      o += fmt::format("  MoE             {} experts, top-{}, expert ffn {}, {} shared", m.moe->experts,
                       m.moe->top_k, m.moe->expert_ffn_hidden, m.moe->shared_experts);
      if (m.moe->capacity_factor > 0)
        o += fmt::format("; capacity factor {:g}, over it an expert keeps {}",
                         m.moe->capacity_factor,
                         m.moe->token_drop_policy == plan::MoeSpec::DropPolicy::kProbs
                             ? "the highest-probability tokens (token_drop_policy probs)"
                             : "the first tokens (token_drop_policy position)");
      o += "\n";
    }
  } else {
    o += fmt::format("  synthetic       {} regions\n", m.layers);
  }
  o += fmt::format("  parameters      {:.3g} ({})\n", static_cast<double>(cp.model.total_params),
                   count_noun(m.pp_regions, "pipeline region", "pipeline regions"));
  std::set<int> used;
  for (const plan::Directive& d : p.schedule) {
    for (int x : d.devices) used.insert(x);
    for (const auto& g : d.device_groups)
      for (int x : g) used.insert(x);
  }
  o += fmt::format("  schedule        {} directives; devices used: {} of {}\n", p.schedule.size(),
                   used.size(), c.num_devices());
  o += layout_lines(resolved);
  o += fmt::format("  DAG             {} nodes, {} device program classes\n", cp.dag.nodes.size(),
                   cp.classes.size());
  const plan::ResourceEstimate e = plan::estimate_resources(p, false, true);
  o += fmt::format(
      "  estimate        ~{} to compile and simulate (~{} with --fold-replicas); "
      "budget {}\n",
      human_bytes(e.total_bytes()),
      human_bytes(plan::estimate_resources(p, true, true).total_bytes()),
      human_bytes(static_cast<double>(plan::memory_budget_bytes())));

  o += "\ncost model\n";
  const CostModelSpec& cm = p.costmodel;
  if (cm.kind == CostModelSpec::Kind::kFixed) {
    o += fmt::format("  fixed           F {:.3f} ms, B {:.3f} ms (BI {:.3f}, BW {:.3f}), comm {:.3f} "
                     "ms\n",
                     cm.f_ns / 1e6, cm.b_ns / 1e6, cm.bi_ns / 1e6, cm.bw_ns / 1e6,
                     cm.comm_ns / 1e6);
  } else {
    o += fmt::format("  {}{}\n",
                     cm.kind == CostModelSpec::Kind::kProfiled ? "profiled        table "
                                                               : "analytic",
                     cm.kind == CostModelSpec::Kind::kProfiled ? cm.profile : "");
    // The resolved values (the same the section below and --format json show).
    auto num = [&](const char* name) -> std::optional<double> {
      const plan::ResolvedField* f = resolved.field(name);
      if (!f || !f->value.is_number()) return std::nullopt;
      return f->value.get<double>();
    };
    const auto gemm = num("gemm_efficiency"), attn = num("attention_efficiency"),
               hbm = num("memory_efficiency"), floor = num("launch_floor_us"),
               dispatch = num("dispatch_us");
    if (gemm && attn && hbm && floor && dispatch)
      o += fmt::format("  efficiencies    GEMM {:g}, attention {:g}, HBM {:g} of peak; "
                       "kernel floor {:g} us, dispatch {:g} us per op\n",
                       *gemm, *attn, *hbm, *floor, *dispatch);
    if (cm.options.is_object() && !cm.options.empty())
      o += fmt::format("  options set     {}\n", cm.options.dump());
    else
      o += "  options set     none (defaults; see docs/costmodel.md)\n";
    if (cm.kind == CostModelSpec::Kind::kProfiled) {
      auto t = cost::load_profile_table(cm.profile);
      if (!t) {
        o += "  table           cannot be read: " + t.error()[0].message + "\n";
      } else {
        o += fmt::format("  series          {} kernel, {} collective\n",
                         t->shape_kernels.size() + t->bytes_kernels.size(), t->collectives.size());
        o += sim::coverage_text(sim::table_coverage(cp, *t), "  ");
      }
    }
  }
  o += resolved_text(resolved);
  // The same list `simulate` prints, plus what no plan models.
  o += "\nnot modelled\n";
  for (const auto& e : compiler::unmodelled_effects(cp)) o += fmt::format("  {}\n", e);
  o += "  the caching allocator (peaks are allocated bytes); DualPipe with data parallelism\n"
       "  (refused). Details: docs/semantics.md\n";
  return o;
}

}  // namespace

void add_describe_command(CLI::App& app, Commands& out) {
  // `stretto schema`: docs/plan.schema.json, generated from the plan's schema table.
  auto* schema = app.add_subcommand(
      "schema", "Print the plan's JSON Schema (docs/plan.schema.json), generated from the schema "
                "table every reader of plans uses");
  auto schema_format = std::make_shared<std::string>("json");
  schema->add_option("--format", *schema_format,
                     "json (default): the JSON Schema; markdown: a key table per section, "
                     "as docs/plan-format.md carries them between <!-- schema:S --> markers")
      ->check(CLI::IsMember({"json", "markdown"}));
  out.push_back({schema, [schema_format] {
                   const std::string text = *schema_format == "markdown"
                                                ? plan::plan_schema_markdown()
                                                : plan::plan_json_schema_text();
                   return write_output("", text) ? 0 : 2;
                 }});

  auto path = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("text");
  auto* cmd = app.add_subcommand(
      "describe", "Show what a plan resolves to: cluster, links, model, cost model, estimate");
  cmd->add_option("PLAN", *path, "Plan file (JSON); - reads it from standard input")->required();
  cmd->add_option("--format", *format,
                  "text (default) or json: the resolved plan, every value with its source "
                  "(docs/plan-format.md)")
      ->check(CLI::IsMember({"text", "json"}));
  add_limit_options(cmd);
  out.push_back({cmd, [path, format] {
                   auto cp = compiler::compile_file(*path);
                   if (!cp) return report(cp.error());
                   if (*format == "json") {
                     plan::Json j = sim::resolve_plan(*cp).to_json();
                     j["plan"] = *path;
                     return write_output("", j.dump(2) + "\n") ? 0 : 2;
                   }
                   return write_output("", describe(*cp, *path)) ? 0 : 2;
                 }});
}

}  // namespace stretto::cli
