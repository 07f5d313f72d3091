// A cost-model edit re-costs the previous program (recost_program, simulate with a previous
// result) instead of building it again: the program and the Result are those of a fresh
// simulate(), field by field, on several plans, granularities and edits (efficiencies, kernel
// knobs, dispatch, interference shares, NCCL link bandwidth, host-thread effects), chained
// edit after edit; a structure-changing edit is refused or rebuilt.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "stretto/costmodel/cost_model.h"
#include "stretto/sim/session.h"

namespace stretto::sim {
namespace {

using nlohmann::json;

void expect_same_program(const engine::Program& a, const engine::Program& b) {
  EXPECT_EQ(a.stream_names, b.stream_names);
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  size_t bad = 0;
  for (size_t t = 0; t < a.tasks.size() && bad < 5; ++t) {
    const engine::Task &x = a.tasks[t], &y = b.tasks[t];
    const bool same = x.kind == y.kind && x.mem_bound == y.mem_bound &&
                      x.overlapped == y.overlapped && x.node == y.node && x.work == y.work &&
                      x.part_begin == y.part_begin && x.part_count == y.part_count &&
                      x.dep_begin == y.dep_begin && x.comm == y.comm;
    if (!same) ++bad;
    EXPECT_TRUE(same) << "task " << t << ": work " << x.work << " vs " << y.work;
  }
  ASSERT_EQ(a.comms.size(), b.comms.size());
  for (size_t c = 0; c < a.comms.size(); ++c) {
    EXPECT_EQ(a.comms[c].latency_ns, b.comms[c].latency_ns) << "comm " << c;
    EXPECT_EQ(a.comms[c].rate_cap, b.comms[c].rate_cap) << "comm " << c;
    EXPECT_EQ(a.comms[c].link_begin, b.comms[c].link_begin) << "comm " << c;
    ASSERT_EQ(a.comms[c].link_count, b.comms[c].link_count) << "comm " << c;
  }
  ASSERT_EQ(a.participants.size(), b.participants.size());
  for (size_t k = 0; k < a.participants.size(); ++k) {
    EXPECT_EQ(a.participants[k].device, b.participants[k].device);
    EXPECT_EQ(a.participants[k].stream, b.participants[k].stream);
  }
  EXPECT_EQ(a.deps, b.deps);
  EXPECT_EQ(a.task_links, b.task_links);
  ASSERT_EQ(a.links.size(), b.links.size());
  for (size_t l = 0; l < a.links.size(); ++l) {
    EXPECT_EQ(a.links[l].capacity, b.links[l].capacity);
    EXPECT_EQ(a.links[l].name, b.links[l].name);
  }
  ASSERT_EQ(a.devices.size(), b.devices.size());
  for (size_t d = 0; d < a.devices.size(); ++d) {
    EXPECT_EQ(a.devices[d].dispatch, b.devices[d].dispatch) << "device " << d;
    EXPECT_EQ(a.devices[d].dispatch_ns, b.devices[d].dispatch_ns) << "device " << d;
    EXPECT_EQ(a.devices[d].comm_sm_share, b.devices[d].comm_sm_share) << "device " << d;
    EXPECT_EQ(a.devices[d].comm_hbm_share, b.devices[d].comm_hbm_share) << "device " << d;
    EXPECT_EQ(a.devices[d].host, b.devices[d].host) << "device " << d;
  }
  EXPECT_EQ(a.host_cores, b.host_cores);
  EXPECT_EQ(a.host_share_efficiency, b.host_share_efficiency);
  EXPECT_EQ(a.num_counters, b.num_counters);
  EXPECT_EQ(a.effect_begin, b.effect_begin);
  ASSERT_EQ(a.effects.size(), b.effects.size());
  for (size_t e = 0; e < a.effects.size(); ++e) {
    EXPECT_EQ(a.effects[e].counter, b.effects[e].counter);
    EXPECT_EQ(a.effects[e].at_end, b.effects[e].at_end);
    EXPECT_EQ(a.effects[e].delta, b.effects[e].delta);
  }
}

// Every field but the wall-clock phases.
void expect_same_result(const Result& a, const Result& b) {
  EXPECT_EQ(a.step_time, b.step_time);
  EXPECT_EQ(a.bubble_ratio, b.bubble_ratio);
  EXPECT_EQ(a.exposed_comm, b.exposed_comm);
  EXPECT_EQ(a.mfu, b.mfu);
  EXPECT_EQ(a.tokens_per_s, b.tokens_per_s);
  EXPECT_EQ(a.model_flops, b.model_flops);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.engine_tasks, b.engine_tasks);
  EXPECT_EQ(a.folded, b.folded);
  EXPECT_EQ(a.host_compute, b.host_compute);
  ASSERT_EQ(a.devices.size(), b.devices.size());
  for (size_t d = 0; d < a.devices.size(); ++d) {
    const DeviceMetrics &x = a.devices[d], &y = b.devices[d];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.busy, y.busy) << "device " << d;
    EXPECT_EQ(x.bubble, y.bubble) << "device " << d;
    EXPECT_EQ(x.exposed_comm, y.exposed_comm) << "device " << d;
    EXPECT_EQ(x.comm, y.comm) << "device " << d;
    EXPECT_EQ(x.bubble_ratio, y.bubble_ratio) << "device " << d;
    EXPECT_EQ(x.peak_memory, y.peak_memory) << "device " << d;
    EXPECT_EQ(x.peak_time, y.peak_time) << "device " << d;
    EXPECT_EQ(x.peak_reserved, y.peak_reserved) << "device " << d;
    EXPECT_EQ(x.breakdown, y.breakdown) << "device " << d;
    ASSERT_EQ(x.memory.size(), y.memory.size()) << "device " << d;
    for (size_t k = 0; k < x.memory.size(); ++k) {
      EXPECT_EQ(x.memory[k].t, y.memory[k].t);
      EXPECT_EQ(x.memory[k].total, y.memory[k].total);
    }
    EXPECT_EQ(x.folded, y.folded);
    EXPECT_EQ(x.representative, y.representative);
    EXPECT_EQ(x.over_capacity, y.over_capacity);
  }
  expect_same_program(a.program, b.program);
  ASSERT_EQ(a.timing.size(), b.timing.size());
  size_t bad = 0;
  for (size_t t = 0; t < a.timing.size() && bad < 5; ++t)
    if (a.timing[t].start != b.timing[t].start || a.timing[t].end != b.timing[t].end) {
      ++bad;
      ADD_FAILURE() << "task " << t << ": [" << a.timing[t].start << ", " << a.timing[t].end
                    << ") vs [" << b.timing[t].start << ", " << b.timing[t].end << ")";
    }
}

plan::CostModelSpec with(plan::CostModelSpec spec, const json& options) {
  for (const auto& [k, v] : options.items()) spec.options[k] = v;
  return spec;
}

struct Case {
  std::string plan;
  std::vector<json> edits;  // applied one after another, each on top of the last
};

// GPU plans: every analytic knob an edit in the GUI's Cost model tab reaches; CPU plans
// (host_compute): the host-thread effects too.
const std::vector<json> kGpuEdits = {
    {{"gemm_efficiency", 0.55}},
    {{"attention_efficiency", 0.3}, {"memory_efficiency", 0.7}},
    {{"dispatch_us", 12}},
    {{"comm_sm_share", 0.3}, {"comm_hbm_share", 0.25}},
    {{"nccl_intra_GBps", 120}},
    {{"launch_floor_us", 40}, {"gemm_k_half", 1024}},
};
const std::vector<json> kCpuEdits = {
    {{"gemm_efficiency", 0.5}},
    {{"host_op_us", 14}},
    {{"host_cold_factor", 1.3}},
    {{"host_reuse_factor", json::array({1.1, 1.2})}},
    {{"dispatch_us", 9}, {"memory_efficiency", 0.6}},
};

void check(const Case& c, const SimOptions& opt) {
  SCOPED_TRACE(c.plan);
  auto s = Session::open(std::string(STRETTO_EXAMPLES) + "/" + c.plan);
  ASSERT_TRUE(s) << s.error().front().message;
  auto prev = s->simulate(opt);
  ASSERT_TRUE(prev);
  // The same chain of edits through a Resimulator: its engine re-runs its preparation at op
  // granularity (the coarse program of pass granularity is not kept).
  Resimulator resim;
  auto chained = resim.simulate(s->compiled(), s->cost_model(), opt);
  ASSERT_TRUE(chained);
  EXPECT_FALSE(resim.reused());
  plan::CostModelSpec spec = s->plan().costmodel;
  for (const json& e : c.edits) {
    SCOPED_TRACE(e.dump());
    spec = with(spec, e);
    ASSERT_TRUE(s->set_costmodel(spec)) << e.dump();
    // the program alone
    auto re = recost_program(prev->program, s->compiled(), s->cost_model(),
                             nullptr);
    if (!prev->folded) {
      ASSERT_TRUE(re.has_value());
      expect_same_program(*re, build_program(s->compiled(), s->cost_model()));
    }
    auto fresh = s->simulate(opt);
    auto again = s->simulate(opt, *prev);
    ASSERT_TRUE(fresh);
    ASSERT_TRUE(again);
    EXPECT_NE(fresh->step_time, prev->step_time) << "an edit that changes nothing tests nothing";
    expect_same_result(*fresh, *again);
    prev = std::move(again);
    auto next = resim.simulate(s->compiled(), s->cost_model(), opt, &*chained);
    ASSERT_TRUE(next);
    EXPECT_EQ(resim.reused(), opt.granularity == Granularity::kOp);
    expect_same_result(*fresh, *next);
    chained = std::move(next);
  }
}

TEST(Recost, EqualsAFreshSimulationOnGpuPlans) {
  for (const char* p : {"gpt_pp4_dp2_1f1b.json", "megatron_gpt13b_tp8_pp2_dp2.json",
                        "piper_qwen3_moe_pp2_dp2_ep2.json", "layout_llama7b_pp4_dp4_interleaved.json"})
    check({p, kGpuEdits}, {});
}

TEST(Recost, EqualsAFreshSimulationFoldedAndAtPassGranularity) {
  SimOptions folded;
  folded.fold_replicas = true;
  check({"gpt_pp4_dp2_1f1b.json", kGpuEdits}, folded);
  SimOptions pass;
  pass.granularity = Granularity::kPass;
  check({"megatron_gpt13b_tp8_pp2_dp2.json", kGpuEdits}, pass);
}

TEST(Recost, EqualsAFreshSimulationWithHostThreadEffects) {
  for (const char* p : {"cpu_gpt_pp2_1f1b.json", "cpu_gpt_pp2_dp2_zero1.json",
                        "cpu_moe_ep2_dp2.json", "cpu_synthetic_pp4_zbh1.json"})
    check({p, kCpuEdits}, {});
}

// Edits that change the program's structure: shared host cores (hosts appear) are refused by
// recost_program; host_compute off (dependencies go) is rebuilt by simulate; both equal a
// fresh simulation.
TEST(Recost, StructureChangingEditsAreBuiltAfresh) {
  auto s = Session::open(std::string(STRETTO_EXAMPLES) + "/cpu_gpt_pp2_dp2_zero1.json");
  ASSERT_TRUE(s);
  auto prev = s->simulate();
  ASSERT_TRUE(prev);
  ASSERT_TRUE(prev->host_compute);
  ASSERT_GT(s->plan().cluster.devices_per_node, 1);
  ASSERT_TRUE(s->set_costmodel(with(s->plan().costmodel, {{"host_cores", 1}})));
  EXPECT_FALSE(recost_program(prev->program, s->compiled(), s->cost_model()).has_value());
  expect_same_result(*s->simulate(), *s->simulate({}, *prev));
  ASSERT_TRUE(s->set_costmodel(with(s->plan().costmodel, {{"host_compute", false}})));
  auto off = s->simulate({}, *prev);
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->host_compute);
  expect_same_result(*s->simulate(), *off);
}

// A Resimulator reuses its engine's preparation only for its own last result: an older result,
// one from a plain simulate, or a structure-changing edit prepares afresh; each result equals a
// fresh simulation.
TEST(Recost, AResimulatorReusesOnlyThePreparationOfItsLastResult) {
  auto s = Session::open(std::string(STRETTO_EXAMPLES) + "/cpu_gpt_pp2_dp2_zero1.json");
  ASSERT_TRUE(s);
  const plan::CostModelSpec base = s->plan().costmodel;
  Resimulator resim;
  auto first = resim.simulate(s->compiled(), s->cost_model(), {});
  ASSERT_TRUE(first);
  auto edit = [&](const json& e, const Result* previous, bool reused) {
    SCOPED_TRACE(e.dump());
    EXPECT_TRUE(s->set_costmodel(with(base, e)));
    auto r = resim.simulate(s->compiled(), s->cost_model(), {}, previous);
    EXPECT_TRUE(r);
    EXPECT_EQ(resim.reused(), reused);
    expect_same_result(*s->simulate(), *r);
    return r;
  };
  (void)edit({{"gemm_efficiency", 0.5}}, &*first, true);
  (void)edit({{"dispatch_us", 9}}, &*first, false);  // not the last result
  auto plain = s->simulate();
  ASSERT_TRUE(plain);
  (void)edit({{"host_op_us", 14}}, &*plain, false);  // not a Resimulator's result
  auto last = edit({{"host_op_us", 15}}, nullptr, false);
  auto shared = edit({{"host_cores", 1}}, &*last, false);  // hosts appear: built afresh
  (void)edit({{"host_cores", 2}}, &*shared, true);
  // `last` has the structure before hosts were shared; the engine holds the shared one's.
  (void)edit({{"host_op_us", 16}}, &*last, false);
  // A run at pass granularity keeps no preparation (its coarse program is gone): the op
  // granularity run after it prepares afresh.
  SimOptions pass;
  pass.granularity = Granularity::kPass;
  auto coarse = resim.simulate(s->compiled(), s->cost_model(), pass, &*last);
  ASSERT_TRUE(coarse);
  EXPECT_FALSE(resim.reused());
  (void)edit({{"host_op_us", 17}}, &*coarse, false);
}

}  // namespace
}  // namespace stretto::sim
