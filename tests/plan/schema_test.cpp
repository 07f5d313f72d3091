// docs/plan.schema.json (the editors' schema) against the plans Stretto accepts: every example
// and every good test plan validates, and plans with an unknown key, a wrong type or a value
// out of range do not. The checker implements the draft-07 subset the schema uses: type,
// properties, additionalProperties (false), required, enum, const, minimum, maximum, items,
// oneOf and local $ref.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <fstream>
#include <cstdlib>
#include <regex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "stretto/costmodel/analytic.h"
#include "stretto/pipelines/builders.h"
#include "stretto/plan/plan.h"
#include "stretto/plan/resolved.h"
#include "stretto/plan/schema.h"

namespace fs = std::filesystem;
using Json = nlohmann::json;  // stretto::plan::Json

namespace {

Json load(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return Json::parse(ss.str());
}

class Checker {
 public:
  explicit Checker(Json schema) : root_(std::move(schema)) {}
  // Empty string = valid; otherwise the first problem with its JSON pointer.
  std::string check(const Json& v) const { return check(root_, v, ""); }

 private:
  Json root_;

  const Json& resolve(const Json& s) const {
    if (!s.contains("$ref")) return s;
    const std::string ref = s["$ref"].get<std::string>();  // "#/definitions/x"
    return resolve(root_.at(Json::json_pointer(ref.substr(1))));
  }
  static bool type_ok(const std::string& t, const Json& v) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "integer") return v.is_number_integer();
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    return false;
  }
  std::string check(const Json& schema, const Json& v, const std::string& at) const {
    const Json& s = resolve(schema);
    if (s.contains("type") && !type_ok(s["type"].get<std::string>(), v))
      return at + ": not a " + s["type"].get<std::string>();
    if (s.contains("const") && v != s["const"]) return at + ": must be " + s["const"].dump();
    if (s.contains("enum")) {
      bool found = false;
      for (const Json& e : s["enum"]) found |= e == v;
      if (!found) return at + ": " + v.dump() + " not one of " + s["enum"].dump();
    }
    if (v.is_number()) {
      if (s.contains("minimum") && v.get<double>() < s["minimum"].get<double>())
        return at + ": below the minimum";
      if (s.contains("maximum") && v.get<double>() > s["maximum"].get<double>())
        return at + ": above the maximum";
    }
    if (v.is_object()) {
      if (s.contains("required"))
        for (const Json& k : s["required"])
          if (!v.contains(k.get<std::string>())) return at + ": missing " + k.get<std::string>();
      for (const auto& [k, x] : v.items()) {
        if (s.contains("properties") && s["properties"].contains(k)) {
          if (auto e = check(s["properties"][k], x, at + "/" + k); !e.empty()) return e;
        } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
          return at + ": unknown key " + k;
        }
      }
    }
    if (v.is_array() && s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i)
        if (auto e = check(s["items"], v[i], at + "/" + std::to_string(i)); !e.empty()) return e;
    if (s.contains("oneOf")) {
      int matches = 0;
      std::string first;
      for (const Json& alt : s["oneOf"]) {
        std::string e = check(alt, v, at);
        if (e.empty())
          ++matches;
        else if (first.empty())
          first = e;
      }
      if (matches != 1)
        return matches == 0 ? first : at + ": matches " + std::to_string(matches) + " alternatives";
    }
    return {};
  }
};

Checker schema() {
  return Checker(load(fs::path(STRETTO_EXAMPLES) / ".." / "docs" / "plan.schema.json"));
}

}  // namespace

TEST(PlanSchema, EveryExampleAndGoodPlanValidates) {
  const Checker c = schema();
  size_t n = 0;
  for (const fs::path& dir :
       {fs::path(STRETTO_EXAMPLES), fs::path(STRETTO_TEST_DATA) / "schedules/ok",
        fs::path(STRETTO_TEST_DATA) / "fidelity", fs::path(STRETTO_TEST_DATA) / "backend"})
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (e.path().extension() != ".json") continue;
      // examples/sweeps holds sweep specs (docs/sweeps.md: "base" + "axes"), not plans.
      if (e.path().parent_path().filename() == "sweeps") continue;
      SCOPED_TRACE(e.path().string());
      EXPECT_EQ(c.check(load(e.path())), "");
      ++n;
    }
  EXPECT_GE(n, 40u);
}

TEST(PlanSchema, RejectsWhatTheParserRejects) {
  const Checker c = schema();
  Json ok = load(fs::path(STRETTO_EXAMPLES) / "layout_llama7b_pp4_dp4_interleaved.json");
  ASSERT_EQ(c.check(ok), "");
  Json bad = ok;
  bad["model"]["hiden"] = 1;
  EXPECT_NE(c.check(bad).find("unknown key hiden"), std::string::npos);
  bad = ok;
  bad["schedule"]["layout"]["zero"] = 4;
  EXPECT_NE(c.check(bad).find("/schedule"), std::string::npos);
  bad = ok;
  bad["cluster"]["preset"] = "h100";
  EXPECT_NE(c.check(bad), "");
  bad = ok;
  bad["schedule"] = Json::array({{{"op", "place"}, {"filter", {{"PP", 0}}}, {"devics", {0}}}});
  EXPECT_NE(c.check(bad), "");
  bad = ok;
  bad.erase("model");
  EXPECT_NE(c.check(bad).find("missing model"), std::string::npos);
}

// ---- the schema table (plan/schema.h) -------------------------------------------------------

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Whether `ds` holds a range or type error of the value at `pointer`.
bool range_error(const stretto::Diagnostics& ds, const std::string& pointer) {
  for (const auto& d : ds)
    if (d.loc.json_pointer == pointer &&
        (d.message.find("out of range") != std::string::npos ||
         d.message.find("must be an integer in") != std::string::npos))
      return true;
  return false;
}

// A small plan holding every section the parser reads, and where each section sits in it.
Json plan_with(const std::string& section) {
  Json p = {{"model",
             {{"family", "transformer"}, {"layers", 4}, {"hidden", 64}, {"heads", 4},
              {"ffn_hidden", 128}, {"vocab", 100}, {"seq_len", 16},
              {"moe", {{"experts", 4}, {"expert_ffn_hidden", 32}}}}},
            {"cluster", {{"preset", "h100-sxm"}, {"intra_node", {{"bandwidth_GBps", 1}}}}},
            {"schedule", {{"builder", "1f1b"}, {"microbatches", 2}, {"layout", {{"pp", 1}}}}}};
  if (section == "replicate")
    p["schedule"] = Json::array({{{"op", "replicate"}, {"filter", Json::object()},
                                  {"devices", {0}}, {"shard_grads", true},
                                  {"shard_params", true}}});
  if (section == "split")
    p["schedule"] = Json::array({{{"op", "split"}, {"filter", Json::object()},
                                  {"num_microbatches", 2}}});
  if (section == "costmodel") p["costmodel"] = {{"kind", "fixed"}, {"F", 1}, {"B", 2}};
  return p;
}

std::string section_pointer(const std::string& section) {
  if (section == "model") return "/model";
  if (section == "moe") return "/model/moe";
  if (section == "cluster") return "/cluster";
  if (section == "link") return "/cluster/intra_node";
  if (section == "builder") return "/schedule";
  if (section == "layout") return "/schedule/layout";
  if (section == "replicate" || section == "split") return "/schedule/0";
  if (section == "costmodel") return "/costmodel";
  return "";
}

// Values on and around a key's range: its ends, and one step outside each.
std::vector<double> probes(const stretto::plan::PlanKey& k) {
  const bool integral =
      k.type == stretto::plan::KeyType::kInteger || k.type == stretto::plan::KeyType::kOther;
  std::vector<double> v;
  for (double end : {k.min, k.max}) {
    if (!std::isfinite(end)) continue;
    v.push_back(end);
    const double step = integral ? 1 : std::max(1e-9, std::abs(end) * 1e-6);
    v.push_back(end - step);
    v.push_back(end + step);
  }
  return v;
}

Json number_json(const stretto::plan::PlanKey& k, double x) {
  const bool integral =
      k.type == stretto::plan::KeyType::kInteger || k.type == stretto::plan::KeyType::kOther;
  return integral ? Json(static_cast<int64_t>(x)) : Json(x);
}

}  // namespace

TEST(PlanSchema, CheckedInFileIsGeneratedFromTheTable) {
  const fs::path path = fs::path(STRETTO_EXAMPLES) / ".." / "docs" / "plan.schema.json";
  const char* update = std::getenv("STRETTO_UPDATE_GOLDEN");
  if (update && std::string(update) == "accept") {
    std::ofstream(path) << stretto::plan::plan_json_schema_text();  // as `stretto schema` writes it
  }
  const std::string file = read_text(path);
  EXPECT_TRUE(file == stretto::plan::plan_json_schema_text())
      << "docs/plan.schema.json differs from the schema table (plan/src/schema.cpp); "
         "regenerate it: build/stretto schema > docs/plan.schema.json";
}

// docs/plan-format.md's key tables are the table's: the text between each
// `<!-- schema:S -->` and `<!-- /schema:S -->` is `stretto schema --format markdown`'s table of
// S, and every section has one. STRETTO_UPDATE_GOLDEN=accept regenerates them in place.
TEST(PlanSchema, DocKeyTablesAreGeneratedFromTheTable) {
  const fs::path path = fs::path(STRETTO_EXAMPLES) / ".." / "docs" / "plan-format.md";
  const std::string file = read_text(path);
  std::string error;
  const std::string spliced = stretto::plan::splice_schema_tables(file, &error);
  ASSERT_TRUE(error.empty()) << "docs/plan-format.md: " << error;
  const char* update = std::getenv("STRETTO_UPDATE_GOLDEN");
  if (update && std::string(update) == "accept") std::ofstream(path) << spliced;
  EXPECT_TRUE(read_text(path) == spliced)
      << "docs/plan-format.md's key tables differ from the schema table (plan/src/schema.cpp); "
         "regenerate them: STRETTO_UPDATE_GOLDEN=accept build/tests/plan_test "
         "--gtest_filter='PlanSchema.DocKeyTablesAreGeneratedFromTheTable'";
}

// The markers are checked: an unknown section, an unclosed one, or a missing one is refused.
TEST(PlanSchema, DocMarkersAreChecked) {
  std::string all = stretto::plan::plan_schema_markdown(), error;
  EXPECT_EQ(stretto::plan::splice_schema_tables(all, &error), all);
  EXPECT_EQ(error, "");
  for (const std::string& bad :
       {all + "<!-- schema:nosuch -->\n<!-- /schema:nosuch -->\n",
        all + "<!-- schema:model -->\nno end\n",
        all.substr(all.find("<!-- schema:model -->")),
        all + "<!-- /schema:model -->\n"}) {
    error.clear();
    EXPECT_EQ(stretto::plan::splice_schema_tables(bad, &error), "");
    EXPECT_NE(error, "") << bad.substr(bad.size() > 200 ? bad.size() - 200 : 0);
  }
  // A row shows the key's facts: range, default, resolver, doc string.
  const std::string layout = stretto::plan::plan_schema_markdown_table("layout");
  EXPECT_NE(layout.find("| `tp` | integer | 1 - 1024 | `1` | tensor-parallel degree"),
            std::string::npos)
      << layout;
  const std::string cluster = stretto::plan::plan_schema_markdown_table("cluster");
  EXPECT_NE(cluster.find("| `peak_tflops` | number | 1e-6 - 1e7 | preset |"), std::string::npos)
      << cluster;
}

// The parser's ranges are the table's, key by key: a value in the table's range draws no
// range error, one outside draws one; and the value an editor clamps to (PlanKey::clamp, what
// the GUI does) is one the parser takes.
TEST(PlanSchema, ParserRangesAreTheTables) {
  size_t checked = 0;
  for (const stretto::plan::PlanKey& k : stretto::plan::plan_schema()) {
    const std::string section(k.section);
    const std::string at = section_pointer(section);
    if (at.empty() || k.applies == "synthetic") continue;
    if (section == "costmodel" && k.applies != "fixed") continue;  // the cost model's options
    if (!k.numeric() && !(k.type == stretto::plan::KeyType::kOther && std::isfinite(k.min)))
      continue;
    for (double x : probes(k)) {
      for (double v : {x, k.clamp(x)}) {
        Json p = plan_with(section);
        const std::string ptr = at + "/" + std::string(k.key);
        p[Json::json_pointer(ptr)] = number_json(k, v);
        const auto src = stretto::plan::JsonSource::from_json(p, "plan.json");
        auto parsed = stretto::plan::parse_plan(src);
        const stretto::Diagnostics ds = parsed ? stretto::Diagnostics{} : parsed.error();
        SCOPED_TRACE(ptr + " = " + number_json(k, v).dump());
        EXPECT_EQ(range_error(ds, ptr), !k.in_range(v));
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 200u);
}

// The analytic cost model's option ranges are the table's.
TEST(PlanSchema, CostModelOptionRangesAreTheTables) {
  stretto::plan::ClusterSpec cluster;
  cluster.device.kind = "h100-sxm";
  cluster.device.sms = 132;
  cluster.intra_node.bandwidth_GBps = 450;
  cluster.inter_node.bandwidth_GBps = 50;
  size_t checked = 0;
  for (const stretto::plan::PlanKey& k : stretto::plan::plan_schema()) {
    if (k.section != "costmodel" || k.applies == "fixed") continue;
    if (!k.numeric() && !(k.type == stretto::plan::KeyType::kOther && std::isfinite(k.min)))
      continue;
    for (double x : probes(k)) {
      const Json v =
          k.type == stretto::plan::KeyType::kInteger ? Json(static_cast<int64_t>(x)) : Json(x);
      SCOPED_TRACE(std::string(k.key) + " = " + v.dump());
      auto p = stretto::cost::parse_analytic_params(Json{{std::string(k.key), v}}, cluster,
                                                    "/costmodel", "plan.json");
      EXPECT_EQ(p.has_value(), k.in_range(x));
      ++checked;
    }
  }
  EXPECT_GE(checked, 60u);
}

// Every key the parser accepts is in the table and every table key is accepted: an unknown
// key is refused with the table's keys in the hint.
TEST(PlanSchema, UnknownKeysAreRefusedWithTheTablesKeys) {
  for (const std::string section : {"model", "moe", "cluster", "link", "builder", "layout"}) {
    Json p = plan_with(section);
    const std::string at = section_pointer(section);
    p[Json::json_pointer(at + "/no_such_key_xyz")] = 1;
    const auto src = stretto::plan::JsonSource::from_json(p, "plan.json");
    auto parsed = stretto::plan::parse_plan(src);
    ASSERT_FALSE(parsed) << section;
    std::string hint;
    for (const auto& d : parsed.error())
      if (d.loc.json_pointer == at + "/no_such_key_xyz") hint = d.hint;
    for (const std::string& k : stretto::plan::section_keys(section))
      EXPECT_NE(hint.find(k), std::string::npos) << section << ": " << k << " not in " << hint;
  }
}

// An example plan as describe resolves it: its source, the parsed plan and its resolved
// values (the builder's directives expanded); null, with the failure reported, when it does
// not parse.
struct ResolvedExample {
  stretto::plan::JsonSource src;
  stretto::plan::Plan plan;
  stretto::plan::ResolvedPlan rp;
};
std::unique_ptr<ResolvedExample> resolve_example(const std::string& name) {
  auto src = stretto::plan::JsonSource::load((fs::path(STRETTO_EXAMPLES) / name).string());
  if (!src) {
    ADD_FAILURE() << name << ": " << stretto::render_all(src.error());
    return nullptr;
  }
  auto plan = stretto::plan::parse_plan(*src);
  if (!plan) {
    ADD_FAILURE() << name << ": " << stretto::render_all(plan.error());
    return nullptr;
  }
  auto ex = std::unique_ptr<ResolvedExample>(new ResolvedExample{std::move(*src), std::move(*plan), {}});
  std::vector<stretto::plan::Directive> ds = ex->plan.schedule;
  if (ex->plan.builder) {
    auto e = stretto::pipelines::expand_builder(*ex->plan.builder);
    if (!e) {
      ADD_FAILURE() << name << ": " << stretto::render_all(e.error());
      return nullptr;
    }
    ds = *e;
  }
  ex->rp = stretto::plan::resolve_structure(ex->plan, ds, &ex->src);
  return ex;
}

// Every path a resolved value names is a key of the table, so that an editor writing it
// there writes a key the parser takes.
TEST(PlanSchema, ResolvedPathsAreSchemaKeys) {
  size_t n = 0;
  for (const char* name : {"layout_llama7b_pp4_dp4_interleaved.json", "gpt_pp4_dp2_1f1b.json"}) {
    const std::unique_ptr<ResolvedExample> ex = resolve_example(name);
    ASSERT_TRUE(ex) << name;
    const auto& src = ex->src;
    const stretto::plan::ResolvedPlan& rp = ex->rp;
    for (const auto& f : rp.fields) {
      if (f.path.empty()) continue;
      EXPECT_NE(stretto::plan::plan_key_at(src.root(), f.path), nullptr)
          << name << ": " << f.name << " at " << f.path;
      ++n;
    }
  }
  EXPECT_GE(n, 20u);
}

// Every model key that applies to a plan's model family is a resolved value at its own path,
// so describe, the GUI's Parameters tab, the sweep's base and Python's Plan.resolved() show
// it: a dense transformer, an MoE transformer (the moe section's keys too) and a synthetic
// chain. Not fields: the model's free-text name, its family (the builder's "family" field is
// the schedule's), and the moe object itself (its keys are).
TEST(PlanSchema, EveryModelKeyIsAResolvedValue) {
  size_t checked = 0;
  for (const char* name : {"gpt_pp4_dp2_1f1b.json", "piper_qwen3_moe_pp2_dp2_ep2.json",
                           "cpu_synthetic_pp4_zbh1.json"}) {
    const std::unique_ptr<ResolvedExample> ex = resolve_example(name);
    ASSERT_TRUE(ex) << name;
    const auto& src = ex->src;
    const auto& plan = ex->plan;
    const stretto::plan::ResolvedPlan& rp = ex->rp;
    const bool synthetic = plan.model.family == stretto::plan::ModelSpec::Family::kSynthetic;
    const std::string family = synthetic ? "synthetic" : "transformer";
    std::vector<std::pair<std::string, std::string>> keys;  // (path, key)
    for (const std::string& k : stretto::plan::section_keys("model")) {
      const stretto::plan::PlanKey& pk = stretto::plan::schema_key("model", k);
      if (!pk.applies.empty() && pk.applies != family) continue;
      if (k == "name" || k == "family" || k == "moe") continue;
      keys.emplace_back("/model/" + k, k);
    }
    if (plan.model.moe) {
      for (const std::string& k : stretto::plan::section_keys("moe"))
        keys.emplace_back("/model/moe/" + k, k);
    }
    for (const auto& [path, key] : keys) {
      const stretto::plan::ResolvedField* f = rp.field(key);
      ASSERT_NE(f, nullptr) << name << ": no resolved value " << key;
      EXPECT_EQ(f->path, path) << name << ": " << key;
      EXPECT_FALSE(f->value.is_null()) << name << ": " << key;
      // A key the plan writes resolves to what it writes, sourced `plan`.
      if (const Json* w = src.find(path)) {
        EXPECT_EQ(f->source, stretto::plan::ValueSource::kPlan) << name << ": " << key;
        if (!w->is_array()) {
          EXPECT_EQ(f->value, *w) << name << ": " << key;
        }
      }
      ++checked;
    }
  }
  // 18 keys of each transformer, 9 of the moe section, 8 of the synthetic chain.
  EXPECT_EQ(checked, 18u + 18u + 9u + 8u);
}

TEST(PlanSchema, KeysAtPointers) {
  const Json p = plan_with("replicate");
  const stretto::plan::PlanKey* k = stretto::plan::plan_key_at(p, "/schedule/0/prefetch");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->section, "replicate");
  EXPECT_EQ(k->max, 1e6);
  EXPECT_EQ(stretto::plan::plan_key_at(p, "/cluster/inter_node/latency_us")->section, "link");
  EXPECT_EQ(stretto::plan::plan_key_at(plan_with("model"), "/schedule/layout/tp")->max, 1024);
  EXPECT_EQ(stretto::plan::plan_key_at(p, "/schedule/1/prefetch"), nullptr);
  EXPECT_EQ(stretto::plan::plan_key_at(p, "/model/nope"), nullptr);
  EXPECT_EQ(stretto::plan::directive_template("split"), (Json{{"op", "split"},
                                                              {"filter", Json::object()},
                                                              {"dim_name", "MB"},
                                                              {"num_microbatches", 4}}));
}

// Plan JSON has one reader, plan/ (its parser, the schema table, the resolved plan): no other
// library or binary reads a plan key out of a JSON document. This scans the sources for reads
// of the keys only a plan has (a subscript that is not an assignment, .at/.value/.contains/
// .find/.count, or a JSON pointer that is not written to). Writes (an emitted point's edits,
// an editor's change) go in by JSON pointer at keys the table names.
TEST(PlanSchema, NoRawReadsOfPlanJsonOutsidePlan) {
  const std::vector<std::string> keys = {
      "model",          "cluster",      "costmodel",        "schedule",
      "optimizer",      "layout",       "builder",          "moe",
      "intra_node",     "inter_node",   "dcn",              "microbatches",
      "microbatch_size", "devices_per_node", "pp_regions",   "bucket_size",
      "num_microbatches", "shard_params", "shard_grads",     "shard_optimizer",
      "reshard_after_forward", "seq_len", "ffn_hidden",      "hidden",
      "heads",          "kv_heads",     "layers",           "preset",
      "nodes",          "expert_ffn_hidden", "vocab"};
  std::string alt;
  for (const auto& k : keys) alt += (alt.empty() ? "" : "|") + k;
  const std::regex read("\\[\"(" + alt + ")\"\\](?!\\s*=($|[^=]))|\\.(at|value|contains|find|count)\\(\"/?(" +
                        alt + ")\"|json_pointer\\(\"/(" + alt + ")[^\"]*\"\\)\\](?!\\s*=($|[^=]))|" +
                        "find\\(\"/(" + alt + ")");
  // Reads of other documents that share a key name, each with its reason.
  const std::vector<std::pair<std::string, std::string>> allowed = {
      // a sweep point's axis values (docs/sweeps.md), not plan JSON
      {"explore/src/spec.cpp", "params.contains(\"microbatch_size\")"},
  };
  const fs::path root = fs::path(STRETTO_EXAMPLES) / "..";
  std::vector<std::string> found;
  size_t files = 0;
  for (const char* dir : {"explore", "cli", "gui", "sim", "python", "backend", "costmodel",
                          "compiler", "pipelines", "traces", "engine", "support"}) {
    if (!fs::exists(root / dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".h") continue;
      ++files;
      std::ifstream f(e.path());
      std::string line;
      const std::string rel = fs::relative(e.path(), root).generic_string();
      for (int n = 1; std::getline(f, line); ++n) {
        if (!std::regex_search(line, read)) continue;
        bool ok = false;
        for (const auto& [file, text] : allowed)
          ok |= rel == file && line.find(text) != std::string::npos;
        if (!ok) found.push_back(rel + ":" + std::to_string(n) + ": " + line);
      }
    }
  }
  EXPECT_GE(files, 100u);
  std::string all;
  for (const auto& s : found) all += s + "\n";
  EXPECT_TRUE(found.empty()) << "plan JSON read outside plan/ (use parse_plan, the schema table "
                                "or the resolved plan):\n"
                             << all;
}

// A synthetic model refuses every model key the table says applies to transformers only, at
// the key's own pointer: none is silently accepted and ignored (gated_mlp and tie_embeddings
// were, until the table said they apply to transformers).
TEST(PlanSchema, ASyntheticModelRefusesEveryTransformerKey) {
  const auto base =
      stretto::plan::JsonSource::load((fs::path(STRETTO_EXAMPLES) / "cpu_synthetic_pp4_zbh1.json").string());
  ASSERT_TRUE(base);
  ASSERT_TRUE(stretto::plan::parse_plan(*base));
  size_t checked = 0;
  for (const std::string& k : stretto::plan::section_keys("model")) {
    if (stretto::plan::schema_key("model", k).applies != "transformer") continue;
    Json p = Json::parse(base->text());
    p["model"][k] = true;  // the refusal is for the key's presence, whatever its value
    const auto src = stretto::plan::JsonSource::from_json(p, "plan.json");
    auto parsed = stretto::plan::parse_plan(src);
    ASSERT_FALSE(parsed) << k;
    bool located = false;
    for (const stretto::Diagnostic& d : parsed.error())
      located |= d.loc.json_pointer == "/model/" + k &&
                 d.message.find("does not apply to a synthetic model") != std::string::npos;
    EXPECT_TRUE(located) << k << ": " << stretto::render_all(parsed.error());
    ++checked;
  }
  EXPECT_GE(checked, 15u);
}
