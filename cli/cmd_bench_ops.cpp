// `stretto bench-ops PLAN [--device cpu|cuda] [--iterations N] [--warmup K] [--format table|json]
//   [--no-replay]`
// Every distinct compute op of the plan timed alone on the replay's own model code
// (bench_ops.h), next to the replay's time for that op (a replay of the plan on this host) and
// the cost model's prediction: replay vs isolated vs predicted, forward and backward.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <map>
#include <optional>

#include "commands.h"
#include "output.h"
#include "stretto/backend/bench_ops.h"
#include "stretto/backend/replay.h"
#include "stretto/sim/session.h"
#include "stretto/support/plural.h"

namespace stretto::cli {

using plan::Json;
using plan::Pass;

namespace {

struct BenchOpts {
  std::string plan, format, device = "auto", kernels = "fused";
  int iterations = 10, warmup = 2, threads = 1, replay_iterations = 3;
  double timeout_s = 120;
  bool replay = true, cuda_graphs = false;
};

int64_t median(std::vector<int64_t> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

// Forward and backward (B, or BI + BW) of one row: replay medians and predictions, ns (-1: none).
struct Row {
  int64_t replay_f = -1, replay_b = -1, pred_f = -1, pred_b = -1;
};

// The row's first-instance (non-recomputed) nodes' prediction, and the replay's median over
// every instance and measured step, by pass.
std::vector<Row> compare_rows(const compiler::CompiledPlan& cp, const cost::CostModel& cm,
                              const backend::BenchOpsResult& b, const backend::ReplayResult* r) {
  std::vector<int> row_of(cp.model.ops.size(), -1);
  for (size_t i = 0; i < b.ops.size(); ++i)
    for (uint32_t o : b.ops[i].model_ops) row_of[o] = static_cast<int>(i);
  sim::CostQueries cq(cp);
  // per row and pass: predicted ns of the first instance's node; replay samples
  std::vector<std::map<Pass, int64_t>> pred(b.ops.size());
  std::vector<std::map<Pass, std::vector<int64_t>>> meas(b.ops.size());
  for (const compiler::Node& n : cp.dag.nodes) {
    if (n.kind != compiler::NodeKind::kCompute || n.recompute || n.op >= row_of.size() ||
        row_of[n.op] < 0)
      continue;
    if (n.op != b.ops[static_cast<size_t>(row_of[n.op])].op) continue;
    auto& p = pred[static_cast<size_t>(row_of[n.op])];
    if (!p.count(n.tags.pass)) p[n.tags.pass] = cm.compute(cq.compute(n)).ns;
  }
  if (r)
    for (const backend::OpRecord& o : r->ops) {
      if (o.iteration < 0 || o.node >= cp.dag.nodes.size()) continue;
      const compiler::Node& n = cp.dag.nodes[o.node];
      if (n.kind != compiler::NodeKind::kCompute || n.recompute || n.op >= row_of.size() ||
          row_of[n.op] < 0)
        continue;
      meas[static_cast<size_t>(row_of[n.op])][n.tags.pass].push_back(o.end_ns - o.start_ns);
    }
  auto backward = [](const auto& m, auto value) -> int64_t {
    if (m.count(Pass::kB)) return value(m.at(Pass::kB));
    int64_t t = -1;
    for (Pass p : {Pass::kBI, Pass::kBW})
      if (m.count(p)) t = std::max<int64_t>(t, 0) + value(m.at(p));
    return t;
  };
  std::vector<Row> rows(b.ops.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    auto ident = [](int64_t v) { return v; };
    auto med = [](const std::vector<int64_t>& v) { return median(v); };
    if (pred[i].count(Pass::kF)) rows[i].pred_f = pred[i].at(Pass::kF);
    rows[i].pred_b = backward(pred[i], ident);
    if (meas[i].count(Pass::kF)) rows[i].replay_f = median(meas[i].at(Pass::kF));
    rows[i].replay_b = backward(meas[i], med);
  }
  return rows;
}

Json timing_json(const backend::BenchTiming& t) {
  return {{"median_ns", t.median_ns}, {"min_ns", t.min_ns}, {"max_ns", t.max_ns}};
}
Json ns_or_null(int64_t v) { return v < 0 ? Json(nullptr) : Json(v); }
std::string ms(int64_t v) { return v < 0 ? std::string("-") : fmt::format("{:.3f}", v / 1e6); }

int run_bench_ops(const BenchOpts& o) {
  auto s = sim::Session::open(o.plan);
  if (!s) return report(s.error());
  const compiler::CompiledPlan& cp = s->compiled();
  backend::BenchOpsOptions bo;
  bo.iterations = o.iterations;
  bo.warmup = o.warmup;
  bo.threads = o.threads;
  bo.kernels = o.kernels == "reference" ? backend::Kernels::kReference : backend::Kernels::kFused;
  bo.cuda_graphs = o.cuda_graphs;
  bo.device = o.device == "cuda" ? backend::DeviceKind::kCuda
              : o.device == "cpu" ? backend::DeviceKind::kCpu
                                  : backend::DeviceKind::kAuto;
  if (cp.plan.model.family == plan::ModelSpec::Family::kSynthetic) {
    Diagnostic d;
    d.loc.file = o.plan;
    d.message = "bench-ops: a synthetic model has no per-op shapes to benchmark";
    d.hint = "use a transformer plan";
    return report({d});
  }
  backend::BenchOpsResult b;
  try {
    b = backend::bench_ops(cp, bo);
  } catch (const std::exception& e) {
    Diagnostic d;
    d.loc.file = o.plan;
    d.message = e.what();
    d.hint = "--device cpu runs everywhere LibTorch does";
    return report({d});
  }
  std::fputs(backend::kernel_fallback_warning(b.kernel_families).c_str(), stderr);
  std::optional<backend::ReplayResult> replayed;
  if (o.replay) {
    backend::ReplayOptions ro;
    ro.iterations = o.replay_iterations;
    ro.warmup = 1;
    ro.threads = o.threads;
    ro.kernels = bo.kernels;
    ro.timeout_ms = static_cast<int64_t>(o.timeout_s * 1000);
    ro.device = b.device == "cpu" ? backend::DeviceKind::kCpu : backend::DeviceKind::kCuda;
    if (auto d = backend::check_supported(cp, ro); !d.empty()) return report(d);
    backend::LaunchOptions lo;
    lo.exe = self_exe();
    lo.quiet = true;
    lo.args = {"replay", o.plan, "--iterations", std::to_string(ro.iterations), "--warmup", "1",
               "--timeout", fmt::format("{}", o.timeout_s), "--device",
               b.device == "cpu" ? "cpu" : "cuda", "--threads", std::to_string(o.threads),
               "--kernels", o.kernels};
    auto r = backend::launch_local(cp, ro, lo);
    if (!r) return report(r.error());
    replayed = std::move(*r);
  }
  const std::vector<Row> rows = compare_rows(cp, s->cost_model(), b, replayed ? &*replayed : nullptr);
  const std::string f = o.format.empty() ? (stdout_is_tty() ? "table" : "json") : o.format;
  std::string text;
  if (f == "json") {
    Json j = {{"plan", o.plan},
              {"device", b.device},
              {"dtype", b.dtype},
              {"iterations", b.iterations},
              {"warmup", b.warmup},
              {"kernels", o.kernels},
              {"kernel_families", backend::kernel_uses_json(b.kernel_families)},
              {"cuda_graphs", o.cuda_graphs},
              {"replay_iterations", replayed ? Json(o.replay_iterations) : Json(nullptr)},
              {"ops", Json::array()}};
    for (size_t i = 0; i < b.ops.size(); ++i) {
      const backend::BenchOp& op = b.ops[i];
      j["ops"].push_back({{"kind", op.kind},
                          {"name", op.name},
                          {"instances", op.instances},
                          {"input_shapes", op.input_shapes},
                          {"output_shape", op.output_shape},
                          {"isolated", {{"forward", timing_json(op.forward)},
                                        {"backward", timing_json(op.backward)}}},
                          {"params", op.params},
                          {"params_with_gradient", op.params_with_gradient},
                          {"grad_inputs", op.grad_inputs},
                          {"inputs_with_gradient", op.inputs_with_gradient},
                          {"backward_kernel", op.backward_kernel},
                          {"graph", op.graphed ? Json{{"forward", timing_json(op.graph_forward)},
                                                      {"backward", timing_json(op.graph_backward)}}
                                               : Json(nullptr)},
                          {"graph_error", op.graph_error.empty() ? Json(nullptr) : Json(op.graph_error)},
                          {"replay", {{"forward_ns", ns_or_null(rows[i].replay_f)},
                                      {"backward_ns", ns_or_null(rows[i].replay_b)}}},
                          {"predicted", {{"forward_ns", ns_or_null(rows[i].pred_f)},
                                         {"backward_ns", ns_or_null(rows[i].pred_b)}}}});
    }
    text = j.dump(2) + "\n";
  } else {
    text = fmt::format("bench-ops {}: {} distinct ops on {} ({}), median of {} after {} warm-up; "
                       "replay: {}\n",
                       o.plan, b.ops.size(), b.device, b.dtype, b.iterations, b.warmup,
                       replayed ? "median over " + count_noun(o.replay_iterations, "step", "steps")
                                : std::string("not run (--no-replay)"));
    text += fmt::format("{:<16} {:<28} {:>4} | {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9}\n",
                        "kind", "first op", "n", "F replay", "F alone", "spread", "F pred",
                        "B replay", "B alone", "spread", "B pred");
    for (size_t i = 0; i < b.ops.size(); ++i) {
      const backend::BenchOp& op = b.ops[i];
      auto spread = [](const backend::BenchTiming& t) {
        return fmt::format("±{:.0f}%", t.median_ns > 0 ? 50.0 * (t.max_ns - t.min_ns) / t.median_ns : 0.0);
      };
      text += fmt::format("{:<16} {:<28} {:>4} | {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9}\n",
                          op.kind, op.name, op.instances, ms(rows[i].replay_f),
                          ms(op.forward.median_ns), spread(op.forward), ms(rows[i].pred_f),
                          ms(rows[i].replay_b), ms(op.backward.median_ns), spread(op.backward),
                          ms(rows[i].pred_b));
    }
    text += "times in ms; spread: (max - min) / 2 of the isolated runs, % of the median\n";
    std::vector<std::string> passing;
    for (const backend::BenchOp& op : b.ops)
      if (!op.backward_kernel) passing.push_back(op.name);
    if (!passing.empty())
      text += fmt::format("no kernel in the backward (the output gradient passes through; the time "
                          "is autograd's host work): {}\n",
                          fmt::join(passing, ", "));
    if (!b.kernel_families.empty())
      text += fmt::format("kernels (--kernels {}): {}\n", o.kernels,
                          backend::kernel_uses_table(b.kernel_families, "  "));
  }
  return write_output("", text) ? 0 : 2;
}

}  // namespace

void add_bench_ops_command(CLI::App& app, Commands& out) {
  auto o = std::make_shared<BenchOpts>();
  auto* cmd = app.add_subcommand("bench-ops", kBenchOpsSummary);
  cmd->add_option("PLAN", o->plan, "Plan file (JSON)")->required();
  cmd->add_option("--device", o->device, "auto (CUDA when available), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--iterations", o->iterations, "Timed runs per op and direction (default 10)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", o->warmup, "Untimed runs first (default 2)")->check(CLI::Range(0, 100000));
  cmd->add_option("--threads", o->threads, "Intra-op threads (default 1)")->check(CLI::Range(1, 1024));
  cmd->add_option("--replay-iterations", o->replay_iterations,
                  "Measured steps of the plan's replay (default 3)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--timeout", o->timeout_s, "Seconds a replay rank waits for a peer (default 120)")
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_flag("!--no-replay", o->replay, "Time the ops alone only: no replay column");
  cmd->add_option("--kernels", o->kernels, "fused (default) or reference model kernels")
      ->check(CLI::IsMember({"fused", "reference"}));
  cmd->add_flag("--cuda-graphs", o->cuda_graphs,
                "CUDA only: also time each op's forward and backward as a replayed CUDA graph");
  cmd->add_option("--format", o->format, "table (default on a terminal) or json")
      ->check(CLI::IsMember({"table", "json"}));
  out.push_back({cmd, [o] { return run_bench_ops(*o); }});
}

}  // namespace stretto::cli
