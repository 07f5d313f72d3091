// One plan, one answer (docs/semantics.md "Doors"): every example and test plan, and
// generated variations of layout, family, ZeRO, recompute, sequence parallelism and expert
// parallelism, give the same answer through every door. A sweep point that pins an axis to
// the plan's own resolved value (describe's value) is the plan itself; the point's plan, which
// `--emit-best` writes, simulates to the plan's numbers; search keeps the base's global batch.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "stretto/explore/search.h"
#include "stretto/explore/spec.h"
#include "stretto/sim/session.h"

namespace fs = std::filesystem;
using namespace stretto;
using namespace stretto::plan;
using namespace stretto::compiler;
using namespace stretto::explore;

namespace {

struct NamedPlan {
  std::string name;
  Json doc;
};

Json load(const fs::path& p) {
  auto src = JsonSource::load(p.string());
  EXPECT_TRUE(src) << p;
  return src ? src->root() : Json();
}

// Variations of the layout example: layout, family, ZeRO, SP (TP), EP (an MoE model), and a
// directive-written recompute.
std::vector<NamedPlan> variations() {
  const Json llama = load(fs::path(STRETTO_EXAMPLES) / "layout_llama7b_pp4_dp4_interleaved.json");
  std::vector<NamedPlan> out;
  auto shrink = [](Json p) {  // small enough to simulate many times in a test
    p["model"]["layers"] = 8;
    p["model"]["seq_len"] = 1024;
    p["model"]["hidden"] = 1024;
    p["model"]["ffn_hidden"] = 2816;
    p["model"]["heads"] = 8;
    return p;
  };
  for (int zero : {0, 2, 3}) {
    Json p = shrink(llama);
    p["schedule"]["layout"]["zero"] = zero;
    p["schedule"]["microbatches"] = 8;
    out.push_back({fmt::format("layout zero {}", zero), p});
  }
  {
    Json p = shrink(llama);
    p["schedule"] = {{"builder", "1f1b"},
                     {"microbatches", 8},
                     {"layout", {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"sequence_parallel", true},
                                 {"order", "tp-pp-dp"}}}};
    p["model"]["pp_regions"] = 2;
    p["cluster"]["nodes"] = 1;
    out.push_back({"layout tp2 pp2 dp2 sp, tp-pp-dp order", p});
  }
  {
    Json p = shrink(llama);
    p["schedule"] = {{"builder", "1f1b"},
                     {"microbatches", 8},
                     {"layout", {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"sequence_parallel", true},
                                 {"tp_comm_overlap", true}}}};
    p["model"]["pp_regions"] = 2;
    p["cluster"]["nodes"] = 1;
    out.push_back({"layout tp2 pp2 dp2 sp, tp_comm_overlap", p});
  }
  for (const char* fam : {"zb-h1", "zb-v", "gpipe"}) {
    Json p = shrink(llama);
    p["schedule"] = {{"builder", fam}, {"microbatches", 8}, {"layout", {{"pp", 2}, {"dp", 2}}}};
    p["model"]["pp_regions"] = std::string(fam) == "zb-v" ? 4 : 2;
    p["cluster"]["nodes"] = 1;
    p["cluster"]["devices_per_node"] = 4;
    out.push_back({fmt::format("family {}", fam), p});
  }
  {
    Json p = shrink(llama);
    p["model"]["moe"] = {{"experts", 4}, {"top_k", 2}, {"expert_ffn_hidden", 1024}};
    p["schedule"] = {{"builder", "1f1b"},
                     {"microbatches", 4},
                     {"layout", {{"pp", 2}, {"dp", 2}, {"ep", 2}, {"zero", 1}}}};
    p["model"]["pp_regions"] = 2;
    p["cluster"]["nodes"] = 1;
    p["cluster"]["devices_per_node"] = 4;
    out.push_back({"MoE ep = dp", p});
  }
  {
    // Two nodes of the preset's devices_per_node (8, not written): a point of 16 devices is
    // the same two nodes, not one node of 16 (whose links are all NVLink).
    Json p = shrink(llama);
    p["cluster"].erase("devices_per_node");
    p["schedule"]["microbatches"] = 8;
    out.push_back({"preset's devices_per_node, 2 nodes", p});
  }
  return out;
}

std::vector<NamedPlan> all_plans() {
  std::vector<NamedPlan> out;
  for (const fs::path& dir : {fs::path(STRETTO_EXAMPLES), fs::path(STRETTO_EXAMPLES) / "builders",
                             fs::path(STRETTO_TEST_DATA) / "schedules" / "ok"}) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) out.push_back({f.lexically_relative(STRETTO_EXAMPLES).string(), load(f)});
  }
  for (auto& v : variations()) out.push_back(std::move(v));
  return out;
}

// describe's resolved values of a plan document.
Expected<ResolvedPlan> described(const Json& doc) {
  auto src = JsonSource::from_json(doc, "plan.json");
  auto plan = parse_plan(src);
  if (!plan) return fail(plan.error());
  CompileOptions copt;
  copt.class_programs = false;
  auto cp = compile(*plan, &src, copt);
  if (!cp) return fail(cp.error());
  return sim::resolve_plan(*cp);
}

// The sweep axes a resolved plan pins, each to the plan's own value.
Json own_values(const ResolvedPlan& r) {
  Json p = {{"pp", r.ranks},        {"tp", r.tp},
            {"dp", r.dp},           {"zero", r.zero},
            {"microbatches", r.microbatches}, {"microbatch_size", r.microbatch_size},
            {"recompute", r.recompute},       {"sequence_parallel", r.sequence_parallel},
            {"tp_comm_overlap", r.tp_comm_overlap}, {"ep", r.ep}};
  if (!r.family.empty()) p["family"] = r.family;
  return p;
}

struct Numbers {
  engine::SimTime step = 0;
  int64_t peak = 0;
};
Expected<Numbers> simulate(const Json& doc) {
  auto src = JsonSource::from_json(doc, "plan.json");
  auto plan = parse_plan(src);
  if (!plan) return fail(plan.error());
  auto s = sim::Session::from_plan(std::move(*plan), STRETTO_EXAMPLES);
  if (!s) return fail(s.error());
  sim::SimOptions o;
  o.memory_curves = false;
  auto r = s->simulate(o);
  if (!r) return fail(r.error());
  Numbers n{r->step_time, 0};
  for (const auto& d : r->devices) n.peak = std::max(n.peak, d.peak_memory);
  return n;
}

Json without_name(Json j) {
  j.erase("name");
  return j;
}

}  // namespace

// A point pinning one axis (or all of them) to the plan's own resolved value is the plan: the
// same document, so the same simulation (the sweep and --emit-best simulate point_plan's
// document, docs/sweeps.md).
TEST(DoorConsistency, PinningAnAxisToThePlansOwnValueIsThePlan) {
  size_t plans = 0, pinned = 0;
  for (const NamedPlan& np : all_plans()) {
    auto r = described(np.doc);
    if (!r) continue;  // a plan too large to compile here (examples at full scale are fine)
    ++plans;
    const Json own = own_values(*r);
    for (const auto& [axis, v] : own.items()) {
      auto doc = point_plan(np.doc, Json{{axis, v}});
      ASSERT_TRUE(doc) << np.name << " " << axis << ": " << render_all(doc.error());
      EXPECT_EQ(without_name(*doc), without_name(np.doc)) << np.name << " pinning " << axis << " = " << v;
      EXPECT_NE((*doc)["name"], np.doc.value("name", Json())) << "a point's plan names the point";
      ++pinned;
    }
    auto all = point_plan(np.doc, own);
    ASSERT_TRUE(all) << np.name << ": " << render_all(all.error());
    EXPECT_EQ(without_name(*all), without_name(np.doc)) << np.name << " pinning " << own.dump();
  }
  EXPECT_GE(plans, 20u);
  EXPECT_GE(pinned, 150u);
}

// A point that changes a value and one that changes it back: the second simulates to the
// base's numbers, and the first's resolved values are the base's plus the edit (the base's
// layout, rank order and ZeRO level kept).
TEST(DoorConsistency, APointIsTheResolvedBasePlusItsEdits) {
  for (const NamedPlan& np : variations()) {
    auto base = described(np.doc);
    ASSERT_TRUE(base) << np.name << ": " << render_all(base.error());
    auto base_sim = simulate(np.doc);
    ASSERT_TRUE(base_sim) << np.name;
    const Json own = own_values(*base);
    // The same plan through a point that pins everything: the same numbers.
    auto pinned = point_plan(np.doc, own);
    ASSERT_TRUE(pinned);
    auto pinned_sim = simulate(*pinned);
    ASSERT_TRUE(pinned_sim) << np.name;
    EXPECT_EQ(pinned_sim->step, base_sim->step) << np.name;
    EXPECT_EQ(pinned_sim->peak, base_sim->peak) << np.name;
    // One edit: every other resolved value is the base's.
    const int mb = base->microbatches * 2;
    auto edited = point_plan(np.doc, Json{{"microbatches", mb}});
    ASSERT_TRUE(edited) << np.name << ": " << render_all(edited.error());
    auto er = described(*edited);
    ASSERT_TRUE(er) << np.name << ": " << render_all(er.error());
    for (const ResolvedField& f : base->fields) {
      if (f.name == "microbatches" || f.name == "global_batch") continue;
      const ResolvedField* g = er->field(f.name);
      ASSERT_NE(g, nullptr) << f.name;
      EXPECT_EQ(g->value, f.value) << np.name << ": " << f.name << " after microbatches = " << mb;
    }
    EXPECT_EQ(er->microbatches, mb);
    EXPECT_EQ(er->placement, base->placement) << np.name;
    EXPECT_EQ(er->tp_groups, base->tp_groups) << np.name;
    // ... and it simulates to what the base with that one value edited by hand does.
    Json by_hand = np.doc;
    by_hand["schedule"]["microbatches"] = mb;
    auto hand_sim = simulate(by_hand);
    ASSERT_TRUE(hand_sim) << np.name;
    auto edited_sim = simulate(*edited);
    ASSERT_TRUE(edited_sim) << np.name;
    EXPECT_EQ(edited_sim->step, hand_sim->step) << np.name << " microbatches = " << mb;
    EXPECT_EQ(edited_sim->peak, hand_sim->peak) << np.name << " microbatches = " << mb;
  }
}

// Search trains the base's global batch (microbatch_size x microbatches x dp, with the dp of
// a layout plan) in every point it considers.
TEST(DoorConsistency, SearchKeepsTheBasesGlobalBatch) {
  for (const NamedPlan& np : variations()) {
    auto base = described(np.doc);
    ASSERT_TRUE(base);
    SearchOptions opt;
    opt.devices = base->cluster_devices;
    auto space = search_space(np.doc, opt);
    ASSERT_TRUE(space) << np.name << ": " << render_all(space.error());
    for (const Json& p : *space) {
      const int64_t gbs = p["microbatch_size"].get<int64_t>() * p["microbatches"].get<int64_t>() *
                          p["dp"].get<int64_t>();
      ASSERT_EQ(gbs, base->global_batch()) << np.name << ": " << p.dump();
    }
  }
}

// Search's points fill whole nodes of the base's resolved devices_per_node (here the
// preset's 8, not written), as the base's cluster does.
TEST(DoorConsistency, SearchFillsWholeNodesOfThePresetsDevicesPerNode) {
  const NamedPlan np = variations().back();
  ASSERT_EQ(np.name, "preset's devices_per_node, 2 nodes");
  SearchOptions opt;
  opt.devices = 16;
  auto space = search_space(np.doc, opt);
  ASSERT_TRUE(space) << render_all(space.error());
  for (const Json& p : *space) {
    if (p["tp"] != 1 || p["pp"] != 4) continue;
    auto doc = point_plan(np.doc, p);
    ASSERT_TRUE(doc) << p.dump() << ": " << render_all(doc.error());
    auto r = described(*doc);
    ASSERT_TRUE(r) << render_all(r.error());
    EXPECT_EQ(r->field("nodes")->value, 2) << p.dump();
    EXPECT_EQ(r->field("devices_per_node")->value, 8) << p.dump();
    break;
  }
  opt.devices = 12;
  auto twelve = search_space(np.doc, opt);
  ASSERT_FALSE(twelve);
  EXPECT_NE(render_all(twelve.error()).find("--devices 12 is not a whole number of 8-device nodes"),
            std::string::npos)
      << render_all(twelve.error());
}

// An axis value the plan cannot take is refused with the plan parser's own words.
TEST(DoorConsistency, AnAxisValueThePlanCannotTakeIsRefusedWithTheParsersWords) {
  const Json base = variations()[0].doc;
  struct Case {
    Json point;
    std::string words;
  };
  for (const Case& c : std::vector<Case>{
           {{{"zero", 5}}, "layout 'zero' must be an integer in [0, 3]"},
           {{{"zero", "two"}}, "layout 'zero' must be an integer in [0, 3]"},
           {{{"sequence_parallel", 1}}, "layout 'sequence_parallel' must be true or false"},
           {{{"tp_comm_overlap", "yes"}}, "layout 'tp_comm_overlap' must be true or false"},
           {{{"tp_comm_overlap", true}}, "'tp_comm_overlap' with tp = 1"},
           {{{"recompute", "most"}}, "unknown mode 'most'"},
           {{{"microbatches", 0}}, "'microbatches' = 0 is out of range [1, 1000000]"},
           {{{"family", "1f2b"}}, "unknown pipeline schedule '1f2b'"},
           {{{"/model/seq_len", -4}}, "'seq_len'"},
       }) {
    auto doc = point_plan(base, c.point);
    ASSERT_FALSE(doc) << c.point.dump() << " was taken";
    EXPECT_NE(render_all(doc.error()).find(c.words), std::string::npos)
        << c.point.dump() << ": " << render_all(doc.error());
  }
  // ... and the spec that lists it is refused before anything runs, at the value.
  auto src = JsonSource::from_json(
      Json{{"base", base}, {"axes", {{"zero", {1, 7}}}}}, "spec.json");
  auto spec = parse_spec(src, STRETTO_EXAMPLES);
  ASSERT_FALSE(spec);
  const std::string text = render_all(spec.error());
  EXPECT_NE(text.find("layout 'zero' must be an integer in [0, 3]"), std::string::npos) << text;
  EXPECT_NE(text.find("/axes/zero/1"), std::string::npos) << text;
}
