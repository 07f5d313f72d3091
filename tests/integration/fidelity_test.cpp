// Issue 9 (fidelity), simulated: recompute, 1f1b with m < p, the recompute labels in traces and
// the critical path, the optimizer step's time (expected numbers derived in the comments); and
// the published-measurement comparison: Narayanan et al. 2021 (SC'21, arXiv 2104.04473), Table 1.
//
// Each row is a plan in tests/data/fidelity/narayanan2021/ (written by gen_narayanan2021.py from
// narayanan2021_table1.csv: the paper's configurations and the authors' run-script settings:
// GPT with biases, dropout 0.1, unfused attention, full recompute of every layer, fp16 Adam with
// fp32 master weights and gradient clipping, tied embeddings, 1F1B or interleaved 1F1B,
// Megatron's rank layout). The measured iteration time is the CSV's derived_iteration_time_s:
// the paper's Eq. 3 FLOPs over its measured aggregate PFLOP/s.
//
// The test prints measured vs predicted per row and asserts every row, the mean and the worst
// at the errors it gives today plus a small margin (kTable1 below; docs/fidelity.md quotes the
// same table), and that the margin rejects the model without the A100's sustained clock. Run it alone with:
//   ctest --test-dir build -R Narayanan2021 --output-on-failure -V
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "plans.h"
#include "stretto/sim/session.h"
#include "stretto/traces/chrome_trace.h"

namespace stretto {

using compiler::CompiledPlan;

namespace {

using testing::json;
using testing::session_of;

// ---- recompute, optimizer and 1f1b with m < p, simulated -------------------------------------

// p stages on devices 0..p-1 built with `builder`, m microbatches, fixed costs F = 1, B = 2 ms.
json fixed_pipeline(int p, int m, bool recompute) {
  json base = json::array();
  if (recompute) base.push_back({{"op", "recompute"}, {"filter", json::object()}});
  return {{"model", testing::synthetic_model(p, 1 << 20)},
          {"cluster", {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", p}}},
          {"costmodel", testing::fixed_costs()},
          {"schedule", {{"builder", "1f1b"}, {"ranks", p}, {"microbatches", m}, {"base", base}}}};
}

double step_ms(const json& plan) {
  auto s = session_of(plan);
  EXPECT_TRUE(s) << (s ? "" : s.error()[0].message);
  if (!s) return -1;
  auto r = s->simulate();
  EXPECT_TRUE(r) << (r ? "" : r.error()[0].message);
  return r ? static_cast<double>(r->step_time) / 1e6 : -1;
}

TEST(Recompute, AddsOneForwardPerBackward) {
  // 1F1B, p = 2, m = 4, F = 1, B = 2 (ms, fixed model): (m + p - 1)(F + B) = 5 x 3 = 15 ms.
  EXPECT_DOUBLE_EQ(step_ms(fixed_pipeline(2, 4, false)), 15.0);
  // Full recompute re-runs each region's forward before its backward: B becomes F + B = 3,
  // so the step is (m + p - 1)(F + F + B) = 5 x 4 = 20 ms.
  EXPECT_DOUBLE_EQ(step_ms(fixed_pipeline(2, 4, true)), 20.0);
  // Recomputation is not model work: model FLOPs (and so MFU's numerator) are the same,
  // 2 regions x 4 microbatches x (F + BI + BW = 3 x 1e9) = 2.4e10.
  for (bool rc : {false, true}) {
    auto s = session_of(fixed_pipeline(2, 4, rc));
    ASSERT_TRUE(s);
    auto r = s->simulate();
    ASSERT_TRUE(r);
    EXPECT_DOUBLE_EQ(r->model_flops, 2.4e10) << "recompute " << rc;
  }
}

TEST(Recompute, OneFOneBWithFewerMicrobatchesThanStages) {
  // Megatron-style 1F1B with m = 2 < p = 4: every rank warms up with min(p-1-r, m) forwards,
  // so the step is the GPipe-shaped (m + p - 1)(F + B) = 5 x 3 = 15 ms.
  EXPECT_DOUBLE_EQ(step_ms(fixed_pipeline(4, 2, false)), 15.0);
}

TEST(Recompute, TraceAndCriticalPathSayRecompute) {
  auto s = session_of(fixed_pipeline(2, 2, true));
  ASSERT_TRUE(s);
  const CompiledPlan& cp = s->compiled();
  size_t labelled = 0;
  for (uint32_t i = 0; i < cp.dag.nodes.size(); ++i) {
    if (!cp.dag.nodes[i].recompute) continue;
    const std::string name = traces::slice_name(cp, i);
    EXPECT_NE(name.find("(recompute)"), std::string::npos) << name;
    EXPECT_EQ(name.rfind("F mb", 0), 0u) << name;
    ++labelled;
  }
  EXPECT_EQ(labelled, 4u);  // 2 regions x 2 microbatches, one synthetic layer each
  auto r = s->simulate();
  ASSERT_TRUE(r);
  bool on_path = false;
  for (const auto& st : sim::critical_path(cp, *r))
    on_path |= st.what.find("(recompute, before B)") != std::string::npos;
  EXPECT_TRUE(on_path);
}

TEST(Recompute, ComposesWithEveryBuilderAndZeroLevel) {
  // Every builder family but DualPipe (whose two pipeline copies need their own placement) on 4
  // ranks (2 data-parallel replicas each), full recompute of every
  // layer, at every ZeRO level, with an optimizer: compiles (no deadlock) and simulates, and
  // recomputing never makes the step shorter (fixed model: each recomputed region adds F).
  const struct {
    const char* fam;
    int v, m;
  } fams[] = {{"gpipe", 1, 4},    {"1f1b", 1, 4},  {"interleaved-1f1b", 2, 8},
              {"looped-bfs", 2, 4}, {"zb-h1", 1, 4}, {"zb-h2", 1, 8},
              {"zb-v", 2, 8},      {"dualpipev", 2, 8}};
  for (const auto& f : fams)
    for (int zero = 0; zero <= 3; ++zero) {
      auto plan = [&](bool rc) {
        const int p = 4, stages = p * f.v;
        json base = json::array();
        for (int st = 0; st < p; ++st)
          base.push_back({{"op", "place"}, {"filter", {{"PP", st}}}, {"devices", {st, st + p}}});
        for (int st = 0; st < stages; ++st) {
          // Stage -> rank: loop (st mod p), or V (zb-v, dualpipev: 0..p-1 then p-1..0).
          const bool v_map = std::string(f.fam) == "zb-v" || std::string(f.fam) == "dualpipev";
          const int rank = v_map && st >= p ? 2 * p - 1 - st : st % p;
          json r = {{"op", "replicate"}, {"filter", {{"PP", st}}}, {"devices", {rank, rank + p}}};
          if (zero >= 1) r["shard_optimizer"] = true;
          if (zero >= 2) r["shard_grads"] = true;
          if (zero >= 3) r["shard_params"] = true;
          base.push_back(r);
        }
        if (rc) base.push_back({{"op", "recompute"}, {"filter", {{"LAYER", "*"}}}});
        json m = testing::synthetic_model(stages, 1 << 20, 1 << 20, 1 << 16);
        return json{{"model", m},
                    {"cluster", {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", 2 * p}}},
                    {"costmodel", testing::fixed_costs()},
                    {"optimizer", {{"kind", "adam"}}},
                    {"schedule",
                     {{"builder", f.fam},
                      {"ranks", p},
                      {"stages_per_rank", f.v},
                      {"microbatches", f.m},
                      {"base", base}}}};
      };
      SCOPED_TRACE(std::string(f.fam) + " ZeRO-" + std::to_string(zero));
      const double without = step_ms(plan(false));
      const double with = step_ms(plan(true));
      EXPECT_GT(without, 0);
      EXPECT_GT(with, without);
    }
}

TEST(SequenceParallel, ReplicatedOpsWorkOnTheSequenceShard) {
  // TP 2: a LayerNorm is replicated on both ranks; with sequence parallelism each rank
  // normalises half of the tokens, so its memory-bound time halves (to within rounding to ns).
  auto norm_ns = [&](bool sp) {
    json model = {{"family", "transformer"}, {"layers", 1},       {"hidden", 4096},
                  {"heads", 32},             {"ffn_hidden", 16384}, {"vocab", 32000},
                  {"seq_len", 4096},         {"microbatch_size", 2}, {"gated_mlp", false}};
    json plan = {{"model", model},
                 {"cluster", {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", 2}}},
                 {"schedule",
                  json::array({{{"op", "place"}, {"filter", json::object()}, {"devices", {0}}},
                               {{"op", "shard_tensor"},
                                {"filter", json::object()},
                                {"devices", {{0, 1}}},
                                {"sequence_parallel", sp}}})}};
    auto s = session_of(plan);
    EXPECT_TRUE(s);
    auto r = s->simulate();
    EXPECT_TRUE(r);
    const CompiledPlan& cp = s->compiled();
    for (size_t t = 0; t < r->program.tasks.size(); ++t) {
      const compiler::Node& n = cp.dag.nodes[r->node_of(static_cast<uint32_t>(t))];
      if (n.kind == compiler::NodeKind::kCompute && n.tags.pass == plan::Pass::kF &&
          cp.model.ops[n.op].name == "layer0.attn_norm")
        return r->program.tasks[t].work;
    }
    return int64_t{-1};
  };
  // Forward RMSNorm bytes: read and write b·s·h bf16 plus h weights = 2·(2·4096·4096·2) +
  // 4096·2 = 134,225,920 bytes at the h100-sxm fused norm rate (docs/costmodel.md, kernel
  // style: 67,117,056 B / 25,400 ns x 1836 / 2279 = 2128.76 B/ns) = 63,053.5 -> 63,054 ns; SP:
  // 67,112,960 bytes -> 31,526.7 -> 31,527 ns.
  EXPECT_EQ(norm_ns(false), 63054);
  EXPECT_EQ(norm_ns(true), 31527);
}

TEST(NotModelled, SimulateSaysWhatItLeftOut) {
  // `stretto simulate` on an example without an "optimizer": the JSON lists the missing step
  // under not_modelled, and the table under "not modelled".
  auto run = [](const std::string& args) {
    const std::string cmd = std::string(STRETTO_BINARY) + " " + args + " 2>/dev/null";
    std::string out;
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
      pclose(f);
    }
    return out;
  };
  const std::string plan = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json";
  const json j = json::parse(run("simulate " + plan + " --format json"), nullptr, false);
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("not_modelled"));
  bool optimizer = false;
  for (const auto& e : j["not_modelled"])
    optimizer |= e.get<std::string>().find("optimizer step") != std::string::npos;
  EXPECT_TRUE(optimizer) << j["not_modelled"].dump();
  EXPECT_NE(run("simulate " + plan + " --format table").find("not modelled   optimizer step"),
            std::string::npos);
}

TEST(Optimizer, StepIsMemoryBoundOverTheShard) {
  // One synthetic layer of 64 MiB of bf16 parameters (33,554,432 of them) on one H100, Adam
  // with master weights and clipping: 2+4 + 4+2 + 3x4 + 4+6x4 = 52 bytes per parameter =
  // 1,744,830,464 bytes at 3350 GB/s x 0.9 (memory_efficiency) = 578,716.6 -> 578,717 ns (rounded up).
  json plan = {{"model", testing::synthetic_model(1, 1 << 20, int64_t{64} << 20)},
               {"cluster", {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", 1}}},
               {"schedule", json::array({{{"op", "place"}, {"filter", json::object()},
                                          {"devices", {0}}}})},
               {"optimizer", {{"kind", "adam"}}}};
  auto s = session_of(plan);
  ASSERT_TRUE(s) << s.error()[0].message;
  auto r = s->simulate();
  ASSERT_TRUE(r);
  const CompiledPlan& cp = s->compiled();
  int64_t step = -1;
  for (size_t t = 0; t < r->program.tasks.size(); ++t) {
    const compiler::Node& n = cp.dag.nodes[r->node_of(static_cast<uint32_t>(t))];
    if (n.kind == compiler::NodeKind::kCompute &&
        cp.model.ops[n.op].kind == compiler::OpKind::kOptimizer)
      step = r->program.tasks[t].work;
  }
  EXPECT_EQ(step, 578717);
}

struct Row {
  std::string label;
  double measured_s = 0;
};

std::vector<Row> table1_rows() {
  std::ifstream in(STRETTO_TEST_DATA "/fidelity/narayanan2021_table1.csv");
  std::vector<Row> rows;
  std::string line;
  std::vector<std::string> header;
  auto split = [](const std::string& l) {
    std::vector<std::string> out;
    std::stringstream ss(l);
    std::string cell;
    while (std::getline(ss, cell, ',')) out.push_back(cell);
    return out;
  };
  if (!std::getline(in, line)) return rows;
  header = split(line);
  size_t label = 0, time = 0;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == "model_label") label = i;
    if (header[i] == "derived_iteration_time_s") time = i;
  }
  while (std::getline(in, line)) {
    auto c = split(line);
    if (c.size() <= std::max(label, time)) continue;
    rows.push_back({c[label], std::stod(c[time])});
  }
  return rows;
}

std::string plan_path(const std::string& label) {
  std::string f = label;
  for (char& ch : f)
    if (ch == '.') ch = '_';
  return std::string(STRETTO_TEST_DATA) + "/fidelity/narayanan2021/table1_" + f + ".json";
}

// The errors the simulator gives today (deterministic), one row per model, and the bounds
// asserted: each row's |error| may grow by at most kRowSlack, the mean and the worst by at
// most kSummarySlack. After a deliberate model change, re-measure (the test prints the table)
// and update this table and docs/fidelity.md together.
struct Table1Error {
  const char* label;
  double err_pct;  // (predicted - measured) / measured, in percent, as printed
};
constexpr Table1Error kTable1[] = {
    {"1.7B", -4.6}, {"3.6B", -4.7}, {"7.5B", -2.7}, {"18B", -3.4},  {"39B", -0.2},
    {"76B", -8.1},  {"145B", -3.2}, {"310B", -3.7}, {"530B", -4.1}, {"1T", +1.4},
};
constexpr double kTable1Mean = 3.6, kTable1Worst = 8.1;  // percent
constexpr double kRowSlack = 1.0, kSummarySlack = 0.4;   // percentage points

struct Table1Result {
  std::vector<double> err_pct;  // per row
  double mean_pct = 0, worst_pct = 0;
  std::string report;
};

// Simulates every row of a table of published iteration times (the plan of a row at
// path_of(label)), with `costmodel_options` merged into each plan's costmodel; `title` heads
// the printed table.
Table1Result simulate_rows(const std::string& title, const std::vector<Row>& rows,
                           std::string (*path_of)(const std::string&),
                           const json& costmodel_options) {
  Table1Result out;
  out.report = "\n" + title;
  if (!costmodel_options.empty()) out.report += " with costmodel " + costmodel_options.dump();
  out.report += "\n  model            measured s   predicted s    error\n";
  for (const auto& row : rows) {
    std::ifstream in(path_of(row.label));
    json plan = json::parse(in, nullptr, false);
    EXPECT_TRUE(plan.is_object()) << row.label;
    if (!plan.is_object()) return out;
    plan["costmodel"].update(costmodel_options);
    auto s = testing::session_of(plan);
    EXPECT_TRUE(s) << row.label << ": " << (s ? "" : s.error()[0].message);
    if (!s) return out;
    sim::SimOptions opt;
    opt.fold_replicas = true;  // identical data-parallel replicas: simulate one
    opt.memory_curves = false;
    auto r = s->simulate(opt);
    EXPECT_TRUE(r) << row.label << ": " << (r ? "" : r.error()[0].message);
    if (!r) return out;
    const double predicted = static_cast<double>(r->step_time) * 1e-9;
    const double err = 100 * (predicted - row.measured_s) / row.measured_s;
    out.err_pct.push_back(err);
    out.mean_pct += std::abs(err) / static_cast<double>(rows.size());
    out.worst_pct = std::max(out.worst_pct, std::abs(err));
    char buf[128];
    std::snprintf(buf, sizeof buf, "  %-14s %10.2f   %11.2f   %+6.1f %%\n", row.label.c_str(),
                  row.measured_s, predicted, err);
    out.report += buf;
  }
  char buf[128];
  std::snprintf(buf, sizeof buf, "  mean |error| %.1f %%, worst %.1f %%\n", out.mean_pct,
                out.worst_pct);
  out.report += buf;
  return out;
}

Table1Result simulate_table1(const std::vector<Row>& rows, const json& costmodel_options) {
  return simulate_rows("Narayanan et al. 2021, Table 1 (A100, full recompute): iteration time",
                       rows, plan_path, costmodel_options);
}

TEST(Narayanan2021, Table1IterationTimes) {
  const auto rows = table1_rows();
  ASSERT_EQ(rows.size(), std::size(kTable1)) << "narayanan2021_table1.csv has the paper's 10 rows";
  const Table1Result t = simulate_table1(rows, json::object());
  std::printf("%s", t.report.c_str());
  ASSERT_EQ(t.err_pct.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].label, kTable1[i].label);
    EXPECT_LE(std::abs(t.err_pct[i]), std::abs(kTable1[i].err_pct) + kRowSlack)
        << rows[i].label << " got worse (kTable1 holds " << kTable1[i].err_pct << " %)";
  }
  EXPECT_LE(t.mean_pct, kTable1Mean + kSummarySlack) << t.report;
  EXPECT_LE(t.worst_pct, kTable1Worst + kSummarySlack) << t.report;
}

// The control: without the A100's sustained clock (the model at its boost clock, about 8 %
// faster on compute-bound work) the same bounds fail: docs/fidelity.md gives mean 8.9 %, rows
// -5.3 % to -13.3 %. A bound that this passes would not catch such a change.
TEST(Narayanan2021, BoundsRejectTheBoostClock) {
  const auto rows = table1_rows();
  ASSERT_EQ(rows.size(), std::size(kTable1));
  const Table1Result t = simulate_table1(rows, {{"sustained_clock_ratio", 1}});
  std::printf("%s", t.report.c_str());
  ASSERT_EQ(t.err_pct.size(), rows.size());
  EXPECT_GT(t.mean_pct, kTable1Mean + kSummarySlack);
  EXPECT_GT(t.worst_pct, kTable1Worst + kSummarySlack);
  size_t rows_out = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    rows_out += std::abs(t.err_pct[i]) > std::abs(kTable1[i].err_pct) + kRowSlack;
  EXPECT_EQ(rows_out, rows.size()) << t.report;
}

// Korthikanti et al. 2022 (arXiv 2205.05198), the 530B GPT on 2,240 A100s: the abstract's
// model-FLOPs utilisation, 42.1 % with full recompute and 54.2 % with sequence parallelism and
// selective recompute, against the simulated MFU of the same run: TP 8 x PP 35 x DP 8, the
// interleaved schedule with 3 chunks per GPU, the DP 8 gradient all-reduce (replicas folded;
// gen_korthikanti2022.py names each setting's source). The error in time is published MFU /
// predicted MFU - 1 (the step takes that much longer than the published run's). Each is bounded
// at its value today plus kKorthikantiSlack (docs/fidelity.md quotes this table). Until
// 2026-11-28 the plans ran plain 1F1B on one replica without its gradient all-reduce: +9.7 and
// +6.3 %, which these bounds reject; until Megatron-LM's asynchronous input-gradient
// all-reduce was modelled (model async_tp_grad_reduce), +3.12 and +0.25 %.
struct MfuRow {
  const char* plan;
  double published_mfu_pct, err_pct;  // err_pct: today's error in time, percent
};
constexpr MfuRow kKorthikanti[] = {{"gpt530b_full", 42.1, 0.94}, {"gpt530b_selective", 54.2, -1.18}};
constexpr double kKorthikantiSlack = 0.5;  // percentage points

TEST(Korthikanti2022, Gpt530bModelFlopsUtilisation) {
  std::string report =
      "\nKorthikanti et al. 2022, 530B GPT (A100, TP 8 x PP 35 x DP 8, interleaved): model-FLOPs "
      "utilisation\n"
      "  plan                published MFU   predicted step s   predicted MFU   error in time\n";
  for (const MfuRow& row : kKorthikanti) {
    std::ifstream in(std::string(STRETTO_TEST_DATA) + "/fidelity/korthikanti2022/" + row.plan + ".json");
    const json plan = json::parse(in, nullptr, false);
    ASSERT_TRUE(plan.is_object()) << row.plan;
    auto s = session_of(plan);
    ASSERT_TRUE(s) << row.plan << ": " << s.error()[0].message;
    sim::SimOptions opt;
    opt.fold_replicas = true;
    opt.memory_curves = false;
    auto r = s->simulate(opt);
    ASSERT_TRUE(r) << row.plan << ": " << r.error()[0].message;
    const double mfu = 100 * r->mfu;
    const double err = 100 * (row.published_mfu_pct / mfu - 1);
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-18s %12.1f %% %18.2f %14.1f %% %+13.1f %%\n", row.plan,
                  row.published_mfu_pct, static_cast<double>(r->step_time) * 1e-9, mfu, err);
    report += buf;
    EXPECT_LE(std::abs(err), std::abs(row.err_pct) + kKorthikantiSlack)
        << row.plan << " got worse (kKorthikanti holds " << row.err_pct << " %)";
  }
  std::printf("%s", report.c_str());
}

// Korthikanti et al. 2022, Table 5: end-to-end iteration times of four GPT models with full
// recompute and with "present work" (sequence parallelism and selective recompute), one
// data-parallel replica each, as Calculon quotes and configures them (gen_korthikanti2022.py
// names the sources). Bounded as Table 1 above: each row at its error today plus kRowSlack,
// the mean and the worst plus kSummarySlack (docs/fidelity.md quotes this table).
// Before Megatron-LM's asynchronous input-gradient all-reduce was modelled: +4.4, +0.4, +6.1,
// +3.3, +5.4, +2.9, +9.7, +9.4 %, mean 5.2 %, worst 9.7 %.
constexpr Table1Error kTable5[] = {
    {"22B full", +0.0},  {"22B selective", -2.5},  {"175B full", +3.0}, {"175B selective", +1.2},
    {"530B full", +3.1}, {"530B selective", +1.5}, {"1T full", +7.7},   {"1T selective", +8.1},
};
constexpr double kTable5Mean = 3.4, kTable5Worst = 8.1;  // percent
constexpr double kTable5Seconds[] = {1.42, 1.10, 18.13, 13.75, 49.05, 37.83, 94.42, 71.49};

std::string table5_path(const std::string& label) {
  std::string f = label;
  std::replace(f.begin(), f.end(), ' ', '_');
  return std::string(STRETTO_TEST_DATA) + "/fidelity/korthikanti2022/table5/" + f + ".json";
}

TEST(Korthikanti2022, Table5IterationTimes) {
  std::vector<Row> rows;
  for (size_t i = 0; i < std::size(kTable5); ++i)
    rows.push_back({kTable5[i].label, kTable5Seconds[i]});
  const Table1Result t = simulate_rows(
      "Korthikanti et al. 2022, Table 5 (A100, TP 8, one replica): iteration time", rows,
      table5_path, json::object());
  std::printf("%s", t.report.c_str());
  ASSERT_EQ(t.err_pct.size(), std::size(kTable5)) << t.report;
  for (size_t i = 0; i < std::size(kTable5); ++i)
    EXPECT_LE(std::abs(t.err_pct[i]), std::abs(kTable5[i].err_pct) + kRowSlack)
        << kTable5[i].label << " got worse (kTable5 holds " << kTable5[i].err_pct << " %)";
  EXPECT_LE(t.mean_pct, kTable5Mean + kSummarySlack) << t.report;
  EXPECT_LE(t.worst_pct, kTable5Worst + kSummarySlack) << t.report;
}

}  // namespace
}  // namespace stretto
