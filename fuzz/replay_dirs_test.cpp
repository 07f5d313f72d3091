// Replays checked-in fuzz corpora (fuzz/corpus*, merged from libFuzzer runs) and seed files
// through a fuzz entry point with the regular build: a cheap guard that inputs which once
// crashed (or found new paths) still don't. One executable per fuzz target (tests/cli/
// tests.cmake): STRETTO_REPLAY_DIRS is a '|'-separated list of folders, STRETTO_REPLAY_MIN the
// fewest inputs expected.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

TEST(FuzzReplay, CorpusRunsCleanly) {
  namespace fs = std::filesystem;
  size_t n = 0;
  std::stringstream dirs(STRETTO_REPLAY_DIRS);
  std::string dir;
  while (std::getline(dirs, dir, '|')) {
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      std::ifstream f(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      const std::string s = ss.str();
      EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0);
      ++n;
    }
  }
  EXPECT_GE(n, static_cast<size_t>(STRETTO_REPLAY_MIN));
}
