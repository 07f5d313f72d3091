// The `stretto` binary as a user runs it: exit codes (0 ok, 2 bad input), --help, --version,
// JSON output fields (DESIGN.md §4), byte-identical JSON across runs (except wall time).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct Run {
  int code;
  std::string out;
};

Run sh(const std::string& args) {
  std::string cmd = std::string(STRETTO_BINARY) + " " + args + " 2>/tmp/stretto_cli_test_err";
  FILE* f = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  int status = pclose(f);
  return {WEXITSTATUS(status), out};
}

std::string example(const char* name) {
  return std::string(STRETTO_EXAMPLES) + "/" + name;
}
std::string bad(const char* name) {
  return std::string(STRETTO_TEST_DATA) + "/schedules/bad/" + name;
}

}  // namespace

TEST(Cli, HelpAndVersion) {
  auto h = sh("--help");
  EXPECT_EQ(h.code, 0);
  for (const char* c : {"compile", "simulate", "build-schedule", "import", "export"})
    EXPECT_NE(h.out.find(c), std::string::npos) << c;
  auto v = sh("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("stretto "), std::string::npos);
  EXPECT_EQ(sh("simulate --help").code, 0);
}

TEST(Cli, ExitCodes) {
  EXPECT_EQ(sh("compile " + example("gpt_pp4_dp2_1f1b.json") + " --format json").code, 0);
  EXPECT_EQ(sh("compile " + bad("unknown_key.json")).code, 2);
  EXPECT_EQ(sh("compile " + bad("syntax_error.json")).code, 2);
  EXPECT_EQ(sh("simulate " + bad("deadlock_cross_device_inversion.json")).code, 2);
  EXPECT_EQ(sh("compile /nonexistent/plan.json").code, 2);
  EXPECT_EQ(sh("no-such-command").code, 2);
  EXPECT_EQ(sh("simulate").code, 2);  // missing PLAN
}

TEST(Cli, SimulateJsonHasContractFieldsAndIsDeterministic) {
  auto a = sh("simulate " + example("piper_qwen3_moe_pp2_dp2_ep2.json") + " --format json");
  auto b = sh("simulate " + example("piper_qwen3_moe_pp2_dp2_ep2.json") + " --format json");
  ASSERT_EQ(a.code, 0);
  auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  for (const char* k : {"step_time_ms", "bubble_ratio", "exposed_comm_ms", "mfu", "events",
                        "sim_wall_ms", "devices"})
    EXPECT_TRUE(ja.contains(k)) << k;
  for (const auto& d : ja["devices"])
    for (const char* k : {"id", "busy_ms", "bubble_ms", "bubble_ratio", "exposed_comm_ms",
                          "peak_memory_bytes", "memory_breakdown"})
      EXPECT_TRUE(d.contains(k)) << k;
  ja.erase("sim_wall_ms");
  jb.erase("sim_wall_ms");
  EXPECT_EQ(ja.dump(), jb.dump());
}

TEST(Cli, CompileDotAndTraceFiles) {
  auto r = sh("compile " + example("piper_qwen3_moe_pp2_dp2_ep2.json") +
              " --format json --dot /tmp/stretto_cli_test.dot");
  ASSERT_EQ(r.code, 0);
  FILE* f = fopen("/tmp/stretto_cli_test.dot", "r");
  ASSERT_NE(f, nullptr);
  char head[16] = {};
  EXPECT_EQ(fread(head, 1, 7, f), 7u);
  fclose(f);
  EXPECT_EQ(std::string(head), "digraph");
  // The size guard refuses a large DAG with exit code 2.
  EXPECT_EQ(sh("compile " + example("megatron_gpt13b_tp8_pp2_dp2.json") + " --dot /tmp/x.dot").code,
            2);
  auto t =
      sh("export chrome " + example("gpt_pp4_dp2_1f1b.json") + " -o /tmp/stretto_cli_trace.json");
  EXPECT_EQ(t.code, 0);
}

// replay, profile and validate run in build/stretto-backend (it links LibTorch); `stretto` lists
// them, hands them over with their arguments and exit codes, and does not link LibTorch itself
// (whose load took ~0.8 s of every command).
TEST(Cli, BackendCommandsRunInStrettoBackend) {
  const std::filesystem::path self = STRETTO_BINARY;
  if (!std::filesystem::exists(self.parent_path() / "stretto-backend"))
    GTEST_SKIP() << "built without the LibTorch backend";
  auto h = sh("--help");
  for (const char* c : {"replay", "profile", "validate"})
    EXPECT_NE(h.out.find(c), std::string::npos) << c;
  auto r = sh("replay --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--iterations"), std::string::npos) << r.out;  // the backend's options
  EXPECT_NE(sh("validate --help").out.find("--profile-from"), std::string::npos);
  EXPECT_EQ(sh("replay /nonexistent/plan.json").code, 2);
  EXPECT_EQ(sh("profile").code, 2);  // missing PLAN, reported by the backend's parser
  // Whether a file holds `needle`, read in chunks (the binaries are ~100 MB).
  auto contains = [](const std::filesystem::path& p, const std::string& needle) {
    std::ifstream f(p, std::ios::binary);
    std::string window, chunk(1 << 20, '\0');
    while (f.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || f.gcount() > 0) {
      window.append(chunk.data(), static_cast<size_t>(f.gcount()));
      if (window.find(needle) != std::string::npos) return true;
      window.erase(0, window.size() - std::min(window.size(), needle.size() - 1));
    }
    return false;
  };
  EXPECT_FALSE(contains(self, "libtorch_cpu.so")) << "stretto links LibTorch";
  EXPECT_TRUE(contains(self.parent_path() / "stretto-backend", "libtorch_cpu.so"))
      << "the check above cannot fail";
}
