// Plan parser: locations (line:column and JSON pointer), hints, all errors collected.
#include <gtest/gtest.h>

#include <filesystem>

#include "stretto/plan/plan.h"

using namespace stretto;
using namespace stretto::plan;

namespace {
Diagnostics parse_errors(const std::string& text) {
  auto src = JsonSource::parse(text, "p.json");
  if (!src) return src.error();
  auto plan = parse_plan(*src);
  return plan ? Diagnostics{} : plan.error();
}
const char* kHead =
    "{\n"
    "  \"model\": {\"family\": \"synthetic\", \"layers\": 2, \"pp_regions\": 2},\n"
    "  \"cluster\": {\"preset\": \"h100-sxm\", \"devices_per_node\": 2},\n"
    "  \"schedule\": [\n";
}  // namespace

TEST(Parser, SyntaxErrorHasLineAndColumn) {
  auto ds = parse_errors("{\n  \"model\": {\"layers\": 2}\n  \"cluster\": {}\n}\n");
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].loc.line, 3u);
  EXPECT_EQ(ds[0].loc.col, 3u);
  EXPECT_NE(ds[0].message.find("invalid JSON"), std::string::npos);
}

TEST(Parser, UnknownKeyPointsAtKeyWithHint) {
  std::string t = std::string(kHead) +
                  "    {\"op\": \"place\", \"filter\": {\"PP\": 0}, \"devics\": [0]}\n  ]\n}\n";
  auto ds = parse_errors(t);
  ASSERT_GE(ds.size(), 1u);
  const Diagnostic* d = nullptr;
  for (const auto& x : ds)
    if (x.message.find("devics") != std::string::npos) d = &x;
  ASSERT_NE(d, nullptr) << render_all(ds);
  EXPECT_EQ(d->loc.line, 5u);
  EXPECT_EQ(d->loc.col, 42u);  // the key's opening quote
  EXPECT_EQ(d->loc.json_pointer, "/schedule/0/devics");
  EXPECT_EQ(d->hint, "did you mean 'devices'?");
  EXPECT_EQ(d->directive, 0);
}

// "h100" is the start of "h100-sxm", not a typo of "h200" (one letter off).
TEST(Parser, PresetHintCompletesAShortenedName) {
  std::string t = std::string(kHead) + "  ]\n}\n";
  t.replace(t.find("h100-sxm"), 8, "h100");
  auto ds = parse_errors(t);
  ASSERT_EQ(ds.size(), 1u) << render_all(ds);
  EXPECT_EQ(ds[0].loc.json_pointer, "/cluster/preset");
  EXPECT_EQ(ds[0].hint, "did you mean 'h100-sxm'?");
  t.replace(t.find("h100"), 4, "a100");
  EXPECT_EQ(parse_errors(t)[0].hint, "did you mean 'a100-sxm'?");
  t.replace(t.find("a100"), 4, "h2OO");
  EXPECT_EQ(parse_errors(t)[0].hint, "did you mean 'h200'?");  // a typo still finds its name
}

TEST(Parser, CollectsEveryErrorBeforeFailing) {
  std::string t = std::string(kHead) +
                  "    {\"op\": \"plase\", \"filter\": {}, \"devices\": [0]},\n"
                  "    {\"op\": \"order\", \"filters\": [[{\"PP\": 0, \"PASS\": \"Bw\"}]]},\n"
                  "    {\"op\": \"place\", \"filter\": {\"pp\": 1}, \"devices\": [-1]}\n  ]\n}\n";
  auto ds = parse_errors(t);
  ASSERT_EQ(ds.size(), 4u) << render_all(ds);
  EXPECT_EQ(ds[0].hint, "did you mean 'place'?");
  EXPECT_EQ(ds[1].hint, "did you mean 'BW'?");
  EXPECT_EQ(ds[1].loc.json_pointer, "/schedule/1/filters/0/0/PASS");
  EXPECT_EQ(ds[2].hint, "did you mean 'PP'?");
  EXPECT_EQ(ds[3].loc.json_pointer, "/schedule/2/devices/0");
}

// token_drop_policy only acts with a capacity_factor; without one it is refused where it stands
// (it was accepted and unused). With a capacity factor it parses.
TEST(Parser, TokenDropPolicyWithoutCapacityIsRefused) {
  const std::string moe_model =
      "{\n  \"model\": {\"family\": \"transformer\", \"layers\": 2, \"hidden\": 64, \"heads\": 4,"
      " \"ffn_hidden\": 128, \"vocab\": 256, \"seq_len\": 32, \"microbatch_size\": 1,\n"
      "    \"moe\": {\"experts\": 4, \"top_k\": 2, \"expert_ffn_hidden\": 64, MOE}},\n"
      "  \"cluster\": {\"preset\": \"h100-sxm\", \"devices_per_node\": 1},\n"
      "  \"schedule\": [{\"op\": \"place\", \"filter\": {}, \"devices\": [0]}]\n}\n";
  auto with = [&](const std::string& moe) {
    std::string t = moe_model;
    t.replace(t.find("MOE"), 3, moe);
    return parse_errors(t);
  };
  const Diagnostics ds = with("\"token_drop_policy\": \"position\"");
  ASSERT_EQ(ds.size(), 1u) << render_all(ds);
  EXPECT_EQ(ds[0].loc.json_pointer, "/model/moe/token_drop_policy");
  EXPECT_EQ(ds[0].loc.line, 3u);
  EXPECT_NE(ds[0].message.find("without capacity_factor"), std::string::npos);
  EXPECT_NE(ds[0].hint.find("capacity_factor"), std::string::npos);
  EXPECT_TRUE(with("\"token_drop_policy\": \"position\", \"capacity_factor\": 1.0").empty())
      << render_all(with("\"token_drop_policy\": \"position\", \"capacity_factor\": 1.0"));
  EXPECT_TRUE(with("\"capacity_factor\": 1.0").empty());
}

TEST(Parser, DirectivesRoundTripThroughJson) {
  std::string t = std::string(kHead) +
                  "    {\"op\": \"place\", \"filter\": {\"PP\": 0, \"EP\": \"*\"}, \"devices\": "
                  "[0], \"stream\": \"pp\"},\n"
                  "    {\"op\": \"replicate\", \"filter\": {\"LAYER\": \"-\"}, \"devices\": [0, "
                  "1], \"shard_grads\": true},\n"
                  "    {\"op\": \"split\", \"filter\": {}, \"num_microbatches\": 4},\n"
                  "    {\"op\": \"order\", \"filters\": [[{\"MB\": 0, \"PASS\": \"F\"}], [{\"MB\": "
                  "1, \"PASS\": \"F\"}, {\"MB\": 0, \"PASS\": \"BW\"}]]}\n"
                  "  ]\n}\n";
  auto src = JsonSource::parse(t, "p.json");
  ASSERT_TRUE(src);
  auto plan = parse_plan(*src);
  ASSERT_TRUE(plan) << render_all(plan.error());
  Json j = directives_to_json(plan->schedule);
  auto again = parse_directives(JsonSource::from_json(j), "");
  ASSERT_TRUE(again) << render_all(again.error());
  EXPECT_EQ(directives_to_json(*again), j);
  EXPECT_TRUE(plan->schedule[1].shard_optimizer);  // ZeRO-2 implies ZeRO-1
  EXPECT_EQ(plan->schedule[3].groups[1].size(), 2u);
}

TEST(Parser, FixedCostModelUnits) {
  std::string t =
      std::string(kHead) +
      "  ],\n  \"costmodel\": {\"kind\": \"fixed\", \"F\": 1, \"B\": 2, \"unit\": \"us\"}\n}\n";
  auto src = JsonSource::parse(t, "p.json");
  ASSERT_TRUE(src);
  auto plan = parse_plan(*src);
  ASSERT_TRUE(plan) << render_all(plan.error());
  EXPECT_EQ(plan->costmodel.f_ns, 1000);
  EXPECT_EQ(plan->costmodel.b_ns, 2000);
  EXPECT_EQ(plan->costmodel.bi_ns, 1000);  // B split in halves when BI/BW are not given
  EXPECT_EQ(plan->costmodel.bw_ns, 1000);
}

// JsonSource::find resolves RFC 6901 pointers like nlohmann's at(), returning null (not
// throwing) where at() would throw.
TEST(Parser, JsonSourceFindMatchesPointerSemantics) {
  auto src = JsonSource::parse(R"({"a": {"b/c": [10, 20, {"~k": true}], "": 5}, "n": null})", "p.json");
  ASSERT_TRUE(src);
  const std::vector<std::string> ptrs = {"",       "/a",        "/a/b~1c",   "/a/b~1c/0", "/a/b~1c/2/~0k",
                                         "/a/",    "/n",        "/a/b~1c/3", "/a/b~1c/-", "/a/b~1c/01",
                                         "/a/b~1c/x", "/zz",    "/a/b~1c/0/q", "a",       "/a/b~1c/-1"};
  for (const auto& p : ptrs) {
    const Json* viaNlohmann = nullptr;
    try {
      viaNlohmann = &src->root().at(Json::json_pointer(p));
    } catch (const std::exception&) {
    }
    EXPECT_EQ(src->find(p), viaNlohmann) << p;
  }
  EXPECT_NE(src->find("/a/b~1c/2/~0k"), nullptr);
  EXPECT_EQ(src->find("/a/b~1c/-"), nullptr);
}

// The GUI re-parses only "costmodel" when an edit changed nothing else (plan::parse_costmodel,
// gui/src/worker.cpp): it must read what parse_plan reads and say what parse_plan says.
namespace {
void expect_same_costmodel(const CostModelSpec& a, const CostModelSpec& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.f_ns, b.f_ns);
  EXPECT_EQ(a.b_ns, b.b_ns);
  EXPECT_EQ(a.bi_ns, b.bi_ns);
  EXPECT_EQ(a.bw_ns, b.bw_ns);
  EXPECT_EQ(a.comm_ns, b.comm_ns);
  EXPECT_EQ(a.profile, b.profile);
  EXPECT_EQ(a.options, b.options);
  EXPECT_EQ(a.pointer, b.pointer);
}
}  // namespace

TEST(Parser, CostModelAloneReadsWhatTheWholePlanReads) {
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(STRETTO_EXAMPLES)) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    auto src = JsonSource::load(e.path().string());
    ASSERT_TRUE(src) << render_all(src.error());
    auto plan = parse_plan(*src);
    ASSERT_TRUE(plan) << render_all(plan.error());
    auto cm = parse_costmodel(*src);
    ASSERT_TRUE(cm) << render_all(cm.error());
    expect_same_costmodel(*cm, plan->costmodel);
    ++checked;
  }
  EXPECT_GE(checked, 10);
  // Each section: fixed in every unit, analytic with options, profiled (a relative path made
  // relative to the plan's folder), and none.
  for (const char* section :
       {"{\"kind\": \"fixed\", \"F\": 1.5, \"B\": 3, \"BW\": 1, \"comm\": 0.25, \"unit\": \"us\"}",
        "{\"kind\": \"fixed\", \"F\": 2, \"B\": 4, \"unit\": \"s\"}",
        "{\"kind\": \"analytic\", \"gemm_efficiency\": 0.7, \"dispatch_us\": 6}",
        "{\"kind\": \"profiled\", \"profile\": \"tables/t.json\"}", ""}) {
    SCOPED_TRACE(section);
    std::string t = std::string(kHead) + "  ]" +
                    (*section ? std::string(",\n  \"costmodel\": ") + section : std::string()) +
                    "\n}\n";
    auto src = JsonSource::parse(t, "/plans/p.json");
    ASSERT_TRUE(src);
    auto plan = parse_plan(*src);
    ASSERT_TRUE(plan) << render_all(plan.error());
    auto cm = parse_costmodel(*src);
    ASSERT_TRUE(cm) << render_all(cm.error());
    expect_same_costmodel(*cm, plan->costmodel);
  }
}

TEST(Parser, CostModelAloneSaysWhatTheWholePlanSays) {
  // Sections the parser refuses, in a plan whose other sections parse: both parsers give the
  // same diagnostics (message, location, hint), and every one of them names /costmodel.
  for (const char* section :
       {"[1, 2]", "{\"kind\": \"quantum\"}", "{\"kind\": \"fixed\", \"B\": 2}",
        "{\"kind\": \"fixed\", \"F\": 1, \"B\": 2, \"unit\": \"parsec\"}",
        "{\"kind\": \"fixed\", \"F\": \"one\", \"B\": 2, \"Q\": 3}", "{\"kind\": \"profiled\"}",
        "{\"kind\": 7}"}) {
    SCOPED_TRACE(section);
    std::string t = std::string(kHead) + "  ],\n  \"costmodel\": " + section + "\n}\n";
    auto src = JsonSource::parse(t, "p.json");
    ASSERT_TRUE(src);
    auto plan = parse_plan(*src);
    ASSERT_FALSE(plan);
    auto cm = parse_costmodel(*src);
    ASSERT_FALSE(cm);
    EXPECT_EQ(render_all(cm.error()), render_all(plan.error()));
    ASSERT_FALSE(cm.error().empty());
    for (const Diagnostic& d : cm.error())
      EXPECT_EQ(d.loc.json_pointer.rfind("/costmodel", 0), 0u) << d.loc.json_pointer;
  }
}
