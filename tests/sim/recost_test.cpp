// A cost-model edit re-costs the previous program (recost_program, simulate with a previous
// result) instead of building it again: the program and the Result are those of a fresh
// simulate(), field by field, on several plans, granularities and edits (efficiencies, kernel
// knobs, dispatch, interference shares, NCCL link bandwidth, host-thread effects), chained
// edit after edit; a structure-changing edit is refused or rebuilt.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "stretto/costmodel/cost_model.h"
#include "same_result.h"
#include "stretto/sim/session.h"

namespace stretto::sim {
namespace {

using nlohmann::json;

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
  EXPECT_FALSE(resim.recosted());
  // The result before `chained` (`chained`'s program was re-costed from its program): the
  // next edit re-costs into its program's storage instead of into a copy of `chained`'s.
  std::optional<Result> older;
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
    const engine::Task* storage = older ? older->program.tasks.data() : nullptr;
    auto next = resim.simulate(s->compiled(), s->cost_model(), opt, &*chained,
                               older ? &older->program : nullptr);
    ASSERT_TRUE(next);
    EXPECT_EQ(resim.reused(), opt.granularity == Granularity::kOp);
    EXPECT_TRUE(resim.recosted());
    if (storage) {
      EXPECT_EQ(next->program.tasks.data(), storage) << "re-costed into a copy, not the storage";
    }
    expect_same_result(*fresh, *next);
    older = std::move(*chained);
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

// Session::set_costmodel with a retired session (the GUI's worker hands in the session of a
// snapshot no one holds any more): the new compiled plan is made in the retired one's storage
// when it is of the same compile, another object, and held by no one else; otherwise it is a
// copy. The session simulates the same either way.
TEST(Recost, SetCostModelReusesTheCompiledPlanOfARetiredSession) {
  const std::string path = std::string(STRETTO_EXAMPLES) + "/gpt_pp4_dp2_1f1b.json";
  auto s = Session::open(path);
  ASSERT_TRUE(s);
  const plan::CostModelSpec base = s->plan().costmodel;
  const plan::CostModelSpec spec = with(base, {{"dispatch_us", 9}});
  auto retired_after = [&](const json& e) {
    auto r = std::make_shared<Session>(*s);
    EXPECT_TRUE(r->set_costmodel(with(base, e)));  // its own compiled plan, a copy of s's
    return r;
  };
  Session fresh = *s;
  ASSERT_TRUE(fresh.set_costmodel(spec));
  auto expected = fresh.simulate();
  ASSERT_TRUE(expected);
  auto check = [&](std::shared_ptr<const Session> retired, bool reused) {
    const compiler::CompiledPlan* storage = retired ? &retired->compiled() : nullptr;
    Session edited = *s;
    ASSERT_TRUE(edited.set_costmodel(spec, std::move(retired)));
    EXPECT_EQ(&edited.compiled() == storage, reused);
    EXPECT_NE(&edited.compiled(), &s->compiled());
    EXPECT_EQ(edited.plan().costmodel.options, spec.options);
    auto r = edited.simulate();
    ASSERT_TRUE(r);
    expect_same_result(*expected, *r);
  };
  check(retired_after({{"dispatch_us", 7}}), true);
  {
    auto held = retired_after({{"dispatch_us", 7}});
    auto holder = held;  // held elsewhere: copied
    check(held, false);
  }
  auto other = Session::open(path);  // another compile: copied
  ASSERT_TRUE(other);
  auto other_retired = std::make_shared<Session>(*other);
  ASSERT_TRUE(other_retired->set_costmodel(with(base, {{"dispatch_us", 7}})));
  check(std::move(other_retired), false);
  check(std::make_shared<Session>(*s), false);  // s's own compiled plan: copied
  check(nullptr, false);
}

}  // namespace
}  // namespace stretto::sim
