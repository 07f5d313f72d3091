// docs/plan.schema.json (the editors' schema) against the plans Stretto accepts: every example
// and every good test plan validates, and plans with an unknown key, a wrong type or a value
// out of range do not. The checker implements the draft-07 subset the schema uses: type,
// properties, additionalProperties (false), required, enum, const, minimum, maximum, items,
// oneOf and local $ref.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace fs = std::filesystem;
using Json = nlohmann::json;

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
