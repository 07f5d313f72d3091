// Measurements the user pages quote from result files kept in the repository equal those files,
// rounded as the pages round them: docs/validation.md's one-GPU loop (bench/gpu/results). A
// measurement cannot be re-taken by CI, but what the page says of it can be checked against
// what the machine wrote.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kRoot(STRETTO_SOURCE_DIR);

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The page's text with every run of white space (line breaks included) as one space.
std::string flat(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n' || c == '\t';
    if (space && !out.empty() && out.back() == ' ') continue;
    out += space ? ' ' : c;
  }
  return out;
}

std::string fixed1(double v, bool sign = false) {
  char buf[32];
  std::snprintf(buf, sizeof buf, sign ? "%+.1f" : "%.1f", v);
  return buf;
}

json result(const char* name) {
  return json::parse(read(kRoot / "bench/gpu/results" / name));
}

void expect_quoted(const std::string& page, const std::string& text) {
  EXPECT_NE(page.find(text), std::string::npos) << "docs/validation.md does not say: " << text;
}

}  // namespace

// "Step time on one GPU": each plan's row, and the summary, from h200_validate_profile_from.json;
// the re-run and the separately profiled run from their files.
TEST(DocsFigures, TheOneGpuLoopIsWhatItsResultFilesSay) {
  const std::string page = flat(read(kRoot / "docs/validation.md"));
  const json v = result("h200_validate_profile_from.json");
  ASSERT_EQ(v["plans"].size(), 5u);
  for (const json& p : v["plans"])
    expect_quoted(page, "| " + fs::path(p["plan"].get<std::string>()).stem().string() + " | " +
                            fixed1(p["predicted_step_ms"]) + " | " +
                            fixed1(p["measured_step_ms"]) + " | " +
                            fixed1(p["measured_step_std_ms"]) + " | " +
                            fixed1(p["step_err_pct"], true) + " % |");
  expect_quoted(page, "Mean |error| " + fixed1(v["mean_abs_step_err_pct"]) + " %, worst " +
                          fixed1(v["worst_abs_step_err_pct"]) + " %, Kendall's tau " +
                          fixed1(v["kendall_tau"]) + " (" +
                          std::to_string(v["plans"][0]["measured_steps"].get<int>()) +
                          " measured steps per plan)");

  const json r = result("h200_validate_profile_from_rerun.json");
  double least = -1e9, most = 1e9, std_ms = 0, on_ms = 0;
  for (const json& p : r["plans"]) {
    least = std::max(least, p["step_err_pct"].get<double>());
    most = std::min(most, p["step_err_pct"].get<double>());
    if (p["measured_step_std_ms"].get<double>() > std_ms) {
      std_ms = p["measured_step_std_ms"];
      on_ms = p["measured_step_ms"];
    }
  }
  expect_quoted(page, "errors " + fixed1(least) + " to " + fixed1(most) + " %, mean |error| " +
                          fixed1(r["mean_abs_step_err_pct"]) + " %, tau " +
                          fixed1(r["kendall_tau"]) + ", every plan predicted fast, step std up to " +
                          std::to_string(std::lround(std_ms)) + " ms on " +
                          std::to_string(std::lround(on_ms)) + " ms");
  EXPECT_LT(least, 0);  // "every plan predicted fast"

  const json s = result("h200_validate_separate_profile.json");
  expect_quoted(page, "gave mean |error| " + fixed1(s["mean_abs_step_err_pct"]) + " %, worst " +
                          fixed1(s["worst_abs_step_err_pct"]) + " %, every plan predicted fast");
  for (const json& p : s["plans"]) EXPECT_LT(p["step_err_pct"].get<double>(), 0) << p["plan"];
}
