// The h200 preset per op class against PyTorch kernels measured on one H200: a one-layer
// Llama-3-8B plan (4096 tokens, hidden 4096, ffn 14336, 32 / 8 heads, vocab 32000, bf16) is
// compiled and simulated, and each op's F and B time is compared with the same op measured
// alone (tests/data/costmodel/h200_pytorch_ops_measured.json, "M"); the fused norm backward and
// the residual add also against the large memory rows of h200_kernels_measured_raw.json ("S"),
// the eager norm backward against S's rows of the Llama layer's bytes.
//
// The test prints the per-class table (kernel_style fused and eager) and asserts each class's
// |error| at kClasses' value plus kSlack; its control, the same rows with kernel_style
// "roofline" (every memory-bound op at memory_efficiency x HBM: the model before the measured
// rates), must break the bounds of every memory-bound class. Which rows a constant was fitted
// on ("fit") and which only check it ("check") is in the table; docs/fidelity.md has the
// discussion. OpClassH100 holds the h100-sxm preset's memory-bound classes to the H100's own
// kernel sweep (h100_kernels_measured_raw.json). Run alone:
//   build/tests/fidelity_test --gtest_filter='OpClass*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plans.h"
#include "stretto/costmodel/analytic.h"

namespace stretto {

using plan::Pass;

namespace {

using testing::json;

json load(const char* name) {
  std::ifstream in(std::string(STRETTO_TEST_DATA) + "/costmodel/" + name);
  return json::parse(in, nullptr, false);
}

// One of the four H200 replay plans simulated with a kernel style: its session and result, or
// nothing (with the failure recorded).
struct Simulated {
  sim::Session session;
  sim::Result result;
};
std::optional<Simulated> simulate_replay_plan(const std::string& name, const char* style) {
  std::ifstream in(std::string(STRETTO_TEST_DATA) + "/costmodel/h200_replay_plans/" + name +
                   ".json");
  json plan = json::parse(in, nullptr, false);
  if (plan.is_discarded()) {
    ADD_FAILURE() << name << ": no plan";
    return std::nullopt;
  }
  plan["costmodel"]["kernel_style"] = style;
  auto s = testing::session_of(plan);
  if (!s) {
    ADD_FAILURE() << name << ": " << s.error()[0].message;
    return std::nullopt;
  }
  auto r = s->simulate();
  if (!r) {
    ADD_FAILURE() << name << " " << style << ": " << r.error()[0].message;
    return std::nullopt;
  }
  return Simulated{std::move(*s), std::move(*r)};
}

// Stream rate of `add` on the H200 (S, rows >= 200 MB, median), bytes per ns: the rate at
// which a backward's output-gradient write and its inputs' .grad accumulation (which M's
// backward times include and a training step's kernels do not) are taken out of M's B.
double add_rate(const json& raw) {
  std::vector<double> r;
  for (const auto& row : raw["rows"])
    if (row["kind"] == "memory" && row["op"] == "add" && row["bytes"].get<double>() >= 2e8)
      r.push_back(row["bytes"].get<double>() / (row["ms"].get<double>() * 1e6));
  std::sort(r.begin(), r.end());
  return r.empty() ? 0 : r[r.size() / 2];
}

// Per op name and pass (F, B) of one simulated layer: the op's duration in ns.
std::map<std::string, int64_t> simulated_ops(const std::string& style) {
  const json model = {{"family", "transformer"}, {"layers", 1},        {"hidden", 4096},
                      {"heads", 32},             {"kv_heads", 8},      {"ffn_hidden", 14336},
                      {"vocab", 32000},          {"seq_len", 4096},    {"microbatch_size", 1},
                      {"gated_mlp", true}};
  const json plan = {{"model", model},
                     {"cluster", {{"preset", "h200"}, {"nodes", 1}, {"devices_per_node", 1}}},
                     {"costmodel", {{"kind", "analytic"}, {"kernel_style", style}}},
                     {"schedule", json::array({{{"op", "place"},
                                                {"filter", json::object()},
                                                {"devices", {0}}}})}};
  std::map<std::string, int64_t> out;
  auto s = testing::session_of(plan);
  EXPECT_TRUE(s) << (s ? "" : s.error()[0].message);
  if (!s) return out;
  auto r = s->simulate();
  EXPECT_TRUE(r);
  if (!r) return out;
  const compiler::CompiledPlan& cp = s->compiled();
  for (size_t t = 0; t < r->program.tasks.size(); ++t) {
    const compiler::Node& n = cp.dag.nodes[r->node_of(static_cast<uint32_t>(t))];
    if (n.kind != compiler::NodeKind::kCompute || n.op >= cp.model.ops.size()) continue;
    const char* pass = n.tags.pass == Pass::kF ? "F" : "B";
    out[cp.model.ops[n.op].name + " " + pass] += r->program.tasks[t].work;
  }
  return out;
}

// The cluster of a one-device plan on `preset`, as the plan resolves it (plan/src/plan.cpp).
plan::ClusterSpec cluster_of(const std::string& preset) {
  const json plan = {
      {"model", {{"family", "transformer"}, {"layers", 1}, {"hidden", 256}, {"heads", 4},
                 {"ffn_hidden", 1024}, {"vocab", 1000}, {"seq_len", 128}, {"microbatch_size", 1}}},
      {"cluster", {{"preset", preset}, {"nodes", 1}, {"devices_per_node", 1}}},
      {"schedule",
       json::array({{{"op", "place"}, {"filter", json::object()}, {"devices", {0}}}})}};
  auto s = testing::session_of(plan);
  EXPECT_TRUE(s) << preset;
  return s ? s->plan().cluster : plan::ClusterSpec{};
}

struct Row {
  std::string cls, source;
  bool fitted;  // the constant was fitted on this row
  double measured_ms, predicted_ms;
  double err() const { return 100 * (predicted_ms - measured_ms) / measured_ms; }
};

// A kernel sweep's (S's) memory rows of >= 200 MB priced by `preset` under kernel_style
// `style`: the residual adds (every style: memory_efficiency x HBM) and, when `fused`, the layer
// norm backwards against the fused norm B (the compiler's norm B: BI 3 T h x 2 plus BW 2 T h x 2
// bytes; a fused backward reads BI's alone).
std::vector<Row> sweep_rows(const json& raw, const std::string& preset, const std::string& style,
                            bool fused) {
  std::vector<Row> out;
  const plan::ClusterSpec cl = cluster_of(preset);
  auto params = cost::parse_analytic_params({{"kernel_style", style}}, cl, "/costmodel", "t");
  EXPECT_TRUE(params) << preset << " " << style;
  if (!params) return out;
  for (const auto& r : raw["rows"]) {
    if (r["kind"] != "memory" || r["bytes"].get<double>() < 2e8) continue;
    const double bytes = r["bytes"];  // layer_norm B: 3 x T x h x 2; add: 3 x T x h x 2
    cost::ComputeQuery q;
    std::string cls;
    if (r["op"] == "layer_norm" && r["pass"] == "B" && fused) {
      q.kind = compiler::OpKind::kNorm, q.pass = Pass::kB;
      q.bytes = static_cast<int64_t>(bytes * 5 / 3), q.bw_bytes = static_cast<int64_t>(bytes * 2 / 3);
      cls = "norm B";
    } else if (r["op"] == "add") {
      q.kind = compiler::OpKind::kResidual, q.pass = Pass::kF,
      q.bytes = static_cast<int64_t>(bytes);
      cls = "residual add F";
    } else {
      continue;
    }
    out.push_back({cls, "S " + r["op"].get<std::string>() + " " + r["pass"].get<std::string>(),
                   cls == "norm B", r["ms"].get<double>(),
                   static_cast<double>(cost::analytic_compute(*params, cl.device, q).ns) * 1e-6});
  }
  return out;
}

// The measured rows of kernel style `rows_style` (M's rows against the simulated layer, S's
// rows against the analytic model directly), priced with kernel_style `style`.
std::vector<Row> rows_of(const std::string& rows_style, const std::string& style) {
  const json m = load("h200_pytorch_ops_measured.json");
  const json raw = load("h200_kernels_measured_raw.json");
  EXPECT_TRUE(m.is_object() && raw.is_object());
  const double add = add_rate(raw);
  EXPECT_NEAR(add, 4237, 1);  // the value costmodel/src/analytic.cpp takes out (kAddGBps)
  const json& res = m["results"];
  const auto ops = simulated_ops(style);
  auto sim_ms = [&](const std::string& key) {
    auto it = ops.find(key);
    EXPECT_NE(it, ops.end()) << key;
    return it == ops.end() ? 0.0 : static_cast<double>(it->second) * 1e-6;
  };
  // M's backward less the output-gradient write and the inputs' .grad accumulation.
  auto kernel_b = [&](const char* row, double in_bytes, double out_bytes) {
    return res[row]["B_ms"].get<double>() - (3 * in_bytes + out_bytes) / add * 1e-6;
  };
  const double T = 4096, h = 4096, f = 14336, V = 32000, kv = 1024, b2 = 2;
  const bool fused = rows_style != "eager";
  // What an unfused step runs beyond those kernels and `eager` prices (docs/costmodel.md,
  // "Kernel style"), here at S's stream rate for `add`: the weight gradient's accumulation
  // into .grad (M's backward runs it: kept, 3 x weight bytes) and split's cat of the gradients
  // of an input read as views of one tensor (M's kernels ran on separate tensors: added,
  // 2 x input bytes). Fused runs neither.
  auto unfused = [&](double weight_bytes, double split_bytes) {
    return fused ? 0.0 : (3 * weight_bytes + 2 * split_bytes) / add * 1e-6;
  };
  std::vector<Row> out;
  auto add_row = [&](std::string cls, std::string src, bool fit, double meas, double pred) {
    out.push_back({std::move(cls), std::move(src), fit, meas, pred});
  };
  // GEMMs: the sweep's curve (S's GEMMs) checked on M's shapes; nothing here was fitted on M.
  struct G {
    const char *cls, *row, *op;
    double m, k, n;
  };
  for (const G& g : {G{"gemm qkv", "gemm_qkv_gqa", "layer0.attn.qkv", T, h, h + 2 * kv},
                     G{"gemm mlp up", "gemm_mlp_up_gate", "layer0.mlp.up", T, h, 2 * f},
                     G{"gemm mlp down", "gemm_mlp_down", "layer0.mlp.down", T, f, h},
                     G{"gemm head", "gemm_head", "head", T, h, V}}) {
    add_row(std::string(g.cls) + " F", std::string("M ") + g.row, false,
            res[g.row]["F_ms"].get<double>(), sim_ms(std::string(g.op) + " F"));
    add_row(std::string(g.cls) + " B", std::string("M ") + g.row, false,
            kernel_b(g.row, (g.m * g.k + g.k * g.n) * b2, g.m * g.n * b2) +
                unfused(g.k * g.n * b2, 0),
            sim_ms(std::string(g.op) + " B"));
  }
  // Flash attention: the curve fitted on S's SDPA rows (8-64 heads, no GQA), checked here.
  add_row("attention F", "M sdpa_causal_gqa", false, res["sdpa_causal_gqa"]["F_ms"],
          sim_ms("layer0.attn.core F"));
  add_row("attention B", "M sdpa_causal_gqa", false,
          kernel_b("sdpa_causal_gqa", (T * h + 2 * T * kv) * b2, T * h * b2) +
              unfused(0, (T * h + 2 * T * kv) * b2),
          sim_ms("layer0.attn.core B"));
  // Memory-bound classes. Under `eager` each is the kernel of the ATen op a plain PyTorch
  // program calls (torch 2.11): F.rms_norm (its fused CUDA kernel, not the hand-written fp32
  // formula of M's rmsnorm_eager), silu(g) * u, cross-entropy over an fp32 copy of the logits,
  // nn.Embedding.
  add_row("norm F", "M rmsnorm_aten_rms_norm", true, res["rmsnorm_aten_rms_norm"]["F_ms"],
          sim_ms("layer0.attn_norm F"));
  const char* act_f = fused ? "swiglu_compiled" : "swiglu_eager";
  add_row("activation F", std::string("M ") + act_f, true, res[act_f]["F_ms"],
          sim_ms("layer0.mlp.act F"));
  add_row("activation B", "M swiglu_eager", true,
          kernel_b("swiglu_eager", 2 * T * f * b2, T * f * b2) + unfused(0, 2 * T * f * b2),
          sim_ms("layer0.mlp.act B"));
  const char* ce = fused ? "cross_entropy_compiled" : "cross_entropy_eager_fp32";
  add_row("loss F", std::string("M ") + ce, true, res[ce]["F_ms"], sim_ms("loss F"));
  add_row("loss B", std::string("M ") + ce, true, kernel_b(ce, T * V * b2, 0), sim_ms("loss B"));
  add_row("embedding F", "M embedding", true, res["embedding"]["F_ms"], sim_ms("embedding F"));
  add_row("embedding B", "M embedding", true,
          kernel_b("embedding", V * h * b2, T * h * b2) + unfused(V * h * b2, 0),
          sim_ms("embedding B"));
  // Eager norm B: S's ATen layer-norm backward rows of the Llama-3-8B layer's bytes (3 T h x 2
  // = 100,663,296: [4096, 4096], fitted, and [8192, 2048], a check) against the simulated norm
  // B at that shape. M's rmsnorm_aten_rms_norm B (0.1889 ms less its gradient writes) is twice
  // S's kernel and is not used (costmodel/src/analytic.cpp, kH200Eager).
  if (!fused)
    for (const auto& r : raw["rows"])
      if (r["kind"] == "memory" && r["op"] == "layer_norm" && r["pass"] == "B" &&
          r["bytes"].get<double>() == 3 * T * h * b2) {
        const bool fit = r["hidden"].get<double>() == h;
        add_row("norm B", "S layer_norm B " + r["tokens"].dump() + "x" + r["hidden"].dump(), fit,
                r["ms"].get<double>(), sim_ms("layer0.attn_norm B"));
      }
  // S's large memory rows straight through the analytic model (h200 device, this style).
  const auto sweep = sweep_rows(raw, "h200", style, fused);
  out.insert(out.end(), sweep.begin(), sweep.end());
  return out;
}

struct ClassError {
  std::string cls;
  double mean_abs_pct = 0;
  int n = 0;
};

std::vector<ClassError> by_class(const std::vector<Row>& rows) {
  std::vector<ClassError> out;
  for (const Row& r : rows) {
    auto it = std::find_if(out.begin(), out.end(), [&](const ClassError& c) { return c.cls == r.cls; });
    if (it == out.end()) it = out.insert(out.end(), {r.cls, 0, 0});
    it->mean_abs_pct += std::abs(r.err());
    ++it->n;
  }
  for (auto& c : out) c.mean_abs_pct /= c.n;
  return out;
}

void print(const std::string& title, const std::vector<Row>& rows) {
  std::printf("\n%s: predicted vs measured per op class (ms)\n", title.c_str());
  std::printf("  %-16s %-30s %-5s %9s %9s %8s\n", "class", "measured row", "", "measured",
              "predicted", "error");
  for (const Row& r : rows)
    std::printf("  %-16s %-30s %-5s %9.4f %9.4f %+7.1f %%\n", r.cls.c_str(), r.source.c_str(),
                r.fitted ? "fit" : "check", r.measured_ms, r.predicted_ms, r.err());
  for (const auto& c : by_class(rows))
    std::printf("  class %-16s rows %2d  mean |error| %5.1f %%\n", c.cls.c_str(), c.n,
                c.mean_abs_pct);
}

// Each class's mean |error| (percent) today, per kernel style: the bound is this + kSlack.
struct Bound {
  const char* style;
  const char* cls;
  double err_pct;
  bool memory_bound;  // a class the measured rates price (the control must break it)
};
constexpr Bound kClasses[] = {
    // GEMMs and attention (every style: the kernel style prices only the memory-bound classes):
    // curves fitted on the kernel sweep (S), checked on M's shapes. The forward GEMMs are
    // 14-18 % slow against M's back-to-back calls; at the one shape both files measured
    // ([4096,4096] x [4096,6144] forward) S itself is 18.6 % slower than M (docs/fidelity.md).
    {"any", "gemm qkv F", 17.1, false},      {"any", "gemm qkv B", 28.2, false},
    {"any", "gemm mlp up F", 18.4, false},   {"any", "gemm mlp up B", 6.1, false},
    {"any", "gemm mlp down F", 16.9, false}, {"any", "gemm mlp down B", 12.9, false},
    {"any", "gemm head F", 14.1, false},     {"any", "gemm head B", 9.1, false},
    {"any", "attention F", 2.9, false},      {"any", "attention B", 2.3, false},
    {"fused", "residual add F", 3.4, false},
    // Memory-bound classes: fitted on the row shown (in-sample), fused norm B on S's 9 rows,
    // eager norm B on S's [4096, 4096] row (0 %) and checked on [8192, 2048] (same bytes, +9.9 %).
    {"fused", "norm F", 0.0, true},            {"fused", "norm B", 8.6, true},
    {"fused", "activation F", 0.0, true},      {"fused", "activation B", 0.0, true},
    {"fused", "loss F", 0.0, true},            {"fused", "loss B", 0.0, true},
    {"fused", "embedding F", 0.0, true},       {"fused", "embedding B", 0.0, true},
    {"eager", "norm F", 0.0, true},            {"eager", "norm B", 5.0, true},
    {"eager", "activation F", 0.0, true},      {"eager", "activation B", 0.0, true},
    {"eager", "loss F", 0.0, true},            {"eager", "loss B", 0.0, true},
    {"eager", "embedding F", 0.0, true},       {"eager", "embedding B", 0.0, true},
};
constexpr double kSlack = 1.0;  // percentage points

double bound_of(const std::string& style, const std::string& cls, bool* memory_bound = nullptr) {
  for (const Bound& b : kClasses)
    if ((style == b.style || std::string(b.style) == "any") && cls == b.cls) {
      if (memory_bound) *memory_bound = b.memory_bound;
      return b.err_pct + kSlack;
    }
  return -1;
}

TEST(OpClassH200, EveryClassWithinItsMeasuredError) {
  for (const std::string style : {"fused", "eager"}) {
    const auto rows = rows_of(style, style);
    print("h200, kernel_style " + style, rows);
    for (const auto& c : by_class(rows)) {
      const double b = bound_of(style, c.cls);
      if (b < 0) continue;  // the residual add (S's rows) is checked under fused only
      EXPECT_LE(c.mean_abs_pct, b) << style << " " << c.cls;
    }
  }
}

// The control: the model before the measured rates (every memory-bound op at
// memory_efficiency x HBM on the compiler's bytes) breaks every memory-bound class's bound of
// both styles.
TEST(OpClassH200, RooflineBreaksTheMemoryBoundBounds) {
  int checked = 0;
  for (const std::string style : {"fused", "eager"}) {
    const auto rows = rows_of(style, "roofline");
    print("h200, kernel_style roofline (rows of " + style + ")", rows);
    for (const auto& c : by_class(rows)) {
      bool mem = false;
      const double b = bound_of(style, c.cls, &mem);
      if (b < 0 || !mem) continue;
      ++checked;
      EXPECT_GT(c.mean_abs_pct, b) << "roofline passes the " << style << " bound of " << c.cls;
    }
  }
  EXPECT_GE(checked, 14);
}

// The median rate (bytes per ns) of a sweep's memory rows of >= 200 MB of one op and pass (the
// lower and upper middle averaged for an even count).
double sweep_median(const json& raw, const char* op, const char* pass) {
  std::vector<double> r;
  for (const auto& row : raw["rows"])
    if (row["kind"] == "memory" && row["op"] == op && row["pass"] == pass &&
        row["bytes"].get<double>() >= 2e8)
      r.push_back(row["bytes"].get<double>() / (row["ms"].get<double>() * 1e6));
  std::sort(r.begin(), r.end());
  if (r.empty()) return 0;
  return (r[(r.size() - 1) / 2] + r[r.size() / 2]) / 2;
}

// The h100-sxm preset's memory-bound classes against the H100's own kernel sweep
// (h100_kernels_measured_raw.json): the residual add (a check: memory_efficiency x HBM, fitted on
// nothing) and the fused norm backward (fitted: the median of the same 9 rows) per row; the
// classes the H100 sweep has no kernel of (RMSNorm F, SwiGLU F and B, and the eager norm B) are
// the H200's measured rates scaled by the H100 / H200 ratio of a proxy kernel of the two sweeps
// (layer norm F and B, GeLU F and B), recomputed here from the two files; loss and embedding,
// measured on neither sweep, by the HBM ratio (costmodel/src/analytic.cpp). Fails when a
// constant of h100_of moves off its data (a ratio by 0.1 %) or the norm B rate off the rows.
TEST(OpClassH100, MemoryClassesAgainstTheH100Sweep) {
  const json h100 = load("h100_kernels_measured_raw.json");
  const json h200 = load("h200_kernels_measured_raw.json");
  ASSERT_TRUE(h100.is_object() && h200.is_object());
  const auto rows = sweep_rows(h100, "h100-sxm", "fused", true);
  print("h100-sxm, kernel_style fused (the H100 sweep)", rows);
  const std::map<std::string, double> bound = {{"residual add F", 2.2 + kSlack},
                                               {"norm B", 3.5 + kSlack}};
  const auto classes = by_class(rows);
  ASSERT_EQ(classes.size(), 2u);
  for (const auto& c : classes) {
    EXPECT_EQ(c.n, 9) << c.cls;
    EXPECT_LE(c.mean_abs_pct, bound.at(c.cls)) << c.cls;
  }
  // The scaled classes: the preset's rate ratio against the data's, per kernel style.
  const plan::ClusterSpec c100 = cluster_of("h100-sxm"), c200 = cluster_of("h200");
  const double hbm = c100.device.hbm_GBps / c200.device.hbm_GBps;
  struct Scaled {
    cost::MemOpClass cls;
    const char* name;
    double ratio;  // H100 / H200 of the proxy, from the files
  };
  auto proxy = [&](const char* op, const char* pass) {
    return sweep_median(h100, op, pass) / sweep_median(h200, op, pass);
  };
  const Scaled scaled[] = {
      {cost::MemOpClass::kNormF, "norm F (layer_norm F)", proxy("layer_norm", "F")},
      {cost::MemOpClass::kNormB, "norm B (layer_norm B)", proxy("layer_norm", "B")},
      {cost::MemOpClass::kActF, "activation F (gelu F)", proxy("gelu", "F")},
      {cost::MemOpClass::kActB, "activation B (gelu B)", proxy("gelu", "B")},
      {cost::MemOpClass::kLossF, "loss F (HBM)", hbm},
      {cost::MemOpClass::kLossB, "loss B (HBM)", hbm},
      {cost::MemOpClass::kEmbeddingF, "embedding F (HBM)", hbm},
      {cost::MemOpClass::kEmbeddingB, "embedding B (HBM)", hbm}};
  std::printf("\nh100-sxm rate / h200 rate per class: preset vs the proxy's measured ratio\n");
  for (const std::string style : {"fused", "eager"}) {
    auto p100 = cost::parse_analytic_params({{"kernel_style", style}}, c100, "/costmodel", "t");
    auto p200 = cost::parse_analytic_params({{"kernel_style", style}}, c200, "/costmodel", "t");
    ASSERT_TRUE(p100 && p200);
    for (const Scaled& sc : scaled) {
      const size_t i = static_cast<size_t>(sc.cls);
      const double ratio = p100->op_GBps[i] / p200->op_GBps[i];
      std::printf("  %-6s %-24s h100 %7.1f GB/s  preset %.4f  data %.4f\n", style.c_str(),
                  sc.name, p100->op_GBps[i], ratio, sc.ratio);
      EXPECT_NEAR(ratio / sc.ratio, 1.0, 1e-3) << style << " " << sc.name;
    }
  }
}


// The four compute-bound one-GPU H200 plans whose replays were measured (docs/fidelity.md,
// "Memory-bound ops and the kernel style"): the step the doc quotes for each kernel style is
// the simulator's, to 0.05 ms.
TEST(OpClassH200, TheReplayPlansPredictWhatTheDocQuotes) {
  struct Row {
    const char* plan;
    double fused_ms, eager_ms;
  };
  const Row rows[] = {{"llama8b_l4_mb4", 178.5, 195.8},
                      {"llama8b_l4_mb8_sel", 362.7, 395.6},
                      {"llama8b_l4_s2k_mb2", 340.0, 372.9},
                      {"gpt13b_l4_mb4", 237.4, 258.8}};
  for (const Row& row : rows) {
    std::ifstream in(std::string(STRETTO_TEST_DATA) + "/costmodel/h200_replay_plans/" +
                     row.plan + ".json");
    json plan = json::parse(in, nullptr, false);
    ASSERT_FALSE(plan.is_discarded()) << row.plan;
    for (const char* style : {"fused", "eager"}) {
      plan["costmodel"]["kernel_style"] = style;
      auto s = testing::session_of(plan);
      ASSERT_TRUE(s) << row.plan << ": " << s.error()[0].message;
      auto r = s->simulate();
      ASSERT_TRUE(r) << row.plan << ": " << r.error()[0].message;
      const double ms = static_cast<double>(r->step_time) / 1e6;
      const double quoted = std::string(style) == "fused" ? row.fused_ms : row.eager_ms;
      std::printf("  %-20s %-6s %9.3f ms (doc %.1f)\n", row.plan, style, ms, quoted);
      EXPECT_NEAR(ms, quoted, 0.05) << row.plan << " " << style;
    }
  }
}


// The optimizer step against the same four H200 replays
// (h200_replay_optimizer_measured.json: the replay JSON's `optimizer step` op). That replay
// stepped plain SGD, one `w.add_(g, -lr)` per bf16 parameter tensor: 6 bytes per parameter.
// The analytic model prices the plan's `sgd` as Megatron runs it, with a momentum buffer
// (OptimizerSpec::step_bytes_per_param: 10 bytes per bf16 parameter), at memory_efficiency x
// HBM. The rate is checked at the replay's bytes: the model's bytes per ns against the
// measured ones, within 7 % on all four (they are 3.5-6 % fast). The step as predicted is 57-61 %
// longer than the replay measured, because the replay did not run the momentum the plan names;
// the test pins that too, so the doc's explanation stays true to the data.
TEST(OpClassH200, OptimizerStepRateAgainstTheReplays) {
  const json m = load("h200_replay_optimizer_measured.json");
  ASSERT_TRUE(m.is_object());
  const double replay_bytes_per_param = m["bytes_per_param"].get<double>();
  ASSERT_EQ(replay_bytes_per_param, 6);
  int checked = 0;
  for (const auto& [name, row] : m["plans"].items()) {
    std::ifstream in(std::string(STRETTO_TEST_DATA) + "/costmodel/h200_replay_plans/" + name + ".json");
    json plan = json::parse(in, nullptr, false);
    ASSERT_FALSE(plan.is_discarded()) << name;
    // The one-pass step's rate (`eager` prices torch.optim.SGD's three kernels instead: 16 bytes
    // per parameter, OptimizerSpec::unfused_step_bytes_per_param).
    plan["costmodel"]["kernel_style"] = "fused";
    auto s = testing::session_of(plan);
    ASSERT_TRUE(s) << name << ": " << s.error()[0].message;
    auto r = s->simulate();
    ASSERT_TRUE(r) << name;
    const compiler::CompiledPlan& cp = s->compiled();
    double ns = 0, bytes = 0;
    for (size_t t = 0; t < r->program.tasks.size(); ++t) {
      const compiler::Node& n = cp.dag.nodes[r->node_of(static_cast<uint32_t>(t))];
      if (n.kind != compiler::NodeKind::kCompute || n.op >= cp.model.ops.size() ||
          cp.model.ops[n.op].kind != compiler::OpKind::kOptimizer)
        continue;
      ns += static_cast<double>(r->program.tasks[t].work);
      bytes += static_cast<double>(n.bytes);
    }
    ASSERT_GT(ns, 0) << name;
    const int64_t plan_bytes_per_param = cp.plan.optimizer.step_bytes_per_param(2);
    ASSERT_EQ(plan_bytes_per_param, 10) << name;  // bf16 SGD with momentum, no master weights
    const double params = bytes / static_cast<double>(plan_bytes_per_param);
    const double measured_ns = row["optimizer_step_ms"].get<double>() * 1e6;
    const double rate_err = (bytes / ns) / (params * replay_bytes_per_param / measured_ns) - 1;
    const double step_err = ns / measured_ns - 1;
    std::printf("  %-20s %.3e params: measured %.3f ms (%.0f GB/s at 6 B/param), model %.0f GB/s "
                "(%+.1f %%); predicted step %.3f ms at 10 B/param (%+.1f %%)\n",
                name.c_str(), params, measured_ns * 1e-6,
                params * replay_bytes_per_param / measured_ns, bytes / ns, 100 * rate_err, ns * 1e-6,
                100 * step_err);
    EXPECT_LE(std::fabs(rate_err), 0.07) << name;
    EXPECT_GT(step_err, 0.5) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

// The same four plans stepped with Adam instead (no replay of them ran Adam: unmeasured on a
// GPU): `eager` prices the step as the replay runs it unfused, nine kernels (2 g + 20 w: 44
// bytes per bf16 parameter without a master copy), `fused` as FusedAdam's one pass (g + 6 w:
// 14), both at memory_efficiency x HBM (4320 GB/s on the h200 preset). The simulated steps
// differ by the 30 counted bytes per parameter at that rate (to the ns each task rounds up),
// and by nothing else: the forward and backward are priced alike under both styles but for
// the op classes each style rates, which an optimizer change leaves as they are. Fails on the
// code before, where eager priced Adam at the fused step's bytes (difference 0).
TEST(OpClassH200, EagerPricesAdamsUnfusedStep) {
  for (const char* name : {"llama8b_l4_mb4", "gpt13b_l4_mb4"}) {
    std::ifstream in(std::string(STRETTO_TEST_DATA) + "/costmodel/h200_replay_plans/" + name + ".json");
    json plan = json::parse(in, nullptr, false);
    ASSERT_FALSE(plan.is_discarded()) << name;
    plan["optimizer"]["kind"] = "adam";
    double step_ns[2] = {0, 0}, opt_ns[2] = {0, 0}, bytes = 0;
    int tasks = 0;
    for (int i = 0; i < 2; ++i) {
      plan["costmodel"]["kernel_style"] = i == 0 ? "fused" : "eager";
      auto s = testing::session_of(plan);
      ASSERT_TRUE(s) << name << ": " << s.error()[0].message;
      auto r = s->simulate();
      ASSERT_TRUE(r) << name;
      const compiler::CompiledPlan& cp = s->compiled();
      ASSERT_EQ(cp.plan.optimizer.step_bytes_per_param(2), 14) << name;  // bf16, no master
      ASSERT_EQ(cp.plan.optimizer.unfused_step_bytes_per_param(2), 44) << name;
      bytes = 0;
      tasks = 0;
      for (size_t t = 0; t < r->program.tasks.size(); ++t) {
        const compiler::Node& n = cp.dag.nodes[r->node_of(static_cast<uint32_t>(t))];
        if (n.kind != compiler::NodeKind::kCompute || n.op >= cp.model.ops.size() ||
            cp.model.ops[n.op].kind != compiler::OpKind::kOptimizer)
          continue;
        opt_ns[i] += static_cast<double>(r->program.tasks[t].work);
        bytes += static_cast<double>(n.bytes);
        ++tasks;
      }
      step_ns[i] = static_cast<double>(r->step_time);
    }
    ASSERT_GT(tasks, 0) << name;
    const double params = bytes / 14;
    const double counted_ns = params * (44 - 14) / 4320.0;  // bytes / (GB/s) = ns
    std::printf("  %-16s %.4e params, Adam step fused %.3f ms, eager %.3f ms (+%.3f; counted "
                "+%.3f); whole step %.3f -> %.3f ms\n",
                name, params, opt_ns[0] * 1e-6, opt_ns[1] * 1e-6, (opt_ns[1] - opt_ns[0]) * 1e-6,
                counted_ns * 1e-6, step_ns[0] * 1e-6, step_ns[1] * 1e-6);
    EXPECT_NEAR(opt_ns[1] - opt_ns[0], counted_ns, tasks) << name;
    EXPECT_GT(opt_ns[1], 3 * opt_ns[0]) << name;  // 44 / 14 = 3.14
  }
}


// Once held out, no longer: the four plans' steps predicted with `eager` (rates from M and S only) against the
// replay's measured steps (h200_replay_steps_measured.json: the lease of 2026-11-28, main at
// d3b529d, `replay --kernels fused`, 8 steps after 3 warm-up, which calls the kernels `eager`
// prices: at::rms_norm, flash SDPA, silu(g) * u on the halves of one up GEMM, an fp32
// log-softmax; SGD with momentum, as the plans say). No rate was taken from these steps; but
// the unfused work `eager` prices since (split's cats, weight-gradient accumulation, SGD's
// three kernels) was found in these plans' replays, op by op, so they no longer hold out the
// choice of terms: only the rates are independent of them.
//
// The band is what these data resolve around today's errors (docs/validation.md, "Pricing what
// `eager` left out"): each plan's error e give or take twice the standard error of its
// measured mean, 2 SE = 2 std / sqrt(8) / mean (llama8b_l4_mb4 -0.98 +- 2.78 %, gpt13b_l4_mb4
// -0.67 +- 2.26, llama8b_l4_mb8_sel -0.67 +- 1.24, llama8b_l4_s2k_mb2 -0.61 +- 1.69): the lowest
// e - 2 SE (-3.76 %) and the highest e + 2 SE (+1.59 %), rounded outward to half a point.
// (Those errors price the unfused work around the kernels: split's cats, the weight gradients'
// accumulation, SGD's three kernels. Before, with the norm backward from S, they were -6.03,
// -5.93, -5.29 and -5.51 %; at the lease's d3b529d -4.31, -4.30, -3.59 and -3.70 %.)
// Both ends are asserted. Below: the model before those terms (-5.3 to -6.0 %), the lease of
// 2026-11-27 (-9.3 to -10.3 %), `fused` here (-8.9 to -9.7 %). Above: the norms' fp32 formula
// again (+5.5 to +7.2 %), or pricing the replay's 1.5-3.7 ms between ops with a constant (1-2 %
// of each step).
TEST(OpClassH200, ReplayStepsOfTheLease) {
  const json m = load("h200_replay_steps_measured.json");
  ASSERT_TRUE(m.is_object());
  // The replay stepped the plans' `sgd` (momentum), so the prediction is the plan as written.
  ASSERT_NE(m["optimizer"].get<std::string>().find("momentum"), std::string::npos);
  constexpr double kEagerLo = -4.0, kEagerHi = 2.0;  // percent, predicted / measured - 1
  int checked = 0;
  for (const auto& [name, row] : m["plans"].items()) {
    const json& eager = row["eager"];
    const double measured = eager["step_time_ms"].get<double>();
    const double se2 = 200 * eager["step_time_std_ms"].get<double>() /
                       std::sqrt(static_cast<double>(eager["step_times_ms"].size())) / measured;
    double err[2] = {0, 0};
    int i = 0;
    for (const char* style : {"eager", "fused"}) {
      const auto r = simulate_replay_plan(name, style);
      ASSERT_TRUE(r);
      const double ms = static_cast<double>(r->result.step_time) / 1e6;
      err[i++] = 100 * (ms / measured - 1);
      std::printf("  %-20s %-6s predicted %8.1f ms  replay %8.1f ms (std %.1f, 2 SE %.2f %%)"
                  "  %+6.2f %%\n",
                  name.c_str(), style, ms, measured, eager["step_time_std_ms"].get<double>(), se2,
                  err[i - 1]);
    }
    EXPECT_GE(err[0], kEagerLo) << name;
    EXPECT_LE(err[0], kEagerHi) << name;
    EXPECT_LT(std::fabs(err[0]), std::fabs(err[1])) << name << ": eager is the replay's style";
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}


// Peak memory of the four H200 replays (h200_replay_peak_memory_measured.json: the caching
// allocator's allocated peak of the lease of 2026-11-28, d3b529d) against the simulator's
// allocated peak with `eager`, which counts what an unfused PyTorch program's autograd saves
// (compiler/src/model.cpp, eager_memory: silu(gate) of the SwiGLU, the fp32 log-probabilities
// in place of the logits, the norms' fp32 statistics, the attention output once) and the loss
// backward's two fp32 [tokens, vocab] gradients alive together. Not held out: these four
// replays are the data the terms were looked for in (each term is an ATen op's saved tensor,
// none is fitted).
//
// The replay measured (d3b529d) kept more than a PyTorch program: each op's context held its
// output and input leaves until its backward, so the out projection's and the down projection's
// outputs and the bf16 logits stayed alive (the data file's `replay_keeps`; the replay releases
// them since: backend_test's ReplayMemory.* check it on the CPU). Per microbatch in
// flight (all of them at the peak of these one-device plans) that is the out_bytes of those
// ops; with it the prediction must match the allocator within 1 % (it is 0.17-0.29 % low: cuBLAS
// workspaces and the input ids are not modelled). The prediction alone is the program without
// that replay overhead: 8-12 % below the replay, asserted to lie in [-13 %, 0). Before these
// terms (fused memory under `eager`) it was 20-29 % low, 12-18 % with the replay's extra.
TEST(OpClassH200, ReplayPeakMemoryOfTheLease) {
  const json m = load("h200_replay_peak_memory_measured.json");
  ASSERT_TRUE(m.is_object());
  int checked = 0;
  for (const auto& [name, row] : m["plans"].items()) {
    const double measured = row["peak_memory_bytes"].get<double>();
    double pred[2] = {0, 0}, replay_extra = 0;
    int i = 0;
    for (const char* style : {"eager", "fused"}) {
      const auto r = simulate_replay_plan(name, style);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->result.devices.size(), 1u) << name;
      pred[i++] = static_cast<double>(r->result.devices[0].peak_memory);
      if (i == 1) {
        const compiler::CompiledPlan& cp = r->session.compiled();
        double per_mb = 0;
        for (const auto& op : cp.model.ops)
          if (op.kind == compiler::OpKind::kOutProj || op.kind == compiler::OpKind::kMlpDown ||
              op.kind == compiler::OpKind::kHead)
            per_mb += static_cast<double>(op.out_bytes);
        replay_extra = per_mb * cp.num_microbatches;
      }
    }
    constexpr double kGiB = 1024.0 * 1024 * 1024;
    const double err = 100 * (pred[0] / measured - 1);
    const double err_replay = 100 * ((pred[0] + replay_extra) / measured - 1);
    std::printf("  %-20s measured %6.2f GiB  eager %6.2f (%+6.2f %%)  + replay's kept %5.2f = "
                "%6.2f (%+5.2f %%)  fused %6.2f (%+6.2f %%)\n",
                name.c_str(), measured / kGiB, pred[0] / kGiB, err, replay_extra / kGiB,
                (pred[0] + replay_extra) / kGiB, err_replay, pred[1] / kGiB,
                100 * (pred[1] / measured - 1));
    EXPECT_LE(std::fabs(err_replay), 1.0) << name;
    EXPECT_GE(err, -13.0) << name;
    EXPECT_LT(err, 0.0) << name;
    EXPECT_LT(pred[1], pred[0]) << name << ": fused saves less than eager";
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}


// A cost-model change to or from kernel_style eager changes the saved activations, so
// Session::set_costmodel compiles the plan anew there (the GUI's cost-model edit too): the
// peak after the edit is a fresh session's of the edited plan, both ways. Fails when
// set_costmodel keeps the compiled plan (the fused activations under eager: 3.2 GiB less here).
TEST(OpClassH200, KernelStyleEditRecompilesTheMemory) {
  const auto fused = simulate_replay_plan("llama8b_l4_mb4", "fused");
  const auto eager = simulate_replay_plan("llama8b_l4_mb4", "eager");
  ASSERT_TRUE(fused && eager);
  for (const auto* from : {&*fused, &*eager}) {
    const auto* to = from == &*fused ? &*eager : &*fused;
    sim::Session s = from->session;
    ASSERT_TRUE(s.set_costmodel(to->session.compiled().plan.costmodel));
    auto r = s.simulate();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->devices.at(0).peak_memory, to->result.devices.at(0).peak_memory);
    EXPECT_NE(r->devices.at(0).peak_memory, from->result.devices.at(0).peak_memory);
  }
}

}  // namespace
}  // namespace stretto
