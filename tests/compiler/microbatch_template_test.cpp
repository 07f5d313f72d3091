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
         a.recompute == b.recompute && a.sequence_parallel == b.sequence_parallel &&
         a.tp_overlap == b.tp_overlap;
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
  ASSERT_EQ(a.tp_overlaps.size(), b.tp_overlaps.size());
  EXPECT_EQ(first_difference(a.tp_overlaps, b.tp_overlaps,
                             [](const TpOverlapPair& x, const TpOverlapPair& y) {
                               return x.compute == y.compute && x.comm == y.comm &&
                                      x.method == y.method && x.part == y.part;
                             }),
            a.tp_overlaps.size());
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
  int stamped = 0, blocks = 0;
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
    EXPECT_EQ(u->blocks_stamped, 0);
    EXPECT_EQ(u->microbatches_stamped, 0);
    stamped += t->blocks_stamped;
    blocks += t->blocks;
    expect_same(*t, *u);
  }
  // The set is what it claims to be: the examples and builder families compile, the bad plans
  // do not, and templates did most of the work (a block is emitted in microbatch 0 and where
  // it is the first of its kind; blocks: the forward or backward of one PP region's ops).
  EXPECT_GE(compiled, 40u);
  EXPECT_GE(failed, 20u);
  EXPECT_GT(stamped, blocks / 2) << stamped << " of " << blocks;
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
// stamp every block of every microbatch but microbatch 0 and the first template; DualPipe and
// DualPipeV split the backward (BI + BW) of some microbatches on some stages only, and
// DualPipe places each stage and microbatch with its own directive, so they stamp at least
// every forward block past microbatch 1 (a block: one PP region's forward or backward).
TEST(MicrobatchTemplate, EveryBuilderFamilyStampsAlikeMicrobatches) {
  int families = 0;
  for (const auto& e : fs::directory_iterator(fs::path(STRETTO_EXAMPLES) / "builders")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    auto cp = compile_file(e.path().string());
    ASSERT_TRUE(cp.has_value()) << render_all(cp.error());
    ++families;
    const int m = cp->num_microbatches;
    ASSERT_GE(m, 4);
    ASSERT_EQ(cp->blocks % (2 * m), 0);
    const int regions = cp->blocks / (2 * m);
    EXPECT_EQ(regions, cp->plan.model.pp_regions);
    const std::string family = e.path().stem().string();
    if (family == "dualpipe" || family == "dualpipev") {
      EXPECT_GE(cp->blocks_stamped, (m - 2) * regions);
      std::printf("%s: %d of %d blocks stamped, %d of %d microbatches\n", family.c_str(),
                  cp->blocks_stamped, cp->blocks, cp->microbatches_stamped, m);
      continue;
    }
    EXPECT_EQ(cp->microbatches_stamped, m - 2) << cp->microbatches_stamped << " of " << m;
    EXPECT_EQ(cp->blocks_stamped, (m - 2) * 2 * regions);
  }
  EXPECT_EQ(families, 9);
}

// A small dense transformer on `ranks` schedule ranks of `dp` devices each, one layer per
// stage: dualpipev runs a V of two stages per rank, dualpipe every stage in both directions
// (its second direction placed by a directive per stage and microbatch). Options: ZeRO-3 with
// a prefetch bound (`prefetch` >= 0; reshard after forward or keep gathered), full recompute
// of every layer.
json dual_plan(const std::string& family, int ranks, int mbs, int dp, int prefetch = -1,
               bool reshard = true, bool recompute = false) {
  const bool v = family == "dualpipev";
  const int stages = v ? 2 * ranks : ranks;
  json base = json::array();
  for (int s = 0; s < stages; ++s) {
    const int r = s < ranks ? s : 2 * ranks - 1 - s;
    json devs = json::array();
    for (int k = 0; k < dp; ++k) devs.push_back(r * dp + k);
    base.push_back({{"op", "place"}, {"filter", {{"PP", s}}}, {"devices", devs}});
    if (dp == 1) continue;
    json rep = {{"op", "replicate"}, {"filter", {{"PP", s}}}, {"devices", devs}};
    if (prefetch >= 0) {
      rep["shard_grads"] = true;
      rep["shard_params"] = true;
      rep["prefetch"] = prefetch;
      rep["reshard_after_forward"] = reshard;
    }
    base.push_back(rep);
  }
  if (recompute)
    base.push_back({{"op", "recompute"}, {"filter", {{"LAYER", "*"}}}, {"mode", "full"}});
  return {{"model",
           {{"family", "transformer"},
            {"hidden", 64},
            {"heads", 4},
            {"kv_heads", 2},
            {"ffn_hidden", 128},
            {"vocab", 256},
            {"seq_len", 32},
            {"microbatch_size", 2},
            {"dtype", "fp32"},
            {"gated_mlp", true},
            {"layers", stages},
            {"pp_regions", stages}}},
          {"cluster", {{"preset", "cpu"}, {"nodes", 1}, {"devices_per_node", ranks * dp}}},
          {"costmodel", {{"kind", "analytic"}}},
          {"schedule",
           {{"builder", family},
            {"ranks", ranks},
            {"stages_per_rank", 2},
            {"microbatches", mbs},
            {"base", base}}}};
}

// DualPipe and DualPipeV, whose blocks are stamped only where their backward splits and
// placement directives allow: more microbatches, ZeRO-3 with prefetch bounds (a backward's
// gathers wait for its region's last forward, which a stamped block must carry over), full
// recompute, the builder examples with TP and sequence parallelism (and tp_comm_overlap) and
// with MoE experts over the data-parallel replicas, per-microbatch places on two streams, and
// one layer's backward split in some microbatches. Every one compiles to the same DAG as
// emitting every microbatch; the builders' plans stamp at least every forward block past
// microbatch 1.
TEST(MicrobatchTemplate, DualPipeVariationsEqualEmittingEveryMicrobatch) {
  CompileOptions emitted;
  emitted.template_microbatches = false;
  std::vector<std::pair<std::string, json>> plans;
  for (int m : {4, 8, 12})
    plans.emplace_back("dualpipev m" + std::to_string(m), dual_plan("dualpipev", 2, m, 1));
  for (int m : {8, 12, 16})
    plans.emplace_back("dualpipe m" + std::to_string(m), dual_plan("dualpipe", 4, m, 1));
  for (bool reshard : {true, false})
    for (int prefetch : {0, 2})
      plans.emplace_back("dualpipev zero3 " + std::string(reshard ? "reshard" : "kept") +
                             " prefetch " + std::to_string(prefetch),
                         dual_plan("dualpipev", 2, 8, 2, prefetch, reshard));
  plans.emplace_back("dualpipev zero3 recompute", dual_plan("dualpipev", 2, 8, 2, 1, true, true));
  plans.emplace_back("dualpipe recompute", dual_plan("dualpipe", 4, 12, 1, -1, true, true));
  const fs::path builders = fs::path(STRETTO_EXAMPLES) / "builders";
  for (const char* family : {"dualpipe", "dualpipev"}) {
    json tp = json::parse(std::ifstream(builders / (std::string(family) + ".json")));
    tp["schedule"]["microbatches"] = 16;
    tp["schedule"]["layout"]["tp"] = 2;
    tp["schedule"]["layout"]["sequence_parallel"] = true;
    tp["cluster"]["nodes"] = 2;
    plans.emplace_back(std::string(family) + " tp2 sp", tp);
    tp["schedule"]["layout"]["tp_comm_overlap"] = true;
    plans.emplace_back(std::string(family) + " tp2 sp tp_comm_overlap", tp);
  }
  json moe = json::parse(std::ifstream(builders / "dualpipev.json"));
  moe["model"]["moe"] = {{"experts", 4}, {"top_k", 2}, {"expert_ffn_hidden", 512}};
  moe["schedule"]["layout"]["ep"] = 2;
  moe["schedule"]["microbatches"] = 12;
  plans.emplace_back("dualpipev moe ep2", moe);
  // Places per stage and microbatch as DualPipe's, but the odd microbatches' second stage
  // sends its gradients on another stream: their directives are not alike the even ones'.
  json streams = dual_plan("dualpipev", 1, 6, 1);
  json sched = json::array({{{"op", "split"}, {"filter", json::object()}, {"num_microbatches", 6}},
                            {{"op", "place"}, {"filter", {{"PP", 0}}}, {"devices", {0}}}});
  for (int mb = 0; mb < 6; ++mb)
    sched.push_back({{"op", "place"},
                     {"filter", {{"PP", 1}, {"MB", mb}}},
                     {"devices", {1}},
                     {"stream", mb % 2 ? "pp_odd" : "pp"}});
  streams["schedule"] = sched;
  streams["cluster"]["devices_per_node"] = 2;
  plans.emplace_back("places on two streams", streams);
  // The last layer of the second stage splits its backward in microbatches 2 and 4 only: the
  // first stage's backward reads alike units in every microbatch (its consumers are layer 2's,
  // never split), but takes its gradients from a second-stage backward laid out otherwise.
  json layer_split = json::parse(std::ifstream(fs::path(STRETTO_TEST_DATA) / "schedules" / "ok" /
                                               "synthetic_pp2_split_backward.json"));
  json order = json::array();
  for (int mb = 0; mb < 6; ++mb) {
    order.push_back({{{"PP", 1}, {"MB", mb}, {"PASS", "F"}}});
    if (mb == 2 || mb == 4) {
      order.push_back({{{"PP", 1}, {"LAYER", 3}, {"MB", mb}, {"PASS", "BI"}}});
      order.push_back({{{"PP", 1}, {"LAYER", 2}, {"MB", mb}, {"PASS", "B"}}});
      order.push_back({{{"PP", 1}, {"LAYER", 3}, {"MB", mb}, {"PASS", "BW"}}});
    } else {
      order.push_back({{{"PP", 1}, {"MB", mb}, {"PASS", "B"}}});
    }
  }
  layer_split["schedule"][2]["num_microbatches"] = 6;
  layer_split["schedule"].erase(3);
  layer_split["schedule"][3] = {{"op", "order"}, {"filters", order}};
  plans.emplace_back("one layer's backward split", layer_split);
  for (const auto& [name, plan] : plans) {
    SCOPED_TRACE(name);
    auto t = compile_json(plan, {});
    auto u = compile_json(plan, emitted);
    ASSERT_TRUE(t.has_value()) << render_all(t.error());
    ASSERT_TRUE(u.has_value()) << render_all(u.error());
    EXPECT_EQ(u->blocks_stamped, 0);
    const int m = t->num_microbatches;
    const int regions = t->blocks / (2 * m);
    if (plan.contains("/schedule/builder"_json_pointer))
      EXPECT_GE(t->blocks_stamped, (m - 2) * regions);
    else
      EXPECT_GT(t->blocks_stamped, 0);
    std::printf("%s: %d of %d blocks stamped, %d of %d microbatches\n", name.c_str(),
                t->blocks_stamped, t->blocks, t->microbatches_stamped, m);
    expect_same(*t, *u);
  }
  EXPECT_EQ(plans.size(), 19u);
}

}  // namespace
