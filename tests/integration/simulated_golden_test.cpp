// Golden simulated results: every example plan (examples/*.json and examples/builders/*.json)
// compiles and simulates to the results in tests/data/simulated/: the step time, and per
// device the busy, bubble, exposed and total communication times (integer ns, deterministic),
// the peak of allocated memory (bytes) and its time, and the bytes the CUDA caching allocator
// reserves (sim/caching_allocator.h). Compared exactly: a change to the cost
// model, the compiler or the engine that moves any prediction of an example shows here as a
// line diff. After a deliberate change, rerun with STRETTO_UPDATE_GOLDEN=accept (tests/golden.h)
// and review the diff.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../golden.h"
#include "stretto/sim/session.h"

namespace fs = std::filesystem;
using namespace stretto;

namespace {

// The results of simulating `path` (unfolded), as text.
std::string simulated_text(const fs::path& path) {
  auto s = sim::Session::open(path.string());
  if (!s) return "error: " + render_all(s.error());
  auto r = s->simulate();
  if (!r) return "error: " + render_all(r.error());
  std::string out = fmt::format("step_time_ns {}\nbubble_ratio {:.6f}\nexposed_comm_ns {}\n",
                                r->step_time, r->bubble_ratio, r->exposed_comm);
  out +=
      "device busy_ns bubble_ns exposed_comm_ns comm_ns peak_memory_bytes peak_time_ns "
      "peak_reserved_bytes\n";
  for (const auto& d : r->devices)
    out += fmt::format("{} {} {} {} {} {} {} {}{}\n", d.id, d.busy, d.bubble, d.exposed_comm,
                       d.comm, d.peak_memory, d.peak_time, d.peak_reserved,
                       d.over_capacity ? " over_capacity" : "");
  return out;
}

void check_examples(const fs::path& dir, const fs::path& expected_dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir;
  fs::create_directories(expected_dir);
  for (const auto& p : files) {
    SCOPED_TRACE(p.string());
    const std::string text = simulated_text(p);
    EXPECT_EQ(text.rfind("error: ", 0), std::string::npos) << text;
    stretto::testing::check_golden(expected_dir / (p.stem().string() + ".expected"), text);
  }
}

}  // namespace

TEST(SimulatedGolden, EveryExamplePlan) {
  check_examples(STRETTO_EXAMPLES, fs::path(STRETTO_TEST_DATA) / "simulated" / "examples");
}

TEST(SimulatedGolden, EveryBuilderExample) {
  check_examples(fs::path(STRETTO_EXAMPLES) / "builders",
                 fs::path(STRETTO_TEST_DATA) / "simulated" / "builders");
}
