// Pass granularity (sim/granularity.h) against op granularity: equal, op by op, under fixed
// costs on every example plan (every builder family among them, TP, EP, ZeRO, CPU plans) and
// on the closed forms; and the step-time difference under the plans' own cost models, on every
// example and fidelity plan, bounded by what was measured (the table is printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "plans.h"
#include "stretto/sim/granularity.h"
#include "radix_sort.h"       // sim/src
#include "sample_counters.h"  // sim/src

namespace fs = std::filesystem;
using namespace stretto;
using namespace stretto::plan;
using namespace stretto::testing;

namespace {

// The counters (engine/program.h) of a run of `ops` with these task timings, as the engine
// reports them, computed the way simulate did before it took them from the reserved-memory
// replay's listing: each task's effects at its start and end, sampled per device at the end of
// each instant; the first peak of the total with the counters then; curves only with
// `curves`. Tasks that never started (start < 0) have no effects. Empty when `ops` has no
// counters. The reference Granularity.PassMemoryIsTheOpCountersOfItsTimings holds simulate to.
std::vector<engine::DeviceCounters> op_counters(const engine::Program& ops,
                                                const std::vector<engine::TaskTiming>& timing,
                                                bool curves) {
  std::vector<engine::DeviceCounters> out;
  if (ops.effect_begin.empty() || ops.num_counters == 0) return out;
  const size_t D = ops.devices.size();
  const uint32_t nc = ops.num_counters;
  out.resize(D);
  for (engine::DeviceCounters& c : out) c.curve.push_back({0, 0});
  // Which instants of each node have effects: bit 0 its start, bit 1 its end.
  const size_t N = ops.effect_begin.size() - 1;
  std::vector<uint8_t> when(N, 0);
  for (size_t n = 0; n < N; ++n)
    for (uint32_t e = ops.effect_begin[n]; e < ops.effect_begin[n + 1]; ++e)
      when[n] |= ops.effects[e].at_end ? 2 : 1;
  auto when_of = [&](uint32_t t) -> uint32_t {
    const uint32_t n = ops.tasks[t].node;
    return timing[t].start < 0 || n >= N ? 0 : when[n];
  };
  // A task's start or end with effects, on each device it takes part in (once per device):
  // `de` is the device << 1 | at the end.
  struct Change {
    engine::SimTime t;
    uint32_t task, de;
  };
  std::vector<uint32_t> stamp(D, UINT32_MAX);
  auto for_devices = [&](uint32_t t, auto&& f) {
    const engine::Task& task = ops.tasks[t];
    for (uint32_t k = 0; k < task.part_count; ++k) {
      const uint32_t d = ops.participants[task.part_begin + k].device;
      if (stamp[d] == t) continue;
      stamp[d] = t;
      f(d);
    }
  };
  // Count per device, then list the changes in task order.
  std::vector<uint32_t> begin(D + 1, 0);
  std::vector<uint8_t> task_when(ops.tasks.size());
  size_t total = 0;
  for (uint32_t t = 0; t < ops.tasks.size(); ++t) {
    const uint32_t w = task_when[t] = static_cast<uint8_t>(when_of(t));
    if (w == 0) continue;
    const uint32_t k = (w & 1) + (w >> 1);
    for_devices(t, [&](uint32_t d) {
      begin[d + 1] += k;
      total += k;
    });
  }
  for (size_t d = 0; d < D; ++d) begin[d + 1] += begin[d];
  // (Written before read: no value-initialisation.)
  std::unique_ptr<Change[]> changes(new Change[total]), other(new Change[total]);
  {
    size_t i = 0;
    std::fill(stamp.begin(), stamp.end(), UINT32_MAX);
    for (uint32_t t = 0; t < ops.tasks.size(); ++t) {
      const uint32_t w = task_when[t];
      if (w == 0) continue;
      for_devices(t, [&](uint32_t d) {
        if (w & 1) changes[i++] = {timing[t].start, t, d << 1};
        if (w & 2) changes[i++] = {timing[t].end, t, d << 1 | 1};
      });
    }
  }
  // Grouped by device in time order. The order of one instant's changes does not matter
  // (only its end state is sampled), so no comparison sort is needed.
  engine::SimTime lo = total > 0 ? changes[0].t : 0;
  for (size_t i = 0; i < total; ++i) lo = std::min(lo, changes[i].t);
  sim::radix_sort_grouped(
      changes, other, total, std::span<const uint32_t>(begin.data(), D),
      [lo](const Change& c) { return static_cast<uint64_t>(c.t - lo); },
      [](const Change& c) { return c.de >> 1; });
  other.reset();
  // Per device, in time order: apply an instant's changes, then sample (program.h: within one
  // instant only the end state counts; the peak is the first time the total reached its max).
  std::array<int64_t, engine::kMaxCounters> level{};
  for (size_t d = 0; d < D; ++d) {
    const Change* first = changes.get() + begin[d];
    const Change* last = changes.get() + begin[d + 1];
    level.fill(0);
    int64_t total_now = 0;
    engine::DeviceCounters& c = out[d];
    for (const Change* i = first; i != last;) {
      const engine::SimTime now = i->t;
      for (; i != last && i->t == now; ++i) {
        const uint32_t n = ops.tasks[i->task].node;
        const bool at_end = (i->de & 1) != 0;
        for (uint32_t k = ops.effect_begin[n]; k < ops.effect_begin[n + 1]; ++k) {
          const engine::CounterEffect& ef = ops.effects[k];
          if (ef.at_end != at_end) continue;
          level[ef.counter] += ef.delta;
          total_now += ef.delta;
        }
      }
      sim::sample_counters(c, now, total_now, level, nc, curves);
    }
  }
  return out;
}

// Measured 2026-11-27 (the table this test prints: median 0.025 %, worst 0.432 %,
// cpu_gpt_pp2_1f1b, whose host dispatch the merged tasks skip) plus a margin; the targets are
// 1 % and 3 %.
constexpr double kMedianBound = 0.025 + 0.01;
constexpr double kWorstBound = 0.432 + 0.05;

// The task counts docs/performance.md quotes ("Pass granularity"), op and pass granularity,
// exact: the ends of its ranges among them.
struct QuotedTasks {
  const char* plan;  // folder/file, as the table prints it
  size_t op, pass;
};
constexpr QuotedTasks kQuotedTasks[] = {
    {"examples/gpt_pp4_dp2_1f1b.json", 8'101, 567},
    {"examples/gpu_gpt_1dev.json", 1'345, 17},
    {"narayanan2021/table1_1_7B.json", 947, 149},
    // (62,864 at pass granularity before the asynchronous input-gradient all-reduce: the
    // collective no longer stands between a column-parallel B node and the B node waiting for
    // its input gradient, so 9,712 of those 10,368 B nodes' consumers continue their pass)
    {"examples/megatron_gpt13b_tp8_pp2_dp2.json", 112'656, 53'152},
    {"narayanan2021/table1_39B.json", 24'424, 7'144},
    {"narayanan2021/table1_1T.json", 2'889'282, 986'690},
    {"examples/piper_qwen3_moe_pp2_dp2_ep2.json", 375, 141},
    {"examples/piper_qwen3_moe_zero3.json", 467, 403},
    {"examples/cpu_synthetic_pp4_zbh1.json", 332, 236}};

std::vector<fs::path> plans_in(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<fs::path> example_plans() {
  auto a = plans_in(STRETTO_EXAMPLES);
  auto b = plans_in(fs::path(STRETTO_EXAMPLES) / "builders");
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// The example plan at `p`, with its cost model replaced by fixed costs (communication taking
// `comm_ms`) when `comm_ms` is given.
Expected<sim::Session> example_session(const fs::path& p, std::optional<double> comm_ms) {
  json plan = read_json(p);
  if (comm_ms)
    plan["costmodel"] = {{"kind", "fixed"}, {"F", 1},  {"B", 2},     {"BI", 1},
                         {"BW", 1},         {"unit", "ms"}, {"comm", *comm_ms}};
  auto src = JsonSource::parse(plan.dump(), p.string());
  if (!src) return fail(std::move(src).error());
  auto parsed = parse_plan(*src);
  if (!parsed) return fail(std::move(parsed).error());
  return sim::Session::from_plan(std::move(*parsed), p.parent_path().string());
}

sim::Result run(const sim::Session& s, sim::Granularity g, bool fold = false,
               bool curves = false) {
  sim::SimOptions o;
  o.granularity = g;
  o.fold_replicas = fold;
  o.memory_curves = curves;
  auto r = s.simulate(o);
  EXPECT_TRUE(r) << (r ? "" : render_all(r.error()));
  return r ? std::move(*r) : sim::Result{};
}

// Everything op granularity says, said again at pass granularity: each op's start and end,
// the step, each device's occupancy, memory curve and peak with its time and breakdown.
void expect_equal(const sim::Result& op, const sim::Result& pass, const std::string& what) {
  ASSERT_EQ(op.timing.size(), pass.timing.size()) << what;
  EXPECT_EQ(op.step_time, pass.step_time) << what;
  size_t differ = 0, first = 0;
  for (size_t t = 0; t < op.timing.size(); ++t)
    if (op.timing[t].start != pass.timing[t].start || op.timing[t].end != pass.timing[t].end)
      if (differ++ == 0) first = t;
  EXPECT_EQ(differ, 0u) << what << ": first at task " << first << " op [" << op.timing[first].start
                        << ", " << op.timing[first].end << ") pass [" << pass.timing[first].start
                        << ", " << pass.timing[first].end << ")";
  ASSERT_EQ(op.devices.size(), pass.devices.size()) << what;
  for (size_t d = 0; d < op.devices.size(); ++d) {
    const auto& a = op.devices[d];
    const auto& b = pass.devices[d];
    EXPECT_EQ(a.busy, b.busy) << what << " device " << d;
    EXPECT_EQ(a.comm, b.comm) << what << " device " << d;
    EXPECT_EQ(a.exposed_comm, b.exposed_comm) << what << " device " << d;
    EXPECT_EQ(a.peak_memory, b.peak_memory) << what << " device " << d;
    EXPECT_EQ(a.peak_time, b.peak_time) << what << " device " << d;
    EXPECT_EQ(a.breakdown, b.breakdown) << what << " device " << d;
    EXPECT_TRUE(a.memory.size() == b.memory.size() &&
                std::equal(a.memory.begin(), a.memory.end(), b.memory.begin(),
                           [](const auto& x, const auto& y) {
                             return x.t == y.t && x.total == y.total;
                           }))
        << what << " device " << d << ": memory curves of " << a.memory.size() << " and "
        << b.memory.size() << " samples";
  }
  EXPECT_EQ(op.mfu, pass.mfu) << what;
  EXPECT_EQ(op.bubble_ratio, pass.bubble_ratio) << what;
}

}  // namespace

// Every example plan (all nine builder families, TP, SP, EP, ZeRO-1/3, recompute, CPU plans)
// with its cost model replaced by fixed costs, free and then paid communication.
TEST(Granularity, PassEqualsOpUnderFixedCostsOnEveryExample) {
  size_t op_tasks = 0, pass_tasks = 0;
  for (const fs::path& p : example_plans()) {
    for (int comm_us : {0, 30}) {
      auto s = example_session(p, comm_us / 1000.0);
      ASSERT_TRUE(s) << p << render_all(s.error());
      const sim::Result op = run(*s, sim::Granularity::kOp, false, true);
      const sim::Result pass = run(*s, sim::Granularity::kPass, false, true);
      expect_equal(op, pass, fmt::format("{} comm {} us", p.filename().string(), comm_us));
      EXPECT_EQ(op.engine_tasks, op.program.tasks.size());
      op_tasks += op.engine_tasks;
      pass_tasks += pass.engine_tasks;
    }
  }
  // Not the same program run twice: passes were merged.
  EXPECT_LT(pass_tasks * 2, op_tasks) << pass_tasks << " of " << op_tasks;
}

// The closed forms of every builder family (closed_forms_test.cpp) at pass granularity, on a
// transformer model (several ops per pass, so that merging has something to merge).
TEST(Granularity, PassEqualsOpOnEveryFamilysSchedule) {
  const char* families[] = {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1",
                            "zb-h2",  "zb-v", "dualpipev",        "dualpipe"};
  for (const char* f : families) {
    const bool two = std::string(f) != "gpipe" && std::string(f) != "1f1b" &&
                     std::string(f) != "zb-h1" && std::string(f) != "zb-h2";
    const int p = 4, v = two ? 2 : 1, m = 8;
    const int stages = std::string(f) == "dualpipe" ? p : p * v;
    json plan = {{"model",
                  {{"family", "transformer"}, {"layers", stages}, {"hidden", 512},
                   {"heads", 8}, {"ffn_hidden", 2048}, {"vocab", 1024}, {"seq_len", 256},
                   {"microbatch_size", 1}, {"pp_regions", stages}}},
                 {"cluster", {{"preset", "h100-sxm"}, {"nodes", 1}, {"devices_per_node", p}}},
                 {"costmodel", fixed_costs()},
                 {"schedule",
                  {{"builder", f}, {"ranks", p}, {"stages_per_rank", v}, {"microbatches", m}}}};
    auto s = session_of(plan);
    ASSERT_TRUE(s) << f << render_all(s.error());
    const sim::Result op = run(*s, sim::Granularity::kOp, false, true);
    const sim::Result pass = run(*s, sim::Granularity::kPass, false, true);
    expect_equal(op, pass, f);
    EXPECT_LT(pass.engine_tasks * 2, op.engine_tasks) << f;
  }
}

// Under the plans' own cost models (interference, dispatch costs) pass granularity
// approximates: its step time against op granularity's on every example and fidelity plan.
// The bounds are the measured median and worst difference plus a small margin.
TEST(Granularity, PassStepTimeNearOpOnEveryExampleAndFidelityPlan) {
  std::vector<fs::path> plans = example_plans();
  for (const char* dir : {"narayanan2021", "korthikanti2022"}) {
    auto f = plans_in(fs::path(STRETTO_TEST_DATA) / "fidelity" / dir);
    plans.insert(plans.end(), f.begin(), f.end());
  }
  std::vector<double> diffs;
  size_t quoted = 0;
  std::string table = fmt::format("{:<44} {:>12} {:>12} {:>8} {:>10} {:>10}\n", "plan",
                                  "op ms", "pass ms", "diff %", "op tasks", "pass tasks");
  for (const fs::path& p : plans) {
    auto s = sim::Session::open(p.string());
    ASSERT_TRUE(s) << p << render_all(s.error());
    const bool fold = p.string().find("fidelity") != std::string::npos;  // big: fold replicas
    const sim::Result op = run(*s, sim::Granularity::kOp, fold);
    const sim::Result pass = run(*s, sim::Granularity::kPass, fold);
    ASSERT_GT(op.step_time, 0) << p;
    const double diff = 100.0 * std::abs(static_cast<double>(pass.step_time - op.step_time)) /
                        static_cast<double>(op.step_time);
    diffs.push_back(diff);
    const std::string name = p.parent_path().filename().string() + "/" + p.filename().string();
    table += fmt::format("{:<44} {:>12.3f} {:>12.3f} {:>8.3f} {:>10} {:>10}\n", name,
                         op.step_time / 1e6, pass.step_time / 1e6, diff, op.engine_tasks,
                         pass.engine_tasks);
    for (const QuotedTasks& q : kQuotedTasks)
      if (name == q.plan) {
        ++quoted;
        EXPECT_EQ(op.engine_tasks, q.op) << name;
        EXPECT_EQ(pass.engine_tasks, q.pass) << name;
      }
  }
  std::vector<double> sorted = diffs;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  const double worst = sorted.back();
  table += fmt::format("{} plans: median {:.3f} %, worst {:.3f} %\n", n, median, worst);
  std::printf("%s", table.c_str());
  EXPECT_EQ(quoted, std::size(kQuotedTasks));
  EXPECT_LE(median, kMedianBound) << table;
  EXPECT_LE(worst, kWorstBound) << table;
}

// At pass granularity the engine runs the merged program, which has no counters: simulate
// takes the op program's counters from the listing of memory effects it builds for the
// reserved-memory replay. They must be what op_counters (the reference: each task's effects
// at its rebuilt start and end, sampled at the end of each instant) gives for the same op
// timings, on every example under its own cost model (so interference moves the timings) and
// under fixed costs with free communication (tasks that take no time, whose frees follow
// their allocations within the instant), with and without memory curves, folded and not:
// each simulated device's peak, its time, its breakdown and its curve.
TEST(Granularity, PassMemoryIsTheOpCountersOfItsTimings) {
  size_t checked = 0, samples = 0;
  for (const fs::path& p : example_plans()) {
    for (const bool fixed : {false, true}) {
      auto s = example_session(p, fixed ? std::optional<double>(0.0) : std::nullopt);
      ASSERT_TRUE(s) << p << render_all(s.error());
      for (const bool fold : {false, true})
        for (const bool curves : {false, true}) {
          const sim::Result r = run(*s, sim::Granularity::kPass, fold, curves);
          const std::string what = fmt::format("{} fixed {} fold {} curves {}",
                                               p.filename().string(), fixed, fold, curves);
          const auto ref = op_counters(r.program, r.timing, curves);
          ASSERT_EQ(ref.size(), r.devices.size()) << what;
          for (size_t d = 0; d < r.devices.size(); ++d) {
            const sim::DeviceMetrics& m = r.devices[d];
            if (m.folded) continue;  // its representative's
            const auto& c = ref[d];
            const int64_t base = m.breakdown[0] + m.breakdown[1] + m.breakdown[2];
            bool same = m.peak_memory == base + c.peak && m.peak_time == c.peak_time &&
                        m.memory.size() == c.curve.size();
            for (size_t k = 0; k + 3 < m.breakdown.size(); ++k)
              same = same && m.breakdown[3 + k] == c.at_peak[k];
            for (size_t i = 0; same && i < c.curve.size(); ++i)
              same = m.memory[i].t == c.curve[i].t && m.memory[i].total == base + c.curve[i].total;
            ASSERT_TRUE(same) << what << " device " << d << ": peak " << m.peak_memory << " at "
                              << m.peak_time << " (" << m.memory.size()
                              << " samples), op_counters " << base + c.peak << " at "
                              << c.peak_time << " (" << c.curve.size() << " samples)";
            samples += c.curve.size();
            ++checked;
          }
        }
    }
  }
  EXPECT_GT(checked, 200u);
  EXPECT_GT(samples, 20'000u);  // the curves were compared, not only their first sample
}
