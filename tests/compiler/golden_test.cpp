// Golden files: every plan in tests/data/schedules/ok and examples/ compiles to the summary in
// its .expected file; every plan in tests/data/schedules/bad fails with the diagnostic text in
// its .expected file (message, location, caret line, hint). A difference prints a line diff and
// fails; after a deliberate change run with STRETTO_UPDATE_GOLDEN=accept to rewrite the
// .expected files (tests/golden.h), then review the diff.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../golden.h"
#include "stretto/compiler/compiler.h"

namespace fs = std::filesystem;
using namespace stretto;
using namespace stretto::plan;
using namespace stretto::compiler;

namespace {

// Compiles `path`, naming it `display` in locations; returns summary or diagnostics text.
std::pair<bool, std::string> run(const fs::path& path, const std::string& display) {
  auto src = JsonSource::parse(stretto::testing::read_text(path), display);
  if (!src) return {false, render_all(src.error())};
  auto plan = parse_plan(*src);
  if (!plan) return {false, render_all(plan.error())};
  auto cp = compile(*plan, &*src);
  if (!cp) return {false, render_all(cp.error())};
  return {true, summary_table(*cp, summarize(*cp))};
}

void check_dir(const fs::path& dir, const fs::path& expected_dir, const std::string& prefix,
               bool expect_ok) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir;
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    auto [ok, text] = run(p, prefix + p.filename().string());
    EXPECT_EQ(ok, expect_ok) << text;
    stretto::testing::check_golden(expected_dir / (p.stem().string() + ".expected"), text);
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

// The refresh itself: a difference fails with its diff unless STRETTO_UPDATE_GOLDEN is
// "accept"; any other value writes nothing.
TEST(Golden, RefreshNeedsAccept) {
  const fs::path f = fs::path(::testing::TempDir()) / ("stretto_golden_" + std::to_string(::getpid()));
  std::ofstream(f, std::ios::binary) << "step 10\nbusy 4\n";
  const char* before = std::getenv("STRETTO_UPDATE_GOLDEN");
  const std::string saved = before ? before : "";
  for (const char* value : {"", "1"}) {
    if (*value)
      ::setenv("STRETTO_UPDATE_GOLDEN", value, 1);
    else
      ::unsetenv("STRETTO_UPDATE_GOLDEN");
    EXPECT_NONFATAL_FAILURE(stretto::testing::check_golden(f, "step 10\nbusy 5\n"),
                            "-2: busy 4\n+2: busy 5");
    EXPECT_EQ(stretto::testing::read_text(f), "step 10\nbusy 4\n") << "value '" << value << "'";
  }
  ::setenv("STRETTO_UPDATE_GOLDEN", "accept", 1);
  stretto::testing::check_golden(f, "step 10\nbusy 5\n");
  EXPECT_EQ(stretto::testing::read_text(f), "step 10\nbusy 5\n");
  if (before)
    ::setenv("STRETTO_UPDATE_GOLDEN", saved.c_str(), 1);
  else
    ::unsetenv("STRETTO_UPDATE_GOLDEN");
  fs::remove(f);
}
