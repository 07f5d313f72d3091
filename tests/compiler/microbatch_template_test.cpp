// The microbatch-templated compiler (CompileOptions::template_microbatches): compiling with
// templates gives exactly the DAG, order and class programs of emitting every microbatch, on
// every example plan, every schedule builder family and the backend, loop and schedule test
// plans; bad plans fail with the same diagnostics.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "stretto/compiler/compiler.h"

using namespace stretto;
using namespace stretto::plan;
using namespace stretto::compiler;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> plan_files() {
  std::vector<fs::path> out;
  const fs::path data(STRETTO_TEST_DATA);
  for (const fs::path& dir :
       {fs::path(STRETTO_EXAMPLES), fs::path(STRETTO_EXAMPLES) / "builders", data / "backend",
        data / "loop", data / "schedules" / "ok", data / "schedules" / "bad"})
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Every field of two nodes (Node has no operator==: it is a 64-byte value in big arrays).
bool same_node(const Node& a, const Node& b) {
  return a.kind == b.kind && a.comm == b.comm && a.purpose == b.purpose && a.tags == b.tags &&
         a.stream == b.stream && a.tp == b.tp && a.op == b.op && a.devs == b.devs &&
         a.devs2 == b.devs2 && a.bytes == b.bytes && a.directive == b.directive &&
         a.region_k == b.region_k && a.region_n == b.region_n && a.consumer == b.consumer &&
         a.recompute == b.recompute && a.sequence_parallel == b.sequence_parallel;
}

// The first index where two arrays differ under `eq`, or their common size if none.
template <class T, class Eq>
size_t first_difference(const std::vector<T>& a, const std::vector<T>& b, Eq eq) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (!eq(a[i], b[i])) return i;
  return n;
}

void expect_same(const CompiledPlan& t, const CompiledPlan& u) {
  const TrainingDag& a = t.dag;
  const TrainingDag& b = u.dag;
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  const size_t n = first_difference(a.nodes, b.nodes, same_node);
  EXPECT_EQ(n, a.nodes.size()) << "first differing node: templated "
                               << (n < a.nodes.size() ? a.node_name(n, t.model) : "")
                               << ", emitted " << (n < b.nodes.size() ? b.node_name(n, u.model) : "");
  ASSERT_EQ(a.edges.size(), b.edges.size());
  EXPECT_EQ(first_difference(a.edges, b.edges,
                             [](const Edge& x, const Edge& y) {
                               return x.from == y.from && x.to == y.to && x.kind == y.kind &&
                                      x.directive == y.directive;
                             }),
            a.edges.size());
  ASSERT_EQ(a.mem.size(), b.mem.size());
  EXPECT_EQ(first_difference(a.mem, b.mem,
                             [](const MemEffect& x, const MemEffect& y) {
                               return x.node == y.node && x.at_end == y.at_end &&
                                      x.cat == y.cat && x.bytes == y.bytes;
                             }),
            a.mem.size());
  EXPECT_EQ(a.consumer_tags, b.consumer_tags);
  ASSERT_EQ(a.device_sets.size(), b.device_sets.size());
  for (size_t i = 0; i < a.device_sets.size(); ++i) {
    EXPECT_EQ(a.device_sets[i].devices, b.device_sets[i].devices) << "device set " << i;
    EXPECT_EQ(a.device_sets[i].group_size, b.device_sets[i].group_size) << "device set " << i;
  }
  EXPECT_EQ(a.streams, b.streams);
  EXPECT_EQ(a.succ_begin, b.succ_begin);
  EXPECT_EQ(a.succ, b.succ);
  EXPECT_EQ(a.pred_begin, b.pred_begin);
  EXPECT_EQ(a.pred, b.pred);
  EXPECT_EQ(t.topo_order, u.topo_order);
  EXPECT_EQ(t.class_of_device, u.class_of_device);
  ASSERT_EQ(t.classes.size(), u.classes.size());
  for (size_t c = 0; c < t.classes.size(); ++c) {
    EXPECT_EQ(t.classes[c].devices, u.classes[c].devices) << "class " << c;
    EXPECT_EQ(t.classes[c].program, u.classes[c].program) << "class " << c;
    EXPECT_EQ(t.classes[c].streams, u.classes[c].streams) << "class " << c;
  }
  ASSERT_EQ(t.static_mem.size(), u.static_mem.size());
  for (size_t d = 0; d < t.static_mem.size(); ++d) {
    EXPECT_EQ(t.static_mem[d].params, u.static_mem[d].params);
    EXPECT_EQ(t.static_mem[d].grads, u.static_mem[d].grads);
    EXPECT_EQ(t.static_mem[d].optimizer, u.static_mem[d].optimizer);
  }
  EXPECT_EQ(t.num_microbatches, u.num_microbatches);
  EXPECT_EQ(t.zero_level, u.zero_level);
  EXPECT_EQ(render_all(t.warnings), render_all(u.warnings));
}

TEST(MicrobatchTemplate, TemplatedCompileEqualsEmittingEveryMicrobatch) {
  CompileOptions templated, emitted;
  emitted.template_microbatches = false;
  size_t compiled = 0, failed = 0;
  int stamped = 0, microbatches = 0;
  for (const fs::path& f : plan_files()) {
    SCOPED_TRACE(f.string());
    auto t = compile_file(f.string(), templated);
    auto u = compile_file(f.string(), emitted);
    ASSERT_EQ(t.has_value(), u.has_value());
    if (!t) {
      EXPECT_EQ(render_all(t.error()), render_all(u.error()));
      ++failed;
      continue;
    }
    ++compiled;
    EXPECT_EQ(u->microbatches_stamped, 0);
    stamped += t->microbatches_stamped;
    microbatches += t->num_microbatches;
    expect_same(*t, *u);
  }
  // The set is what it claims to be: the examples and builder families compile, the bad plans
  // do not, and templates did most of the work (microbatch 0 and each distinct placement's
  // first microbatch are emitted).
  EXPECT_GE(compiled, 40u);
  EXPECT_GE(failed, 20u);
  EXPECT_GT(stamped, microbatches / 2) << stamped << " of " << microbatches;
}

Expected<CompiledPlan> compile_json(const json& plan, const CompileOptions& opt) {
  auto src = JsonSource::parse(plan.dump(1), "variation.json");
  if (!src) return fail(src.error());
  auto p = parse_plan(*src);
  if (!p) return fail(p.error());
  return compile(*p, &*src, opt);
}

// Variations that no checked-in plan has: ZeRO-3 keeping the parameters gathered from the
// forward to the gradient reduction (reshard_after_forward false: microbatch 0 alone gathers),
// with and without prefetch bounds, on a data-parallel plan and on a PP2 1F1B plan with full
// recompute (recomputed forwards gather for their backward), 6 microbatches each.
TEST(MicrobatchTemplate, ZeroThreeAndRecomputeVariations) {
  CompileOptions emitted;
  emitted.template_microbatches = false;
  const fs::path data = fs::path(STRETTO_TEST_DATA) / "backend";
  int variations = 0;
  for (const char* file : {"dp2_zero3.json", "pp2_recompute.json"})
    for (bool reshard : {true, false})
      for (int prefetch : {0, 2}) {
        json plan = json::parse(std::ifstream(data / file));
        json& sched = plan["schedule"].is_object() ? plan["schedule"]["base"] : plan["schedule"];
        if (plan["schedule"].is_object()) {
          plan["schedule"]["microbatches"] = 6;
          // the PP2 plan's two stages, each replicated over a second device
          plan["cluster"]["devices_per_node"] = 4;
          sched[0]["devices"] = {0, 2};
          sched[1]["devices"] = {1, 3};
          sched.push_back({{"op", "replicate"}, {"filter", {{"PP", 0}}}, {"devices", {0, 2}}});
          sched.push_back({{"op", "replicate"}, {"filter", {{"PP", 1}}}, {"devices", {1, 3}}});
        }
        for (json& d : sched) {
          if (d["op"] == "split") d["num_microbatches"] = 6;
          if (d["op"] != "replicate") continue;
          d["shard_grads"] = true;
          d["shard_params"] = true;
          d["reshard_after_forward"] = reshard;
          d["prefetch"] = prefetch;
        }
        SCOPED_TRACE(std::string(file) + (reshard ? " reshard" : " kept") + " prefetch " +
                     std::to_string(prefetch));
        auto t = compile_json(plan, {});
        auto u = compile_json(plan, emitted);
        ASSERT_TRUE(t.has_value()) << render_all(t.error());
        ASSERT_TRUE(u.has_value()) << render_all(u.error());
        ASSERT_EQ(t->num_microbatches, 6);
        EXPECT_EQ(t->zero_level, 3);
        EXPECT_EQ(t->microbatches_stamped, 4);  // all but microbatch 0 and the template
        expect_same(*t, *u);
        ++variations;
      }
  EXPECT_EQ(variations, 8);
}

// Every schedule builder family compiles with templates. Those whose microbatches are alike
// stamp all but microbatch 0 and the first template; DualPipe and DualPipeV split the backward
// (BI + BW) of some microbatches on some stages only, so their microbatches differ and are
// each emitted (a per-stage template would be needed to stamp them).
TEST(MicrobatchTemplate, EveryBuilderFamilyStampsAlikeMicrobatches) {
  int families = 0;
  for (const auto& e : fs::directory_iterator(fs::path(STRETTO_EXAMPLES) / "builders")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    auto cp = compile_file(e.path().string());
    ASSERT_TRUE(cp.has_value()) << render_all(cp.error());
    ++families;
    ASSERT_GE(cp->num_microbatches, 4);
    const std::string family = e.path().stem().string();
    if (family == "dualpipe" || family == "dualpipev") continue;
    EXPECT_EQ(cp->microbatches_stamped, cp->num_microbatches - 2)
        << cp->microbatches_stamped << " of " << cp->num_microbatches;
  }
  EXPECT_EQ(families, 9);
}

}  // namespace
