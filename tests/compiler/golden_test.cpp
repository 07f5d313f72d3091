// Golden files: every plan in tests/data/schedules/ok and examples/ compiles to the summary in
// its .expected file; every plan in tests/data/schedules/bad fails with the diagnostic text in
// its .expected file (message, location, caret line, hint). Run with STRETTO_UPDATE_GOLDEN=1
// to rewrite the .expected files after a deliberate change, then review the diff.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "stretto/compiler/compiler.h"

namespace fs = std::filesystem;
using namespace stretto;

namespace {

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Compiles `path`, naming it `display` in locations; returns summary or diagnostics text.
std::pair<bool, std::string> run(const fs::path& path, const std::string& display) {
  auto src = JsonSource::parse(read(path), display);
  if (!src) return {false, render_all(src.error())};
  auto plan = parse_plan(*src);
  if (!plan) return {false, render_all(plan.error())};
  auto cp = compile(*plan, &*src);
  if (!cp) return {false, render_all(cp.error())};
  return {true, summary_table(*cp, summarize(*cp))};
}

void check_dir(const fs::path& dir, const fs::path& expected_dir, const std::string& prefix,
               bool expect_ok) {
  const bool update = std::getenv("STRETTO_UPDATE_GOLDEN") != nullptr;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir;
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    auto [ok, text] = run(p, prefix + p.filename().string());
    EXPECT_EQ(ok, expect_ok) << text;
    fs::path exp = expected_dir / (p.stem().string() + ".expected");
    if (update) {
      std::ofstream(exp, std::ios::binary) << text;
      continue;
    }
    ASSERT_TRUE(fs::exists(exp)) << "missing " << exp << " (run with STRETTO_UPDATE_GOLDEN=1)";
    EXPECT_EQ(text, read(exp));
  }
}

}  // namespace

TEST(Golden, GoodPlansCompileToExpectedSummary) {
  fs::path d = fs::path(STRETTO_TEST_DATA) / "schedules" / "ok";
  check_dir(d, d, "ok/", true);
}

TEST(Golden, ExamplesCompileToExpectedSummary) {
  check_dir(STRETTO_EXAMPLES, fs::path(STRETTO_TEST_DATA) / "schedules" / "examples", "examples/",
            true);
}

TEST(Golden, BadPlansGiveExpectedDiagnostics) {
  fs::path d = fs::path(STRETTO_TEST_DATA) / "schedules" / "bad";
  check_dir(d, d, "bad/", false);
}
