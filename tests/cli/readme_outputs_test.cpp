// The outputs README.md quotes are what the commands print today: each ```sh block with one
// `build/stretto simulate|sweep|search` command followed by an output block is run as written
// (from a scratch folder, with the repository's examples; `--format table` added where the
// command has no --format, as on a terminal), and every quoted line must be a
// line of the output, except `...` lines and wall-clock figures (seconds, rates), which are
// masked on both sides. The GUI walk-through's figures (step, bubble, MFU, peak before and
// after 12 microbatches) are checked against `simulate` of the two plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_stretto.h"

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

const fs::path kRoot = fs::path(STRETTO_EXAMPLES).parent_path();

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// Wall-clock figures differ from run to run: "0.23 s", "(7749/s)", "(329.8 points/s)".
std::string masked(const std::string& line) {
  static const std::regex rate(R"(\(\d+(\.\d+)?( points)?/s\))"), secs(R"(\b\d+(\.\d+)? s\b)");
  return std::regex_replace(std::regex_replace(line, rate, "(RATE)"), secs, "T s");
}

struct Quoted {
  int line = 0;           // of the command in README.md
  std::string command;    // as written
  std::vector<std::string> output;
};

// Every ```sh block holding exactly one `build/stretto simulate|sweep|search` line, followed
// (after blank lines) by a plain ``` block.
std::vector<Quoted> quoted_outputs(const std::vector<std::string>& readme) {
  std::vector<Quoted> out;
  static const std::regex cmd(R"(^build/stretto (simulate|sweep|search) .*)");
  for (size_t i = 0; i + 1 < readme.size(); ++i) {
    if (readme[i] != "```sh") continue;
    size_t j = i + 1;
    std::vector<size_t> cmds;
    for (; j < readme.size() && readme[j] != "```"; ++j)
      if (std::regex_match(readme[j], cmd)) cmds.push_back(j);
    size_t open = j + 1;  // the output block's opening fence, after blank lines
    while (open < readme.size() && readme[open].empty()) ++open;
    if (cmds.size() != 1 || open >= readme.size() || readme[open] != "```") continue;
    Quoted q;
    q.line = static_cast<int>(cmds[0]) + 1;
    q.command = readme[cmds[0]];
    for (size_t k = open + 1; k < readme.size() && readme[k] != "```"; ++k) q.output.push_back(readme[k]);
    out.push_back(std::move(q));
    i = j;
  }
  return out;
}

const std::vector<std::string>& readme() {
  static const std::vector<std::string> r = lines_of(stretto_test::slurp(kRoot / "README.md"));
  return r;
}

}  // namespace

TEST(ReadmeOutputs, QuotedCommandOutputsAreWhatTheCommandsPrint) {
  const auto quoted = quoted_outputs(readme());
  ASSERT_EQ(quoted.size(), 3u) << "the README's simulate, sweep and search examples moved";
  const fs::path dir = stretto_test::tmpdir() / "readme";
  fs::create_directories(dir);
  fs::create_directory_symlink(kRoot / "examples", dir / "examples");
  for (const Quoted& q : quoted) {
    SCOPED_TRACE("README.md:" + std::to_string(q.line) + ": " + q.command);
    std::string args = q.command.substr(std::string("build/stretto ").size());
    // On a terminal the commands print tables; piped, JSON unless --format says otherwise.
    if (args.find("--format") == std::string::npos) args += " --format table";
    // stdout and stderr together, as a terminal shows them (sweep's progress line is stderr).
    const fs::path err = dir / "stderr.txt";
    std::ofstream(err).close();
    const std::string shell = "cd " + dir.string() + " && " + STRETTO_BINARY + " " + args + " 2>&1";
    const stretto_test::Result r = stretto_test::run_shell(shell, err);
    ASSERT_EQ(r.code, 0) << r.out;
    std::vector<std::string> got;
    for (const auto& l : lines_of(r.out)) got.push_back(masked(l));
    size_t checked = 0;
    for (const std::string& want : q.output) {
      if (want.rfind("...", 0) == 0) continue;
      EXPECT_NE(std::find(got.begin(), got.end(), masked(want)), got.end())
          << "quoted, not printed: " << want << "\nprinted:\n" << r.out;
      ++checked;
    }
    EXPECT_GE(checked, 5u);
    if (args.rfind("sweep ", 0) == 0) {
      // "Halving NVLink from 450 to 200 GB/s costs N % of the step at microbatch size 1."
      std::string text;
      for (const auto& l : readme()) text += l + "\n";
      std::smatch m;
      ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(Halving NVLink from 450 to 200 GB/s costs (\d+) %)")));
      auto step_at = [&](const std::string& gbps) {
        const std::regex row("^\\S+\\s+([0-9.]+) .*bandwidth_GBps=" + gbps + " microbatch_size=1$");
        for (const auto& l : lines_of(r.out))
          if (std::smatch x; std::regex_match(l, x, row)) return std::stod(x[1].str());
        ADD_FAILURE() << "no point at " << gbps << " GB/s";
        return 1.0;
      };
      const double cost = (step_at("200") / step_at("450") - 1) * 100;
      EXPECT_EQ(std::stoi(m[1].str()), static_cast<int>(std::lround(cost))) << cost;
    }
  }
}

// "the step grows from 201.8 to 279.9 ms (+38.7 %; ...), the bubble falls by 5 points
// (37.4 → 32.4 %), MFU rises from 35.2 to 38.0 %, the memory peak stays at 12.43 GiB" and the
// status line's "step 279.9 ms": the builder example with 8 and with 12 microbatches.
TEST(ReadmeOutputs, GuiWalkThroughFiguresAreTheSimulatedOnes) {
  std::string text;
  for (const auto& l : readme()) text += l + "\n";
  std::smatch m;
  const std::regex re(
      R"(the step grows from ([0-9.]+) to ([0-9.]+) ms \(\+([0-9.]+) %;[^)]*\), the bubble falls by ([0-9]+) points\s+\(([0-9.]+) → ([0-9.]+) %\), MFU rises from\s+([0-9.]+) to ([0-9.]+) %, the memory peak stays at ([0-9.]+) GiB)");
  ASSERT_TRUE(std::regex_search(text, m, re)) << "the README's GUI walk-through moved";
  const std::regex status(R"(`up to date - step ([0-9.]+) ms`)");
  std::smatch s;
  ASSERT_TRUE(std::regex_search(text, s, status));
  auto sim = [&](int microbatches) {
    Json p = Json::parse(std::ifstream(kRoot / "examples/gpt_pp4_dp2_1f1b_builder.json"));
    p["schedule"]["microbatches"] = microbatches;
    const fs::path f = stretto_test::write_file("readme_gui_" + std::to_string(microbatches) + ".json", p.dump());
    const fs::path err = stretto_test::tmpdir() / "gui_err.txt";
    const auto r = stretto_test::run_shell(
        std::string(STRETTO_BINARY) + " simulate " + f.string() + " --format json 2>" + err.string(), err);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? Json::parse(r.out) : Json::object();
  };
  const Json a = sim(8), b = sim(12);
  ASSERT_TRUE(a.contains("step_time_ms") && b.contains("step_time_ms"));
  auto fixed = [](double v, int decimals) {
    std::ostringstream o;
    o.setf(std::ios::fixed);
    o.precision(decimals);
    o << v;
    return o.str();
  };
  const double sa = a["step_time_ms"].get<double>(), sb = b["step_time_ms"].get<double>();
  EXPECT_EQ(m[1].str(), fixed(sa, 1));
  EXPECT_EQ(m[2].str(), fixed(sb, 1));
  EXPECT_EQ(s[1].str(), fixed(sb, 1));
  EXPECT_EQ(m[3].str(), fixed((sb - sa) / sa * 100, 1));
  const double ba = a["bubble_ratio"].get<double>() * 100, bb = b["bubble_ratio"].get<double>() * 100;
  EXPECT_EQ(m[5].str(), fixed(ba, 1));
  EXPECT_EQ(m[6].str(), fixed(bb, 1));
  EXPECT_EQ(m[4].str(), fixed(ba - bb, 0));
  EXPECT_EQ(m[7].str(), fixed(a["mfu"].get<double>() * 100, 1));
  EXPECT_EQ(m[8].str(), fixed(b["mfu"].get<double>() * 100, 1));
  auto peak_gib = [](const Json& r) {
    double p = 0;
    for (const auto& d : r["devices"]) p = std::max(p, d["peak_memory_bytes"].get<double>());
    return p / (1024.0 * 1024 * 1024);
  };
  EXPECT_EQ(m[9].str(), fixed(peak_gib(a), 2));
  EXPECT_EQ(m[9].str(), fixed(peak_gib(b), 2));
}
